//! The one error type of the crate.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Everything that can go wrong when taking, keeping or giving back a lock.
///
/// Each variant is a case a caller handles differently: a busy lock is retried later, a lost
/// lock means side effects must not be committed, an invalid argument is a bug in the caller,
/// and a Redis or pool error is an outage.
///
/// As the standard library's guidelines ask, `Display` says what went wrong at this level and
/// [`source`](std::error::Error::source) carries the cause (the Redis, pool or operating
/// system error), so a report that prints the whole chain (`anyhow`'s `{:#}`, or walking
/// `source()`) says each thing once.
///
/// # Examples
///
/// ```
/// # fn main() {
/// let locks = redis_lock::LockClient::builder("redis://127.0.0.1:1/")
///     .connect_timeout(std::time::Duration::from_millis(100))
///     .build()
///     .unwrap();
/// let err = locks.try_lock("job").unwrap_err();
/// assert!(err.is_connection_error());
/// // The whole story: what failed, then why.
/// let mut text = err.to_string();
/// let mut cause = std::error::Error::source(&err);
/// while let Some(c) = cause {
///     text.push_str(&format!(": {c}"));
///     cause = c.source();
/// }
/// println!("{text}");
/// # }
/// ```
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// Another owner holds `key` and the call was not allowed to wait.
    #[error(
        "lock {key:?} is held by another owner{}",
        HolderInfo::describe(holder)
    )]
    Busy {
        /// The lock name as the caller gave it (without namespace).
        key: String,
        /// Who holds it and for how much longer, as Redis answered the call's last attempt
        /// (no further request is sent for it; `None` when nobody held it then, the lock
        /// being owed to a waiter, or under Redlock when no holder was on a majority of the
        /// servers); [`retry_after`](Self::retry_after) reads its remaining TTL.
        holder: Option<Box<HolderInfo>>,
    },
    /// This thread already holds `key` through this client, and a waiting call (`lock`,
    /// `acquire_with`, ...) did not ask for reentrancy: it would wait for itself (forever,
    /// with the default wait). The `try_` family answers `Ok(None)` (busy) instead, as
    /// `std`'s `try_lock` does. Join the held
    /// lock with [`LockClient::lock_reentrant`](crate::LockClient::lock_reentrant) or
    /// [`LockOptions::reentrant`](crate::LockOptions::reentrant), or release it first.
    #[error(
        "lock {key:?} is already held by this thread through this client; waiting for it would wait for itself"
    )]
    AlreadyHeld {
        /// The lock name as the caller gave it (without namespace).
        key: String,
    },
    /// The acquisition of `key` was cancelled through its
    /// [`CancelToken`](crate::CancelToken) before it got the lock. It left the wait queue;
    /// nothing is held.
    #[error("the acquisition of lock {key:?} was cancelled")]
    Cancelled {
        /// The lock name as the caller gave it (without namespace).
        key: String,
    },
    /// Another owner still held `key` when the wait budget ran out (or the retry strategy's
    /// [`max_attempts`](crate::RetryStrategy::max_attempts) did).
    #[error(
        "timed out after {waited:?} waiting for lock {key:?}{}",
        HolderInfo::describe(holder)
    )]
    Timeout {
        /// The lock name as the caller gave it (without namespace).
        key: String,
        /// How long the call waited before giving up.
        waited: Duration,
        /// Who held it then, as for [`Error::Busy`].
        holder: Option<Box<HolderInfo>>,
    },
    /// The lock expired or was taken by someone else while this holder thought it held it.
    #[error("lock {key:?} was lost: {reason}")]
    Lost {
        /// The lock name as the caller gave it (without namespace).
        key: String,
        /// What the library saw: expired, owned by another holder, renewal failing.
        reason: LostReason,
    },
    /// The Redis key of this lock holds a value of another type (not written by redis-lock).
    #[error(
        "redis key {redis_key:?} holds a value of another type: not a redis-lock lock, or another kind of lock (a mutex name used for a semaphore, or the reverse)"
    )]
    WrongType {
        /// The full Redis key, namespace included.
        redis_key: String,
    },
    /// An argument was rejected before anything was sent to Redis.
    #[error("invalid {what}: {reason}")]
    InvalidInput {
        /// Which argument: `key`, `ttl`, `wait`, `url`, `namespace`, ...
        what: &'static str,
        /// Why it was rejected.
        reason: String,
    },
    /// Fewer replicas acknowledged a write in time than were required: an acquisition's (the
    /// lock was released), or a commit's under a lock taken with a replica acknowledgement
    /// (its writes are applied on the master, and may be lost in a failover).
    #[error("lock {key:?}: {acked} of {required} replicas acknowledged the write in time")]
    ReplicaAck {
        /// The lock name as the caller gave it.
        key: String,
        /// How many replicas had to acknowledge.
        required: u32,
        /// How many did.
        acked: u32,
    },
    /// Redlock: fewer than a majority of the servers answered, so the call could not tell
    /// whether the lock is (or was) held. Nothing was left behind: a partial acquisition is
    /// released. Retrying later may help ([`is_connection_error`](Self::is_connection_error)).
    #[error(
        "lock {key:?}: {answered} of {total} redis servers answered, {required} are needed (last error: {last_error})"
    )]
    NoQuorum {
        /// The lock name as the caller gave it (empty for `ping`).
        key: String,
        /// How many servers answered.
        answered: usize,
        /// How many must answer: a majority of `total`.
        required: usize,
        /// How many servers the client was built with.
        total: usize,
        /// The last server error seen, for diagnosis.
        last_error: String,
    },
    /// The operating system refused something the lock needs: a watchdog thread, random
    /// numbers for the owner token.
    #[error("the operating system refused a resource the lock needs")]
    System(#[source] std::io::Error),
    /// A Redis command failed (I/O, protocol or server error): the cause is its `source`.
    #[error("a redis request failed")]
    Redis(#[from] redis::RedisError),
    /// No pooled connection became available in time: every connection of the pool was in
    /// use for the whole [`pool_timeout`](crate::Builder::pool_timeout) (on a client built
    /// from an application's pool, also one that could not connect). Nothing was sent. The
    /// cause is its `source`.
    #[error("no redis connection became available in time")]
    Pool(#[from] r2d2::Error),
    /// No connection to `server` could be made: it was refused, or the connect or its
    /// handshake did not finish within [`connect_timeout`](crate::Builder::connect_timeout).
    /// Nothing was sent, so nothing was done. The cause is its `source`.
    #[error("cannot connect to redis at {server}")]
    Connect {
        /// The server (its URL without the password, or the deployment: `sentinel master
        /// ...`, `cluster [...]`).
        server: String,
        /// The connect's own failure, with its kind: the operating system's (`ConnectionRefused`,
        /// `TimedOut`, ...), the handshake's (`TimedOut`: the server accepted the connection
        /// but did not answer), or the deployment's (no sentinel named the master, no cluster
        /// node answered: `Other`).
        source: std::io::Error,
    },
    /// A lease handle given up by [`LockGuard::into_handle`](crate::LockGuard::into_handle)
    /// is resumed at most once: resuming it moves the lock to a new owner token, and this
    /// handle's token holds `key` no longer. It was resumed already (in this or another
    /// process), or the lock expired or was released meanwhile. Nothing was written. (A shared
    /// handle, [`LockGuard::handle`](crate::LockGuard::handle), reports
    /// [`Error::Lost`] instead: it is never taken.)
    #[error(
        "lock {key:?} is no longer held under this lease handle: it was resumed already (a handle given up by into_handle is resumed once), or the lock expired or was released"
    )]
    HandleSpent {
        /// The lock name as the caller gave it (without namespace).
        key: String,
    },
    /// This thread holds a read lock on `key` through this client and asked for its write
    /// lock: the writer would wait for this very reader, forever. Refused at once; release the
    /// read lock first (the other way round, a writer taking a read lock, is a downgrade and
    /// allowed: see [`LockClient::read_lock`](crate::LockClient::read_lock)).
    #[error(
        "this thread holds a read lock on {key:?}; the write lock would wait for itself: release the read lock first"
    )]
    UpgradeRefused {
        /// The lock name as the caller gave it (without namespace).
        key: String,
    },
}

