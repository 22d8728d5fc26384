//! A holder replacing the metadata stored with its read share or write lock: the
//! `PROCLAIM_READ` and `PROCLAIM_WRITE` scripts, the owned-TTL check of the side followed by
//! the write.

use std::sync::LazyLock;

use redis::Script;

use super::super::request::Request;
use super::super::{LockKeys, OwnedTtl, decode_owned_ttl};
use super::Side;
use super::owned_ttl::{OWNED_TTL_READ_LUA, OWNED_TTL_WRITE_LUA};

/// The side's owned-TTL check (`owned_ttl.rs`), then `write` when the lock is ours; the
/// check's answer either way (nothing is written when it is not ours).
fn checked(owned_ttl: &str, write: &str) -> Script {
    Script::new(&format!(
        "local function owned()\n{owned_ttl}end\nlocal ttl = owned()\nif ttl < -1 then return ttl end\n{write}return ttl\n"
    ))
}

/// A read share's holder information is `fence \n host \n pid \n since \n meta`: only `meta`
/// changes. KEYS: lock, readers. ARGV: token, meta. Returns what `OWNED_TTL_READ` does.
static PROCLAIM_READ: LazyLock<Script> = LazyLock::new(|| {
    checked(
        OWNED_TTL_READ_LUA,
        "local f = 'r:' .. ARGV[1]\n\
         local r = redis.call('HGET', KEYS[1], f)\n\
         local h = string.match(r, '^([^\\n]*\\n[^\\n]*\\n[^\\n]*\\n[^\\n]*\\n)') or (r .. '\\n\\n\\n0\\n')\n\
         redis.call('HSET', KEYS[1], f, h .. ARGV[2])\n",
    )
});

/// The writer's holder information is `host \n pid \n since \n meta`: only `meta` changes.
/// KEYS: lock. ARGV: token, meta. Returns what `OWNED_TTL_WRITE` does.
static PROCLAIM_WRITE: LazyLock<Script> = LazyLock::new(|| {
    checked(
        OWNED_TTL_WRITE_LUA,
        "local w = redis.call('HGET', KEYS[1], 'winfo') or ''\n\
         local h = string.match(w, '^([^\\n]*\\n[^\\n]*\\n[^\\n]*\\n)') or '\\n\\n0\\n'\n\
         redis.call('HSET', KEYS[1], 'winfo', h .. ARGV[2])\n",
    )
});

/// `PROCLAIM_READ` / `PROCLAIM_WRITE`: the share or write lock held under `token` carries
/// `meta` from now on; its remaining TTL, or why it is not ours.
pub(crate) fn proclaim(side: Side, keys: &LockKeys, token: &str, meta: &str) -> Request<OwnedTtl> {
    let decode = |r: i64| Ok(decode_owned_ttl(r));
    match side {
        Side::Read => {
            let readers = keys.readers();
            Request::script(
                &PROCLAIM_READ,
                &[keys.lock.as_bytes(), readers.as_bytes()],
                &[token.as_bytes(), meta.as_bytes()],
                decode,
            )
        }
        Side::Write => Request::script(
            &PROCLAIM_WRITE,
            &[keys.lock.as_bytes()],
            &[token.as_bytes(), meta.as_bytes()],
            decode,
        ),
    }
}
