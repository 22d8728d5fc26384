//! The semaphore to the layers above the deployment: the table's constructor, its `Lock`
//! rules, and what a semaphore needs beyond the seam: its refusal under Redlock, checking a
//! permit count, reading its permits, changing its limit. Its operations on one store are
//! `wire::semaphore`'s.

use std::sync::Arc;

use super::primitive::{Lock, Params};
use super::{Inner, Kind};
use crate::error::{Error, Result};
use crate::options::LockOptions;
use crate::store::Store;
use crate::wire::LockKeys;
use crate::wire::semaphore::{self as script, MAX_PERMITS, Permits, Semaphore};

/// A semaphore of `params.permits` (the table's constructor).
pub(crate) fn make(params: Params) -> Arc<dyn Lock> {
    Arc::new(Semaphore {
        permits: params.permits,
    })
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

    /// Its permits are shown by `Semaphore::inspect`, all of them.
    fn shown_as_lock(&self) -> bool {
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
        script::inspect(keys).on(&mut conn)
    }

    /// Stores a new limit; the previous one, `None` when none was stored.
    pub(crate) fn set_permits(&self, keys: &LockKeys, permits: u32) -> Result<Option<u32>> {
        validate_permits(permits)?;
        let mut conn = self.semaphore_store()?.conn()?;
        script::set_limit(keys, permits, self.config.default_ttl).on(&mut conn)
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
