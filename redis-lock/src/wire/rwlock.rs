//! The read-write lock on the wire: its Lua scripts, and one typed function per script (below
//! them). Many readers or one writer; a waiting writer keeps new readers out.
//!
//! The lock is the same key as a mutex's, `ns{name}`, a hash told apart by its `mode` field
//! (a mutex's hash never has one, and a read-write lock's never has `token`, so each
//! primitive's scripts answer "wrong type" on the other's key and touch nothing):
//!
//! | field          | value                                                               |
//! |----------------|---------------------------------------------------------------------|
//! | `mode`         | `read`, `write`, or `cool` (released with a cool-down: nobody owns it) |
//! | `wtoken`       | the writer's owner token (write mode only)                          |
//! | `wfence`       | the writer's fencing token                                          |
//! | `winfo`        | the writer's `host \n pid \n since \n meta`                         |
//! | `r:<token>`    | one per read share: `fence \n host \n pid \n since \n meta`          |
//! | `cool_until`   | end of the cool-down, Unix ms (server clock; `cool` mode only)       |
//!
//! Each read share also has its own expiry, as its score in the sorted set `ns{name}:readers`
//! (owner token → Unix ms, server clock), so one reader's renewal or release never touches
//! another's share, and a share whose holder died is dropped once its score has passed, by
//! whichever script looks next. The hash and `readers` always carry the same TTL: the latest
//! share's expiry (or the writer's TTL). A share is live while both its field and its score (in
//! the future) are there.
//!
//! Waiting reuses the mutex's registry (`ns{name}:waiters`, pruned by `prune` of `lua.rs`);
//! writers that wait are also in `ns{name}:writers` (waiter id → when the registration
//! lapses). While that set is not empty, no new reader enters (no writer starvation). Readers
//! block on the shared wake-up list `ns{name}:signal`, writers on their own,
//! `ns{name}:wsignal`. Whenever the lock frees (the writer's release, the last reader's
//! release, the last waiting writer giving up) the script pushes one "look again" element (see
//! `recheck` in `lua.rs`) per live waiting writer to the writers' list, or, when no writer
//! waits, one per live registered waiter to the readers' list: writers go first, else every
//! blocked reader wakes at once and attempts again, and they enter together. Nothing is
//! granted through the lists, so no waiter ever has to claim a grant.
//!
//! Every acquisition, read or write, takes the next value of the name's fencing counter
//! `ns{name}:fence` (the mutex's), so a writer's token is above every token issued before it.

use std::sync::LazyLock;
use std::time::Duration;

use redis::{ConnectionLike, Script, Value};

use super::{
    Attempt, AttemptArgs, Broken, Holder, LockKeys, OwnedTtl, Release, ReleaseArgs, Renewal, count,
    decode_attempt_reply, int, millis, ms, text, unexpected,
};
use crate::error::{Error, Result};

/// What a read-write lock looks like in `inspect`, besides its holder.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct RwState {
    /// A writer holds it (`false`: readers, or nobody during a cool-down).
    pub(crate) writer: bool,
    /// Live read shares.
    pub(crate) readers: u32,
    /// Writers registered as waiting: while there are any, no new reader enters.
    pub(crate) writers_waiting: u32,
}

// Lua functions the scripts below share, one macro each, so that a script defines only the
// functions it calls (each definition costs Redis time on every call). They use `clock()`
// (`clock!`), `rw_wake_all` uses `prune` (`prune!`), `rw_any_live` uses `drop_expired`.

/// Read shares whose expiry has passed: their field and their score go.
macro_rules! rw_drop_expired {
    () => {
        concat!(
            "local function drop_expired(lock, readers)\n\
               local dead = redis.call('ZRANGEBYSCORE', readers, '-inf', clock(), 'LIMIT', 0, 100)\n\
               for _, t in ipairs(dead) do\n\
                 redis.call('ZREM', readers, t)\n\
                 redis.call('HDEL', lock, 'r:' .. t)\n\
               end\n\
             end\n",
        )
    };
}

/// Whether a live share is left (dropping expired ones first when the earliest is).
macro_rules! rw_any_live {
    () => {
        concat!(
            "local function any_live(lock, readers)\n\
               local first = redis.call('ZRANGE', readers, 0, 0, 'WITHSCORES')\n\
               if not first[2] then return false end\n\
               if tonumber(first[2]) > clock() then return true end\n\
               drop_expired(lock, readers)\n\
               return redis.call('ZRANGE', readers, 0, 0)[1] ~= nil\n\
             end\n",
        )
    };
}

/// Whether any writer waits (after forgetting lapsed registrations).
macro_rules! rw_writers_wait {
    () => {
        concat!(
            "local function writers_wait(writers)\n\
               if redis.call('EXISTS', writers) == 0 then return false end\n\
               local dead = redis.call('ZRANGEBYSCORE', writers, '-inf', clock(), 'LIMIT', 0, 100)\n\
               if #dead > 0 then redis.call('ZREM', writers, unpack(dead)) end\n\
               return redis.call('ZRANGE', writers, 0, 0)[1] ~= nil\n\
             end\n",
        )
    };
}

/// `0` when both wake-up lists are lists (or absent), else `-4` (the shared one) or
/// `-6` (the writers'): checked before any write.
macro_rules! rw_lists_ok {
    () => {
        concat!(
            "local function lists_ok(a, b)\n\
               local ta = redis.call('TYPE', a)['ok']\n\
               if ta ~= 'none' and ta ~= 'list' then return -4 end\n\
               local tb = redis.call('TYPE', b)['ok']\n\
               if tb ~= 'none' and tb ~= 'list' then return -6 end\n\
               return 0\n\
             end\n",
        )
    };
}

