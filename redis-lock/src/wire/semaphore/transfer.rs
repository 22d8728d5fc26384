//! One permit passing from one owner token to a fresh one (a lease handle resumed once): the
//! `TRANSFER` script.

use std::sync::LazyLock;

use redis::Script;

use super::super::request::Request;
use super::super::{LockKeys, OwnedTtl, decode_owned_ttl};

/// Moves a live permit to a fresh token: its expiry, its holder entry (fence and holder
/// information) and, for a grant not claimed yet, its entry among the grants go over
/// unchanged; the count of permits does not change.
/// KEYS: permits, holders, grants. ARGV: token, fresh token.
/// Returns the ms left, `-2` gone, `-3` another type.
static TRANSFER: LazyLock<Script> = LazyLock::new(|| {
    Script::new(concat!(
        clock!(),
        "local t = redis.call('TYPE', KEYS[1])['ok']\n",
        "if t ~= 'none' and t ~= 'zset' then return -3 end\n",
        "local s = tonumber(redis.call('ZSCORE', KEYS[1], ARGV[1]))\n",
        "if not s or s <= clock() then return -2 end\n",
        "local h = redis.pcall('HGET', KEYS[2], ARGV[1])\n",
        "if type(h) == 'table' then return -3 end\n",
        "local g = redis.pcall('ZSCORE', KEYS[3], ARGV[1])\n",
        "if type(g) == 'table' then return -3 end\n",
        "redis.call('ZADD', KEYS[1], s, ARGV[2])\n",
        "redis.call('ZREM', KEYS[1], ARGV[1])\n",
        "if h then\n",
        "  redis.call('HSET', KEYS[2], ARGV[2], h)\n",
        "  redis.call('HDEL', KEYS[2], ARGV[1])\n",
        "end\n",
        "if g then\n",
        "  redis.call('ZADD', KEYS[3], g, ARGV[2])\n",
        "  redis.call('ZREM', KEYS[3], ARGV[1])\n",
        "end\n",
        "return s - clock()\n",
    ))
});

/// `TRANSFER`: the permit held under `token` is held under `fresh` from now on.
pub(crate) fn transfer(keys: &LockKeys, token: &str, fresh: &str) -> Request<OwnedTtl> {
    let (holders, grants) = (keys.holders(), keys.grants());
    Request::script(
        &TRANSFER,
        &[keys.lock.as_bytes(), holders.as_bytes(), grants.as_bytes()],
        &[token.as_bytes(), fresh.as_bytes()],
        |r: i64| {
            // Never `-1` (no expiry): a permit always has one.
            Ok(decode_owned_ttl(r))
        },
    )
}
