//! The multi-lock's one script: take several mutex locks at once, all or none, when all their
//! keys can be named by one script (one server, or one Redis Cluster slot). Each member is an
//! ordinary mutex lock (same keys, same hash layout), so single locks and multi-locks of the
//! same names exclude each other, and every later operation on a member (renew, release,
//! inspect) is the mutex's.

use std::sync::LazyLock;
use std::time::Duration;

use redis::{ConnectionLike, Script};

use super::{LockKeys, millis, ms, unexpected};
use crate::error::{Error, Result};

/// The answer to one all-or-nothing attempt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum AllAttempt {
    /// Every member is ours now: its fencing token, in the order asked.
    Acquired { fences: Vec<u64> },
    /// Member `index` (in the order asked) is not free: nothing was taken.
    Busy {
        index: usize,
        /// Its remaining TTL (`None`: no expiry, or free but owed to a fair waiter).
        holder_ttl: Option<Duration>,
    },
}

/// Take every member, or none. A member may be taken if its lock key does not exist and its
/// fair queue is empty, or if it holds the token given for it already (a resent request, or a
/// member the caller holds already, which is left as it is).
/// KEYS: per member, in order: lock, fence, queue. ARGV: ttl_ms, holder, meta, then one owner
/// token per member.
/// Returns `{1, fence...}` when every member is ours; `{0, i, pttl}` when member `i` (from 1)
/// is not free (`pttl` as `ACQUIRE`'s); `{-2, i, 0}` when its lock key holds another type (or a
/// hash redis-lock did not write), `{-3, i, 0}` when its fence key does. Every check comes
/// before the first write.
static ACQUIRE_ALL: LazyLock<Script> = LazyLock::new(|| {
    Script::new(concat!(
        clock!(),
        "local n = #KEYS / 3\n",
        "local ours = {}\n",
        "for i = 1, n do\n",
        "  local lock, fence, queue = KEYS[3 * i - 2], KEYS[3 * i - 1], KEYS[3 * i]\n",
        "  local t = redis.pcall('HGET', lock, 'token')\n",
        // A single lock taken natively is a string `token \n info` (see `mutex.rs`).
        "  if type(t) == 'table' then\n",
        "    local s = redis.pcall('GET', lock)\n",
        "    t = type(s) == 'string' and string.match(s, ",
        string_lock!(),
        ")\n",
        "    if not t then return {-2, i, 0} end\n",
        "  end\n",
        "  local ft = redis.call('TYPE', fence)['ok']\n",
        "  if ft ~= 'none' and ft ~= 'string' then return {-3, i, 0} end\n",
        "  if t == ARGV[3 + i] then\n",
        "    ours[i] = true\n",
        "  elseif t then\n",
        "    return {0, i, redis.call('PTTL', lock)}\n",
        "  elseif redis.call('EXISTS', lock) == 1 then\n",
        "    return {-2, i, 0}\n",
        "  elseif redis.call('EXISTS', queue) == 1 then\n",
        "    return {0, i, -2}\n",
        "  end\n",
        "end\n",
        "local reply = {1}\n",
        "local info = ARGV[2] .. clock() .. '\\n' .. ARGV[3]\n",
        "for i = 1, n do\n",
        "  local lock, fence = KEYS[3 * i - 2], KEYS[3 * i - 1]\n",
        "  if ours[i] then\n",
        // A string lock's fence is not stored with it: the counter's value stands for it.
        "    local f = redis.pcall('HGET', lock, 'fence')\n",
        "    if type(f) ~= 'string' then f = redis.call('GET', fence) end\n",
        "    reply[i + 1] = tonumber(f) or 0\n",
        "  else\n",
        next_fence!(
            "f",
            "fence",
            "ARGV[1]",
            "error('the fence key holds another type')",
            "clock()"
        ),
        "    redis.call('HSET', lock, 'token', ARGV[3 + i], 'fence', f, 'info', info)\n",
        "    redis.call('PEXPIRE', lock, ARGV[1])\n",
        "    reply[i + 1] = f\n",
        "  end\n",
        "end\n",
        "return reply\n",
    ))
});

/// What an all-or-nothing attempt sends.
#[derive(Debug, Clone, Copy)]
pub(crate) struct AllArgs<'a> {
    /// `(keys, owner token)` per member, in the order asked.
    pub(crate) members: &'a [(&'a LockKeys, &'a str)],
    pub(crate) ttl: Duration,
    /// `host \n pid \n` (see `holder_prefix`).
    pub(crate) holder: &'a str,
    pub(crate) meta: &'a str,
}

/// `ACQUIRE_ALL`: take every `(keys, token)` member or none, each with `ttl` and the holder
/// information `holder` + `meta`.
pub(crate) fn acquire_all(con: &mut dyn ConnectionLike, a: &AllArgs<'_>) -> Result<AllAttempt> {
    let mut invocation = ACQUIRE_ALL.prepare_invoke();
    for (keys, _) in a.members {
        invocation.key(&keys.lock).key(&keys.fence).key(&keys.queue);
    }
    invocation.arg(ms(a.ttl)).arg(a.holder).arg(a.meta);
    for (_, token) in a.members {
        invocation.arg(*token);
    }
    let reply: Vec<i64> = invocation.invoke(con)?;
    decode_acquire_all(a.members, &reply)
}

fn decode_acquire_all(members: &[(&LockKeys, &str)], reply: &[i64]) -> Result<AllAttempt> {
    let member = |i: i64| {
        usize::try_from(i)
            .ok()
            .and_then(|i| i.checked_sub(1))
            .filter(|i| *i < members.len())
            .ok_or_else(|| unexpected("unexpected acquire-all reply"))
    };
    match reply {
        [1, fences @ ..] if fences.len() == members.len() => Ok(AllAttempt::Acquired {
            fences: fences
                .iter()
                .map(|f| u64::try_from(*f).unwrap_or(0))
                .collect(),
        }),
        [0, i, pttl] => Ok(AllAttempt::Busy {
            index: member(*i)?,
            holder_ttl: millis(*pttl),
        }),
        [-2, i, _] => Err(Error::WrongType {
            redis_key: members[member(*i)?].0.lock.clone(),
        }),
        [-3, i, _] => Err(Error::WrongType {
            redis_key: members[member(*i)?].0.fence.clone(),
        }),
        _ => Err(unexpected("unexpected acquire-all reply")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replies_decode_per_member() {
        let a = LockKeys::new("lock:", "a").unwrap();
        let b = LockKeys::new("lock:", "b").unwrap();
        let members = [(&a, "t"), (&b, "t")];
        assert_eq!(
            decode_acquire_all(&members, &[1, 7, 3]).unwrap(),
            AllAttempt::Acquired { fences: vec![7, 3] }
        );
        assert_eq!(
            decode_acquire_all(&members, &[0, 2, 1500]).unwrap(),
            AllAttempt::Busy {
                index: 1,
                holder_ttl: Some(Duration::from_millis(1500))
            }
        );
        assert_eq!(
            decode_acquire_all(&members, &[0, 1, -2]).unwrap(),
            AllAttempt::Busy {
                index: 0,
                holder_ttl: None
            }
        );
        assert!(matches!(
            decode_acquire_all(&members, &[-3, 2, 0]),
            Err(Error::WrongType { redis_key }) if redis_key == "lock:{b}:fence"
        ));
        // Out of range, wrong length, unknown codes.
        for bad in [&[0, 3, 1][..], &[0, 0, 1], &[1, 7], &[5, 1, 1], &[]] {
            assert!(decode_acquire_all(&members, bad).is_err(), "{bad:?}");
        }
    }
}
