//! The lease: the state one held lock shares between its guard(s) and its watchdog thread.
//!
//! Its state is private and changes only through the methods of this module and its three
//! protocols, one file each: `renew.rs` (renewal, claim, extend, the expiry alarm),
//! `watch.rs` (loss notification) and `release.rs` (release, hand-off, resends). Here: the
//! state machine (`State`, `Next`), how a lease starts, and how a loss is recorded and
//! reported. The renewal interval (`renew_after`) and the mapping from Redis's answer to a
//! loss reason (`loss`) are each written once, in this file.

mod release;
mod renew;
mod watch;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex};

use super::observe::{self, Ended, Hold};
use super::primitive::Lock;
use super::{Inner, Kind};
use crate::error::{Error, LostReason, Result};
use crate::options::{LockOptions, LostCallback, LostEvent};
use crate::store::Ack;
use crate::wire::commit::{self, Committed};
use crate::wire::{LockKeys, OwnedTtl, Release, Renewal};

/// The thread that renews a lease, as the lease sees it. The watchdog (`watchdog.rs`)
/// implements it and talks only to the lease; the lease knows no more of it than this.
pub(crate) trait Renewer: Send + Sync {
    /// The lease's renewal schedule moved (`extend`): plan again.
    fn nudge(&self);
    /// The lease is released or handed off: the thread may take a new lease at once. It is
    /// not woken; it finds the lease stopped when it next looks.
    fn detach(self: Arc<Self>);
}

/// What happened when a lock was given back.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum ReleaseOutcome {
    /// The lock was ours and is free now (or, with a minimum hold, stays taken by nobody until
    /// the minimum has passed).
    Released,
    /// The lock was already gone and nobody holds it: it expired, or was deleted (an
    /// operator's [`force_release`](crate::LockClient::force_release)) while nobody waited. It
    /// was not protected for part of the time the holder thought it was.
    Late,
    /// Somebody else holds the lock now. Their lock was left untouched.
    Lost,
    /// Other guards of the same reentrant acquisition are still alive; the lock is released
    /// when the last of them is gone.
    StillHeld,
    /// Ownership was given to a [`LeaseHandle`](crate::LeaseHandle)
    /// ([`LockGuard::into_handle`](crate::LockGuard::into_handle)): nothing was sent, and the
    /// lock stays held for whoever has the handle.
    HandedOff,
}

impl ReleaseOutcome {
    /// `true` for [`Released`](Self::Released), [`StillHeld`](Self::StillHeld) and
    /// [`HandedOff`](Self::HandedOff): the lock protected the holder the whole time.
    pub fn is_clean(self) -> bool {
        matches!(
            self,
            ReleaseOutcome::Released | ReleaseOutcome::StillHeld | ReleaseOutcome::HandedOff
        )
    }
}

impl From<Release> for ReleaseOutcome {
    fn from(r: Release) -> ReleaseOutcome {
        match r {
            Release::Released | Release::Kept => ReleaseOutcome::Released,
            Release::Late => ReleaseOutcome::Late,
            Release::Lost => ReleaseOutcome::Lost,
        }
    }
}

/// When the watchdog renews a lock whose TTL `ttl` was set at `sent`: after a third of it,
/// leaving two thirds for a renewal to get through.
pub(crate) fn renew_after(sent: Instant, ttl: Duration) -> Instant {
    sent + ttl / 3
}

/// Why a lock is lost, from what Redis answered about it at `now`. A key that is gone before
/// the conservative local expiry cannot have expired (the local expiry is never later than
/// Redis's): somebody deleted it.
pub(crate) fn loss(answer: Renewal, now: Instant, expires_at: Instant) -> LostReason {
    match answer {
        Renewal::Gone if now < expires_at => LostReason::Deleted,
        Renewal::Gone | Renewal::Renewed => LostReason::Expired,
        Renewal::NotOurs => LostReason::TakenOver,
    }
}

