//! What `inspect` tells about a lock.

use std::time::{Duration, SystemTime};

pub(crate) use crate::error::{holder_fields, unix_ms};
use crate::options::LockMode;
use crate::wire::Holder;

/// Who holds a lock and since when, as stored with the lock by the holder.
///
/// Returned by [`LockClient::inspect`](crate::LockClient::inspect). The owner token is not
/// included: it is what lets a holder renew and release.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct LockInfo {
    /// The lock name (without namespace).
    pub key: String,
    /// Host name of the holder; `None` while no holder information is stored with the lock:
    /// it is kept taken by nobody after its release (a minimum hold or a cool-down:
    /// [`owned`](Self::owned) is `false`), or a release has just handed it to a waiter that
    /// has not claimed it yet (it is owned; its new holder writes its information at its
    /// first renewal, at most a third of a second later).
    pub host: Option<String>,
    /// Process id of the holder on its host; `None` when [`host`](Self::host) is.
    pub pid: Option<u32>,
    /// When the lock was acquired (Redis server clock); `None` when [`host`](Self::host) is.
    pub acquired_at: Option<SystemTime>,
    /// Time until the lock expires unless renewed; `None` when the key has no expiry.
    pub remaining_ttl: Option<Duration>,
    /// The fencing token of this acquisition.
    pub fencing_token: u64,
    /// The holder's metadata, if it gave any.
    pub metadata: Option<String>,
    /// `false` during a minimum hold or cool-down after release: the lock stays taken but
    /// nobody owns it.
    /// (A lock that a release has just handed to a waiter is owned, but its holder is unknown,
    /// [`host`](Self::host) `None`, until its new holder's first renewal.)
    pub owned: bool,
    /// End of the minimum hold, if one was asked for.
    pub hold_until: Option<SystemTime>,
    /// Set while the lock cools down after its release
    /// ([`LockOptions::cooldown`](crate::LockOptions::cooldown),
    /// [`LockGuard::release_after`](crate::LockGuard::release_after)): when the cool-down ends.
    /// The lock frees at the later of this and [`hold_until`](Self::hold_until).
    pub cooling_until: Option<SystemTime>,
    /// Threads (of any process) registered as waiting for this lock, as Redis counts them
    /// now: waiters whose registration has not lapsed. Under Redlock, the most any server of
    /// the majority counts.
    pub waiters: u32,
    /// Fair waiters ([`RetryStrategy::fair`](crate::RetryStrategy::fair)) queued for this
    /// lock, in arrival order; part of [`waiters`](Self::waiters) while they are alive.
    pub queued: u32,
    /// The id of the fair waiter at the head of the queue: the next one the lock goes to.
    /// Opaque, random per acquisition; useful to see that the head moves.
    pub queue_head: Option<String>,
    /// For a read-write lock ([`LockClient::read_lock`](crate::LockClient::read_lock)): who
    /// holds it, [`LockMode::Write`] (a writer, described by the holder fields above) or
    /// [`LockMode::Read`] (readers; the holder fields describe the share that expires first);
    /// `None` for a mutex, and for a read-write lock cooling down after its release.
    pub mode: Option<LockMode>,
    /// Read shares held now (read-write locks; 0 otherwise).
    pub readers: u32,
    /// Writers waiting for a read-write lock (part of [`waiters`](Self::waiters)): while
    /// there are any, no new reader enters.
    pub writers_waiting: u32,
}

impl LockInfo {
    pub(crate) fn from_holder(key: &str, h: Holder) -> LockInfo {
        let (host, pid, acquired_at) = holder_fields(h.host, h.pid, h.since_ms);
        LockInfo {
            key: key.to_owned(),
            host,
            pid,
            acquired_at,
            remaining_ttl: h.remaining_ttl,
            fencing_token: h.fence,
            metadata: h.meta,
            owned: h.owned,
            hold_until: h.hold_until_ms.map(unix_ms),
            cooling_until: h.cool_until_ms.map(unix_ms),
            waiters: h.waiters,
            queued: h.queued,
            queue_head: h.queue_head,
            mode: h.rw.and_then(|rw| {
                if rw.writer {
                    Some(LockMode::Write)
                } else {
                    (rw.readers > 0).then_some(LockMode::Read)
                }
            }),
            readers: h.rw.map_or(0, |rw| rw.readers),
            writers_waiting: h.rw.map_or(0, |rw| rw.writers_waiting),
        }
    }
}