/// Who held a lock that a call did not get, as Redis described it in the answer to the call's
/// last attempt (the busy answer carries it, so building the error sends nothing more):
/// carried by [`Error::Busy`] and [`Error::Timeout`], so that a handler can answer with
/// `Retry-After` ([`Error::retry_after`]) or say who holds the lock. Each field is `None`
/// where Redis does not know it (a lock handed to a waiter that has not claimed it yet, or
/// cooling down after its release, has no holder stored). A semaphore names the permit that
/// expires first; a read-write lock its writer, or the read share that expires first (with
/// the whole lock's TTL).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
#[non_exhaustive]
pub struct HolderInfo {
    /// Host name of the holder.
    pub host: Option<String>,
    /// Process id of the holder on its host.
    pub pid: Option<u32>,
    /// When it acquired the lock.
    pub since: Option<std::time::SystemTime>,
    /// The holder's metadata, if it gave any.
    pub metadata: Option<String>,
    /// How long until the lock (for a semaphore: the permit that expires first) expires
    /// unless renewed; `None` without an expiry. Under Redlock, as `inspect` combines it:
    /// how long a majority of the servers still hold it.
    pub remaining_ttl: Option<Duration>,
}

impl HolderInfo {
    /// `": held by host (pid N), expires in 1.2s"`, or nothing: the tail of the busy and
    /// timeout messages.
    fn describe(holder: &Option<Box<HolderInfo>>) -> String {
        let Some(h) = holder else {
            return String::new();
        };
        let mut s = String::new();
        match (&h.host, h.pid) {
            (Some(host), Some(pid)) => s.push_str(&format!(": held by {host} (pid {pid})")),
            (Some(host), None) => s.push_str(&format!(": held by {host}")),
            _ => {}
        }
        if let Some(ttl) = h.remaining_ttl {
            s.push_str(if s.is_empty() { ": " } else { ", " });
            s.push_str(&format!("expires in {ttl:?}"));
        }
        s
    }
}

