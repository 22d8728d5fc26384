//! `Semaphore`: at most N holders of one name at once, each permit held like a lock (its own
//! token, TTL, watchdog, fencing token), and what `Semaphore::inspect` tells about it.

use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use crate::client::{LockClient, busy_if_held_here, not_acquired};
use crate::error::{Error, Result};
use crate::guard::LockGuard;
use crate::hold::Kind;
use crate::hold::acquire::{Deadline, Taken};
use crate::hold::primitive::{Lock, Params};
use crate::hold::semaphore::validate_permits;
use crate::options::LockOptions;
use crate::wire::LockKeys;

/// A distributed semaphore: at most [`limit`](Self::limit) holders of one name at once, across
/// threads, processes and hosts. Made by [`LockClient::semaphore`].
///
/// Each permit is held like a lock: [`acquire`](Self::acquire) and its siblings return a
/// [`LockGuard`] with its own owner token, TTL, watchdog, loss detection, release outcomes and
/// [`fencing_token`](LockGuard::fencing_token) (strictly increasing per name, across permits).
/// A crashed holder's permit comes back when its TTL runs out; renewing or releasing one
/// permit never touches another. A release hands its permit straight to one waiter (woken by
/// the release, not by polling); with [`RetryStrategy::fair`](crate::RetryStrategy::fair) waiters get permits in arrival
/// order.
///
/// **The limit is stored in Redis** (`ns{name}:limit`, kept like the fencing counter), so every
/// client agrees on it. The `permits` given to [`LockClient::semaphore`] is stored by the first
/// acquisition of a name that has none; after that **the stored limit wins**, whatever
/// `permits` a later client asks for. Change it with [`set_permits`](Self::set_permits).
///
/// A thread holds at most one permit of a semaphore through one client at a time: a second
/// acquisition fails at once with [`Error::AlreadyHeld`] (it could otherwise wait for itself),
/// or joins the first with [`LockOptions::reentrant`].
///
/// Single server, Sentinel and Cluster (all keys of a name share one hash slot). Not under
/// Redlock: [`LockClient::semaphore`] fails there with [`Error::InvalidInput`].
///
/// A name is a lock or a semaphore, not both: the calls of one on a name in use by the other
/// fail with [`Error::WrongType`] and change nothing ([`LockClient::inspect`] and
/// [`LockClient::force_release`] included; use [`inspect`](Self::inspect) and
/// [`force_release`](Self::force_release) here).
///
/// # Examples
///
/// ```no_run
/// # fn main() -> redis_lock::Result<()> {
/// let locks = redis_lock::LockClient::open("redis://127.0.0.1/")?;
/// let exports = locks.semaphore("exports", 3)?;
/// let permit = exports.acquire()?; // waits while 3 others hold one
/// println!("permit {} of at most {}", permit.fencing_token(), exports.limit()?);
/// drop(permit); // released: the next waiter gets it
/// # Ok(()) }
/// ```
#[derive(Clone)]
#[must_use = "a Semaphore does nothing until a permit is acquired"]
pub struct Semaphore {
    client: LockClient,
    name: String,
    keys: LockKeys,
    permits: u32,
    /// The semaphore's primitive, from the table of primitives (`hold/mod.rs`).
    primitive: Arc<dyn Lock>,
}

impl std::fmt::Debug for Semaphore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Semaphore")
            .field("name", &self.name)
            .field("permits", &self.permits)
            .finish_non_exhaustive()
    }
}

impl LockClient {
    /// A [`Semaphore`] named `name` with `permits` permits (stored unless the name has a limit
    /// already: see [`Semaphore`]). Nothing is sent to Redis here.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidInput`] for a bad name, for `permits` of 0 or more than
    /// [`MAX_PERMITS`](crate::MAX_PERMITS), and under Redlock.
    ///
    /// # Examples
    ///
    /// ```
    /// # fn main() -> redis_lock::Result<()> {
    /// let locks = redis_lock::LockClient::open("redis://127.0.0.1/")?;
    /// let partner_api = locks.semaphore("partner-api", 4)?;
    /// assert_eq!(partner_api.permits(), 4);
    /// assert!(locks.semaphore("partner-api", 0).is_err());
    /// # Ok(()) }
    /// ```
    pub fn semaphore(&self, name: &str, permits: u32) -> Result<Semaphore> {
        let keys = self.inner.keys(name)?;
        validate_permits(permits)?;
        self.inner.semaphore_store()?;
        Ok(Semaphore {
            client: self.clone(),
            name: name.to_owned(),
            keys,
            permits,
            primitive: Kind::Semaphore.make(Params { permits }),
        })
    }
}

