//! The Lua scripts. Every state change of a lock is one of these, run atomically by Redis.
//!
//! Keys travel in `KEYS`, values in `ARGV`; nothing user-supplied is spliced into script text,
//! so the SHA1 of each script is fixed and `EVALSHA` hits the script cache. All keys of one
//! script share one hash tag (see `keys.rs`), so the scripts run unchanged on Redis Cluster.
//!
//! The lock is a hash with a TTL:
//!
//! | field        | value                                                              |
//! |--------------|--------------------------------------------------------------------|
//! | `token`      | owner token (128 random bits, hex); `""` once released but kept    |
//! | `info`       | `host \n pid \n since \n meta`: where the holder runs, when it       |
//! |              | acquired (Redis server clock, Unix ms), its metadata               |
//! | `fence`      | the fencing token of this acquisition                              |
//! | `hold_until` | only with a minimum hold: Unix ms (server clock) before which a     |
//! |              | release keeps the lock                                             |
//! | `handoff`    | only in a lock a release granted to a waiter: whom it is for (the  |
//! |              | fair waiter's id, or `""`: whoever pops the shared wake-up)        |
//!
//! Holder information is one field rather than one field each because every argument and
//! every field costs Redis time on the acquire path, which is most of an uncontended cycle.
//!
//! A lock a release granted to a waiter holds just `token` (the grant), `fence` and `handoff`,
//! with the handoff grace as its TTL, until its new holder claims it (writes its holder
//! information and TTL). Waiters register in `<lock>:waiters` (sorted set: waiter id →
//! Unix ms when the registration lapses); fair waiters also queue in `<lock>:queue` (sorted
//! set: waiter id → ticket, in arrival order). Wake-ups go to `<lock>:signal` (non-fair: any
//! waiter) or `<lock>:signal:<waiter id>` (fair: that waiter), one element at most each.
//! Every one of these keys expires; only the fencing counter `<lock>:fence` stays.

use std::sync::LazyLock;

use redis::Script;

/// Unix milliseconds from the Redis server clock, read at most once per script run (`clock()`).
/// Scripts are replicated by effects (the default since Redis 5), so reading `TIME` inside a
/// script is allowed and safe.
macro_rules! clock {
    () => {
        "local __now = nil\n\
         local function clock()\n\
           if not __now then\n\
             local t = redis.call('TIME')\n\
             __now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)\n\
           end\n\
           return __now\n\
         end\n"
    };
}

/// How long a waiter's registration outlives the wait it announced, in ms: time for the waiter
/// to come back after its `BLPOP` ends. A waiter that has not come back by then is taken for
/// dead (`WAITER_MARGIN` in Rust).
macro_rules! waiter_margin_ms {
    () => {
        "1000"
    };
}

/// How long a release's grant lives unless its waiter claims or renews it, in ms; also the
/// lifetime of the wake-up element (`HANDOFF_GRACE` in Rust).
macro_rules! handoff_grace_ms {
    () => {
        "1000"
    };
}

/// What a script does when a key it builds itself (a fair waiter's wake-up list) is not on this
/// node: only possible while the lock's slot migrates, where Redis refuses such access. Raised
/// before anything is written, as `TRYAGAIN`, which the cluster client retries like the
/// `TRYAGAIN` Redis itself answers for a script whose declared keys are split.
macro_rules! not_local {
    () => {
        "redis.error_reply('TRYAGAIN the wake-up list is not on this node: the slot is migrating')"
    };
}

/// `prune(waiters, queue)`: forgets waiters whose registration lapsed (at most 100 per call,
/// so a script stays short; later calls take the rest). Returns how many it forgot.
macro_rules! prune {
    () => {
        "local function prune(waiters, queue)\n\
           local dead = redis.call('ZRANGEBYSCORE', waiters, '-inf', clock(), 'LIMIT', 0, 100)\n\
           if #dead > 0 then\n\
             redis.call('ZREM', waiters, unpack(dead))\n\
             redis.call('ZREM', queue, unpack(dead))\n\
           end\n\
           return #dead\n\
         end\n"
    };
}

