//! Watching a lock from outside: `LockClient::observe` and `LockObserver`, which reports who
//! holds a lock name (a lock, a read-write lock, or a semaphore's permits), then each change,
//! as Redis announces it.
//!
//! An observer is a thread of its own (`redis-lock-observe`) that reads the lock's state on
//! the client's tracked connection (`store/notify/`), so that Redis announces the next
//! change to the key, and reads again when it does. Where the server does not notify (a
//! Redlock quorum, an ACL without tracking), it reads every third of the client's default TTL,
//! the interval at which a holder renews. The watchdogs' renewals change the key too; they
//! are read again and not reported (only a change of holder or of its state is).
//!
//! The kind of lock a name is shows in the reply: each kind's read fails with `WrongType` on
//! another kind's key, and the observer tries the next kind (a mutex, a read-write lock, a
//! semaphore), remembering the one that answered. A semaphore's permit that runs out changes
//! no key until somebody next touches the semaphore, so nothing is announced: the observer
//! reads again when the first permit it saw would expire.

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
use crate::semaphore::{PermitInfo, SemaphoreInfo};
use crate::store::notify::Watcher;
use crate::wire::LockKeys;
use crate::wire::semaphore::Permits;

/// One change of an observed lock, as the client learnt of it.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct LockChange {
    /// The lock name (without namespace).
    pub key: String,
    /// The state before this change; `None` when the lock was free or a semaphore, and for
    /// the first change an observer reports (the state it found).
    pub before: Option<LockInfo>,
    /// The state now; `None`: free (released, expired or broken), or a semaphore (see
    /// [`permits`](Self::permits)). As [`LockClient::inspect`] shows it: for a lock taken on
    /// the native fast path, whose fencing token Redis does not keep with it, the token shown
    /// is the fencing counter's value, which others' attempts move ahead of the holder's own
    /// while it is contended.
    pub now: Option<LockInfo>,
    /// For a name that is a semaphore: its permits in use before and now. `None` for a lock or
    /// a read-write lock (and for a free name the observer has not seen a semaphore at).
    pub permits: Option<PermitsChange>,
    /// When the observer read the new state.
    pub seen_at: Instant,
}

/// A change of an observed semaphore's permits in use ([`LockChange::permits`]): each
/// acquisition, release, expiry or break of a permit. Renewals, waiters and a change of the
/// limit alone are not changes (the limit and waiters shown are those read with the change).
///
/// # Examples
///
/// ```no_run
/// # fn main() -> redis_lock::Result<()> {
/// # let locks = redis_lock::LockClient::open("redis://127.0.0.1/")?;
/// for change in locks.observe("exports")?.iter() {
///     if let Some(permits) = &change.permits {
///         println!("{} -> {} permits in use", permits.in_use_before(), permits.in_use());
///         for p in permits.taken() {
///             println!("  taken by pid {:?} on {:?}, token {}", p.pid, p.host, p.fencing_token);
///         }
///     }
/// }
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct PermitsChange {
    /// The semaphore as the previous change showed it; `None` for the first change an
    /// observer reports, and when the name was free or another kind of lock before.
    pub before: Option<SemaphoreInfo>,
    /// The semaphore now, as [`Semaphore::inspect`](crate::Semaphore::inspect) shows it
    /// (no owner tokens); its `limit` is 0 when none is stored (the semaphore's keys expired
    /// after its last permit was released).
    pub now: SemaphoreInfo,
}

impl PermitsChange {
    /// Permits in use before this change (0 when [`before`](Self::before) is `None`).
    pub fn in_use_before(&self) -> u32 {
        self.before.as_ref().map_or(0, |b| b.in_use)
    }

    /// Permits in use now.
    pub fn in_use(&self) -> u32 {
        self.now.in_use
    }

    /// The permits held now that were not before (by fencing token): taken, or granted to a
    /// waiter by a release.
    pub fn taken(&self) -> impl Iterator<Item = &PermitInfo> + '_ {
        self.now.holders.iter().filter(|p| {
            !self
                .before
                .as_ref()
                .is_some_and(|b| b.holders.iter().any(|q| q.fencing_token == p.fencing_token))
        })
    }

    /// The permits held before that are not now: released, expired or broken.
    pub fn freed(&self) -> impl Iterator<Item = &PermitInfo> + '_ {
        self.before.iter().flat_map(|b| &b.holders).filter(|p| {
            !self
                .now
                .holders
                .iter()
                .any(|q| q.fencing_token == p.fencing_token)
        })
    }
}

impl LockChange {
    /// Taken by a holder that was not there before (from free, or handed over to another
    /// acquisition: the fencing token or the time it was acquired changed). For a semaphore:
    /// a permit was taken ([`PermitsChange::taken`]).
    pub fn is_taken(&self) -> bool {
        if let Some(permits) = &self.permits {
            return permits.taken().next().is_some();
        }
        match (&self.before, &self.now) {
            (_, None) => false,
            (None, Some(_)) => true,
            (Some(b), Some(n)) => {
                b.fencing_token != n.fencing_token || b.acquired_at != n.acquired_at
            }
        }
    }

