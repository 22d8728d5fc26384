//! Renewing a lease: the watchdog's renewal (or claim), `extend`, `remaining_ttl`, and the
//! alarm that reports a lease lost at its expiry while a request to an unreachable server is
//! still out.

use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use parking_lot::Mutex;

use super::{Lease, loss};
use crate::error::{LostReason, Result};
use crate::hold::observe;
use crate::wire::{Claim, ClaimArgs, OwnedTtl, Renewal};

/// A request of the watchdog that may outlast the lock (`Lease::bounded_by_expiry`): at the
/// expiry, unless answered by then, the lease is lost (`RenewalFailed`).
struct RunOut {
    /// The lease, until the request returned (then its answer, not this, says what
    /// happened). Taken at the answer, as the job is cancelled: the grace's job, which is not,
    /// must not keep the lease's memory.
    lease: Arc<Mutex<Option<Weak<Lease>>>>,
    expired_at: Instant,
}

/// How long a request still out at the expiry is given to read an answer it may have before
/// the loss is reported as `RenewalFailed` (more when the timer itself fired late: the
/// machine or the process was not running). A process stopped with a request in flight (a
/// GC or VM pause, `SIGSTOP`) and continued around the expiry wakes all its threads at once:
/// the timer's and the request's, whose answer may be waiting in its socket and says what
/// Redis knows (`TakenOver`, `Expired`, still held). An unreachable server's loss is
/// reported this much later than the expiry, when the lock counts as lost already
/// (`is_lost`, `ensure_held` go by the local expiry).
const RUN_OUT_GRACE: Duration = Duration::from_millis(30);

impl RunOut {
    /// At the expiry (`first`), and once more after the grace: lost, unless the request was
    /// answered or the lease renewed (or released) meanwhile.
    fn fire(self, first: bool) {
        let Some(lease) = self.lease.lock().as_ref().and_then(Weak::upgrade) else {
            return;
        };
        if first {
            let late = Instant::now().saturating_duration_since(self.expired_at);
            let timer = lease.inner.timer.clone();
            drop(lease);
            let grace = RUN_OUT_GRACE.max(late.min(RUN_OUT_GRACE * 10));
            // Not cancelled: it lets go of the lease once the request is answered.
            let _ = timer.after(grace, move || self.fire(false));
            return;
        }
        let unrenewed = {
            let st = lease.state.lock();
            !st.stopped() && st.expires_at <= self.expired_at
        };
        if unrenewed {
            lease.mark_lost(LostReason::RenewalFailed);
        }
    }
}

impl Lease {
    /// One renewal by the watchdog (the claim, for a grant taken unclaimed). `true` when the
    /// watchdog is done with this lease (lost). Bounded by the expiry (`bounded_by_expiry`).
    pub(crate) fn renew_now(self: &Arc<Self>) -> bool {
        let (ttl, unclaimed, expires_at) = {
            let st = self.state.lock();
            (st.ttl, st.unclaimed.clone(), st.expires_at)
        };
        let sent = Instant::now();
        let result = self.bounded_by_expiry(expires_at, || match unclaimed {
            Some(meta) => self.claim(ttl, &meta),
            None => self
                .inner
                .deployment
                .renew(&*self.primitive, &self.keys, &self.token, ttl),
        });
        let mut st = self.state.lock();
        if st.stopped() {
            return st.lost.is_some();
        }
        match result {
            Ok(Renewal::Renewed) => {
                let valid = self.inner.valid_until(sent, ttl);
                st.set(sent, ttl, valid);
                observe::renewed(self.hold.lock().labels());
                tracing::trace!(target: "redis_lock", key = %self.name, ?ttl, "lock renewed");
                false
            }
            Ok(answer) => {
                let reason = loss(answer, Instant::now(), st.expires_at);
                drop(st);
                self.mark_lost(reason);
                true
            }
            Err(error) => {
                observe::renewal_failed(self.hold.lock().labels());
                if st.renewal_failed(Instant::now()) {
                    drop(st);
                    self.mark_lost(LostReason::RenewalFailed);
                    return true;
                }
                tracing::warn!(target: "redis_lock", key = %self.name, %error, "renewing lock failed; retrying until it would expire");
                false
            }
        }
    }