/// How long a lock is held before its watchdog asks to be told of changes to it (loss
/// notification, `store/notify/`): one request, which a lock given back sooner never
/// sends. A change before then is found by that request itself (it checks the owner), so a
/// loss is known at most this plus a round trip after it happened.
pub(crate) const WATCH_AFTER: Duration = Duration::from_millis(2);

/// How a lease starts.
pub(crate) struct Start {
    pub(crate) token: String,
    pub(crate) fence: u64,
    /// When the lock became ours (what `held_for` and `max_hold` count from).
    pub(crate) acquired: Instant,
    /// When the request that set the lock's current TTL was sent.
    pub(crate) sent: Instant,
    /// The TTL that request set in Redis (the handoff grace for a grant adopted unclaimed).
    pub(crate) set_ttl: Duration,
    /// The TTL renewals extend to.
    pub(crate) ttl: Duration,
    /// Set for a lock taken by popping a grant that still lacks this holder's information:
    /// the metadata to write. The watchdog's first renewal claims it.
    pub(crate) unclaimed: Option<String>,
    /// A waiter registration of this acquisition that Redis still has, or "".
    pub(crate) registration: String,
    /// Most likely taken on the primitive's native fast path (the attempt was allowed to
    /// take it), rather than through a script, a grant or a claim.
    pub(crate) native: bool,
    /// What that fast path wrote (`wire::seam::Native`), when known: a server with a
    /// native compare-and-delete releases the lock with it.
    pub(crate) value: Option<String>,
    /// The owner token the release hands to the waiter it wakes.
    pub(crate) grant: String,
    pub(crate) max_hold: Option<Duration>,
    /// How long every release keeps the lock ownerless (zero: none).
    pub(crate) cooldown: Duration,
    pub(crate) on_lost: Option<LostCallback>,
    /// The replica acknowledgement the acquisition asked for: on a sentinel master the release
    /// asks for it too (see `Lease::release_after`).
    pub(crate) ack: Option<Ack>,
}

/// Where a release stands; concurrent releases of one lease wait for the one in flight.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Releasing {
    No,
    InFlight,
    Done(ReleaseOutcome),
}

#[derive(Debug)]
struct State {
    /// The TTL renewals extend to (changed by `extend`).
    ttl: Duration,
    /// Local, conservative estimate of when the lock expires in Redis.
    expires_at: Instant,
    /// When the watchdog renews next.
    next_renew: Instant,
    /// Set once, by whoever notices first.
    lost: Option<LostReason>,
    release: Releasing,
    /// After this the watchdog stops renewing (`max_hold`).
    renew_until: Option<Instant>,
    unclaimed: Option<String>,
    /// When the watchdog first asks to be told of changes to the lock (`watch`): a lock given
    /// back sooner costs nothing for it. `None` once asked.
    watch_at: Option<Instant>,
    /// A change to the lock was announced (`store/notify/`): the watchdog checks at once.
    check: bool,
    /// Registered with the store's notification: a release or loss unregisters.
    watched: bool,
    /// Checks that failed in a row (a connection that broke with a restart fails once).
    check_failures: u32,
    /// The last guard's release failed: given up as far as this process's threads are
    /// concerned (not held here any more), though a later release may still be sent.
    given_up: bool,
    /// Releases waiting for the one in flight: when it fails, one of them sends again.
    waiting: u32,
}

/// What the watchdog does next with a lease.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Next {
    /// Released or lost: nothing more to do.
    Stopped,
    Sleep(Instant),
    Renew,
    /// Ask Redis whether the lock is still ours (and have it tell us of changes from now on).
    Check,
    /// `max_hold` reached and the TTL ran out.
    MaxHoldExpired,
}

impl State {
    /// The lock's TTL was set to `set_ttl` by a request sent at `sent`, valid until `valid`.
    fn set(&mut self, sent: Instant, set_ttl: Duration, valid: Instant) {
        self.expires_at = valid;
        self.next_renew = renew_after(sent, set_ttl);
    }

    fn stopped(&self) -> bool {
        self.lost.is_some() || self.release != Releasing::No
    }

