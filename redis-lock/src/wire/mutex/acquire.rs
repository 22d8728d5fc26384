//! Taking a mutex: the `ACQUIRE` script (take the lock, or register as a waiter), and before
//! it, for an attempt that may take it, the native fast path: `SET NX PX` and the fencing
//! counter in one pipeline (`ACQUIRE_STRING`, one script, on a connection that takes no
//! pipeline). What the fast path writes is decided once, by [`native_value`].

use std::sync::LazyLock;

use redis::{Script, Value};

use super::super::request::Request;
use super::super::resp::Decimal;
use super::super::{
    Attempt, AttemptArgs, FENCE_MIN, LATE_MS, LockKeys, NativeTry, decode_attempt_reply, ms,
    unexpected,
};
use super::{waiter_flags, wake_list};
use crate::error::Result;

/// Acquire, or register as a waiter.
///
/// KEYS: lock, fence, waiters, queue, the shared wake-up list, the wake-up list the caller
/// blocks on (the shared one again, or its own in fair mode).
/// ARGV: token, ttl_ms, holder (`host \n pid \n`), `since \n meta` (since: the caller's
/// clock, Unix ms, when it sent the attempt), min_hold_ms, waiter id, register_ms, flags, and
/// after a native attempt that found the key taken, the fencing number it used up (given
/// back first, if the counter still stands at it) and `1` when that attempt started the
/// counter (the give-back then deletes it: a busy or foreign key leaves no counter behind).
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
/// **Fast path** (first in the script, before any function is defined): a caller that is not
/// fair, has not registered, asks for no minimum hold, and finds the lock, the fair queue and
/// the shared wake-up list all absent (one `EXISTS` naming the lock, the queue, and the list
/// twice) takes the lock with `INCR`, `HSET`, `PEXPIRE` and gets the fencing token back as a
/// single integer. Every state owed to a waiter keeps one of those keys present (a grant or a
/// kept lock is the lock key itself; a pending wake-up is the list; fair waiters are the
/// queue), so the fast path never takes a lock from a waiter, and a wake-up list of another
/// type sends the caller to the full path, which reports it.
///
/// **Full path.** That `EXISTS` counts the lock 1, the queue 1 and the shared list 2; once
/// `HMGET` has said whether the lock is there, the count says which of the queue and the list
/// exist. So the list's type is checked (`TYPE`) and its length read (`LLEN`, a pending shared
/// grant) only when it exists, and the queue is only read when it exists. A grant made for
/// another fair waiter is not looked up (`LLEN` of its list): it is not the caller's whether
/// it is pending or not. A caller that has not registered in this acquisition is in no queue
/// (its waiter id is new), so only a registered fair caller looks itself up (`ZSCORE`); the
/// ticket is added with `ZADD NX`, so a resent first attempt keeps the first copy's ticket.
///
/// Returns the fencing token alone (an integer) when the fast path acquired; `{1, fence, 0, 0,
/// 0}` when the full path acquired; `{0, pttl, block, fresh, now, info}` when not (`pttl`: the
/// lock's remaining TTL, `-1` without expiry, `-2` free but owed to the head of the queue;
/// `block`: how long the registered caller should wait for its wake-up at most, `-1` when it
/// was not registered; `fresh`: `1` when no grant the caller could pop was pending, so any
/// grant it pops later was made after this reply; `now`: server Unix ms of this reply, to
/// compare with the time in a grant; `info`: the holder's stored information, `host \n pid \n
/// since \n meta`, absent when the lock key is, read by the `HMGET` that looks the lock up, so
/// that a busy error needs no `INSPECT`); `{-2, …}` when the lock key holds another type, `{-3, …}` when
/// the fence key does, `{-4, …}` when the wake-up list does. Types
/// are checked before anything is written: a script that fails half-way keeps what it wrote.
static ACQUIRE: LazyLock<Script> = LazyLock::new(|| {
    Script::new(concat!(
        // The number a native attempt just used up on this lock, given back while nobody
        // counted since (the counter is then exactly as before it; from `1`, absent again).
        "if ARGV[9] and redis.pcall('GET', KEYS[2]) == ARGV[9] then\n",
        "  if ARGV[10] then redis.call('DEL', KEYS[2]) else redis.call('DECR', KEYS[2]) end\n",
        "end\n",
        // Lock 1, queue 1, wake-up list 2: with the lock's presence (from `HMGET` below), the
        // count says which of the queue and the list exist, so neither is looked at again.
        "local m = redis.call('EXISTS', KEYS[1], KEYS[4], KEYS[5], KEYS[5])\n",
        "if m == 0 and ARGV[8] == '' and ARGV[5] == '0' then\n",
        next_fence!(
            "fence",
            "KEYS[2]",
            "ARGV[2]",
            "return {-3, 0, 0, 0, 0}",
            floor_ms!("tonumber(string.match(ARGV[4], '^%d+'))")
        ),
        "  redis.call('HSET', KEYS[1], 'token', ARGV[1], 'fence', fence, 'info', ARGV[3] .. ARGV[4])\n",
        "  redis.call('PEXPIRE', KEYS[1], ARGV[2])\n",
        "  return fence\n",
        "end\n",
        clock!(),
        prune!(),
        "local id = ARGV[6]\n",
        "local fair = string.find(ARGV[8], 'f', 1, true) ~= nil\n",
        "local waited = string.find(ARGV[8], 'w', 1, true) ~= nil\n",
        // `info` for a busy answer: a free lock has none to read, and on a busy one this read
        // costs no command of its own.
        "local h = redis.pcall('HMGET', KEYS[1], 'token', 'handoff', 'fence', 'info')\n",
        // A lock taken natively is a string `token \n info` (see `acquire_native`): busy
        // like a hash lock, without handoff; ours when it carries our token (a resent
        // request), answered with the fencing counter (module docs, "Two forms").
        "local str = nil\n",
        "if h['err'] then\n",
        "  local s = redis.pcall('GET', KEYS[1])\n",
        "  local owner, info = nil, nil\n",
        "  if type(s) == 'string' then owner, info = string.match(s, ",
        string_lock!(),
        ") end\n",
        "  if owner then\n",
        "    h = {owner, false, false}\n",
        "    str = info\n",
        "  end\n",
        "end\n",
        "local lockp = 0\n",
        "if h['err'] then lockp = 1 elseif h[1] ~= false then lockp = 1\n",
        // A key without an owner token (not ours, see below) or of another type: present.
        "elseif m > 0 and redis.call('EXISTS', KEYS[1]) == 1 then lockp = 1 end\n",
        "local queued = (m - lockp) % 2 == 1\n",
        "local signalled = m - lockp >= 2\n",
        "if signalled then\n",
        "  local sk = redis.call('TYPE', KEYS[5])['ok']\n",
        "  if sk ~= 'list' then return {-4, 0, 0, 0, 0} end\n",
        "end\n",
        "if h['err'] then return {-2, 0, 0, 0, 0} end\n",
        // Already ours: a resent request (the cluster client resends after a reply timeout)
        // whose first copy took the lock.
        "if h[1] == ARGV[1] then\n",
        "  if h[3] then return {1, tonumber(h[3]), 0, 0, 0} end\n",
        // A string lock of ours: the request that took it may not have counted its fence (its
        // pipeline cut after the `SET`, or split and the counter gone before its `INCR`), or
        // may have started the counter from an old clock (its pipeline delayed in flight).
        // Counted now, above both the counter and the clock's floor (the server's, for a
        // late request), and kept as long as the lock.
        "  local c = redis.pcall('GET', KEYS[2])\n",
        "  if type(c) == 'table' then return {-3, 0, 0, 0, 0} end\n",
        "  local fence = tonumber(c) or 0\n",
        "  local floor = ",
        floor_ms!("tonumber(string.match(ARGV[4], '^%d+'))"),
        " * 1000\n",
        "  if fence < floor then fence = floor end\n",
        "  fence = fence + 1\n",
        "  redis.call('SET', KEYS[2], ",
        fence_text!("fence"),
        ", 'PX', ARGV[2])\n",
        "  return {1, fence, 0, 0, 0}\n",
        "end\n",
        // A hash without an owner token was not written by redis-lock: never write into it.
        "if h[1] == false and lockp == 1 then return {-2, 0, 0, 0, 0} end\n",
        "local exists = h[1] ~= false\n",
        // A grant still on its wake-up list. Only looked for where it decides something: on
        // the shared list (when it exists), or on the caller's own; a grant for another fair
        // waiter is not the caller's either way.
        "local pending = nil\n",
        "if exists and h[2] then\n",
        "  local list = nil\n",
        "  if h[2] == '' then\n",
        "    if signalled then list = KEYS[5] end\n",
        "  elseif h[2] == id then\n",
        "    list = KEYS[5] .. ':' .. h[2]\n",
        "  end\n",
        "  if list then\n",
        "    local n = redis.pcall('LLEN', list)\n",
        "    if type(n) == 'table' then return ",
        not_local!(),
        " end\n",
        "    if n > 0 then pending = list end\n",
        "  end\n",
        "end\n",
        "local head = nil\n",
        "local mine = false\n",
        "if not exists then\n",
        "  if queued then\n",
        "    prune(KEYS[3], KEYS[4])\n",
        "    head = redis.call('ZRANGE', KEYS[4], 0, 0)[1]\n",
        "  end\n",
        "  mine = head == nil or head == id\n",
        "elseif pending then\n",
        "  if h[2] == '' then mine = waited else mine = h[2] == id end\n",
        "end\n",
        "if mine then\n",
        // First, so that a fence key of another type fails the script before it wrote anything.
        next_fence!(
            "fence",
            "KEYS[2]",
            "ARGV[2]",
            "return {-3, 0, 0, 0, 0}",
            floor_ms!("tonumber(string.match(ARGV[4], '^%d+'))")
        ),
        "  if exists then redis.call('DEL', KEYS[1]) end\n",
        "  if pending then redis.call('DEL', pending) end\n",
        "  if waited then\n",
        "    redis.call('ZREM', KEYS[3], id)\n",
        "    if fair then\n",
        "      redis.call('ZREM', KEYS[4], id)\n",
        "      redis.call('DEL', KEYS[6])\n",
        "    end\n",
        "  end\n",
        "  local info = ARGV[3] .. ARGV[4]\n",
        "  local hold = tonumber(ARGV[5])\n",
        "  if hold > 0 then\n",
        "    redis.call('HSET', KEYS[1], 'token', ARGV[1], 'fence', fence, 'info', info, 'hold_until', clock() + hold)\n",
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
        // The holder, for the caller's busy error.
        "local held = nil\n",
        "if exists then\n",
        "  pttl = redis.call('PTTL', KEYS[1])\n",
        "  held = str or h[4] or ''\n",
        "end\n",
        "local cap = tonumber(ARGV[7])\n",
        "if cap <= 0 then return {0, pttl, -1, fresh, 0, held} end\n",
        // A waiter registers on a string lock: it becomes a hash (same owner, holder
        // information and TTL; no `fence` field: the counter stands for it), so that its
        // holder's release, whose string fast path does not look at the registry, takes the
        // full path and hands the lock over.
        "if str then\n",
        "  redis.call('DEL', KEYS[1])\n",
        "  redis.call('HSET', KEYS[1], 'token', h[1], 'info', str)\n",
        "  if pttl > 0 then redis.call('PEXPIRE', KEYS[1], pttl) end\n",
        "end\n",
        register_waiter!(),
        "local now = clock()\n",
        "local block = register(KEYS[3], KEYS[4], id, fair, waited, head, pttl, cap, now)\n",
        "return {0, pttl, block, fresh, now, held}\n",
    ))
});

