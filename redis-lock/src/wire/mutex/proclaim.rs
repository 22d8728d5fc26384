//! A holder replacing the metadata stored with its lock (a leader proclaiming a new value):
//! the `PROCLAIM` script.

use std::sync::LazyLock;

use redis::Script;

use super::super::request::Request;
use super::super::{LockKeys, OwnedTtl, decode_owned_ttl};

/// Replaces the metadata of a lock we hold, in either form: the holder information is
/// `host \n pid \n since \n meta`, and only `meta` changes; the token, fence and TTL
/// (`KEEPTTL`) stay; a lock without holder information yet (a grant not claimed) gets
/// `holder`'s. KEYS: lock. ARGV: token, meta, holder (`host \n pid \n since \n`). Returns the
/// PTTL (`-1` without expiry), `-2` gone, `-3` not ours (nothing written).
static PROCLAIM: LazyLock<Script> = LazyLock::new(|| {
    Script::new(concat!(
        "local head = '^([^\\n]*\\n[^\\n]*\\n[^\\n]*\\n)'\n",
        "local s = redis.pcall('GET', KEYS[1])\n",
        "if type(s) == 'string' then\n",
        "  local t, info = string.match(s, ",
        string_lock!(),
        ")\n",
        "  if t ~= ARGV[1] then return -3 end\n",
        "  local h = string.match(info, head) or ARGV[3]\n",
        "  redis.call('SET', KEYS[1], t .. '\\n' .. h .. ARGV[2], 'KEEPTTL')\n",
        "  return redis.call('PTTL', KEYS[1])\n",
        "end\n",
        "if s == false then return -2 end\n",
        "local t = redis.pcall('HGET', KEYS[1], 'token')\n",
        "if t ~= ARGV[1] then return -3 end\n",
        "local h = string.match(redis.call('HGET', KEYS[1], 'info') or '', head) or ARGV[3]\n",
        "redis.call('HSET', KEYS[1], 'info', h .. ARGV[2])\n",
        "return redis.call('PTTL', KEYS[1])\n",
    ))
});

/// `PROCLAIM`: the lock held under `token` carries `meta` from now on (`holder`: this
/// process's `host \n pid \n`, for a lock without holder information yet).
pub(crate) fn proclaim(
    keys: &LockKeys,
    token: &str,
    meta: &str,
    holder: &str,
) -> Request<OwnedTtl> {
    let info = super::super::holder_since_now(holder);
    Request::script(
        &PROCLAIM,
        &[keys.lock.as_bytes()],
        &[token.as_bytes(), meta.as_bytes(), info.as_bytes()],
        |r: i64| Ok(decode_owned_ttl(r)),
    )
}
