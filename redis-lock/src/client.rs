//! `LockClient`: the handle applications keep and clone.

use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::error::{Error, HolderInfo, Result};
use crate::guard::LockGuard;
use crate::hold::acquire::{Deadline, Taken};
use crate::hold::lease::ReleaseOutcome;
use crate::hold::primitive::Params;
use crate::hold::{Inner, Kind};
use crate::info::LockInfo;
use crate::options::{LockMode, LockOptions};
use crate::retry::RetryStrategy;
use crate::store::notify::LossDetection;

/// A client for distributed locks on one Redis server: a connection pool plus settings.
///
/// Cheap to clone (an `Arc` inside), `Send` and `Sync`: create one per process and share it.
///
/// The method names follow `parking_lot::Mutex`: [`lock`](Self::lock) waits until the lock is
/// free (or the client's `default_wait`), [`try_lock`](Self::try_lock) makes one attempt (the
/// one way to say "do not wait"),
/// [`try_lock_for`](Self::try_lock_for) and [`try_lock_until`](Self::try_lock_until) wait up to
/// a limit. The `try_` calls return `Ok(None)` when the lock is busy, so "busy" and "Redis
/// failed" are different outcomes.
///
/// # Examples
///
/// ```no_run
/// use std::time::Duration;
/// # fn main() -> redis_lock::Result<()> {
/// let locks = redis_lock::LockClient::open("redis://127.0.0.1/")?;
///
/// let guard = locks.lock("report")?;                // waits until it is free
/// drop(guard);                                     // released
///
/// if let Some(guard) = locks.try_lock_for("report", Duration::from_secs(5))? {
///     println!("fencing token {}", guard.fencing_token());
/// }
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct LockClient {
    pub(crate) inner: Arc<Inner>,
}

impl std::fmt::Debug for LockClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LockClient")
            .field("url", &self.inner.config.redacted_url)
            .field("namespace", &self.inner.config.namespace)
            .field("stores", &self.inner.deployment.stores())
            .finish_non_exhaustive()
    }
}

impl LockClient {
    pub(crate) fn from_inner(inner: Inner) -> LockClient {
        LockClient {
            inner: Arc::new(inner),
        }
    }

    /// How this client learns that a lock it holds was changed by somebody else (released
    /// through a shared handle, `force_release`, `DEL`, taken over after it expired, evicted).
    ///
    /// [`Notified`](LossDetection::Notified): the server tells the client (Redis's client-side
    /// tracking, on one connection per server that receives the notices and one that keeps
    /// the held keys tracked), and the guard's [`is_lost`](crate::LockGuard::is_lost),
    /// [`ensure_held`](crate::LockGuard::ensure_held) and `on_lost` know within milliseconds.
    /// [`Renewal`](LossDetection::Renewal): the server (or an ACL) refuses tracking, or the
    /// connections cannot receive it (TLS, RESP3, an application's pool), or for now the
    /// server's tracking table is full (`tracking-table-max-keys`) and it forgets tracked keys;
    /// a loss is found at the lock's next renewal, a third of its TTL later at most, and a
    /// warning event said so (a full table is probed again, and `Notified` once it has room). [`NotStarted`](LossDetection::NotStarted): no lock was held long enough
    /// (2 ms) to ask yet. On a Redlock quorum, `Notified` only when every server notifies.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn main() -> redis_lock::Result<()> {
    /// use redis_lock::LossDetection;
    /// # let locks = redis_lock::LockClient::open("redis://127.0.0.1/")?;
    /// let guard = locks.lock("report")?;
    /// # std::thread::sleep(std::time::Duration::from_millis(10));
    /// if locks.loss_detection() == LossDetection::Renewal {
    ///     eprintln!("losses are found at renewal only: check_held() before committing");
    /// }
    /// # Ok(()) }
    /// ```
    pub fn loss_detection(&self) -> LossDetection {
        self.inner.deployment.loss_detection()
    }

    /// The key prefix of this client.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn main() -> redis_lock::Result<()> {
    /// # let locks = redis_lock::LockClient::open("redis://127.0.0.1/")?;
    /// assert_eq!(locks.namespace(), "lock:");
    /// # Ok(()) }
    /// ```
    pub fn namespace(&self) -> &str {
        &self.inner.config.namespace
    }