/// `hand_over(lock, fence, signal, waiters, queue, grant)`: called when the lock is being given
/// up. With live waiters registered, the lock is *granted*: it gets the owner token `grant`
/// (made by the releasing client), a new fencing token, the field `handoff` naming whom it is
/// for, and the handoff grace as its TTL; and `grant fence time` (time: server Unix ms) is
/// pushed to one wake-up list. For
/// the head of the fair queue that is its own list (`handoff` = its id; it leaves the queue
/// now); otherwise the shared list (`handoff` = ""), from which Redis hands the element to the
/// waiter that has blocked longest. Whoever pops the element owns the lock under `grant`. A
/// grant nobody takes lapses with the grace. Returns `true` when it granted the lock; with no
/// live waiter it touches nothing and returns `false`.
///
/// The per-waiter list `<signal>:<id>` is the one key a script builds itself instead of
/// receiving it in `KEYS`: the releaser cannot know who heads the queue. It starts with the
/// lock's hash tag, so it is in the same cluster slot as the declared keys (Redis allows
/// undeclared keys of the script's own slot). While that slot migrates, the list may be on the
/// other node, which Redis refuses; `hand_over` touches it before writing anything and raises
/// `TRYAGAIN` (see `not_local`) instead of leaving a half-made grant.
macro_rules! hand_over {
    () => {
        concat!(
            "local function hand_over(lock, fence, signal, waiters, queue, grant)\n\
               if redis.call('EXISTS', waiters) == 0 then return false end\n\
               local forgot = prune(waiters, queue)\n\
               local head = redis.call('ZRANGE', queue, 0, 0)[1]\n\
               if not head and forgot > 0 and redis.call('EXISTS', waiters) == 0 then\n\
                 return false\n\
               end\n\
               local wake = signal\n\
               local target = ''\n\
               if head then\n\
                 target = head\n\
                 wake = signal .. ':' .. head\n\
                 if type(redis.pcall('EXISTS', wake)) == 'table' then error(",
            not_local!(),
            ") end\n\
               end\n\
               local f = redis.pcall('INCR', fence)\n\
               if type(f) == 'table' then return false end\n\
               if head then\n\
                 redis.call('ZREM', queue, head)\n\
                 redis.call('ZREM', waiters, head)\n\
               end\n\
               redis.call('DEL', lock)\n\
               redis.call('HSET', lock, 'token', grant, 'fence', f, 'handoff', target)\n\
               redis.call('PEXPIRE', lock, ",
            handoff_grace_ms!(),
            ")\n\
               redis.call('DEL', wake)\n\
               redis.call('RPUSH', wake, grant .. ' ' .. f .. ' ' .. clock())\n\
               redis.call('PEXPIRE', wake, ",
            handoff_grace_ms!(),
            ")\n\
               return true\n\
             end\n"
        )
    };
}

