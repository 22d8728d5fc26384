//! The semaphore on the wire: its Lua scripts, and one typed function per script (below them).
//! A semaphore of `limit` permits, each permit with its own owner token and expiry, like
//! Redisson's `RPermitExpirableSemaphore`.
//!
//! Keys of semaphore `name` (all with the hash tag `{name}`, see `keys.rs`):
//!
//! | key                | type               | holds                                               |
//! |--------------------|--------------------|-----------------------------------------------------|
//! | `ns{name}`         | sorted set, TTL    | the permits: owner token → expiry (server Unix ms)  |
//! | `ns{name}:holders` | hash, TTL          | owner token → `fence \n host \n pid \n since \n meta` |
//! | `ns{name}:limit`   | string, TTL        | the number of permits, stored by the first acquirer or `set_permits`; its TTL is raised with the permits' |
//! | `ns{name}:fence`, `:waiters`, `:queue`, `:signal`, `:signal:<id>` | | as for the mutex (`mutex.rs`) |
//!
//! A permit whose expiry has passed is no longer held: a script that must know how many are
//! free drops expired ones (`expire_permits`, at most 100 per call) whenever the set looks
//! full (an acquisition: when the earliest expiry has passed; a release granting to a
//! waiter: when no room is left without it). Counting an expired entry can only make a
//! script admit fewer, never more, so pruning is skipped when the count already admits.
//! The two keys' TTL is only raised (to the latest expiry), and always together (every
//! permit has its entry in both), so a key never disappears before a permit in it has
//! expired.
//!
//! A release that frees a permit while waiters are registered does not free it: it *grants*
//! it (a new permit under the grant token with the handoff grace as its expiry, empty holder
//! fields) and pushes `grant fence now` to one wake-up list, as the mutex's `hand_over` does;
//! the popper owns that permit. Several grants can be pending on the shared list at once (one
//! per freed permit), so a push never deletes the list first.

use std::sync::LazyLock;
use std::time::Duration;

use redis::{ConnectionLike, Script, Value};

use super::{
    Attempt, AttemptArgs, Claim, ClaimArgs, LockKeys, OwnedTtl, Release, ReleaseArgs, Renewal,
    count, decode_attempt_reply, int, ms, text, unexpected,
};
use crate::error::{Error, Result};

/// The largest number of permits a semaphore may have. Every permit is an entry in a sorted
/// set that each acquisition scans for expired ones; ten thousand keeps every script short.
pub const MAX_PERMITS: u32 = 10_000;

/// Lua shared by the semaphore's scripts: dropping expired permits, raising the keys' TTL,
/// and granting a freed permit to a waiter. Needs `clock!()` and `prune!()` before it.
///
/// `hand_permit` is called only with waiters registered (the caller has checked). Every
/// `redis.call` costs about a microsecond in these scripts beyond the command's own time
/// (ARCHITECTURE.md, "The semaphore's fast path and handoff"), and a release's grant is on the path from one holder to the next, so it counts its calls: the
/// registered waiters are a `ZCARD` when the prune left only live ones (fewer than its 100),
/// the outstanding grants one `ZRANGE … WITHSCORES` that also finds the lapsed ones, and the
/// grants key's TTL is set outright (every grant lives for the same grace, so the newest
/// one's is the longest). A release passes what it found out as `known`: whether the fair
/// queue exists (its head is read only then).
macro_rules! permits_lua {
    () => {
        concat!(
            "local function expire_permits(permits, holders)\n\
               local dead = redis.call('ZRANGEBYSCORE', permits, '-inf', clock(), 'LIMIT', 0, 100)\n\
               if #dead > 0 then\n\
                 redis.call('ZREM', permits, unpack(dead))\n\
                 redis.call('HDEL', holders, unpack(dead))\n\
               end\n\
             end\n\
             local function live(permits, token)\n\
               local s = redis.call('ZSCORE', permits, token)\n\
               return s and tonumber(s) > clock()\n\
             end\n\
             local function raise_ttl(permits, holders, ttl)\n\
               if redis.call('PTTL', permits) < ttl then\n\
                 redis.call('PEXPIRE', permits, ttl)\n\
                 redis.call('PEXPIRE', holders, ttl)\n\
                 redis.pcall('PEXPIRE', permits .. '",
            limit_suffix!(),
            "', ttl, 'GT')\n\
               end\n\
             end\n\
             local function fence_of(holders, token)\n\
               local info = redis.call('HGET', holders, token) or ''\n\
               return tonumber(string.match(info, '^(%d+)')) or 0\n\
             end\n\
             local function wrong(key, want)\n\
               local t = redis.call('TYPE', key)['ok']\n\
               return t ~= 'none' and t ~= want\n\
             end\n\
             local function hand_permit(permits, holders, fence, signal, waiters, queue, grants, grant, known)\n\
               local forgot = prune(waiters, queue)\n\
               local now = clock()\n\
               local head = nil\n\
               if not known or known.queue then head = redis.call('ZRANGE', queue, 0, 0)[1] end\n\
               local wake = signal\n\
               if head then\n\
                 wake = signal .. ':' .. head\n\
                 if type(redis.pcall('EXISTS', wake)) == 'table' then error(",
            not_local!(),
            ") end\n\
               else\n\
                 local waiting = 0\n\
                 if forgot < 100 then waiting = redis.call('ZCARD', waiters)\n\
                 else waiting = #redis.call('ZRANGEBYSCORE', waiters, '(' .. now, '+inf') end\n\
                 local all = redis.call('ZRANGE', grants, 0, -1, 'WITHSCORES')\n\
                 local old, granted = {}, 0\n\
                 for i = 1, #all, 2 do\n\
                   if tonumber(all[i + 1]) > now then granted = granted + 1 else old[#old + 1] = all[i] end\n\
                 end\n\
                 if #old > 0 then redis.call('ZREM', grants, unpack(old)) end\n\
                 if waiting <= granted then return false end\n\
               end\n\
             ",
            next_fence!("f", "fence", handoff_grace_ms!(), "return false"),
            "\
               if head then\n\
                 redis.call('ZREM', queue, head)\n\
                 redis.call('ZREM', waiters, head)\n\
                 redis.call('DEL', wake)\n\
               else\n\
                 redis.call('ZADD', grants, now + ",
            handoff_grace_ms!(),
            ", grant)\n\
                 redis.call('PEXPIRE', grants, ",
            handoff_grace_ms!(),
            ")\n\
               end\n\
               redis.call('ZADD', permits, now + ",
            handoff_grace_ms!(),
            ", grant)\n\
               redis.call('HSET', holders, grant, ",
            fence_text!("f"),
            " .. '\\n\\n\\n0\\n')\n\
               raise_ttl(permits, holders, ",
            handoff_grace_ms!(),
            ")\n\
               redis.call('RPUSH', wake, grant .. ' ' .. ",
            fence_text!("f"),
            " .. ' ' .. now)\n\
               redis.call('PEXPIRE', wake, ",
            handoff_grace_ms!(),
            ")\n\
               return true\n\
             end\n"
        )
    };
}