    /// Acquires `key`, waiting until it is free, like `Mutex::lock` (or up to the client's
    /// [`default_wait`](crate::Builder::default_wait), if one is set). A crashed holder's
    /// lock frees within its TTL. For one attempt, use [`try_lock`](Self::try_lock); for a
    /// bounded wait, [`try_lock_for`](Self::try_lock_for).
    ///
    /// # Errors
    ///
    /// [`Error::AlreadyHeld`] when this thread holds `key` already (use
    /// [`lock_reentrant`](Self::lock_reentrant) to join it); [`Error::Timeout`] when another
    /// owner still holds the lock after the wait;
    /// [`Error::InvalidInput`] for a bad key; [`Error::WrongType`] when the key holds other
    /// data; Redis and pool errors.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn main() -> redis_lock::Result<()> {
    /// # let locks = redis_lock::LockClient::open("redis://127.0.0.1/")?;
    /// let guard = locks.lock("nightly-report")?; // waits until it is free
    /// // ... the watchdog renews the lock meanwhile ...
    /// drop(guard); // released
    /// # Ok(()) }
    /// ```
    pub fn lock(&self, key: &str) -> Result<LockGuard> {
        self.acquire_with(key, &LockOptions::new())
    }

    /// Acquires `key` with reentrancy: if this thread already holds `key` through this client,
    /// the call joins that acquisition (no round trip) and the lock is released when the last
    /// guard is gone. Otherwise like [`lock`](Self::lock).
    ///
    /// # Errors
    ///
    /// As [`lock`](Self::lock).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn main() -> redis_lock::Result<()> {
    /// # let locks = redis_lock::LockClient::open("redis://127.0.0.1/")?;
    /// let outer = locks.lock_reentrant("account:7")?;
    /// let inner = locks.lock_reentrant("account:7")?; // joins, no round trip
    /// drop(inner); // still held
    /// drop(outer); // released
    /// # Ok(()) }
    /// ```
    pub fn lock_reentrant(&self, key: &str) -> Result<LockGuard> {
        self.acquire_with(key, &LockOptions::new().reentrant(true))
    }

    /// Makes one attempt to acquire `key`. `Ok(None)` when another owner holds it, or this
    /// thread does already (as `std`'s and parking_lot's `try_lock` answer; join it with
    /// [`lock_reentrant`](Self::lock_reentrant) instead).
    ///
    /// # Errors
    ///
    /// [`Error::InvalidInput`], [`Error::WrongType`], Redis and pool errors.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn main() -> redis_lock::Result<()> {
    /// # let locks = redis_lock::LockClient::open("redis://127.0.0.1/")?;
    /// match locks.try_lock("nightly-report")? {
    ///     Some(_guard) => println!("got it"),
    ///     None => println!("busy: somebody else runs it"),
    /// }
    /// # Ok(()) }
    /// ```
    pub fn try_lock(&self, key: &str) -> Result<Option<LockGuard>> {
        self.try_acquire_with(key, &LockOptions::new().wait(Duration::ZERO))
    }

    /// Tries to acquire `key`, waiting up to `timeout`. `Ok(None)` when another owner still
    /// holds it then.
    ///
    /// # Errors
    ///
    /// As [`try_lock`](Self::try_lock), plus [`Error::InvalidInput`] for a `timeout` that
    /// overflows the clock.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn main() -> redis_lock::Result<()> {
    /// # let locks = redis_lock::LockClient::open("redis://127.0.0.1/")?;
    /// use std::time::Duration;
    /// if let Some(guard) = locks.try_lock_for("invoice:42", Duration::from_secs(5))? {
    ///     println!("fencing token {}", guard.fencing_token());
    /// }
    /// # Ok(()) }
    /// ```
    pub fn try_lock_for(&self, key: &str, timeout: Duration) -> Result<Option<LockGuard>> {
        self.try_acquire_with(key, &LockOptions::new().wait(timeout))
    }

