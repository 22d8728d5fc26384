//! Extending one permit: the `RENEW` script.

use std::sync::LazyLock;
use std::time::Duration;

use redis::Script;

use super::super::request::Request;
use super::super::resp::Decimal;
use super::super::{LockKeys, Renewal, decode_renew, ms};

/// Renew one permit: extend its expiry, never touching another.
/// KEYS: permits, holders. ARGV: token, ttl_ms.
/// Returns `1` renewed, `0` the permit is gone (expired, or broken), `-1` the key holds
/// another type.
static RENEW: LazyLock<Script> = LazyLock::new(|| {
    Script::new(concat!(
        clock!(),
        prune!(),
        permits_lua!(),
        "if wrong(KEYS[1], 'zset') or wrong(KEYS[2], 'hash') then return -1 end\n",
        "if not live(KEYS[1], ARGV[1]) then\n",
        "  redis.call('ZREM', KEYS[1], ARGV[1])\n",
        "  redis.call('HDEL', KEYS[2], ARGV[1])\n",
        "  return 0\n",
        "end\n",
        "local ttl = tonumber(ARGV[2])\n",
        "redis.call('ZADD', KEYS[1], 'XX', clock() + ttl, ARGV[1])\n",
        "raise_ttl(KEYS[1], KEYS[2], ttl)\n",
        "return 1\n",
    ))
});

/// `RENEW`: extend one permit.
pub(crate) fn renew(keys: &LockKeys, token: &str, ttl: Duration) -> Request<Renewal> {
    let (holders, ttl) = (keys.holders(), Decimal::new(ms(ttl)));
    Request::script(
        &RENEW,
        &[keys.lock.as_bytes(), holders.as_bytes()],
        &[token.as_bytes(), ttl.as_bytes()],
        |r: i64| Ok(decode_renew(r)),
    )
}
