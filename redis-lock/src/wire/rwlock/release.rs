//! Giving up a read share or the write lock: the `RELEASE_READ` and `RELEASE_WRITE` scripts.

use std::sync::LazyLock;

use redis::Script;

use super::super::request::Request;
use super::super::resp::Decimal;
use super::super::{LockKeys, Release, ReleaseArgs, decode_release, ms};
use super::Side;

/// Give a read share up. When it was the last one (and no writer holds the lock), the lock is
/// deleted, or kept ownerless for the cool-down, and every waiter is woken.
/// KEYS: lock, readers, waiters, writers, signal, writers' wake-up list. ARGV: token, `1` to
/// ignore the cool-down
/// (an undone acquisition) or `0`, the releaser's leftover waiter id or "", cool-down ms.
/// Returns `1` released, `2` released and kept for the cool-down, `0` late (the share was
/// already gone), `-1` lost (a writer, or another type, is there now), `-4` the signal key
/// holds another type (nothing changed).
///
/// **Fast path** (first, before any function is defined): the last reader leaves a read lock
/// nobody waits for, with no registration to forget and no cool-down to keep (one `EXISTS` of
/// the waiters, the lock's `mode` and the share's field in one `HMGET`, the first two shares in
/// one `ZRANGE`: only this one). The lock and its shares go in one `DEL`, and `TIME` tells a
/// late release: what the full path does then, in five calls instead of nine. Otherwise what it
/// read is kept for the full path, which reads nothing twice.
static RELEASE_READ: LazyLock<Script> = LazyLock::new(|| {
    Script::new(concat!(
        // Fast path, before any function is defined: see the doc comment.
        "local waiting = redis.call('EXISTS', KEYS[3]) == 1\n",
        "local h = nil\n",
        "if not waiting then\n",
        "  h = redis.pcall('HMGET', KEYS[1], 'mode', 'r:' .. ARGV[1])\n",
        "  if h['err'] then return -1 end\n",
        "  if h[1] == 'read' and h[2] and ARGV[3] == '' and (ARGV[2] == '1' or ARGV[4] == '0') then\n",
        // A `pcall` error (another type) has no `[1]`: the full path reports it.
        "    local first = redis.pcall('ZRANGE', KEYS[2], 0, 1, 'WITHSCORES')\n",
        "    if first[1] == ARGV[1] and first[3] == nil then\n",
        "      redis.call('DEL', KEYS[1], KEYS[2])\n",
        "      local t = redis.call('TIME')\n",
        "      if tonumber(first[2]) > tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000) then return 1 end\n",
        "      return 0\n",
        "    end\n",
        "  end\n",
        "end\n",
        clock!(),
        prune!(),
        rw_drop_expired!(),
        rw_any_live!(),
        rw_lists_ok!(),
        rw_wake_all!(),
        rw_fit!(),
        // The wake-up lists matter (and are checked, before any write) only with waiters.
        "if waiting then\n",
        "  local lk = lists_ok(KEYS[5], KEYS[6])\n",
        "  if lk ~= 0 then return lk end\n",
        "  h = redis.pcall('HMGET', KEYS[1], 'mode', 'r:' .. ARGV[1])\n",
        "  if h['err'] then return -1 end\n",
        "end\n",
        "if h[1] == false and redis.call('EXISTS', KEYS[1]) == 1 then return -1 end\n",
        "local s = redis.pcall('ZSCORE', KEYS[2], ARGV[1])\n",
        "if type(s) == 'table' then return -1 end\n",
        "if ARGV[3] ~= '' then redis.call('ZREM', KEYS[3], ARGV[3]) end\n",
        "local live = h[2] and s and tonumber(s) > clock()\n",
        "if s then redis.call('ZREM', KEYS[2], ARGV[1]) end\n",
        "if h[2] then redis.call('HDEL', KEYS[1], 'r:' .. ARGV[1]) end\n",
        "if not h[2] then\n",
        "  if h[1] == 'write' then return -1 end\n",
        "  return 0\n",
        "end\n",
        "local code = 0\n",
        "if live then code = 1 end\n",
        "if h[1] ~= 'read' then return code end\n",
        "if any_live(KEYS[1], KEYS[2]) then\n",
        "  fit(KEYS[1], KEYS[2], 0)\n",
        "  return code\n",
        "end\n",
        "redis.call('DEL', KEYS[1], KEYS[2])\n",
        "local cool = tonumber(ARGV[4]) or 0\n",
        "if live and cool > 0 and ARGV[2] ~= '1' then\n",
        "  redis.call('HSET', KEYS[1], 'mode', 'cool', 'cool_until', clock() + cool)\n",
        "  redis.call('PEXPIRE', KEYS[1], cool)\n",
        "  code = 2\n",
        "end\n",
        "if waiting then wake_all(KEYS[5], KEYS[6], KEYS[3], KEYS[4]) end\n",
        "return code\n",
    ))
});