/// The lock freed: one "look again" per live waiting writer on the writers' list
/// (writers go first), or, with no writer waiting, one per live registered waiter on
/// the shared list (at most 1000). Two lists, so that a reader that wakes, finds a
/// writer waiting and blocks again never takes the writer's wake-up.
macro_rules! rw_wake_all {
    () => {
        concat!(
            "local function wake_all(signal, wsignal, waiters, writers)\n\
               if redis.call('EXISTS', waiters) == 0 then return end\n\
               prune(waiters, writers)\n\
               local list, n = wsignal, #redis.call('ZRANGE', writers, 0, 999)\n\
               if n == 0 then list, n = signal, #redis.call('ZRANGE', waiters, 0, 999) end\n\
               if n == 0 then return end\n\
               local elems = {}\n\
               for i = 1, n do elems[i] = ",
            recheck!(),
            " end\n\
               redis.call('DEL', list)\n\
               redis.call('RPUSH', list, unpack(elems))\n\
               redis.call('PEXPIRE', list, ",
            handoff_grace_ms!(),
            ")\n\
             end\n",
        )
    };
}

/// The lock and its shares live at least `ttl` ms more.
macro_rules! rw_stretch {
    () => {
        concat!(
            "local function stretch(lock, readers, ttl)\n\
               if redis.call('PTTL', lock) < ttl then redis.call('PEXPIRE', lock, ttl) end\n\
               if redis.call('EXISTS', readers) == 1 and redis.call('PTTL', readers) < ttl then\n\
                 redis.call('PEXPIRE', readers, ttl)\n\
               end\n\
             end\n",
        )
    };
}

/// The lock and its shares live until the latest share expires (or at least `floor` ms).
macro_rules! rw_fit {
    () => {
        concat!(
            "local function fit(lock, readers, floor)\n\
               local last = redis.call('ZRANGE', readers, -1, -1, 'WITHSCORES')\n\
               local left = floor\n\
               if last[2] then left = math.max(left, tonumber(last[2]) - clock()) end\n\
               if left > 0 then\n\
                 redis.call('PEXPIRE', lock, left)\n\
                 if last[2] then redis.call('PEXPIRE', readers, left) end\n\
               end\n\
             end\n",
        )
    };
}

/// How long a caller that cannot enter waits at most, and its registration.
macro_rules! rw_register {
    () => {
        concat!(
            "local function register(waiters, id, pttl, cap)\n\
               local wait = cap\n\
               if pttl >= 0 then wait = pttl + 1 end\n\
               local block = math.max(1, math.min(wait, cap))\n\
               local life = block + ",
            waiter_margin_ms!(),
            "\n\
               redis.call('ZADD', waiters, clock() + life, id)\n\
               if redis.call('PTTL', waiters) < life then redis.call('PEXPIRE', waiters, life) end\n\
               return block, life\n\
             end\n",
        )
    };
}

