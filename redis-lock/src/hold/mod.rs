//! What happens to a held lock and to its waiters: the acquire loop and the handoff
//! (`acquire`), the lease (`lease`), the renewal threads (`watchdog`), the registry of held
//! locks and reentrancy (`registry`), the retry strategies (`retry`), which locks were found
//! busy lately (`busy`: they skip the native fast path), what is reported about
//! locks in spans and metrics (`observe`), what a primitive is to this layer (`primitive`),
//! and the table of primitives below: each kind, its word, and the module that implements
//! the seam for it. Never matches on the deployment: it asks `deploy::Deployment` and gets
//! one combined answer.

#[macro_use]
pub(crate) mod primitive;

pub(crate) mod acquire;
pub(crate) mod busy;
pub(crate) mod giveback;
pub(crate) mod lease;
pub(crate) mod multi;
pub(crate) mod mutex;
pub(crate) mod observe;
pub(crate) mod registry;
pub(crate) mod resume;
pub(crate) mod rwlock;
pub(crate) mod semaphore;
pub(crate) mod watchdog;

// The table from kind to primitive (see `primitives!`): the one place the client, lease
// handles and the attribute macro's support find a primitive by its kind. The last row is a
// primitive of the tests, whole in the module its row declares (`cargo fmt` does not reach a
// module declared in a macro: `.ci/run` checks its formatting by name).
primitives! {
    Mutex = "mutex" => mutex::make;
    Read = "read" => rwlock::read;
    Write = "write" => rwlock::write;
    Semaphore = "semaphore" / "permit" => semaphore::make;
    #[cfg(all(test, feature = "testing"))] Stash = "stash" => stash::Stash::make, mod stash;
}

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use crate::store::timer::Timer;

use crate::deploy::Deployment;
use crate::error::{Error, Result};
use crate::retry::RetryStrategy;
use crate::wire;
use primitive::Lock;

/// Settings resolved by the builder.
#[derive(Clone)]
pub(crate) struct Config {
    pub(crate) namespace: String,
    pub(crate) default_ttl: Duration,
    /// `None`: wait until the lock is free.
    pub(crate) default_wait: Option<Duration>,
    pub(crate) default_on_lost: Option<crate::options::LostCallback>,
    pub(crate) default_retry: RetryStrategy,
    pub(crate) watchdog: bool,
    /// Redis URL with the password replaced, for `Debug` and logs.
    pub(crate) redacted_url: String,
    /// Which deployment locks live on, as lease handles record it (`handle.rs`; no
    /// passwords).
    pub(crate) origin: String,
    /// The longest one request to the deployment can take before it fails (checkout,
    /// connect, reply; every server of a quorum in turn).
    pub(crate) call_bound: Duration,
}

/// What a client shares between its clones: the deployment, the settings, the registry of
/// held locks and the request counter.
pub(crate) struct Inner {
    /// Where locks live: one store, or a quorum of independent ones (Redlock).
    pub(crate) deployment: Deployment,
    pub(crate) config: Config,
    /// Locks held through this client, for `release_all`.
    pub(crate) registry: registry::Registry,
    /// Redis requests sent by this client (all clones and stores), counted by the stores.
    pub(crate) requests: Arc<AtomicU64>,
    /// `host \n pid \n`, the start of the holder information stored with each lock.
    pub(crate) holder: String,
    /// The client's housekeeping thread: reports a lease lost on time when a renewal is
    /// stuck (see `Lease::renew_now`).
    pub(crate) timer: Timer,
    /// Locks found busy lately: their attempts go straight to the script.
    pub(crate) busy: busy::BusyHints,
    /// Releases and undos not answered, sent again in the background (`giveback.rs`).
    pub(crate) givebacks: giveback::Givebacks,
}

impl std::fmt::Debug for Config {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Config")
            .field("namespace", &self.namespace)
            .field("default_ttl", &self.default_ttl)
            .field("default_wait", &self.default_wait)
            .field("url", &self.redacted_url)
            .finish_non_exhaustive()
    }
}

