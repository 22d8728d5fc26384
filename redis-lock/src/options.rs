//! Per-call options: TTL, wait budget, retry strategy, metadata, watchdog, hold times.

use std::borrow::Cow;
use std::sync::Arc;
use std::time::Duration;

use crate::cancel::CancelToken;
use crate::error::LostReason;
use crate::retry::RetryStrategy;

/// Longest accepted TTL. Redis would take more, but a lease this long is a bug, and the bound
/// keeps every millisecond figure far from integer overflow.
pub const MAX_TTL: Duration = Duration::from_secs(365 * 24 * 3600);

/// Longest accepted metadata string, in bytes.
pub const MAX_METADATA_LEN: usize = 64 * 1024;

/// A cool-down is at least 1 ms and at most [`MAX_TTL`].
pub(crate) fn validate_cooldown(cooldown: Duration) -> crate::error::Result<()> {
    if cooldown < Duration::from_millis(1) || cooldown > MAX_TTL {
        return Err(crate::error::Error::invalid(
            "cooldown",
            format!("{cooldown:?} is not between 1 ms and the limit of {MAX_TTL:?}"),
        ));
    }
    Ok(())
}

/// A TTL is at least 1 ms (Redis expiry has millisecond resolution) and at most [`MAX_TTL`].
pub(crate) fn validate_ttl(ttl: Duration) -> crate::error::Result<()> {
    if ttl < Duration::from_millis(1) {
        return Err(crate::error::Error::invalid(
            "ttl",
            format!("{ttl:?} is shorter than 1 ms (Redis expiry has millisecond resolution)"),
        ));
    }
    if ttl > MAX_TTL {
        return Err(crate::error::Error::invalid(
            "ttl",
            format!("{ttl:?} is longer than the limit of {MAX_TTL:?}"),
        ));
    }
    Ok(())
}

/// The limits every acquisition's options are held to, whatever the primitive (what a
/// primitive cannot honour at all is its own check, `hold::primitive::Lock::check`): the TTL,
/// the minimum hold, the cool-down, the replica acknowledgement's timeout, the metadata's
/// length. Nothing is sent for bad input.
pub(crate) fn validate(ttl: Duration, opts: &LockOptions) -> crate::error::Result<()> {
    use crate::error::Error;
    validate_ttl(ttl)?;
    if opts.hold_at_least > MAX_TTL {
        return Err(Error::invalid(
            "hold_at_least",
            format!("longer than {MAX_TTL:?}"),
        ));
    }
    if let Some(cooldown) = opts.cooldown {
        validate_cooldown(cooldown)?;
    }
    if let Some(ack) = opts.replicas
        && ack.timeout > MAX_TTL
    {
        return Err(Error::invalid(
            "replicas",
            format!("the acknowledgement timeout is longer than {MAX_TTL:?}"),
        ));
    }
    if let Some(metadata) = &opts.metadata {
        validate_metadata(metadata)?;
    }
    Ok(())
}

/// Metadata stored with a lock is at most [`MAX_METADATA_LEN`] bytes.
pub(crate) fn validate_metadata(metadata: &str) -> crate::error::Result<()> {
    if metadata.len() > MAX_METADATA_LEN {
        return Err(crate::error::Error::invalid(
            "metadata",
            format!("longer than {MAX_METADATA_LEN} bytes"),
        ));
    }
    Ok(())
}

/// What a loss callback is told.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct LostEvent {
    /// The lock name (without namespace).
    pub key: String,
    /// Why the lock counts as lost.
    pub reason: LostReason,
}

pub(crate) type LostCallback = Arc<dyn Fn(&LostEvent) + Send + Sync>;