/// Take a read share, or register as a waiter.
///
/// KEYS: lock, fence, waiters, writers, readers.
/// ARGV: token, ttl_ms, holder (`host \n pid \n`), meta, waiter id, register_ms, the owner
/// token of the write lock this thread holds on the same name (a downgrade) or `""`.
///
/// A reader enters when the lock is free or read, and no writer waits; or when the lock is
/// held for writing under the token in the last argument (the same thread downgrades). A
/// caller whose token already holds a share gets `{1, fence, …}` with its stored fencing token
/// (a resent request). Returns `{1, fence, 0, 0, 0}` when it entered; `{0, pttl, block, 0,
/// now}` when not (`pttl`: the writer's remaining TTL, or how long until the registration of
/// the waiting writer that keeps it out lapses; `block`: how long to wait at most, `-1` when
/// not registered); `{-2, …}` when the lock key is not a read-write lock (nothing written),
/// `{-3, …}` when the fence key holds another type, `{-5, …}` when the readers key does.
///
/// **Fast path** (first in the script, before any function is defined): nobody holds the lock,
/// no share is left and nobody waits (one `EXISTS` of the lock, waiters, writers and readers
/// keys). The caller enters with `INCR`, `TIME`, `ZADD`, `HSET` and one `PEXPIRE` per key, and
/// gets the fencing token back as a single integer: what the full path does for a free lock
/// (with no registration of its own to forget and no waiting writer to check), in seven calls
/// instead of eleven, each `redis.call` costing Redis about a microsecond beyond the command
/// (measured 2026-11-26: `git log -p BENCHMARKS.md`). Absent keys cannot hold another type; a
/// fence key of another type is reported before anything is written.
static READ: LazyLock<Script> = LazyLock::new(|| {
    Script::new(concat!(
        // Fast path, before any function is defined: see the doc comment.
        "if redis.call('EXISTS', KEYS[1], KEYS[3], KEYS[4], KEYS[5]) == 0 then\n",
        next_fence!("fence", "KEYS[2]", "ARGV[2]", "return {-3, 0, 0, 0, 0}"),
        "  local t = redis.call('TIME')\n",
        "  local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)\n",
        "  redis.call('ZADD', KEYS[5], now + tonumber(ARGV[2]), ARGV[1])\n",
        "  redis.call('HSET', KEYS[1], 'mode', 'read', 'r:' .. ARGV[1], ",
        fence_text!("fence"),
        " .. '\\n' .. ARGV[3] .. now .. '\\n' .. ARGV[4])\n",
        "  redis.call('PEXPIRE', KEYS[1], ARGV[2])\n",
        "  redis.call('PEXPIRE', KEYS[5], ARGV[2])\n",
        "  return fence\n",
        "end\n",
        clock!(),
        rw_drop_expired!(),
        rw_writers_wait!(),
        rw_stretch!(),
        rw_register!(),
        "local h = redis.pcall('HMGET', KEYS[1], 'mode', 'wtoken')\n",
        "if h['err'] then return {-2, 0, 0, 0, 0} end\n",
        "if h[1] == false and redis.call('EXISTS', KEYS[1]) == 1 then return {-2, 0, 0, 0, 0} end\n",
        "local rt = redis.call('TYPE', KEYS[5])['ok']\n",
        "if rt ~= 'none' and rt ~= 'zset' then return {-5, 0, 0, 0, 0} end\n",
        "local now = clock()\n",
        "local mode = h[1]\n",
        "if mode then\n",
        "  local mine = redis.call('HGET', KEYS[1], 'r:' .. ARGV[1])\n",
        "  if mine then return {1, tonumber(string.match(mine, '^(%d+)')) or 0, 0, 0, 0} end\n",
        "elseif rt ~= 'none' then\n",
        // No lock: no shares either (they share the TTL); drop any left by a foreign DEL.
        "  redis.call('DEL', KEYS[5])\n",
        "end\n",
        "local fresh = not mode\n",
        "if mode == 'read' then drop_expired(KEYS[1], KEYS[5]) end\n",
        "local ok = false\n",
        "if mode == 'write' then\n",
        "  ok = ARGV[7] ~= '' and h[2] == ARGV[7]\n",
        "elseif mode ~= 'cool' then\n",
        "  ok = not writers_wait(KEYS[4])\n",
        "end\n",
        "if ok then\n",
        next_fence!("fence", "KEYS[2]", "ARGV[2]", "return {-3, 0, 0, 0, 0}"),
        "  if mode ~= 'write' then mode = 'read' end\n",
        "  redis.call('ZREM', KEYS[3], ARGV[5])\n",
        "  local ttl = tonumber(ARGV[2])\n",
        "  redis.call('ZADD', KEYS[5], now + ttl, ARGV[1])\n",
        "  redis.call('HSET', KEYS[1], 'mode', mode, 'r:' .. ARGV[1], ",
        fence_text!("fence"),
        " .. '\\n' .. ARGV[3] .. now .. '\\n' .. ARGV[4])\n",
        // A lock made just now has no TTL yet, and neither has its new set of shares.
        "  if fresh then\n",
        "    redis.call('PEXPIRE', KEYS[1], ttl)\n",
        "    redis.call('PEXPIRE', KEYS[5], ttl)\n",
        "  else\n",
        "    stretch(KEYS[1], KEYS[5], ttl)\n",
        "  end\n",
        "  return {1, fence, 0, 0, 0}\n",
        "end\n",
        "local pttl = -2\n",
        "if mode == 'write' or mode == 'cool' then\n",
        "  pttl = redis.call('PTTL', KEYS[1])\n",
        "else\n",
        "  local first = redis.call('ZRANGE', KEYS[4], 0, 0, 'WITHSCORES')\n",
        "  pttl = math.max(0, tonumber(first[2]) - now)\n",
        "end\n",
        "local cap = tonumber(ARGV[6])\n",
        "if cap <= 0 then return {0, pttl, -1, 0, 0} end\n",
        "local block = register(KEYS[3], ARGV[5], pttl, cap)\n",
        "return {0, pttl, block, 0, now}\n",
    ))
});

/// Take the write lock, or register as a waiting writer (which keeps new readers out).
///
/// KEYS: lock, fence, waiters, writers, readers.
/// ARGV: token, ttl_ms, holder (`host \n pid \n`), meta, waiter id, register_ms.
///
/// The writer enters when nobody holds the lock (no live share, no writer, no cool-down). A
/// caller whose token already holds it gets `{1, fence, …}` with its stored fencing token.
/// Replies as `READ`; when readers hold the lock, `pttl` is the time until the earliest
/// share expires, so a waiter comes back when a crashed reader's share is gone at the latest.
static WRITE: LazyLock<Script> = LazyLock::new(|| {
    Script::new(concat!(
        clock!(),
        rw_drop_expired!(),
        rw_register!(),
        "local h = redis.pcall('HMGET', KEYS[1], 'mode', 'wtoken', 'wfence')\n",
        "if h['err'] then return {-2, 0, 0, 0, 0} end\n",
        "if h[1] == false and redis.call('EXISTS', KEYS[1]) == 1 then return {-2, 0, 0, 0, 0} end\n",
        "local rt = redis.call('TYPE', KEYS[5])['ok']\n",
        "if rt ~= 'none' and rt ~= 'zset' then return {-5, 0, 0, 0, 0} end\n",
        "if h[2] == ARGV[1] then return {1, tonumber(h[3]) or 0, 0, 0, 0} end\n",
        "local now = clock()\n",
        "local mode = h[1]\n",
        "if mode == 'read' then drop_expired(KEYS[1], KEYS[5]) end\n",
        "local free = mode == false or (mode == 'read' and redis.call('ZRANGE', KEYS[5], 0, 0)[1] == nil)\n",
        "if free then\n",
        next_fence!("fence", "KEYS[2]", "ARGV[2]", "return {-3, 0, 0, 0, 0}"),
        "  redis.call('ZREM', KEYS[3], ARGV[5])\n",
        "  redis.call('ZREM', KEYS[4], ARGV[5])\n",
        "  redis.call('DEL', KEYS[1], KEYS[5])\n",
        "  redis.call('HSET', KEYS[1], 'mode', 'write', 'wtoken', ARGV[1], 'wfence', fence, 'winfo', ARGV[3] .. now .. '\\n' .. ARGV[4])\n",
        "  redis.call('PEXPIRE', KEYS[1], ARGV[2])\n",
        "  return {1, fence, 0, 0, 0}\n",
        "end\n",
        "local pttl = -2\n",
        "if mode == 'read' then\n",
        "  local first = redis.call('ZRANGE', KEYS[5], 0, 0, 'WITHSCORES')\n",
        "  pttl = math.max(0, tonumber(first[2]) - now)\n",
        "else\n",
        "  pttl = redis.call('PTTL', KEYS[1])\n",
        "end\n",
        "local cap = tonumber(ARGV[6])\n",
        "if cap <= 0 then return {0, pttl, -1, 0, 0} end\n",
        "local block, life = register(KEYS[3], ARGV[5], pttl, cap)\n",
        "redis.call('ZADD', KEYS[4], now + life, ARGV[5])\n",
        "if redis.call('PTTL', KEYS[4]) < life then redis.call('PEXPIRE', KEYS[4], life) end\n",
        "return {0, pttl, block, 0, now}\n",
    ))
});

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

