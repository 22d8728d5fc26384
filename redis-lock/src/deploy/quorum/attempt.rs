//! One Redlock attempt: asked on every server at once, decided once a majority has the lock
//! (or every server answered), its fencing token settled across that majority, and what the
//! servers that answer late have taken handled by the call's late handler (see the module
//! above for the rules).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;

use super::fan_out::{Ask, Late};
use super::rules::{
    Answers, Verdict, busy_holder, fence_plan, in_time, majority, tally, until_free,
};
use super::{Member, OwnedRelease, Quorum};
use crate::deploy::Attempted;
use crate::deploy::send::{attempt_on, leave_on, release_on};
use crate::error::Result;
use crate::store::Ack;
use crate::wire::seam::{Primitive, not_sound_on_a_quorum};
use crate::wire::token::{new_token, random_below};
use crate::wire::{Attempt, AttemptArgs, Form, LockKeys, ReleaseArgs};

/// When a quorum's servers disagree so that nobody holds a majority, try again after at most
/// this long (randomised, to break ties between clients that keep splitting the servers).
const SPLIT_RETRY_MS: u64 = 20;

/// An attempt's arguments, owned, for the threads that send it to each server.
#[derive(Debug)]
struct OwnedAttempt {
    keys: LockKeys,
    token: String,
    ttl: Duration,
    holder: String,
    meta: String,
    min_hold: Duration,
    waiter: String,
    register: Duration,
    fair: bool,
    registered: bool,
    /// The grant an undo hands the lock over with.
    grant: String,
    since: u64,
}

impl OwnedAttempt {
    fn of(a: &AttemptArgs<'_>, grant: String) -> OwnedAttempt {
        OwnedAttempt {
            keys: a.keys.clone(),
            token: a.token.to_owned(),
            ttl: a.ttl,
            holder: a.holder.to_owned(),
            meta: a.meta.to_owned(),
            min_hold: a.min_hold,
            waiter: a.waiter.to_owned(),
            register: a.register,
            fair: a.fair,
            registered: a.registered,
            grant,
            since: a.since,
        }
    }

    fn args(&self) -> AttemptArgs<'_> {
        AttemptArgs {
            keys: &self.keys,
            token: &self.token,
            ttl: self.ttl,
            holder: &self.holder,
            meta: &self.meta,
            min_hold: self.min_hold,
            waiter: &self.waiter,
            register: self.register,
            fair: self.fair,
            registered: self.registered,
            // A quorum sends each server one script request (the direct path captures one).
            native: None,
            since: self.since,
            burned: None,
        }
    }

    /// Giving up what this attempt may have taken (no minimum hold, no cool-down).
    fn undo(&self) -> ReleaseArgs<'_> {
        ReleaseArgs {
            keys: &self.keys,
            token: &self.token,
            cooldown: Duration::ZERO,
            grant: &self.grant,
            registration: "",
            undo: true,
            // A quorum takes no native path: the lock is a hash.
            form: Form::Hash,
            routed: false,
        }
    }
}

/// A won acquisition with attempts still in flight. A release fans out on its own threads, so
/// on a server where the attempt is late the release could run first, find nothing, and let
/// the attempt take the lock after it: a lock nobody holds, until its TTL. So the release
/// skips the servers still `pending` and marks the acquisition `released`; the late answer,
/// seeing the mark, releases its server, after its attempt, as the holder asked (cool-down
/// included). Kept per owner token and lock name: a multi-lock's members share one token, and
/// each member's release must skip (and be carried out by) that member's own late attempts.
#[derive(Debug)]
pub(super) struct Unsettled {
    /// Servers whose attempt has not answered yet.
    pub(super) pending: Vec<usize>,
    pub(super) released: Option<Arc<OwnedRelease>>,
}

/// The won acquisitions with attempts in flight, by owner token and lock name.
pub(super) type UnsettledMap = Arc<Mutex<HashMap<(String, String), Unsettled>>>;

