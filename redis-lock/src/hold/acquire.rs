//! The acquire loop and the client side of the handoff, for any primitive.
//!
//! One mechanism, in one place (the Redis side is the primitive's scripts: for the mutex,
//! `ACQUIRE`, `CLAIM`, `LEAVE` and the `hand_over` part of `RELEASE` in `wire::mutex`;
//! ARCHITECTURE.md explains the design):
//!
//! 1. An attempt that finds the lock busy registers the caller as a waiter, if it will wait,
//!    and says how long it may block (`block`) and whether its registration can vouch for a
//!    later grant (`fresh`, server time).
//! 2. The waiter blocks on a wake-up list (the shared one, or its own in fair mode) on a
//!    connection of the waiter pool, for at most `block` and its remaining budget.
//! 3. A release that sees live waiters grants the lock through that list to exactly one
//!    waiter: the one that pops it. The popper adopts the grant (no round trip; its watchdog
//!    claims it later) or claims it at once (`take_grant`).
//! 4. A waiter whose budget runs out leaves, passing on a grant made for it.

use std::cell::Cell;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tracing::Span;

use super::cancel::CancelToken;
use super::lease::{Lease, Start};
use super::observe::{self, Hold, Labels};
use super::retry::{RetryStrategy, Step};
use super::{Inner, registry, watchdog};
use crate::deploy::seam::{Nested, Primitive};
use crate::deploy::{Attempted, ClaimArgs, ReleaseArgs};
use crate::error::{Error, Result};
use crate::options::{LockOptions, MAX_METADATA_LEN, MAX_TTL, validate_cooldown, validate_ttl};
use crate::store::{Ack, NO_CONNECTION_POLL, Wake};
use crate::wire::token::{Ids, new_ids};
use crate::wire::{Attempt, AttemptArgs, Claim, Grant, HANDOFF_GRACE, LockKeys};

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

/// What a registered waiter remembers of its latest registration, to judge a grant it pops.
#[derive(Debug, Clone, Copy)]
struct Registration {
    /// When the registering attempt was sent: any grant made later expires no earlier than
    /// this plus the handoff grace.
    sent: Instant,
    fresh: bool,
    /// Server time of the registration, Unix ms: a grant stamped at or after it was made
    /// after the registration.
    server_ms: u64,
}

/// One acquisition: what it asked for, and who it is.
struct Acquisition<'a> {
    inner: &'a Arc<Inner>,
    primitive: &'a Arc<dyn Primitive>,
    name: &'a str,
    keys: LockKeys,
    opts: &'a LockOptions,
    ttl: Duration,
    ack: Option<Ack>,
    watchdog: bool,
    ids: Ids,
    fair: bool,
    labels: &'a Labels,
    /// The span the hold span goes under.
    parent: &'a Span,
    /// Attempts sent so far (for the acquire span).
    attempts: &'a Cell<u32>,
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

impl Inner {
    /// The acquire loop: attempt, then wait as the retry strategy says, until acquired, the
    /// wait budget is spent, or the strategy gives up. `Ok(None)`: busy until the end.
    pub(crate) fn acquire(
        self: &Arc<Self>,
        primitive: &Arc<dyn Primitive>,
        name: &str,
        opts: &LockOptions,
        deadline: &Deadline,
    ) -> Result<Option<Arc<Lease>>> {
        let labels = Labels {
            label: opts
                .label
                .clone()
                .unwrap_or(std::borrow::Cow::Borrowed(observe::OTHER)),
            primitive: primitive.kind(),
        };
        // The hold span's parent: the caller's span, not the acquire span.
        let parent = Span::current();
        // Not acquired: a timeout if it could wait, else busy (as `acquire_with` reports it).
        let retry = opts.retry.as_ref().unwrap_or(&self.config.default_retry);
        let waits = deadline.at > deadline.started && *retry != RetryStrategy::none();
        let span = observe::acquire_span(name, &labels, waits, deadline.budget());
        let attempts = Cell::new(0);
        let result = span.in_scope(|| {
            self.acquire_in_span(primitive, name, opts, deadline, &labels, &parent, &attempts)
        });
        let outcome = match &result {
            Ok(Some(_)) => Ok(observe::Outcome::Acquired),
            Ok(None) if waits => Ok(observe::Outcome::Timeout),
            Ok(None) => Ok(observe::Outcome::Busy),
            Err(e) => Err(e),
        };
        let fence = result
            .as_ref()
            .ok()
            .and_then(|l| l.as_ref().map(|l| l.fence));
        observe::acquired(
            &span,
            &labels,
            deadline.started,
            outcome,
            attempts.get(),
            fence,
        );
        result
    }

