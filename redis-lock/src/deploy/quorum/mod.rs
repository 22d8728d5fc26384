//! Redlock: one lock over N independent Redis servers, held while a majority holds it.
//!
//! Each operation runs the single-server script on every server at once and combines the
//! answers, all through one fan-out (`fan_out.rs`). An attempt, renewal or release is asked by
//! the calling thread itself on every server with an idle plain connection: it writes the
//! request to each, then `poll(2)`s the sockets and decodes each reply as it is whole
//! (`store/direct.rs`), so an uncontended call wakes no other thread; the rest goes to a few
//! long-lived threads per server (`lanes.rs`; no thread per call), which also read the replies
//! still to come once a call decided. A call returns as soon as its outcome is decided, and never waits on a server past the server's
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
//!
//! The module's parts: the combining rules, pure functions of the servers' answers
//! (`rules.rs`: `combine_*`, `tally`, `fence_plan`, `until_free`, unit-tested without a
//! server); the one fan-out (`fan_out.rs`); an attempt with its fencing and late answers
//! (`attempt.rs`); and here, `Quorum` and its other operations, which only ask the servers
//! and carry out what the rules decide.

mod attempt;
mod fan_out;
mod rules;

use std::collections::BTreeSet;
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use parking_lot::Mutex;

use super::Watched;
use super::lanes::Lane;
use super::send::{check_once, leave_on, renew_once};
use crate::error::{Error, Result};
use crate::store::notify::Watcher;
use crate::store::waiting::WaitFor;
use crate::store::{Store, Wake};
use crate::wire::seam::Primitive;
use crate::wire::token::new_token;
use crate::wire::{Broken, Form, Holder, LockKeys, OwnedTtl, Release, ReleaseArgs, Renewal};
use attempt::UnsettledMap;
use fan_out::Ask;
use rules::{
    Answers, Verdict, combine_inspect, combine_owned_ttl, combine_reached, combine_release,
    combine_renew, in_time, is_hard, majority,
};
pub(crate) use rules::{check_ttl, drift};

