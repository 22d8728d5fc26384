//! The typed replies every primitive's scripts decode into, and the decoders their codes
//! share: what an attempt, claim, renewal, release, owned TTL and force release answer is one
//! shape across primitives, so each is decoded here, once (`decode_attempt_reply`,
//! `decode_claim`, `decode_renew`, `decode_release`, `decode_owned_ttl`, `decode_broken`). A
//! script's own reply codes are stated in its doc comment; where a code names a key of another
//! type, the script's request says which key (`wrong_key`).

use std::time::Duration;

use redis::Value;

use super::LockKeys;
use super::rwlock::RwState;
use crate::error::{Error, Result};

/// The answer to one acquisition attempt on one store.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Attempt {
    Acquired {
        fence: u64,
    },
    Busy {
        /// The holder's remaining TTL (`None`: no expiry, or free but owed to a fair waiter).
        holder_ttl: Option<Duration>,
        /// Set when the attempt registered us as a waiter: how long to block at most before
        /// coming back.
        block: Option<Duration>,
        /// No grant we could pop was pending: a grant popped later was made after this reply.
        fresh: bool,
        /// Server time of the reply, Unix ms.
        server_ms: u64,
        /// Who holds the lock, as the busy answer read it (only a busy answer reads it: an
        /// acquisition reads no more than before); `None` when nothing holds the key (free but
        /// owed to a fair waiter or a waiting writer).
        holder: Option<Box<BusyHolder>>,
    },
}

/// The holder a busy answer reports: its stored information and the lock's remaining TTL as
/// `inspect` reports it (for a semaphore, the permit that expires first; for a read-write
/// lock, the whole lock's).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct BusyHolder {
    pub(crate) info: Info,
    /// `None`: no expiry.
    pub(crate) ttl: Option<Duration>,
}

impl BusyHolder {
    /// The holder fields of a busy reply, after its five integers: `info` (`host \n pid \n
    /// since \n meta`), then the lock's remaining TTL when it differs from the reply's `pttl`
    /// (else `pttl`); `None` when the reply has none (nothing holds the key).
    pub(crate) fn decode(rest: &[Value], pttl: i64) -> Option<Box<BusyHolder>> {
        let (info, ttl) = match rest {
            [] => return None,
            [info] => (info, pttl),
            [info, ttl, ..] => (info, int(ttl).unwrap_or(pttl)),
        };
        Some(Box::new(BusyHolder {
            info: Info::parse(&text(info)),
            ttl: millis(ttl),
        }))
    }
}

/// Decodes the five integers every primitive's acquire script answers with, `{status, value,
/// block, fresh, now}`: `1` acquired (`value`: the fencing token); `0` busy (`value`: the
/// holder's remaining TTL, `block`: how long the registered caller may block, `fresh`: `1` when
/// no grant it could pop was pending, `now`: server ms; `rest`: the holder, see
/// [`BusyHolder::decode`]); a negative status names the key that holds another type, which
/// `wrong_key` maps to its name (`None`: not a code of this script).
pub(crate) fn decode_attempt(
    (status, value, block, fresh, server_ms): (i64, i64, i64, i64, i64),
    rest: &[Value],
    wrong_key: impl FnOnce(i64) -> Option<String>,
    what: &'static str,
) -> Result<Attempt> {
    match status {
        1 => Ok(Attempt::Acquired {
            fence: u64::try_from(value).unwrap_or(0),
        }),
        0 => Ok(Attempt::Busy {
            holder_ttl: millis(value),
            block: millis(block),
            fresh: fresh == 1,
            server_ms: u64::try_from(server_ms).unwrap_or(0),
            holder: BusyHolder::decode(rest, value),
        }),
        code => match wrong_key(code) {
            Some(redis_key) => Err(Error::WrongType { redis_key }),
            None => Err(unexpected(what)),
        },
    }
}

/// Decodes an acquire script's reply in either of its forms: a fast path's fencing token alone
/// (a single integer, the cheapest reply for Redis to build and for us to read), or the five
/// integers of the full path, a busy one followed by its holder (see [`decode_attempt`]).
pub(crate) fn decode_attempt_reply(
    reply: Value,
    wrong_key: impl FnOnce(i64) -> Option<String>,
    what: &'static str,
) -> Result<Attempt> {
    let v = match reply {
        Value::Int(fence) if fence > 0 => {
            return Ok(Attempt::Acquired {
                fence: fence.unsigned_abs(),
            });
        }
        Value::Array(v) => v,
        _ => return Err(unexpected(what)),
    };
    match v.as_slice() {
        [a, b, c, d, e, rest @ ..] if rest.len() <= 2 => {
            match (int(a), int(b), int(c), int(d), int(e)) {
                (Some(a), Some(b), Some(c), Some(d), Some(e)) => {
                    decode_attempt((a, b, c, d, e), rest, wrong_key, what)
                }
                _ => Err(unexpected(what)),
            }
        }
        _ => Err(unexpected(what)),
    }
}

