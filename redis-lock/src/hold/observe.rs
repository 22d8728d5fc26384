//! What the hold layer tells the outside about locks: a `tracing` span per acquisition and
//! per hold, and (feature `metrics`) metrics through the `metrics` facade, so any exporter
//! works. Metric names, label keys and units are written here once; the acquire loop and the
//! lease only say what happened. With the feature off every metric call is an empty inline
//! function, and with no subscriber interested a span is `Span::none()`.
//!
//! Label cardinality is bounded by design: a metric never carries the lock name, only its
//! *label* (the macro's key template, a label set in the options, or [`OTHER`]).

use std::borrow::Cow;
use std::time::{Duration, Instant};

use tracing::Span;

use crate::error::{Error, LostReason};

/// The label of a lock whose caller set none.
pub(crate) const OTHER: &str = "other";

/// Metric names, for `describe_metrics` and the recording calls below.
#[cfg_attr(not(feature = "metrics"), allow(dead_code))]
pub(crate) mod names {
    pub(crate) const ACQUIRE_SECONDS: &str = "redis_lock_acquire_seconds";
    pub(crate) const HOLD_SECONDS: &str = "redis_lock_hold_seconds";
    pub(crate) const HELD: &str = "redis_lock_held";
    pub(crate) const WAITING: &str = "redis_lock_waiting";
    pub(crate) const RENEWALS: &str = "redis_lock_renewals_total";
    pub(crate) const RENEWAL_FAILURES: &str = "redis_lock_renewal_failures_total";
    pub(crate) const LOSSES: &str = "redis_lock_losses_total";
    pub(crate) const HANDOFFS: &str = "redis_lock_handoffs_total";
    pub(crate) const REPLICA_SHORTFALLS: &str = "redis_lock_replica_shortfalls_total";
}

/// What every metric of one lock is labelled with.
#[derive(Debug, Clone)]
pub(crate) struct Labels {
    /// Bounded-cardinality label: a key template, a caller's label, or [`OTHER`].
    pub(crate) label: Cow<'static, str>,
    /// The primitive and its mode (`mutex`, or `read` / `write` for a read-write lock).
    pub(crate) primitive: &'static str,
}

/// How an acquisition ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Outcome {
    Acquired,
    /// Not acquired, without waiting (`try_lock`).
    Busy,
    /// Not acquired within the wait budget.
    Timeout,
    Error,
}

impl Outcome {
    fn as_str(self) -> &'static str {
        match self {
            Outcome::Acquired => "acquired",
            Outcome::Busy => "busy",
            Outcome::Timeout => "timeout",
            Outcome::Error => "error",
        }
    }
}

/// How a hold ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Ended {
    /// Released while still ours.
    Released,
    /// Released after it had expired, nobody else holding it.
    Late,
    /// Taken over, deleted, or not renewable any more.
    Lost,
    /// Ran out: its TTL passed without renewal (expired, `max_hold`, a release that failed).
    Expired,
    /// Given to a lease handle without being released (`LockGuard::into_handle`).
    HandedOff,
}

impl Ended {
    fn as_str(self) -> &'static str {
        match self {
            Ended::Released => "released",
            Ended::Late => "late",
            Ended::Lost => "lost",
            Ended::Expired => "expired",
            Ended::HandedOff => "handed_off",
        }
    }

    pub(crate) fn from_loss(reason: LostReason) -> Ended {
        match reason {
            LostReason::Expired | LostReason::MaxHoldReached => Ended::Expired,
            LostReason::Deleted | LostReason::TakenOver | LostReason::RenewalFailed => Ended::Lost,
            // Never marked as a loss (`Lease::lost_reason` derives it from the release).
            LostReason::Released => Ended::Released,
        }
    }
}

fn loss_str(reason: LostReason) -> &'static str {
    match reason {
        LostReason::Expired => "expired",
        LostReason::Deleted => "deleted",
        LostReason::TakenOver => "taken_over",
        LostReason::RenewalFailed => "renewal_failed",
        LostReason::MaxHoldReached => "max_hold",
        LostReason::Released => "released",
    }
}

