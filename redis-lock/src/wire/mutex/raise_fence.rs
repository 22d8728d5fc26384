//! Redlock settling a fencing token across its majority: the `RAISE_FENCE` script.

use std::sync::LazyLock;

use redis::Script;

use super::super::LockKeys;
use super::super::request::Request;
use super::super::resp::Decimal;

/// Redlock: raise this server's fencing counter to the token the acquisition settled on (the
/// highest counter of the majority), and record that token with the lock, if the lock is
/// still ours here. See `deploy/quorum/` for why this keeps tokens monotonic.
/// KEYS: lock, fence. ARGV: token, fence. Returns `1` raised (or already there), `0` not ours.
static RAISE_FENCE: LazyLock<Script> = LazyLock::new(|| {
    Script::new(concat!(
        "if redis.call('TYPE', KEYS[1])['ok'] ~= 'hash' then return 0 end\n",
        "if redis.call('HGET', KEYS[1], 'token') ~= ARGV[1] then return 0 end\n",
        "if (tonumber(redis.call('GET', KEYS[2])) or 0) < tonumber(ARGV[2]) then\n",
        "  redis.call('SET', KEYS[2], ARGV[2], 'KEEPTTL')\n",
        "end\n",
        // The counter lives at least as long as the lock (every key of a name expires).
        "local p = redis.call('PTTL', KEYS[1])\n",
        "if p > 0 and redis.call('PTTL', KEYS[2]) < p then redis.call('PEXPIRE', KEYS[2], p) end\n",
        "redis.call('HSET', KEYS[1], 'fence', ARGV[2])\n",
        "return 1\n",
    ))
});

/// `RAISE_FENCE` (Redlock): `true` when raised (or already there), `false` when the lock is
/// not ours on this server.
pub(crate) fn raise_fence(keys: &LockKeys, token: &str, fence: u64) -> Request<bool> {
    let fence = Decimal::new(fence);
    Request::script(
        &RAISE_FENCE,
        &[keys.lock.as_bytes(), keys.fence.as_bytes()],
        &[token.as_bytes(), fence.as_bytes()],
        |r: i64| Ok(r == 1),
    )
}