/// Acquire, or register as a waiter.
///
/// KEYS: lock, fence, waiters, queue, the shared wake-up list, the wake-up list the caller
/// blocks on (the shared one again, or its own in fair mode).
/// ARGV: token, ttl_ms, holder (`host \n pid \n`), meta, min_hold_ms, waiter id,
/// register_ms, flags.
/// `register_ms` is how long the caller may block before it comes back (`0`: it will not
/// wait, so do not register it); `flags` holds `f` for a fair waiter and `w` once the caller
/// has registered before in this acquisition.
///
/// Who may take the lock: anyone when it is free and nobody is queued fairly; while fair
/// waiters are queued, only the head of the queue; a grant nobody has popped yet (see
/// `hand_over`), only the waiter it is for (fair) or any caller that has been waiting (shared),
/// which then removes the pending wake-up.
///
/// A caller whose token already owns the lock gets `{1, fence, 0, 0, 0}` with the stored fencing
/// token and nothing changes: a resent request is answered as the first one was.
///
/// Returns `{1, fence, 0, 0, 0}` when acquired; `{0, pttl, block, fresh, now}` when not (`pttl`: the
/// lock's remaining TTL, `-1` without expiry, `-2` free but owed to the head of the queue;
/// `block`: how long the registered caller should wait for its wake-up at most, `-1` when it
/// was not registered; `fresh`: `1` when no grant the caller could pop was pending, so any
/// grant it pops later was made after this reply; `now`: server Unix ms of this reply, to
/// compare with the time in a grant); `{-2, …}` when the lock key holds another type, `{-3, …}` when
/// the fence key does, `{-4, …}` when the wake-up list does. Types
/// are checked before anything is written: a script that fails half-way keeps what it wrote.
pub(crate) static ACQUIRE: LazyLock<Script> = LazyLock::new(|| {
    Script::new(concat!(
        clock!(),
        prune!(),
        "local sk = redis.call('TYPE', KEYS[5])['ok']\n",
        "if sk ~= 'none' and sk ~= 'list' then return {-4, 0, 0, 0, 0} end\n",
        "local id = ARGV[6]\n",
        "local fair = string.find(ARGV[8], 'f', 1, true) ~= nil\n",
        "local waited = string.find(ARGV[8], 'w', 1, true) ~= nil\n",
        "local h = redis.pcall('HMGET', KEYS[1], 'token', 'handoff', 'fence')\n",
        "if h['err'] then return {-2, 0, 0, 0, 0} end\n",
        // Already ours: a resent request (the cluster client resends after a reply timeout)
        // whose first copy took the lock.
        "if h[1] == ARGV[1] then return {1, tonumber(h[3]) or 0, 0, 0, 0} end\n",
        // A hash without an owner token was not written by redis-lock: never write into it.
        "if h[1] == false and redis.call('EXISTS', KEYS[1]) == 1 then return {-2, 0, 0, 0, 0} end\n",
        "local exists = h[1] ~= false\n",
        "local pending = nil\n",
        "if exists and h[2] then\n",
        "  local list = KEYS[5]\n",
        "  if h[2] ~= '' then list = KEYS[5] .. ':' .. h[2] end\n",
        "  local n = redis.pcall('LLEN', list)\n",
        "  if type(n) == 'table' then return ",
        not_local!(),
        " end\n",
        "  if n > 0 then pending = list end\n",
        "end\n",
        "local head = nil\n",
        "local mine = false\n",
        "if not exists then\n",
        "  if redis.call('EXISTS', KEYS[4]) == 1 then\n",
        "    prune(KEYS[3], KEYS[4])\n",
        "    head = redis.call('ZRANGE', KEYS[4], 0, 0)[1]\n",
        "  end\n",
        "  mine = head == nil or head == id\n",
        "elseif pending then\n",
        "  if h[2] == '' then mine = waited else mine = h[2] == id end\n",
        "end\n",
        "if mine then\n",
        // First, so that a fence key of another type fails the script before it wrote anything.
        "  local fence = redis.pcall('INCR', KEYS[2])\n",
        "  if type(fence) == 'table' then return {-3, 0, 0, 0, 0} end\n",
        "  if exists then redis.call('DEL', KEYS[1]) end\n",
        "  if pending then redis.call('DEL', pending) end\n",
        "  if waited then\n",
        "    redis.call('ZREM', KEYS[3], id)\n",
        "    if fair then\n",
        "      redis.call('ZREM', KEYS[4], id)\n",
        "      redis.call('DEL', KEYS[6])\n",
        "    end\n",
        "  end\n",
        "  local now = clock()\n",
        "  local info = ARGV[3] .. now .. '\\n' .. ARGV[4]\n",
        "  local hold = tonumber(ARGV[5])\n",
        "  if hold > 0 then\n",
        "    redis.call('HSET', KEYS[1], 'token', ARGV[1], 'fence', fence, 'info', info, 'hold_until', now + hold)\n",
        "  else\n",
        "    redis.call('HSET', KEYS[1], 'token', ARGV[1], 'fence', fence, 'info', info)\n",
        "  end\n",
        "  redis.call('PEXPIRE', KEYS[1], ARGV[2])\n",
        "  return {1, fence, 0, 0, 0}\n",
        "end\n",
        // A fair waiter only ever pops grants made for it, and one pending for it now would
        // have been taken above; a non-fair waiter could pop the shared grant pending now.
        "local fresh = 1\n",
        "if pending and h[2] == '' and not fair then fresh = 0 end\n",
        "local pttl = -2\n",
        "if exists then pttl = redis.call('PTTL', KEYS[1]) end\n",
        "local cap = tonumber(ARGV[7])\n",
        "if cap <= 0 then return {0, pttl, -1, fresh, 0} end\n",
        "local now = clock()\n",
        "local wait = cap\n",
        "if pttl >= 0 then wait = pttl + 1 end\n",
        "local ticket = nil\n",
        "if fair and not redis.call('ZSCORE', KEYS[4], id) then\n",
        "  local tail = redis.call('ZRANGE', KEYS[4], -1, -1, 'WITHSCORES')\n",
        "  ticket = (tonumber(tail[2]) or 0) + 1\n",
        "  if not head then head = redis.call('ZRANGE', KEYS[4], 0, 0)[1] end\n",
        "end\n",
        // Behind a head that dies, nothing would wake us: come back when its registration
        // lapses at the latest.
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
        "return {0, pttl, block, fresh, now}\n",
    ))
});

