//! The state one held lock shares between its guard(s) and its watchdog thread.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use parking_lot::Mutex;

use crate::error::{LostReason, Result};
use crate::keys::LockKeys;
use crate::ops::Inner;
use crate::options::{LostCallback, LostEvent};

/// What happened when a lock was given back.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum ReleaseOutcome {
    /// The lock was ours and is free now (or, with a minimum hold, stays taken by nobody until
    /// the minimum has passed).
    Released,
    /// The lock had already expired and nobody holds it: it was not protected for part of
    /// the time the holder thought it was.
    Late,
    /// Somebody else holds the lock now. Their lock was left untouched.
    Lost,
    /// Other guards of the same reentrant acquisition are still alive; the lock is released
    /// when the last of them is gone.
    StillHeld,
}

impl ReleaseOutcome {
    /// `true` for [`Released`](Self::Released) and [`StillHeld`](Self::StillHeld): the lock
    /// protected the holder the whole time.
    pub fn is_clean(self) -> bool {
        matches!(self, ReleaseOutcome::Released | ReleaseOutcome::StillHeld)
    }
}

pub(crate) struct LeaseState {
    /// The TTL renewals extend to (changed by `extend`).
    pub(crate) ttl: Duration,
    /// Local, conservative estimate of when the lock expires in Redis: measured from before
    /// the request that set the TTL was sent.
    pub(crate) expires_at: Instant,
    /// When the watchdog renews next.
    pub(crate) next_renew: Instant,
    /// Set once, by whoever notices first.
    pub(crate) lost: Option<LostReason>,
    /// Tells the watchdog to stop; set by release.
    pub(crate) stop: bool,
    /// The result of the one release that ran.
    pub(crate) released: Option<ReleaseOutcome>,
    /// After this the watchdog stops renewing (`max_hold`).
    pub(crate) renew_until: Option<Instant>,
    /// Set while the lock, taken by popping a release's grant, still lacks this holder's
    /// information and full TTL: the metadata to write. The watchdog's next renewal claims it.
    pub(crate) unclaimed: Option<String>,
}

pub(crate) struct Lease {
    /// Key of this lease in the client's registry of held locks.
    pub(crate) id: u64,
    pub(crate) inner: Arc<Inner>,
    pub(crate) name: String,
    pub(crate) keys: LockKeys,
    pub(crate) token: String,
    pub(crate) fence: u64,
    /// The owner token the release hands to the waiter it wakes.
    pub(crate) grant: String,
    /// A waiter registration of this acquisition that Redis still has (a grant taken by
    /// popping it leaves one): the release removes it. Empty when there is none.
    pub(crate) registration: String,
    pub(crate) acquired_at: Instant,
    /// Guards alive for this acquisition (more than one only through reentrancy).
    pub(crate) holds: AtomicUsize,
    pub(crate) state: Mutex<LeaseState>,
    /// The renewal thread serving this lease, until release (or loss) frees it for the next
    /// lease.
    pub(crate) watchdog: Mutex<Option<Arc<crate::watchdog::Worker>>>,
    pub(crate) on_lost: Option<LostCallback>,
}

impl Lease {
    /// Records the loss once: log event, then the user's callback (outside the state lock).
    pub(crate) fn mark_lost(&self, reason: LostReason) {
        {
            let mut st = self.state.lock();
            if st.lost.is_some() || st.released.is_some() {
                return;
            }
            st.lost = Some(reason);
        }
        tracing::warn!(target: "redis_lock", key = %self.name, %reason, "lock lost");
        if let Some(cb) = &self.on_lost {
            cb(&LostEvent {
                key: self.name.clone(),
                reason,
            });
        }
    }

    /// Why the lock is no longer held, if it is not: a loss seen by the watchdog, or the local
    /// expiry estimate running out (no watchdog, or renewals not getting through).
    pub(crate) fn lost_reason(&self) -> Option<LostReason> {
        let st = self.state.lock();
        st.lost
            .or_else(|| (Instant::now() >= st.expires_at).then_some(LostReason::Expired))
    }

    pub(crate) fn is_released(&self) -> bool {
        self.state.lock().released.is_some()
    }

    /// Gives the lock back, once; later calls return the first outcome. The watchdog is told
    /// to stop first but neither woken nor waited for: a renewal still in flight compares the
    /// token, so it cannot bring back a deleted lock or touch a new holder's.
    pub(crate) fn release(&self) -> Result<ReleaseOutcome> {
        {
            let mut st = self.state.lock();
            if let Some(done) = st.released {
                return Ok(done);
            }
            st.stop = true;
            // Set before the round trip so a concurrent `release_all` does not release twice;
            // corrected below once Redis has answered.
            st.released = Some(ReleaseOutcome::Released);
        }
        crate::watchdog::detach(self);
        let result = self
            .inner
            .release(&self.keys, &self.token, &self.grant, &self.registration);
        self.inner.forget(self);
        let held_for = self.acquired_at.elapsed();
        match &result {
            Ok(ReleaseOutcome::Released) => {
                tracing::debug!(target: "redis_lock", key = %self.name, ?held_for, "lock released")
            }
            Ok(outcome) => {
                tracing::warn!(target: "redis_lock", key = %self.name, ?outcome, ?held_for, "lock released late")
            }
            Err(error) => {
                tracing::warn!(target: "redis_lock", key = %self.name, %error, "releasing lock failed; it expires with its ttl")
            }
        }
        // A failed release is not recorded as done: a later `release` (the guard's, after a
        // failed `release_all`) tries again instead of reporting a release that never happened.
        self.state.lock().released = result.as_ref().ok().copied();
        result
    }

    pub(crate) fn add_hold(&self) {
        self.holds.fetch_add(1, Ordering::AcqRel);
    }

    /// Drops one hold; `true` when it was the last one.
    pub(crate) fn drop_hold(&self) -> bool {
        self.holds.fetch_sub(1, Ordering::AcqRel) == 1
    }
}
