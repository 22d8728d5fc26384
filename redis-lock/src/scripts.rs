//! The Lua scripts. Every state change of a lock is one of these, run atomically by Redis.
//!
//! Keys travel in `KEYS`, values in `ARGV`; nothing user-supplied is spliced into script text,
//! so the SHA1 of each script is fixed and `EVALSHA` hits the script cache. All keys of one
//! script share one hash tag (see `keys.rs`), so the scripts run unchanged on Redis Cluster.
//!
//! The lock is a hash with a TTL:
//!
//! | field        | value                                                        |
//! |--------------|--------------------------------------------------------------|
//! | `token`      | owner token (128 random bits, hex); `""` during minimum hold  |
//! | `host`,`pid` | where the holder runs                                        |
//! | `since`      | acquisition time, Redis server clock, Unix ms                |
//! | `ttl`        | the TTL the holder renews to, ms                              |
//! | `fence`      | the fencing token of this acquisition                        |
//! | `meta`       | user metadata (may be empty)                                 |
//! | `hold_until` | Unix ms (server clock) before which a release keeps the lock |

use std::sync::LazyLock;

use redis::Script;

/// Unix milliseconds from the Redis server clock. Scripts are replicated by effects (the
/// default since Redis 5), so reading `TIME` inside a script is allowed and safe.
macro_rules! now_ms {
    () => {
        "local __t = redis.call('TIME')\nlocal now_ms = tonumber(__t[1]) * 1000 + math.floor(tonumber(__t[2]) / 1000)\n"
    };
}

/// Acquire.
/// KEYS: lock, fence, signal. ARGV: token, ttl_ms, host, pid, meta, min_hold_ms.
/// Returns `{1, fence}` when acquired, `{0, pttl}` when held by someone else (pttl is `-1` for a
/// lock without expiry), `{-2, 0}` when the lock key holds another type, `{-3, 0}` when the
/// fence key does, `{-4, 0}` when the signal key does. The types are checked before anything
/// is written: a script that fails half-way keeps what it wrote.
pub(crate) static ACQUIRE: LazyLock<Script> = LazyLock::new(|| {
    Script::new(concat!(
        "local fk = redis.call('TYPE', KEYS[2])['ok']\n",
        "if fk ~= 'none' and fk ~= 'string' then return {-3, 0} end\n",
        "local sk = redis.call('TYPE', KEYS[3])['ok']\n",
        "if sk ~= 'none' and sk ~= 'list' then return {-4, 0} end\n",
        "local kind = redis.call('TYPE', KEYS[1])['ok']\n",
        "if kind == 'none' then\n",
        now_ms!(),
        "  local fence = redis.call('INCR', KEYS[2])\n",
        "  redis.call('HSET', KEYS[1], 'token', ARGV[1], 'host', ARGV[3], 'pid', ARGV[4],\n",
        "    'since', now_ms, 'ttl', ARGV[2], 'fence', fence, 'meta', ARGV[5],\n",
        "    'hold_until', now_ms + tonumber(ARGV[6]))\n",
        "  redis.call('PEXPIRE', KEYS[1], ARGV[2])\n",
        "  return {1, fence}\n",
        "end\n",
        "if kind ~= 'hash' then return {-2, 0} end\n",
        "return {0, redis.call('PTTL', KEYS[1])}\n",
    ))
});

/// Renew (compare token, then extend).
/// KEYS: lock. ARGV: token, ttl_ms.
/// Returns `1` renewed, `0` the key is gone, `-1` another owner (or another type) is there.
pub(crate) static RENEW: LazyLock<Script> = LazyLock::new(|| {
    Script::new(concat!(
        "local kind = redis.call('TYPE', KEYS[1])['ok']\n",
        "if kind == 'none' then return 0 end\n",
        "if kind ~= 'hash' then return -1 end\n",
        "if redis.call('HGET', KEYS[1], 'token') ~= ARGV[1] then return -1 end\n",
        "redis.call('PEXPIRE', KEYS[1], ARGV[2])\n",
        "redis.call('HSET', KEYS[1], 'ttl', ARGV[2])\n",
        "return 1\n",
    ))
});

