//! The acquire loop and the client side of the handoff, for any primitive.
//!
//! One mechanism, in one place (the Redis side is the primitive's scripts: for the mutex,
//! `ACQUIRE`, `CLAIM`, `LEAVE` and the `hand_over` part of `RELEASE` in `wire::mutex`;
//! ARCHITECTURE.md explains the design):
//!
//! 1. An attempt that finds the lock busy registers the caller as a waiter, if it will wait,
//!    and says how long it may block (`block`) and whether its registration can vouch for a
//!    later grant (`fresh`, server time).
//! 2. The waiter blocks on a wake-up list (the shared one, or its own in fair mode), for at
//!    most `block` and its remaining budget, in the group of this client's threads waiting
//!    on the same lock, which share one blocking connection (`store::waiting`).
//! 3. A release that sees live waiters grants the lock through that list to exactly one
//!    waiter: the one that pops it. The popper adopts the grant (no round trip; its watchdog
//!    claims it later) or claims it at once (`take_grant`).
//! 4. A waiter whose budget runs out leaves, passing on a grant made for it.

use std::sync::Arc;
use std::time::{Duration, Instant};

mod entry;
mod handoff;

pub(crate) use entry::{Report, observed};
use handoff::Registration;

use crate::cancel::CancelToken;
use crate::deploy::Attempted;
use crate::error::{Error, HolderInfo, Result};
use crate::hold::lease::{Lease, Start};
use crate::hold::observe::{self, Hold};
use crate::hold::primitive::Lock;
use crate::hold::{Inner, giveback, registry, watchdog};
use crate::options::LockOptions;
use crate::retry::{RetryStrategy, Step};
use crate::store::Ack;
use crate::wire::token::Ids;
use crate::wire::token::random_below;
use crate::wire::{Attempt, AttemptArgs, BusyHolder, LockKeys};

/// Longest single wait of a fair waiter: it checks in at least this often, so a dead one is
/// noticed within `FAIR_CHECK_IN + WAITER_MARGIN`.
pub(crate) const FAIR_CHECK_IN: Duration = Duration::from_secs(2);

/// When the acquire loop gives up, and when it started.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Deadline {
    pub(crate) at: Instant,
    pub(crate) started: Instant,
}

/// How far away "wait until free" puts the deadline: further than any wait reaches (the
/// acquire loop bounds each wait by the holder's TTL, and registrations by `MAX_TTL`).
const UNTIL_FREE: Duration = Duration::from_secs(100 * 365 * 24 * 3600);

impl Deadline {
    /// From now, waiting up to `wait`, or until free with `None`: what every acquisition
    /// with options computes (`wait`, else the client's `default_wait`).
    pub(crate) fn after(wait: Option<Duration>) -> Result<Deadline> {
        let started = Instant::now();
        let at = match wait {
            Some(wait) => started
                .checked_add(wait)
                .ok_or_else(|| Error::invalid("wait", format!("{wait:?} overflows the clock")))?,
            None => started + UNTIL_FREE,
        };
        Ok(Deadline { at, started })
    }

    /// The wait budget, `None` when it waits until free.
    pub(crate) fn budget(&self) -> Option<Duration> {
        let budget = self.at.saturating_duration_since(self.started);
        (budget < UNTIL_FREE).then_some(budget)
    }
}

/// What an acquisition came to when it did not fail: the lock, or busy to the end.
#[derive(Debug)]
pub(crate) enum Taken<T> {
    Acquired(T),
    /// Busy until the deadline (or the retry strategy gave up), with the holder as the last
    /// attempt's busy answer described it (`None`: it named nobody), so that a busy or timeout
    /// error needs no further request.
    Busy(Option<HolderInfo>),
}

impl<T> Taken<T> {
    /// The lock, `None` when busy (the `try_` family's answer).
    pub(crate) fn acquired(self) -> Option<T> {
        match self {
            Taken::Acquired(t) => Some(t),
            Taken::Busy(_) => None,
        }
    }

    pub(crate) fn map<U>(self, f: impl FnOnce(T) -> U) -> Taken<U> {
        match self {
            Taken::Acquired(t) => Taken::Acquired(f(t)),
            Taken::Busy(holder) => Taken::Busy(holder),
        }
    }
}

/// The holder a busy answer described, as a busy or timeout error carries it.
pub(crate) fn holder_info(holder: Option<Box<BusyHolder>>) -> Option<HolderInfo> {
    holder.map(|h| {
        let BusyHolder { info, ttl } = *h;
        HolderInfo::stored(info.host, info.pid, info.since_ms, info.meta, ttl)
    })
}

