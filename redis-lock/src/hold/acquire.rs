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

use std::cell::Cell;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tracing::Span;

use super::lease::{Lease, Start};
use super::observe::{self, Hold, Labels};
use super::primitive::{Lock, Nested};
use super::{Inner, giveback, registry, watchdog};
use crate::cancel::CancelToken;
use crate::deploy::Attempted;
use crate::error::{Error, HolderInfo, Result};
use crate::options::{LockOptions, validate};
use crate::retry::{RetryStrategy, Step};
use crate::store::{Ack, FAILED_WAIT_PAUSE, Wake};
use crate::wire::token::random_below;
use crate::wire::token::{Ids, new_ids};
use crate::wire::{
    Attempt, AttemptArgs, BusyHolder, Claim, ClaimArgs, Form, Grant, HANDOFF_GRACE, LockKeys,
    ReleaseArgs,
};

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

/// Where an acquisition reports what happened: its labels, the span its hold goes under (the
/// caller's, not the acquire span), and the attempts sent so far (for the acquire span).
#[derive(Clone, Copy)]
pub(crate) struct Report<'a> {
    pub(crate) labels: &'a Labels,
    pub(crate) parent: &'a Span,
    pub(crate) attempts: &'a Cell<u32>,
}

impl Inner {
    /// The acquire loop: attempt, then wait as the retry strategy says, until acquired, the
    /// wait budget is spent, or the strategy gives up (`Taken::Busy`).
    pub(crate) fn acquire(
        self: &Arc<Self>,
        primitive: &Arc<dyn Lock>,
        name: &str,
        opts: &LockOptions,
        deadline: &Deadline,
    ) -> Result<Taken<Arc<Lease>>> {
        self.acquire_observed(primitive, name, opts, deadline, false)
    }

    /// [`acquire`](Self::acquire) of one member of a multi-lock, taken alone while the set
    /// waits for it (`hold/multi.rs`): no native fast path, so the member is a hash whose
    /// fencing token is stored (what `inspect` shows is the holder's exactly, not the counter
    /// a busy native attempt may have bumped), and a grant it is handed is claimed at once
    /// rather than adopted: an adopted grant lives on the 1 s handoff grace until its
    /// watchdog's claim gets through, while the set may wait longer than that for its other
    /// members.
    pub(crate) fn acquire_member(
        self: &Arc<Self>,
        primitive: &Arc<dyn Lock>,
        name: &str,
        opts: &LockOptions,
        deadline: &Deadline,
    ) -> Result<Taken<Arc<Lease>>> {
        self.acquire_observed(primitive, name, opts, deadline, true)
    }

    /// [`acquire`](Self::acquire) or [`acquire_member`](Self::acquire_member) (`member`), in
    /// the acquisition's span and metrics.
    fn acquire_observed(
        self: &Arc<Self>,
        primitive: &Arc<dyn Lock>,
        name: &str,
        opts: &LockOptions,
        deadline: &Deadline,
        member: bool,
    ) -> Result<Taken<Arc<Lease>>> {
        observed(
            self,
            name,
            primitive.kind().word(),
            opts,
            deadline,
            |report| self.acquire_in_span(primitive, name, opts, deadline, report, member),
        )
    }

    fn acquire_in_span(
        self: &Arc<Self>,
        primitive: &Arc<dyn Lock>,
        name: &str,
        opts: &LockOptions,
        deadline: &Deadline,
        report: Report<'_>,
        member: bool,
    ) -> Result<Taken<Arc<Lease>>> {
        let keys = self.keys(name)?;
        let ttl = opts.ttl.unwrap_or(self.config.default_ttl);
        let retry = opts.retry.as_ref().unwrap_or(&self.config.default_retry);
        // Bad input is refused before anything is sent: the limits every acquisition is held
        // to, then what this primitive cannot honour.
        validate(ttl, opts)?;
        primitive.check(opts, retry.is_fair())?;
        self.check_ttl(ttl)?;
        if opts.cancel.as_ref().is_some_and(CancelToken::is_cancelled) {
            return Err(cancelled(name));
        }
        let primitive = match self.nested(primitive, name, opts)? {
            Held::Joined(lease) => return Ok(Taken::Acquired(lease)),
            Held::Attempt(other) => other.unwrap_or_else(|| Arc::clone(primitive)),
        };
        self.check_quorum(primitive.as_ref(), "primitive")?;
        if retry.is_fair() && !self.deployment.allows_fair() {
            return Err(Error::invalid(
                "retry",
                "fair waiting is not available under Redlock: each server would keep its own \
                 queue, and no one order holds across a majority; use a non-fair strategy",
            ));
        }
        let a = Acquisition {
            inner: self,
            primitive: &primitive,
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
            report,
            member,
        };
        a.run(retry, deadline)
    }