/// The span of one acquisition. Its outcome fields are filled by [`acquired`]. `lock.wait_ms`
/// is the wait budget of an acquisition that waits (`budget`; `None`: until free), absent when
/// it does not wait; `lock.until_free` says it waits with no budget.
pub(crate) fn acquire_span(
    name: &str,
    labels: &Labels,
    waits: bool,
    budget: Option<Duration>,
) -> Span {
    tracing::info_span!(
        target: "redis_lock",
        "acquire",
        otel.kind = "internal",
        lock.name = name,
        lock.label = &*labels.label,
        lock.primitive = labels.primitive,
        lock.wait_ms = budget.filter(|_| waits).map(|w| w.as_millis() as u64),
        lock.until_free = (waits && budget.is_none()).then_some(true),
        lock.outcome = tracing::field::Empty,
        lock.waited_ms = tracing::field::Empty,
        lock.attempts = tracing::field::Empty,
        lock.fencing_token = tracing::field::Empty,
        otel.status_code = tracing::field::Empty,
        error.message = tracing::field::Empty,
    )
}

/// An acquisition that started at `started` ended: its span's fields, the acquire histogram,
/// and the counter of replica-acknowledgement shortfalls.
pub(crate) fn acquired(
    span: &Span,
    labels: &Labels,
    started: Instant,
    outcome: Result<Outcome, &Error>,
    attempts: u32,
    fence: Option<u64>,
) {
    let waited = started.elapsed();
    let kind = match outcome {
        Ok(o) => o,
        Err(_) => Outcome::Error,
    };
    if !span.is_disabled() {
        span.record("lock.outcome", kind.as_str());
        span.record("lock.waited_ms", waited.as_secs_f64() * 1e3);
        span.record("lock.attempts", attempts);
        if let Some(fence) = fence {
            span.record("lock.fencing_token", fence);
        }
        match outcome {
            Err(e) => {
                span.record("otel.status_code", "ERROR");
                span.record("error.message", tracing::field::display(e));
            }
            Ok(_) => {
                span.record("otel.status_code", "OK");
            }
        }
    }
    record::acquired(labels, kind, waited);
    if let Err(Error::ReplicaAck { .. }) = outcome {
        record::count(labels, names::REPLICA_SHORTFALLS);
    }
}

/// One hold: its span (open for the guard's life) and its start, for the hold histogram.
/// Ends once ([`Hold::end`]), at the loss or the release; the span closes when the lease is
/// dropped.
#[derive(Debug)]
pub(crate) struct Hold {
    span: Span,
    labels: Labels,
    started: Instant,
    ended: Option<Ended>,
}

impl Hold {
    /// A hold that started at `started`, inside the caller's current span (not the acquire
    /// span, which has closed by then).
    pub(crate) fn start(
        name: &str,
        labels: Labels,
        fence: u64,
        started: Instant,
        parent: &Span,
    ) -> Hold {
        let span = tracing::info_span!(
            target: "redis_lock",
            parent: parent,
            "hold",
            otel.kind = "internal",
            lock.name = name,
            lock.label = &*labels.label,
            lock.primitive = labels.primitive,
            lock.fencing_token = fence,
            lock.ended = tracing::field::Empty,
            lock.held_ms = tracing::field::Empty,
            lock.lost_reason = tracing::field::Empty,
        );
        record::held(&labels, 1.0);
        Hold {
            span,
            labels,
            started,
            ended: None,
        }
    }

    pub(crate) fn labels(&self) -> &Labels {
        &self.labels
    }

    /// The hold ended (the first call counts; later ones change nothing).
    pub(crate) fn end(&mut self, how: Ended, reason: Option<LostReason>) {
        if self.ended.is_some() {
            return;
        }
        self.ended = Some(how);
        let held = self.started.elapsed();
        self.span.record("lock.ended", how.as_str());
        self.span.record("lock.held_ms", held.as_secs_f64() * 1e3);
        if let Some(reason) = reason {
            self.span.record("lock.lost_reason", loss_str(reason));
            record::lost(&self.labels, reason);
        }
        record::held(&self.labels, -1.0);
        record::hold_ended(&self.labels, how, held);
    }
}