/// The string the native fast path writes for attempt `a`, when it may take that path: a
/// caller that is not fair (fair waiters need the queue), has not registered (registered
/// ones the registry) and asks for no minimum hold (that needs the server clock). `None`:
/// the script. The one place this is decided (`Native` in `deploy::seam`); `acquire` follows
/// `AttemptArgs::native`.
pub(crate) fn native_value(a: &AttemptArgs<'_>) -> Option<String> {
    (!a.fair && !a.registered && a.min_hold.is_zero())
        .then(|| string_value(a.token, a.holder, a.meta))
}

/// `ACQUIRE`: take the lock, or find it busy (and register as a waiter if `register` is set).
/// After a native attempt that found the key taken, `a.burned` is the fencing number it used
/// up, for the script to give back.
pub(crate) fn acquire(a: &AttemptArgs<'_>) -> Request<Attempt> {
    let keys = a.keys;
    let wake = wake_list(keys, a.waiter, a.fair);
    let [ttl, min_hold, register] = [a.ttl, a.min_hold, a.register].map(|d| Decimal::new(ms(d)));
    let since_meta = since_and_meta(a.since, a.meta);
    let burned = a.burned.map(|(n, started)| (Decimal::new(n), started));
    let mut args: Vec<&[u8]> = vec![
        a.token.as_bytes(),
        ttl.as_bytes(),
        a.holder.as_bytes(),
        since_meta.as_bytes(),
        min_hold.as_bytes(),
        a.waiter.as_bytes(),
        register.as_bytes(),
        waiter_flags(a.fair, a.registered).as_bytes(),
    ];
    if let Some((burned, started)) = &burned {
        args.push(burned.as_bytes());
        if *started {
            // The attempt made the counter: giving its number back deletes it again.
            args.push(b"1");
        }
    }
    let k = keys.clone();
    Request::script(
        &ACQUIRE,
        &[
            keys.lock.as_bytes(),
            keys.fence.as_bytes(),
            keys.waiters.as_bytes(),
            keys.queue.as_bytes(),
            keys.signal.as_bytes(),
            wake.as_bytes(),
        ],
        &args,
        move |reply: Value| decode_acquire_reply(&k, reply),
    )
}

