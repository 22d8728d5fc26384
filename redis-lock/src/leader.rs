//! Leader election on a lock: `LockClient::campaign` and `Leadership`, `LockClient::leader`
//! and `Leader`. An election is a lock name; its leader is its holder, and the leader's value
//! (an address, say) is the lock's metadata, which the leader can replace without giving the
//! leadership up (`proclaim`). Everything a held lock has, a leadership has: the watchdog
//! that keeps it, loss notification (a leader paused past its TTL is told when it runs
//! again), fencing tokens that order the leaders, and commits under it.

use std::time::{Duration, SystemTime};

use crate::client::LockClient;
#[cfg(doc)]
use crate::error::Error;
use crate::error::Result;
use crate::guard::LockGuard;
use crate::hold::lease::ReleaseOutcome;
use crate::info::LockInfo;
use crate::options::LockOptions;
#[cfg(doc)]
use crate::options::MAX_METADATA_LEN;

/// This process leads an election while it holds this (see [`LockClient::campaign`]).
/// Dropping it resigns.
///
/// # Examples
///
/// ```no_run
/// # fn main() -> redis_lock::Result<()> {
/// let locks = redis_lock::LockClient::open("redis://127.0.0.1/")?;
/// let leadership = locks.campaign("scheduler", "10.0.0.7:8080")?; // waits until elected
/// while leadership.is_leader() {
///     // ... schedule, fenced by leadership.fencing_token() ...
///     # break;
/// }
/// leadership.resign()?;
/// # Ok(()) }
/// ```
#[derive(Debug)]
#[must_use = "if unused the leadership is given up at once"]
pub struct Leadership {
    guard: LockGuard,
}

/// Who leads an election now (see [`LockClient::leader`]).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Leader {
    /// The value the leader campaigned with or proclaimed last.
    pub value: String,
    /// Host name of the leader, when known (a leadership just handed over is written by its
    /// new leader at its first renewal).
    pub host: Option<String>,
    /// Process id of the leader on its host, when known.
    pub pid: Option<u32>,
    /// When it was elected (Redis server clock), when known.
    pub since: Option<SystemTime>,
    /// Its fencing token: every later leader's is higher.
    pub fencing_token: u64,
    /// Time left unless it renews; `None` without an expiry.
    pub remaining_ttl: Option<Duration>,
}

impl Leader {
    fn from_info(info: LockInfo) -> Option<Leader> {
        info.owned.then(|| Leader {
            value: info.metadata.unwrap_or_default(),
            host: info.host,
            pid: info.pid,
            since: info.acquired_at,
            fencing_token: info.fencing_token,
            remaining_ttl: info.remaining_ttl,
        })
    }
}

impl LockClient {
    /// Campaigns in `election` with `value` (the leader's address, say): waits until this
    /// process leads (as [`lock`](Self::lock) waits, up to the client's default wait), and
    /// returns the leadership, which the watchdog keeps until it is resigned or dropped.
    /// Others read `value` with [`leader`](Self::leader) and follow changes with
    /// [`observe`](Self::observe).
    ///
    /// # Errors
    ///
    /// As [`acquire_with`](Self::acquire_with): [`Error::Timeout`] when the wait ran out,
    /// [`Error::InvalidInput`] for a bad name or a value over [`MAX_METADATA_LEN`] bytes.
    pub fn campaign(&self, election: &str, value: &str) -> Result<Leadership> {
        self.campaign_with(election, value, &LockOptions::new())
    }

    /// [`campaign`](Self::campaign) with options: `wait`, `cancel`, `ttl` (how soon a dead
    /// leader is replaced), `on_lost` (told when the leadership is lost), ... Their
    /// `metadata` is replaced by `value`.
    ///
    /// # Errors
    ///
    /// As [`campaign`](Self::campaign).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn main() -> redis_lock::Result<()> {
    /// # let locks = redis_lock::LockClient::open("redis://127.0.0.1/")?;
    /// use std::time::Duration;
    /// let opts = redis_lock::LockOptions::new()
    ///     .ttl(Duration::from_secs(2)) // a dead leader is replaced within about 2 s
    ///     .on_lost(|e| eprintln!("no longer the leader: {:?}", e.reason));
    /// let leadership = locks.campaign_with("scheduler", "10.0.0.7:8080", &opts)?;
    /// # Ok(()) }
    /// ```
    pub fn campaign_with(
        &self,
        election: &str,
        value: &str,
        opts: &LockOptions,
    ) -> Result<Leadership> {
        let opts = opts.clone().metadata(value);
        let guard = self.acquire_with(election, &opts)?;
        // A leadership handed over by a resigning leader's release is the waiter's before its
        // holder information is written (at its first renewal): written now, so that whoever
        // asks who leads as soon as this returns reads the value. One round trip more for an
        // election, which is rare.
        if guard.lease.is_unclaimed() {
            guard.lease.proclaim(value)?;
        }
        Ok(Leadership { guard })
    }

    /// Who leads `election` now: `None` when nobody does.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidInput`] for a bad name; Redis and pool errors.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn main() -> redis_lock::Result<()> {
    /// # let locks = redis_lock::LockClient::open("redis://127.0.0.1/")?;
    /// if let Some(leader) = locks.leader("scheduler")? {
    ///     println!("{} leads (token {})", leader.value, leader.fencing_token);
    /// }
    /// # Ok(()) }
    /// ```
    pub fn leader(&self, election: &str) -> Result<Option<Leader>> {
        Ok(self.inspect(election)?.and_then(Leader::from_info))
    }
}

impl Leadership {
    /// Replaces the value others see, without giving the leadership up.
    ///
    /// # Errors
    ///
    /// [`Error::Lost`] when this process no longer leads (nothing is written);
    /// [`Error::InvalidInput`] for a value over [`MAX_METADATA_LEN`] bytes; Redis and pool
    /// errors. Under Redlock the value is replaced once a majority of the servers did.
    pub fn proclaim(&self, value: &str) -> Result<()> {
        self.guard.ensure_held()?;
        self.guard.set_metadata(value)
    }

    /// Whether this process still leads, as the client last learnt (free; within about a
    /// round trip of a loss where the server notifies).
    pub fn is_leader(&self) -> bool {
        !self.guard.is_lost()
    }

    /// `Ok` while this process leads (as [`is_leader`](Self::is_leader)), else
    /// [`Error::Lost`].
    ///
    /// # Errors
    ///
    /// [`Error::Lost`] once the leadership is lost.
    pub fn ensure_leader(&self) -> Result<()> {
        self.guard.ensure_held()
    }

    /// This leadership's fencing token: every later leader's is higher, so a resource that
    /// keeps the highest it saw refuses a former leader.
    pub fn fencing_token(&self) -> u64 {
        self.guard.fencing_token()
    }

    /// The lock behind it: to [`commit`](LockGuard::commit) under the leadership, or ask
    /// Redis ([`check_held`](LockGuard::check_held)).
    pub fn guard(&self) -> &LockGuard {
        &self.guard
    }

    /// Gives the leadership up now (another campaigner is elected at once).
    ///
    /// # Errors
    ///
    /// As [`LockGuard::release`].
    pub fn resign(self) -> Result<ReleaseOutcome> {
        self.guard.release()
    }
}
