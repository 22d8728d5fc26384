//! Giving a lease back: the release (exactly one round trip however many callers), the loss
//! it may discover, the hand-off to a lease handle, and the resends: after a Sentinel
//! failover (`Resend`), or in the background when Redis did not answer (`giveback.rs`).

use std::sync::Arc;
use std::time::{Duration, Instant};

use super::observe::Ended;
use super::{Lease, ReleaseOutcome, Releasing};
use crate::error::{Error, Result};
use crate::hold::{Inner, giveback};
use crate::wire::{Form, ReleaseArgs, Renewal};

impl Lease {
    /// Gives the lock back. Exactly one call does the round trip; a concurrent call waits for
    /// it and reports its outcome, and later calls return that outcome. A release that failed
    /// is not recorded, so a later one tries again (and a concurrent one tries itself). The
    /// watchdog is neither woken nor waited for: a renewal still in flight compares the
    /// token, so it cannot bring back a deleted lock or touch a new holder's.
    pub(crate) fn release(&self) -> Result<ReleaseOutcome> {
        self.release_after(self.cooldown)
    }

    /// [`release`](Self::release), keeping the lock ownerless for `cooldown` (zero: none).
    pub(crate) fn release_after(&self, cooldown: Duration) -> Result<ReleaseOutcome> {
        let watched = match self.begin_release() {
            Ok(watched) => watched,
            Err(outcome) => return Ok(outcome),
        };
        self.detach_watchdog();
        // Before the release is sent: its own change must not come back as a loss.
        if watched {
            self.inner.deployment.unwatch(&self.keys, self.id);
        }
        let epoch = self.inner.deployment.epoch();
        let result = self.send_release(cooldown, epoch);
        self.record_release(&result);
        self.log_release(&result, epoch, cooldown);
        self.end_release(&result, cooldown);
        result
    }

    /// Waits for a release in flight, and takes the release on: whether the lock was watched
    /// (to unwatch), or the outcome of a release already done.
    fn begin_release(&self) -> std::result::Result<bool, ReleaseOutcome> {
        let mut st = self.state.lock();
        loop {
            match st.release {
                Releasing::Done(outcome) => return Err(outcome),
                Releasing::InFlight => {
                    st.waiting += 1;
                    self.released.wait(&mut st);
                    st.waiting -= 1;
                }
                Releasing::No => break,
            }
        }
        st.release = Releasing::InFlight;
        Ok(std::mem::take(&mut st.watched))
    }

    /// The one round trip.
    fn send_release(&self, cooldown: Duration, epoch: Option<u64>) -> Result<ReleaseOutcome> {
        let args = ReleaseArgs {
            keys: &self.keys,
            token: &self.token,
            grant: &self.grant,
            registration: &self.registration,
            cooldown,
            undo: false,
            form: Form::of(self.native, self.value.as_deref()),
            routed: false,
        };
        let deployment = &self.inner.deployment;
        match self.ack {
            // Acknowledged like the acquisition, or sent again if the master moves: a release
            // the old master took after the failover would not reach the new one.
            Some(ack) => deployment
                .release_acked(&*self.primitive, &args, ack)
                .map(|(answer, acked)| {
                    if !acked && self.resend_after_move(epoch, cooldown, None) {
                        tracing::debug!(target: "redis_lock", key = %self.name, "release not acknowledged by the replicas; sent again if the sentinels name a new master before it expires");
                    }
                    answer
                }),
            None => deployment.release(&*self.primitive, &args),
        }
        .map(ReleaseOutcome::from)
    }

    /// Ends the hold's span and metrics with the outcome; a release that found the lock gone
    /// or another's records the loss, reported as the watchdog would have if it is news.
    fn record_release(&self, result: &Result<ReleaseOutcome>) {
        let Ok(outcome) = result else {
            return;
        };
        let mut newly_lost = None;
        let (ended, reason) = match outcome {
            ReleaseOutcome::Released | ReleaseOutcome::StillHeld | ReleaseOutcome::HandedOff => {
                (Ended::Released, None)
            }
            ReleaseOutcome::Late | ReleaseOutcome::Lost => {
                let (ended, answer) = if *outcome == ReleaseOutcome::Late {
                    (Ended::Late, Renewal::Gone)
                } else {
                    (Ended::Lost, Renewal::NotOurs)
                };
                let (reason, newly) = self.found_lost(answer);
                newly_lost = newly.then_some(reason);
                (ended, Some(reason))
            }
        };
        {
            let mut hold = self.hold.lock();
            hold.end(ended, reason);
            hold.close();
        }
        if let Some(reason) = newly_lost {
            self.report_lost(reason);
        }
    }

    fn log_release(&self, result: &Result<ReleaseOutcome>, epoch: Option<u64>, cooldown: Duration) {
        let held_for = self.acquired_at.elapsed();
        match result {
            Ok(ReleaseOutcome::Released) => {
                tracing::debug!(target: "redis_lock", key = %self.name, ?held_for, "lock released")
            }
            Ok(outcome) => {
                tracing::warn!(target: "redis_lock", key = %self.name, ?outcome, ?held_for, "lock released late")
            }
            Err(error) if self.resend_after_move(epoch, cooldown, Some(error)) => {
                tracing::warn!(target: "redis_lock", key = %self.name, %error, "releasing lock failed; sent again if the sentinels name a new master before it expires")
            }
            Err(error) => {
                tracing::warn!(target: "redis_lock", key = %self.name, %error, "releasing lock failed; it expires with its ttl")
            }
        }
    }

