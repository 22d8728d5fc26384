//! The RAII guard of a held lock.

use std::sync::Arc;
use std::time::Duration;

use crate::error::{Error, Result};
use crate::hold::lease::{Lease, ReleaseOutcome};
use crate::options::{validate_cooldown, validate_ttl};

/// A held lock. The lock is released when the guard is dropped.
///
/// This structure is created by [`LockClient::lock`](crate::LockClient::lock),
/// [`try_lock`](crate::LockClient::try_lock) and their siblings; for a read-write lock by
/// [`read_lock`](crate::LockClient::read_lock) (the guard of one reader's share) and
/// [`write_lock`](crate::LockClient::write_lock); and, for one permit of a semaphore, by
/// [`Semaphore::acquire`](crate::Semaphore::acquire) and its siblings. While it lives, a watchdog
/// thread renews the lock every `ttl / 3` (unless the watchdog was turned off). If the lock is
/// lost anyway (the holder paused past its TTL, Redis lost the key, someone broke the lock),
/// [`is_lost`](Self::is_lost) turns `true` and [`ensure_held`](Self::ensure_held) fails: check
/// one of them before committing side effects, or better, pass the
/// [`fencing_token`](Self::fencing_token) to the resource you write to.
///
/// Dropping the guard releases the lock best-effort and logs a failure;
/// [`release`](Self::release) tells what happened.
///
/// The guard is `Send`, but what a thread holds is the thread that *acquired*: reentrancy,
/// [`Error::AlreadyHeld`](crate::Error::AlreadyHeld) for a second acquisition instead of a wait
/// for itself, and [`is_held_by_current_thread`](crate::LockClient::is_held_by_current_thread)
/// go by the acquiring thread while the guard lives, wherever it was moved. A thread that
/// received a guard and asks for the same lock again waits for it like any other thread
/// (give such an acquisition a wait budget).
///
/// # Examples
///
/// ```no_run
/// # fn main() -> redis_lock::Result<()> {
/// let locks = redis_lock::LockClient::open("redis://127.0.0.1/")?;
/// let guard = locks.lock("report")?;
/// // ... work ...
/// guard.ensure_held()?; // still ours? then commit
/// let outcome = guard.release()?;
/// assert!(outcome.is_clean());
/// # Ok(()) }
/// ```
#[must_use = "if unused the lock is released immediately"]
#[clippy::has_significant_drop]
pub struct LockGuard {
    pub(crate) lease: Arc<Lease>,
    /// Taken by `release`, so `Drop` knows there is nothing left to do.
    pub(crate) live: bool,
}

impl std::fmt::Debug for LockGuard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The token is left out on purpose: it is what allows renewing and releasing.
        f.debug_struct("LockGuard")
            .field("key", &self.lease.name)
            .field("fencing_token", &self.lease.fence)
            .field("lost", &self.lease.lost_reason())
            .finish_non_exhaustive()
    }
}

impl LockGuard {
    pub(crate) fn new(lease: Arc<Lease>) -> LockGuard {
        LockGuard { lease, live: true }
    }

    /// The lock name, as given to the call that acquired it (without namespace).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn main() -> redis_lock::Result<()> {
    /// # let locks = redis_lock::LockClient::open("redis://127.0.0.1/")?;
    /// let guard = locks.lock("report")?;
    /// assert_eq!(guard.key(), "report");
    /// # Ok(()) }
    /// ```
    pub fn key(&self) -> &str {
        &self.lease.name
    }

    /// The owner token: 128 random bits, hex-encoded. Whoever knows it can renew and release
    /// the lock, so do not log it.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn main() -> redis_lock::Result<()> {
    /// # let locks = redis_lock::LockClient::open("redis://127.0.0.1/")?;
    /// let guard = locks.lock("report")?;
    /// // A secret: whoever knows it can renew and release the lock.
    /// assert_eq!(guard.token().len(), 32);
    /// # Ok(()) }
    /// ```
    pub fn token(&self) -> &str {
        &self.lease.token
    }

