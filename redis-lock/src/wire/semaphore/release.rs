//! Giving one permit back, or granting it to a waiter: the `RELEASE` script.

use std::sync::LazyLock;

use redis::Script;

use super::super::request::Request;
use super::super::{LockKeys, Release, ReleaseArgs, decode_release};

/// Release one permit, and grant the freed permit to a waiter if there is room under the
/// limit (a lowered limit may leave none).
/// KEYS: permits, fence, signal, waiters, queue, holders, limit, grants. ARGV: token, grant
/// token, the releaser's own waiter id to forget (or "").
/// Returns `1` released, `0` late (the permit had expired or was broken), `-1` the permits
/// key holds another type, `-4` the signal key does (nothing was changed).
///
/// **Fast path** (before any function is defined): the permit is there, the releaser has no
/// registration to forget and no waiter is registered (one `EXISTS`): `HDEL`, `ZREM`, and
/// `TIME` to tell a late release. With nobody registered the full path would grant nothing
/// either; no expired-permit prune (the next acquisition that finds the set full does it);
/// no `ZREM` of the grants key: only a permit taken from a shared grant is listed there,
/// and its holder releases with its registration to forget, so on the full path.
static RELEASE: LazyLock<Script> = LazyLock::new(|| {
    Script::new(concat!(
        "local s = redis.pcall('ZSCORE', KEYS[1], ARGV[1])\n",
        "if type(s) == 'table' then return -1 end\n",
        "if not s then return 0 end\n",
        "local waiting = redis.call('EXISTS', KEYS[4]) == 1\n",
        // Fast path, before any function is defined: see the doc comment.
        "if ARGV[3] == '' and not waiting then\n",
        "  if type(redis.pcall('HDEL', KEYS[6], ARGV[1])) == 'table' then return -1 end\n",
        "  redis.call('ZREM', KEYS[1], ARGV[1])\n",
        "  local t = redis.call('TIME')\n",
        "  if tonumber(s) <= tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000) then return 0 end\n",
        "  return 1\n",
        "end\n",
        clock!(),
        prune!(),
        permits_lua!(),
        // Wake-up list 1, queue 2: which of them exist, in one command; the list's type is
        // checked only when it exists, the queue's head only read when it exists.
        "local known = nil\n",
        "if waiting then\n",
        "  local m = redis.call('EXISTS', KEYS[3], KEYS[5], KEYS[5])\n",
        "  known = {queue = m >= 2}\n",
        "  if m % 2 == 1 and wrong(KEYS[3], 'list') then return -4 end\n",
        "end\n",
        // The holder's entry goes first: a holders key of another type fails here, unwritten.
        "if type(redis.pcall('HDEL', KEYS[6], ARGV[1])) == 'table' then return -1 end\n",
        "redis.call('ZREM', KEYS[1], ARGV[1])\n",
        // Only a permit popped from a shared grant is listed in the grants key, and its holder
        // has a registration to forget.
        "if ARGV[3] ~= '' then\n",
        "  redis.call('ZREM', KEYS[4], ARGV[3])\n",
        "  redis.call('ZREM', KEYS[8], ARGV[1])\n",
        "end\n",
        // With waiters registered, grant the freed permit if there is room under the limit;
        // expired permits only matter when the set looks full.
        "if waiting then\n",
        "  local limit = tonumber(redis.pcall('GET', KEYS[7])) or 0\n",
        "  local held = redis.call('ZCARD', KEYS[1])\n",
        "  if held >= limit then\n",
        "    expire_permits(KEYS[1], KEYS[6])\n",
        "    held = redis.call('ZCARD', KEYS[1])\n",
        "  end\n",
        "  if held < limit then\n",
        "    hand_permit(KEYS[1], KEYS[6], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[8], ARGV[2], known)\n",
        "  end\n",
        "end\n",
        "if tonumber(s) <= clock() then return 0 end\n",
        "return 1\n",
    ))
});

/// `RELEASE`: give one permit back, granting it to a waiter under `r.grant` if there is room.
/// A permit is given back at once: no minimum hold or cool-down applies (both are refused
/// before anything is sent), so an undo is an ordinary release.
pub(crate) fn release(r: &ReleaseArgs<'_>) -> Request<Release> {
    let ReleaseArgs {
        keys,
        token,
        grant,
        registration,
        ..
    } = *r;
    let (holders, limit, grants) = (keys.holders(), keys.limit(), keys.grants());
    let k = keys.clone();
    Request::script(
        &RELEASE,
        &[
            keys.lock.as_bytes(),
            keys.fence.as_bytes(),
            keys.signal.as_bytes(),
            keys.waiters.as_bytes(),
            keys.queue.as_bytes(),
            holders.as_bytes(),
            limit.as_bytes(),
            grants.as_bytes(),
        ],
        &[token.as_bytes(), grant.as_bytes(), registration.as_bytes()],
        move |code: i64| decode_release(code, |code| wrong_key(&k, code)),
    )
}

/// The key a release's negative code names: `-4` the wake-up list. (It never answers `2`,
/// kept: a permit is given back at once.)
fn wrong_key(keys: &LockKeys, code: i64) -> Option<String> {
    (code == -4).then(|| keys.signal.clone())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::Claim;
    use crate::wire::decode_claim;

    #[test]
    fn claim_and_release_codes() {
        assert_eq!(decode_claim(4), Claim::Claimed { fence: 4 });
        assert_eq!(decode_claim(-2), Claim::Gone);
        assert_eq!(decode_claim(-1), Claim::NotOurs);
        let k = LockKeys::new("lock:", "s").unwrap();
        let decode = |code| decode_release(code, |code| wrong_key(&k, code));
        assert_eq!(decode(1).unwrap(), Release::Released);
        assert_eq!(decode(0).unwrap(), Release::Late);
        assert_eq!(decode(-1).unwrap(), Release::Lost);
        assert!(decode(-4).is_err());
    }
}