/// The native fast path of attempt `a`, writing `value` (see [`native_value`]): where the
/// connection takes a pipeline of native commands (`pipelined`), `SET lock "token \n info" NX
/// PX ttl` and `INCR fence` written together, one round trip of native commands (no script);
/// elsewhere (a Redis Cluster connection) the same as one script, `ACQUIRE_STRING`.
///
/// The `INCR` runs whether or not the `SET` took the lock, so a busy attempt uses up a
/// fencing number (`NativeTry::Busy`); the `ACQUIRE` script that follows gives it back if
/// nobody counted since, so the counter stays the holder's token (what `inspect` shows).
/// Either way tokens only go up.
///
/// Why no `MULTI`/`EXEC` around the two: Redis runs the commands of one read of a client's
/// socket back to back, and the pair is one write of ~150 bytes, so nothing runs between
/// them; `EXEC` cost 2.2 us of Redis time per call here (`INFO commandstats`: `exec` 4.20 us
/// per call against 1.62 + 0.38 for its `SET` and `INCR`), the raw loop's whole cycle is
/// ~5 us. Were the pair split between two reads, the fence would still be higher than every
/// earlier holder's (the `INCR` comes after our `SET`, which came after their release); only
/// a lock that vanished in that gap (a forced release, or a TTL shorter than the gap) could
/// let a later holder's `INCR` come first (ARCHITECTURE.md, "The native fast path").
pub(crate) fn native_attempt(
    a: &AttemptArgs<'_>,
    value: &str,
    pipelined: bool,
) -> Request<NativeTry> {
    let keys = a.keys;
    let ttl = Decimal::new(ms(a.ttl));
    let ttl = ttl.as_bytes();
    if !pipelined {
        return Request::script(
            &ACQUIRE_STRING,
            &[keys.lock.as_bytes(), keys.fence.as_bytes()],
            &[value.as_bytes(), ttl],
            decode_string,
        );
    }
    // The counter: started from this machine's clock (Unix ms × 1000, as the `ACQUIRE` script
    // starts one from the `since` the caller sends) if it is gone (see `next_fence!` in
    // `lua.rs`: every key of a name expires, so tokens must not restart from 1), incremented,
    // and kept at least as long as the lock (a string lock's fence is the counter's value).
    let floor_ms = super::super::unix_ms_now();
    let floor = Decimal::new(floor_ms.saturating_mul(1000));
    Request::commands(
        &[
            &[
                b"SET",
                keys.lock.as_bytes(),
                value.as_bytes(),
                b"NX",
                b"PX",
                ttl,
            ],
            &[
                b"SET",
                keys.fence.as_bytes(),
                floor.as_bytes(),
                b"NX",
                b"PX",
                ttl,
            ],
            &[b"INCR", keys.fence.as_bytes()],
            &[b"PEXPIRE", keys.fence.as_bytes(), ttl, b"GT"],
        ],
        move |reply| decode_pipeline(reply, floor_ms, super::super::unix_ms_now()),
    )
}

