//! Resuming a held lock from what a lease handle carries (name, owner token, fencing token,
//! TTL, and which primitive holds it): check with Redis that the token still owns the lock
//! (and, where the lock has one holder, that the fencing token is its), then hold it as a
//! lease like an acquired one (registry, watchdog).

use std::cell::Cell;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tracing::Span;

use super::Inner;
use super::acquire::{Report, start_lease};
use super::lease::{Lease, Start};
use super::observe::{self, Labels};
use super::primitive::Lock;
use crate::error::{Error, LostReason, Result};
use crate::options::validate_ttl;
use crate::wire::token::new_ids;
use crate::wire::{LockKeys, OwnedTtl};

/// What a lease handle says about the lock it stands for.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Resumed<'a> {
    pub(crate) name: &'a str,
    pub(crate) token: &'a str,
    pub(crate) fence: u64,
    /// The TTL renewals extend to.
    pub(crate) ttl: Duration,
    /// Renewed by a watchdog.
    pub(crate) watchdog: bool,
    /// Resumed at most once (a handle given up by `into_handle`): the lock moves to a fresh
    /// owner token, so a second resume of the same handle finds it no longer under `token`.
    pub(crate) once: bool,
}

impl Inner {
    /// The lease of `r.name` held through `primitive` under `r.token` (fencing token
    /// `r.fence`). Reads first: the remaining TTL under the token, then, for a primitive
    /// whose lock has one holder (`Lock::holder_fence`, so what `inspect` reports is the
    /// holder's), the holder, for the fencing token. A handle resumed once (`r.once`) then
    /// moves the lock to a fresh owner token (`Deployment::transfer`, one script per store,
    /// atomic), which the lease holds it under: of two resumes of one such handle, one moves
    /// it and the other finds it gone from under the handle's token (`Error::HandleSpent`).
    pub(crate) fn resume(
        self: &Arc<Self>,
        primitive: &Arc<dyn Lock>,
        r: &Resumed<'_>,
    ) -> Result<Arc<Lease>> {
        let keys = self.keys(r.name)?;
        self.check_quorum(primitive.as_ref(), "handle")?;
        validate_ttl(r.ttl).map_err(|e| match e {
            Error::InvalidInput { reason, .. } => Error::invalid("handle", reason),
            other => other,
        })?;
        let spent = |e: Error| match e {
            Error::Lost { key, .. } if r.once => Error::HandleSpent { key },
            e => e,
        };
        let sent = Instant::now();
        let (left, native) = self
            .still_ours(primitive.as_ref(), &keys, r)
            .map_err(spent)?;
        let (token, left) = if r.once {
            let fresh = new_ids()?.token;
            let left = match self
                .deployment
                .transfer(primitive.as_ref(), &keys, r.token, &fresh)?
            {
                OwnedTtl::Left(left) => left,
                OwnedTtl::NoExpiry => r.ttl,
                OwnedTtl::Gone | OwnedTtl::NotOurs => {
                    return Err(Error::HandleSpent {
                        key: r.name.to_owned(),
                    });
                }
            };
            (fresh, left)
        } else {
            (r.token.to_owned(), left)
        };
        let start = Start {
            token,
            fence: r.fence,
            acquired: sent,
            sent,
            set_ttl: left,
            ttl: r.ttl,
            unclaimed: None,
            registration: String::new(),
            native,
            // A handle carries the token, not the whole value: released by the script.
            value: None,
            grant: new_ids()?.grant,
            max_hold: None,
            cooldown: Duration::ZERO,
            on_lost: self.config.default_on_lost.clone(),
            // A handle does not carry the acquisition's options.
            ack: None,
        };
        let labels = Labels {
            label: std::borrow::Cow::Borrowed(observe::OTHER),
            primitive: primitive.kind().word(),
        };
        let report = Report {
            labels: &labels,
            parent: &Span::current(),
            attempts: &Cell::new(0),
        };
        let lease = start_lease(self, primitive, r.name, keys, report, start, r.watchdog)?;
        tracing::debug!(target: "redis_lock", key = r.name, fence = r.fence, "lock resumed from a handle");
        Ok(lease)
    }

    /// Whether the handle's token still owns the lock and, for a lock of one holder, its
    /// fencing token is the lock's: the TTL it has left, and whether it was taken natively
    /// (a lock whose fence Redis does not store: the release then reads the string first).
    fn still_ours(
        &self,
        primitive: &dyn Lock,
        keys: &LockKeys,
        r: &Resumed<'_>,
    ) -> Result<(Duration, bool)> {
        let lost = |reason| Error::Lost {
            key: r.name.to_owned(),
            reason,
        };
        let left = match self.deployment.owned_ttl(primitive, keys, r.token)? {
            OwnedTtl::Left(left) => left,
            // No expiry (not written by this library): renewals give it one.
            OwnedTtl::NoExpiry => r.ttl,
            OwnedTtl::Gone => return Err(lost(LostReason::Expired)),
            OwnedTtl::NotOurs => return Err(lost(LostReason::TakenOver)),
        };
        let check_fence = primitive.holder_fence();
        let holder = if check_fence {
            self.deployment.inspect(primitive, keys)?
        } else {
            None
        };
        // A lock taken natively does not store its fencing token: inspect reports the
        // counter, which is at least the holder's.
        let fence_matches = !check_fence
            || holder.as_ref().is_some_and(|h| {
                h.fence == r.fence || (h.fence_is_counter && r.fence > 0 && r.fence <= h.fence)
            });
        if !fence_matches {
            return Err(Error::invalid(
                "handle",
                "its fencing token is not the lock's: the handle was altered",
            ));
        }
        Ok((left, holder.is_some_and(|h| h.fence_is_counter)))
    }
}
