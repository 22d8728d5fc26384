//! Redlock: one lock over N independent Redis servers, held while a majority holds it.
//!
//! Each operation runs the single-server script on every server at once and combines the
//! answers. An attempt, renewal or release is asked by the calling thread itself on every
//! server with an idle plain connection: it writes the request to each, then `poll(2)`s the
//! sockets and decodes each reply as it is whole (`fan_out_direct`, `store/direct.rs`), so an
//! uncontended call wakes no other thread; the rest goes to a few long-lived threads per
//! server (`lanes.rs`; no thread per call), which also read the replies still to come once a
//! call decided. A call
//! returns as soon as its outcome is decided, and never waits on a server past the server's
//! own connect and reply timeouts (a server that has not answered by then counts as failed):
//!
//! - an acquisition returns once a majority has it; one that is not acquired waits for every
//!   answer, because the undo it then sends must reach each server before the next attempt of
//!   the same acquisition (same owner token) does, or that attempt could find the lock "ours"
//!   on a server just before the undo deletes it. An answer that arrives after the call has
//!   decided is handled by the thread that got it: a late "acquired" for an attempt that
//!   failed is undone, a late registration as a waiter for an attempt that succeeded is left;
//! - a renewal returns once a majority renewed, a release once a majority released; the
//!   slower servers finish in the background (both compare the owner token, so a late one
//!   cannot touch anybody else's lock);
//! - everything else (inspect, remaining TTL, force release, scan, ping) waits for every answer.
//!
//! The rules:
//!
//! - **acquire**: acquired on a majority, and still valid: `ttl - elapsed - drift > 0`, where
//!   `drift = ttl / 100 + 2 ms` allows for servers whose clocks run fast. Otherwise the lock is
//!   released on every server that did not answer "busy" and the attempt counts as busy.
//! - **renew** (watchdog, `extend`): renewed on a majority within the validity. Fewer, with
//!   the rest unreachable, is an error the watchdog retries until the lock would have expired
//!   (then it reports [`LostReason::RenewalFailed`](crate::LostReason)); fewer with the rest
//!   answering "gone" or "someone else's" is a loss, reported at once.
//! - **release**: on every server; `Released` when a majority released it.
//! - **waiting**: the waiter blocks on the wake-up list of a server where the holder's key
//!   was seen (a release pushes there), for at most the time until a majority could be free.
//!
//! **Fencing tokens.** Each server keeps its own counter, and after a server was down the
//! counters differ: the highest counter among *this* majority could be below a token handed
//! out earlier through another majority. So an acquisition takes the highest counter of its
//! majority as its token, then raises the counter of every server in the majority that is
//! below it to the token (`RAISE_FENCE`, token-checked), and only counts as acquired once a
//! majority has a counter at least that high. Any later acquisition's majority shares a
//! server with that majority, whose counter it increments past the token: tokens strictly
//! increase, as long as no server loses its counter (a restart without persistence). When all
//! counters agree, as they do while every server is up, this costs nothing extra.
//!
//! A server that failed with a connection error is skipped for `DOWN_FOR` (counted as failed
//! without being asked), so a dead server costs one connect timeout, not one per operation;
//! and since the servers are asked at once, a dead or slow server delays nothing a majority
//! has decided.

//! The combining rules are pure functions of the servers' answers (`combine_*`, `tally`,
//! `fence_plan`, `until_free`), unit-tested below without a server; `Quorum`'s methods only
//! ask the servers and carry out what the rules decide.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex};

use std::io::{Read, Write};

use redis::ConnectionLike;

use super::lanes::{Job, Lane};
use super::seam::Primitive;
use super::{Attempted, ReleaseArgs, attempt_on, leave_on, release_on, release_with};
use crate::error::{Error, Result};
use crate::store::direct::{self, Replay, Sent};
use crate::store::{Ack, Store, Wake};
use crate::wire::token::{new_token, random_below};
use crate::wire::{
    Attempt, AttemptArgs, Broken, Form, Holder, LockKeys, OwnedTtl, Release, Renewal,
};

/// How long a server that failed with a connection error is skipped.
/// How long one slice of a cancellable Redlock wait blocks (see `Quorum::wait`).
pub(crate) const CANCEL_SLICE: Duration = Duration::from_millis(10);

const DOWN_FOR: Duration = Duration::from_millis(500);

/// When a quorum's servers disagree so that nobody holds a majority, try again after at most
/// this long (randomised, to break ties between clients that keep splitting the servers).
const SPLIT_RETRY_MS: u64 = 20;

/// Clock drift allowance for a lock with `ttl`: 1 % plus 2 ms (the Redlock description's
/// figures; redsync and node-redlock use the same).
pub(crate) fn drift(ttl: Duration) -> Duration {
    ttl / 100 + Duration::from_millis(2)
}

/// `InvalidInput` for a TTL no longer than its drift allowance (1 or 2 ms): no acquisition or
/// renewal could ever be in time (`in_time`), so a free lock would look busy forever.
pub(crate) fn check_ttl(ttl: Duration, what: &'static str) -> Result<()> {
    if drift(ttl) >= ttl {
        return Err(Error::invalid(
            what,
            format!(
                "{ttl:?} is not longer than Redlock's clock-drift allowance ({:?}: 1 % + 2 ms), \
                 so no acquisition could be in time; use at least 3 ms",
                drift(ttl)
            ),
        ));
    }
    Ok(())
}

/// The smallest majority of `n` servers.
fn majority(n: usize) -> usize {
    n / 2 + 1
}

/// An acquisition or renewal that took `elapsed` still leaves validity: `ttl - elapsed - drift
/// > 0`.
fn in_time(elapsed: Duration, ttl: Duration) -> bool {
    elapsed + drift(ttl) < ttl
}

/// One server of the quorum, and until when it is skipped after a connection error.
#[derive(Debug)]
struct Member {
    store: Store,
    down: Mutex<Option<(Instant, String)>>,
}

impl Member {
    fn skipped(&self) -> bool {
        self.down
            .lock()
            .as_ref()
            .is_some_and(|(until, _)| Instant::now() < *until)
    }

    fn call<T>(&self, f: impl FnOnce(&Store) -> Result<T>) -> Result<T> {
        if let Some(e) = self.skip_error() {
            return Err(e);
        }
        let r = f(&self.store);
        self.note(&r);
        r
    }

    /// The error a call gets while the server is skipped.
    fn skip_error(&self) -> Option<Error> {
        match &*self.down.lock() {
            Some((until, why)) if Instant::now() < *until => {
                Some(Error::Redis(redis::RedisError::from((
                    redis::ErrorKind::Io,
                    "skipped: the server failed moments ago",
                    why.clone(),
                ))))
            }
            _ => None,
        }
    }