impl Inner {
    pub(crate) fn new(
        deployment: Deployment,
        config: Config,
        requests: Arc<AtomicU64>,
        host: &str,
        timer: Timer,
    ) -> Inner {
        Inner {
            deployment,
            registry: registry::Registry::default(),
            requests,
            holder: wire::holder_prefix(host, std::process::id()),
            timer,
            busy: busy::BusyHints::default(),
            givebacks: giveback::Givebacks::default(),
            config,
        }
    }

    /// The latest instant at which a lock taken or renewed with `ttl` by a request sent at
    /// `sent` can still be held: the TTL as Redis applies it (whole milliseconds), less the
    /// deployment's drift allowance. Never later than Redis's own expiry.
    pub(crate) fn valid_until(&self, sent: Instant, ttl: Duration) -> Instant {
        sent + self.deployment.validity(wire::whole_ms(ttl))
    }

    pub(crate) fn requests(&self) -> u64 {
        self.requests.load(Ordering::Relaxed)
    }

    pub(crate) fn keys(&self, name: &str) -> Result<wire::LockKeys> {
        wire::LockKeys::new(&self.config.namespace, name)
    }

    /// `InvalidInput` for a TTL this client's deployment cannot hold: under Redlock, one no
    /// longer than the clock-drift allowance (`quorum::check_ttl`). Nothing is sent.
    pub(crate) fn check_ttl(&self, ttl: Duration) -> Result<()> {
        if self.deployment.is_quorum() {
            crate::deploy::quorum::check_ttl(ttl, "ttl")?;
        }
        Ok(())
    }

    /// Who holds the lock of `keys`, whichever primitive's it is (see [`any_primitive`]).
    ///
    /// [`any_primitive`]: Self::any_primitive
    pub(crate) fn inspect_any(&self, keys: &wire::LockKeys) -> Result<Option<wire::Holder>> {
        self.any_primitive(keys, |p| self.deployment.inspect(p, keys))
    }

    /// Breaks the lock of `keys`, whichever primitive's it is (see `any_primitive`).
    pub(crate) fn force_release_any(&self, keys: &wire::LockKeys) -> Result<wire::Broken> {
        self.any_primitive(keys, |p| self.deployment.force_release(p, keys))
    }

    /// `op` with each primitive of the table shown as a lock (`Lock::shown_as_lock`) in turn,
    /// until one finds the lock key of its type: every primitive's scripts answer `WrongType`
    /// naming the lock key on another's, and touch nothing. So a primitive added to the table
    /// is found by `inspect`, `force_release` and `list` without a change here. The mutex
    /// comes first: most locks are mutexes, and a name nobody holds costs one request.
    fn any_primitive<T>(
        &self,
        keys: &wire::LockKeys,
        op: impl Fn(&dyn Lock) -> Result<T>,
    ) -> Result<T> {
        let mut tried = Vec::with_capacity(Kind::ALL.len());
        let mut last = None;
        for kind in Kind::ALL {
            let primitive = kind.make(primitive::Params::DEFAULT);
            // The two sides of a read-write lock read and break it alike: asked once.
            if !primitive.shown_as_lock() || tried.contains(&primitive.family()) {
                continue;
            }
            tried.push(primitive.family());
            match op(&*primitive) {
                Err(Error::WrongType { redis_key }) if redis_key == keys.lock => {
                    last = Some(redis_key);
                }
                other => return other,
            }
        }
        Err(Error::WrongType {
            redis_key: last.unwrap_or_else(|| keys.lock.clone()),
        })
    }

    /// `InvalidInput` (about `what`, the caller's argument) when `primitive` is not sound on
    /// this client's deployment: a Redlock quorum, for a primitive without the `Redlock`
    /// capability (`deploy::seam`). Nothing is sent.
    pub(crate) fn check_quorum(&self, primitive: &dyn Lock, what: &'static str) -> Result<()> {
        if primitive.redlock().is_some() || !self.deployment.is_quorum() {
            return Ok(());
        }
        Err(Error::invalid(
            what,
            format!(
                "{} locks are not available under Redlock; use a single server, Sentinel or \
                 Cluster",
                primitive.kind().word()
            ),
        ))
    }
}