/// Options for one acquisition. Unset options take the client's defaults.
///
/// Use it directly with [`LockClient::acquire_with`](crate::LockClient::acquire_with), or
/// through the builder-style [`LockClient::options`](crate::LockClient::options).
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use redis_lock::{LockOptions, RetryStrategy};
///
/// let opts = LockOptions::new()
///     .ttl(Duration::from_secs(5))
///     .wait(Duration::from_secs(2))
///     .retry(RetryStrategy::fixed(Duration::from_millis(50)))
///     .metadata("nightly-report")
///     .hold_at_least(Duration::from_secs(60));
/// # let _ = opts;
/// ```
#[derive(Clone, Default)]
#[must_use = "options do nothing until passed to an acquisition"]
pub struct LockOptions {
    pub(crate) ttl: Option<Duration>,
    pub(crate) wait: Option<Duration>,
    pub(crate) retry: Option<RetryStrategy>,
    pub(crate) metadata: Option<String>,
    pub(crate) watchdog: Option<bool>,
    pub(crate) hold_at_least: Duration,
    pub(crate) max_hold: Option<Duration>,
    pub(crate) cooldown: Option<Duration>,
    pub(crate) on_lost: Option<LostCallback>,
    pub(crate) reentrant: bool,
    pub(crate) replicas: Option<ReplicaAck>,
    pub(crate) label: Option<Cow<'static, str>>,
    pub(crate) mode: Option<LockMode>,
    pub(crate) cancel: Option<CancelToken>,
}

/// What an acquisition waits for after writing the lock (see [`LockOptions::replicas`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ReplicaAck {
    pub(crate) count: u32,
    pub(crate) timeout: Duration,
    /// `WAITAOF` (written to the replicas' append-only files) instead of `WAIT` (in memory).
    pub(crate) fsync: bool,
}

impl std::fmt::Debug for LockOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LockOptions")
            .field("ttl", &self.ttl)
            .field("wait", &self.wait)
            .field("retry", &self.retry)
            .field("metadata", &self.metadata)
            .field("watchdog", &self.watchdog)
            .field("hold_at_least", &self.hold_at_least)
            .field("cooldown", &self.cooldown)
            .field("max_hold", &self.max_hold)
            .field("on_lost", &self.on_lost.as_ref().map(|_| "Fn(&LostEvent)"))
            .field("reentrant", &self.reentrant)
            .field("replicas", &self.replicas)
            .field("label", &self.label)
            .field("mode", &self.mode)
            .field("cancel", &self.cancel)
            .finish()
    }
}

impl LockOptions {
    /// Options with every value taken from the client's defaults.
    pub fn new() -> Self {
        Self::default()
    }

    /// How long the lock lives without renewal. The watchdog renews it every `ttl / 3`, so
    /// `ttl` is also how quickly a crashed holder's lock frees up. Defaults to the client's
    /// `default_ttl` (30 s).
    pub fn ttl(mut self, ttl: Duration) -> Self {
        self.ttl = Some(ttl);
        self
    }

    /// The label this acquisition's metrics and spans carry (feature `metrics`; spans always).
    ///
    /// Metrics are labelled by *label*, never by the lock name, so that a lock per invoice or
    /// per user does not make a time series per invoice or per user: give locks of one kind
    /// one label, such as the template their names are made from (`"invoice:{id}"`, which is
    /// what `#[distributed_lock]` passes). Without a label, metrics say `"other"`. To label by
    /// the lock name itself, pass it here: that is the caller's choice to make.
    ///
    /// ```
    /// let opts = redis_lock::LockOptions::new().label("invoice:{id}");
    /// # let _ = opts;
    /// ```
    pub fn label(mut self, label: impl Into<Cow<'static, str>>) -> Self {
        self.label = Some(label.into());
        self
    }

    /// How long to wait for a busy lock. `Duration::ZERO` makes one attempt. Defaults to the
    /// client's [`default_wait`](crate::Builder::default_wait): until the lock is free.
    pub fn wait(mut self, wait: Duration) -> Self {
        self.wait = Some(wait);
        self
    }

    /// How to wait between attempts. Defaults to the client's `default_retry`
    /// ([`RetryStrategy::notify`]).
    pub fn retry(mut self, retry: RetryStrategy) -> Self {
        self.retry = Some(retry);
        self
    }

    /// A string stored with the lock and shown by `inspect` and `redis-lock status`, at most
    /// [`MAX_METADATA_LEN`] bytes. Not secret: anyone who can read Redis can read it.
    pub fn metadata(mut self, metadata: impl Into<String>) -> Self {
        self.metadata = Some(metadata.into());
        self
    }