    /// A connection error starts the skipping; an answer ends it.
    fn note<T>(&self, r: &Result<T>) {
        match r {
            Err(e) if e.is_connection_error() => {
                *self.down.lock() = Some((Instant::now() + DOWN_FOR, e.to_string()));
            }
            Ok(_) => *self.down.lock() = None,
            Err(_) => {}
        }
    }
}

/// What happens to an answer that arrives after its call has decided.
type Late<T> = Box<dyn FnMut(usize, Result<T>) + Send>;

/// One call fanned out to several servers: the answers so far, and once the caller has
/// decided, what to do with the answers that are still to come.
struct Call<T> {
    state: Mutex<CallState<T>>,
    arrived: Condvar,
}

struct CallState<T> {
    answers: Answers<T>,
    /// Servers asked that have not answered.
    pending: Vec<usize>,
    /// The caller took the answers: later ones are late.
    decided: bool,
    /// Late answers that came before the caller said what to do with them.
    late: Vec<(usize, Result<T>)>,
    handler: Option<Late<T>>,
    /// A caller that polls its direct servers' sockets also polls the other end of this, so a
    /// lane thread's answer wakes it (`fan_out_direct`).
    #[cfg(unix)]
    wake: Option<std::os::unix::net::UnixStream>,
    #[cfg(not(unix))]
    wake: Option<std::convert::Infallible>,
}

impl<T> Call<T> {
    fn new(servers: &[usize]) -> Call<T> {
        Call {
            state: Mutex::new(CallState {
                answers: Answers {
                    ok: Vec::with_capacity(servers.len()),
                    failed: Vec::new(),
                },
                pending: servers.to_vec(),
                decided: false,
                late: Vec::new(),
                handler: None,
                wake: None,
            }),
            arrived: Condvar::new(),
        }
    }

    /// A server answered.
    fn answer(&self, i: usize, r: Result<T>) {
        let mut st = self.state.lock();
        st.pending.retain(|p| *p != i);
        if !st.decided {
            match r {
                Ok(v) => st.answers.ok.push((i, v)),
                Err(e) => st.answers.failed.push((i, e)),
            }
            if let Some(w) = &st.wake {
                // The caller polls sockets and this: one byte says "look at the answers".
                let _ = (&mut &*w).write(&[1]);
            }
            drop(st);
            self.arrived.notify_one();
            return;
        }
        match st.handler.as_mut() {
            Some(handle) => handle(i, r),
            None => st.late.push((i, r)),
        }
    }

    /// What to do with late answers, those already in and those still to come.
    fn settle(&self, mut handler: Late<T>) {
        let mut st = self.state.lock();
        for (i, r) in std::mem::take(&mut st.late) {
            handler(i, r);
        }
        st.handler = Some(handler);
    }
}

/// The caller's end of a call's wake socket (see `CallState::wake`).
#[cfg(unix)]
struct WakeReader(std::os::unix::net::UnixStream);

#[cfg(unix)]
impl WakeReader {
    /// `None` when the system has no socket to spare: the caller then sees lane answers only
    /// after its own sockets (bounded by the deadline), never a wrong answer.
    fn attach<T>(call: &Call<T>) -> Option<WakeReader> {
        let (r, w) = std::os::unix::net::UnixStream::pair().ok()?;
        r.set_nonblocking(true).ok()?;
        w.set_nonblocking(true).ok()?;
        call.state.lock().wake = Some(w);
        Some(WakeReader(r))
    }

    fn fd(&self) -> std::os::fd::RawFd {
        use std::os::fd::AsRawFd;
        self.0.as_raw_fd()
    }

    fn drain(&self) {
        let mut buf = [0u8; 64];
        while matches!((&mut &self.0).read(&mut buf), Ok(n) if n > 0) {}
    }
}

#[cfg(not(unix))]
struct WakeReader(std::convert::Infallible);

#[cfg(not(unix))]
impl WakeReader {
    fn attach<T>(_: &Call<T>) -> Option<WakeReader> {
        None
    }

    fn fd(&self) -> i32 {
        match self.0 {}
    }

    fn drain(&self) {}
}

/// The answers a fanned-out call decided on, and the call, for its late answers.
struct Fanned<T> {
    answers: Answers<T>,
    call: Arc<Call<T>>,
}

impl<T> Fanned<T> {
    /// Late answers change nothing.
    fn ignore_late(self) -> Answers<T> {
        self.call.settle(Box::new(|_, _| {}));
        self.answers
    }
}

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
            native: false,
            value: "",
            since: self.since,
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
            // A quorum takes no native path.
            native: false,
            value: None,
        }
    }
}

/// A release's arguments, owned.
#[derive(Debug)]
struct OwnedRelease {
    keys: LockKeys,
    token: String,
    cooldown: Duration,
    grant: String,
    registration: String,
    undo: bool,
    native: bool,
}

impl OwnedRelease {
    fn of(r: &ReleaseArgs<'_>) -> OwnedRelease {
        OwnedRelease {
            keys: r.keys.clone(),
            token: r.token.to_owned(),
            cooldown: r.cooldown,
            grant: r.grant.to_owned(),
            registration: r.registration.to_owned(),
            undo: r.undo,
            native: r.native,
        }
    }

    fn args(&self) -> ReleaseArgs<'_> {
        ReleaseArgs {
            keys: &self.keys,
            token: &self.token,
            cooldown: self.cooldown,
            grant: &self.grant,
            registration: &self.registration,
            undo: self.undo,
            native: self.native,
            // A quorum takes no native path: no value is kept.
            value: None,
        }
    }
}

/// N independent servers, and the threads that ask each of them.
#[derive(Debug)]
pub(crate) struct Quorum {
    members: Vec<Arc<Member>>,
    lanes: Vec<Lane>,
    /// The longest one server may take to answer (connect or checkout, then the reply):
    /// after that it counts as failed.
    bound: Duration,
    /// Won acquisitions whose attempt has not yet answered on every server, by owner token
    /// and lock name: a multi-lock's members share one token, each has its own attempts.
    unsettled: Arc<Mutex<std::collections::HashMap<(String, String), Unsettled>>>,
}

/// A won acquisition with attempts still in flight. A release fans out on its own threads, so
/// on a server where the attempt is late the release could run first, find nothing, and let
/// the attempt take the lock after it: a lock nobody holds, until its TTL. So the release
/// skips the servers still `pending` and marks the acquisition `released`; the late answer,
/// seeing the mark, releases its server, after its attempt, as the holder asked (cool-down
/// included). Kept per owner token and lock name: a multi-lock's members share one token, and
/// each member's release must skip (and be carried out by) that member's own late attempts.
#[derive(Debug)]
struct Unsettled {
    /// Servers whose attempt has not answered yet.
    pending: Vec<usize>,
    released: Option<Arc<OwnedRelease>>,
}

