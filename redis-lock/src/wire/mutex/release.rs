//! The holder giving its lock up: the `RELEASE` script (hand the lock to a waiter, keep it
//! ownerless for a minimum hold or cool-down, or delete it), or `DELIFEQ` for a string lock
//! we wrote on a server that has it.

use std::sync::LazyLock;

use redis::Script;

use super::super::request::Request;
use super::super::resp::Decimal;
use super::super::{Form, Release, ReleaseArgs, decode_release, ms};

/// Release: compare the token, then hand the lock over to a waiter (see `hand_over`) or
/// delete it. Inside the minimum hold, or with a cool-down, give up ownership but keep the key
/// until the later of `hold_until` and now + cool-down (recorded as `cool_until`); the waiter
/// next in line is woken to look again (a `recheck!` element on its wake-up list), so it
/// blocks until the lock frees instead of until the former holder's TTL would have run out.
/// The lock may be a hash or a string (taken natively, `token \n info`); a string lock that
/// takes the full path becomes a hash (kept) or a grant.
/// KEYS: lock alone (on a cluster also fence, signal, waiters, queue, unread: see `release`);
/// the fence, wake-up list, registry and queue are named from it with the suffixes of
/// `keys.rs` (same slot, so allowed on a cluster). ARGV: token, grant token for
/// `hand_over`, the form the holder expects (`s`: a string, taken natively; `h`: a hash),
/// then, only when one of them is not the default: `1` to give the lock up at once whatever
/// the minimum hold and cool-down (an acquisition undone because replicas did not
/// acknowledge it was never held) or `0`, the releaser's own waiter id to forget (a lock
/// taken by popping a grant leaves its registration behind) or "", cool-down in ms (`0`:
/// none). Each key and argument costs Redis time on every release (~0.12 us here).
/// Fast path (first once the token matched): no minimum hold, no cool-down, nothing to
/// forget, and neither a registered waiter nor a pending wake-up: `DEL`. One `EXISTS` naming
/// the waiters once, the wake-up list twice and the queue four times says which of the three
/// exist; the full path uses that instead of looking again (the list's `TYPE` only when it
/// exists, `hand_over` skips what is absent). A wake-up list of another type sends the
/// release to the full path, which reports it.
/// Returns `1` released, `2` released but kept until the minimum hold or cool-down has passed, `0` late
/// (the key was already gone), `-1` lost (another owner, or another type, is there now), `-4`
/// the signal key holds another type (nothing was changed).
static RELEASE: LazyLock<Script> = LazyLock::new(|| {
    Script::new(concat!(
        "local lock = KEYS[1]\n",
        "local token = ARGV[1]\n",
        "local registration = ARGV[5] or ''\n",
        // The lock is a string `token \n info` when it was taken natively, else a hash. The
        // holder says which it most likely is (`s` or `h`) and that form is read first; the
        // other form answers that read with a type error and is read the other way.
        "local h = nil\n",
        "local str = false\n",
        "local cool = tonumber(ARGV[6]) or 0\n",
        "if ARGV[3] == 's' then\n",
        "  local s = redis.pcall('GET', lock)\n",
        "  if s == false then return 0 end\n",
        "  if type(s) == 'string' then\n",
        "    if string.sub(s, 1, #token + 1) ~= token .. '\\n' then return -1 end\n",
        // The string fast path: nobody registered while it was held (a registration makes
        // the lock a hash, see `ACQUIRE`), no minimum hold (a string lock never has one),
        // no cool-down: delete. Nothing else is read.
        "    if cool == 0 then\n",
        "      redis.call('DEL', lock)\n",
        "      return 1\n",
        "    end\n",
        "    h = {token, false}\n",
        "    str = true\n",
        "  end\n",
        "end\n",
        "if not h then\n",
        "  h = redis.pcall('HMGET', lock, 'token', 'hold_until')\n",
        "  if h['err'] then\n",
        "    local s = redis.pcall('GET', lock)\n",
        "    if type(s) ~= 'string' or string.sub(s, 1, #token + 1) ~= token .. '\\n' then return -1 end\n",
        "    h = {token, false}\n",
        "    str = true\n",
        "  elseif h[1] ~= token then\n",
        "    if h[1] == false and redis.call('EXISTS', lock) == 0 then return 0 end\n",
        "    return -1\n",
        "  end\n",
        "end\n",
        "local waiters = lock .. '",
        waiters_suffix!(),
        "'\n",
        "local signal = lock .. '",
        signal_suffix!(),
        "'\n",
        "local queue = lock .. '",
        queue_suffix!(),
        "'\n",
        // Waiters 1, wake-up list 2, queue 4: which of them exist, in one command.
        "local m = redis.call('EXISTS', waiters, signal, signal, queue, queue, queue, queue)\n",
        // Fast path: no minimum hold, no cool-down, no leftover registration, and nobody
        // registered nor a wake-up pending: delete, before any function is defined.
        "if m % 4 == 0 and not h[2] and registration == '' and cool == 0 then\n",
        "  redis.call('DEL', lock)\n",
        "  return 1\n",
        "end\n",
        clock!(),
        prune!(),
        hand_over!(),
        "local fence = lock .. '",
        fence_suffix!(),
        "'\n",
        // `clean`: the hash holds no field but `token`, `fence`, `info`, `handoff` (a lock we
        // hold never has `cool_until`), so a grant may overwrite it in place.
        "local known = {waiters = m % 2 == 1, signal = m % 4 >= 2, queue = m >= 4, clean = not h[2] and not str}\n",
        "if known.signal and redis.call('TYPE', signal)['ok'] ~= 'list' then return -4 end\n",
        "if registration ~= '' and known.waiters then redis.call('ZREM', waiters, registration) end\n",
        "if ARGV[4] ~= '1' and (h[2] or cool > 0) then\n",
        "  local now = clock()\n",
        "  local free_at = tonumber(h[2]) or 0\n",
        "  if cool > 0 then free_at = math.max(free_at, now + cool) end\n",
        "  if free_at > now then\n",
        // Waiters blocked on the holder's TTL would sleep past the new, shorter one: wake the
        // one next in line to look again (it re-blocks until the lock frees). Resolved before
        // anything is written (see `not_local`).
        "    local wake = nil\n",
        "    if redis.call('EXISTS', waiters) == 1 then\n",
        "      prune(waiters, queue)\n",
        "      local head = redis.call('ZRANGE', queue, 0, 0)[1]\n",
        "      wake = signal\n",
        "      if head then\n",
        "        wake = signal .. ':' .. head\n",
        "        if type(redis.pcall('EXISTS', wake)) == 'table' then error(",
        not_local!(),
        ") end\n",
        "      end\n",
        "    end\n",
        "    if wake then\n",
        "      redis.call('RPUSH', wake, ",
        recheck!(),
        ")\n",
        "      redis.call('PEXPIRE', wake, ",
        handoff_grace_ms!(),
        ")\n",
        "    end\n",
        // A string lock becomes a hash kept without owner.
        "    if str then redis.call('DEL', lock) end\n",
        "    if cool > 0 then\n",
        "      redis.call('HSET', lock, 'token', '', 'cool_until', now + cool)\n",
        "    else\n",
        "      redis.call('HSET', lock, 'token', '')\n",
        "    end\n",
        "    redis.call('PEXPIRE', lock, free_at - now)\n",
        "    return 2\n",
        "  end\n",
        "end\n",
        "if not hand_over(lock, fence, signal, waiters, queue, ARGV[2], known) then redis.call('DEL', lock) end\n",
        "return 1\n",
    ))
});