/// A waiter that popped a grant it cannot vouch for (it may have been made before the waiter
/// registered, or the waiter needs its holder information or minimum hold in place at once)
/// makes it its own: compare the grant token, then write the holder information and the full
/// TTL. Also the first renewal of a grant taken without this.
/// KEYS: lock, waiters. ARGV: token (the grant), ttl_ms, holder, meta, min_hold_ms, waiter id.
/// Returns the fencing token, or `-1` when the grant is not there any more.
pub(crate) static CLAIM: LazyLock<Script> = LazyLock::new(|| {
    Script::new(concat!(
        "local h = redis.pcall('HMGET', KEYS[1], 'token', 'fence')\n",
        "if h['err'] or h[1] ~= ARGV[1] then return -1 end\n",
        "local t = redis.call('TIME')\n",
        "local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)\n",
        "local info = ARGV[3] .. now .. '\\n' .. ARGV[4]\n",
        "local hold = tonumber(ARGV[5])\n",
        "redis.call('DEL', KEYS[1])\n",
        "if hold > 0 then\n",
        "  redis.call('HSET', KEYS[1], 'token', ARGV[1], 'fence', h[2], 'info', info, 'hold_until', now + hold)\n",
        "else\n",
        "  redis.call('HSET', KEYS[1], 'token', ARGV[1], 'fence', h[2], 'info', info)\n",
        "end\n",
        "redis.call('PEXPIRE', KEYS[1], ARGV[2])\n",
        "if ARGV[6] ~= '' then redis.call('ZREM', KEYS[2], ARGV[6]) end\n",
        "return tonumber(h[2])\n",
    ))
});

/// A waiter gives up: forget it; if a grant is pending for it alone, pass the grant on (or
/// free the lock when nobody else waits); a shared grant that no registered waiter is left to
/// take frees the lock.
/// KEYS: lock, fence, signal, waiters, queue, own wake-up list. ARGV: waiter id, grant token
/// (for passing on). Returns `1`.
pub(crate) static LEAVE: LazyLock<Script> = LazyLock::new(|| {
    Script::new(concat!(
        clock!(),
        prune!(),
        hand_over!(),
        "redis.call('ZREM', KEYS[4], ARGV[1])\n",
        "redis.call('ZREM', KEYS[5], ARGV[1])\n",
        "local h = redis.pcall('HMGET', KEYS[1], 'token', 'handoff')\n",
        "if h['err'] then return 1 end\n",
        "if h[2] == ARGV[1] and redis.call('LLEN', KEYS[6]) > 0 then\n",
        "  redis.call('DEL', KEYS[6])\n",
        "  redis.call('DEL', KEYS[1])\n",
        "  hand_over(KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], ARGV[2])\n",
        "elseif h[2] == '' and redis.call('EXISTS', KEYS[4]) == 0 and redis.call('LLEN', KEYS[3]) > 0 then\n",
        "  redis.call('DEL', KEYS[3])\n",
        "  redis.call('DEL', KEYS[1])\n",
        "end\n",
        "redis.call('DEL', KEYS[6])\n",
        "return 1\n",
    ))
});

/// Renew (compare token, then extend).
/// KEYS: lock. ARGV: token, ttl_ms.
/// Returns `1` renewed, `0` the key is gone, `-1` another owner (or another type) is there.
pub(crate) static RENEW: LazyLock<Script> = LazyLock::new(|| {
    Script::new(concat!(
        "local t = redis.pcall('HGET', KEYS[1], 'token')\n",
        "if type(t) == 'table' then return -1 end\n",
        "if t == ARGV[1] then\n",
        "  redis.call('PEXPIRE', KEYS[1], ARGV[2])\n",
        "  return 1\n",
        "end\n",
        "if t == false and redis.call('EXISTS', KEYS[1]) == 0 then return 0 end\n",
        "return -1\n",
    ))
});

/// Release: compare the token, then hand the lock over to a waiter (see `hand_over`) or
/// delete it; inside the minimum hold, give up ownership but keep the key until `hold_until`
/// (nobody is woken: waiters wait for that TTL).
/// KEYS: lock, fence, signal, waiters, queue. ARGV: token, `1` to give the lock up even inside
/// the minimum hold (an acquisition undone because replicas did not acknowledge it was never
/// held) or `0`, grant token for `hand_over`, the releaser's own waiter id to forget (a lock
/// taken by popping a grant leaves its registration behind) or "".
/// Returns `1` released, `2` released but kept until the minimum hold has passed, `0` late
/// (the key was already gone), `-1` lost (another owner, or another type, is there now), `-4`
/// the signal key holds another type (nothing was changed).
pub(crate) static RELEASE: LazyLock<Script> = LazyLock::new(|| {
    Script::new(concat!(
        clock!(),
        prune!(),
        hand_over!(),
        "local h = redis.pcall('HMGET', KEYS[1], 'token', 'hold_until')\n",
        "if h['err'] then return -1 end\n",
        "if h[1] == false then\n",
        "  if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end\n",
        "  return -1\n",
        "end\n",
        "if h[1] ~= ARGV[1] then return -1 end\n",
        "local sk = redis.call('TYPE', KEYS[3])['ok']\n",
        "if sk ~= 'none' and sk ~= 'list' then return -4 end\n",
        "if ARGV[4] ~= '' then redis.call('ZREM', KEYS[4], ARGV[4]) end\n",
        "local hold = tonumber(h[2]) or 0\n",
        "if hold > 0 and ARGV[2] ~= '1' and hold - clock() > 0 then\n",
        "  redis.call('HSET', KEYS[1], 'token', '')\n",
        "  redis.call('PEXPIRE', KEYS[1], hold - clock())\n",
        "  return 2\n",
        "end\n",
        "if not hand_over(KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], ARGV[3]) then redis.call('DEL', KEYS[1]) end\n",
        "return 1\n",
    ))
});