/// The native pipeline's four replies, read at `now_ms` (Unix ms) for a pipeline that would
/// have started a counter from `floor_ms`.
fn decode_pipeline(reply: Value, floor_ms: u64, now_ms: u64) -> Result<NativeTry> {
    let Value::Array(reply) = reply else {
        return Err(unexpected("unexpected acquire reply"));
    };
    // A refused `SET` (no permission for the key, say) is the server's error, as a script's
    // would be.
    if let Some(Value::ServerError(e)) = reply.first() {
        return Err(redis::RedisError::from(e.clone()).into());
    }
    match decode_native(&reply) {
        // The counter was gone when its `INCR` ran (the pipeline split, and the counter
        // expired or was lost in between): made anew from 1, without the clock's floor or a
        // TTL. The script, which starts such a counter again, counts this lock's fence (ours,
        // or gone).
        Native::Acquired { fence, .. } if fence < FENCE_MIN => Ok(NativeTry::Busy(None)),
        // The pipeline started the counter from its clock, and came back late: it may have
        // been delayed in flight while a counter started after that clock came and went, and
        // so be below that counter's tokens. The script counts this lock's fence again from
        // the server's clock (`floor_ms!`). A reply merely slow costs one round trip more.
        Native::Acquired { started: true, .. } if now_ms > floor_ms.saturating_add(LATE_MS) => {
            Ok(NativeTry::Busy(None))
        }
        Native::Acquired { fence, .. } => Ok(NativeTry::Acquired(fence)),
        Native::Busy { burned, started } => Ok(NativeTry::Busy(Some((burned, started)))),
        Native::FenceType { took } => Ok(NativeTry::FenceType { took }),
        Native::Unexpected => Err(unexpected("unexpected acquire reply")),
    }
}