    #[allow(clippy::too_many_arguments)]
    fn acquire_in_span(
        self: &Arc<Self>,
        primitive: &Arc<dyn Primitive>,
        name: &str,
        opts: &LockOptions,
        deadline: &Deadline,
        labels: &Labels,
        parent: &Span,
        attempts: &Cell<u32>,
    ) -> Result<Option<Arc<Lease>>> {
        let keys = self.keys(name)?;
        let ttl = opts.ttl.unwrap_or(self.config.default_ttl);
        validate(ttl, opts)?;
        self.check_ttl(ttl)?;
        if opts.cancel.as_ref().is_some_and(CancelToken::is_cancelled) {
            return Err(cancelled(name));
        }
        // What this thread already holds of the name decides, and a lease the request would
        // join wins over the others: a thread that holds a write lock and a share taken under
        // it (a downgrade) and asks for a read joins that share, not a second one.
        let (mut join, mut refuse, mut nested_primitive) = (None, false, None);
        for lease in registry::all_held_here(self, name) {
            match primitive.nested(lease.kind(), &lease.token) {
                Nested::Join => join = join.or(Some(lease)),
                Nested::Refuse => refuse = true,
                Nested::Attempt(other) => nested_primitive = nested_primitive.or(other),
            }
        }
        if let Some(lease) = join {
            if !opts.reentrant {
                // Waiting would wait for this very thread: say so at once.
                return Err(Error::AlreadyHeld {
                    key: name.to_owned(),
                });
            }
            lease.add_hold();
            tracing::debug!(target: "redis_lock", key = name, "lock re-entered");
            return Ok(Some(lease));
        }
        if refuse {
            return Err(Error::UpgradeRefused {
                key: name.to_owned(),
            });
        }
        let primitive = nested_primitive.as_ref().unwrap_or(primitive);
        self.check_quorum(primitive.as_ref(), "primitive")?;
        let retry = opts.retry.as_ref().unwrap_or(&self.config.default_retry);
        if retry.is_fair() && !self.deployment.allows_fair() {
            return Err(Error::invalid(
                "retry",
                "fair waiting is not available under Redlock: each server would keep its own \
                 queue, and no one order holds across a majority; use a non-fair strategy",
            ));
        }
        let a = Acquisition {
            inner: self,
            primitive,
            name,
            keys,
            opts,
            ttl,
            ack: opts.replicas.map(|r| Ack {
                count: r.count,
                timeout: r.timeout,
                fsync: r.fsync,
            }),
            watchdog: opts.watchdog.unwrap_or(self.config.watchdog),
            ids: new_ids()?,
            fair: retry.is_fair(),
            labels,
            parent,
            attempts,
        };
        a.run(retry, deadline)
    }
}

fn cancelled(name: &str) -> Error {
    Error::Cancelled {
        key: name.to_owned(),
    }
}