impl Quorum {
    /// One attempt on every server. A waiter registers on each server that finds the lock
    /// busy (`register`), so that a release on any of them wakes it; its next attempt takes
    /// the grant a release left on each server (see `wait`).
    pub(crate) fn attempt(
        &self,
        p: &dyn Primitive,
        args: &AttemptArgs<'_>,
        ack: Option<Ack>,
    ) -> Result<Attempted> {
        if p.redlock().is_none() {
            return Err(not_sound_on_a_quorum());
        }
        let p = &p.shared();
        let q = majority(self.total());
        let start = Instant::now();
        // The token a release's undo hands the lock over with, if it finds a waiter.
        let sent = Arc::new(OwnedAttempt::of(args, new_token()?));
        let fanned = self.ask_attempt(p, &sent, ack);
        let answers = fanned.answers;
        let mut t = tally(&answers.ok);
        let acquired = if t.acquired.len() >= q {
            self.settle_fence(p, args.keys, args.token, &t.acquired)
                .filter(|_| in_time(start.elapsed(), args.ttl))
        } else {
            None
        };
        // Answers still to come: a registration where the lock is ours is left; a lock taken
        // for an attempt that failed is undone (it may also have been applied when the answer
        // was an error).
        let ours = acquired.is_some();
        self.note_unsettled(ours, &answers, &sent);
        fanned.call.settle(self.late_attempts(p, &sent, ours));
        if let Some(fence) = acquired {
            // The busy minority registered us: a release there must not grant the lock to a
            // waiter that is gone.
            self.leave_busy(p, &sent, &t.busy);
            return Ok(Attempted {
                attempt: Attempt::Acquired { fence },
                wait_on: None,
            });
        }
        self.undo_attempt(p, &sent, &t.busy);
        if answers.has_hard_error() || answers.ok.len() < q {
            // An error ends the acquisition: leave the servers that registered us.
            self.leave_busy(p, &sent, &t.busy);
            let verdict = if answers.has_hard_error() {
                Verdict::Hard
            } else {
                Verdict::NoQuorum
            };
            return self.resolve(args.keys.name(), verdict, answers);
        }
        let wait_on = t.busy.first().map(|(i, _)| *i);
        let jitter = Duration::from_millis(random_below(SPLIT_RETRY_MS));
        let holder_ttl = until_free(q, t.acquired.len(), &mut t.busy, jitter);
        Ok(Attempted {
            attempt: Attempt::Busy {
                holder_ttl: Some(holder_ttl).filter(|d| *d != Duration::MAX),
                block: t.block,
                // Grants are never adopted under Redlock (see `wait`): nothing to vouch for.
                fresh: false,
                server_ms: 0,
                holder: busy_holder(self.total(), &answers.ok).map(Box::new),
            },
            wait_on,
        })
    }

    /// The attempt on every server, decided early only when a majority has it (see the module
    /// comment). With replica acknowledgement each server gets two requests (the script, then
    /// `WAIT`), on the lanes, and may take up to the acknowledgement's timeout on top.
    fn ask_attempt(
        &self,
        p: &Arc<dyn Primitive>,
        sent: &Arc<OwnedAttempt>,
        ack: Option<Ack>,
    ) -> super::fan_out::Fanned<Attempt> {
        let q = majority(self.total());
        let (p, sent) = (Arc::clone(p), Arc::clone(sent));
        let bound = self.bound + ack.map_or(Duration::ZERO, |a| a.timeout);
        // A native attempt (never asked of a quorum today) is two requests: on the lanes too.
        let ask = if ack.is_some() || sent.args().native.is_some() {
            Ask::lane(move |s| attempt_on(s, &*p, &sent.args(), ack))
        } else {
            Ask::request(p.attempt(&sent.args()))
        };
        self.fan_out(
            &self.all(),
            ask,
            move |a: &Answers<Attempt>| tally(&a.ok).acquired.len() >= q,
            bound,
        )
    }

    /// A won acquisition whose attempt is still in flight on some servers is remembered, so
    /// that its release leaves those servers to the late answers (see `Unsettled`).
    fn note_unsettled(&self, ours: bool, answers: &Answers<Attempt>, sent: &OwnedAttempt) {
        let pending: Vec<usize> = (0..self.total())
            .filter(|i| {
                !answers.ok.iter().any(|(a, _)| a == i)
                    && !answers.failed.iter().any(|(f, _)| f == i)
            })
            .collect();
        if ours && !pending.is_empty() {
            self.unsettled.lock().insert(
                (sent.token.clone(), sent.keys.name().to_owned()),
                Unsettled {
                    pending,
                    released: None,
                },
            );
        }
    }

