//! The semaphore's implementation of the primitive seam (each operation is the matching typed
//! call of `wire::semaphore`), and what a semaphore needs beyond the seam: its refusal under
//! Redlock, checking a permit count, reading its permits, changing its limit. Of the seam's
//! capabilities it has grants (a release grants a freed permit to a waiter); not Redlock.

use std::sync::Arc;
use std::time::Duration;

use super::primitive::{Lock, Params};
use super::{Inner, Kind};
use crate::deploy::seam::{Grants, Primitive};
use crate::error::{Error, Result};
use crate::options::LockOptions;
use crate::store::Store;
use crate::wire::Con;
use crate::wire::commit::Check;
use crate::wire::semaphore::{self as script, MAX_PERMITS, Permits};
use crate::wire::{
    Attempt, AttemptArgs, Broken, Claim, ClaimArgs, Holder, LockKeys, OwnedTtl, Release,
    ReleaseArgs, Renewal,
};

/// At most `permits` holders at once; `permits` is the limit stored if the name has none yet.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Semaphore {
    pub(crate) permits: u32,
}

impl Semaphore {
    /// The table's constructor. A resumed permit's `permits` do not matter: the limit is only
    /// stored by an acquisition, and a resumed permit never attempts.
    pub(crate) fn make(params: Params) -> Arc<dyn Lock> {
        Arc::new(Semaphore {
            permits: params.permits,
        })
    }
}

impl Primitive for Semaphore {
    fn attempt(&self, con: &mut Con<'_>, args: &AttemptArgs<'_>) -> Result<Attempt> {
        script::acquire(con, args, self.permits)
    }

    fn renew(
        &self,
        con: &mut Con<'_>,
        keys: &LockKeys,
        token: &str,
        ttl: Duration,
    ) -> Result<Renewal> {
        script::renew(con, keys, token, ttl)
    }

    fn release(&self, con: &mut Con<'_>, args: &ReleaseArgs<'_>) -> Result<Release> {
        script::release(con, args)
    }

    fn owned_ttl(&self, con: &mut Con<'_>, keys: &LockKeys, token: &str) -> Result<OwnedTtl> {
        script::owned_ttl(con, keys, token)
    }

    fn commit_check(&self, keys: &LockKeys) -> Check {
        script::commit_check(keys)
    }

    fn transfer(
        &self,
        con: &mut Con<'_>,
        keys: &LockKeys,
        token: &str,
        fresh: &str,
    ) -> Result<OwnedTtl> {
        script::transfer(con, keys, token, fresh)
    }

    fn leave(&self, con: &mut Con<'_>, keys: &LockKeys, waiter: &str, grant: &str) -> Result<()> {
        script::leave(con, keys, waiter, grant)
    }

    /// The permit that expires first stands for the semaphore (`Permits` says more).
    fn inspect(&self, con: &mut Con<'_>, keys: &LockKeys) -> Result<Option<Holder>> {
        Ok(script::inspect(con, keys)?.and_then(|p| {
            let (waiters, queued) = (p.waiters, p.queued);
            p.holders.into_iter().next().map(|h| Holder {
                remaining_ttl: Some(h.remaining_ttl),
                owned: !h.host.is_empty(),
                host: h.host,
                pid: h.pid,
                since_ms: h.since_ms,
                fence: h.fence,
                meta: h.meta,
                hold_until_ms: None,
                cool_until_ms: None,
                waiters,
                queued,
                queue_head: None,
                rw: None,
                fence_is_counter: false,
            })
        }))
    }

    fn force_release(&self, con: &mut Con<'_>, keys: &LockKeys, _grant: &str) -> Result<Broken> {
        script::force_release(con, keys)
    }

    /// The mutex's wake-up lists: the shared one, or a fair waiter's own.
    fn wake_list(&self, keys: &LockKeys, waiter: &str, fair: bool) -> String {
        crate::wire::mutex::wake_list(keys, waiter, fair)
    }

    fn grants(&self) -> Option<&dyn Grants> {
        Some(self)
    }

    // No `redlock`: each server would count its own permits (`redlock_refused`).
}

impl Grants for Semaphore {
    fn claim(&self, con: &mut Con<'_>, args: &ClaimArgs<'_>) -> Result<Claim> {
        script::claim(con, args)
    }
}

impl Lock for Semaphore {
    fn kind(&self) -> Kind {
        Kind::Semaphore
    }

    /// No read or write mode, and nothing that keeps a released permit taken by nobody (it
    /// makes no sense for one permit of many): no minimum hold, no cool-down.
    fn check(&self, opts: &LockOptions, _fair: bool) -> Result<()> {
        if opts.mode.is_some() {
            return Err(Error::invalid(
                "mode",
                "a semaphore's permits have no read or write mode",
            ));
        }
        if !opts.hold_at_least.is_zero() {
            return Err(Error::invalid(
                "hold_at_least",
                "a minimum hold is not available for semaphore permits",
            ));
        }
        if opts.cooldown.is_some_and(|c| !c.is_zero()) {
            return Err(Error::invalid(
                "cooldown",
                "a cool-down is not available for semaphore permits: a permit is given back at \
                 once",
            ));
        }
        Ok(())
    }

    /// Permits are many: `inspect` shows one of them.
    fn holder_fence(&self) -> bool {
        false
    }
}

/// A semaphore under Redlock, refused when it is made (`LockClient::semaphore`): each server
/// would count its own permits.
pub(crate) fn redlock_refused() -> Error {
    Error::invalid(
        "semaphore",
        "semaphores are not available under Redlock: each server would count its own permits, \
         and two majorities can each see a different set of holders; use a single server, \
         Sentinel or Cluster",
    )
}

/// A permit count is between 1 and [`MAX_PERMITS`].
pub(crate) fn validate_permits(permits: u32) -> Result<()> {
    if permits == 0 {
        return Err(Error::invalid(
            "permits",
            "a semaphore needs at least one permit",
        ));
    }
    if permits > MAX_PERMITS {
        return Err(Error::invalid(
            "permits",
            format!("{permits} permits; the limit is {MAX_PERMITS}"),
        ));
    }
    Ok(())
}

impl Inner {
    /// The one store a semaphore lives on: `Err` under Redlock (`redlock_refused`).
    pub(crate) fn semaphore_store(&self) -> Result<&Store> {
        self.deployment.single().ok_or_else(redlock_refused)
    }

    /// The semaphore's limit, permits and waiters; `None` when it was never used.
    pub(crate) fn permits(&self, keys: &LockKeys) -> Result<Option<Permits>> {
        let mut conn = self.semaphore_store()?.conn()?;
        script::inspect(&mut conn, keys)
    }

    /// Stores a new limit; the previous one, `None` when none was stored.
    pub(crate) fn set_permits(&self, keys: &LockKeys, permits: u32) -> Result<Option<u32>> {
        validate_permits(permits)?;
        let mut conn = self.semaphore_store()?.conn()?;
        script::set_limit(&mut conn, keys, permits, self.config.default_ttl)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn permit_counts_are_bounded() {
        assert!(matches!(
            validate_permits(0),
            Err(Error::InvalidInput {
                what: "permits",
                ..
            })
        ));
        assert!(validate_permits(1).is_ok());
        assert!(validate_permits(MAX_PERMITS).is_ok());
        assert!(validate_permits(MAX_PERMITS + 1).is_err());
        assert!(validate_permits(u32::MAX).is_err());
    }
}
