//! Redlock: one lock over N independent Redis servers, held while a majority holds it.
//!
//! Each operation runs the single-server script on every server in turn (as the Redlock
//! description does; each server is bounded by the client's connect and reply timeouts) and
//! combines the answers:
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
//! without being asked), so a dead server costs one connect timeout, not one per operation.

//! The combining rules are pure functions of the servers' answers (`combine_*`, `tally`,
//! `fence_plan`, `until_free`), unit-tested below without a server; `Quorum`'s methods only
//! ask the servers and carry out what the rules decide.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use parking_lot::Mutex;

use super::seam::Primitive;
use super::{Attempted, ReleaseArgs, attempt_on, leave_on, release_on, renew_on};
use crate::error::{Error, Result};
use crate::store::{Ack, Store, Wake};
use crate::wire::token::{new_token, random_below};
use crate::wire::{Attempt, AttemptArgs, Broken, Holder, LockKeys, OwnedTtl, Release, Renewal};

/// How long a server that failed with a connection error is skipped.
const DOWN_FOR: Duration = Duration::from_millis(500);

/// How long a server that failed with a connection error stays suspect after that: a renewal
/// asks it last, and not at all once a majority has renewed. Asking a dead server costs a
/// connect timeout, and servers are asked in turn: a renewal that waits on it could outlast
/// the lock it renews while a majority is up.
const SUSPECT_FOR: Duration = Duration::from_secs(10);

/// When a quorum's servers disagree so that nobody holds a majority, try again after at most
/// this long (randomised, to break ties between clients that keep splitting the servers).
const SPLIT_RETRY_MS: u64 = 20;