/// Take a permit, or register as a waiter.
///
/// KEYS: permits, fence, waiters, queue, the shared wake-up list, the wake-up list the caller
/// blocks on, holders, limit.
/// ARGV: token, ttl_ms, holder (`host \n pid \n`), meta, waiter id, register_ms, flags (`f`
/// fair, `w` registered before in this acquisition), the limit to store if none is stored.
///
/// Who may take a permit: anyone while fewer than `limit` live permits exist and nobody is
/// queued fairly; with fair waiters queued, only the first `free` of the queue (or anyone,
/// when more permits are free than waiters are queued). Granted permits nobody has popped yet
/// count as held.
///
/// Returns `{1, fence, 0, 0, 0}` when acquired (also for a resent request whose token holds a
/// live permit: its stored fence); `{0, pttl, block, 1, after}` when not (`pttl`: time until
/// the earliest permit expires, `-2` when a permit is free but owed to queued fair waiters;
/// `block` as for the mutex's `ACQUIRE`; `after`: the server ms after this reply's, so that a
/// grant stamped at or after it was made after this registration, whatever else is pending on
/// the shared list: with several permits, grants are often pending there, and the stamp alone
/// vouches for a grant, so `fresh` is always `1`); `{-2, …}` when the permits key holds
/// another type (a mutex of that name, say), `{-3, …}` the fence key, `{-4, …}` the wake-up
/// list, `{-5, …}` the holders key, `{-6, …}` the limit key. Types are checked before
/// anything is written.
///
/// **Fast path** (first in the script, before any function is defined): a caller that has
/// not registered before finds no permit held, no fair queue and no pending wake-up (one
/// `EXISTS` of the permits, holders, queue and shared wake-up keys) and a limit of at least
/// one (or none stored: it stores its own). It takes a permit with `INCR`, `TIME`, `ZADD`,
/// `HSET` and one `PEXPIRE` per key, and gets the fencing token back as a single integer.
/// Nothing can be owed to anyone then: a granted permit is an entry of the permits key, a
/// pending wake-up is the list, fair waiters are the queue; non-fair waiters without a
/// pending wake-up never stop a newcomer on the full path either. No expired-permit prune
/// and no fair-queue work: with no permit held there is nothing to prune. `TIME` stays: a
/// permit's expiry is compared with the server clock by every other caller, and a
/// caller's clock running behind would make its permit look expired early, letting one
/// more holder in. Absent keys cannot hold another type; a limit key of another type (or
/// not a count) sends the caller to the full path, which reports it; a fence key of another
/// type is reported before anything is written.
static ACQUIRE: LazyLock<Script> = LazyLock::new(|| {
    Script::new(concat!(
        // Fast path, before any function is defined: see the doc comment.
        "if (ARGV[7] == '' or ARGV[7] == 'f') and redis.call('EXISTS', KEYS[1], KEYS[4], KEYS[5], KEYS[7]) == 0 then\n",
        "  local stored = redis.pcall('GET', KEYS[8])\n",
        "  if not stored or (type(stored) == 'string' and (tonumber(stored) or 0) >= 1) then\n",
        next_fence!("fence", "KEYS[2]", "ARGV[2]", "return {-3, 0, 0, 0, 0}"),
        "    if not stored then redis.call('SET', KEYS[8], ARGV[8], 'PX', ARGV[2]) end\n",
        "    local t = redis.call('TIME')\n",
        "    local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)\n",
        "    redis.call('ZADD', KEYS[1], now + tonumber(ARGV[2]), ARGV[1])\n",
        "    redis.call('HSET', KEYS[7], ARGV[1], ",
        fence_text!("fence"),
        " .. '\\n' .. ARGV[3] .. now .. '\\n' .. ARGV[4])\n",
        "    redis.call('PEXPIRE', KEYS[1], ARGV[2])\n",
        "    redis.call('PEXPIRE', KEYS[7], ARGV[2])\n",
        "    if stored then redis.call('PEXPIRE', KEYS[8], ARGV[2], 'GT') end\n",
        "    return fence\n",
        "  end\n",
        "end\n",
        clock!(),
        prune!(),
        permits_lua!(),
        // Types are checked by the first read of each key (a `pcall` that fails on another
        // type), and with `TYPE` only for the two keys read later or never.
        "local stored = redis.pcall('GET', KEYS[8])\n",
        "if type(stored) == 'table' then return {-6, 0, 0, 0, 0} end\n",
        "local limit = tonumber(stored)\n",
        "if stored and not limit then return {-6, 0, 0, 0, 0} end\n",
        "local mine = redis.pcall('ZSCORE', KEYS[1], ARGV[1])\n",
        "if type(mine) == 'table' then return {-2, 0, 0, 0, 0} end\n",
        "if wrong(KEYS[7], 'hash') then return {-5, 0, 0, 0, 0} end\n",
        "if mine and tonumber(mine) > clock() then return {1, fence_of(KEYS[7], ARGV[1]), 0, 0, 0} end\n",
        "local pending = redis.pcall('LLEN', KEYS[5])\n",
        "if type(pending) == 'table' then return {-4, 0, 0, 0, 0} end\n",
        "limit = limit or tonumber(ARGV[8])\n",
        "local id = ARGV[5]\n",
        "local fair = string.find(ARGV[7], 'f', 1, true) ~= nil\n",
        "local waited = string.find(ARGV[7], 'w', 1, true) ~= nil\n",
        // The earliest expiry says whether there is anything to prune (and is the wait below).
        "local first = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')\n",
        "if first[2] and tonumber(first[2]) <= clock() then\n",
        "  expire_permits(KEYS[1], KEYS[7])\n",
        "  first = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')\n",
        "end\n",
        "local free = limit - redis.call('ZCARD', KEYS[1])\n",
        "local can = free > 0\n",
        "local head = nil\n",
        "if can and redis.call('EXISTS', KEYS[4]) == 1 then\n",
        "  prune(KEYS[3], KEYS[4])\n",
        "  local rank = redis.call('ZRANK', KEYS[4], id)\n",
        "  if rank then can = rank < free else can = redis.call('ZCARD', KEYS[4]) < free end\n",
        "  head = redis.call('ZRANGE', KEYS[4], 0, 0)[1]\n",
        "end\n",
        "local now = clock()\n",
        "if can then\n",
        // First, so that a fence key of another type fails the script before it wrote anything.
        next_fence!("fence", "KEYS[2]", "ARGV[2]", "return {-3, 0, 0, 0, 0}"),
        "  local ttl = tonumber(ARGV[2])\n",
        // Before `raise_ttl`, which raises the limit's TTL with the permits'.
        "  if not stored then redis.call('SET', KEYS[8], limit, 'PX', ttl) end\n",
        "  redis.call('ZADD', KEYS[1], now + ttl, ARGV[1])\n",
        "  redis.call('HSET', KEYS[7], ARGV[1], ",
        fence_text!("fence"),
        " .. '\\n' .. ARGV[3] .. now .. '\\n' .. ARGV[4])\n",
        "  raise_ttl(KEYS[1], KEYS[7], ttl)\n",
        "  if waited then\n",
        "    redis.call('ZREM', KEYS[3], id)\n",
        "    if fair then\n",
        "      redis.call('ZREM', KEYS[4], id)\n",
        "      redis.call('DEL', KEYS[6])\n",
        "    end\n",
        "  end\n",
        "  return {1, fence, 0, 0, 0}\n",
        "end\n",
        "if not stored then\n",
        "  redis.call('SET', KEYS[8], limit, 'PX', math.max(tonumber(ARGV[2]), redis.call('PTTL', KEYS[1])))\n",
        "end\n",
        // `pending` was read for its type check only: the stamp `now + 1` vouches (see above).
        "local _ = pending\n",
        "local pttl = -2\n",
        "if free <= 0 then\n",
        "  pttl = math.max(0, (tonumber(first[2]) or now) - now)\n",
        "end\n",
        "local cap = tonumber(ARGV[6])\n",
        "if cap <= 0 then return {0, pttl, -1, 1, 0} end\n",
        "local wait = cap\n",
        "if pttl >= 0 then wait = pttl + 1 end\n",
        "local ticket = nil\n",
        "if fair and not redis.call('ZSCORE', KEYS[4], id) then\n",
        "  local tail = redis.call('ZRANGE', KEYS[4], -1, -1, 'WITHSCORES')\n",
        "  ticket = (tonumber(tail[2]) or 0) + 1\n",
        "  if not head then head = redis.call('ZRANGE', KEYS[4], 0, 0)[1] end\n",
        "end\n",
        "if head and head ~= id then\n",
        "  local lapse = redis.call('ZSCORE', KEYS[3], head)\n",
        "  if lapse then wait = math.min(wait, tonumber(lapse) - now + 1) end\n",
        "end\n",
        "local block = math.max(1, math.min(wait, cap))\n",
        "local life = block + ",
        waiter_margin_ms!(),
        "\n",
        "redis.call('ZADD', KEYS[3], now + life, id)\n",
        "if ticket then redis.call('ZADD', KEYS[4], ticket, id) end\n",
        "if redis.call('PTTL', KEYS[3]) < life then redis.call('PEXPIRE', KEYS[3], life) end\n",
        "if fair and redis.call('PTTL', KEYS[4]) < life then redis.call('PEXPIRE', KEYS[4], life) end\n",
        "return {0, pttl, block, 1, now + 1}\n",
    ))
});

