//! Taking a read share or the write lock: the `READ` and `WRITE` scripts.

use std::sync::LazyLock;

use redis::{Script, Value};

use super::super::request::Request;
use super::super::{Attempt, AttemptArgs, LockKeys, decode_attempt_reply};
use super::Side;
use crate::error::Result;

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
/// now, info, lock_pttl}` when not (`pttl`: the writer's remaining TTL, or how long until the
/// registration of the waiting writer that keeps it out lapses; `block`: how long to wait at
/// most, `-1` when not registered; `info` and `lock_pttl`: the holder as `INSPECT` reports it,
/// see `holder` in `mod.rs`, absent when no lock key exists); `{-2, …}` when the lock key is not a read-write lock (nothing written),
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
        register_waiter!(),
        rw_holder!(),
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
        "local held, lttl = holder(KEYS[1], KEYS[5], mode)\n",
        "local cap = tonumber(ARGV[6])\n",
        "if cap <= 0 then return {0, pttl, -1, 0, 0, held, lttl} end\n",
        "local block = register(KEYS[3], nil, ARGV[5], false, false, nil, pttl, cap, now)\n",
        "return {0, pttl, block, 0, now, held, lttl}\n",
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
        register_waiter!(),
        rw_holder!(),
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
        "local held, lttl = holder(KEYS[1], KEYS[5], mode)\n",
        "local cap = tonumber(ARGV[6])\n",
        "if cap <= 0 then return {0, pttl, -1, 0, 0, held, lttl} end\n",
        "local block, life = register(KEYS[3], nil, ARGV[5], false, false, nil, pttl, cap, now)\n",
        "redis.call('ZADD', KEYS[4], now + life, ARGV[5])\n",
        "if redis.call('PTTL', KEYS[4]) < life then redis.call('PEXPIRE', KEYS[4], life) end\n",
        "return {0, pttl, block, 0, now, held, lttl}\n",
    ))
});

/// `READ` / `WRITE`: take a share or the write lock, or register as a waiter. `under`: the
/// owner token of the write lock this thread holds on the name (a read taken under it is a
/// downgrade), else `""`.
pub(crate) fn acquire(side: Side, a: &AttemptArgs<'_>, under: &str) -> Request<Attempt> {
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
    let numbers = a.numbers();
    let [token, ttl, holder, meta, waiter, register] = a.script_args(&numbers);
    let args = [token, ttl, holder, meta, waiter, register, under.as_bytes()];
    // `WRITE` takes no downgrade token.
    let args = match side {
        Side::Read => &args[..],
        Side::Write => &args[..6],
    };
    let k = keys.clone();
    Request::script(script, &keys_, args, move |reply: Value| {
        decode_acquire(&k, reply)
    })
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

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::error::Error;

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
                holder: None,
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
}
