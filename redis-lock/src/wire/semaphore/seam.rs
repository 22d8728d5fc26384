//! The expiring semaphore as a primitive of the seam (`wire/seam.rs`): each operation is the
//! request of its file in this folder. Of the seam's capabilities it has grants (a release
//! grants a freed permit to a waiter); not Redlock (each server would count its own permits).

use std::time::Duration;

use super::super::commit::Check;
use super::super::request::Request;
use super::super::seam::{Grants, Primitive};
use super::super::{
    Attempt, AttemptArgs, Broken, Claim, ClaimArgs, Holder, LockKeys, OwnedTtl, Release,
    ReleaseArgs, Renewal,
};

/// Permits of one name; `permits`: the limit stored if the name has none yet.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Semaphore {
    pub(crate) permits: u32,
}

impl Primitive for Semaphore {
    fn attempt(&self, args: &AttemptArgs<'_>) -> Request<Attempt> {
        super::acquire(args, self.permits)
    }

    fn renew(&self, keys: &LockKeys, token: &str, ttl: Duration) -> Request<Renewal> {
        super::renew(keys, token, ttl)
    }

    fn release(&self, args: &ReleaseArgs<'_>) -> Request<Release> {
        super::release(args)
    }

    fn owned_ttl(&self, keys: &LockKeys, token: &str) -> Request<OwnedTtl> {
        super::owned_ttl(keys, token)
    }

    fn commit_check(&self, keys: &LockKeys) -> Check {
        super::commit_check(keys)
    }

    fn transfer(&self, keys: &LockKeys, token: &str, fresh: &str) -> Request<OwnedTtl> {
        super::transfer(keys, token, fresh)
    }

    fn leave(&self, keys: &LockKeys, waiter: &str, grant: &str) -> Request<()> {
        super::leave(keys, waiter, grant)
    }

    /// One of the permits' holders, as a lock's holder (`inspect_permits` has them all).
    fn inspect(&self, keys: &LockKeys) -> Request<Option<Holder>> {
        super::inspect(keys).map(|permits| {
            permits.and_then(|p| {
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
            })
        })
    }

    fn force_release(&self, keys: &LockKeys, _grant: &str) -> Request<Broken> {
        super::force_release(keys)
    }

    fn wake_list(&self, keys: &LockKeys, waiter: &str, fair: bool) -> String {
        super::super::mutex::wake_list(keys, waiter, fair)
    }

    fn grants(&self) -> Option<&dyn Grants> {
        Some(self)
    }
}

impl Grants for Semaphore {
    fn claim(&self, args: &ClaimArgs<'_>) -> Request<Claim> {
        super::claim(args)
    }
}