    /// Records the outcome for the releases waiting on this one, gives the lock back in the
    /// background when nobody else would, and forgets the lease once released.
    fn end_release(&self, result: &Result<ReleaseOutcome>, cooldown: Duration) {
        let (expires_at, give_back) = {
            let mut st = self.state.lock();
            st.release = match result {
                Ok(outcome) => Releasing::Done(*outcome),
                Err(_) => Releasing::No,
            };
            // No guard is left to release it again: no thread holds it any more.
            st.given_up |= result.is_err() && self.holds() == 0;
            // Given up with no answer, and no release waiting to try itself: nobody would own
            // the lock until it expires.
            let give_back = st.given_up
                && st.waiting == 0
                && result.as_ref().is_err_and(Error::is_connection_error);
            (st.expires_at, give_back)
        };
        // Sent again until Redis answers (a token compare: a lock taken by somebody else
        // meanwhile is left alone).
        if give_back {
            tracing::debug!(target: "redis_lock", key = %self.name, "release sent again in the background until Redis answers or the lock expires");
            self.inner
                .give_back(self.give_back_job(cooldown, expires_at, self.value.clone()));
        }
        self.released.notify_all();
        if result.is_ok() {
            self.inner.registry.forget(self);
        }
    }

    /// A release that failed as a failover makes it fail (`error`: the master died or was
    /// demoted, and the sentinels may not name the new one yet), or that the replicas did not
    /// acknowledge (`None`: the master that took it may have been failed over already), made
    /// while the sentinels named the master of `epoch`: the release is sent again, from
    /// another thread, once they name another master, unless the lock has expired by then.
    /// The new master may hold the lock (it was replicated there) and would otherwise keep it
    /// for its whole TTL. Safe to resend: the script compares the owner token, so a lock
    /// taken by somebody else since is left alone. `true` when it is scheduled (a sentinel
    /// master, a failover's error or no acknowledgement, time left).
    fn resend_after_move(
        &self,
        epoch: Option<u64>,
        cooldown: Duration,
        error: Option<&Error>,
    ) -> bool {
        let until = self.state.lock().expires_at;
        if epoch.is_none()
            || error.is_some_and(|e| !crate::deploy::is_failover_error(e))
            || Instant::now() >= until
        {
            return false;
        }
        Resend {
            inner: Arc::downgrade(&self.inner),
            // Sent again after a failover: the script, which reads either form.
            job: self.give_back_job(cooldown, until, None),
        }
        .schedule(&self.inner, epoch)
    }

    /// This lease's release as a job to send again (`giveback.rs`), until `until`; `value`:
    /// what the native fast path wrote, if the release may delete it natively.
    fn give_back_job(
        &self,
        cooldown: Duration,
        until: Instant,
        value: Option<String>,
    ) -> giveback::Job {
        giveback::Job {
            primitive: Arc::clone(&self.primitive),
            keys: self.keys.clone(),
            token: self.token.clone(),
            grant: self.grant.clone(),
            registration: self.registration.clone(),
            cooldown,
            native: self.native,
            value,
            kind: giveback::Kind::Release,
            until,
        }
    }

    /// Gives ownership away without releasing (a lease handle now owns the lock): the
    /// watchdog stops, nothing is sent, and a later release of this lease reports
    /// `HandedOff`. `false` when it was already released or handed off.
    pub(crate) fn hand_off(&self) -> bool {
        {
            let mut st = self.state.lock();
            if st.release != Releasing::No {
                return false;
            }
            st.release = Releasing::Done(ReleaseOutcome::HandedOff);
        }
        self.detach_watchdog();
        self.stop_watching();
        {
            let mut hold = self.hold.lock();
            hold.end(Ended::HandedOff, None);
            hold.close();
        }
        self.released.notify_all();
        self.inner.registry.forget(self);
        tracing::debug!(target: "redis_lock", key = %self.name, "lock handed off through a lease handle");
        true
    }
}

/// A release to send again to the master the sentinels name next (see
/// `Lease::resend_after_move`). Holds the client weakly: a dropped client sends nothing.
/// `Debug` shows the lock's name, never the owner token or grant.
struct Resend {
    inner: std::sync::Weak<Inner>,
    /// The release; its `until` is the lease's local expiry: after it the lock is gone on
    /// every master.
    job: giveback::Job,
}

impl std::fmt::Debug for Resend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Resend").field("job", &self.job).finish()
    }
}

impl Resend {
    fn schedule(self, inner: &Inner, epoch: Option<u64>) -> bool {
        let until = self.job.until;
        inner
            .deployment
            .after_move(epoch, until, Box::new(move || self.run()))
    }

    /// Sends the release to the current master; when that fails too (the new master is not
    /// reachable yet), waits for the next move, until the lock would have expired.
    fn run(self) {
        let Some(inner) = self.inner.upgrade() else {
            return;
        };
        if Instant::now() >= self.job.until {
            return;
        }
        let epoch = inner.deployment.epoch();
        let result = self.job.send(&inner);
        let key = self.job.keys.name().to_owned();
        match result {
            Ok(answer) => {
                tracing::info!(target: "redis_lock", %key, ?answer, "release sent again to the new master")
            }
            Err(error) if crate::deploy::is_failover_error(&error) => {
                tracing::debug!(target: "redis_lock", %key, %error, "the new master did not take the release either; waiting for the next move");
                self.schedule(&inner, epoch);
            }
            Err(error) => {
                tracing::warn!(target: "redis_lock", %key, %error, "sending a release again to the new master failed; the lock expires with its ttl")
            }
        }
    }
}