/// Give the write lock up: to the shares of a downgrade if there are any (the lock turns
/// read), else delete it or keep it ownerless for the cool-down; then wake every waiter.
/// KEYS, ARGV and replies as `RELEASE_READ`; `0` (late) only when the key is gone, `-1`
/// (lost) when anyone else holds it now.
static RELEASE_WRITE: LazyLock<Script> = LazyLock::new(|| {
    Script::new(concat!(
        clock!(),
        prune!(),
        rw_drop_expired!(),
        rw_any_live!(),
        rw_lists_ok!(),
        rw_wake_all!(),
        rw_fit!(),
        "local waiting = redis.call('EXISTS', KEYS[3]) == 1\n",
        "if waiting then\n",
        "  local lk = lists_ok(KEYS[5], KEYS[6])\n",
        "  if lk ~= 0 then return lk end\n",
        "end\n",
        "local h = redis.pcall('HMGET', KEYS[1], 'mode', 'wtoken')\n",
        "if h['err'] then return -1 end\n",
        "if h[2] ~= ARGV[1] then\n",
        "  if h[1] == false and redis.call('EXISTS', KEYS[1]) == 0 then return 0 end\n",
        "  return -1\n",
        "end\n",
        "if ARGV[3] ~= '' then redis.call('ZREM', KEYS[3], ARGV[3]) end\n",
        "local code = 1\n",
        "if any_live(KEYS[1], KEYS[2]) then\n",
        "  redis.call('HDEL', KEYS[1], 'wtoken', 'wfence', 'winfo')\n",
        "  redis.call('HSET', KEYS[1], 'mode', 'read')\n",
        "  fit(KEYS[1], KEYS[2], 0)\n",
        "else\n",
        "  redis.call('DEL', KEYS[1], KEYS[2])\n",
        "  local cool = tonumber(ARGV[4]) or 0\n",
        "  if cool > 0 and ARGV[2] ~= '1' then\n",
        "    redis.call('HSET', KEYS[1], 'mode', 'cool', 'cool_until', clock() + cool)\n",
        "    redis.call('PEXPIRE', KEYS[1], cool)\n",
        "    code = 2\n",
        "  end\n",
        "end\n",
        "if waiting then wake_all(KEYS[5], KEYS[6], KEYS[3], KEYS[4]) end\n",
        "return code\n",
    ))
});

/// `RELEASE_READ` / `RELEASE_WRITE`. `r.undo`: the acquisition is undone (no cool-down).
/// Nothing is granted through a read-write lock's wake-up lists, so `r.grant` goes unused.
pub(crate) fn release(side: Side, r: &ReleaseArgs<'_>) -> Request<Release> {
    let keys = r.keys;
    let script = match side {
        Side::Read => &*RELEASE_READ,
        Side::Write => &*RELEASE_WRITE,
    };
    let (readers, writers, writer_signal) = (keys.readers(), keys.writers(), keys.writer_signal());
    let cooldown = Decimal::new(ms(r.cooldown));
    let k = keys.clone();
    Request::script(
        script,
        &[
            keys.lock.as_bytes(),
            readers.as_bytes(),
            keys.waiters.as_bytes(),
            writers.as_bytes(),
            keys.signal.as_bytes(),
            writer_signal.as_bytes(),
        ],
        &[
            r.token.as_bytes(),
            if r.undo { b"1" } else { b"0" },
            r.registration.as_bytes(),
            cooldown.as_bytes(),
        ],
        move |code: i64| decode_release(code, |code| wrong_key(&k, code)),
    )
}

/// The key a release's negative code names: `-4` the readers' wake-up list, `-6` the
/// writers'.
fn wrong_key(keys: &LockKeys, code: i64) -> Option<String> {
    match code {
        -4 => Some(keys.signal.clone()),
        -6 => Some(keys.writer_signal()),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::Error;

    #[test]
    fn release_codes_name_the_wake_up_list_of_another_type() {
        let k = LockKeys::new("lock:", "k").unwrap();
        let decode = |code| decode_release(code, |code| wrong_key(&k, code));
        assert_eq!(decode(2).unwrap(), Release::Kept);
        assert_eq!(decode(-1).unwrap(), Release::Lost);
        for (code, key) in [(-4, k.signal.clone()), (-6, k.writer_signal())] {
            match decode(code) {
                Err(Error::WrongType { redis_key }) => assert_eq!(redis_key, key),
                other => panic!("{code}: {other:?}"),
            }
        }
    }
}