/// Give a read share up. When it was the last one (and no writer holds the lock), the lock is
/// deleted, or kept ownerless for the cool-down, and every waiter is woken.
/// KEYS: lock, readers, waiters, writers, signal, writers' wake-up list. ARGV: token, `1` to
/// ignore the cool-down
/// (an undone acquisition) or `0`, the releaser's leftover waiter id or "", cool-down ms.
/// Returns `1` released, `2` released and kept for the cool-down, `0` late (the share was
/// already gone), `-1` lost (a writer, or another type, is there now), `-4` the signal key
/// holds another type (nothing changed).
///
/// **Fast path** (first, before any function is defined): the last reader leaves a read lock
/// nobody waits for, with no registration to forget and no cool-down to keep (one `EXISTS` of
/// the waiters, the lock's `mode` and the share's field in one `HMGET`, the first two shares in
/// one `ZRANGE`: only this one). The lock and its shares go in one `DEL`, and `TIME` tells a
/// late release: what the full path does then, in five calls instead of nine. Otherwise what it
/// read is kept for the full path, which reads nothing twice.
static RELEASE_READ: LazyLock<Script> = LazyLock::new(|| {
    Script::new(concat!(
        // Fast path, before any function is defined: see the doc comment.
        "local waiting = redis.call('EXISTS', KEYS[3]) == 1\n",
        "local h = nil\n",
        "if not waiting then\n",
        "  h = redis.pcall('HMGET', KEYS[1], 'mode', 'r:' .. ARGV[1])\n",
        "  if h['err'] then return -1 end\n",
        "  if h[1] == 'read' and h[2] and ARGV[3] == '' and (ARGV[2] == '1' or ARGV[4] == '0') then\n",
        // A `pcall` error (another type) has no `[1]`: the full path reports it.
        "    local first = redis.pcall('ZRANGE', KEYS[2], 0, 1, 'WITHSCORES')\n",
        "    if first[1] == ARGV[1] and first[3] == nil then\n",
        "      redis.call('DEL', KEYS[1], KEYS[2])\n",
        "      local t = redis.call('TIME')\n",
        "      if tonumber(first[2]) > tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000) then return 1 end\n",
        "      return 0\n",
        "    end\n",
        "  end\n",
        "end\n",
        clock!(),
        prune!(),
        rw_drop_expired!(),
        rw_any_live!(),
        rw_lists_ok!(),
        rw_wake_all!(),
        rw_fit!(),
        // The wake-up lists matter (and are checked, before any write) only with waiters.
        "if waiting then\n",
        "  local lk = lists_ok(KEYS[5], KEYS[6])\n",
        "  if lk ~= 0 then return lk end\n",
        "  h = redis.pcall('HMGET', KEYS[1], 'mode', 'r:' .. ARGV[1])\n",
        "  if h['err'] then return -1 end\n",
        "end\n",
        "if h[1] == false and redis.call('EXISTS', KEYS[1]) == 1 then return -1 end\n",
        "local s = redis.pcall('ZSCORE', KEYS[2], ARGV[1])\n",
        "if type(s) == 'table' then return -1 end\n",
        "if ARGV[3] ~= '' then redis.call('ZREM', KEYS[3], ARGV[3]) end\n",
        "local live = h[2] and s and tonumber(s) > clock()\n",
        "if s then redis.call('ZREM', KEYS[2], ARGV[1]) end\n",
        "if h[2] then redis.call('HDEL', KEYS[1], 'r:' .. ARGV[1]) end\n",
        "if not h[2] then\n",
        "  if h[1] == 'write' then return -1 end\n",
        "  return 0\n",
        "end\n",
        "local code = 0\n",
        "if live then code = 1 end\n",
        "if h[1] ~= 'read' then return code end\n",
        "if any_live(KEYS[1], KEYS[2]) then\n",
        "  fit(KEYS[1], KEYS[2], 0)\n",
        "  return code\n",
        "end\n",
        "redis.call('DEL', KEYS[1], KEYS[2])\n",
        "local cool = tonumber(ARGV[4]) or 0\n",
        "if live and cool > 0 and ARGV[2] ~= '1' then\n",
        "  redis.call('HSET', KEYS[1], 'mode', 'cool', 'cool_until', clock() + cool)\n",
        "  redis.call('PEXPIRE', KEYS[1], cool)\n",
        "  code = 2\n",
        "end\n",
        "if waiting then wake_all(KEYS[5], KEYS[6], KEYS[3], KEYS[4]) end\n",
        "return code\n",
    ))
});