/// How long a server that failed with a connection error is skipped.
const DOWN_FOR: Duration = Duration::from_millis(500);

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
    unsettled: UnsettledMap,
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
    /// The holder expects a string lock (see `wire::Form`); no value is kept: a quorum takes
    /// no native path.
    string: bool,
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
            string: r.form.is_string(),
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
            form: if self.string {
                Form::String
            } else {
                Form::Hash
            },
            routed: false,
        }
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

    pub(crate) fn renew(
        &self,
        p: &dyn Primitive,
        keys: &LockKeys,
        token: &str,
        ttl: Duration,
    ) -> Result<Renewal> {
        let start = Instant::now();
        let q = majority(self.total());
        let answers = {
            // Where a server notifies losses, renewals go out on its tracked connection (on
            // the server's lane): a renewal must not come back as somebody else's change.
            let ask = if self.stores().any(|s| s.notify.notifies()) {
                let (p, k, token) = (p.shared(), keys.clone(), token.to_owned());
                Ask::lane(move |s| renew_once(s, &*p, &k, &token, ttl))
            } else {
                Ask::request(p.renew(keys, token, ttl))
            };
            self.fan_out(
                &self.all(),
                ask,
                move |a| a.ok.iter().filter(|(_, r)| *r == Renewal::Renewed).count() >= q,
                self.bound,
            )
            .ignore_late()
        };
        let verdict = combine_renew(self.total(), &answers, in_time(start.elapsed(), ttl));
        self.resolve(keys.name(), verdict, answers)
    }

    pub(crate) fn release(&self, p: &dyn Primitive, r: &ReleaseArgs<'_>) -> Result<Release> {
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
            self.fan_out(
                &servers,
                // A quorum takes no native path: the lock is a hash.
                Ask::request(p.release(&ReleaseArgs {
                    form: Form::Hash,
                    ..sent.args()
                })),
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
        p: &dyn Primitive,
        keys: &LockKeys,
        token: &str,
    ) -> Result<OwnedTtl> {
        let answers = {
            let req = p.owned_ttl(keys, token);
            self.each(move |s| req.on(&mut s.conn()?))
        };
        let verdict = combine_owned_ttl(self.total(), &answers);
        self.resolve(keys.name(), verdict, answers)
    }

    /// [`Deployment::watch`](super::Deployment::watch) on every server: registered where the
    /// server notifies, checked on every server (a majority decides, as for `owned_ttl`).
    pub(crate) fn watch(
        &self,
        p: &dyn Primitive,
        keys: &LockKeys,
        token: &str,
        id: u64,
        watcher: &Weak<dyn Watcher>,
    ) -> Watched {
        let (mut any, mut listening) = (false, false);
        for store in self.stores() {
            if let Some(now) = store
                .notifier(&keys.lock)
                .and_then(|n| n.watch(&keys.lock, id, Weak::clone(watcher)))
            {
                any = true;
                listening |= now;
            }
        }
        if !any {
            return Watched::Off;
        }
        if !listening {
            return Watched::Pending;
        }
        let answers = {
            let (p, k, token) = (p.shared(), keys.clone(), token.to_owned());
            self.each(move |s| check_once(s, &*p, &k, &token))
        };
        let verdict = combine_owned_ttl(self.total(), &answers);
        Watched::Checked(self.resolve(keys.name(), verdict, answers))
    }

    /// Moves the lock to `fresh` on every server that holds it under `token`: held under
    /// `fresh` once a majority moved it (the servers' answers are combined as remaining TTLs
    /// are). Two transfers of one token racing move it on different servers at most: only
    /// one of them can reach a majority; where neither does, the lock is nobody's until it
    /// expires.
    pub(crate) fn transfer(
        &self,
        p: &dyn Primitive,
        keys: &LockKeys,
        token: &str,
        fresh: &str,
    ) -> Result<OwnedTtl> {
        let answers = {
            let req = p.transfer(keys, token, fresh);
            self.each(move |s| req.on(&mut s.conn()?))
        };
        let verdict = combine_owned_ttl(self.total(), &answers);
        self.resolve(keys.name(), verdict, answers)
    }

    /// Replaces the metadata on every server that holds the lock under `token`: done once a
    /// majority did (the answers are combined as remaining TTLs are); a minority that did
    /// not answer keeps the old metadata until the lock is released or expires there.
    pub(crate) fn proclaim(
        &self,
        p: &dyn Primitive,
        keys: &LockKeys,
        token: &str,
        meta: &str,
        holder: &str,
    ) -> Result<OwnedTtl> {
        let answers = {
            let req = p.proclaim(keys, token, meta, holder);
            self.each(move |s| req.on(&mut s.conn()?))
        };
        let verdict = combine_owned_ttl(self.total(), &answers);
        self.resolve(keys.name(), verdict, answers)
    }

    pub(crate) fn inspect(&self, p: &dyn Primitive, keys: &LockKeys) -> Result<Option<Holder>> {
        let answers = {
            let req = p.inspect(keys);
            self.each(move |s| req.on(&mut s.conn()?))
        };
        let verdict = combine_inspect(self.total(), &answers);
        self.resolve(keys.name(), verdict, answers)
    }

    pub(crate) fn force_release(&self, p: &dyn Primitive, keys: &LockKeys) -> Result<Broken> {
        let grant = new_token()?;
        let answers = {
            let req = p.force_release(keys, &grant);
            self.each(move |s| req.on(&mut s.conn()?))
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
    pub(crate) fn leave(&self, p: &dyn Primitive, keys: &LockKeys, waiter: &str) {
        let (p, k, waiter) = (p.shared(), keys.clone(), waiter.to_owned());
        self.fan_out(
            &self.all(),
            Ask::lane(move |s| {
                leave_on(s, &*p, &k, &waiter);
                Ok(())
            }),
            |_| false,
            self.bound,
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
    /// lock only with a majority, as any attempt. It peeks on the server `wait_on` the attempt
    /// saw the holder on, else the next that answers, in the group of this client's threads
    /// waiting there on the same lock (`store/waiting.rs`).
    pub(crate) fn wait(&self, w: &WaitFor<'_>, wait_on: Option<usize>) -> Wake {
        let first = wait_on.unwrap_or(0);
        for k in 0..self.total() {
            let m = &self.members[(first + k) % self.total()];
            if m.skipped() {
                continue;
            }
            match m.store.wait(w) {
                Wake::Failed => continue,
                other => return other,
            }
        }
        Wake::Failed
    }
}