/// A waiter makes a granted permit it popped its own: holder information and the full TTL.
/// KEYS: permits, waiters, holders, grants. ARGV: grant token, ttl_ms, holder, meta, waiter
/// id to forget (or "").
/// Returns the fencing token, `-2` when the grant expired (or was broken), `-1` when the
/// permits key holds another type.
static CLAIM: LazyLock<Script> = LazyLock::new(|| {
    Script::new(concat!(
        clock!(),
        prune!(),
        permits_lua!(),
        "if wrong(KEYS[1], 'zset') or wrong(KEYS[3], 'hash') then return -1 end\n",
        "if not live(KEYS[1], ARGV[1]) then\n",
        "  redis.call('ZREM', KEYS[1], ARGV[1])\n",
        "  redis.call('HDEL', KEYS[3], ARGV[1])\n",
        "  return -2\n",
        "end\n",
        "local f = fence_of(KEYS[3], ARGV[1])\n",
        "local now = clock()\n",
        "local ttl = tonumber(ARGV[2])\n",
        "redis.call('ZADD', KEYS[1], now + ttl, ARGV[1])\n",
        "redis.call('HSET', KEYS[3], ARGV[1], ",
        fence_text!("f"),
        " .. '\\n' .. ARGV[3] .. now .. '\\n' .. ARGV[4])\n",
        "raise_ttl(KEYS[1], KEYS[3], ttl)\n",
        "if ARGV[5] ~= '' then redis.call('ZREM', KEYS[2], ARGV[5]) end\n",
        "redis.call('ZREM', KEYS[4], ARGV[1])\n",
        "return f\n",
    ))
});