    /// Whether a watchdog thread renews the lock while the guard lives. Without it the lock
    /// expires after `ttl` whatever the holder does. Defaults to the client's setting (on).
    pub fn watchdog(mut self, on: bool) -> Self {
        self.watchdog = Some(on);
        self
    }

    /// Keep the lock taken for at least `min` after acquisition, even if it is released earlier
    /// (ShedLock's `lockAtLeastFor`). A release before then gives up ownership, nobody can renew
    /// the lock, and the key expires when `min` has passed. Defaults to zero.
    pub fn hold_at_least(mut self, min: Duration) -> Self {
        self.hold_at_least = min;
        self
    }

    /// Keep the lock taken for `cooldown` after every release of this acquisition (an
    /// explicit [`release`](crate::LockGuard::release), the guard's drop, or
    /// [`release_all`](crate::LockClient::release_all)): the next run of the same job cannot
    /// start until the cool-down has passed, however short this run was ("at most one
    /// rebuild per 30 s"). Unlike [`hold_at_least`](Self::hold_at_least), which counts from
    /// the acquisition, this counts from the release.
    ///
    /// At release the lock becomes ownerless (nobody can renew or release it) and frees
    /// itself `cooldown` later; with a minimum hold too, it frees at the later of the two.
    /// Waiters keep waiting and take it when it frees. A lock that was lost is not cooled
    /// down: the release touches nothing that is not its own. Fencing tokens are untouched.
    /// [`inspect`](crate::LockClient::inspect) shows [`cooling_until`](crate::LockInfo::cooling_until).
    ///
    /// Zero, or more than [`MAX_TTL`], is refused with
    /// [`Error::InvalidInput`](crate::Error::InvalidInput) when acquiring, and so is any
    /// cool-down for a semaphore's permit (given back at once). For one release only, see
    /// [`LockGuard::release_after`](crate::LockGuard::release_after).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// use std::time::Duration;
    /// # fn main() -> redis_lock::Result<()> {
    /// # let locks = redis_lock::LockClient::open("redis://127.0.0.1/")?;
    /// // At most one cache rebuild per 30 s, however long each takes.
    /// if let Some(_guard) = locks
    ///     .options("rebuild-cache")
    ///     .cooldown(Duration::from_secs(30))
    ///     .wait(Duration::ZERO)
    ///     .try_acquire()?
    /// {
    ///     // rebuild ...
    /// } // released here, and taken by nobody for the next 30 s
    /// # Ok(()) }
    /// ```
    pub fn cooldown(mut self, cooldown: Duration) -> Self {
        self.cooldown = Some(cooldown);
        self
    }

    /// Stop renewing after the lock has been held for `max`, so a hung holder cannot keep the
    /// lock forever: it then expires one TTL later and the guard reports it lost. Defaults to
    /// no cap.
    pub fn max_hold(mut self, max: Duration) -> Self {
        self.max_hold = Some(max);
        self
    }

    /// Called once, from the watchdog thread, when the watchdog finds the lock lost. Keep it
    /// short: it delays nothing else, but it runs on the renewal thread.
    pub fn on_lost(mut self, callback: impl Fn(&LostEvent) + Send + Sync + 'static) -> Self {
        self.on_lost = Some(Arc::new(callback));
        self
    }

    /// If this thread already holds the same lock through the same client, join that
    /// acquisition instead of waiting for it (a hold count; nothing is sent to Redis). The lock
    /// is released when the last guard of the acquisition is gone. Another thread is never an
    /// owner. Defaults to off.
    pub fn reentrant(mut self, yes: bool) -> Self {
        self.reentrant = yes;
        self
    }

    /// Lets another thread stop this acquisition while it waits: after
    /// [`CancelToken::cancel`] the call leaves the wait queue (a grant made for it goes to the
    /// next waiter) and fails with [`Error::Cancelled`](crate::Error::Cancelled), within a
    /// round trip or two; an acquisition started with a cancelled token fails at once,
    /// before anything is sent. Defaults to none.
    ///
    /// ```
    /// let cancel = redis_lock::CancelToken::new();
    /// let opts = redis_lock::LockOptions::new().cancel(cancel.clone());
    /// # let _ = opts;
    /// ```
    pub fn cancel(mut self, token: CancelToken) -> Self {
        self.cancel = Some(token);
        self
    }