/// Answers of all servers to one operation, by server index.
#[derive(Debug)]
struct Answers<T> {
    ok: Vec<(usize, T)>,
    failed: Vec<(usize, Error)>,
}

impl<T> Answers<T> {
    /// Whether a hard error (bad key type, bad input) is among the failures: it is the same on
    /// every server and not a quorum matter, so it is reported as is.
    fn has_hard_error(&self) -> bool {
        self.failed.iter().any(|(_, e)| is_hard(e))
    }
}

fn is_hard(e: &Error) -> bool {
    matches!(e, Error::WrongType { .. } | Error::InvalidInput { .. })
}

/// What the combining rules decide.
#[derive(Debug, PartialEq, Eq)]
enum Verdict<T> {
    Decided(T),
    /// Report the hard error among the answers.
    Hard,
    /// Too few servers answered to decide.
    NoQuorum,
}

/// An attempt's answers, sorted: `(server, fence)` where acquired, `(server, holder ttl)`
/// where busy, and the shortest `block` any busy server announced (come back before the
/// first registration lapses).
#[derive(Debug, Default, PartialEq, Eq)]
struct Tally {
    acquired: Vec<(usize, u64)>,
    busy: Vec<(usize, Option<Duration>)>,
    block: Option<Duration>,
}

fn tally(ok: &[(usize, Attempt)]) -> Tally {
    let mut t = Tally::default();
    for (i, a) in ok {
        match *a {
            Attempt::Acquired { fence } => t.acquired.push((*i, fence)),
            Attempt::Busy {
                holder_ttl, block, ..
            } => {
                t.busy.push((*i, holder_ttl));
                t.block = match (t.block, block) {
                    (Some(x), Some(y)) => Some(x.min(y)),
                    (x, y) => x.or(y),
                };
            }
        }
    }
    t
}

/// The fencing token of an acquisition held on `acquired` (server, counter) pairs: the
/// highest counter; and the servers whose counter must be raised to it. It counts once a
/// majority of `n` is at the token.
fn fence_plan(acquired: &[(usize, u64)]) -> Option<(u64, Vec<usize>)> {
    let fence = acquired.iter().map(|(_, f)| *f).max()?;
    let behind = acquired
        .iter()
        .filter(|(_, f)| *f < fence)
        .map(|(i, _)| *i)
        .collect();
    Some((fence, behind))
}

/// How long until a majority could be free: the servers we just released are free; of the
/// busy ones, the `need`-th to expire decides. When the busy servers are fewer than a
/// majority, nobody holds the lock: another client is half-way through (or out of) an
/// attempt, so try again after `jitter` (1 ms at least).
fn until_free(
    q: usize,
    free: usize,
    busy: &mut [(usize, Option<Duration>)],
    jitter: Duration,
) -> Duration {
    if busy.len() < q {
        return Duration::from_millis(1) + jitter;
    }
    let need = q.saturating_sub(free).max(1);
    // No expiry sorts last: it never frees by itself.
    busy.sort_by_key(|(_, ttl)| ttl.unwrap_or(Duration::MAX));
    busy.get(need - 1)
        .and_then(|(_, ttl)| *ttl)
        .unwrap_or(Duration::MAX)
}

/// Renewal: renewed on a majority within the validity. Fewer, with the rest unreachable, is
/// undecided (the watchdog retries); fewer with the rest answering is a loss.
fn combine_renew(n: usize, a: &Answers<Renewal>, in_time: bool) -> Verdict<Renewal> {
    let q = majority(n);
    let renewed = a.ok.iter().filter(|(_, r)| *r == Renewal::Renewed).count();
    if renewed >= q && in_time {
        return Verdict::Decided(Renewal::Renewed);
    }
    if a.has_hard_error() {
        return Verdict::Hard;
    }
    if renewed + a.failed.len() >= q {
        // The servers that did not answer may still hold it: undecided, try again.
        return Verdict::NoQuorum;
    }
    let taken = a.ok.iter().any(|(_, r)| *r == Renewal::NotOurs);
    Verdict::Decided(if taken {
        Renewal::NotOurs
    } else {
        Renewal::Gone
    })
}

/// Release: `Released` when a majority released it; otherwise `Lost` if anyone else holds it
/// somewhere, else `Late`.
fn combine_release(n: usize, a: &Answers<Release>) -> Verdict<Release> {
    let q = majority(n);
    let released =
        a.ok.iter()
            .filter(|(_, r)| matches!(r, Release::Released | Release::Kept))
            .count();
    if released >= q {
        return Verdict::Decided(Release::Released);
    }
    if a.has_hard_error() {
        return Verdict::Hard;
    }
    if a.ok.len() < q {
        return Verdict::NoQuorum;
    }
    let lost = a.ok.iter().any(|(_, r)| *r == Release::Lost);
    Verdict::Decided(if lost { Release::Lost } else { Release::Late })
}

/// Held while a majority holds it: until the q-th longest remaining TTL runs out, less the
/// drift allowance.
fn combine_owned_ttl(n: usize, a: &Answers<OwnedTtl>) -> Verdict<OwnedTtl> {
    let q = majority(n);
    let mut ours: Vec<Duration> =
        a.ok.iter()
            .filter_map(|(_, t)| match t {
                OwnedTtl::Left(d) => Some(*d),
                OwnedTtl::NoExpiry => Some(Duration::MAX),
                _ => None,
            })
            .collect();
    if ours.len() >= q {
        ours.sort_unstable_by(|a, b| b.cmp(a));
        let left = ours[q - 1];
        return Verdict::Decided(if left == Duration::MAX {
            OwnedTtl::NoExpiry
        } else {
            OwnedTtl::Left(left.saturating_sub(drift(left)))
        });
    }
    if a.has_hard_error() {
        return Verdict::Hard;
    }
    if ours.len() + a.failed.len() >= q {
        return Verdict::NoQuorum;
    }
    let taken = a.ok.iter().any(|(_, t)| *t == OwnedTtl::NotOurs);
    Verdict::Decided(if taken {
        OwnedTtl::NotOurs
    } else {
        OwnedTtl::Gone
    })
}