/// Bad input is refused before anything is sent.
fn validate(ttl: Duration, opts: &LockOptions) -> Result<()> {
    validate_ttl(ttl)?;
    if opts.hold_at_least > MAX_TTL {
        return Err(Error::invalid(
            "hold_at_least",
            format!("longer than {MAX_TTL:?}"),
        ));
    }
    if let Some(cooldown) = opts.cooldown {
        validate_cooldown(cooldown)?;
    }
    if let Some(ack) = opts.replicas
        && ack.timeout > MAX_TTL
    {
        return Err(Error::invalid(
            "replicas",
            format!("the acknowledgement timeout is longer than {MAX_TTL:?}"),
        ));
    }
    if opts
        .metadata
        .as_ref()
        .is_some_and(|m| m.len() > MAX_METADATA_LEN)
    {
        return Err(Error::invalid(
            "metadata",
            format!("longer than {MAX_METADATA_LEN} bytes"),
        ));
    }
    Ok(())
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
            .leave(self.primitive, &self.keys, &self.ids.waiter);
    }

    fn run(self, retry: &RetryStrategy, deadline: &Deadline) -> Result<Option<Arc<Lease>>> {
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
        // Named only when there is a cancel token to wake through it.
        let cancel_list = cancel.map(|_| self.keys.cancel(&self.ids.waiter));
        let _waker = cancel.map(|token| {
            let (inner, keys, id) = (
                Arc::clone(self.inner),
                self.keys.clone(),
                self.ids.waiter.clone(),
            );
            token.on_cancel(move || {
                if let Err(error) = inner.deployment.wake(&keys, &id) {
                    tracing::debug!(target: "redis_lock", %error, "could not wake a cancelled waiter; it stops at the end of its current wait");
                }
            })
        });
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
            self.attempts.set(attempt);
            let left = deadline.at.saturating_duration_since(Instant::now());
            let register = if retry.notified() && retry.may_wait_after(attempt, left) {
                if self.fair {
                    left.min(FAIR_CHECK_IN)
                } else {
                    left
                }
            } else {
                Duration::ZERO
            };
            let sent = Instant::now();
            // As `wire::mutex::acquire` takes it: not fair, not registered, no minimum hold,
            // one store, and the lock not found busy lately.
            let native = !self.fair
                && registration.is_none()
                && self.opts.hold_at_least.is_zero()
                && !self.inner.deployment.is_quorum()
                && !self.inner.busy.recently_busy(&self.keys.lock);
            // What the native fast path will write, kept for a native release.
            let value = if native {
                self.primitive
                    .native_value(&self.ids.token, &self.inner.holder, self.meta())
            } else {
                None
            };
            let args = AttemptArgs {
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
                native,
                value: value.as_deref().unwrap_or(""),
            };
            let attempted = match self.attempt(&args) {
                Ok(a) => a,
                Err(e) => {
                    if registration.is_some() {
                        self.leave();
                    }
                    return Err(e);
                }
            };
            let (holder_ttl, block) = match attempted.attempt {
                Attempt::Acquired { fence } => {
                    let lease =
                        self.hold(self.taken(self.ids.token.clone(), fence, sent, value))?;
                    tracing::debug!(
                        target: "redis_lock",
                        key = self.name,
                        fence,
                        attempts = attempt,
                        waited = ?deadline.started.elapsed(),
                        "lock acquired"
                    );
                    return Ok(Some(lease));
                }
                Attempt::Busy {
                    holder_ttl,
                    block,
                    fresh,
                    server_ms,
                } => {
                    self.inner.busy.busy(&self.keys.lock);
                    if block.is_some() {
                        registration = Some(Registration {
                            sent,
                            fresh,
                            server_ms,
                        });
                    }
                    (holder_ttl, block)
                }
            };
            let left = deadline.at.saturating_duration_since(Instant::now());
            let step = retry.next(attempt, left, holder_ttl, block);
            if step != Step::Stop && waiting.is_none() {
                waiting = Some(observe::Waiting::start(self.labels));
            }
            let popped = match step {
                Step::Stop => {
                    if registration.is_some() {
                        self.leave();
                    }
                    return Ok(None);
                }
                Step::Sleep(d) => {
                    match cancel {
                        Some(token) => {
                            token.sleep(d);
                        }
                        None => std::thread::sleep(d),
                    }
                    None
                }
                Step::WaitSignal(d) => {
                    let cancel = cancel_list
                        .as_deref()
                        .map(|list| (list, &is_cancelled as _));
                    self.wait(&wake, d, attempted.wait_on, cancel)
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
                return Ok(Some(lease));
            }
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
        match deployment.attempt(self.primitive, args, self.ack) {
            // Nothing sent (no connection), nothing to ask again or undo.
            Err(e) if e.is_connection_error() && !e.nothing_sent() => {
                tracing::debug!(target: "redis_lock", key = self.name, error = %e, "acquire reply lost; asking again with the same token");
                deployment
                    .attempt(self.primitive, args, self.ack)
                    .inspect_err(|_| self.undo(args.value))
            }
            other => other,
        }
    }

    /// Gives up whatever an attempt whose outcome is unknown may have taken; `value`: what its
    /// native fast path wrote, if the caller made it (a server with `DELIFEQ` then deletes it
    /// with one native command, which runs even when its reply is lost too).
    fn undo(&self, value: &str) {
        let undone = self.inner.deployment.release(
            self.primitive,
            &ReleaseArgs {
                keys: &self.keys,
                token: &self.ids.token,
                cooldown: Duration::ZERO,
                grant: &self.ids.grant,
                registration: "",
                undo: true,
                native: true,
                value: (!value.is_empty()).then_some(value),
            },
        );
        if let Err(error) = undone {
            tracing::warn!(target: "redis_lock", key = self.name, %error, "could not give up an acquisition whose reply was lost; it expires with its ttl");
        }
    }

    /// Gives a grant we popped but will not use to the next waiter (the release's handoff),
    /// and forgets our registration.
    fn pass_on(&self, grant: &Grant) {
        let registration = if self.fair { "" } else { &self.ids.waiter };
        let passed = self.inner.deployment.release(
            self.primitive,
            &ReleaseArgs {
                keys: &self.keys,
                token: &grant.token,
                cooldown: Duration::ZERO,
                grant: &self.ids.grant,
                registration,
                undo: true,
                // A grant is a hash.
                native: false,
                value: None,
            },
        );
        if let Err(error) = passed {
            tracing::warn!(target: "redis_lock", key = self.name, %error, "could not pass on a grant of a cancelled acquisition; it lapses after the handoff grace");
        }
    }

    /// Blocks until a release pushes a grant to the wake-up list, a cancel wakes us, or
    /// `timeout` passes.
    fn wait(
        &self,
        list: &str,
        timeout: Duration,
        wait_on: Option<usize>,
        cancel: Option<(&str, &dyn Fn() -> bool)>,
    ) -> Option<Grant> {
        match self.inner.deployment.wait(list, timeout, wait_on, cancel) {
            Wake::Grant(grant) => Some(grant),
            Wake::Nothing => None,
            Wake::Failed => {
                // Do not spin against a Redis that fails at once.
                let pause = timeout.min(NO_CONNECTION_POLL);
                match &self.opts.cancel {
                    Some(token) => {
                        token.sleep(pause);
                    }
                    None => std::thread::sleep(pause),
                }
                None
            }
        }
    }

    /// A release granted us the lock through the wake-up list: adopt the grant, or claim it.
    /// `Ok(None)` when somebody took the grant first (it had lapsed): keep waiting.
    fn take_grant(
        &self,
        grant: Grant,
        registration: Option<Registration>,
        deadline: &Deadline,
    ) -> Result<Option<Arc<Lease>>> {
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
            observe::handoff(self.labels);
            tracing::debug!(target: "redis_lock", key = self.name, fence = grant.fence, waited = ?deadline.started.elapsed(), "lock handed over");
            return Ok(Some(lease));
        }
        let sent = Instant::now();
        let claimed = self.inner.deployment.claim(
            self.primitive,
            &ClaimArgs {
                keys: &self.keys,
                grant: &grant.token,
                ttl: self.ttl,
                holder: &self.inner.holder,
                meta: self.meta(),
                min_hold: self.opts.hold_at_least,
                registration: &leftover,
                ack: self.ack,
            },
        )?;
        let Some(Claim::Claimed { fence }) = claimed else {
            return Ok(None);
        };
        let lease = self.hold(self.taken(grant.token, fence, sent, None))?;
        observe::handoff(self.labels);
        tracing::debug!(target: "redis_lock", key = self.name, fence, waited = ?deadline.started.elapsed(), "lock handed over and claimed");
        Ok(Some(lease))
    }

    /// How a lease starts that was taken under `token` by a request (attempt or claim) sent
    /// at `sent`, which set the full TTL and the holder information.
    /// `value`: what the native fast path wrote, when the attempt was allowed to take it (see
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
            self.labels,
            self.parent,
            start,
            self.watchdog,
        )
    }
}

