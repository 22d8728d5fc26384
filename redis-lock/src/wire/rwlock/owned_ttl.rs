//! How long a read share or the write lock has left, for its holder: the `OWNED_TTL_READ` and
//! `OWNED_TTL_WRITE` scripts.

use std::sync::LazyLock;

use redis::Script;

use super::super::commit::{self, Check};
use super::super::request::Request;
use super::super::{LockKeys, OwnedTtl, decode_owned_ttl};
use super::Side;

/// Remaining TTL of a read share. KEYS: lock, readers. ARGV: token.
/// Returns the ms left, `-2` gone, `-3` another type is there.
pub(super) const OWNED_TTL_READ_LUA: &str = concat!(
    clock!(),
    "local f = redis.pcall('HGET', KEYS[1], 'r:' .. ARGV[1])\n",
    "if type(f) == 'table' then return -3 end\n",
    "local s = redis.pcall('ZSCORE', KEYS[2], ARGV[1])\n",
    "if type(s) == 'table' then return -3 end\n",
    "if f and s and tonumber(s) > clock() then return tonumber(s) - clock() end\n",
    "return -2\n",
);

static OWNED_TTL_READ: LazyLock<Script> = LazyLock::new(|| Script::new(OWNED_TTL_READ_LUA));

/// Remaining TTL of the write lock. KEYS: lock. ARGV: token.
/// Returns the PTTL, `-2` gone, `-3` not ours.
pub(super) const OWNED_TTL_WRITE_LUA: &str = concat!(
    "local t = redis.pcall('HGET', KEYS[1], 'wtoken')\n",
    "if type(t) == 'table' then return -3 end\n",
    "if t == ARGV[1] then return redis.call('PTTL', KEYS[1]) end\n",
    "if redis.call('EXISTS', KEYS[1]) == 0 then return -2 end\n",
    "return -3\n",
);

static OWNED_TTL_WRITE: LazyLock<Script> = LazyLock::new(|| Script::new(OWNED_TTL_WRITE_LUA));

/// The commands of a commit, run after the same checks (`wire/commit.rs`).
static COMMIT_READ: LazyLock<Script> = LazyLock::new(|| commit::script(OWNED_TTL_READ_LUA));
static COMMIT_WRITE: LazyLock<Script> = LazyLock::new(|| commit::script(OWNED_TTL_WRITE_LUA));

/// The ownership check of a commit under a read share or the write lock.
pub(crate) fn commit_check(side: Side, keys: &LockKeys) -> Check {
    match side {
        Side::Read => Check {
            script: &COMMIT_READ,
            keys: vec![keys.lock.clone(), keys.readers()],
            members: false,
        },
        Side::Write => Check {
            script: &COMMIT_WRITE,
            keys: vec![keys.lock.clone()],
            members: false,
        },
    }
}

/// `OWNED_TTL_READ` / `OWNED_TTL_WRITE`.
pub(crate) fn owned_ttl(side: Side, keys: &LockKeys, token: &str) -> Request<OwnedTtl> {
    let decode = |r: i64| Ok(decode_owned_ttl(r));
    match side {
        Side::Read => {
            let readers = keys.readers();
            Request::script(
                &OWNED_TTL_READ,
                &[keys.lock.as_bytes(), readers.as_bytes()],
                &[token.as_bytes()],
                decode,
            )
        }
        Side::Write => Request::script(
            &OWNED_TTL_WRITE,
            &[keys.lock.as_bytes()],
            &[token.as_bytes()],
            decode,
        ),
    }
}