impl LockClient {
    /// The semaphores in use under this client's namespace whose names match the glob
    /// `pattern` (as for [`list`](LockClient::list), which lists the locks), sorted by name:
    /// those with a permit held or a waiter registered. Under Redlock, where semaphores are
    /// refused, the list is empty.
    ///
    /// # Errors
    ///
    /// Redis and pool errors.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn main() -> redis_lock::Result<()> {
    /// let locks = redis_lock::LockClient::open("redis://127.0.0.1/")?;
    /// for s in locks.list_semaphores("*")? {
    ///     println!("{}: {} of {} in use, {} waiting", s.name, s.in_use, s.limit, s.waiters);
    /// }
    /// # Ok(()) }
    /// ```
    pub fn list_semaphores(&self, pattern: &str) -> Result<Vec<SemaphoreInfo>> {
        if self.inner.semaphore_store().is_err() {
            return Ok(Vec::new());
        }
        let namespace = &self.inner.config.namespace;
        let names = self.inner.deployment.scan(
            namespace,
            &crate::wire::keys::scan_pattern(namespace, pattern),
        )?;
        let mut found = Vec::new();
        for name in names {
            let Ok(keys) = self.inner.keys(&name) else {
                continue;
            };
            // A lock, or a key of another type that matched: not a semaphore.
            match self.inner.permits(&keys) {
                Ok(Some(p)) if !p.holders.is_empty() || p.waiters > 0 => {
                    found.push(SemaphoreInfo::new(&name, p.limit, Some(p)));
                }
                Ok(_) | Err(Error::WrongType { .. }) => {}
                Err(e) => return Err(e),
            }
        }
        Ok(found)
    }
}

impl Semaphore {
    /// The semaphore's name (without namespace).
    ///
    /// # Examples
    ///
    /// ```
    /// # fn main() -> redis_lock::Result<()> {
    /// # let locks = redis_lock::LockClient::open("redis://127.0.0.1/")?;
    /// assert_eq!(locks.semaphore("exports", 3)?.name(), "exports");
    /// # Ok(()) }
    /// ```
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The number of permits this handle was made with: the limit it stores if the name has
    /// none yet. The limit in force is [`limit`](Self::limit).
    ///
    /// # Examples
    ///
    /// ```
    /// # fn main() -> redis_lock::Result<()> {
    /// # let locks = redis_lock::LockClient::open("redis://127.0.0.1/")?;
    /// assert_eq!(locks.semaphore("exports", 3)?.permits(), 3);
    /// # Ok(()) }
    /// ```
    pub fn permits(&self) -> u32 {
        self.permits
    }

    /// Takes a permit, waiting until one is free (or up to the client's
    /// [`default_wait`](crate::Builder::default_wait)).
    ///
    /// # Errors
    ///
    /// [`Error::Timeout`] when no permit came free in the client's default wait;
    /// [`Error::AlreadyHeld`] when this thread holds a permit of this semaphore already;
    /// [`Error::WrongType`] when the name is used by another kind of lock (a mutex, say) or
    /// holds other data; Redis and pool errors.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn main() -> redis_lock::Result<()> {
    /// # let locks = redis_lock::LockClient::open("redis://127.0.0.1/")?;
    /// let permit = locks.semaphore("exports", 3)?.acquire()?;
    /// // ... at most 3 of these run at once ...
    /// drop(permit);
    /// # Ok(()) }
    /// ```
    pub fn acquire(&self) -> Result<LockGuard> {
        self.acquire_with(&LockOptions::new())
    }