/// Makes a held lock a lease (an acquired one, or one resumed from a handle): the hold span,
/// the registry, the watchdog.
#[allow(clippy::too_many_arguments)]
pub(crate) fn start_lease(
    inner: &Arc<Inner>,
    primitive: &Arc<dyn Primitive>,
    name: &str,
    keys: LockKeys,
    labels: &Labels,
    parent: &Span,
    start: Start,
    watchdog: bool,
) -> Result<Arc<Lease>> {
    let hold = Hold::start(name, labels.clone(), start.fence, start.acquired, parent);
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
    use super::*;

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

#[cfg(all(test, feature = "testing"))]
mod server_tests {
    use super::*;
    use crate::deploy::Deployment;
    use crate::testing::RedisServer;
    use crate::wire::Release;
    use crate::wire::token::Ids;

    /// Whether the server has `DELIFEQ` is learnt by the first release of a lock taken on the
    /// native fast path, and kept by the store (not asked per call).
    #[test]
    fn the_first_native_release_learns_whether_the_server_has_delifeq() {
        let server = RedisServer::start();
        let client = crate::LockClient::open(&server.url()).unwrap();
        let Deployment::Single(store) = &client.inner.deployment else {
            panic!("one server is a single store");
        };
        assert_eq!(store.caps.delifeq.known(), None);
        drop(client.lock("learn").unwrap());
        let info: Vec<redis::Value> = redis::cmd("COMMAND")
            .arg("INFO")
            .arg("DELIFEQ")
            .query(&mut server.connection())
            .unwrap();
        let has = !matches!(info.first(), None | Some(redis::Value::Nil));
        assert_eq!(store.caps.delifeq.known(), Some(has));
        // Learnt once: a release on a server without it sends the script alone from then on.
        let before = client.request_count();
        drop(client.lock("learn").unwrap());
        assert_eq!(client.request_count() - before, 2);
    }

    /// The cluster client resends a script after a reply timeout; when the first copy took the
    /// lock, the second must answer "acquired" with the same fencing token, not "busy".
    #[test]
    fn a_resent_acquire_finds_its_own_lock_acquired() {
        let server = RedisServer::start();
        let client = crate::LockClient::open(&server.url()).unwrap();
        let inner = &client.inner;
        let Deployment::Single(store) = &inner.deployment else {
            panic!("one server is a single store");
        };
        let keys = inner.keys("resent").unwrap();
        let ids = new_ids().unwrap();
        let ttl = Duration::from_secs(10);
        let attempt = |token: &str| {
            let args = AttemptArgs {
                keys: &keys,
                token,
                ttl,
                holder: &inner.holder,
                meta: "",
                min_hold: Duration::ZERO,
                waiter: &ids.waiter,
                register: ttl,
                fair: false,
                registered: false,
                native: false,
                value: "",
            };
            crate::deploy::attempt_on(store, &*inner.mutex, &args, None).unwrap()
        };
        let Attempt::Acquired { fence } = attempt(&ids.token) else {
            panic!("the lock is free");
        };
        let Attempt::Acquired { fence: again } = attempt(&ids.token) else {
            panic!("a resent acquire was answered busy");
        };
        assert_eq!(again, fence, "the stored fencing token, not a new one");
        let counter: u64 = redis::cmd("GET")
            .arg(&keys.fence)
            .query(&mut server.connection())
            .unwrap();
        assert_eq!(counter, fence, "the counter did not move");
        // Anyone else is still refused.
        let other = new_ids().unwrap().token;
        assert!(matches!(attempt(&other), Attempt::Busy { .. }));
        let mut conn = store.conn().unwrap();
        let released = inner
            .mutex
            .release(
                &mut conn,
                &keys,
                &ids.token,
                false,
                Duration::ZERO,
                &ids.grant,
                "",
                crate::wire::Form::Hash,
            )
            .unwrap();
        assert_eq!(released, Release::Released);
    }

    /// Every command Redis has run (`INFO commandstats`, commands inside scripts included),
    /// but `INFO` itself, `LPOP` (the waiter's pop, standing in for `BLPOP` here) and what a
    /// new connection sends (`CLIENT SETINFO` on Valkey).
    fn commands(probe: &mut redis::Connection) -> u64 {
        let text: String = redis::cmd("INFO").arg("commandstats").query(probe).unwrap();
        text.lines()
            .filter_map(|l| l.strip_prefix("cmdstat_")?.split_once(':'))
            .filter(|(name, _)| !matches!(*name, "info" | "lpop") && !name.starts_with("client"))
            .filter_map(|(_, stats)| stats.split(',').find_map(|f| f.strip_prefix("calls=")))
            .map(|n| n.parse::<u64>().unwrap())
            .sum()
    }

    /// What one contended acquisition costs Redis, in commands, on the path the benchmark's
    /// contended rows take (issue 12): a waiter's attempt that finds the lock busy and
    /// registers, and the release that grants the lock to a waiter by a holder that took it
    /// from a grant (its registration left to forget). 7 and 11 (with `BLPOP`, the waiter's
    /// wait: 19), against 8 and 15 before the counts of `EXISTS` were used and the registry was
    /// only pruned when its first registration had lapsed.
    #[test]
    fn a_contended_acquisition_costs_redis_nineteen_commands() {
        let server = RedisServer::start();
        let client = crate::LockClient::open(&server.url()).unwrap();
        let inner = &client.inner;
        let Deployment::Single(store) = &inner.deployment else {
            panic!("one server is a single store");
        };
        let keys = inner.keys("costly").unwrap();
        let ttl = Duration::from_secs(30);
        let (a, b, c) = (new_ids().unwrap(), new_ids().unwrap(), new_ids().unwrap());
        // `b` registers for longer than `c`, so `c`'s registration never raises the TTL of
        // the waiters key (one `PEXPIRE` more): with equal caps whether it does depends on
        // whether the two attempts fall in the same millisecond, as in a steady stream of
        // waiters (the benchmark's 19.1 commands per acquisition).
        let attempt = |ids: &Ids, register: Duration| {
            let args = AttemptArgs {
                keys: &keys,
                token: &ids.token,
                ttl,
                holder: &inner.holder,
                meta: "",
                min_hold: Duration::ZERO,
                waiter: &ids.waiter,
                register,
                fair: false,
                registered: false,
                native: false,
                value: "",
            };
            crate::deploy::attempt_on(store, &*inner.mutex, &args, None).unwrap()
        };
        let release = |token: &str, grant: &str, registration: &str| {
            let mut conn = store.conn().unwrap();
            inner
                .mutex
                .release(
                    &mut conn,
                    &keys,
                    token,
                    false,
                    Duration::ZERO,
                    grant,
                    registration,
                    // Taken through the script: a hash.
                    crate::wire::Form::Hash,
                )
                .unwrap()
        };
        let mut probe = server.connection();
        let pop = |probe: &mut redis::Connection| -> String {
            redis::cmd("LPOP").arg(&keys.signal).query(probe).unwrap()
        };
        // Scripts loaded, and a lock held with `b` waiting.
        assert!(matches!(attempt(&a, ttl), Attempt::Acquired { .. }));
        assert!(matches!(
            attempt(&b, ttl),
            Attempt::Busy { block: Some(_), .. }
        ));

        let before = commands(&mut probe);
        assert!(matches!(
            attempt(&c, ttl / 3),
            Attempt::Busy { block: Some(_), .. }
        ));
        let registering = commands(&mut probe) - before;
        // `a` grants the lock to whoever pops: `b`.
        assert_eq!(release(&a.token, &a.grant, ""), Release::Released);
        assert!(pop(&mut probe).starts_with(&format!("{} ", a.grant)));
        let before = commands(&mut probe);
        // `b` holds it under `a`'s grant, and grants it on to `c`.
        assert_eq!(release(&a.grant, &b.grant, &b.waiter), Release::Released);
        let granting = commands(&mut probe) - before;
        assert!(
            pop(&mut probe).starts_with(&format!("{} ", b.grant)),
            "c's turn"
        );
        assert_eq!(
            (registering, granting),
            (7, 11),
            "commands of the registering attempt and of the granting release"
        );
    }

    /// A claim of a grant that expired before it was claimed says so (`Gone`), rather than
    /// that somebody else took it.
    #[test]
    fn claiming_an_expired_grant_reports_it_gone() {
        let server = RedisServer::start();
        let client = crate::LockClient::open(&server.url()).unwrap();
        let inner = &client.inner;
        let keys = inner.keys("claimed").unwrap();
        let claim = |grant: &str| {
            inner
                .deployment
                .claim(
                    &inner.mutex,
                    &ClaimArgs {
                        keys: &keys,
                        grant,
                        ttl: Duration::from_secs(1),
                        holder: &inner.holder,
                        meta: "",
                        min_hold: Duration::ZERO,
                        registration: "",
                        ack: None,
                    },
                )
                .unwrap()
        };
        assert_eq!(claim("nobody-granted-this"), Some(Claim::Gone));
        let other = client.lock("claimed").unwrap();
        assert_eq!(claim("nobody-granted-this"), Some(Claim::NotOurs));
        drop(other);
    }
}