/// The answer to a waiter's claim of a grant it popped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Claim {
    Claimed {
        fence: u64,
    },
    /// The key is gone: the grant expired before it was claimed.
    Gone,
    /// Another token (or another type) is there now.
    NotOurs,
}

/// The answer to a renewal.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Renewal {
    Renewed,
    /// The key is gone.
    Gone,
    /// Another owner (or another type) is there.
    NotOurs,
}

/// The answer to a release.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Release {
    /// Given up: deleted, or handed over to a waiter.
    Released,
    /// Given up, but kept ownerless until the minimum hold has passed.
    Kept,
    /// The key was already gone.
    Late,
    /// Another owner (or another type) is there now; left untouched.
    Lost,
}

/// What one store says about the remaining TTL of a lock we hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum OwnedTtl {
    Left(Duration),
    NoExpiry,
    Gone,
    NotOurs,
}

/// A grant popped from a wake-up list: the lock is ours under `token`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Grant {
    pub(crate) token: String,
    pub(crate) fence: u64,
    /// Server time of the release that made it, Unix ms.
    pub(crate) server_ms: u64,
}

/// A wake-up list element: `token fence server_ms`, as `hand_over` (`lua.rs`) pushes it.
pub(crate) fn parse_grant(grant: &str) -> Option<Grant> {
    let mut parts = grant.split(' ');
    let token = parts.next()?.to_owned();
    let fence = parts.next()?.parse().ok()?;
    let server_ms = parts.next()?.parse().ok()?;
    Some(Grant {
        token,
        fence,
        server_ms,
    })
}

/// Who holds a lock, as stored with it (the decoded `INSPECT` reply).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Holder {
    pub(crate) remaining_ttl: Option<Duration>,
    pub(crate) host: String,
    pub(crate) pid: u32,
    /// Server clock, Unix ms.
    pub(crate) since_ms: u64,
    pub(crate) fence: u64,
    pub(crate) meta: Option<String>,
    /// End of the minimum hold, Unix ms (server clock), if one was asked for.
    pub(crate) hold_until_ms: Option<u64>,
    /// `false` during a minimum hold or cool-down after release.
    pub(crate) owned: bool,
    /// End of the cool-down a release asked for, Unix ms (server clock).
    pub(crate) cool_until_ms: Option<u64>,
    /// Live waiter registrations.
    pub(crate) waiters: u32,
    /// Fair waiters queued.
    pub(crate) queued: u32,
    /// The waiter id at the head of the fair queue.
    pub(crate) queue_head: Option<String>,
    /// Readers and waiting writers, for a read-write lock (`None`: a mutex).
    pub(crate) rw: Option<RwState>,
    /// The lock was taken by the native fast path, which does not store its fencing token:
    /// `fence` is the counter's value, at least the holder's and below any later holder's.
    pub(crate) fence_is_counter: bool,
}

/// The holder of a lock broken by `force_release`.
pub(crate) type Broken = Option<(String, u32)>;

/// A reply of a shape the scripts never send: a bug or a foreign script of the same name.
pub(crate) fn unexpected(what: &'static str) -> Error {
    Error::Redis(redis::RedisError::from((
        redis::ErrorKind::UnexpectedReturnType,
        what,
    )))
}

/// An integer in a reply (Lua numbers arrive as integers, fields as bulk strings).
pub(crate) fn int(v: &Value) -> Option<i64> {
    match v {
        Value::Int(i) => Some(*i),
        Value::BulkString(b) => std::str::from_utf8(b).ok()?.parse().ok(),
        Value::SimpleString(s) => s.parse().ok(),
        _ => None,
    }
}

/// A non-negative integer in a reply.
pub(crate) fn uint(v: &Value) -> Option<u64> {
    int(v).and_then(|i| u64::try_from(i).ok())
}

/// A count in a reply: a non-negative integer, 0 for anything else.
pub(crate) fn count(v: &Value) -> u32 {
    int(v).and_then(|c| u32::try_from(c).ok()).unwrap_or(0)
}

pub(crate) fn text(v: &Value) -> String {
    match v {
        Value::BulkString(b) => String::from_utf8_lossy(b).into_owned(),
        Value::SimpleString(s) => s.clone(),
        Value::Int(i) => i.to_string(),
        _ => String::new(),
    }
}

/// A non-negative reply value as milliseconds; negative codes mean "none".
pub(crate) fn millis(v: i64) -> Option<Duration> {
    u64::try_from(v).ok().map(Duration::from_millis)
}