    fn next(&self, now: Instant) -> Next {
        if self.stopped() {
            return Next::Stopped;
        }
        if self.check || self.watch_at.is_some_and(|at| now >= at) {
            return Next::Check;
        }
        if now < self.next_renew {
            return Next::Sleep(self.first_look());
        }
        if self.renew_until.is_some_and(|cap| now >= cap) {
            // max_hold reached: stop renewing, and report the loss when the TTL has run out.
            return if now >= self.expires_at {
                Next::MaxHoldExpired
            } else {
                Next::Sleep(self.expires_at)
            };
        }
        Next::Renew
    }

    /// The next time the watchdog has anything to do: renew, or start watching.
    fn first_look(&self) -> Instant {
        self.watch_at
            .map_or(self.next_renew, |at| at.min(self.next_renew))
    }

    /// A renewal failed with an error at `now`: retry after a short backoff, but not past
    /// the expiry; `true` when the lock has run out meanwhile.
    fn renewal_failed(&mut self, now: Instant) -> bool {
        if now >= self.expires_at {
            return true;
        }
        let backoff = (self.ttl / 10).clamp(Duration::from_millis(10), Duration::from_secs(1));
        self.next_renew = (now + backoff).min(self.expires_at);
        false
    }
}

pub(crate) struct Lease {
    /// Key of this lease in the client's registry of held locks.
    pub(crate) id: u64,
    pub(crate) inner: Arc<Inner>,
    primitive: Arc<dyn Lock>,
    pub(crate) name: String,
    pub(crate) keys: LockKeys,
    pub(crate) token: String,
    pub(crate) fence: u64,
    grant: String,
    registration: String,
    /// Most likely taken on the primitive's native fast path (see `wire::Form`).
    native: bool,
    /// What the native fast path wrote, when known (see `wire::Form::Written`). Secret as the
    /// token is (it starts with it): never in `Debug` or logs.
    value: Option<String>,
    cooldown: Duration,
    ack: Option<Ack>,
    pub(crate) acquired_at: Instant,
    /// Guards alive for this acquisition (more than one only through reentrancy).
    holds: AtomicUsize,
    state: Mutex<State>,
    /// Wakes releases waiting for the one in flight.
    released: Condvar,
    /// The renewal thread serving this lease, until release (or loss) frees it.
    pub(crate) watchdog: Mutex<Option<Arc<dyn Renewer>>>,
    on_lost: Option<LostCallback>,
    /// The hold's span and metrics; ended at the loss or the release, closed on drop.
    hold: Mutex<Hold>,
}

impl std::fmt::Debug for Lease {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // No token: it is what lets a holder renew and release.
        f.debug_struct("Lease")
            .field("name", &self.name)
            .field("fence", &self.fence)
            .finish_non_exhaustive()
    }
}

impl Lease {
    pub(crate) fn new(
        id: u64,
        inner: Arc<Inner>,
        primitive: Arc<dyn Lock>,
        name: &str,
        keys: LockKeys,
        start: Start,
        hold: Hold,
    ) -> Lease {
        let valid = inner.valid_until(start.sent, start.set_ttl);
        let mut state = State {
            ttl: start.ttl,
            expires_at: valid,
            next_renew: valid,
            lost: None,
            release: Releasing::No,
            renew_until: start.max_hold.and_then(|m| start.acquired.checked_add(m)),
            unclaimed: start.unclaimed,
            watch_at: start.acquired.checked_add(WATCH_AFTER),
            check: false,
            watched: false,
            check_failures: 0,
            given_up: false,
            waiting: 0,
        };
        state.set(start.sent, start.set_ttl, valid);
        Lease {
            id,
            inner,
            primitive,
            name: name.to_owned(),
            keys,
            token: start.token,
            fence: start.fence,
            grant: start.grant,
            registration: start.registration,
            native: start.native,
            value: start.value,
            cooldown: start.cooldown,
            ack: start.ack,
            acquired_at: start.acquired,
            holds: AtomicUsize::new(1),
            state: Mutex::new(state),
            released: Condvar::new(),
            watchdog: Mutex::new(None),
            on_lost: start.on_lost,
            hold: Mutex::new(hold),
        }
    }