/// Release (compare token, then delete and wake one waiter; or, inside the minimum hold, give
/// up ownership but keep the key until `hold_until`).
/// KEYS: lock, signal. ARGV: token, and optionally `1` to delete even inside the minimum hold
/// (an acquisition undone because replicas did not acknowledge it was never held).
/// Returns `1` released, `2` released but kept until the minimum hold has passed, `0` late
/// (the key was already gone), `-1` lost (another owner, or another type, is there now), `-4`
/// the signal key holds another type (nothing was changed).
pub(crate) static RELEASE: LazyLock<Script> = LazyLock::new(|| {
    Script::new(concat!(
        "local kind = redis.call('TYPE', KEYS[1])['ok']\n",
        "if kind == 'none' then return 0 end\n",
        "if kind ~= 'hash' then return -1 end\n",
        "local h = redis.call('HMGET', KEYS[1], 'token', 'hold_until', 'ttl')\n",
        "if h[1] ~= ARGV[1] then return -1 end\n",
        "local sk = redis.call('TYPE', KEYS[2])['ok']\n",
        "if sk ~= 'none' and sk ~= 'list' then return -4 end\n",
        now_ms!(),
        "local left = (tonumber(h[2]) or 0) - now_ms\n",
        "if left > 0 and ARGV[2] ~= '1' then\n",
        "  redis.call('HSET', KEYS[1], 'token', '')\n",
        "  redis.call('PEXPIRE', KEYS[1], left)\n",
        "  return 2\n",
        "end\n",
        "redis.call('DEL', KEYS[1])\n",
        // One element at most: each release makes room for one acquisition, so one wake-up is
        // enough, and a list nobody pops cannot grow. It expires with the lock's TTL.
        "if redis.call('LLEN', KEYS[2]) == 0 then redis.call('RPUSH', KEYS[2], 1) end\n",
        "redis.call('PEXPIRE', KEYS[2], tonumber(h[3]) or 10000)\n",
        "return 1\n",
    ))
});

/// Read holder information and the remaining TTL in one go.
/// KEYS: lock. Returns `{}` when free, `{-2}` for another type, else
/// `{pttl, host, pid, since, fence, meta, hold_until, token_is_empty}`.
pub(crate) static INSPECT: LazyLock<Script> = LazyLock::new(|| {
    Script::new(concat!(
        "local kind = redis.call('TYPE', KEYS[1])['ok']\n",
        "if kind == 'none' then return {} end\n",
        "if kind ~= 'hash' then return {-2} end\n",
        "local h = redis.call('HMGET', KEYS[1], 'host', 'pid', 'since', 'fence', 'meta', 'hold_until', 'token')\n",
        "return {redis.call('PTTL', KEYS[1]), h[1] or '', h[2] or '', h[3] or '0', h[4] or '0', h[5] or '', h[6] or '0', (h[7] == '' or h[7] == false) and 1 or 0}\n",
    ))
});

/// Remaining TTL, for the holder only.
/// KEYS: lock. ARGV: token. Returns the PTTL (`-1` without expiry), `-2` gone, `-3` not ours.
pub(crate) static OWNED_TTL: LazyLock<Script> = LazyLock::new(|| {
    Script::new(concat!(
        "local kind = redis.call('TYPE', KEYS[1])['ok']\n",
        "if kind == 'none' then return -2 end\n",
        "if kind ~= 'hash' then return -3 end\n",
        "if redis.call('HGET', KEYS[1], 'token') ~= ARGV[1] then return -3 end\n",
        "return redis.call('PTTL', KEYS[1])\n",
    ))
});

/// Operator's release: delete whatever lock is there and wake a waiter, returning who held it.
/// KEYS: lock, signal. Returns `{}` when free, `{-2}` when the lock key holds another type,
/// `{-4}` when the signal key does (nothing changed), else `{host, pid}`.
pub(crate) static FORCE_RELEASE: LazyLock<Script> = LazyLock::new(|| {
    Script::new(concat!(
        "local kind = redis.call('TYPE', KEYS[1])['ok']\n",
        "if kind == 'none' then return {} end\n",
        "if kind ~= 'hash' then return {-2} end\n",
        "local sk = redis.call('TYPE', KEYS[2])['ok']\n",
        "if sk ~= 'none' and sk ~= 'list' then return {-4} end\n",
        "local h = redis.call('HMGET', KEYS[1], 'host', 'pid', 'ttl')\n",
        "redis.call('DEL', KEYS[1])\n",
        "if redis.call('LLEN', KEYS[2]) == 0 then redis.call('RPUSH', KEYS[2], 1) end\n",
        "redis.call('PEXPIRE', KEYS[2], tonumber(h[3]) or 10000)\n",
        "return {h[1] or '', h[2] or ''}\n",
    ))
});

/// Redlock: raise this server's fencing counter to the token the acquisition settled on (the
/// highest counter of the majority), and record that token with the lock, if the lock is
/// still ours here. See `quorum.rs` for why this keeps tokens monotonic.
/// KEYS: lock, fence. ARGV: token, fence. Returns `1` raised (or already there), `0` not ours.
pub(crate) static RAISE_FENCE: LazyLock<Script> = LazyLock::new(|| {
    Script::new(concat!(
        "if redis.call('TYPE', KEYS[1])['ok'] ~= 'hash' then return 0 end\n",
        "if redis.call('HGET', KEYS[1], 'token') ~= ARGV[1] then return 0 end\n",
        "if (tonumber(redis.call('GET', KEYS[2])) or 0) < tonumber(ARGV[2]) then\n",
        "  redis.call('SET', KEYS[2], ARGV[2])\n",
        "end\n",
        "redis.call('HSET', KEYS[1], 'fence', ARGV[2])\n",
        "return 1\n",
    ))
});