    /// Makes one attempt to take a permit. `Ok(None)` when all are held.
    ///
    /// # Errors
    ///
    /// As [`acquire`](Self::acquire), but never a timeout.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn main() -> redis_lock::Result<()> {
    /// # let locks = redis_lock::LockClient::open("redis://127.0.0.1/")?;
    /// match locks.semaphore("exports", 3)?.try_acquire()? {
    ///     Some(_permit) => println!("exporting"),
    ///     None => println!("3 exports run already"),
    /// }
    /// # Ok(()) }
    /// ```
    pub fn try_acquire(&self) -> Result<Option<LockGuard>> {
        self.try_acquire_with(&LockOptions::new().wait(Duration::ZERO))
    }

    /// Tries to take a permit, waiting up to `timeout`. `Ok(None)` when none came free.
    ///
    /// # Errors
    ///
    /// As [`try_acquire`](Self::try_acquire), plus [`Error::InvalidInput`] for a `timeout`
    /// that overflows the clock.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn main() -> redis_lock::Result<()> {
    /// # let locks = redis_lock::LockClient::open("redis://127.0.0.1/")?;
    /// use std::time::Duration;
    /// let exports = locks.semaphore("exports", 3)?;
    /// if let Some(permit) = exports.try_acquire_for(Duration::from_secs(5))? {
    ///     println!("fencing token {}", permit.fencing_token());
    /// }
    /// # Ok(()) }
    /// ```
    pub fn try_acquire_for(&self, timeout: Duration) -> Result<Option<LockGuard>> {
        self.try_acquire_with(&LockOptions::new().wait(timeout))
    }

    /// Takes a permit with `opts` (TTL, wait, [`RetryStrategy::fair`](crate::RetryStrategy::fair), metadata, watchdog,
    /// reentrancy, replicas, `on_lost`, `max_hold`, label), waiting up to its wait budget.
    ///
    /// # Errors
    ///
    /// [`Error::Busy`] when the budget was zero and every permit is held, [`Error::Timeout`]
    /// when the budget ran out; [`Error::InvalidInput`] for a minimum hold or a cool-down
    /// (a permit is given back at once), a read or write mode, or a bad TTL or metadata;
    /// otherwise as
    /// [`acquire`](Self::acquire).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn main() -> redis_lock::Result<()> {
    /// # let locks = redis_lock::LockClient::open("redis://127.0.0.1/")?;
    /// use std::time::Duration;
    /// use redis_lock::{LockOptions, RetryStrategy};
    /// let opts = LockOptions::new()
    ///     .ttl(Duration::from_secs(10))
    ///     .wait(Duration::from_secs(30))
    ///     .retry(RetryStrategy::fair())
    ///     .metadata("export 17");
    /// let permit = locks.semaphore("exports", 3)?.acquire_with(&opts)?;
    /// # drop(permit); Ok(()) }
    /// ```
    pub fn acquire_with(&self, opts: &LockOptions) -> Result<LockGuard> {
        let started = Instant::now();
        match self.acquire_opt(opts)? {
            Taken::Acquired(guard) => Ok(guard),
            // The permit that frees first, as the last attempt's answer named it.
            Taken::Busy(first) => Err(not_acquired(
                &self.client.inner,
                self.name.clone(),
                opts,
                started,
                first,
            )),
        }
    }

    /// Tries to take a permit with `opts`. `Ok(None)` when every permit is still held at the
    /// end of the wait budget.
    ///
    /// # Errors
    ///
    /// As [`acquire_with`](Self::acquire_with), but never busy or a timeout.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn main() -> redis_lock::Result<()> {
    /// # let locks = redis_lock::LockClient::open("redis://127.0.0.1/")?;
    /// let opts = redis_lock::LockOptions::new().wait(std::time::Duration::from_millis(200));
    /// if locks.semaphore("exports", 3)?.try_acquire_with(&opts)?.is_none() {
    ///     println!("no permit within 200 ms");
    /// }
    /// # Ok(()) }
    /// ```
    pub fn try_acquire_with(&self, opts: &LockOptions) -> Result<Option<LockGuard>> {
        busy_if_held_here(self.acquire_opt(opts).map(Taken::acquired))
    }