/// Renew one permit: extend its expiry, never touching another.
/// KEYS: permits, holders. ARGV: token, ttl_ms.
/// Returns `1` renewed, `0` the permit is gone (expired, or broken), `-1` the key holds
/// another type.
static RENEW: LazyLock<Script> = LazyLock::new(|| {
    Script::new(concat!(
        clock!(),
        prune!(),
        permits_lua!(),
        "if wrong(KEYS[1], 'zset') or wrong(KEYS[2], 'hash') then return -1 end\n",
        "if not live(KEYS[1], ARGV[1]) then\n",
        "  redis.call('ZREM', KEYS[1], ARGV[1])\n",
        "  redis.call('HDEL', KEYS[2], ARGV[1])\n",
        "  return 0\n",
        "end\n",
        "local ttl = tonumber(ARGV[2])\n",
        "redis.call('ZADD', KEYS[1], 'XX', clock() + ttl, ARGV[1])\n",
        "raise_ttl(KEYS[1], KEYS[2], ttl)\n",
        "return 1\n",
    ))
});

/// Release one permit, and grant the freed permit to a waiter if there is room under the
/// limit (a lowered limit may leave none).
/// KEYS: permits, fence, signal, waiters, queue, holders, limit, grants. ARGV: token, grant
/// token, the releaser's own waiter id to forget (or "").
/// Returns `1` released, `0` late (the permit had expired or was broken), `-1` the permits
/// key holds another type, `-4` the signal key does (nothing was changed).
///
/// **Fast path** (before any function is defined): the permit is there, the releaser has no
/// registration to forget and no waiter is registered (one `EXISTS`): `HDEL`, `ZREM`, and
/// `TIME` to tell a late release. With nobody registered the full path would grant nothing
/// either; no expired-permit prune (the next acquisition that finds the set full does it);
/// no `ZREM` of the grants key: only a permit taken from a shared grant is listed there,
/// and its holder releases with its registration to forget, so on the full path.
static RELEASE: LazyLock<Script> = LazyLock::new(|| {
    Script::new(concat!(
        "local s = redis.pcall('ZSCORE', KEYS[1], ARGV[1])\n",
        "if type(s) == 'table' then return -1 end\n",
        "if not s then return 0 end\n",
        "local waiting = redis.call('EXISTS', KEYS[4]) == 1\n",
        // Fast path, before any function is defined: see the doc comment.
        "if ARGV[3] == '' and not waiting then\n",
        "  if type(redis.pcall('HDEL', KEYS[6], ARGV[1])) == 'table' then return -1 end\n",
        "  redis.call('ZREM', KEYS[1], ARGV[1])\n",
        "  local t = redis.call('TIME')\n",
        "  if tonumber(s) <= tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000) then return 0 end\n",
        "  return 1\n",
        "end\n",
        clock!(),
        prune!(),
        permits_lua!(),
        // Wake-up list 1, queue 2: which of them exist, in one command; the list's type is
        // checked only when it exists, the queue's head only read when it exists.
        "local known = nil\n",
        "if waiting then\n",
        "  local m = redis.call('EXISTS', KEYS[3], KEYS[5], KEYS[5])\n",
        "  known = {queue = m >= 2}\n",
        "  if m % 2 == 1 and wrong(KEYS[3], 'list') then return -4 end\n",
        "end\n",
        // The holder's entry goes first: a holders key of another type fails here, unwritten.
        "if type(redis.pcall('HDEL', KEYS[6], ARGV[1])) == 'table' then return -1 end\n",
        "redis.call('ZREM', KEYS[1], ARGV[1])\n",
        // Only a permit popped from a shared grant is listed in the grants key, and its holder
        // has a registration to forget.
        "if ARGV[3] ~= '' then\n",
        "  redis.call('ZREM', KEYS[4], ARGV[3])\n",
        "  redis.call('ZREM', KEYS[8], ARGV[1])\n",
        "end\n",
        // With waiters registered, grant the freed permit if there is room under the limit;
        // expired permits only matter when the set looks full.
        "if waiting then\n",
        "  local limit = tonumber(redis.pcall('GET', KEYS[7])) or 0\n",
        "  local held = redis.call('ZCARD', KEYS[1])\n",
        "  if held >= limit then\n",
        "    expire_permits(KEYS[1], KEYS[6])\n",
        "    held = redis.call('ZCARD', KEYS[1])\n",
        "  end\n",
        "  if held < limit then\n",
        "    hand_permit(KEYS[1], KEYS[6], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[8], ARGV[2], known)\n",
        "  end\n",
        "end\n",
        "if tonumber(s) <= clock() then return 0 end\n",
        "return 1\n",
    ))
});

