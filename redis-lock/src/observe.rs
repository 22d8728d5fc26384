//! Watching a lock from outside: `LockClient::observe` and `LockObserver`, which reports who
//! holds a lock name, then each change, as Redis announces it.
//!
//! An observer is a thread of its own (`redis-lock-observe`) that reads the lock's state on
//! the client's tracked connection (`store/notify.rs`), so that Redis announces the next
//! change to the key, and reads again when it does. Where the server does not notify (a
//! Redlock quorum, an ACL without tracking), it reads every third of the client's default TTL,
//! the interval at which a holder renews. The watchdogs' renewals change the key too; they
//! are read again and not reported (only a change of holder or of its state is).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{Receiver, RecvTimeoutError, Sender, TryRecvError, channel};
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex};

use crate::client::LockClient;
use crate::error::{Error, Result};
use crate::hold::primitive::Params;
use crate::hold::{Inner, Kind};
use crate::info::LockInfo;
use crate::store::notify::Watcher;

/// One change of an observed lock, as the client learnt of it.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct LockChange {
    /// The lock name (without namespace).
    pub key: String,
    /// The state before this change; `None` when the lock was free, and for the first
    /// change an observer reports (the state it found).
    pub before: Option<LockInfo>,
    /// The state now; `None`: free (released, expired or broken). As
    /// [`LockClient::inspect`] shows it: for a lock taken on the native fast path, whose
    /// fencing token Redis does not keep with it, the token shown is the fencing counter's
    /// value, which others' attempts move ahead of the holder's own while it is contended.
    pub now: Option<LockInfo>,
    /// When the observer read the new state.
    pub seen_at: Instant,
}

impl LockChange {
    /// Taken by a holder that was not there before (from free, or handed over to another
    /// acquisition: the fencing token or the time it was acquired changed).
    pub fn is_taken(&self) -> bool {
        match (&self.before, &self.now) {
            (_, None) => false,
            (None, Some(_)) => true,
            (Some(b), Some(n)) => {
                b.fencing_token != n.fencing_token || b.acquired_at != n.acquired_at
            }
        }
    }

    /// Free now, after it was held.
    pub fn is_freed(&self) -> bool {
        self.before.is_some() && self.now.is_none()
    }
}

/// Reports who holds one lock name, then every change, within about a round trip where the
/// server notifies (see [`LockClient::observe`]). Dropping it stops the observing.
///
/// # Examples
///
/// ```no_run
/// # fn main() -> redis_lock::Result<()> {
/// let locks = redis_lock::LockClient::open("redis://127.0.0.1/")?;
/// let scheduler = locks.observe("scheduler")?;
/// for change in scheduler.iter().take(3) {
///     match &change.now {
///         Some(holder) => println!("held by {:?} (token {})", holder.host, holder.fencing_token),
///         None => println!("free"),
///     }
/// }
/// # Ok(()) }
/// ```
#[derive(Debug)]
pub struct LockObserver {
    changes: Receiver<LockChange>,
    shared: Arc<Shared>,
}

#[derive(Debug, Default)]
struct Shared {
    /// Set by a notification; taken by the observer's thread.
    nudged: Mutex<bool>,
    wake: Condvar,
    stop: AtomicBool,
    notified: AtomicBool,
}

impl Watcher for Shared {
    fn changed(&self) {
        *self.nudged.lock() = true;
        self.wake.notify_one();
    }
}

impl LockObserver {
    /// The next change, waiting for it.
    ///
    /// # Errors
    ///
    /// [`Error::System`] when the observer's thread has ended (it cannot, but by a panic).
    pub fn recv(&self) -> Result<LockChange> {
        self.changes.recv().map_err(|_| ended())
    }

    /// The next change, waiting at most `timeout`: `None` when there was none.
    ///
    /// # Errors
    ///
    /// As [`recv`](Self::recv).
    pub fn recv_timeout(&self, timeout: Duration) -> Result<Option<LockChange>> {
        match self.changes.recv_timeout(timeout) {
            Ok(change) => Ok(Some(change)),
            Err(RecvTimeoutError::Timeout) => Ok(None),
            Err(RecvTimeoutError::Disconnected) => Err(ended()),
        }
    }

    /// A change already seen, without waiting.
    ///
    /// # Errors
    ///
    /// As [`recv`](Self::recv).
    pub fn try_recv(&self) -> Result<Option<LockChange>> {
        match self.changes.try_recv() {
            Ok(change) => Ok(Some(change)),
            Err(TryRecvError::Empty) => Ok(None),
            Err(TryRecvError::Disconnected) => Err(ended()),
        }
    }

