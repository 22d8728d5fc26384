//! Changing a semaphore's limit: the `SET_LIMIT` script.

use std::sync::LazyLock;
use std::time::Duration;

use redis::Script;

use super::super::request::Request;
use super::super::resp::Decimal;
use super::super::{LockKeys, ms};
use crate::error::Error;

/// Change the limit. Held permits are never revoked: with the limit lowered below the permits
/// in use, new acquisitions wait until fewer than the new limit are held. With room made,
/// up to that many registered waiters are woken to look again (a `recheck!` element each: the
/// fair queue's first on their own lists, the rest on the shared list).
/// KEYS: limit, permits, holders, signal, waiters, queue. ARGV: the new limit, how long to keep
/// it at least (ms; it lives as long as the permits held, like every key of the name).
/// Returns the previous limit (`0`: none was stored), `-2` when a key holds another type.
static SET_LIMIT: LazyLock<Script> = LazyLock::new(|| {
    Script::new(concat!(
        clock!(),
        prune!(),
        permits_lua!(),
        "if wrong(KEYS[1], 'string') or wrong(KEYS[2], 'zset') or wrong(KEYS[3], 'hash') or wrong(KEYS[4], 'list') then return -2 end\n",
        "local stored = redis.call('GET', KEYS[1])\n",
        "if stored and not tonumber(stored) then return -2 end\n",
        "local limit = tonumber(ARGV[1])\n",
        // Kept while permits are held, and for at least `keep` ms (every key of a name expires).
        "redis.call('SET', KEYS[1], limit, 'PX', math.max(tonumber(ARGV[2]), redis.call('PTTL', KEYS[2])))\n",
        "expire_permits(KEYS[2], KEYS[3])\n",
        "local free = limit - redis.call('ZCARD', KEYS[2])\n",
        "if free > 0 and redis.call('EXISTS', KEYS[5]) == 1 then\n",
        "  prune(KEYS[5], KEYS[6])\n",
        "  local n = math.min(free, redis.call('ZCARD', KEYS[5]))\n",
        "  local heads = {}\n",
        "  if n > 0 then heads = redis.call('ZRANGE', KEYS[6], 0, n - 1) end\n",
        "  for _, h in ipairs(heads) do\n",
        "    local wake = KEYS[4] .. ':' .. h\n",
        "    if type(redis.pcall('EXISTS', wake)) == 'table' then return ",
        not_local!(),
        " end\n",
        "  end\n",
        "  for _, h in ipairs(heads) do\n",
        "    local wake = KEYS[4] .. ':' .. h\n",
        "    redis.call('RPUSH', wake, ",
        recheck!(),
        ")\n",
        "    redis.call('PEXPIRE', wake, ",
        handoff_grace_ms!(),
        ")\n",
        "  end\n",
        "  for _ = 1, n - #heads do redis.call('RPUSH', KEYS[4], ",
        recheck!(),
        ") end\n",
        "  if n > #heads then redis.call('PEXPIRE', KEYS[4], ",
        handoff_grace_ms!(),
        ") end\n",
        "end\n",
        "return tonumber(stored) or 0\n",
    ))
});

/// `SET_LIMIT`: store a new limit, waking waiters that now fit; returns the previous limit
/// (`None`: none was stored).
pub(crate) fn set_limit(keys: &LockKeys, limit: u32, keep: Duration) -> Request<Option<u32>> {
    let (limit_key, holders) = (keys.limit(), keys.holders());
    let (limit, keep) = (Decimal::new(u64::from(limit)), Decimal::new(ms(keep)));
    let k = keys.clone();
    Request::script(
        &SET_LIMIT,
        &[
            limit_key.as_bytes(),
            keys.lock.as_bytes(),
            holders.as_bytes(),
            keys.signal.as_bytes(),
            keys.waiters.as_bytes(),
            keys.queue.as_bytes(),
        ],
        &[limit.as_bytes(), keep.as_bytes()],
        move |r: i64| match r {
            -2 => Err(Error::WrongType {
                redis_key: k.lock.clone(),
            }),
            0 => Ok(None),
            old => Ok(u32::try_from(old).ok()),
        },
    )
}