/// The holder a majority of the servers agree on (same host, pid, fencing token and
/// ownership), with the q-th longest remaining TTL.
fn combine_inspect(n: usize, a: &Answers<Option<Holder>>) -> Verdict<Option<Holder>> {
    if a.has_hard_error() {
        return Verdict::Hard;
    }
    let q = majority(n);
    if a.ok.len() < q {
        return Verdict::NoQuorum;
    }
    let holders: Vec<&Holder> = a.ok.iter().filter_map(|(_, h)| h.as_ref()).collect();
    for candidate in &holders {
        let same: Vec<&&Holder> = holders
            .iter()
            .filter(|h| {
                h.host == candidate.host
                    && h.pid == candidate.pid
                    && h.fence == candidate.fence
                    && h.owned == candidate.owned
            })
            .collect();
        if same.len() >= q {
            let mut ttls: Vec<Duration> = same
                .iter()
                .map(|h| h.remaining_ttl.unwrap_or(Duration::MAX))
                .collect();
            ttls.sort_unstable_by(|a, b| b.cmp(a));
            let mut holder = (*candidate).clone();
            holder.remaining_ttl = Some(ttls[q - 1]).filter(|t| *t != Duration::MAX);
            // A waiter registers on every server it finds the lock busy on: the most any
            // server counts.
            holder.waiters = same.iter().map(|h| h.waiters).max().unwrap_or(0);
            holder.queued = same.iter().map(|h| h.queued).max().unwrap_or(0);
            return Verdict::Decided(Some(holder));
        }
    }
    Verdict::Decided(None)
}

/// Enough servers answered for an operation that needs a majority to have looked.
fn combine_reached(n: usize, answered: usize) -> Verdict<()> {
    if answered >= majority(n) {
        Verdict::Decided(())
    } else {
        Verdict::NoQuorum
    }
}

impl Quorum {
    /// `bound`: the longest one server may take to answer (its connect or checkout timeout
    /// plus its reply timeout); `threads`: at most this many threads ask one server at once.
    pub(crate) fn new(stores: Vec<Store>, bound: Duration, threads: usize) -> Quorum {
        let lanes = stores
            .iter()
            // A late answer is read until its call's deadline, then its handler asks once
            // more: a dropped client waits that long at most for its late work.
            .map(|s| Lane::new(s.label.clone(), threads, bound * 2))
            .collect();
        Quorum {
            members: stores
                .into_iter()
                .map(|store| {
                    Arc::new(Member {
                        store,
                        down: Mutex::new(None),
                    })
                })
                .collect(),
            lanes,
            bound,
            unsettled: Arc::default(),
        }
    }

    pub(crate) fn stores(&self) -> impl Iterator<Item = &Store> {
        self.members.iter().map(|m| &m.store)
    }

    fn total(&self) -> usize {
        self.members.len()
    }

    fn all(&self) -> Vec<usize> {
        (0..self.total()).collect()
    }

    /// Asks `servers` at once and waits until `enough` holds for the answers so far, every
    /// server answered, or `bound` passed (the servers still pending then count as failed).
    /// The answers come sorted by server.
    fn fan_out<T, F>(
        &self,
        servers: &[usize],
        f: F,
        enough: impl Fn(&Answers<T>) -> bool,
    ) -> Fanned<T>
    where
        T: Send + 'static,
        F: Fn(&Store) -> Result<T> + Send + Sync + 'static,
    {
        self.fan_out_within(servers, f, enough, self.bound)
    }

    /// [`fan_out`](Self::fan_out) for a call that may take `bound` on one server.
    fn fan_out_within<T, F>(
        &self,
        servers: &[usize],
        f: F,
        enough: impl Fn(&Answers<T>) -> bool,
        bound: Duration,
    ) -> Fanned<T>
    where
        T: Send + 'static,
        F: Fn(&Store) -> Result<T> + Send + Sync + 'static,
    {
        let call = Arc::new(Call::new(servers));
        let f = Arc::new(f);
        for &i in servers {
            let member = Arc::clone(&self.members[i]);
            let (call, f) = (Arc::clone(&call), Arc::clone(&f));
            let job = Box::new(move || {
                let r = member.call(|s| f(s));
                call.answer(i, r);
            });
            if let Err(job) = self.lanes[i].submit(job) {
                // No thread could be started: ask this server from here.
                job();
            }
        }
        let deadline = Instant::now() + bound;
        let mut st = call.state.lock();
        while !st.pending.is_empty()
            && !enough(&st.answers)
            && !call.arrived.wait_until(&mut st, deadline).timed_out()
        {}
        st.decided = true;
        let mut answers = std::mem::replace(
            &mut st.answers,
            Answers {
                ok: Vec::new(),
                failed: Vec::new(),
            },
        );
        if !enough(&answers) {
            // Not decided by the answers in: a server still silent at the deadline failed.
            for &i in &st.pending {
                answers.failed.push((i, self.timed_out(i)));
            }
        }
        drop(st);
        answers.ok.sort_by_key(|(i, _)| *i);
        answers.failed.sort_by_key(|(i, _)| *i);
        Fanned { answers, call }
    }