/// A waiter gives up: forget it; a grant pending for it alone goes to the next waiter (or is
/// freed); shared grants that no registered waiter is left to take are freed.
/// KEYS: permits, fence, signal, waiters, queue, own wake-up list, holders, limit, grants.
/// ARGV: waiter id, grant token (for passing on). Returns `1`.
static LEAVE: LazyLock<Script> = LazyLock::new(|| {
    Script::new(concat!(
        clock!(),
        prune!(),
        permits_lua!(),
        "redis.call('ZREM', KEYS[4], ARGV[1])\n",
        "redis.call('ZREM', KEYS[5], ARGV[1])\n",
        "if wrong(KEYS[1], 'zset') or wrong(KEYS[7], 'hash') or wrong(KEYS[3], 'list') or wrong(KEYS[6], 'list') then return 1 end\n",
        "local mine = redis.call('LRANGE', KEYS[6], 0, -1)\n",
        "redis.call('DEL', KEYS[6])\n",
        "local freed = false\n",
        "for _, e in ipairs(mine) do\n",
        "  local g = string.match(e, '^(%S+) ')\n",
        "  if g and redis.call('ZREM', KEYS[1], g) == 1 then\n",
        "    redis.call('HDEL', KEYS[7], g)\n",
        "    freed = true\n",
        "  end\n",
        "end\n",
        "if freed then\n",
        "  expire_permits(KEYS[1], KEYS[7])\n",
        "  local limit = tonumber(redis.pcall('GET', KEYS[8])) or 0\n",
        "  if redis.call('ZCARD', KEYS[1]) < limit and redis.call('EXISTS', KEYS[4]) == 1 then\n",
        "    hand_permit(KEYS[1], KEYS[7], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[9], ARGV[2])\n",
        "  end\n",
        "elseif redis.call('EXISTS', KEYS[4]) == 0 then\n",
        "  for _, e in ipairs(redis.call('LRANGE', KEYS[3], 0, -1)) do\n",
        "    local g = string.match(e, '^(%S+) ')\n",
        "    if g then\n",
        "      redis.call('ZREM', KEYS[1], g)\n",
        "      redis.call('HDEL', KEYS[7], g)\n",
        "      redis.call('ZREM', KEYS[9], g)\n",
        "    end\n",
        "  end\n",
        "  redis.call('DEL', KEYS[3])\n",
        "end\n",
        "return 1\n",
    ))
});

/// The remaining TTL of one permit, for its holder only.
/// KEYS: permits. ARGV: token. Returns the ms left, `-2` gone, `-3` another type.
static OWNED_TTL: LazyLock<Script> = LazyLock::new(|| {
    Script::new(concat!(
        clock!(),
        "local t = redis.call('TYPE', KEYS[1])['ok']\n",
        "if t ~= 'none' and t ~= 'zset' then return -3 end\n",
        "local s = tonumber(redis.call('ZSCORE', KEYS[1], ARGV[1]))\n",
        "if not s or s <= clock() then return -2 end\n",
        "return s - clock()\n",
    ))
});

/// The limit, who waits, and every live permit's remaining TTL and holder information (never
/// its token).
/// KEYS: permits, holders, waiters, queue, limit. Returns `{}` when the semaphore was never
/// used (no limit stored, no permit), `{-2}` when a key holds another type, else `{limit,
/// waiters, queued, pttl_1, info_1, pttl_2, info_2, …}`, earliest expiry first; `info` is
/// `fence \n host \n pid \n since \n meta`.
static INSPECT: LazyLock<Script> = LazyLock::new(|| {
    Script::new(concat!(
        clock!(),
        prune!(),
        permits_lua!(),
        "if wrong(KEYS[1], 'zset') or wrong(KEYS[2], 'hash') or wrong(KEYS[5], 'string') then return {-2} end\n",
        "local stored = redis.call('GET', KEYS[5])\n",
        "if not stored and redis.call('EXISTS', KEYS[1]) == 0 then return {} end\n",
        "local now = clock()\n",
        "local w = redis.pcall('ZRANGEBYSCORE', KEYS[3], '(' .. now, '+inf')\n",
        "if w['err'] then w = {} end\n",
        "local q = redis.pcall('ZRANGE', KEYS[4], 0, -1)\n",
        "if q['err'] then q = {} end\n",
        "local out = {tonumber(stored) or 0, #w, #q}\n",
        "local p = redis.call('ZRANGEBYSCORE', KEYS[1], '(' .. now, '+inf', 'WITHSCORES')\n",
        "for i = 1, #p, 2 do\n",
        "  out[#out + 1] = tonumber(p[i + 1]) - now\n",
        "  out[#out + 1] = redis.call('HGET', KEYS[2], p[i]) or ''\n",
        "end\n",
        "return out\n",
    ))
});

/// Change the limit. Held permits are never revoked: with the limit lowered below the permits
/// in use, new acquisitions wait until fewer than the new limit are held. With room made,
/// up to that many registered waiters are woken to look again (a `recheck!` element each: the
/// fair queue's first on their own lists, the rest on the shared list).
/// KEYS: limit, permits, holders, signal, waiters, queue. ARGV: the new limit, how long to keep
/// it at least (ms; it lives as long as the permits held, like every key of the name).
/// Returns the previous limit (`0`: none was stored), `-2` when a key holds another type.
static SET_LIMIT: LazyLock<Script> = LazyLock::new(|| {
    Script::new(concat!(
        clock!(),
        prune!(),
        permits_lua!(),
        "if wrong(KEYS[1], 'string') or wrong(KEYS[2], 'zset') or wrong(KEYS[3], 'hash') or wrong(KEYS[4], 'list') then return -2 end\n",
        "local stored = redis.call('GET', KEYS[1])\n",
        "if stored and not tonumber(stored) then return -2 end\n",
        "local limit = tonumber(ARGV[1])\n",
        // Kept while permits are held, and for at least `keep` ms (every key of a name expires).
        "redis.call('SET', KEYS[1], limit, 'PX', math.max(tonumber(ARGV[2]), redis.call('PTTL', KEYS[2])))\n",
        "expire_permits(KEYS[2], KEYS[3])\n",
        "local free = limit - redis.call('ZCARD', KEYS[2])\n",
        "if free > 0 and redis.call('EXISTS', KEYS[5]) == 1 then\n",
        "  prune(KEYS[5], KEYS[6])\n",
        "  local n = math.min(free, redis.call('ZCARD', KEYS[5]))\n",
        "  local heads = {}\n",
        "  if n > 0 then heads = redis.call('ZRANGE', KEYS[6], 0, n - 1) end\n",
        "  for _, h in ipairs(heads) do\n",
        "    local wake = KEYS[4] .. ':' .. h\n",
        "    if type(redis.pcall('EXISTS', wake)) == 'table' then return ",
        not_local!(),
        " end\n",
        "  end\n",
        "  for _, h in ipairs(heads) do\n",
        "    local wake = KEYS[4] .. ':' .. h\n",
        "    redis.call('RPUSH', wake, ",
        recheck!(),
        ")\n",
        "    redis.call('PEXPIRE', wake, ",
        handoff_grace_ms!(),
        ")\n",
        "  end\n",
        "  for _ = 1, n - #heads do redis.call('RPUSH', KEYS[4], ",
        recheck!(),
        ") end\n",
        "  if n > #heads then redis.call('PEXPIRE', KEYS[4], ",
        handoff_grace_ms!(),
        ") end\n",
        "end\n",
        "return tonumber(stored) or 0\n",
    ))
});