/// Read holder information and the remaining TTL in one go.
/// KEYS: lock. Returns `{}` when free, `{-2}` for another type, else
/// `{pttl, host, pid, since, fence, meta, hold_until, token_is_empty}`.
pub(crate) static INSPECT: LazyLock<Script> = LazyLock::new(|| {
    Script::new(concat!(
        "local h = redis.pcall('HMGET', KEYS[1], 'info', 'hold_until', 'token', 'fence')\n",
        "if h['err'] then return {-2} end\n",
        "if h[3] == false and redis.call('EXISTS', KEYS[1]) == 0 then return {} end\n",
        "local info = h[1] or ''\n",
        "local f = {}\n",
        "local pos = 1\n",
        "for n = 1, 3 do\n",
        "  local e = string.find(info, '\\n', pos, true)\n",
        "  if not e then break end\n",
        "  f[n] = string.sub(info, pos, e - 1)\n",
        "  pos = e + 1\n",
        "end\n",
        "local meta = ''\n",
        "if f[3] then meta = string.sub(info, pos) end\n",
        "return {redis.call('PTTL', KEYS[1]), f[1] or '', f[2] or '', f[3] or '0', h[4] or '0', meta, h[2] or '0', (h[3] == '' or h[3] == false) and 1 or 0}\n",
    ))
});

/// Remaining TTL, for the holder only.
/// KEYS: lock. ARGV: token. Returns the PTTL (`-1` without expiry), `-2` gone, `-3` not ours.
pub(crate) static OWNED_TTL: LazyLock<Script> = LazyLock::new(|| {
    Script::new(concat!(
        "local t = redis.pcall('HGET', KEYS[1], 'token')\n",
        "if type(t) == 'table' then return -3 end\n",
        "if t == ARGV[1] then return redis.call('PTTL', KEYS[1]) end\n",
        "if t == false and redis.call('EXISTS', KEYS[1]) == 0 then return -2 end\n",
        "return -3\n",
    ))
});

/// Operator's release: give up whatever lock is there (handing it to a waiter, as a release
/// does), returning who held it.
/// KEYS: lock, fence, signal, waiters, queue. ARGV: grant token for `hand_over`. Returns `{}`
/// when free, `{-2}` when the lock key holds another type, `{-4}` when the signal key does
/// (nothing changed), else `{host, pid}`.
pub(crate) static FORCE_RELEASE: LazyLock<Script> = LazyLock::new(|| {
    Script::new(concat!(
        clock!(),
        prune!(),
        hand_over!(),
        "if redis.call('EXISTS', KEYS[1]) == 0 then return {} end\n",
        "local h = redis.pcall('HGET', KEYS[1], 'info')\n",
        "if type(h) == 'table' then return {-2} end\n",
        "local sk = redis.call('TYPE', KEYS[3])['ok']\n",
        "if sk ~= 'none' and sk ~= 'list' then return {-4} end\n",
        "local host, pid = string.match(h or '', '^([^\\n]*)\\n([^\\n]*)\\n')\n",
        "if not hand_over(KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], ARGV[1]) then redis.call('DEL', KEYS[1]) end\n",
        "return {host or '', pid or ''}\n",
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

#[cfg(test)]
mod tests {
    use crate::waiting::{HANDOFF_GRACE, WAITER_MARGIN};

    #[test]
    fn lua_constants_match_rust() {
        assert_eq!(
            waiter_margin_ms!().parse::<u128>().unwrap(),
            WAITER_MARGIN.as_millis()
        );
        assert_eq!(
            handoff_grace_ms!().parse::<u128>().unwrap(),
            HANDOFF_GRACE.as_millis()
        );
    }
}