    /// Free now, after it was held. For a semaphore: no permit in use now, after one was.
    pub fn is_freed(&self) -> bool {
        if let Some(permits) = &self.permits {
            return permits.in_use() == 0 && (permits.in_use_before() > 0 || self.before.is_some());
        }
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
    /// Watches lock `key` (a lock, a read-write lock or a semaphore) from outside, without
    /// holding it: the returned observer reports who holds it now, then each change (taken,
    /// handed over, freed by a release, an expiry or a break) as Redis announces it, within
    /// about a round trip. For a semaphore, each change of its permits in use
    /// ([`LockChange::permits`]); a permit's expiry is seen when it would have expired. Where
    /// the server does not notify (see [`LockObserver::notified`]) it reads every third of the
    /// default TTL instead. A holder's renewals are not changes.
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

/// The kinds of lock an observer can read, in the order it tries them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Seen {
    Mutex,
    ReadWrite,
    Semaphore,
}

impl Seen {
    fn next(self) -> Seen {
        match self {
            Seen::Mutex => Seen::ReadWrite,
            Seen::ReadWrite => Seen::Semaphore,
            Seen::Semaphore => Seen::Mutex,
        }
    }
}

/// One read of an observed name.
#[derive(Debug, Clone, PartialEq, Eq)]
enum State {
    /// A lock or a read-write lock (or a free name): its holder.
    Lock(Option<LockInfo>),
    /// A semaphore: its permits.
    Permits(SemaphoreInfo),
}

/// What tells two states apart: everything but what moves without a change of holder (the
/// time left, which renewals move, and the waiters; for a semaphore also the order of its
/// permits, earliest expiry first, which renewals move, and its limit).
fn identity(state: &State) -> State {
    match state {
        State::Lock(info) => State::Lock(info.clone().map(|mut i| {
            i.remaining_ttl = None;
            i.waiters = 0;
            i.queued = 0;
            i.queue_head = None;
            i.writers_waiting = 0;
            i
        })),
        State::Permits(info) => {
            let mut info = info.clone();
            info.limit = 0;
            info.available = 0;
            info.waiters = 0;
            info.queued = 0;
            for p in &mut info.holders {
                p.remaining_ttl = Duration::ZERO;
            }
            info.holders.sort_by_key(|p| p.fencing_token);
            State::Permits(info)
        }
    }
}

/// Reads a semaphore's permits the way `Deployment::observe` reads a lock: registered as a
/// watcher of its key, on the connection that keeps the key tracked where the store notifies.
/// The permits, and whether changes are notified.
fn observe_permits(
    inner: &Inner,
    keys: &LockKeys,
    id: u64,
    watcher: &Weak<dyn Watcher>,
) -> (Result<Option<Permits>>, bool) {
    let read = crate::wire::semaphore::inspect(keys);
    inner.deployment.observe_with(
        keys,
        &read,
        id,
        watcher,
        crate::hold::semaphore::redlock_refused,
    )
}

fn run(
    inner: &Inner,
    key: &str,
    keys: &LockKeys,
    shared: &Arc<Shared>,
    changes: &Sender<LockChange>,
) {
    let id = inner.registry.next_id();
    let watcher: Weak<dyn Watcher> = Arc::downgrade(&(Arc::clone(shared) as Arc<dyn Watcher>));
    let mutex = Kind::Mutex.make(Params::DEFAULT);
    let rwlock = Kind::Read.make(Params::DEFAULT);
    let poll = inner.config.default_ttl / 3;
    let read = |kind: Seen| -> (Result<State>, bool) {
        match kind {
            Seen::Mutex | Seen::ReadWrite => {
                let p = if kind == Seen::Mutex { &mutex } else { &rwlock };
                let (read, notified) = inner.deployment.observe(&**p, keys, id, &watcher);
                let state = read.map(|h| State::Lock(h.map(|h| LockInfo::from_holder(key, h))));
                (state, notified)
            }
            Seen::Semaphore => {
                let (read, notified) = observe_permits(inner, keys, id, &watcher);
                let state = read.map(|p| State::Permits(SemaphoreInfo::new(key, 0, p)));
                (state, notified)
            }
        }
    };
    // The kind of lock the name was when last read (a mutex first); another kind's key
    // answers `WrongType`, and the next kind is read, so that each read is one request.
    let mut kind = Seen::Mutex;
    let mut last: Option<State> = None;
    let mut last_identity: Option<State> = None;
    while !shared.stop.load(Ordering::SeqCst) {
        let (mut state, mut notified) = read(kind);
        for _ in 0..2 {
            match &state {
                Err(Error::WrongType { redis_key }) if *redis_key == keys.lock => {
                    kind = kind.next();
                    (state, notified) = read(kind);
                }
                _ => break,
            }
        }
        shared.notified.store(notified, Ordering::SeqCst);
        // A semaphore's permit that runs out is announced by nobody: read again then.
        let mut wait = poll;
        match state {
            Ok(now) => {
                if let State::Permits(info) = &now
                    && let Some(first) = info.holders.iter().map(|p| p.remaining_ttl).min()
                {
                    wait = wait.min(first + Duration::from_millis(1));
                }
                let now_identity = identity(&now);
                if last_identity.as_ref() != Some(&now_identity) {
                    if changes.send(change(key, last.take(), &now)).is_err() {
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
            shared.wake.wait_for(&mut nudged, wait);
        }
        *nudged = false;
    }
    inner.deployment.unwatch(keys, id);
}

/// The change from `before` (`None`: nothing reported yet) to `now`.
fn change(key: &str, before: Option<State>, now: &State) -> LockChange {
    let (lock_before, permits_before) = match before {
        Some(State::Lock(info)) => (info, None),
        Some(State::Permits(info)) => (None, Some(info)),
        None => (None, None),
    };
    let (lock_now, permits) = match now {
        State::Lock(info) => (info.clone(), None),
        State::Permits(info) => (
            None,
            Some(PermitsChange {
                before: permits_before,
                now: info.clone(),
            }),
        ),
    };
    LockChange {
        key: key.to_owned(),
        before: lock_before,
        now: lock_now,
        permits,
        seen_at: Instant::now(),
    }
}
