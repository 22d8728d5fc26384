//! Lua pieces shared by the scripts of every primitive: the server clock, the waiter registry
//! (`prune`), the handoff (`hand_over`) and the constants they carry as literals.
//!
//! They are `macro_rules!` producing string literals so that each script is one `concat!`ed
//! `&'static str` with a fixed SHA1 (`EVALSHA` hits the script cache).

use std::time::Duration;

/// How long a waiter's registration outlives the wait it announced: time to come back after
/// its `BLPOP` ends before it is taken for dead. `waiter_margin_ms!` carries the same value
/// into the scripts; a unit test keeps the two equal.
#[cfg_attr(not(test), allow(dead_code))]
pub(crate) const WAITER_MARGIN: Duration = Duration::from_millis(1000);

/// How long a release's grant to a waiter lives unless the waiter claims it or renews it
/// (`handoff_grace_ms!` in the scripts).
pub(crate) const HANDOFF_GRACE: Duration = Duration::from_millis(1000);

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

/// Inline Lua: `local <var> = ` the next fencing token of the counter `<key>`; a counter that
/// was gone is started at `<floor_ms>` × 1000 (a Lua expression: Unix ms of a clock; the
/// server's `TIME` when omitted) with a TTL of `<ttl>` ms; `<on_wrong_type>` runs when the
/// counter holds another type.
///
/// Every key of a name expires, the counter too (with the TTL of the lock that started it, kept
/// longer only by a string lock, whose fence it stands for: the native fast path's `PEXPIRE
/// GT` and the mutex's renewal), so a name taken again after its counter expired finds none.
/// `INCR` then answers `1` (or a little more, after a native pipeline's stray `INCR`: below
/// [`fence_min!`]), and the counter starts instead from the clock in microseconds
/// (milliseconds × 1000): above every token the previous counter gave, as long as that counter
/// was not incremented faster than the clock advanced (Redis needs several microseconds per
/// acquisition) and the clock has not been set back by more than the time between the two
/// (SAFETY.md, "Fencing tokens after every key of a name expired"). The mutex's acquisition
/// takes the floor from the caller's clock (the `since` it sends), so that the servers of a
/// Redlock start a new counter at the same number. An existing counter's TTL is not raised
/// here, which costs the scripts nothing. The number has 16 digits (below 2^53, exact as a
/// Lua number until the year 2255); Lua's `..` would print it in exponent form, so it is
/// formatted with `%d` wherever it is written into a string (`fence_text`).
/// The lowest fencing token a counter started from the clock can give (10^12: a clock's
/// microseconds are about 1.7 × 10^15). A counter below it was made by an `INCR` that found
/// none, not started from the clock: a native pipeline split, whose counter went between its
/// `SET NX` and its `INCR` (it has no TTL either). [`FENCE_MIN`] in Rust.
macro_rules! fence_min {
    () => {
        "1000000000000"
    };
}

/// [`fence_min!`] as a number: a native acquisition's token below it is not one.
pub(crate) const FENCE_MIN: u64 = 1_000_000_000_000;

/// Lua: the server's clock, Unix ms (`TIME`).
macro_rules! server_ms {
    () => {
        "(function() local t = redis.call('TIME') return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000) end)()"
    };
}

/// How much later than a request's clock the server's may be before a counter the request
/// starts takes the server's (`floor_ms!`), and before a native attempt's reply counts as late
/// (`wire/mutex/acquire.rs`). [`LATE_MS`] in Rust.
macro_rules! late_ms {
    () => {
        "100"
    };
}

/// [`late_ms!`] as a number.
pub(crate) const LATE_MS: u64 = 100;

/// Lua: a new counter's floor, Unix ms: the caller's clock (`$client_ms`, sent with the
/// request, so that the servers of a Redlock start alike), or the server's when that is more
/// than [`late_ms!`] later. A request delayed in flight (a paused or slow client, a stalled
/// connection) carries an old clock; started from it, a counter could start below one that
/// came and expired meanwhile. (Servers that disagree are settled by the quorum's raise.)
macro_rules! floor_ms {
    ($client_ms:expr) => {
        concat!(
            "(function(c) local s = ",
            server_ms!(),
            " if s > c + ",
            late_ms!(),
            " then return s end return c end)(",
            $client_ms,
            ")"
        )
    };
}