    /// Runs the watchdog's request `call` (a renewal, a check). One blocked on an unreachable
    /// server returns only after its connect and reply timeouts, possibly long after the lock
    /// ran out; so when it could outlast the lock (valid until `expires_at`), the housekeeping
    /// thread is asked to report the loss at the expiry itself (`RenewalFailed`: the server
    /// could not be reached), unless a renewal got through first. A request sent once the
    /// expiry has passed already (the process was stopped: a GC or VM pause, `SIGSTOP`) is not
    /// raced that way: its answer says what happened (`Expired`, `TakenOver`), and only an
    /// error is `RenewalFailed`. One in flight across such a pause is given a moment to read
    /// its answer before the expiry is reported (`RUN_OUT_GRACE`).
    pub(super) fn bounded_by_expiry<T>(
        self: &Arc<Self>,
        expires_at: Instant,
        call: impl FnOnce() -> T,
    ) -> T {
        let sent = Instant::now();
        let racing = sent < expires_at;
        let deadline = (racing && sent + self.inner.config.call_bound >= expires_at).then(|| {
            let lease = Arc::new(Mutex::new(Some(Arc::downgrade(self))));
            let run_out = RunOut {
                lease: Arc::clone(&lease),
                expired_at: expires_at,
            };
            let job =
                self.inner
                    .timer
                    .after(expires_at.saturating_duration_since(sent), move || {
                        run_out.fire(true);
                    });
            (job, lease)
        });
        let result = call();
        if let Some((job, lease)) = deadline {
            *lease.lock() = None;
            job.cancel();
        }
        result
    }

    /// Claims a grant taken unclaimed: holder information and the full TTL.
    fn claim(&self, ttl: Duration, meta: &str) -> Result<Renewal> {
        let claim = self.inner.deployment.claim(
            &*self.primitive,
            &ClaimArgs {
                keys: &self.keys,
                grant: &self.token,
                ttl,
                holder: &self.inner.holder,
                meta,
                min_hold: Duration::ZERO,
                registration: &self.registration,
            },
            None,
        )?;
        Ok(match claim {
            Some(Claim::Claimed { .. }) => {
                self.state.lock().unclaimed = None;
                Renewal::Renewed
            }
            Some(Claim::Gone) => Renewal::Gone,
            // Unclaimed grants only exist where grants are popped.
            Some(Claim::NotOurs) | None => Renewal::NotOurs,
        })
    }

    /// Makes the lock expire `ttl` from now, and the TTL renewals extend to.
    pub(crate) fn extend(&self, ttl: Duration) -> Result<()> {
        self.inner.check_ttl(ttl)?;
        let sent = Instant::now();
        match self
            .inner
            .deployment
            .renew(&*self.primitive, &self.keys, &self.token, ttl)?
        {
            Renewal::Renewed => {
                {
                    let mut st = self.state.lock();
                    st.ttl = ttl;
                    let valid = self.inner.valid_until(sent, ttl);
                    st.set(sent, ttl, valid);
                }
                let renewer = self.watchdog.lock().clone();
                if let Some(renewer) = renewer {
                    renewer.nudge();
                }
                tracing::debug!(target: "redis_lock", key = %self.name, ?ttl, "lock extended");
                Ok(())
            }
            answer => Err(self.lost(answer)),
        }
    }

    /// Remaining TTL of the lock: `Ok(None)` when it has no expiry, `Err(Lost)` when it is
    /// not ours any more (the lease is then marked lost).
    pub(crate) fn remaining_ttl(&self) -> Result<Option<Duration>> {
        match self
            .inner
            .deployment
            .owned_ttl(&*self.primitive, &self.keys, &self.token)?
        {
            OwnedTtl::Left(ttl) => Ok(Some(ttl)),
            OwnedTtl::NoExpiry => Ok(None),
            OwnedTtl::Gone => Err(self.lost(Renewal::Gone)),
            OwnedTtl::NotOurs => Err(self.lost(Renewal::NotOurs)),
        }
    }
}
