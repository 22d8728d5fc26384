//! A lock passing from one owner token to a fresh one (a lease handle resumed once): the
//! `TRANSFER` script.

use std::sync::LazyLock;

use redis::Script;

use super::super::request::Request;
use super::super::{LockKeys, OwnedTtl, decode_owned_ttl};

/// Moves a lock we hold to a fresh owner token, in either form: the string's value keeps its
/// holder information and TTL (`KEEPTTL`), the hash's `token` field is replaced (fence, holder
/// information, TTL and any other field stay).
/// KEYS: lock. ARGV: token, fresh token. Returns the PTTL (`-1` without expiry), `-2` gone,
/// `-3` not ours (nothing written).
static TRANSFER: LazyLock<Script> = LazyLock::new(|| {
    Script::new(concat!(
        "local s = redis.pcall('GET', KEYS[1])\n",
        "if type(s) == 'string' then\n",
        "  local t, info = string.match(s, ",
        string_lock!(),
        ")\n",
        "  if t ~= ARGV[1] then return -3 end\n",
        "  redis.call('SET', KEYS[1], ARGV[2] .. '\\n' .. info, 'KEEPTTL')\n",
        "  return redis.call('PTTL', KEYS[1])\n",
        "end\n",
        "if s == false then return -2 end\n",
        "local t = redis.pcall('HGET', KEYS[1], 'token')\n",
        "if t ~= ARGV[1] then return -3 end\n",
        "redis.call('HSET', KEYS[1], 'token', ARGV[2])\n",
        "return redis.call('PTTL', KEYS[1])\n",
    ))
});

/// `TRANSFER`: the lock held under `token` is held under `fresh` from now on.
pub(crate) fn transfer(keys: &LockKeys, token: &str, fresh: &str) -> Request<OwnedTtl> {
    Request::script(
        &TRANSFER,
        &[keys.lock.as_bytes()],
        &[token.as_bytes(), fresh.as_bytes()],
        |r: i64| Ok(decode_owned_ttl(r)),
    )
}