    /// Require `replicas` replicas to acknowledge the acquisition within `timeout` (Redis
    /// `WAIT`, on the connection that wrote the lock), so that a failover right after acquiring
    /// does not hand the lock to a second holder. Without the acknowledgement the lock is
    /// deleted (a minimum hold does not apply: the caller never held it) and the call fails
    /// with [`Error::ReplicaAck`](crate::Error::ReplicaAck). `timeout` is at most
    /// [`MAX_TTL`]. Zero replicas turns the option off. Defaults to no acknowledgement.
    ///
    /// On a Sentinel client the release waits for the same acknowledgement (at most `timeout`
    /// more); a release the replicas did not acknowledge (the old master may take it after a
    /// failover while the new one keeps the lock) is sent again once the sentinels name a new
    /// master, until the lock would have expired.
    ///
    /// This narrows the failover window; it does not close it: Redis replication stays
    /// asynchronous, and a replica that acknowledged can still lose the lock if it restarts
    /// without persistence. See `SAFETY.md`.
    pub fn replicas(mut self, replicas: u32, timeout: Duration) -> Self {
        self.replicas = (replicas > 0).then_some(ReplicaAck {
            count: replicas,
            timeout,
            fsync: false,
        });
        self
    }

    /// Like [`replicas`](Self::replicas), but the replicas must have written the acquisition to
    /// their append-only file and fsynced it (`WAITAOF 0 <replicas> <timeout>`), so the lock
    /// (and its fencing counter) also survives a replica that restarts. Only replicas running
    /// with `appendonly yes` count.
    ///
    /// `WAITAOF` exists from Redis 7.2 on. Each client finds out once, from the first reply,
    /// whether its server has it; on an older server it falls back to `WAIT` (the replicas
    /// hold the lock in memory, not necessarily on disk) and logs a warning once.
    pub fn replicas_fsynced(mut self, replicas: u32, timeout: Duration) -> Self {
        self.replicas = (replicas > 0).then_some(ReplicaAck {
            count: replicas,
            timeout,
            fsync: true,
        });
        self
    }

    /// Take the name as a read-write lock, on this side: [`LockMode::Read`] (a share; many
    /// readers at once) or [`LockMode::Write`] (exclusive). Unset: a mutex. See
    /// [`LockClient::read_lock`](crate::LockClient::read_lock) for the rules. Read-write locks
    /// refuse [`hold_at_least`](Self::hold_at_least) and fair waiting with
    /// [`Error::InvalidInput`](crate::Error::InvalidInput).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn main() -> redis_lock::Result<()> {
    /// # let locks = redis_lock::LockClient::open("redis://127.0.0.1/")?;
    /// use redis_lock::{LockMode, LockOptions};
    /// let opts = LockOptions::new().mode(LockMode::Read);
    /// let share = locks.acquire_with("catalog", &opts)?;
    /// # drop(share); Ok(()) }
    /// ```
    pub fn mode(mut self, mode: LockMode) -> Self {
        self.mode = Some(mode);
        self
    }
}

/// The side of a read-write lock an acquisition takes (see
/// [`LockOptions::mode`] and [`LockClient::read_lock`](crate::LockClient::read_lock)).
///
/// # Examples
///
/// ```
/// use redis_lock::LockMode;
/// assert_eq!("read".parse::<LockMode>().unwrap(), LockMode::Read);
/// assert_eq!(LockMode::Write.to_string(), "write");
/// assert!("shared".parse::<LockMode>().is_err());
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum LockMode {
    /// A share: any number of readers hold the lock at once, while no writer does.
    Read,
    /// Exclusive: one writer, no reader.
    Write,
}

impl std::fmt::Display for LockMode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            LockMode::Read => "read",
            LockMode::Write => "write",
        })
    }
}

impl std::str::FromStr for LockMode {
    type Err = crate::error::Error;

    /// `read` or `write`.
    fn from_str(s: &str) -> crate::error::Result<LockMode> {
        match s {
            "read" => Ok(LockMode::Read),
            "write" => Ok(LockMode::Write),
            other => Err(crate::error::Error::invalid(
                "mode",
                format!("{other:?} is not a lock mode: use \"read\" or \"write\""),
            )),
        }
    }
}
