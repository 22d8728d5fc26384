//! Multi-locks in the public surface: `LockClient::lock_all` and its family, and
//! `MultiGuard`, the one guard over every member.

use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::client::{LockClient, busy_if_held_here, not_acquired};
use crate::error::{Error, LostReason, Result};
use crate::hold::acquire::{Deadline, Taken};
use crate::hold::lease::{Lease, ReleaseOutcome};
use crate::hold::multi::members;
use crate::options::{LockOptions, validate_ttl};

/// Several locks held together, taken all or none by [`LockClient::lock_all`] and its
/// siblings. Released together when the guard is dropped.
///
/// Each member is an ordinary lock of its name (a [`LockClient::lock`] of the same name waits
/// for it, and the other way round), with its own fencing token and its own renewal (the
/// watchdog threads are pooled). The guard is lost as soon as any member is:
/// [`lost_member`](Self::lost_member) says which, and why.
///
/// # Examples
///
/// ```no_run
/// # fn main() -> redis_lock::Result<()> {
/// let locks = redis_lock::LockClient::open("redis://127.0.0.1/")?;
/// let guard = locks.lock_all(["account:1", "account:2"])?; // both, or an error with neither
/// // ... move money between the two accounts ...
/// guard.ensure_held()?; // still both ours? then commit
/// for (name, outcome) in guard.release()? {
///     println!("{name}: {outcome:?}");
/// }
/// # Ok(()) }
/// ```
#[must_use = "if unused the locks are released immediately"]
#[clippy::has_significant_drop]
pub struct MultiGuard {
    leases: Vec<Arc<Lease>>,
    live: bool,
}

impl std::fmt::Debug for MultiGuard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // No tokens: they are what allows renewing and releasing.
        f.debug_struct("MultiGuard")
            .field("fencing_tokens", &self.fencing_tokens())
            .field("lost", &self.lost_member())
            .finish_non_exhaustive()
    }
}

impl MultiGuard {
    /// The lock names, sorted (the order of every per-member answer).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn main() -> redis_lock::Result<()> {
    /// # let locks = redis_lock::LockClient::open("redis://127.0.0.1/")?;
    /// let guard = locks.lock_all(["b", "a"])?;
    /// assert_eq!(guard.keys(), ["a", "b"]);
    /// # Ok(()) }
    /// ```
    pub fn keys(&self) -> Vec<&str> {
        self.leases.iter().map(|l| l.name.as_str()).collect()
    }

    /// Each member's fencing token, by name (sorted): each strictly greater than every
    /// earlier token of that name.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn main() -> redis_lock::Result<()> {
    /// # let locks = redis_lock::LockClient::open("redis://127.0.0.1/")?;
    /// let guard = locks.lock_all(["a", "b"])?;
    /// for (name, token) in guard.fencing_tokens() {
    ///     println!("{name}: {token}");
    /// }
    /// # Ok(()) }
    /// ```
    pub fn fencing_tokens(&self) -> Vec<(&str, u64)> {
        self.leases
            .iter()
            .map(|l| (l.name.as_str(), l.fence))
            .collect()
    }

    /// The fencing token of member `key`; `None` when it is not a member.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn main() -> redis_lock::Result<()> {
    /// # let locks = redis_lock::LockClient::open("redis://127.0.0.1/")?;
    /// let guard = locks.lock_all(["a", "b"])?;
    /// assert!(guard.fencing_token("a").is_some());
    /// assert!(guard.fencing_token("c").is_none());
    /// # Ok(()) }
    /// ```
    pub fn fencing_token(&self, key: &str) -> Option<u64> {
        self.leases.iter().find(|l| l.name == key).map(|l| l.fence)
    }

    /// The first member (by name) known to be lost, and why; `None` while all are held. No
    /// round trip.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn main() -> redis_lock::Result<()> {
    /// # let locks = redis_lock::LockClient::open("redis://127.0.0.1/")?;
    /// let guard = locks.lock_all(["a", "b"])?;
    /// if let Some((name, reason)) = guard.lost_member() {
    ///     eprintln!("lost {name}: {reason}");
    /// }
    /// # Ok(()) }
    /// ```
    pub fn lost_member(&self) -> Option<(&str, LostReason)> {
        self.leases
            .iter()
            .find_map(|l| l.lost_reason().map(|r| (l.name.as_str(), r)))
    }