/// Operator's release of every permit: the permits go, registered waiters are woken to look
/// again (as `SET_LIMIT` does), the limit stays.
/// KEYS: permits, holders, signal, waiters, queue, limit, grants. Returns `{-2}` for another
/// type,
/// else `{host, pid}` of the permit that expires first (`{}` when none was held).
static FORCE_RELEASE: LazyLock<Script> = LazyLock::new(|| {
    Script::new(concat!(
        clock!(),
        prune!(),
        permits_lua!(),
        "if wrong(KEYS[1], 'zset') or wrong(KEYS[2], 'hash') or wrong(KEYS[3], 'list') then return {-2} end\n",
        "local p = redis.call('ZRANGEBYSCORE', KEYS[1], '(' .. clock(), '+inf', 'LIMIT', 0, 1)\n",
        "local out = {}\n",
        "if p[1] then\n",
        "  local info = redis.call('HGET', KEYS[2], p[1]) or ''\n",
        "  local host, pid = string.match(info, '^[^\\n]*\\n([^\\n]*)\\n([^\\n]*)\\n')\n",
        "  out = {host or '', pid or ''}\n",
        "end\n",
        "redis.call('DEL', KEYS[1], KEYS[2], KEYS[7])\n",
        "if redis.call('EXISTS', KEYS[4]) == 1 then\n",
        "  prune(KEYS[4], KEYS[5])\n",
        "  local limit = tonumber(redis.pcall('GET', KEYS[6])) or 0\n",
        "  local n = math.min(limit, redis.call('ZCARD', KEYS[4]))\n",
        "  for _ = 1, n do redis.call('RPUSH', KEYS[3], ",
        recheck!(),
        ") end\n",
        "  if n > 0 then redis.call('PEXPIRE', KEYS[3], ",
        handoff_grace_ms!(),
        ") end\n",
        "end\n",
        "return out\n",
    ))
});

// ---------------------------------------------------------------------------------------------
// Typed calls: the only code that builds `KEYS`/`ARGV` for these scripts or reads their codes.

/// One held permit, as `INSPECT` reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct PermitHolder {
    pub(crate) remaining_ttl: Duration,
    pub(crate) fence: u64,
    /// Empty for a permit a release granted to a waiter that has not claimed it yet.
    pub(crate) host: String,
    pub(crate) pid: u32,
    /// Server clock, Unix ms (0 while unclaimed).
    pub(crate) since_ms: u64,
    pub(crate) meta: Option<String>,
}

/// What `INSPECT` says about a semaphore.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Permits {
    /// The stored limit.
    pub(crate) limit: u32,
    /// Live permits, earliest expiry first.
    pub(crate) holders: Vec<PermitHolder>,
    pub(crate) waiters: u32,
    pub(crate) queued: u32,
}

/// `ACQUIRE`: take a permit, or find none free (and register as a waiter if `register` is
/// set). `limit` is stored if the semaphore has none yet.
pub(crate) fn acquire(
    con: &mut dyn ConnectionLike,
    a: &AttemptArgs<'_>,
    limit: u32,
) -> Result<Attempt> {
    let keys = a.keys;
    let (wake, holders, limit_key) = (
        super::mutex::wake_list(keys, a.waiter, a.fair),
        keys.holders(),
        keys.limit(),
    );
    let mut digits = [[0; 20]; 2];
    let [token, ttl, holder, meta, waiter, register] = a.script_args(&mut digits);
    let mut d_limit = [0; 20];
    let limit = super::resp::decimal(u64::from(limit), &mut d_limit);
    let reply = super::evalsha(
        con,
        &ACQUIRE,
        &[
            keys.lock.as_bytes(),
            keys.fence.as_bytes(),
            keys.waiters.as_bytes(),
            keys.queue.as_bytes(),
            keys.signal.as_bytes(),
            wake.as_bytes(),
            holders.as_bytes(),
            limit_key.as_bytes(),
        ],
        &[
            token,
            ttl,
            holder,
            meta,
            waiter,
            register,
            flags(a.fair, a.registered).as_bytes(),
            limit,
        ],
    )?;
    decode_acquire(keys, reply)
}

fn flags(fair: bool, registered: bool) -> &'static str {
    match (fair, registered) {
        (false, false) => "",
        (false, true) => "w",
        (true, false) => "f",
        (true, true) => "fw",
    }
}

/// The fast path answers with the fencing token alone; the full path with five integers.
fn decode_acquire(keys: &LockKeys, reply: Value) -> Result<Attempt> {
    decode_attempt_reply(
        reply,
        |code| match code {
            -2 => Some(keys.lock.clone()),
            -3 => Some(keys.fence.clone()),
            -4 => Some(keys.signal.clone()),
            -5 => Some(keys.holders()),
            -6 => Some(keys.limit()),
            _ => None,
        },
        "unexpected semaphore acquire reply",
    )
}

