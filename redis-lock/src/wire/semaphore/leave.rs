//! A waiter giving up: the `LEAVE` script.

use std::sync::LazyLock;

use redis::Script;

use super::super::LockKeys;
use super::super::request::Request;

/// A waiter gives up: forget it; a grant pending for it alone goes to the next waiter (or is
/// freed); shared grants that no registered waiter is left to take are freed.
/// KEYS: permits, fence, signal, waiters, queue, own wake-up list, holders, limit, grants.
/// ARGV: waiter id, grant token (for passing on). Returns `1`.
static LEAVE: LazyLock<Script> = LazyLock::new(|| {
    Script::new(concat!(
        clock!(),
        prune!(),
        permits_lua!(),
        "redis.call('ZREM', KEYS[4], ARGV[1])\n",
        "redis.call('ZREM', KEYS[5], ARGV[1])\n",
        "if wrong(KEYS[1], 'zset') or wrong(KEYS[7], 'hash') or wrong(KEYS[3], 'list') or wrong(KEYS[6], 'list') then return 1 end\n",
        "local mine = redis.call('LRANGE', KEYS[6], 0, -1)\n",
        "redis.call('DEL', KEYS[6])\n",
        "local freed = false\n",
        "for _, e in ipairs(mine) do\n",
        "  local g = string.match(e, '^(%S+) ')\n",
        "  if g and redis.call('ZREM', KEYS[1], g) == 1 then\n",
        "    redis.call('HDEL', KEYS[7], g)\n",
        "    freed = true\n",
        "  end\n",
        "end\n",
        "if freed then\n",
        "  expire_permits(KEYS[1], KEYS[7])\n",
        "  local limit = tonumber(redis.pcall('GET', KEYS[8])) or 0\n",
        "  if redis.call('ZCARD', KEYS[1]) < limit and redis.call('EXISTS', KEYS[4]) == 1 then\n",
        "    hand_permit(KEYS[1], KEYS[7], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[9], ARGV[2])\n",
        "  end\n",
        "elseif redis.call('EXISTS', KEYS[4]) == 0 then\n",
        "  for _, e in ipairs(redis.call('LRANGE', KEYS[3], 0, -1)) do\n",
        "    local g = string.match(e, '^(%S+) ')\n",
        "    if g then\n",
        "      redis.call('ZREM', KEYS[1], g)\n",
        "      redis.call('HDEL', KEYS[7], g)\n",
        "      redis.call('ZREM', KEYS[9], g)\n",
        "    end\n",
        "  end\n",
        "  redis.call('DEL', KEYS[3])\n",
        "end\n",
        "return 1\n",
    ))
});

/// `LEAVE`: a waiter gives up; a grant made for it is passed on under `grant`.
pub(crate) fn leave(keys: &LockKeys, waiter: &str, grant: &str) -> Request<()> {
    let (wake, holders, limit, grants) = (
        keys.wake(waiter),
        keys.holders(),
        keys.limit(),
        keys.grants(),
    );
    Request::script(
        &LEAVE,
        &[
            keys.lock.as_bytes(),
            keys.fence.as_bytes(),
            keys.signal.as_bytes(),
            keys.waiters.as_bytes(),
            keys.queue.as_bytes(),
            wake.as_bytes(),
            holders.as_bytes(),
            limit.as_bytes(),
            grants.as_bytes(),
        ],
        &[waiter.as_bytes(), grant.as_bytes()],
        |_: i64| Ok(()),
    )
}
