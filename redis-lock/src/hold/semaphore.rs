//! The semaphore's implementation of the primitive seam (each operation is the matching typed
//! call of `wire::semaphore`), and what a semaphore needs beyond the seam: checking a request
//! before anything is sent, reading its permits, changing its limit.

use std::time::Duration;

use redis::ConnectionLike;

use super::Inner;
use crate::deploy::seam::Primitive;
use crate::error::{Error, Result};
use crate::options::LockOptions;
use crate::wire::semaphore::{self as script, MAX_PERMITS, Permits};
use crate::wire::{
    Attempt, AttemptArgs, Broken, Claim, Form, Holder, LockKeys, OwnedTtl, Release, Renewal,
};

/// At most `permits` holders at once; `permits` is the limit stored if the name has none yet.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Semaphore {
    pub(crate) permits: u32,
}

impl Primitive for Semaphore {
    fn kind(&self) -> &'static str {
        "semaphore"
    }

    fn attempt(&self, con: &mut dyn ConnectionLike, args: &AttemptArgs<'_>) -> Result<Attempt> {
        script::acquire(con, args, self.permits)
    }

    fn claim(
        &self,
        con: &mut dyn ConnectionLike,
        keys: &LockKeys,
        grant: &str,
        ttl: Duration,
        holder: &str,
        meta: &str,
        _min_hold: Duration,
        registration: &str,
    ) -> Result<Claim> {
        // A minimum hold is refused for permits before anything is sent (`check`).
        script::claim(con, keys, grant, ttl, holder, meta, registration)
    }

    fn renew(
        &self,
        con: &mut dyn ConnectionLike,
        keys: &LockKeys,
        token: &str,
        ttl: Duration,
    ) -> Result<Renewal> {
        script::renew(con, keys, token, ttl)
    }

    fn release(
        &self,
        con: &mut dyn ConnectionLike,
        keys: &LockKeys,
        token: &str,
        _undo: bool,
        _cooldown: Duration,
        grant: &str,
        registration: &str,
        _form: Form<'_>,
    ) -> Result<Release> {
        // No minimum hold or cool-down for permits (`check`): every release gives up at once.
        script::release(con, keys, token, grant, registration)
    }

    fn owned_ttl(
        &self,
        con: &mut dyn ConnectionLike,
        keys: &LockKeys,
        token: &str,
    ) -> Result<OwnedTtl> {
        script::owned_ttl(con, keys, token)
    }

    fn leave(
        &self,
        con: &mut dyn ConnectionLike,
        keys: &LockKeys,
        waiter: &str,
        grant: &str,
    ) -> Result<()> {
        script::leave(con, keys, waiter, grant)
    }

    fn raise_fence(
        &self,
        _con: &mut dyn ConnectionLike,
        _keys: &LockKeys,
        _token: &str,
        _fence: u64,
    ) -> Result<bool> {
        // Only Redlock raises fences, and semaphores are refused under Redlock (`check`).
        Err(redlock_refused())
    }

    /// The permit that expires first stands for the semaphore (`Permits` says more).
    fn inspect(&self, con: &mut dyn ConnectionLike, keys: &LockKeys) -> Result<Option<Holder>> {
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

    fn force_release(
        &self,
        con: &mut dyn ConnectionLike,
        keys: &LockKeys,
        _grant: &str,
    ) -> Result<Broken> {
        script::force_release(con, keys)
    }

    /// Not under Redlock (`redlock_refused`): `check_semaphore` refuses it with its own
    /// reason before a `Semaphore` exists; this also covers a permit's lease handle.
    fn quorum_sound(&self) -> bool {
        false
    }

    fn refuse_cooldown(&self) -> Option<Error> {
        Some(cooldown_refused())
    }
}

fn redlock_refused() -> Error {
    Error::invalid(
        "semaphore",
        "semaphores are not available under Redlock: each server would count its own permits, \
         and two majorities can each see a different set of holders; use a single server, \
         Sentinel or Cluster",
    )
}

/// A permit is given back at once: no cool-down keeps it taken by nobody (in the options, and
/// in `LockGuard::release_after` through `Primitive::refuse_cooldown`).
fn cooldown_refused() -> Error {
    Error::invalid(
        "cooldown",
        "a cool-down is not available for semaphore permits: a permit is given back at once",
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
    /// Refuses what a semaphore cannot do, before anything is sent: Redlock, and the options
    /// that keep a released lock ownerless (they make no sense for one permit of many).
    pub(crate) fn check_semaphore(&self, opts: Option<&LockOptions>) -> Result<()> {
        if self.deployment.single().is_none() {
            return Err(redlock_refused());
        }
        let Some(opts) = opts else { return Ok(()) };
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
            return Err(cooldown_refused());
        }
        Ok(())
    }

    /// The semaphore's limit, permits and waiters; `None` when it was never used.
    pub(crate) fn permits(&self, keys: &LockKeys) -> Result<Option<Permits>> {
        let store = self.deployment.single().ok_or_else(redlock_refused)?;
        let mut conn = store.conn()?;
        script::inspect(&mut conn, keys)
    }

    /// Stores a new limit; the previous one, `None` when none was stored.
    pub(crate) fn set_permits(&self, keys: &LockKeys, permits: u32) -> Result<Option<u32>> {
        validate_permits(permits)?;
        let store = self.deployment.single().ok_or_else(redlock_refused)?;
        let mut conn = store.conn()?;
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