    /// The fencing token of this acquisition: strictly greater than the token of every earlier
    /// acquisition of the same lock (as long as Redis keeps its data). Pass it to the resource
    /// you write to, and have the resource reject tokens lower than the highest it has seen:
    /// that stops a holder that paused past its TTL from overwriting its successor's work.
    /// Tokens are not always consecutive: an attempt that finds the lock busy gives back the
    /// number it drew, unless another attempt drew one after it (two racing), so a number
    /// can be skipped; never reused.
    ///
    /// Under Redlock ([`LockClient::redlock_builder`](crate::LockClient::redlock_builder)) the
    /// token is the highest counter of the majority that granted the lock, and lagging
    /// counters are raised to it before the acquisition counts, so tokens still strictly
    /// increase as long as no server loses its data.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn main() -> redis_lock::Result<()> {
    /// # let locks = redis_lock::LockClient::open("redis://127.0.0.1/")?;
    /// let guard = locks.lock("ledger")?;
    /// let token = guard.fencing_token();
    /// // Pass it with every write; the store refuses writes with a lower token than it has seen.
    /// # let _ = token;
    /// # Ok(()) }
    /// ```
    pub fn fencing_token(&self) -> u64 {
        self.lease.fence
    }

    /// How long ago the lock was acquired.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn main() -> redis_lock::Result<()> {
    /// # let locks = redis_lock::LockClient::open("redis://127.0.0.1/")?;
    /// let guard = locks.lock("report")?;
    /// println!("held for {:?}", guard.held_for());
    /// # Ok(()) }
    /// ```
    pub fn held_for(&self) -> Duration {
        self.lease.acquired_at.elapsed()
    }

    /// `true` once the lock is known to be lost: the watchdog found it gone or re-owned, or its
    /// TTL has run out by the local clock without a renewal getting through. No round trip.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn main() -> redis_lock::Result<()> {
    /// # let locks = redis_lock::LockClient::open("redis://127.0.0.1/")?;
    /// let guard = locks.lock("report")?;
    /// if guard.is_lost() {
    ///     return Ok(()); // someone else may hold it now: stop
    /// }
    /// # Ok(()) }
    /// ```
    pub fn is_lost(&self) -> bool {
        self.lease.lost_reason().is_some()
    }

    /// `Ok(())` while the lock is held as far as this process knows; [`Error::Lost`] once it
    /// is not (see [`is_lost`](Self::is_lost)). Free (no round trip), so it only knows what
    /// the watchdog last saw: to ask Redis at the moment you commit, use
    /// [`check_held`](Self::check_held).
    ///
    /// # Errors
    ///
    /// [`Error::Lost`] when the lock is lost.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn main() -> redis_lock::Result<()> {
    /// # let locks = redis_lock::LockClient::open("redis://127.0.0.1/")?;
    /// let guard = locks.lock("report")?;
    /// // ... work ...
    /// guard.ensure_held()?; // lost as far as we know? then stop before the expensive part
    /// // ...
    /// # Ok(()) }
    /// ```
    pub fn ensure_held(&self) -> Result<()> {
        match self.lease.lost_reason() {
            None => Ok(()),
            Some(reason) => Err(Error::Lost {
                key: self.lease.name.clone(),
                reason,
            }),
        }
    }

    /// The commit point's check: asks Redis whether this guard's owner token still holds the
    /// lock (a majority of the servers under Redlock), and how long it has left (`None`
    /// without an expiry). One round trip; a lock already known lost is reported without one.
    /// When Redis says it is gone or another owner's, the guard is marked lost (`is_lost`,
    /// `ensure_held` and `on_lost` say so from then on).
    ///
    /// Even this answer can be stale by the time a write lands (a pause between the check
    /// and the write): a resource that checks the [fencing token](Self::fencing_token) is the
    /// only complete protection (SAFETY.md).
    ///
    /// # Errors
    ///
    /// [`Error::Lost`] when the lock is lost; a Redis or pool error when Redis cannot be
    /// asked (the lock may still be held: do not commit either way).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn main() -> redis_lock::Result<()> {
    /// # let locks = redis_lock::LockClient::open("redis://127.0.0.1/")?;
    /// let guard = locks.lock("ledger")?;
    /// // ... work ...
    /// guard.check_held()?; // Redis says it is still ours: commit
    /// // commit, fenced by guard.fencing_token() ...
    /// # Ok(()) }
    /// ```
    pub fn check_held(&self) -> Result<Option<Duration>> {
        self.ensure_held()?;
        self.lease.remaining_ttl()
    }

