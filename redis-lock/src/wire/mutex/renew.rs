//! The holder extending its lock: the `RENEW` script.

use std::sync::LazyLock;
use std::time::Duration;

use redis::Script;

use super::super::request::Request;
use super::super::resp::Decimal;
use super::super::{LockKeys, Renewal, decode_renew, ms};

/// Renew (compare token, then extend); the lock may be a hash or a string (`owner_of`).
/// KEYS: lock. ARGV: token, ttl_ms.
/// Returns `1` renewed, `0` the key is gone, `-1` another owner (or another type) is there.
static RENEW: LazyLock<Script> = LazyLock::new(|| {
    Script::new(concat!(
        owner_of!(),
        "local t = owner_of(KEYS[1])\n",
        "if t == ARGV[1] then\n",
        "  redis.call('PEXPIRE', KEYS[1], ARGV[2])\n",
        // The counter stands for a string lock's fence: it lives as long as the lock. Named
        // from the lock key (same slot); `pcall`: while the slot migrates it may be elsewhere.
        "  redis.pcall('PEXPIRE', KEYS[1] .. '",
        fence_suffix!(),
        "', ARGV[2], 'GT')\n",
        "  return 1\n",
        "end\n",
        "if t == false then return 0 end\n",
        "return -1\n",
    ))
});

/// `RENEW`: compare the token, then set the TTL.
pub(crate) fn renew(keys: &LockKeys, token: &str, ttl: Duration) -> Request<Renewal> {
    let ttl = Decimal::new(ms(ttl));
    Request::script(
        &RENEW,
        &[keys.lock.as_bytes()],
        &[token.as_bytes(), ttl.as_bytes()],
        |r: i64| Ok(decode_renew(r)),
    )
}
