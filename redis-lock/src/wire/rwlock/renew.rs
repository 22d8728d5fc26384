//! Extending a read share or the write lock: the `RENEW_READ` and `RENEW_WRITE` scripts.

use std::sync::LazyLock;
use std::time::Duration;

use redis::Script;

use super::super::request::Request;
use super::super::resp::Decimal;
use super::super::{LockKeys, Renewal, decode_renew, ms};
use super::Side;

/// Renew a read share: compare, then move its expiry (the lock lives at least as long).
/// KEYS: lock, readers. ARGV: token, ttl_ms.
/// Returns `1` renewed, `0` the share is gone (expired, or the lock freed), `-1` a writer (or
/// another type) is there.
static RENEW_READ: LazyLock<Script> = LazyLock::new(|| {
    Script::new(concat!(
        clock!(),
        rw_stretch!(),
        "local h = redis.pcall('HMGET', KEYS[1], 'mode', 'r:' .. ARGV[1])\n",
        "if h['err'] then return -1 end\n",
        "local s = redis.pcall('ZSCORE', KEYS[2], ARGV[1])\n",
        "if type(s) == 'table' then return -1 end\n",
        "local ttl = tonumber(ARGV[2])\n",
        "if h[2] and s and tonumber(s) > clock() then\n",
        "  redis.call('ZADD', KEYS[2], clock() + ttl, ARGV[1])\n",
        "  stretch(KEYS[1], KEYS[2], ttl)\n",
        "  return 1\n",
        "end\n",
        "if s then redis.call('ZREM', KEYS[2], ARGV[1]) end\n",
        "if h[2] then redis.call('HDEL', KEYS[1], 'r:' .. ARGV[1]) end\n",
        "if h[1] == 'write' then return -1 end\n",
        "if h[1] == false and redis.call('EXISTS', KEYS[1]) == 1 then return -1 end\n",
        "return 0\n",
    ))
});

/// Renew the write lock: compare the token, then set the TTL (never below the latest share
/// of a downgrade in progress).
/// KEYS: lock. ARGV: token, ttl_ms, the shares' key (`ns{name}:readers`). Returns `1`
/// renewed, `0` the key is gone, `-1` anyone else (readers, another writer, a cool-down,
/// another type) is there.
///
/// The shares' key is an argument read with `pcall`, not a declared key: a write lock has
/// none unless its holder downgraded, and on a Cluster a script that declares a key missing
/// from a slot being migrated is answered `TRYAGAIN` for as long as the migration lasts,
/// which would cost the writer its lock at its TTL. Where the shares' key cannot be read
/// (missing from a migrating slot, or of another type) the lock's TTL is only raised, never
/// cut, so no share it would have covered ends early.
static RENEW_WRITE: LazyLock<Script> = LazyLock::new(|| {
    Script::new(concat!(
        clock!(),
        rw_fit!(),
        "local h = redis.pcall('HMGET', KEYS[1], 'mode', 'wtoken')\n",
        "if h['err'] then return -1 end\n",
        "if h[2] == ARGV[1] then\n",
        "  local ttl = tonumber(ARGV[2])\n",
        "  if redis.pcall('ZRANGE', ARGV[3], 0, 0)['err'] then\n",
        "    if redis.call('PTTL', KEYS[1]) < ttl then redis.call('PEXPIRE', KEYS[1], ttl) end\n",
        "  else\n",
        "    fit(KEYS[1], ARGV[3], ttl)\n",
        "  end\n",
        "  return 1\n",
        "end\n",
        "if h[1] == false and redis.call('EXISTS', KEYS[1]) == 0 then return 0 end\n",
        "return -1\n",
    ))
});

/// `RENEW_READ` / `RENEW_WRITE`.
pub(crate) fn renew(side: Side, keys: &LockKeys, token: &str, ttl: Duration) -> Request<Renewal> {
    let ttl = Decimal::new(ms(ttl));
    let readers = keys.readers();
    let decode = |r: i64| Ok(decode_renew(r));
    match side {
        Side::Read => Request::script(
            &RENEW_READ,
            &[keys.lock.as_bytes(), readers.as_bytes()],
            &[token.as_bytes(), ttl.as_bytes()],
            decode,
        ),
        // The shares' key as an argument: see `RENEW_WRITE`.
        Side::Write => Request::script(
            &RENEW_WRITE,
            &[keys.lock.as_bytes()],
            &[token.as_bytes(), ttl.as_bytes(), readers.as_bytes()],
            decode,
        ),
    }
}