    /// Applies `pipeline`'s commands only if this guard still holds its lock at that instant,
    /// atomically with the check, in one round trip: the commit of work done under a lock
    /// whose data lives in the same Redis. The replies come back as
    /// [`Pipeline::query`](redis::Pipeline::query) gives them (`.ignore()`d commands left out).
    ///
    /// What it promises: **no write after a loss**. Redis runs the check and the commands as
    /// one script, so nothing else (an expiry, another holder's acquisition) comes between
    /// them; a lock that is no longer this guard's runs none of them, and the guard is marked
    /// lost. What it does not: a command that fails inside it (a wrong type, a bad argument)
    /// stops it there, and the commands before it stay applied (Redis has no rollback),
    /// as in a `MULTI`/`EXEC`; and a commit whose reply was lost (a connection cut) may or may
    /// not have run, as any write. Keys must be strings of bytes the commands name directly;
    /// commands that scripts may not run (`MULTI`, `WATCH`, blocking and subscribing ones)
    /// fail as such.
    ///
    /// For a lock, a read share, the write lock and a permit; on one server, on Sentinel (the
    /// replica acknowledgement the lock was taken with is waited for after the commit), and
    /// on a Redis Cluster when every key of the commands is in the lock's slot (the lock name
    /// as their hash tag: `{acct:7}:balance` beside the lock `acct:7`, whose key is
    /// `lock:{acct:7}`; checked before anything is sent).
    /// A Redlock quorum cannot apply writes atomically together with its lock: there it is
    /// refused, and the [fencing token](Self::fencing_token) is the protection.
    ///
    /// # Errors
    ///
    /// [`Error::Lost`] when the lock is not this guard's any more (nothing was written);
    /// [`Error::InvalidInput`] before anything is sent under Redlock, on a Cluster key of
    /// another slot, or for a cursor argument; [`Error::ReplicaAck`] when fewer replicas than
    /// the lock was taken with acknowledged the writes in time (they are applied on the
    /// master); a Redis error when a command failed (those before it are applied) or the
    /// reply is not `T`; a connection error when Redis cannot be asked (the commit may have
    /// run).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn main() -> redis_lock::Result<()> {
    /// # let locks = redis_lock::LockClient::open("redis://127.0.0.1/")?;
    /// let guard = locks.lock("account:7")?;
    /// // ... read the balance, decide ...
    /// let (balance,): (i64,) = guard.commit(
    ///     redis::pipe()
    ///         .cmd("DECRBY").arg("balance:7").arg(60)
    ///         .cmd("RPUSH").arg("history:7").arg("-60").ignore(),
    /// )?; // Err(Error::Lost { .. }) and nothing written if the lock was lost meanwhile
    /// # Ok(()) }
    /// ```
    pub fn commit<T: redis::FromRedisValue>(&self, pipeline: &redis::Pipeline) -> Result<T> {
        self.ensure_held()?;
        let commands = commands_of(pipeline)?;
        let replies = crate::hold::lease::commit(&[&self.lease], &commands)?;
        Ok(pipeline.query(&mut Replies(Some(replies)))?)
    }

    /// Asks Redis how long the lock has left; `None` if it has no expiry. The same round trip
    /// as [`check_held`](Self::check_held).
    ///
    /// # Errors
    ///
    /// [`Error::Lost`] when the lock is gone or owned by someone else (the guard is then marked
    /// lost); a Redis or pool error when Redis cannot be asked.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn main() -> redis_lock::Result<()> {
    /// # let locks = redis_lock::LockClient::open("redis://127.0.0.1/")?;
    /// let guard = locks.lock("report")?;
    /// if let Some(left) = guard.remaining_ttl()? {
    ///     println!("expires in {left:?} unless renewed");
    /// }
    /// # Ok(()) }
    /// ```
    pub fn remaining_ttl(&self) -> Result<Option<Duration>> {
        self.lease.remaining_ttl()
    }

