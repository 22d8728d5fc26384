//! Watching a lease (loss notification): the watchdog's check, which registers the lease
//! with the store's notifier and asks Redis whether the lock is still ours; the notifier's
//! nudge when somebody else changed the key; and unregistering on every path.

use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use super::{Lease, loss};
use crate::deploy::Watched;
use crate::store::notify::Watcher;
use crate::wire::{OwnedTtl, Renewal};

/// A failed check is asked again after this (times the failures so far), up to
/// `CHECK_RETRIES` times.
const CHECK_RETRY_AFTER: Duration = Duration::from_millis(50);
const CHECK_RETRIES: u32 = 3;

impl Lease {
    /// The watchdog's check, when the lock has been held for [`WATCH_AFTER`] and after every
    /// announced change: registers the lease for notification of changes to its lock and
    /// asks Redis, on the connection that keeps the key tracked, whether the lock is still
    /// ours. `true` when the watchdog is done with this lease (lost). A failed check changes
    /// nothing: the renewals go on and find out what the failure means.
    pub(crate) fn check_now(self: &Arc<Self>) -> bool {
        let expires_at = {
            let mut st = self.state.lock();
            st.check = false;
            st.watch_at = None;
            if st.stopped() {
                return st.lost.is_some();
            }
            st.watched = true;
            st.expires_at
        };
        let watcher: Weak<dyn Watcher> = Arc::downgrade(self) as Weak<dyn Watcher>;
        let checked = self.bounded_by_expiry(expires_at, || {
            self.inner.deployment.watch(
                &*self.primitive,
                &self.keys,
                &self.token,
                self.id,
                &watcher,
            )
        });
        // Released or lost while the check was out: that unregistration may have come before
        // this registration, and whoever stopped the lease took the `watched` flag with it,
        // so the registration is undone here, whatever the check answered.
        if self.unwatch_if_stopped() {
            return self.state.lock().lost.is_some();
        }
        let answer = match checked {
            Watched::Off => {
                // No server of this deployment notifies: the renewals are the detector.
                self.state.lock().watched = false;
                return false;
            }
            // Checked once the listener listens (it tells every watcher).
            Watched::Pending => return false,
            Watched::Checked(Ok(OwnedTtl::Left(_) | OwnedTtl::NoExpiry)) => {
                self.state.lock().check_failures = 0;
                return false;
            }
            Watched::Checked(Ok(OwnedTtl::Gone)) => Renewal::Gone,
            Watched::Checked(Ok(OwnedTtl::NotOurs)) => Renewal::NotOurs,
            Watched::Checked(Err(error)) => {
                // Asked again a little later (a pooled connection that broke with a restart
                // fails once, the next is new), a few times; then the renewals find out.
                let mut st = self.state.lock();
                st.check_failures += 1;
                if st.check_failures <= CHECK_RETRIES {
                    st.watch_at = Instant::now().checked_add(CHECK_RETRY_AFTER * st.check_failures);
                }
                tracing::debug!(target: "redis_lock", key = %self.name, %error, "checking a watched lock failed");
                return false;
            }
        };
        let expires_at = self.state.lock().expires_at;
        // Stopped meanwhile: `mark_lost` does nothing, and the release or loss that stopped
        // it unregistered (the registration had landed by then).
        self.mark_lost(loss(answer, Instant::now(), expires_at));
        true
    }

    /// Unregisters from loss notification, if registered (a release, a loss).
    pub(super) fn stop_watching(&self) {
        if std::mem::take(&mut self.state.lock().watched) {
            self.inner.deployment.unwatch(&self.keys, self.id);
        }
    }

    /// After a check's registration has landed: when the lease was stopped meanwhile,
    /// unregisters (unconditionally: the release or loss that stopped it may have taken the
    /// `watched` flag and unregistered before the registration arrived). `true` when stopped.
    fn unwatch_if_stopped(&self) -> bool {
        {
            let mut st = self.state.lock();
            if !st.stopped() {
                return false;
            }
            st.watched = false;
        }
        self.inner.deployment.unwatch(&self.keys, self.id);
        true
    }
}

/// Told by the store's loss notification that somebody changed this lock's key: the
/// watchdog checks at once.
impl Watcher for Lease {
    fn changed(&self) {
        {
            let mut st = self.state.lock();
            if st.stopped() {
                return;
            }
            st.check = true;
        }
        let renewer = self.watchdog.lock().clone();
        if let Some(renewer) = renewer {
            renewer.nudge();
        }
    }
}