/// Give the write lock up: to the shares of a downgrade if there are any (the lock turns
/// read), else delete it or keep it ownerless for the cool-down; then wake every waiter.
/// KEYS, ARGV and replies as `RELEASE_READ`; `0` (late) only when the key is gone, `-1`
/// (lost) when anyone else holds it now.
static RELEASE_WRITE: LazyLock<Script> = LazyLock::new(|| {
    Script::new(concat!(
        clock!(),
        prune!(),
        rw_drop_expired!(),
        rw_any_live!(),
        rw_lists_ok!(),
        rw_wake_all!(),
        rw_fit!(),
        "local waiting = redis.call('EXISTS', KEYS[3]) == 1\n",
        "if waiting then\n",
        "  local lk = lists_ok(KEYS[5], KEYS[6])\n",
        "  if lk ~= 0 then return lk end\n",
        "end\n",
        "local h = redis.pcall('HMGET', KEYS[1], 'mode', 'wtoken')\n",
        "if h['err'] then return -1 end\n",
        "if h[2] ~= ARGV[1] then\n",
        "  if h[1] == false and redis.call('EXISTS', KEYS[1]) == 0 then return 0 end\n",
        "  return -1\n",
        "end\n",
        "if ARGV[3] ~= '' then redis.call('ZREM', KEYS[3], ARGV[3]) end\n",
        "local code = 1\n",
        "if any_live(KEYS[1], KEYS[2]) then\n",
        "  redis.call('HDEL', KEYS[1], 'wtoken', 'wfence', 'winfo')\n",
        "  redis.call('HSET', KEYS[1], 'mode', 'read')\n",
        "  fit(KEYS[1], KEYS[2], 0)\n",
        "else\n",
        "  redis.call('DEL', KEYS[1], KEYS[2])\n",
        "  local cool = tonumber(ARGV[4]) or 0\n",
        "  if cool > 0 and ARGV[2] ~= '1' then\n",
        "    redis.call('HSET', KEYS[1], 'mode', 'cool', 'cool_until', clock() + cool)\n",
        "    redis.call('PEXPIRE', KEYS[1], cool)\n",
        "    code = 2\n",
        "  end\n",
        "end\n",
        "if waiting then wake_all(KEYS[5], KEYS[6], KEYS[3], KEYS[4]) end\n",
        "return code\n",
    ))
});

/// A waiter gives up: unregister it; a writer that was the last one waiting lets the readers
/// it kept out in (every waiter is woken, unless a writer holds the lock or it cools down).
/// KEYS: lock, waiters, writers, signal, writers' wake-up list. ARGV: waiter id. Returns `1`.
static LEAVE: LazyLock<Script> = LazyLock::new(|| {
    Script::new(concat!(
        clock!(),
        prune!(),
        rw_writers_wait!(),
        rw_lists_ok!(),
        rw_wake_all!(),
        "redis.call('ZREM', KEYS[2], ARGV[1])\n",
        "if redis.call('ZREM', KEYS[3], ARGV[1]) == 1 and not writers_wait(KEYS[3]) then\n",
        "  local m = redis.pcall('HGET', KEYS[1], 'mode')\n",
        "  if type(m) ~= 'table' and m ~= 'write' and m ~= 'cool' and lists_ok(KEYS[4], KEYS[5]) == 0 then\n",
        "    wake_all(KEYS[4], KEYS[5], KEYS[2], KEYS[3])\n",
        "  end\n",
        "end\n",
        "return 1\n",
    ))
});

/// Remaining TTL of a read share. KEYS: lock, readers. ARGV: token.
/// Returns the ms left, `-2` gone, `-3` another type is there.
static OWNED_TTL_READ: LazyLock<Script> = LazyLock::new(|| {
    Script::new(concat!(
        clock!(),
        "local f = redis.pcall('HGET', KEYS[1], 'r:' .. ARGV[1])\n",
        "if type(f) == 'table' then return -3 end\n",
        "local s = redis.pcall('ZSCORE', KEYS[2], ARGV[1])\n",
        "if type(s) == 'table' then return -3 end\n",
        "if f and s and tonumber(s) > clock() then return tonumber(s) - clock() end\n",
        "return -2\n",
    ))
});

/// Remaining TTL of the write lock. KEYS: lock. ARGV: token.
/// Returns the PTTL, `-2` gone, `-3` not ours.
static OWNED_TTL_WRITE: LazyLock<Script> = LazyLock::new(|| {
    Script::new(concat!(
        "local t = redis.pcall('HGET', KEYS[1], 'wtoken')\n",
        "if type(t) == 'table' then return -3 end\n",
        "if t == ARGV[1] then return redis.call('PTTL', KEYS[1]) end\n",
        "if redis.call('EXISTS', KEYS[1]) == 0 then return -2 end\n",
        "return -3\n",
    ))
});

/// Who holds the lock. KEYS: lock, readers, waiters, writers.
/// Returns `{}` when free, `{-2}` when the key is not a read-write lock, else `{mode, pttl,
/// fence, info, readers, waiters, writers_waiting, cool_until}`: the writer's fencing token
/// and holder information, or those of the live share that expires first; `readers` counts
/// the live shares, `waiters` the live registrations, `writers_waiting` the writers among them.
static INSPECT: LazyLock<Script> = LazyLock::new(|| {
    Script::new(concat!(
        clock!(),
        "local h = redis.pcall('HMGET', KEYS[1], 'mode', 'wfence', 'winfo', 'cool_until')\n",
        "if h['err'] then return {-2} end\n",
        "if h[1] == false then\n",
        "  if redis.call('EXISTS', KEYS[1]) == 0 then return {} end\n",
        "  return {-2}\n",
        "end\n",
        "local now = clock()\n",
        "local live = redis.pcall('ZRANGEBYSCORE', KEYS[2], '(' .. now, '+inf')\n",
        "if live['err'] then live = {} end\n",
        "local fence, info = h[2] or '0', h[3] or ''\n",
        "if h[1] ~= 'write' and live[1] then\n",
        "  local r = redis.call('HGET', KEYS[1], 'r:' .. live[1]) or ''\n",
        "  fence = string.match(r, '^(%d+)') or '0'\n",
        "  info = string.sub(r, #fence + 2)\n",
        "end\n",
        "local w = redis.pcall('ZRANGEBYSCORE', KEYS[3], '(' .. now, '+inf')\n",
        "if w['err'] then w = {} end\n",
        "local ww = redis.pcall('ZRANGEBYSCORE', KEYS[4], '(' .. now, '+inf')\n",
        "if ww['err'] then ww = {} end\n",
        "return {h[1], redis.call('PTTL', KEYS[1]), fence, info, #live, #w, #ww, h[4] or '0'}\n",
    ))
});