/// The native fast path as one script, where a connection takes no pipeline (a Redis
/// Cluster connection): the same string lock and `INCR`, in one request. Unlike the
/// pipeline it burns no fencing number on a busy lock.
/// KEYS: lock, fence. ARGV: value (`token \n info`), ttl_ms.
/// Returns the fencing token, `0` when the key exists, `-3` when the fence key holds another
/// type (nothing was written).
static ACQUIRE_STRING: LazyLock<Script> = LazyLock::new(|| {
    Script::new(concat!(
        "if not redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then return 0 end\n",
        // The floor: the `since` in the value (`token \n host \n pid \n since \n meta`).
        next_fence!(
            "fence",
            "KEYS[2]",
            "ARGV[2]",
            "redis.call('DEL', KEYS[1]) return -3",
            floor_ms!("tonumber(string.match(ARGV[1], '^[^\\n]*\\n[^\\n]*\\n[^\\n]*\\n(%d+)'))")
        ),
        // The counter stands for a string lock's fence: it lives as long as the lock.
        "redis.call('PEXPIRE', KEYS[2], ARGV[2], 'GT')\n",
        "return fence\n",
    ))
});

/// `ACQUIRE_STRING`'s reply. Unlike the pipeline it burns no fencing number on a busy lock,
/// and on a fence key of another type it has written nothing.
fn decode_string(r: i64) -> Result<NativeTry> {
    match r {
        0 => Ok(NativeTry::Busy(None)),
        -3 => Ok(NativeTry::FenceType { took: false }),
        fence if fence > 0 => Ok(NativeTry::Acquired(fence.unsigned_abs())),
        _ => Err(unexpected("unexpected acquire reply")),
    }
}

/// A string lock's value: `token \n host \n pid \n since \n meta` (`holder`: `host \n pid \n`,
/// since: now, on this machine's clock).
fn string_value(token: &str, holder: &str, meta: &str) -> String {
    let mut value = String::with_capacity(token.len() + holder.len() + meta.len() + 16);
    value.push_str(token);
    value.push('\n');
    value.push_str(holder);
    push_since_and_meta(&mut value, super::super::unix_ms_now(), meta);
    value
}