/// `CLAIM`: make a popped grant ours and forget the registration `c.registration` (if not
/// empty). A permit has no minimum hold (refused before anything is sent), so `c.min_hold`
/// goes unused.
pub(crate) fn claim(con: &mut dyn ConnectionLike, c: &ClaimArgs<'_>) -> Result<Claim> {
    let keys = c.keys;
    let r: i64 = CLAIM
        .key(&keys.lock)
        .key(&keys.waiters)
        .key(keys.holders())
        .key(keys.grants())
        .arg(c.grant)
        .arg(ms(c.ttl))
        .arg(c.holder)
        .arg(c.meta)
        .arg(c.registration)
        .invoke(con)?;
    Ok(decode_claim(r))
}

fn decode_claim(r: i64) -> Claim {
    match r {
        -2 => Claim::Gone,
        r if r < 0 => Claim::NotOurs,
        fence => Claim::Claimed {
            fence: u64::try_from(fence).unwrap_or(0),
        },
    }
}

/// `RENEW`: extend one permit.
pub(crate) fn renew(
    con: &mut dyn ConnectionLike,
    keys: &LockKeys,
    token: &str,
    ttl: Duration,
) -> Result<Renewal> {
    let r: i64 = RENEW
        .key(&keys.lock)
        .key(keys.holders())
        .arg(token)
        .arg(ms(ttl))
        .invoke(con)?;
    Ok(match r {
        1 => Renewal::Renewed,
        0 => Renewal::Gone,
        _ => Renewal::NotOurs,
    })
}

/// `RELEASE`: give one permit back, granting it to a waiter under `r.grant` if there is room.
/// A permit is given back at once: no minimum hold or cool-down applies (both are refused
/// before anything is sent), so an undo is an ordinary release.
pub(crate) fn release(con: &mut dyn ConnectionLike, r: &ReleaseArgs<'_>) -> Result<Release> {
    let ReleaseArgs {
        keys,
        token,
        grant,
        registration,
        ..
    } = *r;
    let (holders, limit, grants) = (keys.holders(), keys.limit(), keys.grants());
    let reply = super::evalsha(
        con,
        &RELEASE,
        &[
            keys.lock.as_bytes(),
            keys.fence.as_bytes(),
            keys.signal.as_bytes(),
            keys.waiters.as_bytes(),
            keys.queue.as_bytes(),
            holders.as_bytes(),
            limit.as_bytes(),
            grants.as_bytes(),
        ],
        &[token.as_bytes(), grant.as_bytes(), registration.as_bytes()],
    )?;
    let r: i64 = redis::from_redis_value(reply).map_err(redis::RedisError::from)?;
    decode_release(keys, r)
}

fn decode_release(keys: &LockKeys, r: i64) -> Result<Release> {
    Ok(match r {
        1 => Release::Released,
        0 => Release::Late,
        -4 => {
            return Err(Error::WrongType {
                redis_key: keys.signal.clone(),
            });
        }
        _ => Release::Lost,
    })
}

/// `LEAVE`: a waiter gives up; a grant made for it is passed on under `grant`.
pub(crate) fn leave(
    con: &mut dyn ConnectionLike,
    keys: &LockKeys,
    waiter: &str,
    grant: &str,
) -> Result<()> {
    LEAVE
        .key(&keys.lock)
        .key(&keys.fence)
        .key(&keys.signal)
        .key(&keys.waiters)
        .key(&keys.queue)
        .key(keys.wake(waiter))
        .key(keys.holders())
        .key(keys.limit())
        .key(keys.grants())
        .arg(waiter)
        .arg(grant)
        .invoke::<i64>(con)?;
    Ok(())
}

/// `OWNED_TTL`: the remaining TTL of one permit.
pub(crate) fn owned_ttl(
    con: &mut dyn ConnectionLike,
    keys: &LockKeys,
    token: &str,
) -> Result<OwnedTtl> {
    let r: i64 = OWNED_TTL.key(&keys.lock).arg(token).invoke(con)?;
    Ok(match r {
        -2 => OwnedTtl::Gone,
        -3 => OwnedTtl::NotOurs,
        ms => OwnedTtl::Left(Duration::from_millis(u64::try_from(ms).unwrap_or(0))),
    })
}

/// `INSPECT`: the limit, the holders and the waiters; `None` for a semaphore never used.
pub(crate) fn inspect(con: &mut dyn ConnectionLike, keys: &LockKeys) -> Result<Option<Permits>> {
    let v: Vec<Value> = INSPECT
        .key(&keys.lock)
        .key(keys.holders())
        .key(&keys.waiters)
        .key(&keys.queue)
        .key(keys.limit())
        .invoke(con)?;
    decode_inspect(keys, &v)
}

fn decode_inspect(keys: &LockKeys, v: &[Value]) -> Result<Option<Permits>> {
    match v {
        [] => Ok(None),
        [_] => Err(Error::WrongType {
            redis_key: keys.lock.clone(),
        }),
        [limit, waiters, queued, rest @ ..] if rest.len() % 2 == 0 => {
            let holders = rest
                .chunks_exact(2)
                .map(|p| decode_holder(&p[0], &text(&p[1])))
                .collect();
            Ok(Some(Permits {
                limit: count(limit),
                holders,
                waiters: count(waiters),
                queued: count(queued),
            }))
        }
        _ => Err(unexpected("unexpected semaphore inspect reply")),
    }
}

/// One permit's `pttl` and `fence \n host \n pid \n since \n meta`.
fn decode_holder(pttl: &Value, info: &str) -> PermitHolder {
    let mut parts = info.splitn(5, '\n');
    let mut next = || parts.next().unwrap_or("");
    let fence = next().parse().unwrap_or(0);
    let host = next().to_owned();
    let pid = next().parse().unwrap_or(0);
    let since_ms = next().parse().unwrap_or(0);
    let meta = next();
    PermitHolder {
        remaining_ttl: int(pttl)
            .and_then(|t| u64::try_from(t).ok())
            .map_or(Duration::ZERO, Duration::from_millis),
        fence,
        host,
        pid,
        since_ms,
        meta: (!meta.is_empty()).then(|| meta.to_owned()),
    }
}