    /// Tries to acquire `key`, waiting until `deadline`. `Ok(None)` when another owner still
    /// holds it then.
    ///
    /// # Errors
    ///
    /// As [`try_lock`](Self::try_lock).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn main() -> redis_lock::Result<()> {
    /// # let locks = redis_lock::LockClient::open("redis://127.0.0.1/")?;
    /// use std::time::{Duration, Instant};
    /// let deadline = Instant::now() + Duration::from_secs(2);
    /// let guard = locks.try_lock_until("invoice:42", deadline)?;
    /// # let _ = guard;
    /// # Ok(()) }
    /// ```
    pub fn try_lock_until(&self, key: &str, deadline: Instant) -> Result<Option<LockGuard>> {
        let deadline = Deadline {
            at: deadline,
            started: Instant::now(),
        };
        busy_if_held_here(
            self.take(
                Kind::Mutex.make(Params::DEFAULT),
                key,
                &LockOptions::new(),
                &deadline,
            )
            .map(Taken::acquired),
        )
    }

    /// Whether this thread holds `key` through this client: a lock it acquired (and has not
    /// released or lost) whose guard is still alive. A non-reentrant waiting acquisition of
    /// such a lock ([`lock`](Self::lock), [`acquire_with`](Self::acquire_with)) fails at once
    /// with [`Error::AlreadyHeld`] instead of waiting for itself; the `try_` family answers
    /// `Ok(None)` (busy) at once.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn main() -> redis_lock::Result<()> {
    /// # let locks = redis_lock::LockClient::open("redis://127.0.0.1/")?;
    /// let guard = locks.lock("report")?;
    /// assert!(locks.is_held_by_current_thread("report"));
    /// assert!(matches!(locks.lock("report"), Err(redis_lock::Error::AlreadyHeld { .. })));
    /// drop(guard);
    /// assert!(!locks.is_held_by_current_thread("report"));
    /// # Ok(()) }
    /// ```
    pub fn is_held_by_current_thread(&self, key: &str) -> bool {
        crate::hold::registry::held_here(&self.inner, key).is_some()
    }