    /// [`fan_out_within`](Self::fan_out_within) for an operation that is one request per
    /// server, `g` on a checked-out connection. The calling thread sends it to every server
    /// with an idle plain connection and reads the replies as they arrive (`store/direct.rs`),
    /// so an uncontended call wakes no other thread; the other servers (no idle connection,
    /// TLS, Cluster, Sentinel, an application's pool, or a request `g` cannot make alone) go
    /// to their lanes, whose answers wake the caller through the call's `wake` socket. When
    /// the call has decided, a lane thread reads each reply still to come, so late answers
    /// are handled as on the lanes. A reply `NOSCRIPT` (the script is not cached there yet)
    /// is handed to a lane too: `g` then loads the script, two more round trips.
    fn fan_out_direct<T, G>(
        &self,
        servers: &[usize],
        g: G,
        enough: impl Fn(&Answers<T>) -> bool,
        bound: Duration,
    ) -> Fanned<T>
    where
        T: Send + 'static,
        G: Fn(&mut dyn ConnectionLike) -> Result<T> + Send + Sync + 'static,
    {
        let g = Arc::new(g);
        let deadline = Instant::now() + bound;
        let call = Arc::new(Call::new(servers));
        let packed = direct::capture(|c| {
            let _ = g(c);
        });
        let mut sent: Vec<(usize, Sent)> = Vec::with_capacity(servers.len());
        // The caller's end of the call's wake socket, made when a lane answers too.
        let mut woken: Option<WakeReader> = None;
        for &i in servers {
            let member = &self.members[i];
            if let Some(e) = member.skip_error() {
                call.answer(i, Err(e));
                continue;
            }
            match packed.as_ref().and_then(|p| member.store.send_direct(p)) {
                Some(Ok(s)) => sent.push((i, s)),
                Some(Err(e)) => {
                    let r = Err(Error::Redis(e));
                    member.note(&r);
                    call.answer(i, r);
                }
                None => {
                    let g = Arc::clone(&g);
                    self.to_lane(i, &call, &mut woken, move |s| {
                        let mut conn = s.conn()?;
                        g(&mut conn)
                    });
                }
            }
        }
        // Once decided, one look that does not wait: replies already in are taken here, so
        // no lane thread is woken to read them.
        let mut sweep = false;
        loop {
            if !sweep {
                let st = call.state.lock();
                if st.pending.is_empty() || enough(&st.answers) {
                    sweep = true;
                }
            } else {
                break;
            }
            if sent.is_empty() || (!sweep && Instant::now() >= deadline) {
                break;
            }
            let ready = {
                let mut socks: Vec<&mut Sent> = sent.iter_mut().map(|(_, s)| s).collect();
                let until = if sweep { Instant::now() } else { deadline };
                direct::readable(&mut socks, woken.as_ref().map(WakeReader::fd), until)
            };
            if let Some(w) = &woken {
                w.drain();
            }
            let Ok(mut ready) = ready else {
                // `poll` itself failed: the lanes read the rest.
                break;
            };
            ready.sort_unstable_by(|a, b| b.cmp(a));
            for at in ready {
                let (i, mut s) = sent.swap_remove(at);
                let member = &self.members[i];
                match s.read_ready() {
                    Ok(None) => sent.push((i, s)),
                    Ok(Some(v)) if direct::is_no_script(&v) => {
                        let (g, call2) = (Arc::clone(&g), Arc::clone(&call));
                        let member = Arc::clone(member);
                        self.spawn_late(i, &call, &mut woken, move || {
                            let r = g(&mut Replay {
                                first: Some(v),
                                conn: &mut s.conn,
                            });
                            member.note(&r);
                            // The connection goes back to the pool first: a late answer's
                            // handler (an undo) then finds it idle, as on the lanes.
                            drop(s);
                            call2.answer(i, r);
                        });
                    }
                    Ok(Some(v)) => {
                        let r = g(&mut Replay {
                            first: Some(v),
                            conn: &mut s.conn,
                        });
                        member.note(&r);
                        call.answer(i, r);
                    }
                    Err(e) => {
                        let r = Err(Error::Redis(e));
                        member.note(&r);
                        call.answer(i, r);
                    }
                }
            }
        }
        let mut st = call.state.lock();
        if sent.is_empty() {
            // Lane answers only from here on (or none still to come).
            while !st.pending.is_empty()
                && !enough(&st.answers)
                && !call.arrived.wait_until(&mut st, deadline).timed_out()
            {}
        }
        st.decided = true;
        st.wake = None;
        let mut answers = std::mem::replace(
            &mut st.answers,
            Answers {
                ok: Vec::new(),
                failed: Vec::new(),
            },
        );
        if !enough(&answers) {
            for &i in &st.pending {
                answers.failed.push((i, self.timed_out(i)));
            }
        }
        drop(st);
        // Replies still to come: a lane thread reads each (until the deadline) and hands it to
        // the call's late handler.
        for (i, mut s) in sent {
            let (g, call2) = (Arc::clone(&g), Arc::clone(&call));
            let member = Arc::clone(&self.members[i]);
            let job: Job = Box::new(move || {
                let r = match s.finish(deadline) {
                    Ok(v) => g(&mut Replay {
                        first: Some(v),
                        conn: &mut s.conn,
                    }),
                    Err(e) => Err(Error::Redis(e)),
                };
                member.note(&r);
                // Back to the pool before the late handler runs (it may release here).
                drop(s);
                call2.answer(i, r);
            });
            if let Err(job) = self.lanes[i].submit(job) {
                job();
            }
        }
        answers.ok.sort_by_key(|(i, _)| *i);
        answers.failed.sort_by_key(|(i, _)| *i);
        Fanned { answers, call }
    }

    /// Asks server `i` on its lane, for a caller that polls: its answer wakes the caller.
    fn to_lane<T, F>(&self, i: usize, call: &Arc<Call<T>>, woken: &mut Option<WakeReader>, f: F)
    where
        T: Send + 'static,
        F: FnOnce(&Store) -> Result<T> + Send + 'static,
    {
        let member = Arc::clone(&self.members[i]);
        let call2 = Arc::clone(call);
        self.spawn_late(i, call, woken, move || {
            let r = member.call(f);
            call2.answer(i, r);
        });
    }

    /// Runs `job` (which answers for server `i`) on its lane, making sure its answer wakes a
    /// caller that polls.
    fn spawn_late<T>(
        &self,
        i: usize,
        call: &Arc<Call<T>>,
        woken: &mut Option<WakeReader>,
        job: impl FnOnce() + Send + 'static,
    ) {
        if woken.is_none() {
            *woken = WakeReader::attach(call);
        }
        if let Err(job) = self.lanes[i].submit(Box::new(job)) {
            job();
        }
    }

    /// Every server, every answer (within `bound`).
    fn each<T, F>(&self, f: F) -> Answers<T>
    where
        T: Send + 'static,
        F: Fn(&Store) -> Result<T> + Send + Sync + 'static,
    {
        self.fan_out(&self.all(), f, |_| false).ignore_late()
    }

    fn timed_out(&self, i: usize) -> Error {
        Error::Redis(redis::RedisError::from((
            redis::ErrorKind::Io,
            "no answer within the server's timeouts",
            self.members[i].store.label.clone(),
        )))
    }

    /// Carries out a verdict: the decided value, the hard error, or `NoQuorum`.
    fn resolve<T, V>(&self, key: &str, verdict: Verdict<V>, mut answers: Answers<T>) -> Result<V> {
        match verdict {
            Verdict::Decided(v) => Ok(v),
            Verdict::Hard => {
                let i = answers
                    .failed
                    .iter()
                    .position(|(_, e)| is_hard(e))
                    .unwrap_or(0);
                Err(answers.failed.swap_remove(i).1)
            }
            Verdict::NoQuorum => Err(self.no_quorum(key, &answers)),
        }
    }

    fn no_quorum<T>(&self, key: &str, answers: &Answers<T>) -> Error {
        Error::NoQuorum {
            key: key.to_owned(),
            answered: answers.ok.len(),
            required: majority(self.total()),
            total: self.total(),
            last_error: answers
                .failed
                .last()
                .map(|(i, e)| format!("{}: {e}", self.members[*i].store.label))
                .unwrap_or_else(|| "none".to_owned()),
        }
    }