/// What the native fast path's pipeline answered.
#[derive(Debug, PartialEq, Eq)]
enum Native {
    /// Taken with token `fence`, on a counter this attempt `started` (from its clock).
    Acquired {
        fence: u64,
        started: bool,
    },
    /// The lock key exists; the `INCR` used up `burned`, on a counter this attempt `started`
    /// (Redis had none: the give-back deletes it, so a busy or foreign key is left as it was).
    Busy {
        burned: u64,
        started: bool,
    },
    /// The fencing counter holds another type; `took`: the `SET` took the lock all the same.
    FenceType {
        took: bool,
    },
    Unexpected,
}

fn decode_native(reply: &[Value]) -> Native {
    let took = |v: &Value| match v {
        Value::Okay => Some(true),
        Value::SimpleString(s) if s == "OK" => Some(true),
        Value::Nil => Some(false),
        _ => None,
    };
    // `SET lock`, `SET fence NX` (a counter of another type exists: nil, no error), `INCR`,
    // `PEXPIRE` (1 or 0; on another type it still answers).
    match reply {
        [set, start, Value::Int(fence), _] => match (took(set), u64::try_from(*fence)) {
            (Some(true), Ok(fence)) if fence > 0 => Native::Acquired {
                fence,
                started: took(start) == Some(true),
            },
            (Some(false), Ok(burned)) if burned > 0 => Native::Busy {
                burned,
                started: took(start) == Some(true),
            },
            _ => Native::Unexpected,
        },
        [set, _, Value::ServerError(_), _] => match took(set) {
            Some(took) => Native::FenceType { took },
            None => Native::Unexpected,
        },
        _ => Native::Unexpected,
    }
}

/// The tail of the holder information an attempt stores: `since \n meta`, since being the
/// client's clock (Unix ms) as the attempt was made (`AttemptArgs::since`, one value for every
/// server of a Redlock). Read from the client rather than with `TIME` in the script: the
/// clock read was a good part of the script's cost on the fast path.
fn since_and_meta(since: u64, meta: &str) -> String {
    let mut s = String::with_capacity(meta.len() + 16);
    push_since_and_meta(&mut s, since, meta);
    s
}

/// Appends `since \n meta` to `s` (see [`since_and_meta`]), without `format!`: the string lock's
/// value is built on every acquisition.
fn push_since_and_meta(s: &mut String, since: u64, meta: &str) {
    s.extend(
        Decimal::new(since)
            .as_bytes()
            .iter()
            .map(|&d| char::from(d)),
    );
    s.push('\n');
    s.push_str(meta);
}

/// The fast path answers with the fencing token alone; the full path with five integers.
fn decode_acquire_reply(keys: &LockKeys, reply: Value) -> Result<Attempt> {
    decode_attempt_reply(
        reply,
        |code| wrong_key(keys, code),
        "unexpected acquire reply",
    )
}