    /// Records the loss once: log event, then the user's callback (outside the state lock).
    pub(crate) fn mark_lost(&self, reason: LostReason) {
        {
            let mut st = self.state.lock();
            if st.stopped() {
                return;
            }
            st.lost = Some(reason);
        }
        self.stop_watching();
        self.hold.lock().end(Ended::from_loss(reason), Some(reason));
        self.report_lost(reason);
    }

    /// The event and the user's callback for a loss just recorded (once per lease).
    fn report_lost(&self, reason: LostReason) {
        tracing::warn!(target: "redis_lock", key = %self.name, %reason, "lock lost");
        if let Some(cb) = &self.on_lost {
            cb(&LostEvent {
                key: self.name.clone(),
                reason,
            });
        }
    }

    /// Replaces the metadata stored with this lock (a leader's value, a holder's progress);
    /// [`Error::Lost`] (the lease marked lost) when it is not ours any more.
    pub(crate) fn proclaim(&self, meta: &str) -> Result<()> {
        match self.inner.deployment.proclaim(
            &*self.primitive,
            &self.keys,
            &self.token,
            meta,
            &self.inner.holder,
        )? {
            OwnedTtl::Gone => Err(self.lost(Renewal::Gone)),
            OwnedTtl::NotOurs => Err(self.lost(Renewal::NotOurs)),
            OwnedTtl::Left(_) | OwnedTtl::NoExpiry => Ok(()),
        }
    }

    /// Taken by popping a grant whose holder information is not written yet (the watchdog's
    /// first renewal claims it).
    pub(crate) fn is_unclaimed(&self) -> bool {
        self.state.lock().unclaimed.is_some()
    }

    /// Marks the lease lost for `answer` and returns the error to report.
    fn lost(&self, answer: Renewal) -> Error {
        let expires_at = self.state.lock().expires_at;
        let reason = loss(answer, Instant::now(), expires_at);
        self.mark_lost(reason);
        Error::Lost {
            key: self.name.clone(),
            reason,
        }
    }

    /// Why a release found the lock no longer ours (`answer`: gone, or somebody else's), kept
    /// as the lease's loss: what the watchdog saw, if it saw it first; else as the watchdog
    /// would judge it (gone: `Deleted` before the local expiry, which is never later than
    /// Redis's, `Expired` after it; somebody else's: `TakenOver`). `true` when this is how
    /// the loss became known: the caller reports it as the watchdog would have (the event and
    /// `on_lost`), since a holder paused past its TTL that releases as soon as it runs again
    /// beats its watchdog to the news.
    fn found_lost(&self, answer: Renewal) -> (LostReason, bool) {
        let mut st = self.state.lock();
        match st.lost {
            Some(seen) => (seen, false),
            None => {
                let judged = loss(answer, Instant::now(), st.expires_at);
                st.lost = Some(judged);
                (judged, true)
            }
        }
    }

    /// Why the lock is no longer held, if it is not: a loss seen by the watchdog, or the local
    /// expiry estimate running out (no watchdog, or renewals not getting through); after a
    /// `Late` release, why the release found it gone.
    pub(crate) fn lost_reason(&self) -> Option<LostReason> {
        let st = self.state.lock();
        st.lost
            .or(match st.release {
                // Given up by this process while a guard lives on: `release_all`, or a
                // reentrant sibling's `into_handle`. (A `Late` release kept its reason in
                // `lost`, `found_gone`.)
                Releasing::Done(ReleaseOutcome::Released | ReleaseOutcome::HandedOff) => {
                    Some(LostReason::Released)
                }
                Releasing::Done(ReleaseOutcome::Lost) => Some(LostReason::TakenOver),
                _ => None,
            })
            .or_else(|| (Instant::now() >= st.expires_at).then_some(LostReason::Expired))
    }