    /// The changes, as they happen (blocking between them).
    pub fn iter(&self) -> impl Iterator<Item = LockChange> + '_ {
        self.changes.iter()
    }

    /// Whether changes are announced by the server (`true`: noticed within about a round
    /// trip) or read every third of the client's default TTL (a Redlock quorum, a server or
    /// ACL without client-side tracking).
    pub fn notified(&self) -> bool {
        self.shared.notified.load(Ordering::SeqCst)
    }
}

impl Drop for LockObserver {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::SeqCst);
        self.shared.changed();
    }
}

fn ended() -> Error {
    Error::System(std::io::Error::other("the lock observer's thread ended"))
}

impl LockClient {
    /// Watches lock `key` (a lock or a read-write lock) from outside, without holding it:
    /// the returned observer reports who holds it now, then each change (taken, handed over,
    /// freed by a release, an expiry or a break) as Redis announces it, within about a round
    /// trip. Where the server does not notify (see [`LockObserver::notified`]) it reads every
    /// third of the default TTL instead. A holder's renewals are not changes.
    ///
    /// One thread and one read per change; dropping the observer ends both.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidInput`] for a bad key; [`Error::System`] when no thread can be started.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn main() -> redis_lock::Result<()> {
    /// # let locks = redis_lock::LockClient::open("redis://127.0.0.1/")?;
    /// let leader = locks.observe("scheduler")?;
    /// let first = leader.recv()?; // the state now
    /// println!("held: {}", first.now.is_some());
    /// if let Some(change) = leader.recv_timeout(std::time::Duration::from_secs(5))? {
    ///     println!("changed: taken {}, freed {}", change.is_taken(), change.is_freed());
    /// }
    /// # Ok(()) }
    /// ```
    pub fn observe(&self, key: &str) -> Result<LockObserver> {
        let keys = self.inner.keys(key)?;
        let (tx, rx) = channel();
        let shared = Arc::new(Shared::default());
        let inner = Arc::clone(&self.inner);
        let thread = Arc::clone(&shared);
        let key = key.to_owned();
        std::thread::Builder::new()
            .name("redis-lock-observe".into())
            .spawn(move || run(&inner, &key, &keys, &thread, &tx))
            .map_err(Error::System)?;
        Ok(LockObserver {
            changes: rx,
            shared,
        })
    }
}

/// What tells two states apart: everything but what moves without a change of holder (the
/// time left, which renewals move, and the waiters).
fn identity(info: &Option<LockInfo>) -> Option<LockInfo> {
    info.clone().map(|mut i| {
        i.remaining_ttl = None;
        i.waiters = 0;
        i.queued = 0;
        i.queue_head = None;
        i.writers_waiting = 0;
        i
    })
}

fn run(
    inner: &Inner,
    key: &str,
    keys: &crate::wire::LockKeys,
    shared: &Arc<Shared>,
    changes: &Sender<LockChange>,
) {
    let id = inner.registry.next_id();
    let watcher: Weak<dyn Watcher> = Arc::downgrade(&(Arc::clone(shared) as Arc<dyn Watcher>));
    let mutex = Kind::Mutex.make(Params::DEFAULT);
    let rwlock = Kind::Read.make(Params::DEFAULT);
    let poll = inner.config.default_ttl / 3;
    // Whether the name was a read-write lock when last read (else a mutex is tried first).
    let mut rw = false;
    let mut last: Option<Option<LockInfo>> = None;
    let mut last_identity: Option<Option<LockInfo>> = None;
    while !shared.stop.load(Ordering::SeqCst) {
        let first = if rw { &rwlock } else { &mutex };
        let (read, notified) = match inner.deployment.observe(&**first, keys, id, &watcher) {
            // Not the kind read last: the other one (its own script tells), remembered, so
            // that a read-write lock costs one request per read, not two.
            (Err(Error::WrongType { redis_key }), _) if redis_key == keys.lock => {
                rw = !rw;
                let other = if rw { &rwlock } else { &mutex };
                inner.deployment.observe(&**other, keys, id, &watcher)
            }
            other => other,
        };
        shared.notified.store(notified, Ordering::SeqCst);
        match read {
            Ok(holder) => {
                let now = holder.map(|h| LockInfo::from_holder(key, h));
                let now_identity = identity(&now);
                if last_identity.as_ref() != Some(&now_identity) {
                    let change = LockChange {
                        key: key.to_owned(),
                        before: last.take().flatten(),
                        now: now.clone(),
                        seen_at: Instant::now(),
                    };
                    if changes.send(change).is_err() {
                        break;
                    }
                    last_identity = Some(now_identity);
                }
                last = Some(now);
            }
            Err(error) => {
                tracing::debug!(target: "redis_lock", key, %error, "observing a lock: the read failed; trying again");
            }
        }
        let mut nudged = shared.nudged.lock();
        if !*nudged && !shared.stop.load(Ordering::SeqCst) {
            shared.wake.wait_for(&mut nudged, poll);
        }
        *nudged = false;
    }
    inner.deployment.unwatch(keys, id);
}