    /// Both families' acquisition: [`Error::AlreadyHeld`] when this thread holds the permit
    /// it would join (see `client::busy_if_held_here`).
    fn acquire_opt(&self, opts: &LockOptions) -> Result<Taken<LockGuard>> {
        let deadline = Deadline::after(opts.wait.or(self.client.inner.config.default_wait))?;
        self.client
            .take(Arc::clone(&self.primitive), &self.name, opts, &deadline)
    }

    /// The limit in force: the one stored in Redis, or [`permits`](Self::permits) when none
    /// is stored yet (the first acquisition stores it).
    ///
    /// # Errors
    ///
    /// [`Error::WrongType`] when the name is used by another kind of lock; Redis and pool
    /// errors.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn main() -> redis_lock::Result<()> {
    /// # let locks = redis_lock::LockClient::open("redis://127.0.0.1/")?;
    /// let exports = locks.semaphore("exports", 3)?;
    /// println!("{} exports at once", exports.limit()?);
    /// # Ok(()) }
    /// ```
    pub fn limit(&self) -> Result<u32> {
        Ok(self.inspect()?.limit)
    }

    /// Permits free now: the limit less the permits held (0 while more are held than a
    /// lowered limit allows). A snapshot: another client may take one right after.
    ///
    /// # Errors
    ///
    /// As [`limit`](Self::limit).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn main() -> redis_lock::Result<()> {
    /// # let locks = redis_lock::LockClient::open("redis://127.0.0.1/")?;
    /// let exports = locks.semaphore("exports", 3)?;
    /// let permit = exports.acquire()?;
    /// assert!(exports.available()? <= 2);
    /// # drop(permit); Ok(()) }
    /// ```
    pub fn available(&self) -> Result<u32> {
        Ok(self.inspect()?.available)
    }

    /// The limit, every permit held (who, since when, for how much longer) and who waits.
    /// Owner tokens are never included.
    ///
    /// # Errors
    ///
    /// As [`limit`](Self::limit).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn main() -> redis_lock::Result<()> {
    /// # let locks = redis_lock::LockClient::open("redis://127.0.0.1/")?;
    /// let info = locks.semaphore("exports", 3)?.inspect()?;
    /// println!("{} of {} in use, {} waiting", info.in_use, info.limit, info.waiters);
    /// for p in &info.holders {
    ///     if let (Some(pid), Some(host)) = (p.pid, &p.host) {
    ///         println!("  pid {pid} on {host}, token {}", p.fencing_token);
    ///     }
    /// }
    /// # Ok(()) }
    /// ```
    pub fn inspect(&self) -> Result<SemaphoreInfo> {
        let permits = self.client.inner.permits(&self.keys)?;
        Ok(SemaphoreInfo::new(&self.name, self.permits, permits))
    }

    /// Changes the number of permits, for every client; returns the previous limit (`None`
    /// when none was stored). Held permits are never revoked: after lowering the limit below
    /// the permits in use, new acquisitions wait until fewer than the new limit are held.
    /// After raising it, waiters that now fit are woken at once.
    ///
    /// Like every key of a name, the stored limit expires: it is kept while permits are held,
    /// and for at least the client's [default TTL](crate::Builder::default_ttl) after this
    /// call; once it is gone, the next acquisition stores the number of permits its
    /// [`Semaphore`] handle was made with.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidInput`] for 0 or more than [`MAX_PERMITS`](crate::MAX_PERMITS)
    /// (nothing is sent); otherwise as [`limit`](Self::limit).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn main() -> redis_lock::Result<()> {
    /// # let locks = redis_lock::LockClient::open("redis://127.0.0.1/")?;
    /// let exports = locks.semaphore("exports", 3)?;
    /// exports.set_permits(5)?; // the partner raised our quota
    /// assert_eq!(exports.limit()?, 5);
    /// # Ok(()) }
    /// ```
    pub fn set_permits(&self, permits: u32) -> Result<Option<u32>> {
        self.client.inner.set_permits(&self.keys, permits)
    }

