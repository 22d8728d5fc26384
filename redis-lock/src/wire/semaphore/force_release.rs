//! Breaking every permit: the `FORCE_RELEASE` script.

use std::sync::LazyLock;

use redis::Script;

use super::super::request::Request;
use super::super::{Broken, LockKeys, decode_broken};

/// Operator's release of every permit: the permits go, registered waiters are woken to look
/// again (as `SET_LIMIT` does), the limit stays.
/// KEYS: permits, holders, signal, waiters, queue, limit, grants. Returns `{-2}` for another
/// type,
/// else `{host, pid}` of the permit that expires first (`{}` when none was held).
static FORCE_RELEASE: LazyLock<Script> = LazyLock::new(|| {
    Script::new(concat!(
        clock!(),
        prune!(),
        permits_lua!(),
        "if wrong(KEYS[1], 'zset') or wrong(KEYS[2], 'hash') or wrong(KEYS[3], 'list') then return {-2} end\n",
        "local p = redis.call('ZRANGEBYSCORE', KEYS[1], '(' .. clock(), '+inf', 'LIMIT', 0, 1)\n",
        "local out = {}\n",
        "if p[1] then\n",
        "  local info = redis.call('HGET', KEYS[2], p[1]) or ''\n",
        "  local host, pid = string.match(info, '^[^\\n]*\\n([^\\n]*)\\n([^\\n]*)\\n')\n",
        "  out = {host or '', pid or ''}\n",
        "end\n",
        "redis.call('DEL', KEYS[1], KEYS[2], KEYS[7])\n",
        "if redis.call('EXISTS', KEYS[4]) == 1 then\n",
        "  prune(KEYS[4], KEYS[5])\n",
        "  local limit = tonumber(redis.pcall('GET', KEYS[6])) or 0\n",
        "  local n = math.min(limit, redis.call('ZCARD', KEYS[4]))\n",
        "  for _ = 1, n do redis.call('RPUSH', KEYS[3], ",
        recheck!(),
        ") end\n",
        "  if n > 0 then redis.call('PEXPIRE', KEYS[3], ",
        handoff_grace_ms!(),
        ") end\n",
        "end\n",
        "return out\n",
    ))
});

/// `FORCE_RELEASE`: drop every permit; the holder of the first one, `None` when none was held.
pub(crate) fn force_release(keys: &LockKeys) -> Request<Broken> {
    let (holders, limit, grants) = (keys.holders(), keys.limit(), keys.grants());
    let k = keys.clone();
    Request::script(
        &FORCE_RELEASE,
        &[
            keys.lock.as_bytes(),
            holders.as_bytes(),
            keys.signal.as_bytes(),
            keys.waiters.as_bytes(),
            keys.queue.as_bytes(),
            limit.as_bytes(),
            grants.as_bytes(),
        ],
        &[],
        move |v: Vec<String>| {
            // No code names a key of another type but the permits'.
            decode_broken(&k, &v, |_| None)
        },
    )
}
