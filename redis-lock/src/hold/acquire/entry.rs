//! Where an acquisition starts and is reported: the client's entry points (`Inner::acquire`,
//! a multi-lock's member alone), the checks of its options, what a thread that holds the name
//! already does (join, refuse, or attempt), and the acquire span and metrics around it.

use std::cell::Cell;
use std::sync::Arc;

use tracing::Span;

use super::{Acquisition, Deadline, Taken, cancelled};
use crate::cancel::CancelToken;
use crate::error::{Error, Result};
use crate::hold::lease::Lease;
use crate::hold::observe::{self, Labels};
use crate::hold::primitive::{Lock, Nested};
use crate::hold::{Inner, registry};
use crate::options::{LockOptions, validate};
use crate::retry::RetryStrategy;
use crate::store::Ack;
use crate::wire::token::new_ids;

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