/// One acquisition: what it asked for, and who it is.
struct Acquisition<'a> {
    inner: &'a Arc<Inner>,
    primitive: &'a Arc<dyn Lock>,
    name: &'a str,
    keys: LockKeys,
    opts: &'a LockOptions,
    ttl: Duration,
    ack: Option<Ack>,
    watchdog: bool,
    ids: Ids,
    fair: bool,
    report: Report<'a>,
    /// A multi-lock's member taken alone (`Inner::acquire_member`): no native fast path, no
    /// adopted grant.
    member: bool,
}

pub(super) fn cancelled(name: &str) -> Error {
    Error::Cancelled {
        key: name.to_owned(),
    }
}

/// What one attempt of the loop came to.
enum Tried {
    Acquired(Arc<Lease>),
    Busy {
        holder_ttl: Option<Duration>,
        block: Option<Duration>,
        /// Where a quorum saw the holder (see `Attempted::wait_on`).
        wait_on: Option<usize>,
        /// Who holds it, as the answer said.
        holder: Option<Box<BusyHolder>>,
    },
}

impl Acquisition<'_> {
    /// The acquisition's own loss callback, else the client's.
    fn on_lost(&self) -> Option<crate::options::LostCallback> {
        self.opts
            .on_lost
            .clone()
            .or_else(|| self.inner.config.default_on_lost.clone())
    }

    fn meta(&self) -> &str {
        self.opts.metadata.as_deref().unwrap_or("")
    }

    fn leave(&self) {
        self.inner
            .deployment
            .leave(&**self.primitive, &self.keys, &self.ids.waiter);
    }

    fn run(self, retry: &RetryStrategy, deadline: &Deadline) -> Result<Taken<Arc<Lease>>> {
        let wake = self
            .primitive
            .wake_list(&self.keys, &self.ids.waiter, self.fair);
        let mut registration: Option<Registration> = None;
        let mut attempt = 0u32;
        // Counts this thread as waiting from its first wait on.
        let mut waiting = None;
        // Registered before the flag is looked at (see `cancel`): a cancel from now on either
        // is seen below or ends the wait it lands in.
        let cancel = self.opts.cancel.as_ref();
        let _waker = self.wake_on_cancel();
        let is_cancelled = || cancel.is_some_and(CancelToken::is_cancelled);
        loop {
            if is_cancelled() {
                if registration.is_some() {
                    self.leave();
                }
                tracing::debug!(target: "redis_lock", key = self.name, "acquisition cancelled");
                return Err(cancelled(self.name));
            }
            attempt += 1;
            self.report.attempts.set(attempt);
            let (holder_ttl, block, wait_on, holder) =
                match self.attempt_once(retry, deadline, attempt, &mut registration)? {
                    Tried::Acquired(lease) => return Ok(Taken::Acquired(lease)),
                    Tried::Busy {
                        holder_ttl,
                        block,
                        wait_on,
                        holder,
                    } => (holder_ttl, block, wait_on, holder),
                };
            let left = deadline.at.saturating_duration_since(Instant::now());
            let step = retry.next(attempt, left, holder_ttl, block, random_below);
            if step != Step::Stop && waiting.is_none() {
                waiting = Some(observe::Waiting::start(self.report.labels));
            }
            let popped = match step {
                Step::Stop => {
                    if registration.is_some() {
                        self.leave();
                    }
                    // The last attempt's answer names the holder: nothing more is asked.
                    return Ok(Taken::Busy(holder_info(holder)));
                }
                Step::Sleep(d) => {
                    self.sleep(d);
                    None
                }
                Step::WaitSignal(d) => {
                    let cancel = cancel.map(|_| &is_cancelled as &dyn Fn() -> bool);
                    self.wait(&wake, d, wait_on, cancel)
                }
            };
            let Some(grant) = popped else {
                continue;
            };
            if is_cancelled() {
                // Cancelled while a release granted us the lock: hand it on.
                self.pass_on(&grant);
                return Err(cancelled(self.name));
            }
            if let Some(lease) = self.take_grant(grant, registration, deadline)? {
                return Ok(Taken::Acquired(lease));
            }
        }
    }

    /// A cancel of this acquisition wakes its blocking wait through Redis (dropped when the
    /// acquisition ends).
    fn wake_on_cancel(&self) -> Option<crate::cancel::Registered> {
        let token = self.opts.cancel.as_ref()?;
        let (inner, keys, id) = (
            Arc::clone(self.inner),
            self.keys.clone(),
            self.ids.waiter.clone(),
        );
        Some(token.on_cancel(move || {
            if let Err(error) = inner.deployment.wake(&keys, &id) {
                tracing::debug!(target: "redis_lock", %error, "could not wake a cancelled waiter; it stops at the end of its current wait");
            }
        }))
    }

    /// Sleeps `d`, or until the acquisition is cancelled.
    fn sleep(&self, d: Duration) {
        match &self.opts.cancel {
            Some(token) => {
                token.sleep(d);
            }
            None => std::thread::sleep(d),
        }
    }

    /// One attempt: registering as a waiter if the strategy will wait for a wake-up, trying
    /// the native fast path where the primitive has one and may take it. Acquired: the lease.
    fn attempt_once(
        &self,
        retry: &RetryStrategy,
        deadline: &Deadline,
        attempt: u32,
        registration: &mut Option<Registration>,
    ) -> Result<Tried> {
        let left = deadline.at.saturating_duration_since(Instant::now());
        let register = self.register_for(retry, attempt, left);
        let sent = Instant::now();
        let mut args = AttemptArgs {
            keys: &self.keys,
            token: &self.ids.token,
            ttl: self.ttl,
            holder: &self.inner.holder,
            meta: self.meta(),
            min_hold: self.opts.hold_at_least,
            waiter: &self.ids.waiter,
            register,
            fair: self.fair,
            registered: registration.is_some(),
            native: None,
            since: crate::wire::unix_ms_now(),
            burned: None,
        };
        // The native fast path: where the deployment takes it (one store, the lock not found
        // busy lately) and the primitive has one that this attempt may take. Its value is
        // kept for the release.
        let value = (!self.inner.deployment.is_quorum()
            && !self.member
            && !self.inner.busy.recently_busy(&self.keys.lock))
        .then(|| self.primitive.native().and_then(|n| n.value(&args)))
        .flatten();
        args.native = value.as_deref();
        let attempted = match self.attempt(&args) {
            Ok(a) => a,
            Err(e) => {
                if registration.is_some() {
                    self.leave();
                }
                return Err(e);
            }
        };
        match attempted.attempt {
            Attempt::Acquired { fence } => {
                let lease = self.hold(self.taken(self.ids.token.clone(), fence, sent, value))?;
                tracing::debug!(
                    target: "redis_lock",
                    key = self.name,
                    fence,
                    attempts = attempt,
                    waited = ?deadline.started.elapsed(),
                    "lock acquired"
                );
                Ok(Tried::Acquired(lease))
            }
            Attempt::Busy {
                holder_ttl,
                block,
                fresh,
                server_ms,
                holder,
            } => {
                self.inner.busy.busy(&self.keys.lock);
                if block.is_some() {
                    *registration = Some(Registration {
                        sent,
                        fresh,
                        server_ms,
                    });
                }
                Ok(Tried::Busy {
                    holder_ttl,
                    block,
                    wait_on: attempted.wait_on,
                    holder,
                })
            }
        }
    }

    /// How long attempt number `attempt` registers the caller as a waiter for, with `left` of
    /// the budget: as long as the strategy will wait for a wake-up after it (a fair waiter
    /// checks in at least every `FAIR_CHECK_IN`); zero, not at all.
    fn register_for(&self, retry: &RetryStrategy, attempt: u32, left: Duration) -> Duration {
        if !(retry.notified() && retry.may_wait_after(attempt, left)) {
            Duration::ZERO
        } else if self.fair {
            left.min(FAIR_CHECK_IN)
        } else {
            left
        }
    }

    /// One attempt. A reply lost in flight (the connection broke or timed out after the
    /// request went out, say because a signal or a network cut got in the way) leaves us not
    /// knowing whether we now hold the lock; acquisition is idempotent per owner token, so the
    /// attempt is sent once more, on a fresh connection, and its answer is the truth. If that
    /// fails too, the lock is given up under our token (best effort), so that no lock nobody
    /// owns stays taken for its whole TTL.
    fn attempt(&self, args: &AttemptArgs<'_>) -> Result<Attempted> {
        let deployment = &self.inner.deployment;
        match deployment.attempt(&**self.primitive, args, self.ack) {
            // Nothing sent (no connection), nothing to ask again or undo.
            Err(e) if e.is_connection_error() && !e.nothing_sent() => {
                tracing::debug!(target: "redis_lock", key = self.name, error = %e, "acquire reply lost; asking again with the same token");
                deployment
                    .attempt(&**self.primitive, args, self.ack)
                    .inspect_err(|_| self.undo(args.native))
            }
            other => other,
        }
    }

    /// Gives up whatever an attempt whose outcome is unknown may have taken; `value`: what its
    /// native fast path wrote, if it took that path (a server with `DELIFEQ` then deletes it
    /// with one native command, which runs even when its reply is lost too). Sent at once;
    /// when that fails too, again in the background until Redis answers (`giveback.rs`).
    fn undo(&self, value: Option<&str>) {
        let job = giveback::Job {
            primitive: Arc::clone(self.primitive),
            keys: self.keys.clone(),
            token: self.ids.token.clone(),
            grant: self.ids.grant.clone(),
            registration: String::new(),
            cooldown: Duration::ZERO,
            native: true,
            value: value.map(str::to_owned),
            kind: giveback::Kind::Undo,
            until: Instant::now() + self.ttl,
        };
        self.inner.give_back_now(job);
    }

    /// How a lease starts that was taken under `token` by a request (attempt or claim) sent
    /// at `sent`, which set the full TTL and the holder information.
    /// `value`: what the native fast path wrote, when the attempt took it (see
    /// `Start::native`).
    fn taken(&self, token: String, fence: u64, sent: Instant, value: Option<String>) -> Start {
        Start {
            token,
            fence,
            acquired: sent,
            sent,
            set_ttl: self.ttl,
            ttl: self.ttl,
            unclaimed: None,
            registration: String::new(),
            native: value.is_some(),
            value,
            grant: self.ids.grant.clone(),
            max_hold: self.opts.max_hold,
            cooldown: self.opts.cooldown.unwrap_or_default(),
            on_lost: self.on_lost(),
            ack: self.ack,
        }
    }

    /// Makes an acquired lock a lease: registry, watchdog.
    fn hold(&self, start: Start) -> Result<Arc<Lease>> {
        start_lease(
            self.inner,
            self.primitive,
            self.name,
            self.keys.clone(),
            self.report,
            start,
            self.watchdog,
        )
    }
}

