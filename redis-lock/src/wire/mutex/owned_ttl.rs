//! The holder asking how long its lock has left: the `OWNED_TTL` script.

use std::sync::LazyLock;

use redis::Script;

use super::super::commit::{self, Check};
use super::super::request::Request;
use super::super::{LockKeys, OwnedTtl, decode_owned_ttl};

/// Remaining TTL, for the holder only.
/// KEYS: lock. ARGV: token. Returns the PTTL (`-1` without expiry), `-2` gone, `-3` not ours.
const OWNED_TTL_LUA: &str = concat!(
    owner_of!(),
    "local t = owner_of(KEYS[1])\n",
    "if t == ARGV[1] then return redis.call('PTTL', KEYS[1]) end\n",
    "if t == false then return -2 end\n",
    "return -3\n",
);

static OWNED_TTL: LazyLock<Script> = LazyLock::new(|| Script::new(OWNED_TTL_LUA));

/// The commands of a commit, run after the same check (`wire/commit.rs`).
static COMMIT: LazyLock<Script> = LazyLock::new(|| commit::script(OWNED_TTL_LUA));

/// The ownership check of a commit under this lock.
pub(crate) fn commit_check(keys: &LockKeys) -> Check {
    Check {
        script: &COMMIT,
        keys: vec![keys.lock.clone()],
        members: false,
    }
}

/// `OWNED_TTL`: the remaining TTL of a lock we hold.
pub(crate) fn owned_ttl(keys: &LockKeys, token: &str) -> Request<OwnedTtl> {
    Request::script(
        &OWNED_TTL,
        &[keys.lock.as_bytes()],
        &[token.as_bytes()],
        |r: i64| Ok(decode_owned_ttl(r)),
    )
}
