//! How long one permit has left, for its holder: the `OWNED_TTL` script.

use std::sync::LazyLock;

use redis::Script;

use super::super::commit::{self, Check};
use super::super::request::Request;
use super::super::{LockKeys, OwnedTtl, decode_owned_ttl};

/// The remaining TTL of one permit, for its holder only.
/// KEYS: permits. ARGV: token. Returns the ms left, `-2` gone, `-3` another type.
pub(super) const OWNED_TTL_LUA: &str = concat!(
    clock!(),
    "local t = redis.call('TYPE', KEYS[1])['ok']\n",
    "if t ~= 'none' and t ~= 'zset' then return -3 end\n",
    "local s = tonumber(redis.call('ZSCORE', KEYS[1], ARGV[1]))\n",
    "if not s or s <= clock() then return -2 end\n",
    "return s - clock()\n",
);

static OWNED_TTL: LazyLock<Script> = LazyLock::new(|| Script::new(OWNED_TTL_LUA));

/// The commands of a commit, run after the same check (`wire/commit.rs`).
static COMMIT: LazyLock<Script> = LazyLock::new(|| commit::script(OWNED_TTL_LUA));

/// The ownership check of a commit under this permit.
pub(crate) fn commit_check(keys: &LockKeys) -> Check {
    Check {
        script: &COMMIT,
        keys: vec![keys.lock.clone()],
        members: false,
    }
}

/// `OWNED_TTL`: the remaining TTL of one permit.
pub(crate) fn owned_ttl(keys: &LockKeys, token: &str) -> Request<OwnedTtl> {
    Request::script(
        &OWNED_TTL,
        &[keys.lock.as_bytes()],
        &[token.as_bytes()],
        |r: i64| {
            // The script never answers `-1` (no expiry): a permit always has one.
            Ok(decode_owned_ttl(r))
        },
    )
}