/// The native release of `r`, where it may take one: the usual release (or an undo) of a
/// string lock we wrote, one `DELIFEQ` (on a server that has it: the deployment asks only
/// those). A string lock has no minimum hold and nobody waiting for it (a registration makes
/// it a hash), so deleting it is all the script would do. Anything else (gone, another value,
/// a hash now, no `DELIFEQ`) goes to the script, which tells which; so does a release with a
/// cool-down or a registration of its own to forget.
pub(crate) fn native_release(r: &ReleaseArgs<'_>) -> Option<Request<Option<bool>>> {
    match r.form {
        Form::Written(value) if r.registration.is_empty() && r.cooldown.is_zero() => {
            Some(super::super::commands::delete_if_equal(&r.keys.lock, value))
        }
        _ => None,
    }
}

/// `RELEASE`: compare the token, then hand the lock to a waiter under `r.grant` or delete it
/// (or keep it ownerless for the rest of the minimum hold, or for `r.cooldown`; neither when
/// `r.undo`).
pub(crate) fn release(r: &ReleaseArgs<'_>) -> Request<Release> {
    let ReleaseArgs {
        keys,
        token,
        grant,
        registration,
        cooldown,
        undo,
        form,
        routed,
    } = *r;
    let all_keys = [
        &keys.lock,
        &keys.fence,
        &keys.signal,
        &keys.waiters,
        &keys.queue,
    ]
    .map(|k| k.as_bytes());
    // A connection that routes by key (a cluster's) takes no pipeline. There the other keys
    // are declared too (the script does not read them from `KEYS`): while the lock's slot
    // migrates with some of them moved, Redis then answers `TRYAGAIN` before the script
    // runs, instead of the script failing on a key that is not on the node.
    let names = if routed {
        &all_keys[..]
    } else {
        &all_keys[..1]
    };
    let cool = Decimal::new(ms(cooldown));
    let all_args: [&[u8]; 6] = [
        token.as_bytes(),
        grant.as_bytes(),
        if form.is_string() { b"s" } else { b"h" },
        if undo { b"1" } else { b"0" },
        registration.as_bytes(),
        cool.as_bytes(),
    ];
    // The usual release sends none of the last three: fewer arguments cost Redis less.
    let args = if undo || !registration.is_empty() || !cooldown.is_zero() {
        &all_args[..]
    } else {
        &all_args[..3]
    };
    let signal = keys.signal.clone();
    Request::script(&RELEASE, names, args, move |r: i64| {
        decode_release(r, |code| wrong_key(&signal, code))
    })
}

/// The key a release's negative code names: `-4` the wake-up list (`signal`).
fn wrong_key(signal: &str, code: i64) -> Option<String> {
    (code == -4).then(|| signal.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::Error;
    use crate::wire::LockKeys;

    #[test]
    fn release_codes() {
        let k = LockKeys::new("lock:", "k").unwrap();
        let decode = |code| decode_release(code, |code| wrong_key(&k.signal, code));
        assert_eq!(decode(1).unwrap(), Release::Released);
        assert_eq!(decode(2).unwrap(), Release::Kept);
        assert_eq!(decode(0).unwrap(), Release::Late);
        assert_eq!(decode(-1).unwrap(), Release::Lost);
        match decode(-4) {
            Err(Error::WrongType { redis_key }) => assert_eq!(redis_key, k.signal),
            other => panic!("{other:?}"),
        }
    }
}