/// Makes a held lock a lease (an acquired one, or one resumed from a handle): the hold span,
/// the registry, the watchdog.
pub(crate) fn start_lease(
    inner: &Arc<Inner>,
    primitive: &Arc<dyn Lock>,
    name: &str,
    keys: LockKeys,
    report: Report<'_>,
    start: Start,
    watchdog: bool,
) -> Result<Arc<Lease>> {
    let hold = Hold::start(
        name,
        report.labels.clone(),
        start.fence,
        start.acquired,
        report.parent,
    );
    let lease = Arc::new(Lease::new(
        inner.registry.next_id(),
        Arc::clone(inner),
        Arc::clone(primitive),
        name,
        keys,
        start,
        hold,
    ));
    if watchdog && let Err(e) = watchdog::start(&lease) {
        let _ = lease.release();
        return Err(Error::System(e));
    }
    inner.registry.remember(&lease);
    registry::remember_here(inner, &lease);
    Ok(lease)
}

#[cfg(test)]
mod tests {
    use super::handoff::{GrantUse, grant_use};
    use super::*;
    use crate::wire::HANDOFF_GRACE;

    const MS: Duration = Duration::from_millis(1);

    #[test]
    fn a_grant_is_adopted_only_when_the_registration_vouches_for_it() {
        let sent = Instant::now();
        let reg = Some((sent, true, 1_000));
        assert_eq!(
            grant_use(1_000, reg, sent + 10 * MS, false),
            GrantUse::Adopt
        );
        // Made before the registration (server clock), or something poppable was pending.
        assert_eq!(grant_use(999, reg, sent + 10 * MS, false), GrantUse::Claim);
        assert_eq!(
            grant_use(1_000, Some((sent, false, 1_000)), sent, false),
            GrantUse::Claim
        );
        // Too late in the grace for the watchdog to claim it in time.
        assert_eq!(
            grant_use(1_000, reg, sent + HANDOFF_GRACE / 2, false),
            GrantUse::Claim
        );
        // Holder information, minimum hold or acknowledgement needed now.
        assert_eq!(grant_use(1_000, reg, sent, true), GrantUse::Claim);
        assert_eq!(grant_use(1_000, None, sent, false), GrantUse::Claim);
    }
}