impl HolderInfo {
    /// The holder as stored with a lock or permit (see [`holder_fields`]), with the time its
    /// lock has left.
    pub(crate) fn stored(
        host: String,
        pid: u32,
        since_ms: u64,
        metadata: Option<String>,
        remaining_ttl: Option<Duration>,
    ) -> HolderInfo {
        let (host, pid, since) = holder_fields(host, pid, since_ms);
        HolderInfo {
            host,
            pid,
            since,
            metadata,
            remaining_ttl,
        }
    }
}

/// A time the scripts store, Unix ms.
pub(crate) fn unix_ms(t: u64) -> SystemTime {
    UNIX_EPOCH + Duration::from_millis(t)
}

/// A holder's host, pid and acquisition time as stored with a lock or permit; `None` where no
/// holder information is stored (the scripts then answer an empty host, pid 0 and time 0:
/// a lock kept after its release, or one a release handed to a waiter that has not claimed
/// it yet). A stored one always has the server's acquisition time.
pub(crate) fn holder_fields(
    host: String,
    pid: u32,
    since_ms: u64,
) -> (Option<String>, Option<u32>, Option<SystemTime>) {
    if host.is_empty() && since_ms == 0 {
        (None, None, None)
    } else {
        (Some(host), Some(pid), Some(unix_ms(since_ms)))
    }
}

/// Why a lock counts as lost. Carried by [`Error::Lost`] and by the loss callback.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum LostReason {
    /// The key was gone after its TTL had run out: the lock expired and nobody holds it now.
    Expired,
    /// The key was gone while its TTL still ran: somebody deleted it (an operator's
    /// [`force_release`](crate::LockClient::force_release) with nobody waiting, a `DEL`, an
    /// eviction, or a failover to a replica that never had it).
    Deleted,
    /// Another owner's token is under the key now.
    TakenOver,
    /// Renewal kept failing (Redis unreachable) until the lock's TTL had run out.
    RenewalFailed,
    /// The watchdog stopped renewing after `max_hold` and the TTL ran out.
    MaxHoldReached,
    /// This process gave it up while the guard lived:
    /// [`release_all`](crate::LockClient::release_all) released it, or a reentrant sibling
    /// guard handed it to a [`LeaseHandle`](crate::LeaseHandle). Only ever reported by the
    /// guard (`is_lost`, `ensure_held`): it is not a loss the watchdog sees, so `on_lost` is not
    /// called for it.
    Released,
}

impl std::fmt::Display for LostReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            LostReason::Expired => "it expired",
            LostReason::Deleted => "it was deleted before its ttl ran out",
            LostReason::TakenOver => "another owner holds it now",
            LostReason::RenewalFailed => "renewal failed until the ttl ran out",
            LostReason::MaxHoldReached => "max_hold was reached and the ttl ran out",
            LostReason::Released => {
                "this process released it (release_all) or handed it to a lease handle"
            }
        })
    }
}

impl Error {
    /// `true` for [`Error::Busy`] and [`Error::Timeout`]: somebody else holds the lock.
    pub fn is_busy(&self) -> bool {
        matches!(self, Error::Busy { .. } | Error::Timeout { .. })
    }