/// An `INSPECT` script's reply, whatever the primitive: `{}` free, `{code}` the lock key holds
/// another type (another primitive's lock, or foreign data), else the fields, which `fields`
/// reads (`None`: a shape the script never sends, `what` says whose).
pub(crate) fn decode_inspect<T>(
    keys: &LockKeys,
    v: &[Value],
    what: &'static str,
    fields: impl FnOnce(&[Value]) -> Option<T>,
) -> Result<Option<T>> {
    match v {
        [] => Ok(None),
        [_] => Err(Error::WrongType {
            redis_key: keys.lock.clone(),
        }),
        _ => fields(v).map(Some).ok_or_else(|| unexpected(what)),
    }
}

/// Holder information as the scripts store it: `host \n pid \n since \n meta` (`since`: Unix
/// ms; the metadata may hold newlines of its own).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Info {
    pub(crate) host: String,
    pub(crate) pid: u32,
    pub(crate) since_ms: u64,
    pub(crate) meta: Option<String>,
}

impl Info {
    pub(crate) fn parse(info: &str) -> Info {
        let mut parts = info.splitn(4, '\n');
        let host = parts.next().unwrap_or("").to_owned();
        let pid = parts.next().and_then(|p| p.parse().ok()).unwrap_or(0);
        let since_ms = parts.next().and_then(|s| s.parse().ok()).unwrap_or(0);
        let meta = parts.next().filter(|m| !m.is_empty()).map(str::to_owned);
        Info {
            host,
            pid,
            since_ms,
            meta,
        }
    }
}

/// A claim's reply: the fencing token; `-2` the key is gone (the grant expired before it was
/// claimed); another negative code: another token (or another type) is there.
pub(crate) fn decode_claim(r: i64) -> Claim {
    match r {
        -2 => Claim::Gone,
        r if r < 0 => Claim::NotOurs,
        fence => Claim::Claimed {
            fence: u64::try_from(fence).unwrap_or(0),
        },
    }
}

/// A renewal's reply: `1` renewed, `0` the key is gone, anything else another owner (or
/// another type) is there.
pub(crate) fn decode_renew(r: i64) -> Renewal {
    match r {
        1 => Renewal::Renewed,
        0 => Renewal::Gone,
        _ => Renewal::NotOurs,
    }
}

/// An owned-TTL script's reply: the ms left; `-1` no expiry, `-2` gone, `-3` another owner
/// (or another type).
pub(crate) fn decode_owned_ttl(r: i64) -> OwnedTtl {
    match r {
        -1 => OwnedTtl::NoExpiry,
        -2 => OwnedTtl::Gone,
        -3 => OwnedTtl::NotOurs,
        ms => OwnedTtl::Left(Duration::from_millis(u64::try_from(ms).unwrap_or(0))),
    }
}

/// A release's reply: `1` released, `2` released but kept ownerless (minimum hold,
/// cool-down), `0` late (the key was already gone); a negative code `wrong_key` names is a key
/// of another type (nothing was changed); any other: lost (another owner, or another type, is
/// there now).
pub(crate) fn decode_release(
    r: i64,
    wrong_key: impl FnOnce(i64) -> Option<String>,
) -> Result<Release> {
    Ok(match r {
        1 => Release::Released,
        2 => Release::Kept,
        0 => Release::Late,
        code => match wrong_key(code) {
            Some(redis_key) => return Err(Error::WrongType { redis_key }),
            None => Release::Lost,
        },
    })
}

/// A force release's reply: `[]` nobody held it, `[host, pid]` who did, `[code]` a key of
/// another type, which `wrong_key` names (any other code or shape: the lock key).
pub(crate) fn decode_broken(
    keys: &LockKeys,
    v: &[String],
    wrong_key: impl FnOnce(&str) -> Option<String>,
) -> Result<Broken> {
    match v {
        [] => Ok(None),
        [host, pid] => Ok(Some((host.clone(), pid.parse().unwrap_or(0)))),
        [code] => Err(Error::WrongType {
            redis_key: wrong_key(code).unwrap_or_else(|| keys.lock.clone()),
        }),
        _ => Err(Error::WrongType {
            redis_key: keys.lock.clone(),
        }),
    }
}

/// What a native attempt found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum NativeTry {
    /// The lock was free and is ours now, with this fencing token.
    Acquired(u64),
    /// Not taken: the `ACQUIRE` script decides what the key is, giving back the fencing
    /// number the attempt used up (`AttemptArgs::burned`), if any.
    Busy(Option<(u64, bool)>),
    /// The fencing counter holds another type; `took`: the `SET` took the lock all the same,
    /// and it is to be given back (an undo release) so that Redis is left as it was.
    FenceType { took: bool },
}