    /// `true` once any member is known to be lost (see [`lost_member`](Self::lost_member)).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn main() -> redis_lock::Result<()> {
    /// # let locks = redis_lock::LockClient::open("redis://127.0.0.1/")?;
    /// let guard = locks.lock_all(["a", "b"])?;
    /// assert!(!guard.is_lost());
    /// # Ok(()) }
    /// ```
    pub fn is_lost(&self) -> bool {
        self.lost_member().is_some()
    }

    /// `Ok(())` while every member is held as far as this process knows; [`Error::Lost`]
    /// naming the first lost member otherwise. No round trip.
    ///
    /// # Errors
    ///
    /// [`Error::Lost`] when a member is lost.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn main() -> redis_lock::Result<()> {
    /// # let locks = redis_lock::LockClient::open("redis://127.0.0.1/")?;
    /// let guard = locks.lock_all(["a", "b"])?;
    /// guard.ensure_held()?; // then commit
    /// # Ok(()) }
    /// ```
    pub fn ensure_held(&self) -> Result<()> {
        match self.lost_member() {
            None => Ok(()),
            Some((key, reason)) => Err(Error::Lost {
                key: key.to_owned(),
                reason,
            }),
        }
    }

    /// The commit point's check for every member: asks Redis whether each is still held under
    /// this guard's token (see [`LockGuard::check_held`](crate::LockGuard::check_held)); the
    /// shortest time any member has left (`None` when none expires).
    ///
    /// # Errors
    ///
    /// [`Error::Lost`] naming the first member that is lost (it is marked lost); Redis and
    /// pool errors.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn main() -> redis_lock::Result<()> {
    /// # let locks = redis_lock::LockClient::open("redis://127.0.0.1/")?;
    /// let both = locks.lock_all(["account:1", "account:2"])?;
    /// both.check_held()?; // Redis says both are still ours: commit the transfer
    /// # Ok(()) }
    /// ```
    pub fn check_held(&self) -> Result<Option<Duration>> {
        self.ensure_held()?;
        let mut shortest: Option<Duration> = None;
        for lease in &self.leases {
            if let Some(left) = lease.remaining_ttl()? {
                shortest = Some(shortest.map_or(left, |s| s.min(left)));
            }
        }
        Ok(shortest)
    }

    /// Applies `pipeline`'s commands only if this guard still holds every member at that
    /// instant, atomically with the check, in one round trip (see
    /// [`LockGuard::commit`](crate::LockGuard::commit), which this is for several locks): a
    /// transfer between two accounts written under both their locks, or not at all.
    ///
    /// # Errors
    ///
    /// [`Error::Lost`] naming a member that is not this guard's any more (it is marked lost;
    /// nothing was written); [`Error::InvalidInput`] before anything is sent under Redlock or
    /// on a Cluster when the members or the commands' keys are not in one slot; otherwise as
    /// [`LockGuard::commit`](crate::LockGuard::commit).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn main() -> redis_lock::Result<()> {
    /// # let locks = redis_lock::LockClient::open("redis://127.0.0.1/")?;
    /// let both = locks.lock_all(["account:1", "account:2"])?;
    /// let (from, to): (i64, i64) = both.commit(
    ///     redis::pipe()
    ///         .cmd("DECRBY").arg("balance:1").arg(25)
    ///         .cmd("INCRBY").arg("balance:2").arg(25),
    /// )?; // Err(Lost) and nothing written if either lock was lost meanwhile
    /// # Ok(()) }
    /// ```
    pub fn commit<T: redis::FromRedisValue>(&self, pipeline: &redis::Pipeline) -> Result<T> {
        self.ensure_held()?;
        let commands = crate::guard::commands_of(pipeline)?;
        let leases: Vec<&Lease> = self.leases.iter().map(|l| &**l).collect();
        let replies = crate::hold::lease::commit(&leases, &commands)?;
        Ok(pipeline.query(&mut crate::guard::Replies(Some(replies)))?)
    }

    /// Makes every member expire `ttl` from now, and the TTL their watchdogs renew to.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidInput`] for a bad `ttl`; [`Error::Lost`] for the first member that is
    /// gone or has another owner (the members before it were extended); Redis and pool
    /// errors.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn main() -> redis_lock::Result<()> {
    /// # let locks = redis_lock::LockClient::open("redis://127.0.0.1/")?;
    /// let guard = locks.lock_all(["a", "b"])?;
    /// guard.extend(std::time::Duration::from_secs(120))?;
    /// # Ok(()) }
    /// ```
    pub fn extend(&self, ttl: Duration) -> Result<()> {
        validate_ttl(ttl)?;
        self.leases.iter().try_for_each(|l| l.extend(ttl))
    }