impl Hold {
    /// The guard is gone (released): the span closes now, not when the last reference to the
    /// lease (a watchdog that has not noticed yet) is dropped.
    pub(crate) fn close(&mut self) {
        self.end(Ended::Expired, None);
        self.span = Span::none();
    }
}

impl Drop for Hold {
    fn drop(&mut self) {
        // Dropped without an end: the release failed, so the lock runs out with its TTL.
        self.end(Ended::Expired, None);
    }
}

/// Counts this thread as waiting for a lock while alive.
#[derive(Debug)]
pub(crate) struct Waiting<'a>(&'a Labels);

impl<'a> Waiting<'a> {
    pub(crate) fn start(labels: &'a Labels) -> Waiting<'a> {
        record::waiting(labels, 1.0);
        Waiting(labels)
    }
}

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        record::waiting(self.0, -1.0);
    }
}

/// A renewal got through.
pub(crate) fn renewed(labels: &Labels) {
    record::count(labels, names::RENEWALS);
}

/// A renewal failed with an error (it is retried until the lock would expire).
pub(crate) fn renewal_failed(labels: &Labels) {
    record::count(labels, names::RENEWAL_FAILURES);
}

/// A waiter received the lock from a release (a grant), rather than taking a free lock.
pub(crate) fn handoff(labels: &Labels) {
    record::count(labels, names::HANDOFFS);
}

/// Registers the units and descriptions of redis-lock's metrics with the installed
/// recorder (every client also does when it is built). Call it after installing a recorder
/// that was installed after the clients were built.
///
/// | metric | kind | labels |
/// |---|---|---|
/// | `redis_lock_acquire_seconds` | histogram, seconds | `outcome` (acquired, busy, timeout, error), `primitive`, `label` |
/// | `redis_lock_hold_seconds` | histogram, seconds | `ended` (released, late, lost, expired, handed_off), `primitive`, `label` |
/// | `redis_lock_held` | gauge | `primitive`, `label`: locks this process holds |
/// | `redis_lock_waiting` | gauge | `primitive`, `label`: threads of this process waiting |
/// | `redis_lock_renewals_total` | counter | `primitive`, `label` |
/// | `redis_lock_renewal_failures_total` | counter | `primitive`, `label` |
/// | `redis_lock_losses_total` | counter | `reason` (expired, deleted, taken_over, renewal_failed, max_hold), `primitive`, `label` |
/// | `redis_lock_handoffs_total` | counter | `primitive`, `label`: locks received from a release |
/// | `redis_lock_replica_shortfalls_total` | counter | `primitive`, `label`: acquisitions undone for want of replica acknowledgement |
///
/// `label` is the acquisition's [label](crate::LockOptions::label): the key template for
/// `#[distributed_lock]`, `"other"` when none was set.
///
/// # Examples
///
/// ```
/// // After installing an exporter's recorder (metrics-exporter-prometheus, say):
/// redis_lock::describe_metrics();
/// ```
#[cfg(feature = "metrics")]
pub fn describe_metrics() {
    record::describe();
}

/// Registers the metrics' units and descriptions (nothing without the `metrics` feature).
pub(crate) fn describe() {
    record::describe();
}

#[cfg(feature = "metrics")]
mod record {
    //! The `metrics` facade calls: one function per kind of record.
    use std::time::Duration;

    use metrics::{
        Unit, counter, describe_counter, describe_gauge, describe_histogram, gauge, histogram,
    };

    use super::{Ended, Labels, Outcome, loss_str, names};
    use crate::error::LostReason;

    fn label(l: &Labels) -> metrics::SharedString {
        match &l.label {
            std::borrow::Cow::Borrowed(s) => metrics::SharedString::const_str(s),
            std::borrow::Cow::Owned(s) => metrics::SharedString::from(s.clone()),
        }
    }

    pub(super) fn acquired(l: &Labels, outcome: Outcome, waited: Duration) {
        histogram!(names::ACQUIRE_SECONDS, "outcome" => outcome.as_str(), "primitive" => l.primitive, "label" => label(l))
            .record(waited.as_secs_f64());
    }