/// Operator's release: delete the lock (writer and every share) and wake every waiter.
/// KEYS: lock, readers, waiters, writers, signal, writers' wake-up list. Returns `{}` when
/// free, `{-2}` when the key is not a read-write lock, `{-4}` / `{-6}` when the shared / the
/// writers' wake-up list holds another type (nothing changed),
/// else `{host, pid}` of the writer (or of one reader).
static FORCE_RELEASE: LazyLock<Script> = LazyLock::new(|| {
    Script::new(concat!(
        clock!(),
        prune!(),
        rw_lists_ok!(),
        rw_wake_all!(),
        "local h = redis.pcall('HMGET', KEYS[1], 'mode', 'winfo')\n",
        "if h['err'] then return {-2} end\n",
        "if h[1] == false then\n",
        "  if redis.call('EXISTS', KEYS[1]) == 0 then return {} end\n",
        "  return {-2}\n",
        "end\n",
        "local lk = lists_ok(KEYS[5], KEYS[6])\n",
        "if lk ~= 0 then return {tostring(lk)} end\n",
        "local info = h[2] or ''\n",
        "if h[1] == 'read' then\n",
        "  local first = redis.pcall('ZRANGE', KEYS[2], 0, 0)\n",
        "  if not first['err'] and first[1] then\n",
        "    local r = redis.call('HGET', KEYS[1], 'r:' .. first[1]) or ''\n",
        "    info = string.sub(r, (string.find(r, '\\n', 1, true) or #r) + 1)\n",
        "  end\n",
        "end\n",
        "local host, pid = string.match(info, '^([^\\n]*)\\n([^\\n]*)\\n')\n",
        "redis.call('DEL', KEYS[1], KEYS[2])\n",
        "wake_all(KEYS[5], KEYS[6], KEYS[3], KEYS[4])\n",
        "return {host or '', pid or ''}\n",
    ))
});

// ---------------------------------------------------------------------------------------------
// Typed calls: the only code that builds `KEYS`/`ARGV` for these scripts or reads their codes.

/// The wake-up list a waiter of `side` blocks on: writers have their own, so that readers
/// that wake and block again never take a writer's wake-up.
pub(crate) fn wake_list(keys: &LockKeys, side: Side) -> String {
    match side {
        Side::Read => keys.signal.clone(),
        Side::Write => keys.writer_signal(),
    }
}

/// Read or write: which scripts a call uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Side {
    Read,
    Write,
}

/// `READ` / `WRITE`: take a share or the write lock, or register as a waiter. `under`: the
/// owner token of the write lock this thread holds on the name (a read taken under it is a
/// downgrade), else `""`.
pub(crate) fn acquire(
    con: &mut dyn ConnectionLike,
    side: Side,
    a: &AttemptArgs<'_>,
    under: &str,
) -> Result<Attempt> {
    let keys = a.keys;
    let script = match side {
        Side::Read => &*READ,
        Side::Write => &*WRITE,
    };
    let (writers, readers) = (keys.writers(), keys.readers());
    let keys_ = [
        keys.lock.as_bytes(),
        keys.fence.as_bytes(),
        keys.waiters.as_bytes(),
        writers.as_bytes(),
        readers.as_bytes(),
    ];
    let mut digits = [[0; 20]; 2];
    let [token, ttl, holder, meta, waiter, register] = a.script_args(&mut digits);
    let args = [token, ttl, holder, meta, waiter, register, under.as_bytes()];
    // `WRITE` takes no downgrade token.
    let args = match side {
        Side::Read => &args[..],
        Side::Write => &args[..6],
    };
    let reply = super::evalsha(con, script, &keys_, args)?;
    decode_acquire(keys, reply)
}

/// `READ`'s fast path answers with the fencing token alone; otherwise five integers.
fn decode_acquire(keys: &LockKeys, reply: Value) -> Result<Attempt> {
    let mut attempt = decode_attempt_reply(
        reply,
        |code| match code {
            -2 => Some(keys.lock.clone()),
            -3 => Some(keys.fence.clone()),
            -5 => Some(keys.readers()),
            _ => None,
        },
        "unexpected read-write lock acquire reply",
    )?;
    // Nothing is ever granted through the wake-up list, so `fresh` does not matter.
    if let Attempt::Busy { fresh, .. } = &mut attempt {
        *fresh = false;
    }
    Ok(attempt)
}

/// `RENEW_READ` / `RENEW_WRITE`.
pub(crate) fn renew(
    con: &mut dyn ConnectionLike,
    side: Side,
    keys: &LockKeys,
    token: &str,
    ttl: Duration,
) -> Result<Renewal> {
    let r: i64 = match side {
        Side::Read => RENEW_READ
            .key(&keys.lock)
            .key(keys.readers())
            .arg(token)
            .arg(ms(ttl))
            .invoke(con)?,
        // The shares' key as an argument: see `RENEW_WRITE`.
        Side::Write => RENEW_WRITE
            .key(&keys.lock)
            .arg(token)
            .arg(ms(ttl))
            .arg(keys.readers())
            .invoke(con)?,
    };
    Ok(decode_renew(r))
}

