//! Taking a permit: the `ACQUIRE` script.

use std::sync::LazyLock;

use redis::{Script, Value};

use super::super::mutex::{waiter_flags, wake_list};
use super::super::request::Request;
use super::super::resp::Decimal;
use super::super::{Attempt, AttemptArgs, LockKeys, decode_attempt_reply};
use crate::error::Result;

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
/// live permit: its stored fence); `{0, pttl, block, 1, after, info}` when not (`pttl`: time
/// until the earliest permit expires, `-2` when a permit is free but owed to queued fair
/// waiters; `info`: the holder information of that earliest permit, absent with `-2`;
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
        // The permit that expires first: its holder, for the caller's busy error (read on
        // this branch only).
        "local held = nil\n",
        "if free <= 0 then\n",
        "  pttl = math.max(0, (tonumber(first[2]) or now) - now)\n",
        "  local r = first[1] and redis.call('HGET', KEYS[7], first[1]) or ''\n",
        "  held = string.match(r, '^%d*\\n(.*)$') or ''\n",
        "end\n",
        "local cap = tonumber(ARGV[6])\n",
        "if cap <= 0 then return {0, pttl, -1, 1, 0, held} end\n",
        register_waiter!(),
        "local block = register(KEYS[3], KEYS[4], id, fair, waited, head, pttl, cap, now)\n",
        "return {0, pttl, block, 1, now + 1, held}\n",
    ))
});

/// `ACQUIRE`: take a permit, or find none free (and register as a waiter if `register` is
/// set). `limit` is stored if the semaphore has none yet.
pub(crate) fn acquire(a: &AttemptArgs<'_>, limit: u32) -> Request<Attempt> {
    let keys = a.keys;
    let (wake, holders, limit_key) = (
        wake_list(keys, a.waiter, a.fair),
        keys.holders(),
        keys.limit(),
    );
    let numbers = a.numbers();
    let [token, ttl, holder, meta, waiter, register] = a.script_args(&numbers);
    let limit = Decimal::new(u64::from(limit));
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
            waiter_flags(a.fair, a.registered).as_bytes(),
            limit.as_bytes(),
        ],
        move |reply: Value| decode_acquire(&k, reply),
    )
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

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::error::Error;

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
                holder: None,
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
    }
}