    /// Releases every member now and says what happened to each, by name (sorted). A member
    /// that somebody else holds now is left untouched (`Lost`).
    ///
    /// # Errors
    ///
    /// The first Redis or pool error; every member is still tried, and those that could not
    /// be released expire with their TTL.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn main() -> redis_lock::Result<()> {
    /// # let locks = redis_lock::LockClient::open("redis://127.0.0.1/")?;
    /// let guard = locks.lock_all(["a", "b"])?;
    /// let outcomes = guard.release()?;
    /// assert!(outcomes.iter().all(|(_, o)| o.is_clean()));
    /// # Ok(()) }
    /// ```
    pub fn release(mut self) -> Result<Vec<(String, ReleaseOutcome)>> {
        self.live = false;
        let mut outcomes = Vec::with_capacity(self.leases.len());
        let mut first_error = None;
        for lease in &self.leases {
            // This guard's hold goes with it (a release that fails then leaves no thread
            // holding the member).
            lease.drop_hold();
            match lease.release() {
                Ok(outcome) => outcomes.push((lease.name.clone(), outcome)),
                Err(e) => {
                    first_error.get_or_insert(e);
                }
            }
        }
        first_error.map_or(Ok(outcomes), Err)
    }
}

impl MultiGuard {
    /// Its members' leases, in the order `release` reports them.
    pub(crate) fn leases(&self) -> &[Arc<Lease>] {
        &self.leases
    }
}

impl Drop for MultiGuard {
    fn drop(&mut self) {
        if self.live {
            for lease in &self.leases {
                lease.drop_hold();
                // Errors are logged by `Lease::release`.
                let _ = lease.release();
            }
        }
    }
}