#[cfg(test)]
mod tests {
    use super::*;

    fn keys() -> LockKeys {
        LockKeys::new("lock:", "k").unwrap()
    }

    #[test]
    fn claim_tells_an_expired_grant_from_a_taken_one() {
        assert_eq!(decode_claim(12), Claim::Claimed { fence: 12 });
        assert_eq!(decode_claim(-2), Claim::Gone);
        assert_eq!(decode_claim(-1), Claim::NotOurs);
    }

    #[test]
    fn renew_release_and_owned_ttl_codes() {
        assert_eq!(decode_renew(1), Renewal::Renewed);
        assert_eq!(decode_renew(0), Renewal::Gone);
        assert_eq!(decode_renew(-1), Renewal::NotOurs);
        let k = keys();
        let signal = |code| (code == -4).then(|| k.signal.clone());
        assert_eq!(decode_release(1, signal).unwrap(), Release::Released);
        assert_eq!(decode_release(2, signal).unwrap(), Release::Kept);
        assert_eq!(decode_release(0, signal).unwrap(), Release::Late);
        assert_eq!(decode_release(-1, signal).unwrap(), Release::Lost);
        match decode_release(-4, signal) {
            Err(Error::WrongType { redis_key }) => assert_eq!(redis_key, k.signal),
            other => panic!("{other:?}"),
        }
        assert_eq!(decode_owned_ttl(-1), OwnedTtl::NoExpiry);
        assert_eq!(decode_owned_ttl(-2), OwnedTtl::Gone);
        assert_eq!(decode_owned_ttl(-3), OwnedTtl::NotOurs);
        assert_eq!(
            decode_owned_ttl(1500),
            OwnedTtl::Left(Duration::from_millis(1500))
        );
    }

    #[test]
    fn force_release_reply_decodes() {
        let k = keys();
        let signal = |code: &str| (code == "-4").then(|| k.signal.clone());
        assert_eq!(decode_broken(&k, &[], signal).unwrap(), None);
        assert_eq!(
            decode_broken(&k, &["h".into(), "12".into()], signal).unwrap(),
            Some(("h".into(), 12))
        );
        match decode_broken(&k, &["-4".into()], signal) {
            Err(Error::WrongType { redis_key }) => assert_eq!(redis_key, k.signal),
            other => panic!("{other:?}"),
        }
        for other in [
            &["-2".to_owned()][..],
            &["a".into(), "b".into(), "c".into()],
        ] {
            match decode_broken(&k, other, signal) {
                Err(Error::WrongType { redis_key }) => assert_eq!(redis_key, k.lock),
                other => panic!("{other:?}"),
            }
        }
    }

    #[test]
    fn a_busy_answer_carries_its_holder() {
        let reply = |rest: &[Value]| {
            let mut v: Vec<Value> = [0, 250, -1, 1, 0].into_iter().map(Value::Int).collect();
            v.extend_from_slice(rest);
            decode_attempt_reply(Value::Array(v), |_| None, "test")
        };
        let holder = |a: Attempt| match a {
            Attempt::Busy { holder, .. } => holder,
            Attempt::Acquired { .. } => panic!("busy"),
        };
        // Nothing holds the key: no holder.
        assert_eq!(holder(reply(&[]).unwrap()), None);
        // The information; the TTL is the reply's own unless a second one follows.
        let info = Value::BulkString(b"web-1\n42\n1700\nline 1\nline 2".to_vec());
        let h = holder(reply(std::slice::from_ref(&info)).unwrap()).unwrap();
        assert_eq!(
            (h.info.host.as_str(), h.info.pid, h.info.since_ms, h.ttl),
            ("web-1", 42, 1700, Some(Duration::from_millis(250)))
        );
        assert_eq!(h.info.meta.as_deref(), Some("line 1\nline 2"));
        let h = holder(reply(&[info.clone(), Value::Int(900)]).unwrap()).unwrap();
        assert_eq!(h.ttl, Some(Duration::from_millis(900)));
        // Nothing stored with the lock (kept, or handed over): an empty holder.
        let h = holder(reply(&[Value::BulkString(Vec::new())]).unwrap()).unwrap();
        assert_eq!((h.info.host.as_str(), h.info.since_ms), ("", 0));
        // A longer reply is not one of ours.
        assert!(reply(&[info, Value::Int(1), Value::Int(2)]).is_err());
    }

    #[test]
    fn grants_parse() {
        assert_eq!(
            parse_grant("abc 5 123"),
            Some(Grant {
                token: "abc".into(),
                fence: 5,
                server_ms: 123
            })
        );
        assert_eq!(parse_grant("abc 5"), None);
        assert_eq!(parse_grant("abc x 1"), None);
    }
}