    /// Released, handed off, or given up by a release of its last guard that failed.
    pub(crate) fn is_released(&self) -> bool {
        let st = self.state.lock();
        st.release != Releasing::No || st.given_up
    }

    /// The watchdog's next step at `now`.
    pub(crate) fn next(&self, now: Instant) -> Next {
        self.state.lock().next(now)
    }

    /// When the watchdog should first look at this lease.
    pub(crate) fn first_renewal(&self) -> Instant {
        self.state.lock().first_look()
    }

    /// Frees the renewal thread for another lease (release, hand-off).
    fn detach_watchdog(&self) {
        let renewer = self.watchdog.lock().take();
        if let Some(renewer) = renewer {
            renewer.detach();
        }
    }

    /// The primitive's kind.
    pub(crate) fn kind(&self) -> Kind {
        self.primitive.kind()
    }

    /// `Err` when a release of this lease cannot keep it ownerless for `cooldown` (a permit):
    /// the primitive's one check of options, asked for that cool-down alone.
    pub(crate) fn check_cooldown(&self, cooldown: Duration) -> Result<()> {
        self.primitive
            .check(&LockOptions::new().cooldown(cooldown), false)
    }

    /// The TTL renewals extend to, and the local estimate of the expiry.
    pub(crate) fn ttl_and_expiry(&self) -> (Duration, Instant) {
        let st = self.state.lock();
        (st.ttl, st.expires_at)
    }

    /// Guards alive for this acquisition.
    pub(crate) fn holds(&self) -> usize {
        self.holds.load(Ordering::Acquire)
    }

    pub(crate) fn add_hold(&self) {
        self.holds.fetch_add(1, Ordering::AcqRel);
    }

    /// Drops one hold; `true` when it was the last one.
    pub(crate) fn drop_hold(&self) -> bool {
        self.holds.fetch_sub(1, Ordering::AcqRel) == 1
    }
}

/// Whatever a lease registered goes with it, on whichever path it ended (a release that
/// failed, a loss, a hand-off, a race between them): its registry entry, and its watch when
/// one is still recorded. The paths unregister eagerly; this is what makes a missed one
/// unable to pin the lease's memory for the life of the client.
impl Drop for Lease {
    fn drop(&mut self) {
        self.inner.registry.forget(self);
        if std::mem::take(&mut self.state.get_mut().watched) {
            self.inner.deployment.unwatch(&self.keys, self.id);
        }
    }
}