fn decode_renew(r: i64) -> Renewal {
    match r {
        1 => Renewal::Renewed,
        0 => Renewal::Gone,
        _ => Renewal::NotOurs,
    }
}

/// `RELEASE_READ` / `RELEASE_WRITE`. `r.undo`: the acquisition is undone (no cool-down).
/// Nothing is granted through a read-write lock's wake-up lists, so `r.grant` goes unused.
pub(crate) fn release(
    con: &mut dyn ConnectionLike,
    side: Side,
    r: &ReleaseArgs<'_>,
) -> Result<Release> {
    let keys = r.keys;
    let script = match side {
        Side::Read => &*RELEASE_READ,
        Side::Write => &*RELEASE_WRITE,
    };
    let (readers, writers, writer_signal) = (keys.readers(), keys.writers(), keys.writer_signal());
    let reply = super::evalsha(
        con,
        script,
        &[
            keys.lock.as_bytes(),
            readers.as_bytes(),
            keys.waiters.as_bytes(),
            writers.as_bytes(),
            keys.signal.as_bytes(),
            writer_signal.as_bytes(),
        ],
        &[
            r.token.as_bytes(),
            if r.undo { b"1" } else { b"0" },
            r.registration.as_bytes(),
            super::resp::decimal(ms(r.cooldown), &mut [0; 20]),
        ],
    )?;
    let r: i64 = redis::from_redis_value(reply).map_err(redis::RedisError::from)?;
    decode_release(keys, r)
}

fn decode_release(keys: &LockKeys, r: i64) -> Result<Release> {
    Ok(match r {
        1 => Release::Released,
        2 => Release::Kept,
        0 => Release::Late,
        -4 => {
            return Err(Error::WrongType {
                redis_key: keys.signal.clone(),
            });
        }
        -6 => {
            return Err(Error::WrongType {
                redis_key: keys.writer_signal(),
            });
        }
        _ => Release::Lost,
    })
}

/// `LEAVE`: a waiter gives up.
pub(crate) fn leave(con: &mut dyn ConnectionLike, keys: &LockKeys, waiter: &str) -> Result<()> {
    LEAVE
        .key(&keys.lock)
        .key(&keys.waiters)
        .key(keys.writers())
        .key(&keys.signal)
        .key(keys.writer_signal())
        .arg(waiter)
        .invoke::<i64>(con)?;
    Ok(())
}

/// `OWNED_TTL_READ` / `OWNED_TTL_WRITE`.
pub(crate) fn owned_ttl(
    con: &mut dyn ConnectionLike,
    side: Side,
    keys: &LockKeys,
    token: &str,
) -> Result<OwnedTtl> {
    let r: i64 = match side {
        Side::Read => OWNED_TTL_READ
            .key(&keys.lock)
            .key(keys.readers())
            .arg(token)
            .invoke(con)?,
        Side::Write => OWNED_TTL_WRITE.key(&keys.lock).arg(token).invoke(con)?,
    };
    Ok(decode_owned_ttl(r))
}

fn decode_owned_ttl(r: i64) -> OwnedTtl {
    match r {
        -1 => OwnedTtl::NoExpiry,
        -2 => OwnedTtl::Gone,
        -3 => OwnedTtl::NotOurs,
        ms => OwnedTtl::Left(Duration::from_millis(u64::try_from(ms).unwrap_or(0))),
    }
}

/// `INSPECT`: who holds the lock, `None` when it is free; [`Error::WrongType`] when the key is
/// not a read-write lock (a mutex, or foreign data).
pub(crate) fn inspect(con: &mut dyn ConnectionLike, keys: &LockKeys) -> Result<Option<Holder>> {
    let v: Vec<Value> = INSPECT
        .key(&keys.lock)
        .key(keys.readers())
        .key(&keys.waiters)
        .key(keys.writers())
        .invoke(con)?;
    decode_inspect(keys, &v)
}

fn decode_inspect(keys: &LockKeys, v: &[Value]) -> Result<Option<Holder>> {
    match v {
        [] => Ok(None),
        [_] => Err(Error::WrongType {
            redis_key: keys.lock.clone(),
        }),
        [
            mode,
            pttl,
            fence,
            info,
            readers,
            waiters,
            writers,
            cool_until,
        ] => {
            let mode = text(mode);
            let info = text(info);
            let mut parts = info.splitn(4, '\n');
            let host = parts.next().unwrap_or("").to_owned();
            let pid = parts.next().and_then(|p| p.parse().ok()).unwrap_or(0);
            let since_ms = parts.next().and_then(|s| s.parse().ok()).unwrap_or(0);
            let meta = parts.next().filter(|m| !m.is_empty()).map(str::to_owned);
            let readers = count(readers);
            Ok(Some(Holder {
                remaining_ttl: int(pttl).and_then(millis),
                host,
                pid,
                since_ms,
                fence: int(fence).and_then(|f| u64::try_from(f).ok()).unwrap_or(0),
                meta,
                hold_until_ms: None,
                owned: mode == "write" || (mode == "read" && readers > 0),
                cool_until_ms: int(cool_until)
                    .and_then(|c| u64::try_from(c).ok())
                    .filter(|c| *c > 0),
                waiters: count(waiters),
                queued: 0,
                queue_head: None,
                rw: Some(RwState {
                    writer: mode == "write",
                    readers,
                    writers_waiting: count(writers),
                }),
                fence_is_counter: false,
            }))
        }
        _ => Err(unexpected("unexpected read-write lock inspect reply")),
    }
}