    /// What this thread already holds of `name` decides, and a lease the request would join
    /// wins over the others: a thread that holds a write lock and a share taken under it (a
    /// downgrade) and asks for a read joins that share, not a second one.
    fn nested(
        self: &Arc<Self>,
        primitive: &Arc<dyn Lock>,
        name: &str,
        opts: &LockOptions,
    ) -> Result<Held> {
        let (mut join, mut refuse, mut other) = (None, false, None);
        for lease in registry::all_held_here(self, name) {
            match primitive.nested(lease.kind(), &lease.token) {
                Nested::Join => join = join.or(Some(lease)),
                Nested::Refuse => refuse = true,
                Nested::Attempt(instead) => other = other.or(instead),
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
            return Ok(Held::Joined(lease));
        }
        if refuse {
            return Err(Error::UpgradeRefused {
                key: name.to_owned(),
            });
        }
        Ok(Held::Attempt(other))
    }
}

/// Runs an acquisition of `name` (`primitive`: its name in spans and metrics) inside its
/// acquire span, given where to report (`run`), and records what came of it: acquired, busy
/// or timed out (busy if it could not wait), or the error; its attempts, and the fence it got
/// (the highest, for several locks). The one place an acquisition is reported.
pub(crate) fn observed<T: Fenced>(
    inner: &Inner,
    name: &str,
    primitive: &'static str,
    opts: &LockOptions,
    deadline: &Deadline,
    run: impl FnOnce(Report<'_>) -> Result<Taken<T>>,
) -> Result<Taken<T>> {
    let labels = Labels {
        label: opts
            .label
            .clone()
            .unwrap_or(std::borrow::Cow::Borrowed(observe::OTHER)),
        primitive,
    };
    // The hold span's parent: the caller's span, not the acquire span.
    let parent = Span::current();
    // Not acquired: a timeout if it could wait, else busy (as `acquire_with` reports it).
    let retry = opts.retry.as_ref().unwrap_or(&inner.config.default_retry);
    let waits = deadline.at > deadline.started && *retry != RetryStrategy::none();
    let span = observe::acquire_span(name, &labels, waits, deadline.budget());
    let attempts = Cell::new(0);
    let report = Report {
        labels: &labels,
        parent: &parent,
        attempts: &attempts,
    };
    let result = span.in_scope(|| run(report));
    let outcome = match &result {
        Ok(Taken::Acquired(_)) => Ok(observe::Outcome::Acquired),
        Ok(Taken::Busy(_)) if waits => Ok(observe::Outcome::Timeout),
        Ok(Taken::Busy(_)) => Ok(observe::Outcome::Busy),
        Err(e) => Err(e),
    };
    let fence = match &result {
        Ok(Taken::Acquired(l)) => l.fence(),
        _ => None,
    };
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

/// What an acquisition got, for its report: a lease, or several.
pub(crate) trait Fenced {
    /// Its fencing token (the highest, for several locks).
    fn fence(&self) -> Option<u64>;
}

impl Fenced for Arc<Lease> {
    fn fence(&self) -> Option<u64> {
        Some(self.fence)
    }
}

impl Fenced for Vec<Arc<Lease>> {
    fn fence(&self) -> Option<u64> {
        self.iter().map(|l| l.fence).max()
    }
}

/// What a thread that holds the name already does (see [`Inner::nested`]).
enum Held {
    /// It joined the lease it holds.
    Joined(Arc<Lease>),
    /// It attempts, with this primitive instead of the one asked for (`None`: the same).
    Attempt(Option<Arc<dyn Lock>>),
}

fn cancelled(name: &str) -> Error {
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

    /// Gives a grant we popped but will not use to the next waiter (the release's handoff),
    /// and forgets our registration.
    fn pass_on(&self, grant: &Grant) {
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
    fn wait(
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
    fn take_grant(
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