/// The key an acquire script's negative status names.
fn wrong_key(keys: &LockKeys, code: i64) -> Option<String> {
    match code {
        -2 => Some(keys.lock.clone()),
        -3 => Some(keys.fence.clone()),
        -4 => Some(keys.signal.clone()),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::Error;
    use std::time::Duration;

    /// The full path's five integers, through the same decoding as a real reply.
    fn decode_five(k: &LockKeys, (a, b, c, d, e): (i64, i64, i64, i64, i64)) -> Result<Attempt> {
        decode_acquire_reply(
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
            decode_five(&k, (0, 250, 251, 1, 99)).unwrap(),
            Attempt::Busy {
                holder_ttl: Some(Duration::from_millis(250)),
                block: Some(Duration::from_millis(251)),
                fresh: true,
                server_ms: 99,
                holder: None,
            }
        );
        // No expiry (-1), or free but owed to a fair head (-2); not registered (-1).
        let Attempt::Busy {
            holder_ttl, block, ..
        } = decode_five(&k, (0, -2, -1, 0, 0)).unwrap()
        else {
            panic!("busy");
        };
        assert_eq!((holder_ttl, block), (None, None));
        for (code, key) in [(-2, &k.lock), (-3, &k.fence), (-4, &k.signal)] {
            match decode_five(&k, (code, 0, 0, 0, 0)) {
                Err(Error::WrongType { redis_key }) => assert_eq!(&redis_key, key),
                other => panic!("{code}: {other:?}"),
            }
        }
        assert!(decode_five(&k, (9, 0, 0, 0, 0)).is_err());
    }

    #[test]
    fn the_fast_path_answers_with_the_fence_alone() {
        let k = keys();
        assert_eq!(
            decode_acquire_reply(&k, Value::Int(42)).unwrap(),
            Attempt::Acquired { fence: 42 }
        );
        let full = Value::Array(vec![
            Value::Int(0),
            Value::Int(250),
            Value::Int(-1),
            Value::Int(1),
            Value::Int(99),
        ]);
        assert!(matches!(
            decode_acquire_reply(&k, full).unwrap(),
            Attempt::Busy {
                block: None,
                fresh: true,
                server_ms: 99,
                ..
            }
        ));
        // A fence is never 0 or negative; other shapes are a foreign script.
        for bad in [
            Value::Int(0),
            Value::Int(-3),
            Value::Array(vec![Value::Int(1)]),
            bulk("1"),
            Value::Nil,
        ] {
            assert!(decode_acquire_reply(&k, bad).is_err());
        }
        assert_eq!(
            since_and_meta(1_700_000_000_123, "job 7"),
            "1700000000123\njob 7"
        );
        assert_eq!(since_and_meta(0, ""), "0\n");
    }

    #[test]
    fn the_native_fast_path_reply_decodes() {
        // `SET lock`, `SET fence NX`, `INCR fence`, `PEXPIRE fence GT`.
        let four = |set: Value, incr: Value| [set, Value::Nil, incr, Value::Int(1)];
        let acquired = |fence, started| Native::Acquired { fence, started };
        assert_eq!(
            decode_native(&four(Value::Okay, Value::Int(9))),
            acquired(9, false)
        );
        assert_eq!(
            decode_native(&four(Value::SimpleString("OK".into()), Value::Int(9))),
            acquired(9, false)
        );
        assert_eq!(
            decode_native(&[Value::Okay, Value::Okay, Value::Int(12), Value::Int(1)]),
            acquired(12, true)
        );
        assert_eq!(
            decode_native(&four(Value::Nil, Value::Int(10))),
            Native::Busy {
                burned: 10,
                started: false
            }
        );
        assert_eq!(
            decode_native(&[Value::Nil, Value::Okay, Value::Int(11), Value::Int(1)]),
            Native::Busy {
                burned: 11,
                started: true
            }
        );
        let wrong = || {
            redis::parse_redis_value(
                b"-WRONGTYPE Operation against a key holding the wrong kind of value\r\n",
            )
            .unwrap()
        };
        assert!(matches!(wrong(), Value::ServerError(_)));
        assert_eq!(
            decode_native(&four(Value::Okay, wrong())),
            Native::FenceType { took: true }
        );
        assert_eq!(
            decode_native(&four(Value::Nil, wrong())),
            Native::FenceType { took: false }
        );
        for bad in [
            &four(Value::Okay, Value::Int(0))[..],
            &[Value::Okay, Value::Int(9)],
            &[Value::Okay],
            &[],
            &four(bulk("OK"), Value::Int(3)),
        ] {
            assert_eq!(decode_native(bad), Native::Unexpected, "{bad:?}");
        }
    }

    /// A pipeline that started the counter from its clock and was answered more than
    /// `LATE_MS` after that clock is counted again by the script; one that found a counter,
    /// or came back in time, is taken as it is; a token below `FENCE_MIN` never is.
    #[test]
    fn a_late_pipeline_that_started_the_counter_is_counted_again() {
        let floor = 1_700_000_000_000;
        let token = floor * 1000 + 1;
        let reply = |started: bool, fence: u64| {
            let start = if started { Value::Okay } else { Value::Nil };
            Value::Array(vec![
                Value::Okay,
                start,
                Value::Int(i64::try_from(fence).unwrap()),
                Value::Int(1),
            ])
        };
        let decode = |started, fence, now| decode_pipeline(reply(started, fence), floor, now);
        let late = floor + LATE_MS + 1;
        assert_eq!(decode(true, token, late).unwrap(), NativeTry::Busy(None));
        assert_eq!(
            decode(true, token, floor + LATE_MS).unwrap(),
            NativeTry::Acquired(token)
        );
        assert_eq!(
            decode(false, token + 7, late).unwrap(),
            NativeTry::Acquired(token + 7)
        );
        assert_eq!(decode(false, 3, floor).unwrap(), NativeTry::Busy(None));
    }
}

#[cfg(all(test, feature = "testing"))]
mod server_tests {
    use std::time::Duration;

    use super::super::server_tests::{args, release_hash};
    use super::*;
    use crate::testing::RedisServer;
    use crate::wire::Release;
    use crate::wire::token::{Ids, new_ids};

    /// The cluster client resends a script after a reply timeout; when the first copy took the
    /// lock, the second must answer "acquired" with the same fencing token, not "busy".
    #[test]
    fn a_resent_acquire_finds_its_own_lock_acquired() {
        let server = RedisServer::start();
        let mut con = server.connection();
        let keys = LockKeys::new("lock:", "resent").unwrap();
        let ids = new_ids().unwrap();
        let ttl = Duration::from_secs(10);
        let mut attempt = |ids: &Ids| acquire(&args(&keys, ids, ttl, ttl)).on(&mut con).unwrap();
        let Attempt::Acquired { fence } = attempt(&ids) else {
            panic!("the lock is free");
        };
        let Attempt::Acquired { fence: again } = attempt(&ids) else {
            panic!("a resent acquire was answered busy");
        };
        assert_eq!(again, fence, "the stored fencing token, not a new one");
        let counter: u64 = redis::cmd("GET")
            .arg(&keys.fence)
            .query(&mut server.connection())
            .unwrap();
        assert_eq!(counter, fence, "the counter did not move");
        // Anyone else is still refused.
        let other = new_ids().unwrap();
        assert!(matches!(attempt(&other), Attempt::Busy { .. }));
        let released = release_hash(&mut con, &keys, &ids.token, &ids.grant, "");
        assert_eq!(released, Release::Released);
    }

    /// A native pipeline delayed in flight: built at `t0`, it arrives after another holder
    /// took the name at `t0 + 200 ms` (its counter started there), released it and the
    /// counter expired; its `SET NX`s take the lock and start a counter at `t0`, below the
    /// other holder's token. Its late reply sends it to the script, which counts the fence
    /// again from the server's clock: above the other holder's.
    #[test]
    fn a_late_native_pipelines_counter_is_counted_again_from_the_servers_clock() {
        let server = RedisServer::start();
        let mut con = server.connection();
        let keys = LockKeys::new("lock:", "late").unwrap();
        let ids = new_ids().unwrap();
        let ttl = Duration::from_secs(10);
        let t0 = crate::wire::unix_ms_now() - 1000;
        let others = (t0 + 200) * 1000 + 1;
        let a = AttemptArgs {
            since: t0,
            ..args(&keys, &ids, ttl, Duration::ZERO)
        };
        // What the late pipeline's commands did on arrival.
        let value = native_value(&a).unwrap();
        let mut redis = server.connection();
        let _: () = redis::cmd("SET")
            .arg(&keys.lock)
            .arg(&value)
            .query(&mut redis)
            .unwrap();
        let _: () = redis::cmd("SET")
            .arg(&keys.fence)
            .arg(t0 * 1000 + 1)
            .query(&mut redis)
            .unwrap();
        let reply = Value::Array(vec![
            Value::Okay,
            Value::Okay,
            Value::Int(i64::try_from(t0 * 1000 + 1).unwrap()),
            Value::Int(1),
        ]);
        let late = decode_pipeline(reply, t0, crate::wire::unix_ms_now()).unwrap();
        assert_eq!(late, NativeTry::Busy(None), "a late reply is counted again");
        let Attempt::Acquired { fence } = acquire(&a).on(&mut con).unwrap() else {
            panic!("its own lock");
        };
        assert!(fence > others, "{fence} not above {others}");
        let counter: u64 = redis::cmd("GET")
            .arg(&keys.fence)
            .query(&mut redis)
            .unwrap();
        assert_eq!(counter, fence, "the counter holds the new token");
    }
}
