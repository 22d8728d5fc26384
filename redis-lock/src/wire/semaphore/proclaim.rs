//! A holder replacing the metadata stored with its permit: the `PROCLAIM` script, the
//! permit's owned-TTL check followed by the write.

use std::sync::LazyLock;

use redis::Script;

use super::super::request::Request;
use super::super::{LockKeys, OwnedTtl, decode_owned_ttl};
use super::owned_ttl::OWNED_TTL_LUA;

/// A permit's holder information is `fence \n host \n pid \n since \n meta` in the holders'
/// hash: only `meta` changes (a granted permit not claimed yet has its fence alone: `holder`
/// fills in the rest). KEYS: permits, holders. ARGV: token, meta, holder (`host \n pid \n
/// since \n`). Returns what `OWNED_TTL` does; nothing is written unless the permit is ours.
static PROCLAIM: LazyLock<Script> = LazyLock::new(|| {
    Script::new(&format!(
        "local function owned()\n{OWNED_TTL_LUA}end\n{}",
        "local ttl = owned()\n\
         if ttl < -1 then return ttl end\n\
         local r = redis.call('HGET', KEYS[2], ARGV[1]) or ''\n\
         local h = string.match(r, '^([^\\n]*\\n[^\\n]*\\n[^\\n]*\\n[^\\n]*\\n)')\n\
         if not h then h = string.match(r, '^([^\\n]*)') .. '\\n' .. ARGV[3] end\n\
         redis.call('HSET', KEYS[2], ARGV[1], h .. ARGV[2])\n\
         return ttl\n",
    ))
});

/// `PROCLAIM`: the permit held under `token` carries `meta` from now on (`holder`: this
/// process's `host \n pid \n`); its remaining TTL, or why it is not ours.
pub(crate) fn proclaim(
    keys: &LockKeys,
    token: &str,
    meta: &str,
    holder: &str,
) -> Request<OwnedTtl> {
    let holders = keys.holders();
    let info = super::super::holder_since_now(holder);
    Request::script(
        &PROCLAIM,
        &[keys.lock.as_bytes(), holders.as_bytes()],
        &[token.as_bytes(), meta.as_bytes(), info.as_bytes()],
        |r: i64| Ok(decode_owned_ttl(r)),
    )
}