/// `FORCE_RELEASE`: break the lock whoever holds it, waking every waiter.
pub(crate) fn force_release(con: &mut dyn ConnectionLike, keys: &LockKeys) -> Result<Broken> {
    let v: Vec<String> = FORCE_RELEASE
        .key(&keys.lock)
        .key(keys.readers())
        .key(&keys.waiters)
        .key(keys.writers())
        .key(&keys.signal)
        .key(keys.writer_signal())
        .invoke(con)?;
    match v.as_slice() {
        [] => Ok(None),
        [host, pid] => Ok(Some((host.clone(), pid.parse().unwrap_or(0)))),
        [code] if code == "-4" => Err(Error::WrongType {
            redis_key: keys.signal.clone(),
        }),
        [code] if code == "-6" => Err(Error::WrongType {
            redis_key: keys.writer_signal(),
        }),
        _ => Err(Error::WrongType {
            redis_key: keys.lock.clone(),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The full path's five integers, through the same decoding as a real reply.
    fn decode_five(k: &LockKeys, (a, b, c, d, e): (i64, i64, i64, i64, i64)) -> Result<Attempt> {
        decode_acquire(
            k,
            Value::Array([a, b, c, d, e].into_iter().map(Value::Int).collect()),
        )
    }

    fn keys() -> LockKeys {
        LockKeys::new("lock:", "k").unwrap()
    }

    fn bulk(s: &str) -> Value {
        Value::BulkString(s.as_bytes().to_vec())
    }

    #[test]
    fn acquire_replies_decode() {
        let k = keys();
        assert_eq!(
            decode_five(&k, (1, 7, 0, 0, 0)).unwrap(),
            Attempt::Acquired { fence: 7 }
        );
        assert_eq!(
            decode_five(&k, (0, 250, 251, 0, 99)).unwrap(),
            Attempt::Busy {
                holder_ttl: Some(Duration::from_millis(250)),
                block: Some(Duration::from_millis(251)),
                fresh: false,
                server_ms: 99,
            }
        );
        for (code, key) in [
            (-2, k.lock.clone()),
            (-3, k.fence.clone()),
            (-5, k.readers()),
        ] {
            match decode_five(&k, (code, 0, 0, 0, 0)) {
                Err(Error::WrongType { redis_key }) => assert_eq!(redis_key, key),
                other => panic!("{code}: {other:?}"),
            }
        }
        assert!(decode_five(&k, (9, 0, 0, 0, 0)).is_err());
        // `READ`'s fast path: the fencing token alone.
        assert_eq!(
            decode_acquire(&k, Value::Int(12)).unwrap(),
            Attempt::Acquired { fence: 12 }
        );
        assert!(decode_acquire(&k, Value::Int(0)).is_err());
        assert!(decode_acquire(&k, bulk("12")).is_err());
        // Nothing is granted through a read-write lock's wake-up lists: never `fresh`.
        assert!(matches!(
            decode_five(&k, (0, 5, 6, 1, 7)).unwrap(),
            Attempt::Busy { fresh: false, .. }
        ));
    }

    #[test]
    fn renew_release_and_ttl_codes() {
        assert_eq!(decode_renew(1), Renewal::Renewed);
        assert_eq!(decode_renew(0), Renewal::Gone);
        assert_eq!(decode_renew(-1), Renewal::NotOurs);
        let k = keys();
        assert_eq!(decode_release(&k, 1).unwrap(), Release::Released);
        assert_eq!(decode_release(&k, 2).unwrap(), Release::Kept);
        assert_eq!(decode_release(&k, 0).unwrap(), Release::Late);
        assert_eq!(decode_release(&k, -1).unwrap(), Release::Lost);
        for (code, key) in [(-4, k.signal.clone()), (-6, k.writer_signal())] {
            match decode_release(&k, code) {
                Err(Error::WrongType { redis_key }) => assert_eq!(redis_key, key),
                other => panic!("{code}: {other:?}"),
            }
        }
        assert_eq!(decode_owned_ttl(-2), OwnedTtl::Gone);
        assert_eq!(decode_owned_ttl(-3), OwnedTtl::NotOurs);
        assert_eq!(
            decode_owned_ttl(900),
            OwnedTtl::Left(Duration::from_millis(900))
        );
    }

    #[test]
    fn inspect_reply_decodes() {
        let k = keys();
        assert_eq!(decode_inspect(&k, &[]).unwrap(), None);
        assert!(matches!(
            decode_inspect(&k, &[Value::Int(-2)]),
            Err(Error::WrongType { .. })
        ));
        let v = [
            bulk("read"),
            Value::Int(900),
            bulk("17"),
            bulk("web-1\n4242\n1700000000000\nnightly\nreport"),
            Value::Int(3),
            Value::Int(2),
            Value::Int(1),
            bulk("0"),
        ];
        let h = decode_inspect(&k, &v).unwrap().unwrap();
        assert_eq!(
            (h.host.as_str(), h.pid, h.since_ms, h.fence),
            ("web-1", 4242, 1_700_000_000_000, 17)
        );
        assert_eq!(h.meta.as_deref(), Some("nightly\nreport"));
        assert!(h.owned);
        assert_eq!(
            h.rw,
            Some(RwState {
                writer: false,
                readers: 3,
                writers_waiting: 1
            })
        );
        assert_eq!(h.waiters, 2);
        // Cooling down after a release: nobody owns it.
        let v = [
            bulk("cool"),
            Value::Int(400),
            bulk("0"),
            bulk(""),
            Value::Int(0),
            Value::Int(0),
            Value::Int(0),
            bulk("1700000009000"),
        ];
        let h = decode_inspect(&k, &v).unwrap().unwrap();
        assert!(!h.owned);
        assert_eq!(h.cool_until_ms, Some(1_700_000_009_000));
        assert_eq!((h.host.as_str(), h.pid, h.meta), ("", 0, None));
        assert!(decode_inspect(&k, &[Value::Int(1), Value::Int(2)]).is_err());
    }
}