    /// For [`Error::Busy`] and [`Error::Timeout`]: how long the holder's lock had left when
    /// the call gave up, the earliest a new attempt can succeed unless the holder releases
    /// it first: an HTTP handler's `Retry-After`. `None` for other errors, or when unknown.
    ///
    /// ```
    /// # fn handler(locks: &redis_lock::LockClient) -> Result<(), String> {
    /// match locks.acquire_with("invoice:42", &redis_lock::LockOptions::new().wait(std::time::Duration::ZERO)) {
    ///     Ok(_guard) => Ok(()),
    ///     Err(e) => match e.retry_after() {
    ///         Some(after) => Err(format!("429, Retry-After: {}", after.as_secs().max(1))),
    ///         None => Err(e.to_string()),
    ///     },
    /// }
    /// # }
    /// ```
    pub fn retry_after(&self) -> Option<Duration> {
        match self {
            Error::Busy { holder, .. } | Error::Timeout { holder, .. } => {
                holder.as_ref().and_then(|h| h.remaining_ttl)
            }
            _ => None,
        }
    }

    /// Who held the lock, for [`Error::Busy`] and [`Error::Timeout`].
    pub fn holder(&self) -> Option<&HolderInfo> {
        match self {
            Error::Busy { holder, .. } | Error::Timeout { holder, .. } => holder.as_deref(),
            _ => None,
        }
    }

    /// `true` for [`Error::Timeout`].
    pub fn is_timeout(&self) -> bool {
        matches!(self, Error::Timeout { .. })
    }

    /// `true` for [`Error::Lost`].
    pub fn is_lost(&self) -> bool {
        matches!(self, Error::Lost { .. })
    }

    /// `true` when Redis could not be reached or a connection broke: retrying later may help.
    pub fn is_connection_error(&self) -> bool {
        match self {
            Error::Pool(_) | Error::Connect { .. } | Error::NoQuorum { .. } => true,
            Error::Redis(e) => is_network_error(e),
            _ => false,
        }
    }

    /// `true` when the same call may succeed if retried later: a connection error (see
    /// [`is_connection_error`](Self::is_connection_error)), or a Redis Cluster in transition
    /// (`TRYAGAIN` or `ASK` while a lock's slot migrates, `MOVED` after redirections ran out,
    /// `CLUSTERDOWN`, `MASTERDOWN`, `READONLY` during a failover), or a server still loading
    /// its data after a restart (`LOADING`). Busy and lost locks are
    /// not errors of this kind: see [`is_busy`](Self::is_busy) and [`is_lost`](Self::is_lost).
    pub fn is_retryable(&self) -> bool {
        use redis::{ErrorKind, ServerErrorKind};
        if self.is_connection_error() {
            return true;
        }
        match self {
            Error::Redis(e) => matches!(
                e.kind(),
                ErrorKind::Server(
                    ServerErrorKind::TryAgain
                        | ServerErrorKind::Ask
                        | ServerErrorKind::Moved
                        | ServerErrorKind::ClusterDown
                        | ServerErrorKind::MasterDown
                        | ServerErrorKind::ReadOnly
                        | ServerErrorKind::BusyLoading
                )
            ),
            _ => false,
        }
    }

    /// The call failed before anything was sent (no connection): nothing is to be asked again
    /// or undone.
    pub(crate) fn nothing_sent(&self) -> bool {
        matches!(self, Error::Pool(_) | Error::Connect { .. })
    }

    pub(crate) fn invalid(what: &'static str, reason: impl Into<String>) -> Error {
        Error::InvalidInput {
            what,
            reason: reason.into(),
        }
    }
}

/// `true` for failures of the network path (refused, reset, timed out).
pub(crate) fn is_network_error(e: &redis::RedisError) -> bool {
    e.is_io_error() || e.is_connection_refusal() || e.is_timeout() || e.is_connection_dropped()
}

/// `Result` with [`Error`] as the default error type.
pub type Result<T, E = Error> = std::result::Result<T, E>;

#[cfg(test)]
mod tests {
    use super::Error;
    use redis::{ErrorKind, RedisError, ServerErrorKind};

    fn server(kind: ServerErrorKind) -> Error {
        Error::Redis(RedisError::from((ErrorKind::Server(kind), "test")))
    }

    #[test]
    fn a_loading_server_is_worth_retrying_but_is_not_an_outage() {
        let e = server(ServerErrorKind::BusyLoading);
        assert!(e.is_retryable());
        assert!(!e.is_connection_error());
    }

    #[test]
    fn refused_resources_and_server_answers_are_not_retryable() {
        assert!(!Error::System(std::io::Error::other("no threads")).is_retryable());
        let auth = Error::Redis(RedisError::from((ErrorKind::AuthenticationFailed, "test")));
        assert!(!auth.is_retryable() && !auth.is_connection_error());
    }
}
