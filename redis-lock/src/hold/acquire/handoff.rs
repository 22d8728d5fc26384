//! The client side of the handoff: a registered waiter blocks in its waiting group, and a
//! grant it pops is adopted (its watchdog claims it later) or claimed at once, or passed on to
//! the next waiter when it will not be used.

use std::sync::Arc;
use std::time::{Duration, Instant};

use super::{Acquisition, Deadline};
use crate::error::Result;
use crate::hold::lease::{Lease, Start};
use crate::hold::observe::{self};
use crate::store::{FAILED_WAIT_PAUSE, Wake};
use crate::wire::{Claim, ClaimArgs, Form, Grant, HANDOFF_GRACE, ReleaseArgs};

/// What a registered waiter remembers of its latest registration, to judge a grant it pops.
#[derive(Debug, Clone, Copy)]
pub(super) struct Registration {
    /// When the registering attempt was sent: any grant made later expires no earlier than
    /// this plus the handoff grace.
    pub(super) sent: Instant,
    pub(super) fresh: bool,
    /// Server time of the registration, Unix ms: a grant stamped at or after it was made
    /// after the registration.
    pub(super) server_ms: u64,
}

/// What a grant we popped is worth.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum GrantUse {
    /// Ours on our own estimate of its life: no round trip; the watchdog claims it.
    Adopt,
    /// Claim it now (one round trip): it may predate our registration, or we need our
    /// holder information, minimum hold or replica acknowledgement in place at once.
    Claim,
}

/// How to use a grant popped at `now`, given the registration that made us a waiter: adopt
/// it only if the registration vouches that it was made afterwards (so it lives at least until
/// the registration was sent plus the grace) and there is time left in the first half of the
/// grace for the watchdog to claim it.
pub(crate) fn grant_use(
    grant_server_ms: u64,
    registration: Option<(Instant, bool, u64)>,
    now: Instant,
    needs_claim: bool,
) -> GrantUse {
    let vouched = registration.is_some_and(|(sent, fresh, server_ms)| {
        fresh && grant_server_ms >= server_ms && now.duration_since(sent) < HANDOFF_GRACE / 2
    });
    if vouched && !needs_claim {
        GrantUse::Adopt
    } else {
        GrantUse::Claim
    }
}

impl Acquisition<'_> {
    /// Gives a grant we popped but will not use to the next waiter (the release's handoff),
    /// and forgets our registration.
    pub(super) fn pass_on(&self, grant: &Grant) {
        let registration = if self.fair { "" } else { &self.ids.waiter };
        let passed = self.inner.deployment.release(
            &**self.primitive,
            &ReleaseArgs {
                keys: &self.keys,
                token: &grant.token,
                grant: &self.ids.grant,
                registration,
                cooldown: Duration::ZERO,
                undo: true,
                // A grant is a hash.
                form: Form::Hash,
                routed: false,
            },
        );
        if let Err(error) = passed {
            tracing::warn!(target: "redis_lock", key = self.name, %error, "could not pass on a grant of a cancelled acquisition; it lapses after the handoff grace");
        }
    }

    /// Blocks until a release pushes a grant to the wake-up list, a cancel wakes us, or
    /// `timeout` passes.
    pub(super) fn wait(
        &self,
        list: &str,
        timeout: Duration,
        wait_on: Option<usize>,
        cancelled: Option<&dyn Fn() -> bool>,
    ) -> Option<Grant> {
        let (keys, waiter) = (&self.keys, &self.ids.waiter);
        match (self.inner.deployment).wait(keys, list, waiter, timeout, wait_on, cancelled) {
            Wake::Grant(grant) => Some(grant),
            Wake::Nothing => None,
            Wake::Failed => {
                // Do not spin against a Redis that fails at once.
                self.sleep(timeout.min(FAILED_WAIT_PAUSE));
                None
            }
        }
    }

    /// A release granted us the lock through the wake-up list: adopt the grant, or claim it.
    /// `Ok(None)` when somebody took the grant first (it had lapsed), or when this primitive
    /// makes no grants (it has no `Grants`: what its releases push only says "look again"):
    /// keep waiting.
    pub(super) fn take_grant(
        &self,
        grant: Grant,
        registration: Option<Registration>,
        deadline: &Deadline,
    ) -> Result<Option<Arc<Lease>>> {
        if self.primitive.grants().is_none() {
            return Ok(None);
        }
        // Fair waiters left the registry with the grant; a non-fair registration is removed by
        // the claim or the release.
        let leftover = if self.fair {
            String::new()
        } else {
            self.ids.waiter.clone()
        };
        let now = Instant::now();
        // A TTL shorter than the grace is claimed at once too: an adopted grant lives for the
        // grace, and a holder that died at once would leave it taken that long, not its TTL.
        let needs_claim = !self.watchdog
            || self.member
            || !self.opts.hold_at_least.is_zero()
            || self.ack.is_some()
            || self.ttl < HANDOFF_GRACE;
        let reg = registration.map(|r| (r.sent, r.fresh, r.server_ms));
        if let (GrantUse::Adopt, Some(r)) = (
            grant_use(grant.server_ms, reg, now, needs_claim),
            registration,
        ) {
            // Ours without another round trip. The watchdog claims it (holder information,
            // full TTL) at its first renewal.
            let lease = self.hold(Start {
                token: grant.token,
                fence: grant.fence,
                acquired: now,
                sent: r.sent,
                set_ttl: HANDOFF_GRACE,
                ttl: self.ttl,
                unclaimed: Some(self.meta().to_owned()),
                registration: leftover,
                native: false,
                value: None,
                grant: self.ids.grant.clone(),
                max_hold: self.opts.max_hold,
                cooldown: self.opts.cooldown.unwrap_or_default(),
                on_lost: self.on_lost(),
                ack: self.ack,
            })?;
            observe::handoff(self.report.labels);
            tracing::debug!(target: "redis_lock", key = self.name, fence = grant.fence, waited = ?deadline.started.elapsed(), "lock handed over");
            return Ok(Some(lease));
        }
        let sent = Instant::now();
        let claimed = self.inner.deployment.claim(
            &**self.primitive,
            &ClaimArgs {
                keys: &self.keys,
                grant: &grant.token,
                ttl: self.ttl,
                holder: &self.inner.holder,
                meta: self.meta(),
                min_hold: self.opts.hold_at_least,
                registration: &leftover,
            },
            self.ack,
        )?;
        let Some(Claim::Claimed { fence }) = claimed else {
            return Ok(None);
        };
        let lease = self.hold(self.taken(grant.token, fence, sent, None))?;
        observe::handoff(self.report.labels);
        tracing::debug!(target: "redis_lock", key = self.name, fence, waited = ?deadline.started.elapsed(), "lock handed over and claimed");
        Ok(Some(lease))
    }
}
