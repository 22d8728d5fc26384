//! A waiter making a popped grant its own: the `CLAIM` script.

use std::sync::LazyLock;

use redis::Script;

use super::super::request::Request;
use super::super::resp::Decimal;
use super::super::{Claim, ClaimArgs, decode_claim, ms};

/// A waiter that popped a grant it cannot vouch for (it may have been made before the waiter
/// registered, or the waiter needs its holder information or minimum hold in place at once)
/// makes it its own: compare the grant token, then write the holder information and the full
/// TTL. Also the first renewal of a grant taken without this.
/// KEYS: lock, waiters. ARGV: token (the grant), ttl_ms, holder, meta, min_hold_ms, waiter id.
/// Returns the fencing token, `-2` when the key is gone (the grant expired), `-1` when another
/// token (or another type) is there.
static CLAIM: LazyLock<Script> = LazyLock::new(|| {
    Script::new(concat!(
        "local h = redis.pcall('HMGET', KEYS[1], 'token', 'fence')\n",
        "if h['err'] then return -1 end\n",
        "if h[1] ~= ARGV[1] then\n",
        "  if h[1] == false and redis.call('EXISTS', KEYS[1]) == 0 then return -2 end\n",
        "  return -1\n",
        "end\n",
        "local t = redis.call('TIME')\n",
        "local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)\n",
        "local info = ARGV[3] .. now .. '\\n' .. ARGV[4]\n",
        "local hold = tonumber(ARGV[5])\n",
        "redis.call('DEL', KEYS[1])\n",
        "if hold > 0 then\n",
        "  redis.call('HSET', KEYS[1], 'token', ARGV[1], 'fence', h[2], 'info', info, 'hold_until', now + hold)\n",
        "else\n",
        "  redis.call('HSET', KEYS[1], 'token', ARGV[1], 'fence', h[2], 'info', info)\n",
        "end\n",
        "redis.call('PEXPIRE', KEYS[1], ARGV[2])\n",
        "if ARGV[6] ~= '' then redis.call('ZREM', KEYS[2], ARGV[6]) end\n",
        "return tonumber(h[2])\n",
    ))
});

/// `CLAIM`: make a popped grant ours (holder information, minimum hold, full TTL) and forget
/// the waiter registration `c.registration` (if not empty).
pub(crate) fn claim(c: &ClaimArgs<'_>) -> Request<Claim> {
    let [ttl, min_hold] = [c.ttl, c.min_hold].map(|d| Decimal::new(ms(d)));
    Request::script(
        &CLAIM,
        &[c.keys.lock.as_bytes(), c.keys.waiters.as_bytes()],
        &[
            c.grant.as_bytes(),
            ttl.as_bytes(),
            c.holder.as_bytes(),
            c.meta.as_bytes(),
            min_hold.as_bytes(),
            c.registration.as_bytes(),
        ],
        |r: i64| Ok(decode_claim(r)),
    )
}

#[cfg(all(test, feature = "testing"))]
mod server_tests {
    use std::time::Duration;

    use super::super::acquire::{acquire, native_value};
    use super::super::server_tests::args;
    use super::*;
    use crate::testing::RedisServer;
    use crate::wire::token::new_ids;
    use crate::wire::{Attempt, LockKeys};

    /// A claim of a grant that expired before it was claimed says so (`Gone`), rather than
    /// that somebody else took it.
    #[test]
    fn claiming_an_expired_grant_reports_it_gone() {
        let server = RedisServer::start();
        let mut con = server.connection();
        let keys = LockKeys::new("lock:", "claimed").unwrap();
        let mut claim_it = |grant: &str| {
            claim(&ClaimArgs {
                keys: &keys,
                grant,
                ttl: Duration::from_secs(1),
                holder: "host\n1\n",
                meta: "",
                min_hold: Duration::ZERO,
                registration: "",
            })
            .on(&mut con)
            .unwrap()
        };
        assert_eq!(claim_it("nobody-granted-this"), Claim::Gone);
        // Another holder, on the native fast path as `lock` takes a free lock: a string.
        let other = new_ids().unwrap();
        let ttl = Duration::from_secs(10);
        let mut holder = server.connection();
        let mut taken = args(&keys, &other, ttl, Duration::ZERO);
        let value = native_value(&taken);
        taken.native = value.as_deref();
        assert!(matches!(
            acquire(&taken).on(&mut holder).unwrap(),
            Attempt::Acquired { .. }
        ));
        assert_eq!(claim_it("nobody-granted-this"), Claim::NotOurs);
    }
}