    /// Builder-style options for one acquisition of `key`.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// use std::time::Duration;
    /// # fn main() -> redis_lock::Result<()> {
    /// # let locks = redis_lock::LockClient::open("redis://127.0.0.1/")?;
    /// let guard = locks
    ///     .options("nightly-report")
    ///     .ttl(Duration::from_secs(10))
    ///     .wait(Duration::from_secs(2))
    ///     .metadata("started by cron")
    ///     .acquire()?;
    /// # let _ = guard; Ok(()) }
    /// ```
    pub fn options(&self, key: &str) -> LockRequest<'_> {
        LockRequest {
            client: self,
            key: key.to_owned(),
            opts: LockOptions::new(),
        }
    }

    /// Acquires `key` with `opts`, waiting up to `opts`' wait budget.
    ///
    /// # Errors
    ///
    /// [`Error::Busy`] when the budget was zero and the lock is held, [`Error::Timeout`] when
    /// the budget ran out; otherwise as [`lock`](Self::lock).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn main() -> redis_lock::Result<()> {
    /// # let locks = redis_lock::LockClient::open("redis://127.0.0.1/")?;
    /// use std::time::Duration;
    /// let opts = redis_lock::LockOptions::new().ttl(Duration::from_secs(5)).metadata("worker 3");
    /// let guard = locks.acquire_with("invoice:42", &opts)?;
    /// # let _ = guard;
    /// # Ok(()) }
    /// ```
    pub fn acquire_with(&self, key: &str, opts: &LockOptions) -> Result<LockGuard> {
        let started = Instant::now();
        match self.acquire_opt(key, opts)? {
            Taken::Acquired(guard) => Ok(guard),
            // Who holds it, as the last attempt's answer said.
            Taken::Busy(holder) => Err(not_acquired(
                &self.inner,
                key.to_owned(),
                opts,
                started,
                holder,
            )),
        }
    }

    /// Tries to acquire `key` with `opts`. `Ok(None)` when another owner still holds it at the
    /// end of the wait budget.
    ///
    /// # Errors
    ///
    /// As [`try_lock`](Self::try_lock).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn main() -> redis_lock::Result<()> {
    /// # let locks = redis_lock::LockClient::open("redis://127.0.0.1/")?;
    /// let opts = redis_lock::LockOptions::new().wait(std::time::Duration::ZERO);
    /// if locks.try_acquire_with("invoice:42", &opts)?.is_none() {
    ///     println!("busy");
    /// }
    /// # Ok(()) }
    /// ```
    pub fn try_acquire_with(&self, key: &str, opts: &LockOptions) -> Result<Option<LockGuard>> {
        busy_if_held_here(self.acquire_opt(key, opts).map(Taken::acquired))
    }

    /// The acquisition behind both families: `Ok(None)` when another owner still holds `key`
    /// at the end of the wait budget; [`Error::AlreadyHeld`] when this thread does.
    fn acquire_opt(&self, key: &str, opts: &LockOptions) -> Result<Taken<LockGuard>> {
        let deadline = Deadline::after(opts.wait.or(self.inner.config.default_wait))?;
        let primitive = Kind::of_mode(opts.mode).make(Params::DEFAULT);
        self.take(primitive, key, opts, &deadline)
    }

    /// A guard of `key` held through `primitive` (made from the table of primitives,
    /// `hold/mod.rs`): what every single-lock acquisition comes to, a mutex or a side of a
    /// read-write lock (by `mode`), a semaphore's permit, the attribute macro's lock.
    /// `Taken::Busy`: busy until `deadline`, with the holder the last attempt was told of.
    pub(crate) fn take(
        &self,
        primitive: Arc<dyn crate::hold::primitive::Lock>,
        key: &str,
        opts: &LockOptions,
        deadline: &Deadline,
    ) -> Result<Taken<LockGuard>> {
        Ok(self
            .inner
            .acquire(&primitive, key, opts, deadline)?
            .map(LockGuard::new))
    }

    /// Who holds `key`, since when, and for how much longer; `Ok(None)` when it is free. For a
    /// read-write lock, [`LockInfo::mode`], [`LockInfo::readers`] and
    /// [`LockInfo::writers_waiting`] say who holds and who waits (one more round trip: the
    /// mutex's script is asked first).
    ///
    /// # Errors
    ///
    /// [`Error::InvalidInput`] for a bad key, [`Error::WrongType`], Redis and pool errors.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn main() -> redis_lock::Result<()> {
    /// # let locks = redis_lock::LockClient::open("redis://127.0.0.1/")?;
    /// if let Some(info) = locks.inspect("nightly-report")? {
    ///     match (&info.host, info.pid) {
    ///         (Some(host), Some(pid)) => println!("held by {host} (pid {pid})"),
    ///         // Kept taken after its release, or just handed to a waiter.
    ///         _ => println!("no holder stored (owned: {})", info.owned),
    ///     }
    ///     println!("fencing token {}", info.fencing_token);
    /// }
    /// # Ok(()) }
    /// ```
    pub fn inspect(&self, key: &str) -> Result<Option<LockInfo>> {
        let keys = self.inner.keys(key)?;
        let holder = self.inner.inspect_any(&keys)?;
        Ok(holder.map(|h| LockInfo::from_holder(key, h)))
    }

    /// Breaks `key` whoever holds it, as an operator would, and wakes a waiter. Returns the
    /// host and pid of the holder whose lock was broken, `None` when it was free. The holder
    /// finds out within about a round trip where loss notification is on (see
    /// [`loss_detection`](Self::loss_detection)), else at its next renewal or release
    /// ("lost").
    ///
    /// # Errors
    ///
    /// [`Error::InvalidInput`] for a bad key, [`Error::WrongType`], Redis and pool errors.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn main() -> redis_lock::Result<()> {
    /// # let locks = redis_lock::LockClient::open("redis://127.0.0.1/")?;
    /// if let Some((host, pid)) = locks.force_release("stuck-job")? {
    ///     eprintln!("broke the lock of pid {pid} on {host}");
    /// }
    /// # Ok(()) }
    /// ```
    pub fn force_release(&self, key: &str) -> Result<Option<(String, u32)>> {
        let keys = self.inner.keys(key)?;
        self.inner.force_release_any(&keys)
    }

    /// Releases every lock this client (any of its clones) still holds, and returns how many
    /// it released. For orderly shutdown. Their guards stay valid and dropping them later
    /// does nothing more, but they no longer hold anything: [`LockGuard::is_lost`] is `true` and
    /// [`LockGuard::ensure_held`] fails with [`LostReason::Released`](crate::LostReason::Released),
    /// so a thread still at work does not commit under a lock another process may hold.
    ///
    /// # Errors
    ///
    /// The first Redis or pool error; the locks it could not release expire with their TTL.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn main() -> redis_lock::Result<()> {
    /// # let locks = redis_lock::LockClient::open("redis://127.0.0.1/")?;
    /// let _a = locks.lock("a")?;
    /// let _b = locks.lock("b")?;
    /// // shutting down:
    /// let released = locks.release_all()?;
    /// assert_eq!(released, 2);
    /// # Ok(()) }
    /// ```
    pub fn release_all(&self) -> Result<usize> {
        let mut released = 0;
        let mut first_error = None;
        for lease in self.inner.registry.leases() {
            match lease.release() {
                Ok(ReleaseOutcome::Released) => released += 1,
                Ok(_) => {}
                Err(e) => {
                    first_error.get_or_insert(e);
                }
            }
        }
        first_error.map_or(Ok(released), Err)
    }

    /// How many Redis requests this client (all clones) has sent so far: one per script call,
    /// command or pipeline (the native acquisition's `SET NX` + `INCR` is one), including
    /// renewals (one each, also when several share a round trip), blocking waits, and the one
    /// `DELIFEQ` a client sends to a server that turns out not to have it (Redis, Valkey
    /// before 9: the first release learns that, once per client). For benchmarks and
    /// diagnostics.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn main() -> redis_lock::Result<()> {
    /// # let locks = redis_lock::LockClient::open("redis://127.0.0.1/")?;
    /// let before = locks.request_count();
    /// drop(locks.lock("report")?);
    /// println!("{} requests for one lock cycle", locks.request_count() - before);
    /// # Ok(()) }
    /// ```
    pub fn request_count(&self) -> u64 {
        self.inner.requests()
    }

    /// What this client has registered for the locks it holds and waits for, now (feature
    /// `testing`): in a quiet client every count but the pooled connections is zero, whatever
    /// happened before (releases, losses, hand-offs, failures, cancels). For tests that check
    /// nothing is left behind.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn main() -> redis_lock::Result<()> {
    /// # let locks = redis_lock::LockClient::open("redis://127.0.0.1/")?;
    /// drop(locks.lock("report")?);
    /// let left = locks.registrations();
    /// assert_eq!((left.held, left.watchers, left.waiting_threads), (0, 0, 0));
    /// # Ok(()) }
    /// ```
    #[cfg(feature = "testing")]
    pub fn registrations(&self) -> crate::testing::Registrations {
        let mut counts = crate::testing::Registrations {
            held: self.inner.registry.len(),
            giving_back: self.inner.givebacks.pending(),
            ..Default::default()
        };
        for store in self.inner.deployment.stores() {
            let (watchers, groups, waiters, connections) = store.registrations();
            counts.watchers += watchers;
            counts.waiting_groups += groups;
            counts.waiting_threads += waiters;
            counts.pooled_connections += connections;
        }
        counts
    }

    /// Sends `PING`: checks that Redis is reachable with the client's settings.
    ///
    /// # Errors
    ///
    /// [`Error::Connect`] when Redis cannot be reached (at once when it refuses the
    /// connection, else within the connect timeout); a Redis error (for example,
    /// authentication failed).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn main() -> redis_lock::Result<()> {
    /// # let locks = redis_lock::LockClient::open("redis://127.0.0.1/")?;
    /// locks.ping()?; // fails fast when Redis cannot be reached
    /// # Ok(()) }
    /// ```
    pub fn ping(&self) -> Result<()> {
        self.inner.deployment.ping()
    }
}