/// `SET_LIMIT`: store a new limit, waking waiters that now fit; returns the previous limit
/// (`None`: none was stored).
pub(crate) fn set_limit(
    con: &mut dyn ConnectionLike,
    keys: &LockKeys,
    limit: u32,
    keep: Duration,
) -> Result<Option<u32>> {
    let r: i64 = SET_LIMIT
        .key(keys.limit())
        .key(&keys.lock)
        .key(keys.holders())
        .key(&keys.signal)
        .key(&keys.waiters)
        .key(&keys.queue)
        .arg(limit)
        .arg(ms(keep))
        .invoke(con)?;
    match r {
        -2 => Err(Error::WrongType {
            redis_key: keys.lock.clone(),
        }),
        0 => Ok(None),
        old => Ok(u32::try_from(old).ok()),
    }
}

/// `FORCE_RELEASE`: drop every permit; the holder of the first one, `None` when none was held.
pub(crate) fn force_release(
    con: &mut dyn ConnectionLike,
    keys: &LockKeys,
) -> Result<Option<(String, u32)>> {
    let v: Vec<String> = FORCE_RELEASE
        .key(&keys.lock)
        .key(keys.holders())
        .key(&keys.signal)
        .key(&keys.waiters)
        .key(&keys.queue)
        .key(keys.limit())
        .key(keys.grants())
        .invoke(con)?;
    match v.as_slice() {
        [] => Ok(None),
        [host, pid] => Ok(Some((host.clone(), pid.parse().unwrap_or(0)))),
        _ => Err(Error::WrongType {
            redis_key: keys.lock.clone(),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn keys() -> LockKeys {
        LockKeys::new("lock:", "s").unwrap()
    }

    fn bulk(s: &str) -> Value {
        Value::BulkString(s.as_bytes().to_vec())
    }

    fn five(a: i64, b: i64, c: i64, d: i64, e: i64) -> Value {
        Value::Array([a, b, c, d, e].into_iter().map(Value::Int).collect())
    }

    #[test]
    fn acquire_replies_decode() {
        let k = keys();
        // The fast path's reply: the fencing token alone.
        assert_eq!(
            decode_acquire(&k, Value::Int(12)).unwrap(),
            Attempt::Acquired { fence: 12 }
        );
        // Not a fencing token, nor a reply of five integers.
        assert!(decode_acquire(&k, Value::Int(0)).is_err());
        assert!(decode_acquire(&k, Value::Int(-3)).is_err());
        assert!(decode_acquire(&k, Value::Array(vec![Value::Int(1)])).is_err());
        assert!(decode_acquire(&k, Value::Array(vec![bulk("x"); 5])).is_err());
        assert!(decode_acquire(&k, bulk("1")).is_err());
        assert_eq!(
            decode_acquire(&k, five(1, 9, 0, 0, 0)).unwrap(),
            Attempt::Acquired { fence: 9 }
        );
        assert_eq!(
            decode_acquire(&k, five(0, 40, 41, 0, 7)).unwrap(),
            Attempt::Busy {
                holder_ttl: Some(Duration::from_millis(40)),
                block: Some(Duration::from_millis(41)),
                fresh: false,
                server_ms: 7,
            }
        );
        for (code, key) in [
            (-2, k.lock.clone()),
            (-3, k.fence.clone()),
            (-4, k.signal.clone()),
            (-5, k.holders()),
            (-6, k.limit()),
        ] {
            match decode_acquire(&k, five(code, 0, 0, 0, 0)) {
                Err(Error::WrongType { redis_key }) => assert_eq!(redis_key, key),
                other => panic!("{code}: {other:?}"),
            }
        }
        assert!(decode_acquire(&k, five(5, 0, 0, 0, 0)).is_err());
        assert_eq!(flags(true, false), "f");
        assert_eq!(flags(false, true), "w");
    }

    #[test]
    fn claim_and_release_codes() {
        assert_eq!(decode_claim(4), Claim::Claimed { fence: 4 });
        assert_eq!(decode_claim(-2), Claim::Gone);
        assert_eq!(decode_claim(-1), Claim::NotOurs);
        let k = keys();
        assert_eq!(decode_release(&k, 1).unwrap(), Release::Released);
        assert_eq!(decode_release(&k, 0).unwrap(), Release::Late);
        assert_eq!(decode_release(&k, -1).unwrap(), Release::Lost);
        assert!(decode_release(&k, -4).is_err());
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
            Value::Int(3),
            Value::Int(2),
            Value::Int(1),
            Value::Int(900),
            bulk("17\nweb-1\n4242\n1700000000000\nnightly\nrun"),
            Value::Int(800),
            bulk("18\n\n\n0\n"),
        ];
        let p = decode_inspect(&k, &v).unwrap().unwrap();
        assert_eq!((p.limit, p.waiters, p.queued), (3, 2, 1));
        assert_eq!(
            p.holders[0],
            PermitHolder {
                remaining_ttl: Duration::from_millis(900),
                fence: 17,
                host: "web-1".into(),
                pid: 4242,
                since_ms: 1_700_000_000_000,
                meta: Some("nightly\nrun".into()),
            }
        );
        // A granted permit not claimed yet: empty holder fields.
        assert_eq!(p.holders[1].fence, 18);
        assert_eq!((p.holders[1].host.as_str(), p.holders[1].pid), ("", 0));
        assert_eq!(p.holders[1].meta, None);
        // An odd number of permit fields is not a reply these scripts send.
        assert!(decode_inspect(&k, &v[..6]).is_err());
    }
}