    pub(super) fn hold_ended(l: &Labels, how: Ended, held: Duration) {
        histogram!(names::HOLD_SECONDS, "ended" => how.as_str(), "primitive" => l.primitive, "label" => label(l))
            .record(held.as_secs_f64());
    }

    pub(super) fn held(l: &Labels, by: f64) {
        gauge!(names::HELD, "primitive" => l.primitive, "label" => label(l)).increment(by);
    }

    pub(super) fn waiting(l: &Labels, by: f64) {
        gauge!(names::WAITING, "primitive" => l.primitive, "label" => label(l)).increment(by);
    }

    pub(super) fn lost(l: &Labels, reason: LostReason) {
        counter!(names::LOSSES, "reason" => loss_str(reason), "primitive" => l.primitive, "label" => label(l))
            .increment(1);
    }

    pub(super) fn count(l: &Labels, name: &'static str) {
        counter!(name, "primitive" => l.primitive, "label" => label(l)).increment(1);
    }

    pub(super) fn describe() {
        describe_histogram!(
            names::ACQUIRE_SECONDS,
            Unit::Seconds,
            "Time from asking for a lock to the answer, by outcome (acquired, busy, timeout, error)"
        );
        describe_histogram!(
            names::HOLD_SECONDS,
            Unit::Seconds,
            "How long locks were held, by how the hold ended (released, late, lost, expired)"
        );
        describe_gauge!(names::HELD, Unit::Count, "Locks held by this process");
        describe_gauge!(
            names::WAITING,
            Unit::Count,
            "Threads of this process waiting for a lock"
        );
        describe_counter!(names::RENEWALS, Unit::Count, "Renewals that got through");
        describe_counter!(
            names::RENEWAL_FAILURES,
            Unit::Count,
            "Renewals that failed with an error (retried until the lock would expire)"
        );
        describe_counter!(
            names::LOSSES,
            Unit::Count,
            "Locks lost while held, by reason"
        );
        describe_counter!(
            names::HANDOFFS,
            Unit::Count,
            "Locks received from a release (a handoff) rather than taken free"
        );
        describe_counter!(
            names::REPLICA_SHORTFALLS,
            Unit::Count,
            "Acquisitions undone because too few replicas acknowledged them"
        );
    }
}

#[cfg(not(feature = "metrics"))]
mod record {
    //! Without the `metrics` feature every record is nothing.
    use std::time::Duration;

    use super::{Ended, Labels, Outcome};
    use crate::error::LostReason;

    #[inline(always)]
    pub(super) fn acquired(_: &Labels, _: Outcome, _: Duration) {}
    #[inline(always)]
    pub(super) fn hold_ended(_: &Labels, _: Ended, _: Duration) {}
    #[inline(always)]
    pub(super) fn held(_: &Labels, _: f64) {}
    #[inline(always)]
    pub(super) fn waiting(_: &Labels, _: f64) {}
    #[inline(always)]
    pub(super) fn lost(_: &Labels, _: LostReason) {}
    #[inline(always)]
    pub(super) fn count(_: &Labels, _: &'static str) {}
    #[inline(always)]
    pub(super) fn describe() {}
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn losses_map_to_how_the_hold_ended() {
        assert_eq!(Ended::from_loss(LostReason::Expired), Ended::Expired);
        assert_eq!(Ended::from_loss(LostReason::MaxHoldReached), Ended::Expired);
        assert_eq!(Ended::from_loss(LostReason::TakenOver), Ended::Lost);
        assert_eq!(Ended::from_loss(LostReason::Deleted), Ended::Lost);
        assert_eq!(Ended::from_loss(LostReason::RenewalFailed), Ended::Lost);
    }

    #[test]
    fn a_hold_ends_once() {
        let mut hold = Hold::start(
            "k",
            Labels {
                label: Cow::Borrowed(OTHER),
                primitive: "mutex",
            },
            1,
            Instant::now(),
            &Span::none(),
        );
        hold.end(Ended::Lost, Some(LostReason::TakenOver));
        hold.end(Ended::Released, None);
        assert_eq!(hold.ended, Some(Ended::Lost));
    }
}