/// One acquisition being configured; made by [`LockClient::options`].
#[derive(Debug)]
#[must_use = "nothing is acquired until `acquire` or `try_acquire` is called"]
pub struct LockRequest<'a> {
    client: &'a LockClient,
    key: String,
    opts: LockOptions,
}

macro_rules! forward {
    ($($(#[$doc:meta])* $name:ident($($arg:ident: $ty:ty),*);)*) => {
        $(
            $(#[$doc])*
            pub fn $name(mut self, $($arg: $ty),*) -> Self {
                self.opts = self.opts.$name($($arg),*);
                self
            }
        )*
    };
}

impl LockRequest<'_> {
    forward! {
        /// See [`LockOptions::ttl`].
        ttl(ttl: Duration);
        /// See [`LockOptions::wait`].
        wait(wait: Duration);
        /// See [`LockOptions::retry`].
        retry(retry: RetryStrategy);
        /// See [`LockOptions::watchdog`].
        watchdog(on: bool);
        /// See [`LockOptions::hold_at_least`].
        hold_at_least(min: Duration);
        /// See [`LockOptions::max_hold`].
        max_hold(max: Duration);
        /// See [`LockOptions::cooldown`].
        cooldown(cooldown: Duration);
        /// See [`LockOptions::reentrant`].
        reentrant(yes: bool);
        /// See [`LockOptions::replicas`].
        replicas(replicas: u32, timeout: Duration);
        /// See [`LockOptions::replicas_fsynced`].
        replicas_fsynced(replicas: u32, timeout: Duration);
        /// See [`LockOptions::mode`].
        mode(mode: LockMode);
        /// See [`LockOptions::cancel`].
        cancel(token: crate::CancelToken);
    }

    /// See [`LockOptions::metadata`].
    pub fn metadata(mut self, metadata: impl Into<String>) -> Self {
        self.opts = self.opts.metadata(metadata);
        self
    }

    /// See [`LockOptions::label`].
    pub fn label(mut self, label: impl Into<std::borrow::Cow<'static, str>>) -> Self {
        self.opts = self.opts.label(label);
        self
    }

    /// See [`LockOptions::on_lost`].
    pub fn on_lost(mut self, callback: impl Fn(&crate::LostEvent) + Send + Sync + 'static) -> Self {
        self.opts = self.opts.on_lost(callback);
        self
    }

    /// Acquires the lock; see [`LockClient::acquire_with`].
    ///
    /// # Errors
    ///
    /// As [`LockClient::acquire_with`].
    pub fn acquire(self) -> Result<LockGuard> {
        self.client.acquire_with(&self.key, &self.opts)
    }

    /// Tries to acquire the lock; see [`LockClient::try_acquire_with`].
    ///
    /// # Errors
    ///
    /// As [`LockClient::try_acquire_with`].
    pub fn try_acquire(self) -> Result<Option<LockGuard>> {
        self.client.try_acquire_with(&self.key, &self.opts)
    }
}

/// The `try_` family's answer when this thread holds the lock already (and did not ask to
/// join it): busy (`Ok(None)`), as `std`'s and parking_lot's `try_lock` report a lock the
/// caller holds, so that `?` on a `try_` call never ends a caller that only asked whether the
/// lock is free. The waiting calls (`lock`, `acquire_with`) keep [`Error::AlreadyHeld`]: they
/// would wait for themselves.
pub(crate) fn busy_if_held_here<T>(attempt: Result<Option<T>>) -> Result<Option<T>> {
    match attempt {
        Err(Error::AlreadyHeld { .. }) => Ok(None),
        other => other,
    }
}

/// The error of a waiting call (`lock`, `acquire_with`, ...) that did not get `key`: busy when
/// it was not allowed to wait, timed out when its wait budget ran out. `started`: when the call
/// began.
pub(crate) fn not_acquired(
    inner: &Inner,
    key: String,
    opts: &LockOptions,
    started: Instant,
    holder: Option<HolderInfo>,
) -> Error {
    let wait = opts.wait.or(inner.config.default_wait);
    let none = opts.retry.as_ref() == Some(&RetryStrategy::none());
    let holder = holder.map(Box::new);
    if wait.is_some_and(|w| w.is_zero()) || none {
        Error::Busy { key, holder }
    } else {
        Error::Timeout {
            key,
            waited: started.elapsed(),
            holder,
        }
    }
}
