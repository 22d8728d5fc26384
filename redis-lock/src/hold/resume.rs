//! Resuming a held lock from what a lease handle carries (name, owner token, fencing token,
//! TTL, and which primitive holds it): check with Redis that the token still owns the lock
//! (and, where the lock has one holder, that the fencing token is its), then hold it as a
//! lease like an acquired one (registry, watchdog).

use std::sync::Arc;
use std::time::{Duration, Instant};

use tracing::Span;

use super::Inner;
use super::acquire::start_lease;
use super::lease::{Lease, Start};
use super::observe::{self, Labels};
use crate::deploy::seam::Primitive;
use crate::error::{Error, LostReason, Result};
use crate::options::validate_ttl;
use crate::wire::OwnedTtl;
use crate::wire::token::new_ids;

impl Inner {
    /// The lease of `name` held through `primitive` under `token` (fencing token `fence`),
    /// renewed to `ttl` by a watchdog if `watchdog`. Sends only reads: the remaining TTL under
    /// the token, then, with `check_fence` (a primitive whose lock has one holder, so what
    /// `inspect` reports is the holder's), the holder, for the fencing token.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn resume(
        self: &Arc<Self>,
        primitive: &Arc<dyn Primitive>,
        name: &str,
        token: &str,
        fence: u64,
        ttl: Duration,
        watchdog: bool,
        check_fence: bool,
    ) -> Result<Arc<Lease>> {
        let keys = self.keys(name)?;
        self.check_quorum(primitive.as_ref(), "handle")?;
        validate_ttl(ttl).map_err(|e| match e {
            Error::InvalidInput { reason, .. } => Error::invalid("handle", reason),
            other => other,
        })?;
        let lost = |reason| Error::Lost {
            key: name.to_owned(),
            reason,
        };
        let sent = Instant::now();
        let left = match self.deployment.owned_ttl(primitive, &keys, token)? {
            OwnedTtl::Left(left) => left,
            // No expiry (not written by this library): renewals give it one.
            OwnedTtl::NoExpiry => ttl,
            OwnedTtl::Gone => return Err(lost(LostReason::Expired)),
            OwnedTtl::NotOurs => return Err(lost(LostReason::TakenOver)),
        };
        let holder = if check_fence {
            self.deployment.inspect(primitive, &keys)?
        } else {
            None
        };
        // A lock taken natively does not store its fencing token: inspect reports the
        // counter, which is at least the holder's.
        let fence_matches = !check_fence
            || holder.as_ref().is_some_and(|h| {
                h.fence == fence || (h.fence_is_counter && fence > 0 && fence <= h.fence)
            });
        if !fence_matches {
            return Err(Error::invalid(
                "handle",
                "its fencing token is not the lock's: the handle was altered",
            ));
        }
        let start = Start {
            token: token.to_owned(),
            fence,
            acquired: sent,
            sent,
            set_ttl: left,
            ttl,
            unclaimed: None,
            registration: String::new(),
            // A lock whose fence Redis does not store was taken natively (or turned hash).
            native: holder.as_ref().is_some_and(|h| h.fence_is_counter),
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
            primitive: primitive.kind(),
        };
        let lease = start_lease(
            self,
            primitive,
            name,
            keys,
            &labels,
            &Span::current(),
            start,
            watchdog,
        )?;
        tracing::debug!(target: "redis_lock", key = name, fence, "lock resumed from a handle");
        Ok(lease)
    }
}