/// Clock drift allowance for a lock with `ttl`: 1 % plus 2 ms (the Redlock description's
/// figures; redsync and node-redlock use the same).
pub(crate) fn drift(ttl: Duration) -> Duration {
    ttl / 100 + Duration::from_millis(2)
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

/// One server of the quorum, and when it last failed.
#[derive(Debug)]
struct Member {
    store: Store,
    down: Mutex<Option<(Instant, String)>>,
    /// When it last failed with a connection error.
    failed_at: Mutex<Option<Instant>>,
}

impl Member {
    fn suspect(&self) -> bool {
        self.failed_at
            .lock()
            .is_some_and(|at| at.elapsed() < SUSPECT_FOR)
    }

    fn skipped(&self) -> bool {
        self.down
            .lock()
            .as_ref()
            .is_some_and(|(until, _)| Instant::now() < *until)
    }

    fn call<T>(&self, f: impl FnOnce(&Store) -> Result<T>) -> Result<T> {
        if let Some((until, why)) = &*self.down.lock()
            && Instant::now() < *until
        {
            return Err(Error::Redis(redis::RedisError::from((
                redis::ErrorKind::Io,
                "skipped: the server failed moments ago",
                why.clone(),
            ))));
        }
        let r = f(&self.store);
        match &r {
            Err(e) if e.is_connection_error() => {
                *self.down.lock() = Some((Instant::now() + DOWN_FOR, e.to_string()));
                *self.failed_at.lock() = Some(Instant::now());
            }
            Ok(_) => {
                *self.down.lock() = None;
                *self.failed_at.lock() = None;
            }
            Err(_) => {}
        }
        r
    }
}

/// N independent servers.
#[derive(Debug)]
pub(crate) struct Quorum {
    members: Vec<Member>,
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
    pub(crate) fn new(stores: Vec<Store>) -> Quorum {
        Quorum {
            members: stores
                .into_iter()
                .map(|store| Member {
                    store,
                    down: Mutex::new(None),
                    failed_at: Mutex::new(None),
                })
                .collect(),
        }
    }

    pub(crate) fn stores(&self) -> impl Iterator<Item = &Store> {
        self.members.iter().map(|m| &m.store)
    }

    fn total(&self) -> usize {
        self.members.len()
    }

    fn each<T>(&self, mut f: impl FnMut(&Store) -> Result<T>) -> Answers<T> {
        let mut answers = Answers {
            ok: Vec::with_capacity(self.total()),
            failed: Vec::new(),
        };
        for (i, m) in self.members.iter().enumerate() {
            match m.call(&mut f) {
                Ok(v) => answers.ok.push((i, v)),
                Err(e) => answers.failed.push((i, e)),
            }
        }
        answers
    }

    /// Like `each`, but asks suspect servers (see `SUSPECT_FOR`) last, and not at all once
    /// `enough` holds for the answers so far.
    fn each_unless<T>(
        &self,
        mut f: impl FnMut(&Store) -> Result<T>,
        enough: impl Fn(&Answers<T>) -> bool,
    ) -> Answers<T> {
        let mut answers = Answers {
            ok: Vec::with_capacity(self.total()),
            failed: Vec::new(),
        };
        let (suspects, healthy): (Vec<_>, Vec<_>) = self
            .members
            .iter()
            .enumerate()
            .partition(|(_, m)| m.suspect());
        let suspects_from = healthy.len();
        for (k, (i, m)) in healthy.into_iter().chain(suspects).enumerate() {
            if k >= suspects_from && enough(&answers) {
                break;
            }
            match m.call(&mut f) {
                Ok(v) => answers.ok.push((i, v)),
                Err(e) => answers.failed.push((i, e)),
            }
        }
        answers.ok.sort_by_key(|(i, _)| *i);
        answers
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
        p: &dyn Primitive,
        args: &AttemptArgs<'_>,
        ack: Option<Ack>,
    ) -> Result<Attempted> {
        let keys = args.keys;
        let start = Instant::now();
        let answers = self.each(|s| attempt_on(s, p, args, ack));
        let mut t = tally(&answers.ok);
        let leave_busy = || {
            if args.register.is_zero() {
                return;
            }
            for (i, _) in &t.busy {
                let _ = self.members[*i].call(|s| {
                    leave_on(s, p, keys, args.waiter);
                    Ok(())
                });
            }
        };
        let q = majority(self.total());
        if t.acquired.len() >= q
            && let Some(fence) = self.settle_fence(p, keys, args.token, &t.acquired)
            && in_time(start.elapsed(), args.ttl)
        {
            // The busy minority registered us: a release there must not grant the lock to a
            // waiter that is gone.
            leave_busy();
            return Ok(Attempted {
                attempt: Attempt::Acquired { fence },
                wait_on: None,
            });
        }
        // Not ours: undo everywhere we may have written (a failed reply may still have been
        // applied), so a partial acquisition blocks nobody for a whole TTL. The undo hands the
        // lock over to a waiter registered there, as a release does.
        let grant = new_token()?;
        for (i, m) in self.members.iter().enumerate() {
            if !t.busy.iter().any(|(b, _)| *b == i) {
                let undo = ReleaseArgs {
                    keys,
                    token: args.token,
                    cooldown: Duration::ZERO,
                    grant: &grant,
                    registration: "",
                    undo: true,
                };
                let _ = m.call(|s| release_on(s, p, &undo));
            }
        }
        if answers.has_hard_error() || answers.ok.len() < q {
            // An error ends the acquisition: leave the servers that registered us.
            leave_busy();
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
    /// counter, once a majority has a counter at least that high (servers behind are raised).
    /// `None` when too few servers could be raised (the lock is then released by the caller).
    fn settle_fence(
        &self,
        p: &dyn Primitive,
        keys: &LockKeys,
        token: &str,
        acquired: &[(usize, u64)],
    ) -> Option<u64> {
        let (fence, behind) = fence_plan(acquired)?;
        let mut settled = acquired.len() - behind.len();
        let q = majority(self.total());
        if settled < q {
            for i in behind {
                let raised = self.members[i].call(|s| {
                    let mut conn = s.conn()?;
                    p.raise_fence(&mut conn, keys, token, fence)
                });
                if matches!(raised, Ok(true)) {
                    settled += 1;
                    tracing::debug!(target: "redis_lock", key = keys.name(), to = fence, "redlock: fencing counter caught up");
                }
            }
        }
        (settled >= q).then_some(fence)
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
        let answers = self.each_unless(
            |s| renew_on(s, p, keys, token, ttl),
            |a| a.ok.iter().filter(|(_, r)| *r == Renewal::Renewed).count() >= q,
        );
        let verdict = combine_renew(self.total(), &answers, in_time(start.elapsed(), ttl));
        self.resolve(keys.name(), verdict, answers)
    }

    pub(crate) fn release(&self, p: &dyn Primitive, r: &ReleaseArgs<'_>) -> Result<Release> {
        let answers = self.each(|s| release_on(s, p, r));
        let verdict = combine_release(self.total(), &answers);
        self.resolve(r.keys.name(), verdict, answers)
    }

    pub(crate) fn owned_ttl(
        &self,
        p: &dyn Primitive,
        keys: &LockKeys,
        token: &str,
    ) -> Result<OwnedTtl> {
        let answers = self.each(|s| {
            let mut conn = s.conn()?;
            p.owned_ttl(&mut conn, keys, token)
        });
        let verdict = combine_owned_ttl(self.total(), &answers);
        self.resolve(keys.name(), verdict, answers)
    }

    pub(crate) fn inspect(&self, p: &dyn Primitive, keys: &LockKeys) -> Result<Option<Holder>> {
        let answers = self.each(|s| {
            let mut conn = s.conn()?;
            p.inspect(&mut conn, keys)
        });
        let verdict = combine_inspect(self.total(), &answers);
        self.resolve(keys.name(), verdict, answers)
    }

    pub(crate) fn force_release(&self, p: &dyn Primitive, keys: &LockKeys) -> Result<Broken> {
        let grant = new_token()?;
        let answers = self.each(|s| {
            let mut conn = s.conn()?;
            p.force_release(&mut conn, keys, &grant)
        });
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
        let answers = self.each(|s| s.scan(namespace, pattern));
        let verdict = combine_reached(self.total(), answers.ok.len());
        let names = answers
            .ok
            .iter()
            .flat_map(|(_, names)| names.iter().cloned())
            .collect();
        self.resolve("", verdict, answers)?;
        Ok(names)
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
    pub(crate) fn wait(&self, list: &str, timeout: Duration, wait_on: Option<usize>) -> Wake {
        let first = wait_on.unwrap_or(0);
        for k in 0..self.total() {
            let m = &self.members[(first + k) % self.total()];
            if m.skipped() {
                continue;
            }
            match m.store.wait(list, timeout, false) {
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
