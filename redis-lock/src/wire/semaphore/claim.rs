//! A waiter making a popped grant (a permit) its own: the `CLAIM` script.

use std::sync::LazyLock;

use redis::Script;

use super::super::request::Request;
use super::super::resp::Decimal;
use super::super::{Claim, ClaimArgs, decode_claim, ms};

/// A waiter makes a granted permit it popped its own: holder information and the full TTL.
/// KEYS: permits, waiters, holders, grants. ARGV: grant token, ttl_ms, holder, meta, waiter
/// id to forget (or "").
/// Returns the fencing token, `-2` when the grant expired (or was broken), `-1` when the
/// permits key holds another type.
static CLAIM: LazyLock<Script> = LazyLock::new(|| {
    Script::new(concat!(
        clock!(),
        prune!(),
        permits_lua!(),
        "if wrong(KEYS[1], 'zset') or wrong(KEYS[3], 'hash') then return -1 end\n",
        "if not live(KEYS[1], ARGV[1]) then\n",
        "  redis.call('ZREM', KEYS[1], ARGV[1])\n",
        "  redis.call('HDEL', KEYS[3], ARGV[1])\n",
        "  return -2\n",
        "end\n",
        "local f = fence_of(KEYS[3], ARGV[1])\n",
        "local now = clock()\n",
        "local ttl = tonumber(ARGV[2])\n",
        "redis.call('ZADD', KEYS[1], now + ttl, ARGV[1])\n",
        "redis.call('HSET', KEYS[3], ARGV[1], ",
        fence_text!("f"),
        " .. '\\n' .. ARGV[3] .. now .. '\\n' .. ARGV[4])\n",
        "raise_ttl(KEYS[1], KEYS[3], ttl)\n",
        "if ARGV[5] ~= '' then redis.call('ZREM', KEYS[2], ARGV[5]) end\n",
        "redis.call('ZREM', KEYS[4], ARGV[1])\n",
        "return f\n",
    ))
});

/// `CLAIM`: make a popped grant ours and forget the registration `c.registration` (if not
/// empty). A permit has no minimum hold (refused before anything is sent), so `c.min_hold`
/// goes unused.
pub(crate) fn claim(c: &ClaimArgs<'_>) -> Request<Claim> {
    let keys = c.keys;
    let (holders, grants) = (keys.holders(), keys.grants());
    let ttl = Decimal::new(ms(c.ttl));
    Request::script(
        &CLAIM,
        &[
            keys.lock.as_bytes(),
            keys.waiters.as_bytes(),
            holders.as_bytes(),
            grants.as_bytes(),
        ],
        &[
            c.grant.as_bytes(),
            ttl.as_bytes(),
            c.holder.as_bytes(),
            c.meta.as_bytes(),
            c.registration.as_bytes(),
        ],
        |r: i64| Ok(decode_claim(r)),
    )
}
