//! A read share or the write lock passing from one owner token to a fresh one (a lease handle
//! resumed once): the `TRANSFER_READ` and `TRANSFER_WRITE` scripts.

use std::sync::LazyLock;

use redis::Script;

use super::super::request::Request;
use super::super::{LockKeys, OwnedTtl, decode_owned_ttl};
use super::Side;

/// Moves a live read share to a fresh token: its field (fence and holder information) and its
/// expiry in `readers` go over unchanged. KEYS: lock, readers. ARGV: token, fresh token.
/// Returns the ms left, `-2` gone, `-3` another type is there.
static TRANSFER_READ: LazyLock<Script> = LazyLock::new(|| {
    Script::new(concat!(
        clock!(),
        "local f = redis.pcall('HGET', KEYS[1], 'r:' .. ARGV[1])\n",
        "if type(f) == 'table' then return -3 end\n",
        "local s = redis.pcall('ZSCORE', KEYS[2], ARGV[1])\n",
        "if type(s) == 'table' then return -3 end\n",
        "if not (f and s and tonumber(s) > clock()) then return -2 end\n",
        "redis.call('HSET', KEYS[1], 'r:' .. ARGV[2], f)\n",
        "redis.call('HDEL', KEYS[1], 'r:' .. ARGV[1])\n",
        "redis.call('ZADD', KEYS[2], s, ARGV[2])\n",
        "redis.call('ZREM', KEYS[2], ARGV[1])\n",
        "return tonumber(s) - clock()\n",
    ))
});

/// Moves the write lock to a fresh token (`wtoken`; fence, holder information, TTL stay).
/// KEYS: lock. ARGV: token, fresh token. Returns the PTTL, `-2` gone, `-3` not ours.
static TRANSFER_WRITE: LazyLock<Script> = LazyLock::new(|| {
    Script::new(concat!(
        "local t = redis.pcall('HGET', KEYS[1], 'wtoken')\n",
        "if type(t) == 'table' then return -3 end\n",
        "if t == ARGV[1] then\n",
        "  redis.call('HSET', KEYS[1], 'wtoken', ARGV[2])\n",
        "  return redis.call('PTTL', KEYS[1])\n",
        "end\n",
        "if redis.call('EXISTS', KEYS[1]) == 0 then return -2 end\n",
        "return -3\n",
    ))
});

/// `TRANSFER_READ` / `TRANSFER_WRITE`.
pub(crate) fn transfer(side: Side, keys: &LockKeys, token: &str, fresh: &str) -> Request<OwnedTtl> {
    let argv = [token.as_bytes(), fresh.as_bytes()];
    let decode = |r: i64| Ok(decode_owned_ttl(r));
    match side {
        Side::Read => {
            let readers = keys.readers();
            Request::script(
                &TRANSFER_READ,
                &[keys.lock.as_bytes(), readers.as_bytes()],
                &argv,
                decode,
            )
        }
        Side::Write => Request::script(&TRANSFER_WRITE, &[keys.lock.as_bytes()], &argv, decode),
    }
}