    /// What an answer that arrives after the attempt decided does (on the thread that got
    /// it): for an acquisition that is ours, a late registration as a waiter is left, and a
    /// late lock on a server the holder has released since is released there; for one that is
    /// not, a late lock (or an error, which may have been applied) is undone.
    fn late_attempts(
        &self,
        p: &Arc<dyn Primitive>,
        sent: &Arc<OwnedAttempt>,
        ours: bool,
    ) -> Late<Attempt> {
        let (p, sent) = (Arc::clone(p), Arc::clone(sent));
        let members = self.members.clone();
        let unsettled = Arc::clone(&self.unsettled);
        Box::new(move |i, late: Result<Attempt>| {
            let member: &Member = &members[i];
            let released = if ours {
                settled(&unsettled, &sent, i)
            } else {
                None
            };
            match (ours, late) {
                (true, Ok(Attempt::Busy { block: Some(_), .. })) => {
                    let _ = member.call(|s| {
                        leave_on(s, &*p, &sent.keys, &sent.waiter);
                        Ok(())
                    });
                }
                // Taken here after the holder released it (see `Unsettled`).
                (true, Ok(Attempt::Acquired { .. }) | Err(_)) => {
                    if let Some(release) = released.as_deref().map(OwnedRelease::args) {
                        let _ = member.call(|s| release_on(s, &*p, &release));
                    }
                }
                (false, Ok(Attempt::Acquired { .. }) | Err(_)) => {
                    let _ = member.call(|s| release_on(s, &*p, &sent.undo()));
                }
                _ => {}
            }
        })
    }

    /// Leaves the servers where the attempt found the lock busy and registered us. Nobody
    /// waits for these: a registration left behind lapses by itself.
    fn leave_busy(
        &self,
        p: &Arc<dyn Primitive>,
        sent: &Arc<OwnedAttempt>,
        busy: &[(usize, Option<Duration>)],
    ) {
        if sent.register.is_zero() || busy.is_empty() {
            return;
        }
        let servers: Vec<usize> = busy.iter().map(|(i, _)| *i).collect();
        let (p, sent) = (Arc::clone(p), Arc::clone(sent));
        self.fan_out(
            &servers,
            Ask::lane(move |s| {
                leave_on(s, &*p, &sent.keys, &sent.waiter);
                Ok(())
            }),
            |_| true,
            self.bound,
        )
        .ignore_late();
    }

    /// Not ours: undo everywhere we may have written (a failed reply may still have been
    /// applied), so a partial acquisition blocks nobody for a whole TTL. The undo hands the
    /// lock over to a waiter registered there, as a release does. Every answer is in (or
    /// counted failed at the deadline), so each undo follows its attempt on its server.
    fn undo_attempt(
        &self,
        p: &Arc<dyn Primitive>,
        sent: &Arc<OwnedAttempt>,
        busy: &[(usize, Option<Duration>)],
    ) {
        let undo: Vec<usize> = (0..self.total())
            .filter(|i| !busy.iter().any(|(b, _)| b == i))
            .collect();
        if undo.is_empty() {
            return;
        }
        self.fan_out(
            &undo,
            Ask::request(p.release(&sent.undo())),
            |_| false,
            self.bound,
        )
        .ignore_late();
    }

    /// The token of an acquisition held on `acquired` (server, counter) pairs: the highest
    /// counter, once a majority has a counter at least that high (servers behind are raised,
    /// all at once). `None` when too few servers could be raised (the lock is then released
    /// by the caller).
    fn settle_fence(
        &self,
        p: &Arc<dyn Primitive>,
        keys: &LockKeys,
        token: &str,
        acquired: &[(usize, u64)],
    ) -> Option<u64> {
        let (fence, behind) = fence_plan(acquired)?;
        let mut settled = acquired.len() - behind.len();
        let q = majority(self.total());
        if settled < q {
            let (p, k, token) = (Arc::clone(p), keys.clone(), token.to_owned());
            let raised = self
                .fan_out(
                    &behind,
                    Ask::lane(move |s| {
                        // Checked as the attempt began: only a primitive sound on a quorum
                        // gets this far.
                        let redlock = p.redlock().ok_or_else(not_sound_on_a_quorum)?;
                        let mut conn = s.conn()?;
                        redlock.raise_fence(&k, &token, fence).on(&mut conn)
                    }),
                    |_| false,
                    self.bound,
                )
                .ignore_late();
            let up = raised.ok.iter().filter(|(_, r)| *r).count();
            if up > 0 {
                tracing::debug!(target: "redis_lock", key = keys.name(), to = fence, servers = up, "redlock: fencing counters caught up");
            }
            settled += up;
        }
        (settled >= q).then_some(fence)
    }
}

/// Server `i`'s late attempt answered: it is no longer pending for the acquisition `sent`
/// (forgotten once none is). The release the holder asked for meanwhile, if any.
fn settled(unsettled: &UnsettledMap, sent: &OwnedAttempt, i: usize) -> Option<Arc<OwnedRelease>> {
    let mut all = unsettled.lock();
    let at = (sent.token.clone(), sent.keys.name().to_owned());
    let u = all.get_mut(&at)?;
    u.pending.retain(|p| *p != i);
    let released = u.released.clone();
    if u.pending.is_empty() {
        all.remove(&at);
    }
    released
}