    /// Breaks every permit, as an operator would: the permits are gone, waiters that now fit
    /// are woken, the limit stays. Returns the host and pid of one holder whose permit was
    /// broken (the one that would have expired first), `None` when none was held. Each holder
    /// finds out within about a round trip where loss notification is on
    /// ([`LockClient::loss_detection`]), else at its next renewal or release (lost, `Deleted`;
    /// release `Late`).
    ///
    /// # Errors
    ///
    /// As [`limit`](Self::limit).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn main() -> redis_lock::Result<()> {
    /// # let locks = redis_lock::LockClient::open("redis://127.0.0.1/")?;
    /// if let Some((host, pid)) = locks.semaphore("exports", 3)?.force_release()? {
    ///     eprintln!("broke the permits of pid {pid} on {host} and the others");
    /// }
    /// # Ok(()) }
    /// ```
    pub fn force_release(&self) -> Result<Option<(String, u32)>> {
        self.client
            .inner
            .deployment
            .force_release(&*self.primitive, &self.keys)
    }
}

/// What [`Semaphore::inspect`] tells: the limit, the permits held and the waiters.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct SemaphoreInfo {
    /// The semaphore's name (without namespace).
    pub name: String,
    /// The limit in force (the stored one; the handle's `permits` when none is stored yet).
    pub limit: u32,
    /// Permits held now (may exceed a lowered limit until holders release).
    pub in_use: u32,
    /// Permits free now: `limit - in_use`, or 0.
    pub available: u32,
    /// Every permit held, the one that expires first first.
    pub holders: Vec<PermitInfo>,
    /// Threads (of any process) registered as waiting for a permit.
    pub waiters: u32,
    /// Fair waiters queued, part of [`waiters`](Self::waiters) while alive.
    pub queued: u32,
}

/// One permit held, as [`Semaphore::inspect`] shows it. No owner token.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct PermitInfo {
    /// Host name of the holder; `None` for a permit a release has just handed to a waiter
    /// that has not claimed it yet (its new holder writes its information at its first
    /// renewal), as [`LockInfo::host`](crate::LockInfo::host) for a lock handed over.
    pub host: Option<String>,
    /// Process id of the holder on its host; `None` when [`host`](Self::host) is.
    pub pid: Option<u32>,
    /// When the permit was acquired (Redis server clock); `None` when [`host`](Self::host)
    /// is.
    pub acquired_at: Option<SystemTime>,
    /// Time until the permit expires unless renewed.
    pub remaining_ttl: Duration,
    /// The permit's fencing token.
    pub fencing_token: u64,
    /// The holder's metadata, if it gave any.
    pub metadata: Option<String>,
}

impl SemaphoreInfo {
    pub(crate) fn new(
        name: &str,
        permits: u32,
        p: Option<crate::wire::semaphore::Permits>,
    ) -> Self {
        let Some(p) = p else {
            return SemaphoreInfo {
                name: name.to_owned(),
                limit: permits,
                in_use: 0,
                available: permits,
                holders: Vec::new(),
                waiters: 0,
                queued: 0,
            };
        };
        let limit = if p.limit == 0 { permits } else { p.limit };
        let in_use = u32::try_from(p.holders.len()).unwrap_or(u32::MAX);
        SemaphoreInfo {
            name: name.to_owned(),
            limit,
            in_use,
            available: limit.saturating_sub(in_use),
            holders: p
                .holders
                .into_iter()
                .map(|h| {
                    let (host, pid, acquired_at) =
                        crate::info::holder_fields(h.host, h.pid, h.since_ms);
                    PermitInfo {
                        host,
                        pid,
                        acquired_at,
                        remaining_ttl: h.remaining_ttl,
                        fencing_token: h.fence,
                        metadata: h.meta,
                    }
                })
                .collect(),
            waiters: p.waiters,
            queued: p.queued,
        }
    }
}