impl LockClient {
    /// Acquires every lock in `keys`, waiting until all are free at once (or up to the
    /// client's [`default_wait`](crate::Builder::default_wait)): one [`MultiGuard`] over all,
    /// or an error with none held, never some. Callers asking for overlapping sets, in any
    /// order, do not deadlock: each attempt takes every lock or none, and a caller never
    /// waits while holding a member.
    ///
    /// Each member is the ordinary lock of its name: [`lock`](Self::lock) of a member waits
    /// for the multi-lock and the other way round. Where one script can name every key (one
    /// server, or a Redis Cluster with all names sharing a hash tag: names up to their first
    /// `}` equal) an attempt is one round trip; under Redlock and across Cluster slots the
    /// locks are taken one by one in name order and given back when one is busy. Waiting is
    /// by notification: the caller waits on the busy member as a `lock` of it would.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidInput`] (nothing sent) for an empty list, a name given twice, more
    /// than [`MAX_LOCK_ALL`](crate::MAX_LOCK_ALL) names, a bad name, or an option a
    /// multi-lock cannot honour (minimum hold, replica acknowledgement, reentrancy, fair
    /// waiting, a read or write mode); [`Error::AlreadyHeld`] when this thread holds one of them;
    /// [`Error::Timeout`] (naming the names) when the wait ran out; Redis and pool errors.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn main() -> redis_lock::Result<()> {
    /// # let locks = redis_lock::LockClient::open("redis://127.0.0.1/")?;
    /// let guard = locks.lock_all(["account:1", "account:2"])?;
    /// println!("{:?}", guard.fencing_tokens());
    /// # Ok(()) }
    /// ```
    pub fn lock_all<I, S>(&self, keys: I) -> Result<MultiGuard>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        self.acquire_all_with(keys, &LockOptions::new())
    }

    /// One all-or-nothing attempt on every lock in `keys`. `Ok(None)` when any is busy
    /// (none is then held).
    ///
    /// # Errors
    ///
    /// As [`lock_all`](Self::lock_all), but never [`Error::Timeout`].
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn main() -> redis_lock::Result<()> {
    /// # let locks = redis_lock::LockClient::open("redis://127.0.0.1/")?;
    /// match locks.try_lock_all(["a", "b", "c"])? {
    ///     Some(_guard) => println!("all three"),
    ///     None => println!("at least one is busy; none taken"),
    /// }
    /// # Ok(()) }
    /// ```
    pub fn try_lock_all<I, S>(&self, keys: I) -> Result<Option<MultiGuard>>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        self.try_acquire_all_with(keys, &LockOptions::new().wait(Duration::ZERO))
    }

    /// Tries to acquire every lock in `keys`, waiting up to `timeout`. `Ok(None)` when they
    /// were never all free at once by then (none is held).
    ///
    /// # Errors
    ///
    /// As [`try_lock_all`](Self::try_lock_all), plus [`Error::InvalidInput`] for a `timeout`
    /// that overflows the clock.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn main() -> redis_lock::Result<()> {
    /// # let locks = redis_lock::LockClient::open("redis://127.0.0.1/")?;
    /// use std::time::Duration;
    /// if let Some(guard) = locks.try_lock_all_for(["a", "b"], Duration::from_secs(5))? {
    ///     println!("{:?}", guard.keys());
    /// }
    /// # Ok(()) }
    /// ```
    pub fn try_lock_all_for<I, S>(&self, keys: I, timeout: Duration) -> Result<Option<MultiGuard>>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        self.try_acquire_all_with(keys, &LockOptions::new().wait(timeout))
    }

    /// Acquires every lock in `keys` with `opts` (TTL, wait, retry, metadata, watchdog,
    /// maximum hold, cool-down, loss callback, label, cancel token), waiting up to `opts`'
    /// wait budget.
    ///
    /// # Errors
    ///
    /// [`Error::Busy`] when the budget was zero and a member is held, [`Error::Timeout`] when
    /// the budget ran out (both name the whole list, comma-separated); otherwise as
    /// [`lock_all`](Self::lock_all).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn main() -> redis_lock::Result<()> {
    /// # let locks = redis_lock::LockClient::open("redis://127.0.0.1/")?;
    /// use std::time::Duration;
    /// let opts = redis_lock::LockOptions::new().ttl(Duration::from_secs(5)).metadata("transfer 17");
    /// let guard = locks.acquire_all_with(["account:1", "account:2"], &opts)?;
    /// # let _ = guard; Ok(()) }
    /// ```
    pub fn acquire_all_with<I, S>(&self, keys: I, opts: &LockOptions) -> Result<MultiGuard>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        let started = Instant::now();
        let names = collect(keys);
        let key = names.join(",");
        match self.acquire_all_opt(names, opts)? {
            Taken::Acquired(guard) => Ok(guard),
            // The busy member's holder, as the last attempt's answer named it.
            Taken::Busy(holder) => Err(not_acquired(&self.inner, key, opts, started, holder)),
        }
    }

    /// Tries to acquire every lock in `keys` with `opts`. `Ok(None)` when they were never all
    /// free at once within the wait budget (none is held).
    ///
    /// # Errors
    ///
    /// As [`try_lock_all`](Self::try_lock_all).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn main() -> redis_lock::Result<()> {
    /// # let locks = redis_lock::LockClient::open("redis://127.0.0.1/")?;
    /// let opts = redis_lock::LockOptions::new().wait(std::time::Duration::from_secs(2));
    /// if locks.try_acquire_all_with(["a", "b"], &opts)?.is_none() {
    ///     println!("busy");
    /// }
    /// # Ok(()) }
    /// ```
    pub fn try_acquire_all_with<I, S>(
        &self,
        keys: I,
        opts: &LockOptions,
    ) -> Result<Option<MultiGuard>>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        busy_if_held_here(
            self.acquire_all_opt(collect(keys), opts)
                .map(Taken::acquired),
        )
    }

    /// Both families' acquisition: [`Error::AlreadyHeld`] when this thread holds a member
    /// already (see `client::busy_if_held_here`).
    fn acquire_all_opt(&self, names: Vec<String>, opts: &LockOptions) -> Result<Taken<MultiGuard>> {
        let names = members(names)?;
        let deadline = Deadline::after(opts.wait.or(self.inner.config.default_wait))?;
        Ok(self
            .inner
            .acquire_all(&names, opts, &deadline)?
            .map(|leases| MultiGuard { leases, live: true }))
    }
}

fn collect<I, S>(keys: I) -> Vec<String>
where
    I: IntoIterator<Item = S>,
    S: AsRef<str>,
{
    keys.into_iter().map(|k| k.as_ref().to_owned()).collect()
}