/// Runs `commands` under `leases` (one lock, with its primitive's check; or the mutex members
/// of a multi-lock, every one checked), atomically with the check (`Deployment::commit`):
/// their replies; or [`Error::Lost`] with nothing run and the lease that was not ours marked
/// lost; or [`Error::ReplicaAck`] when the lock was taken with a replica acknowledgement that
/// the commit's writes did not get in time (they were applied on the master).
pub(crate) fn commit(leases: &[&Lease], commands: &[Vec<&[u8]>]) -> Result<Vec<redis::Value>> {
    let Some(first) = leases.first() else {
        return Err(Error::invalid("commit", "no lock to commit under"));
    };
    let check = match leases {
        [one] => one.primitive.commit_check(&one.keys),
        all => commit::all_check(&all.iter().map(|l| &l.keys).collect::<Vec<_>>()),
    };
    let tokens: Vec<&str> = leases.iter().map(|l| l.token.as_str()).collect();
    let (committed, acked) = first
        .inner
        .deployment
        .commit(&check, &tokens, commands, first.ack)?;
    match committed {
        Committed::Applied(replies) => match (first.ack, acked) {
            (Some(ack), Some(acked)) if acked < ack.count => Err(Error::ReplicaAck {
                key: first.name.clone(),
                required: ack.count,
                acked,
            }),
            _ => Ok(replies),
        },
        Committed::Lost { why, member } => {
            let lease = leases.get(member).unwrap_or(first);
            Err(lease.lost(match why {
                OwnedTtl::Gone => Renewal::Gone,
                _ => Renewal::NotOurs,
            }))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    fn state(now: Instant) -> State {
        let mut st = State {
            ttl: 300 * MS,
            expires_at: now,
            next_renew: now,
            lost: None,
            release: Releasing::No,
            renew_until: None,
            unclaimed: None,
            watch_at: None,
            check: false,
            watched: false,
            check_failures: 0,
            given_up: false,
            waiting: 0,
        };
        st.set(now, 300 * MS, now + 300 * MS);
        st
    }

    #[test]
    fn a_lock_is_watched_after_two_milliseconds_and_checked_when_told() {
        let t0 = Instant::now();
        let mut st = state(t0);
        st.watch_at = Some(t0 + WATCH_AFTER);
        assert_eq!(st.next(t0), Next::Sleep(t0 + WATCH_AFTER), "wakes to watch");
        assert_eq!(st.next(t0 + WATCH_AFTER), Next::Check);
        st.watch_at = None;
        assert_eq!(
            st.next(t0 + 10 * MS),
            Next::Sleep(t0 + 100 * MS),
            "then renews"
        );
        st.check = true;
        assert_eq!(st.next(t0 + 10 * MS), Next::Check, "an announced change");
        st.release = Releasing::InFlight;
        assert_eq!(st.next(t0 + 10 * MS), Next::Stopped, "not after a release");
    }

    #[test]
    fn renewal_is_due_after_a_third_of_the_ttl() {
        let t0 = Instant::now();
        let st = state(t0);
        assert_eq!(st.next(t0), Next::Sleep(t0 + 100 * MS));
        assert_eq!(st.next(t0 + 100 * MS), Next::Renew);
    }

    #[test]
    fn released_or_lost_leases_stop_the_watchdog() {
        let t0 = Instant::now();
        let mut st = state(t0);
        st.release = Releasing::InFlight;
        assert_eq!(st.next(t0 + 200 * MS), Next::Stopped);
        let mut st = state(t0);
        st.lost = Some(LostReason::TakenOver);
        assert_eq!(st.next(t0 + 200 * MS), Next::Stopped);
    }

    #[test]
    fn max_hold_stops_renewing_and_reports_at_expiry() {
        let t0 = Instant::now();
        let mut st = state(t0);
        st.renew_until = Some(t0 + 50 * MS);
        assert_eq!(st.next(t0 + 100 * MS), Next::Sleep(t0 + 300 * MS));
        assert_eq!(st.next(t0 + 300 * MS), Next::MaxHoldExpired);
    }

    #[test]
    fn failed_renewals_back_off_but_not_past_the_expiry() {
        let t0 = Instant::now();
        let mut st = state(t0);
        assert!(!st.renewal_failed(t0 + 100 * MS));
        assert_eq!(st.next_renew, t0 + 130 * MS, "ttl / 10 later");
        assert!(!st.renewal_failed(t0 + 295 * MS));
        assert_eq!(st.next_renew, t0 + 300 * MS, "capped at the expiry");
        assert!(st.renewal_failed(t0 + 300 * MS), "out of time: lost");
    }

    #[test]
    fn a_key_gone_before_its_expiry_was_deleted() {
        let t0 = Instant::now();
        let exp = t0 + 300 * MS;
        assert_eq!(loss(Renewal::Gone, t0, exp), LostReason::Deleted);
        assert_eq!(loss(Renewal::Gone, exp, exp), LostReason::Expired);
        assert_eq!(loss(Renewal::NotOurs, t0, exp), LostReason::TakenOver);
    }

    #[test]
    fn release_answers_map_to_outcomes() {
        assert_eq!(
            ReleaseOutcome::from(Release::Kept),
            ReleaseOutcome::Released
        );
        assert_eq!(ReleaseOutcome::from(Release::Late), ReleaseOutcome::Late);
        assert_eq!(ReleaseOutcome::from(Release::Lost), ReleaseOutcome::Lost);
    }
}