    /// One attempt on every server. A waiter registers on each server that finds the lock
    /// busy (`register`), so that a release on any of them wakes it; its next attempt takes
    /// the grant a release left on each server (see `wait`).
    pub(crate) fn attempt(
        &self,
        p: &Arc<dyn Primitive>,
        args: &AttemptArgs<'_>,
        ack: Option<Ack>,
    ) -> Result<Attempted> {
        let keys = args.keys;
        let q = majority(self.total());
        let start = Instant::now();
        // The token a release's undo hands the lock over with, if it finds a waiter.
        let sent = Arc::new(OwnedAttempt::of(args, new_token()?));
        let fanned = {
            let (p, sent) = (Arc::clone(p), Arc::clone(&sent));
            // Decided early only when a majority has it (see the module comment).
            // Waiting for replicas' acknowledgement takes up to its own timeout on top.
            let bound = self.bound + ack.map_or(Duration::ZERO, |a| a.timeout);
            let enough = move |a: &Answers<Attempt>| tally(&a.ok).acquired.len() >= q;
            if ack.is_some() {
                // Two requests per server (the script, then `WAIT`): on the lanes.
                self.fan_out_within(
                    &self.all(),
                    move |s| attempt_on(s, &*p, &sent.args(), ack),
                    enough,
                    bound,
                )
            } else {
                self.fan_out_direct(
                    &self.all(),
                    move |c| p.attempt(c, &sent.args()),
                    enough,
                    bound,
                )
            }
        };
        let answers = fanned.answers;
        let mut t = tally(&answers.ok);
        let acquired = if t.acquired.len() >= q {
            self.settle_fence(p, keys, args.token, &t.acquired)
                .filter(|_| in_time(start.elapsed(), args.ttl))
        } else {
            None
        };
        // Answers still to come: a registration where the lock is ours is left; a lock taken
        // for an attempt that failed is undone (it may also have been applied when the answer
        // was an error).
        let ours = acquired.is_some();
        let pending: Vec<usize> = (0..self.total())
            .filter(|i| {
                !answers.ok.iter().any(|(a, _)| a == i)
                    && !answers.failed.iter().any(|(f, _)| f == i)
            })
            .collect();
        if ours && !pending.is_empty() {
            self.unsettled.lock().insert(
                (args.token.to_owned(), keys.name().to_owned()),
                Unsettled {
                    pending,
                    released: None,
                },
            );
        }
        fanned.call.settle({
            let (p, sent) = (Arc::clone(p), Arc::clone(&sent));
            let members = self.members.clone();
            let unsettled = Arc::clone(&self.unsettled);
            Box::new(move |i, late: Result<Attempt>| {
                let member = &members[i];
                let released = if ours {
                    let mut all = unsettled.lock();
                    let at = (sent.token.clone(), sent.keys.name().to_owned());
                    match all.get_mut(&at) {
                        Some(u) => {
                            u.pending.retain(|p| *p != i);
                            let released = u.released.clone();
                            if u.pending.is_empty() {
                                all.remove(&at);
                            }
                            released
                        }
                        None => None,
                    }
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
                    (true, Ok(Attempt::Acquired { .. }) | Err(_)) if released.is_some() => {
                        let release = released.as_deref().map(OwnedRelease::args);
                        if let Some(release) = release {
                            let _ = member.call(|s| release_on(s, &*p, &release));
                        }
                    }
                    (false, Ok(Attempt::Acquired { .. }) | Err(_)) => {
                        let _ = member.call(|s| release_on(s, &*p, &sent.undo()));
                    }
                    _ => {}
                }
            })
        });
        let leave_busy = |busy: &[(usize, Option<Duration>)]| {
            if args.register.is_zero() || busy.is_empty() {
                return;
            }
            let servers: Vec<usize> = busy.iter().map(|(i, _)| *i).collect();
            let (p, sent) = (Arc::clone(p), Arc::clone(&sent));
            // Nobody waits for these: a registration left behind lapses by itself.
            self.fan_out(
                &servers,
                move |s| {
                    leave_on(s, &*p, &sent.keys, &sent.waiter);
                    Ok(())
                },
                |_| true,
            )
            .ignore_late();
        };
        if let Some(fence) = acquired {
            // The busy minority registered us: a release there must not grant the lock to a
            // waiter that is gone.
            leave_busy(&t.busy);
            return Ok(Attempted {
                attempt: Attempt::Acquired { fence },
                wait_on: None,
            });
        }
        // Not ours: undo everywhere we may have written (a failed reply may still have been
        // applied), so a partial acquisition blocks nobody for a whole TTL. The undo hands the
        // lock over to a waiter registered there, as a release does. Every answer is in (or
        // counted failed at the deadline), so each undo follows its attempt on its server.
        let undo: Vec<usize> = (0..self.total())
            .filter(|i| !t.busy.iter().any(|(b, _)| b == i))
            .collect();
        if !undo.is_empty() {
            let (p, sent) = (Arc::clone(p), Arc::clone(&sent));
            self.fan_out_direct(
                &undo,
                // A quorum takes no native path: the lock is a hash.
                move |c| release_with(c, &*p, &sent.undo(), Form::Hash),
                |_| false,
                self.bound,
            )
            .ignore_late();
        }
        if answers.has_hard_error() || answers.ok.len() < q {
            // An error ends the acquisition: leave the servers that registered us.
            leave_busy(&t.busy);
            let verdict = if answers.has_hard_error() {
                Verdict::Hard
            } else {
                Verdict::NoQuorum
            };
            return self.resolve(keys.name(), verdict, answers);
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
            },
            wait_on,
        })
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
                    move |s| {
                        let mut conn = s.conn()?;
                        p.raise_fence(&mut conn, &k, &token, fence)
                    },
                    |_| false,
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

    pub(crate) fn renew(
        &self,
        p: &Arc<dyn Primitive>,
        keys: &LockKeys,
        token: &str,
        ttl: Duration,
    ) -> Result<Renewal> {
        let start = Instant::now();
        let q = majority(self.total());
        let answers = {
            let (p, k, token) = (Arc::clone(p), keys.clone(), token.to_owned());
            self.fan_out_direct(
                &self.all(),
                move |c| p.renew(c, &k, &token, ttl),
                move |a| a.ok.iter().filter(|(_, r)| *r == Renewal::Renewed).count() >= q,
                self.bound,
            )
            .ignore_late()
        };
        let verdict = combine_renew(self.total(), &answers, in_time(start.elapsed(), ttl));
        self.resolve(keys.name(), verdict, answers)
    }

    pub(crate) fn release(&self, p: &Arc<dyn Primitive>, r: &ReleaseArgs<'_>) -> Result<Release> {
        let q = majority(self.total());
        // Servers whose attempt is still in flight are released by its answer (`Unsettled`).
        let sent = Arc::new(OwnedRelease::of(r));
        let mut unsettled = self.unsettled.lock();
        // Nothing in flight is the common case: no key to build.
        let found = if unsettled.is_empty() {
            None
        } else {
            unsettled.get_mut(&(r.token.to_owned(), r.keys.name().to_owned()))
        };
        let servers = match found {
            Some(u) => {
                u.released = Some(Arc::clone(&sent));
                (0..self.total())
                    .filter(|i| !u.pending.contains(i))
                    .collect()
            }
            None => self.all(),
        };
        drop(unsettled);
        let answers = {
            let p = Arc::clone(p);
            self.fan_out_direct(
                &servers,
                move |c| release_with(c, &*p, &sent.args(), Form::Hash),
                move |a| {
                    a.ok.iter()
                        .filter(|(_, r)| matches!(r, Release::Released | Release::Kept))
                        .count()
                        >= q
                },
                self.bound,
            )
            .ignore_late()
        };
        let verdict = combine_release(self.total(), &answers);
        self.resolve(r.keys.name(), verdict, answers)
    }

    pub(crate) fn owned_ttl(
        &self,
        p: &Arc<dyn Primitive>,
        keys: &LockKeys,
        token: &str,
    ) -> Result<OwnedTtl> {
        let answers = {
            let (p, k, token) = (Arc::clone(p), keys.clone(), token.to_owned());
            self.each(move |s| {
                let mut conn = s.conn()?;
                p.owned_ttl(&mut conn, &k, &token)
            })
        };
        let verdict = combine_owned_ttl(self.total(), &answers);
        self.resolve(keys.name(), verdict, answers)
    }

    pub(crate) fn inspect(
        &self,
        p: &Arc<dyn Primitive>,
        keys: &LockKeys,
    ) -> Result<Option<Holder>> {
        let answers = {
            let (p, k) = (Arc::clone(p), keys.clone());
            self.each(move |s| {
                let mut conn = s.conn()?;
                p.inspect(&mut conn, &k)
            })
        };
        let verdict = combine_inspect(self.total(), &answers);
        self.resolve(keys.name(), verdict, answers)
    }

    pub(crate) fn force_release(&self, p: &Arc<dyn Primitive>, keys: &LockKeys) -> Result<Broken> {
        let grant = new_token()?;
        let answers = {
            let (p, k) = (Arc::clone(p), keys.clone());
            self.each(move |s| {
                let mut conn = s.conn()?;
                p.force_release(&mut conn, &k, &grant)
            })
        };
        let verdict = if answers.has_hard_error() {
            Verdict::Hard
        } else {
            combine_reached(self.total(), answers.ok.len())
        };
        let holder = answers.ok.iter().find_map(|(_, h)| h.clone());
        self.resolve(keys.name(), verdict, answers)?;
        Ok(holder)
    }

    /// Every server is scanned; the names found on a majority include every held lock.
    pub(crate) fn scan(&self, namespace: &str, pattern: &str) -> Result<BTreeSet<String>> {
        let answers = {
            let (namespace, pattern) = (namespace.to_owned(), pattern.to_owned());
            self.each(move |s| s.scan(&namespace, &pattern))
        };
        let verdict = combine_reached(self.total(), answers.ok.len());
        let names = answers
            .ok
            .iter()
            .flat_map(|(_, names)| names.iter().cloned())
            .collect();
        self.resolve("", verdict, answers)?;
        Ok(names)
    }

    /// A waiter gives up: every server at once. Waits for every server (within the bound),
    /// as on a single server: a release right after a waiter gave up must not find it still
    /// registered and grant it the lock.
    pub(crate) fn leave(&self, p: &Arc<dyn Primitive>, keys: &LockKeys, waiter: &str) {
        let (p, k, waiter) = (Arc::clone(p), keys.clone(), waiter.to_owned());
        self.fan_out(
            &self.all(),
            move |s| {
                leave_on(s, &*p, &k, &waiter);
                Ok(())
            },
            |_| false,
        )
        .ignore_late();
    }

    pub(crate) fn ping(&self) -> Result<()> {
        let answers = self.each(Store::ping);
        let verdict = combine_reached(self.total(), answers.ok.len());
        self.resolve("", verdict, answers)
    }

    /// Blocks on the wake-up list of the server where the last attempt saw the holder
    /// (`wait_on`), else of the first one that can be asked, for at most `timeout`.
    ///
    /// Each server's release grants the lock there to its registered waiters with the same
    /// grant token. Popping that grant on one server would make two waiters that pop it on
    /// different servers both its owner, so under Redlock a waiter only *peeks* (is woken, and
    /// leaves the grant in place); its next attempt takes the grant on each server with its
    /// own token (`ACQUIRE` gives a pending grant to a registered waiter), and it holds the
    /// lock only with a majority, as any attempt.
    ///
    /// A peek blocks on one list only (`BLMOVE` has one source), so a cancellable wait
    /// (`cancelled` given) blocks in slices of [`CANCEL_SLICE`] and looks at the flag between
    /// them.
    pub(crate) fn wait(
        &self,
        list: &str,
        timeout: Duration,
        wait_on: Option<usize>,
        cancelled: Option<&dyn Fn() -> bool>,
    ) -> Wake {
        let Some(cancelled) = cancelled else {
            return self.wait_once(list, timeout, wait_on);
        };
        let end = Instant::now() + timeout;
        loop {
            let left = end.saturating_duration_since(Instant::now());
            if cancelled() || left.is_zero() {
                return Wake::Nothing;
            }
            match self.wait_once(list, left.min(CANCEL_SLICE), wait_on) {
                Wake::Nothing => {}
                other => return other,
            }
        }
    }

    fn wait_once(&self, list: &str, timeout: Duration, wait_on: Option<usize>) -> Wake {
        let first = wait_on.unwrap_or(0);
        for k in 0..self.total() {
            let m = &self.members[(first + k) % self.total()];
            if m.skipped() {
                continue;
            }
            match m.store.wait(list, None, timeout, false) {
                Wake::Failed => continue,
                other => return other,
            }
        }
        Wake::Failed
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    fn down() -> Error {
        Error::Redis(redis::RedisError::from((redis::ErrorKind::Io, "down")))
    }

    fn hard() -> Error {
        Error::WrongType {
            redis_key: "k".into(),
        }
    }

    fn answers<T>(ok: Vec<T>, failed: Vec<Error>) -> Answers<T> {
        let n = ok.len();
        Answers {
            ok: ok.into_iter().enumerate().collect(),
            failed: failed
                .into_iter()
                .enumerate()
                .map(|(i, e)| (n + i, e))
                .collect(),
        }
    }

    #[test]
    fn a_ttl_must_outlast_its_drift_allowance() {
        for short in [MS, 2 * MS] {
            assert!(!in_time(Duration::ZERO, short), "never in time");
            assert!(matches!(
                check_ttl(short, "ttl"),
                Err(Error::InvalidInput { what: "ttl", .. })
            ));
        }
        assert!(in_time(Duration::ZERO, 3 * MS));
        assert!(check_ttl(3 * MS, "ttl").is_ok());
        assert!(check_ttl(Duration::from_secs(30), "ttl").is_ok());
    }

    #[test]
    fn drift_is_one_percent_plus_two_ms() {
        assert_eq!(drift(Duration::from_secs(10)), 102 * MS);
        assert_eq!(drift(100 * MS), 3 * MS);
        assert!(in_time(90 * MS, 100 * MS));
        assert!(!in_time(97 * MS, 100 * MS));
        assert_eq!((majority(3), majority(4), majority(5)), (2, 3, 3));
    }

    #[test]
    fn a_majority_must_free_up() {
        // 3 servers, none free, held with 100/300/200 ms left: free once two have expired.
        let mut busy = [
            (0, Some(100 * MS)),
            (1, Some(300 * MS)),
            (2, Some(200 * MS)),
        ];
        assert_eq!(until_free(2, 0, &mut busy, MS), 200 * MS);
        // One is free already: the first to expire is enough.
        let mut busy = [(1, Some(300 * MS)), (2, Some(200 * MS))];
        assert_eq!(until_free(2, 1, &mut busy, MS), 200 * MS);
        // Only one busy server of three: nobody holds a majority, retry soon.
        let mut busy = [(1, Some(30_000 * MS))];
        assert_eq!(until_free(2, 1, &mut busy, 7 * MS), 8 * MS);
        // Held without expiry on a majority: never frees by itself.
        let mut busy = [(0, None), (1, None)];
        assert_eq!(until_free(2, 0, &mut busy, MS), Duration::MAX);
    }

    #[test]
    fn attempts_are_tallied() {
        let ok = vec![
            (0, Attempt::Acquired { fence: 4 }),
            (
                1,
                Attempt::Busy {
                    holder_ttl: Some(50 * MS),
                    block: Some(51 * MS),
                    fresh: true,
                    server_ms: 1,
                },
            ),
            (
                2,
                Attempt::Busy {
                    holder_ttl: None,
                    block: Some(20 * MS),
                    fresh: true,
                    server_ms: 1,
                },
            ),
        ];
        let t = tally(&ok);
        assert_eq!(t.acquired, vec![(0, 4)]);
        assert_eq!(t.busy, vec![(1, Some(50 * MS)), (2, None)]);
        assert_eq!(t.block, Some(20 * MS), "come back before the first lapses");
    }

    #[test]
    fn the_fence_is_the_highest_counter_and_laggards_are_raised() {
        assert_eq!(fence_plan(&[]), None);
        assert_eq!(fence_plan(&[(0, 5), (2, 5)]), Some((5, vec![])));
        assert_eq!(fence_plan(&[(0, 5), (1, 9), (2, 7)]), Some((9, vec![0, 2])));
    }

    #[test]
    fn renewal_needs_a_majority_in_time() {
        use Renewal::*;
        let v = |a: &Answers<Renewal>, t| combine_renew(3, a, t);
        assert_eq!(
            v(&answers(vec![Renewed, Renewed, Gone], vec![]), true),
            Verdict::Decided(Renewed)
        );
        // Renewed on a majority but too late to count: undecided, the watchdog tries again
        // (until the local expiry).
        assert_eq!(
            v(&answers(vec![Renewed, Renewed, Gone], vec![]), false),
            Verdict::NoQuorum
        );
        // One renewed, one unreachable: undecided, the watchdog retries.
        assert_eq!(
            v(&answers(vec![Renewed, Gone], vec![down()]), true),
            Verdict::NoQuorum
        );
        assert_eq!(
            v(&answers(vec![Renewed, NotOurs, Gone], vec![]), true),
            Verdict::Decided(NotOurs)
        );
        assert_eq!(
            v(&answers(vec![Gone, Gone], vec![hard()]), true),
            Verdict::Hard
        );
    }

    #[test]
    fn release_counts_a_majority() {
        use Release::*;
        assert_eq!(
            combine_release(3, &answers(vec![Released, Kept, Late], vec![])),
            Verdict::Decided(Released)
        );
        assert_eq!(
            combine_release(3, &answers(vec![Released, Late, Lost], vec![])),
            Verdict::Decided(Lost)
        );
        assert_eq!(
            combine_release(3, &answers(vec![Late, Late, Released], vec![])),
            Verdict::Decided(Late)
        );
        assert_eq!(
            combine_release(3, &answers(vec![Late], vec![down(), down()])),
            Verdict::NoQuorum
        );
        assert_eq!(
            combine_release(3, &answers(vec![Late, Late], vec![hard()])),
            Verdict::Hard
        );
    }

    #[test]
    fn owned_ttl_is_the_majoritys_shortest_less_drift() {
        use OwnedTtl::*;
        let s = Duration::from_secs(1);
        assert_eq!(
            combine_owned_ttl(3, &answers(vec![Left(3 * s), Left(s), Gone], vec![])),
            Verdict::Decided(Left(s - drift(s)))
        );
        assert_eq!(
            combine_owned_ttl(3, &answers(vec![NoExpiry, NoExpiry, Gone], vec![])),
            Verdict::Decided(NoExpiry)
        );
        assert_eq!(
            combine_owned_ttl(3, &answers(vec![Left(s)], vec![down(), down()])),
            Verdict::NoQuorum
        );
        assert_eq!(
            combine_owned_ttl(3, &answers(vec![Left(s), NotOurs, Gone], vec![])),
            Verdict::Decided(NotOurs)
        );
        assert_eq!(
            combine_owned_ttl(3, &answers(vec![Left(s), Gone, Gone], vec![])),
            Verdict::Decided(Gone)
        );
    }

    fn holder(pid: u32, ttl: u32) -> Holder {
        Holder {
            remaining_ttl: Some(ttl * MS),
            host: "h".into(),
            pid,
            since_ms: 1,
            fence: 3,
            meta: None,
            hold_until_ms: None,
            owned: true,
            cool_until_ms: None,
            waiters: 0,
            queued: 0,
            queue_head: None,
            rw: None,
            fence_is_counter: false,
        }
    }

    #[test]
    fn inspect_reports_the_holder_a_majority_agrees_on() {
        let a = answers(
            vec![
                Some(holder(1, 900)),
                Some(holder(1, 500)),
                Some(holder(2, 800)),
            ],
            vec![],
        );
        let Verdict::Decided(Some(h)) = combine_inspect(3, &a) else {
            panic!("a majority agrees on pid 1");
        };
        assert_eq!((h.pid, h.remaining_ttl), (1, Some(500 * MS)));
        let a = answers(
            vec![Some(holder(1, 900)), Some(holder(2, 500)), None],
            vec![],
        );
        assert_eq!(combine_inspect(3, &a), Verdict::Decided(None));
        let a = answers(vec![Some(holder(1, 900))], vec![down(), down()]);
        assert_eq!(combine_inspect(3, &a), Verdict::NoQuorum);
    }

    #[test]
    fn reaching_a_majority() {
        assert_eq!(combine_reached(3, 2), Verdict::Decided(()));
        assert_eq!(combine_reached(3, 1), Verdict::NoQuorum);
        assert_eq!(combine_reached(5, 3), Verdict::Decided(()));
    }
}
