//! What `inspect` tells about a lock.

use std::time::{Duration, SystemTime};

use redis::Value;

use crate::error::{Error, Result};
use crate::ops::unix_ms;

/// Who holds a lock and since when, as stored with the lock by the holder.
///
/// Returned by [`LockClient::inspect`](crate::LockClient::inspect). The owner token is not
/// included: it is what lets a holder renew and release.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct LockInfo {
    /// The lock name (without namespace).
    pub key: String,
    /// Host name of the holder.
    pub host: String,
    /// Process id of the holder on its host.
    pub pid: u32,
    /// When the lock was acquired (Redis server clock).
    pub acquired_at: SystemTime,
    /// Time until the lock expires unless renewed; `None` when the key has no expiry.
    pub remaining_ttl: Option<Duration>,
    /// The fencing token of this acquisition.
    pub fencing_token: u64,
    /// The holder's metadata, if it gave any.
    pub metadata: Option<String>,
    /// `false` during a minimum hold after release: the lock stays taken but nobody owns it.
    /// (A lock that a release has just handed to a waiter is owned, but shows empty holder
    /// fields until its new holder's first renewal, at most a third of a second later.)
    pub owned: bool,
    /// End of the minimum hold, if one was asked for.
    pub hold_until: Option<SystemTime>,
}

fn text(v: &Value) -> String {
    match v {
        Value::BulkString(b) => String::from_utf8_lossy(b).into_owned(),
        Value::SimpleString(s) => s.clone(),
        Value::Int(i) => i.to_string(),
        _ => String::new(),
    }
}

fn int(v: &Value) -> i64 {
    match v {
        Value::Int(i) => *i,
        other => text(other).parse().unwrap_or(0),
    }
}

impl LockInfo {
    pub(crate) fn from_reply(key: &str, v: &[Value]) -> Result<LockInfo> {
        let [pttl, host, pid, since, fence, meta, hold_until, no_owner] = v else {
            return Err(Error::Redis(redis::RedisError::from((
                redis::ErrorKind::UnexpectedReturnType,
                "unexpected inspect reply",
            ))));
        };
        let since = u64::try_from(int(since)).unwrap_or(0);
        let hold_until = u64::try_from(int(hold_until)).unwrap_or(0);
        let meta = text(meta);
        Ok(LockInfo {
            key: key.to_owned(),
            host: text(host),
            pid: u32::try_from(int(pid)).unwrap_or(0),
            acquired_at: unix_ms(since),
            remaining_ttl: u64::try_from(int(pttl)).ok().map(Duration::from_millis),
            fencing_token: u64::try_from(int(fence)).unwrap_or(0),
            metadata: (!meta.is_empty()).then_some(meta),
            owned: int(no_owner) == 0,
            hold_until: (hold_until > since).then(|| unix_ms(hold_until)),
        })
    }
}
