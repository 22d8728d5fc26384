//! The multi-lock's one script: take several mutex locks at once, all or none, when all their
//! keys can be named by one script (one server, or one Redis Cluster slot). Each member is an
//! ordinary mutex lock (same keys, same hash layout), so single locks and multi-locks of the
//! same names exclude each other, and every later operation on a member (renew, release,
//! inspect) is the mutex's.

use std::sync::LazyLock;
use std::time::Duration;

use redis::Script;

use super::request::Request;
use super::resp::Decimal;
use super::{BusyHolder, LockKeys, int, millis, ms, unexpected};
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
        /// Who holds it (`None`: nobody, it is owed to a fair waiter).
        holder: Option<Box<BusyHolder>>,
    },
}

/// Take every member, or none. A member may be taken if its lock key does not exist and its
/// fair queue is empty, or if it holds the token given for it already (a resent request, or a
/// member the caller holds already, which is left as it is).
/// KEYS: per member, in order: lock, fence, queue. ARGV: ttl_ms, holder, meta, then one owner
/// token per member.
/// Returns `{1, fence...}` when every member is ours; `{0, i, pttl, info}` when member `i`
/// (from 1) is not free (`pttl` and `info` as `ACQUIRE`'s: `info` absent when the lock key
/// is); `{-2, i, 0}` when its lock key holds another type (or a
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
        "  local str = nil\n",
        // A single lock taken natively is a string `token \n info` (see `mutex/mod.rs`).
        "  if type(t) == 'table' then\n",
        "    local s = redis.pcall('GET', lock)\n",
        "    if type(s) == 'string' then t, str = string.match(s, ",
        string_lock!(),
        ") else t = nil end\n",
        "    if not t then return {-2, i, 0} end\n",
        "  end\n",
        "  local ft = redis.call('TYPE', fence)['ok']\n",
        "  if ft ~= 'none' and ft ~= 'string' then return {-3, i, 0} end\n",
        "  if t == ARGV[3 + i] then\n",
        "    ours[i] = true\n",
        "  elseif t then\n",
        // The holder, for the caller's busy error (read on this branch only).
        "    return {0, i, redis.call('PTTL', lock), str or redis.call('HGET', lock, 'info') or ''}\n",
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
pub(crate) fn acquire_all(a: &AllArgs<'_>) -> Request<AllAttempt> {
    let keys: Vec<&[u8]> = a
        .members
        .iter()
        .flat_map(|(keys, _)| [&keys.lock, &keys.fence, &keys.queue].map(|k| k.as_bytes()))
        .collect();
    let ttl = Decimal::new(ms(a.ttl));
    let mut args: Vec<&[u8]> = vec![ttl.as_bytes(), a.holder.as_bytes(), a.meta.as_bytes()];
    args.extend(a.members.iter().map(|(_, token)| token.as_bytes()));
    // The members' keys, which an error names.
    let owned: Vec<LockKeys> = a.members.iter().map(|(k, _)| (*k).clone()).collect();
    Request::script(
        &ACQUIRE_ALL,
        &keys,
        &args,
        move |reply: Vec<redis::Value>| {
            let members: Vec<(&LockKeys, &str)> = owned.iter().map(|k| (k, "")).collect();
            decode_acquire_all(&members, &reply)
        },
    )
}

fn decode_acquire_all(members: &[(&LockKeys, &str)], reply: &[redis::Value]) -> Result<AllAttempt> {
    let (numbers, rest) = match reply.first().and_then(int) {
        // The busy answer's holder follows its three integers.
        Some(0) if reply.len() >= 3 => reply.split_at(3),
        _ => (reply, &[][..]),
    };
    let Some(numbers) = numbers.iter().map(int).collect::<Option<Vec<i64>>>() else {
        return Err(unexpected("unexpected acquire-all reply"));
    };
    if rest.len() > 1 {
        return Err(unexpected("unexpected acquire-all reply"));
    }
    let member = |i: i64| {
        usize::try_from(i)
            .ok()
            .and_then(|i| i.checked_sub(1))
            .filter(|i| *i < members.len())
            .ok_or_else(|| unexpected("unexpected acquire-all reply"))
    };
    match numbers.as_slice() {
        [1, fences @ ..] if fences.len() == members.len() => Ok(AllAttempt::Acquired {
            fences: fences
                .iter()
                .map(|f| u64::try_from(*f).unwrap_or(0))
                .collect(),
        }),
        [0, i, pttl] => Ok(AllAttempt::Busy {
            index: member(*i)?,
            holder_ttl: millis(*pttl),
            holder: BusyHolder::decode(rest, *pttl),
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

    fn ints(v: &[i64]) -> Vec<redis::Value> {
        v.iter().map(|i| redis::Value::Int(*i)).collect()
    }

    #[test]
    fn replies_decode_per_member() {
        let a = LockKeys::new("lock:", "a").unwrap();
        let b = LockKeys::new("lock:", "b").unwrap();
        let members = [(&a, "t"), (&b, "t")];
        assert_eq!(
            decode_acquire_all(&members, &ints(&[1, 7, 3])).unwrap(),
            AllAttempt::Acquired { fences: vec![7, 3] }
        );
        // Busy: the member's holder follows.
        let mut busy = ints(&[0, 2, 1500]);
        busy.push(redis::Value::BulkString(
            b"web-1\n42\n1700\nnightly".to_vec(),
        ));
        let AllAttempt::Busy {
            index,
            holder_ttl,
            holder: Some(holder),
        } = decode_acquire_all(&members, &busy).unwrap()
        else {
            panic!("busy with a holder");
        };
        assert_eq!((index, holder_ttl), (1, Some(Duration::from_millis(1500))));
        assert_eq!(holder.ttl, holder_ttl);
        assert_eq!(
            (
                holder.info.host.as_str(),
                holder.info.pid,
                holder.info.since_ms
            ),
            ("web-1", 42, 1700)
        );
        assert_eq!(holder.info.meta.as_deref(), Some("nightly"));
        // Owed to a fair waiter: nobody holds it.
        assert_eq!(
            decode_acquire_all(&members, &ints(&[0, 1, -2])).unwrap(),
            AllAttempt::Busy {
                index: 0,
                holder_ttl: None,
                holder: None,
            }
        );
        assert!(matches!(
            decode_acquire_all(&members, &ints(&[-3, 2, 0])),
            Err(Error::WrongType { redis_key }) if redis_key == "lock:{b}:fence"
        ));
        // Out of range, wrong length, unknown codes.
        for bad in [&[0, 3, 1][..], &[0, 0, 1], &[1, 7], &[5, 1, 1], &[]] {
            assert!(decode_acquire_all(&members, &ints(bad)).is_err(), "{bad:?}");
        }
    }
}