    /// Makes the lock expire `ttl` from now, and makes `ttl` the TTL the watchdog renews to
    /// from now on.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidInput`] for a zero or too long `ttl`; [`Error::Lost`] when the lock is
    /// gone or owned by someone else; a Redis or pool error.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn main() -> redis_lock::Result<()> {
    /// # let locks = redis_lock::LockClient::open("redis://127.0.0.1/")?;
    /// use std::time::Duration;
    /// let guard = locks.lock("report")?;
    /// guard.extend(Duration::from_secs(120))?; // a long step ahead
    /// # Ok(()) }
    /// ```
    pub fn extend(&self, ttl: Duration) -> Result<()> {
        validate_ttl(ttl)?;
        self.lease.extend(ttl)
    }

    /// Replaces the metadata others see with this lock ([`LockInfo::metadata`] of
    /// [`LockClient::inspect`], an observer's changes, the CLI's `status`), without letting
    /// it go: a job's progress, a leader's address. The owner token, fencing token and TTL
    /// stay. Works for a mutex, either side of a read-write lock, and a semaphore's permit;
    /// under Redlock, once a majority of the servers replaced it.
    ///
    /// # Errors
    ///
    /// [`Error::Lost`] when the lock is gone or owned by someone else (nothing is written);
    /// [`Error::InvalidInput`] for metadata over [`MAX_METADATA_LEN`](crate::MAX_METADATA_LEN)
    /// bytes (nothing is sent); a Redis or pool error.
    ///
    /// [`LockInfo::metadata`]: crate::LockInfo::metadata
    /// [`LockClient::inspect`]: crate::LockClient::inspect
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn main() -> redis_lock::Result<()> {
    /// # let locks = redis_lock::LockClient::open("redis://127.0.0.1/")?;
    /// let guard = locks.lock("nightly-export")?;
    /// for batch in 1..=10 {
    ///     // ... export one batch ...
    ///     guard.set_metadata(&format!("batch {batch} of 10"))?;
    /// }
    /// # Ok(()) }
    /// ```
    pub fn set_metadata(&self, metadata: &str) -> Result<()> {
        crate::options::validate_metadata(metadata)?;
        self.lease.proclaim(metadata)
    }

    /// How many guards share this acquisition: more than one only through reentrancy
    /// ([`LockClient::lock_reentrant`](crate::LockClient::lock_reentrant)); the lock is
    /// released when the last one goes.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn main() -> redis_lock::Result<()> {
    /// # let locks = redis_lock::LockClient::open("redis://127.0.0.1/")?;
    /// let outer = locks.lock_reentrant("account:7")?;
    /// let inner = locks.lock_reentrant("account:7")?;
    /// assert_eq!(outer.hold_count(), 2);
    /// drop(inner);
    /// assert_eq!(outer.hold_count(), 1);
    /// # Ok(()) }
    /// ```
    pub fn hold_count(&self) -> usize {
        self.lease.holds()
    }

    /// Releases the lock now and tells what happened (see [`ReleaseOutcome`]). A lock that
    /// somebody else holds now is left untouched.
    ///
    /// # Errors
    ///
    /// A Redis or pool error: the lock then expires by itself after its TTL (the watchdog has
    /// already stopped).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn main() -> redis_lock::Result<()> {
    /// # let locks = redis_lock::LockClient::open("redis://127.0.0.1/")?;
    /// use redis_lock::ReleaseOutcome;
    /// let guard = locks.lock("report")?;
    /// match guard.release()? {
    ///     ReleaseOutcome::Released | ReleaseOutcome::StillHeld => {}
    ///     other => eprintln!("the lock was not protecting us all along: {other:?}"),
    /// }
    /// # Ok(()) }
    /// ```
    pub fn release(mut self) -> Result<ReleaseOutcome> {
        self.live = false;
        if self.lease.drop_hold() {
            self.lease.release()
        } else {
            Ok(ReleaseOutcome::StillHeld)
        }
    }
}

impl LockGuard {
    /// Releases the lock now but keeps it taken, by nobody, for `cooldown` from now: the
    /// next holder gets it when the cool-down has passed (or the minimum hold, if that ends
    /// later). For every release of an acquisition, set
    /// [`LockOptions::cooldown`](crate::LockOptions::cooldown) instead. A lock that was lost
    /// is left alone (`Late` or `Lost`); with other reentrant guards alive, nothing happens
    /// yet (`StillHeld`) and the last guard's release applies the acquisition's own setting.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidInput`] for a zero `cooldown` or one above
    /// [`MAX_TTL`](crate::MAX_TTL), and for a semaphore's permit (given back at once, as
    /// [`LockOptions::cooldown`](crate::LockOptions::cooldown) says), before anything is sent;
    /// the guard is then dropped, which releases the lock as a drop does (with the
    /// acquisition's own cool-down, if any).
    /// Otherwise as [`release`](Self::release).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// use std::time::Duration;
    /// # fn main() -> redis_lock::Result<()> {
    /// # let locks = redis_lock::LockClient::open("redis://127.0.0.1/")?;
    /// let guard = locks.lock("nightly-export")?;
    /// // ... export ...
    /// guard.release_after(Duration::from_secs(300))?; // no other export for 5 minutes
    /// # Ok(()) }
    /// ```
    pub fn release_after(mut self, cooldown: Duration) -> Result<ReleaseOutcome> {
        validate_cooldown(cooldown)?;
        self.lease.check_cooldown(cooldown)?;
        self.live = false;
        if self.lease.drop_hold() {
            self.lease.release_after(cooldown)
        } else {
            Ok(ReleaseOutcome::StillHeld)
        }
    }
}

impl Drop for LockGuard {
    fn drop(&mut self) {
        if self.live && self.lease.drop_hold() {
            // Errors are logged by `Lease::release`; there is nobody to return them to.
            let _ = self.lease.release();
        }
    }
}

/// The arguments of each command of `pipeline`, as the commit sends them.
pub(crate) fn commands_of(pipeline: &redis::Pipeline) -> Result<Vec<Vec<&[u8]>>> {
    pipeline
        .cmd_iter()
        .map(|cmd| {
            cmd.args_iter()
                .map(|arg| match arg {
                    redis::Arg::Simple(bytes) => Ok(bytes),
                    _ => Err(Error::invalid(
                        "commit",
                        "a cursor argument (an iterator's SCAN) cannot be committed",
                    )),
                })
                .collect()
        })
        .collect()
}

/// The replies of a commit, handed to the user's pipeline so that it shapes them as its
/// `query` does: which commands were `.ignore()`d is private to `redis::Pipeline`, and its
/// `query` (the only public way to apply it) takes a connection. Nothing is sent through it:
/// the commit was one request, already answered; this gives the answer back once.
pub(crate) struct Replies(pub(crate) Option<Vec<redis::Value>>);

impl redis::ConnectionLike for Replies {
    fn req_packed_command(&mut self, _: &[u8]) -> redis::RedisResult<redis::Value> {
        Err(redis::RedisError::from((
            redis::ErrorKind::Client,
            "a commit's replies are read as a pipeline's",
        )))
    }

    fn req_packed_commands(
        &mut self,
        _: &[u8],
        offset: usize,
        _: usize,
    ) -> redis::RedisResult<Vec<redis::Value>> {
        let replies = self.0.take().ok_or_else(|| {
            redis::RedisError::from((redis::ErrorKind::Client, "a commit's replies are read once"))
        })?;
        // An atomic pipeline (`MULTI` ... `EXEC`) expects `EXEC`'s one array.
        Ok(if offset > 0 {
            vec![redis::Value::Array(replies)]
        } else {
            replies
        })
    }

    fn get_db(&self) -> i64 {
        0
    }

    fn check_connection(&mut self) -> bool {
        false
    }

    fn is_open(&self) -> bool {
        false
    }
}
