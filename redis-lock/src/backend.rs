//! Where locks live: one store, or a quorum of independent stores (Redlock).
//!
//! A *store* is one Redis deployment that holds the whole truth about a lock: a single
//! server, a sentinel-managed master, or a Redis Cluster (the lock's slot lives on one master
//! there). The operations in `ops.rs` each talk to one store (`*_on`); the functions here
//! pick the store, or hand the call to the quorum, so guards, the watchdog, the macro and the
//! CLI see one interface.

use std::time::Duration;

use crate::connection::{Manager, Pool};
use crate::error::{Error, Result};
use crate::info::LockInfo;
use crate::keys::LockKeys;
use crate::lease::{Lease, ReleaseOutcome};
use crate::ops::{Inner, OwnedTtl, Renewal};
use crate::quorum::Quorum;

/// One Redis deployment: the pool lock operations use, and the pool waiters block on.
pub(crate) struct Store {
    pub(crate) pool: Pool,
    /// Waiters block in `BLPOP` on connections of their own, so that a crowd of waiters can
    /// never take the connections holders need to renew and release.
    pub(crate) waiters: r2d2::Pool<Manager>,
    /// The store's address without credentials, for errors and logs.
    pub(crate) label: String,
    /// The last failed connect of either pool (see `connection::LastConnectError`).
    pub(crate) connect_error: crate::connection::LastConnectError,
}

impl std::fmt::Debug for Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Store")
            .field("at", &self.label)
            .field("pool", &self.pool)
            .finish_non_exhaustive()
    }
}

#[derive(Debug)]
pub(crate) enum Backend {
    Single(Store),
    Quorum(Quorum),
}

impl Inner {
    /// How long a lock taken or renewed with `ttl` is safe to rely on, measured from just
    /// before the request was sent. One store: the TTL. A quorum: the TTL minus the clock
    /// drift allowance, since each server's clock times the key on its own.
    pub(crate) fn validity(&self, ttl: Duration) -> Duration {
        match &self.backend {
            Backend::Single(_) => ttl,
            Backend::Quorum(_) => ttl.saturating_sub(crate::quorum::drift(ttl)),
        }
    }

    pub(crate) fn renew(&self, keys: &LockKeys, token: &str, ttl: Duration) -> Result<Renewal> {
        match &self.backend {
            Backend::Single(store) => self.renew_on(store, keys, token, ttl),
            Backend::Quorum(q) => q.renew(self, keys, token, ttl),
        }
    }

    /// Gives the lock up, handing it over to a waiter under the token `grant` where one is
    /// registered; `registration` is our own leftover waiter id to forget (or "").
    pub(crate) fn release(
        &self,
        keys: &LockKeys,
        token: &str,
        grant: &str,
        registration: &str,
    ) -> Result<ReleaseOutcome> {
        match &self.backend {
            Backend::Single(store) => self.release_on(store, keys, token, grant, registration),
            Backend::Quorum(q) => q.release(self, keys, token, grant, registration),
        }
    }

    /// Remaining TTL of a lock we hold: `Ok(None)` when it has no expiry, `Err(Lost)` when it
    /// is not ours any more (the lease is then marked lost).
    pub(crate) fn owned_ttl(&self, lease: &Lease) -> Result<Option<Duration>> {
        let seen = match &self.backend {
            Backend::Single(store) => self.owned_ttl_on(store, &lease.keys, &lease.token)?,
            Backend::Quorum(q) => q.owned_ttl(self, &lease.keys, &lease.token)?,
        };
        let reason = match seen {
            OwnedTtl::Left(ttl) => return Ok(Some(ttl)),
            OwnedTtl::NoExpiry => return Ok(None),
            OwnedTtl::Gone => crate::LostReason::Expired,
            OwnedTtl::NotOurs => crate::LostReason::TakenOver,
        };
        lease.mark_lost(reason);
        Err(Error::Lost {
            key: lease.name.clone(),
            reason,
        })
    }

    pub(crate) fn inspect(&self, name: &str) -> Result<Option<LockInfo>> {
        let keys = LockKeys::new(&self.config.namespace, name)?;
        match &self.backend {
            Backend::Single(store) => self.inspect_on(store, name, &keys),
            Backend::Quorum(q) => q.inspect(self, name, &keys),
        }
    }

    pub(crate) fn force_release(&self, name: &str) -> Result<Option<(String, u32)>> {
        let keys = LockKeys::new(&self.config.namespace, name)?;
        match &self.backend {
            Backend::Single(store) => self.force_release_on(store, &keys),
            Backend::Quorum(q) => q.force_release(self, name, &keys),
        }
    }

    /// `PING`: one store must answer; a quorum, a majority of its servers.
    pub(crate) fn ping(&self) -> Result<()> {
        match &self.backend {
            Backend::Single(store) => {
                let mut conn = self.conn(store)?;
                redis::cmd("PING").query::<()>(conn.con())?;
                Ok(())
            }
            Backend::Quorum(q) => q.ping(self),
        }
    }

    /// The stores, for `Debug`.
    pub(crate) fn stores(&self) -> Vec<&Store> {
        match &self.backend {
            Backend::Single(store) => vec![store],
            Backend::Quorum(q) => q.stores().collect(),
        }
    }
}