macro_rules! next_fence {
    ($var:expr, $key:expr, $ttl:expr, $on_wrong_type:expr) => {
        next_fence!($var, $key, $ttl, $on_wrong_type, server_ms!())
    };
    ($var:expr, $key:expr, $ttl:expr, $on_wrong_type:expr, $floor_ms:expr) => {
        concat!(
            "local ",
            $var,
            " = redis.pcall('INCR', ",
            $key,
            ")\n",
            "if type(",
            $var,
            ") == 'table' then ",
            $on_wrong_type,
            " end\n",
            "if ",
            $var,
            " < ",
            fence_min!(),
            " then\n",
            "  ",
            $var,
            " = (",
            $floor_ms,
            ") * 1000\n",
            "  redis.call('SET', ",
            $key,
            ", ",
            $var,
            ", 'PX', ",
            $ttl,
            ")\n",
            "end\n",
        )
    };
}

/// Lua: a fencing token as text (`%d`: `..` would print a 16-digit number in exponent form).
macro_rules! fence_text {
    ($var:expr) => {
        concat!("string.format('%d', ", $var, ")")
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

/// Registering a caller that will wait, for every primitive that queues waiters:
/// `register(waiters, queue, id, fair, waited, head, pttl, cap, now)` records waiter `id` in
/// the sorted set `waiters` until it is due back, and a fair one (`fair`) at the tail of
/// `queue`, unless it is queued already (`waited`: it registered earlier in this
/// acquisition). It blocks until the holder's TTL (`pttl`, `-1` none) runs out, at most `cap`
/// ms, and, behind a queue head that is not itself (`head`, or the queue's first), no longer
/// than until the head's registration lapses, so a dead head cannot keep it waiting. Both keys
/// live at least as long as the registration. Returns how long it blocks and how long its
/// registration lives (`now`: the server clock, ms).
///
/// A resent first attempt keeps the first copy's ticket (`ZADD NX`); the registration's
/// lifetime is the wait plus [`waiter_margin_ms`].
macro_rules! register_waiter {
    () => {
        concat!(
            "local function register(waiters, queue, id, fair, waited, head, pttl, cap, now)\n",
            "  local wait = cap\n",
            "  if pttl >= 0 then wait = pttl + 1 end\n",
            "  local ticket = nil\n",
            "  if fair and not (waited and redis.call('ZSCORE', queue, id)) then\n",
            "    local tail = redis.call('ZRANGE', queue, -1, -1, 'WITHSCORES')\n",
            "    ticket = (tonumber(tail[2]) or 0) + 1\n",
            "    if not head then head = redis.call('ZRANGE', queue, 0, 0)[1] end\n",
            "  end\n",
            "  if head and head ~= id then\n",
            "    local lapse = redis.call('ZSCORE', waiters, head)\n",
            "    if lapse then wait = math.min(wait, tonumber(lapse) - now + 1) end\n",
            "  end\n",
            "  local block = math.max(1, math.min(wait, cap))\n",
            "  local life = block + ",
            waiter_margin_ms!(),
            "\n",
            "  redis.call('ZADD', waiters, now + life, id)\n",
            "  if ticket then redis.call('ZADD', queue, 'NX', ticket, id) end\n",
            "  if redis.call('PTTL', waiters) < life then redis.call('PEXPIRE', waiters, life) end\n",
            "  if fair and redis.call('PTTL', queue) < life then redis.call('PEXPIRE', queue, life) end\n",
            "  return block, life\n",
            "end\n",
        )
    };
}

/// How long a release's grant lives unless its waiter claims or renews it, in ms; also the
/// lifetime of the wake-up element (`HANDOFF_GRACE` in Rust).
macro_rules! handoff_grace_ms {
    () => {
        "1000"
    };
}

/// A wake-up list element that is not a grant: "look again" (`parse_grant` rejects it, and
/// the waiter attempts again). Pushed by a release that keeps the lock ownerless for a while.
macro_rules! recheck {
    () => {
        "'-'"
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

/// The Lua pattern of a string lock's value (`token \n info`, written by the mutex's native
/// fast path, see `mutex/mod.rs`): its captures are the owner token and the holder information.
/// Anything else at a lock key (a foreign string) does not match.
macro_rules! string_lock {
    () => {
        "'^(%x+)\\n(.*)$'"
    };
}

/// `owner_of(lock)`: the owner token of a mutex lock in either of its forms: the `token` field
/// of a hash, or the token that starts a string lock (`token \n info`, taken by the native
/// fast path, see `mutex/mod.rs`). `false` when the key does not exist; `''` when it holds no
/// owner (a kept or foreign hash, a string not of that form, another type). The string is
/// read first: it is the form an uncontended lock has.
macro_rules! owner_of {
    () => {
        concat!(
            "local function owner_of(lock)\n\
               local s = redis.pcall('GET', lock)\n\
               if type(s) == 'string' then return (string.match(s, ",
            string_lock!(),
            ")) or '' end\n\
               if s == false then return false end\n\
               local t = redis.pcall('HGET', lock, 'token')\n\
               if type(t) == 'string' then return t end\n\
               return ''\n\
             end\n"
        )
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

/// `hand_over(lock, fence, signal, waiters, queue, grant, known)`: called when the lock is being
/// given up. With live waiters registered, the lock is *granted*: it gets the owner token
/// `grant` (made by the releasing client), a new fencing token, the field `handoff` naming whom
/// it is for, and the handoff grace as its TTL; and `grant fence time` (time: server Unix ms) is
/// pushed to one wake-up list. For the head of the fair queue that is its own list (`handoff` =
/// its id; it leaves the queue now); otherwise the shared list (`handoff` = ""), from which
/// Redis hands the element to the waiter that has blocked longest. Whoever pops the element
/// owns the lock under `grant`. A grant nobody takes lapses with the grace. Returns `true` when
/// it granted the lock; with no live waiter it touches nothing and returns `false`.
///
/// Whether live waiters are registered is read from the registration that lapses first
/// (`ZRANGE waiters 0 0 WITHSCORES`): when it is live, all are, and nothing is pruned; only
/// when it has lapsed does `prune` run. `known` (optional) is what the caller has found out
/// already, so that it is not looked up again: `waiters`, `signal`, `queue` (does the key
/// exist; `false` skips reading it) and `clean` (the lock hash holds only `token`, `fence`,
/// `info` and `handoff`, so the grant overwrites it in place, `info` emptied, instead of `DEL`
/// and `HSET`). Without it, everything is looked up.
///
/// The per-waiter list `<signal>:<id>` is the one key a script builds itself instead of
/// receiving it in `KEYS`: the releaser cannot know who heads the queue. It starts with the
/// lock's hash tag, so it is in the same cluster slot as the declared keys (Redis allows
/// undeclared keys of the script's own slot). While that slot migrates, the list may be on the
/// other node, which Redis refuses; `hand_over` touches it (the `DEL` of an old element) before
/// writing anything else and raises `TRYAGAIN` (see `not_local`) instead of leaving a half-made
/// grant.
macro_rules! hand_over {
    () => {
        concat!(
            "local function hand_over(lock, fence, signal, waiters, queue, grant, known)\n\
               if known and not known.waiters then return false end\n\
               local first = redis.call('ZRANGE', waiters, 0, 0, 'WITHSCORES')\n\
               if not first[1] then return false end\n\
               local forgot = 0\n\
               if tonumber(first[2]) <= clock() then forgot = prune(waiters, queue) end\n\
               local head = nil\n\
               if not known or known.queue then head = redis.call('ZRANGE', queue, 0, 0)[1] end\n\
               if not head and forgot > 0 and redis.call('EXISTS', waiters) == 0 then\n\
                 return false\n\
               end\n\
               local wake = signal\n\
               local target = ''\n\
               if head then\n\
                 target = head\n\
                 wake = signal .. ':' .. head\n\
                 if type(redis.pcall('DEL', wake)) == 'table' then error(",
            not_local!(),
            ") end\n\
               end\n\
             ",
            next_fence!("f", "fence", handoff_grace_ms!(), "return false", "clock()"),
            "\
               if head then\n\
                 redis.call('ZREM', queue, head)\n\
                 redis.call('ZREM', waiters, head)\n\
               end\n\
               if known and known.clean then\n\
                 redis.call('HSET', lock, 'token', grant, 'fence', f, 'handoff', target, 'info', '')\n\
               else\n\
                 redis.call('DEL', lock)\n\
                 redis.call('HSET', lock, 'token', grant, 'fence', f, 'handoff', target)\n\
               end\n\
               redis.call('PEXPIRE', lock, ",
            handoff_grace_ms!(),
            ")\n\
               if not head and (not known or known.signal) then redis.call('DEL', wake) end\n\
               redis.call('RPUSH', wake, grant .. ' ' .. ",
            fence_text!("f"),
            " .. ' ' .. clock())\n\
               redis.call('PEXPIRE', wake, ",
            handoff_grace_ms!(),
            ")\n\
               return true\n\
             end\n"
        )
    };
}

#[cfg(test)]
mod tests {
    use super::*;

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
        assert_eq!(late_ms!().parse::<u64>().unwrap(), LATE_MS);
        assert_eq!(fence_min!().parse::<u64>().unwrap(), FENCE_MIN);
    }
}
