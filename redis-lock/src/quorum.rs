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

use std::cell::Cell;
use std::time::{Duration, Instant};

use parking_lot::Mutex;

use crate::backend::Store;
use crate::error::{Error, Result};
use crate::info::LockInfo;
use crate::keys::LockKeys;
use crate::lease::ReleaseOutcome;
use crate::ops::{Inner, OwnedTtl, Renewal};
use crate::scripts;
use crate::waiting::{Attempt, AttemptArgs, Wake};

/// How long a server that failed with a connection error is skipped.
const DOWN_FOR: Duration = Duration::from_millis(500);

/// Clock drift allowance for a lock with `ttl`: 1 % plus 2 ms (the Redlock description's
/// figures; redsync and node-redlock use the same).
pub(crate) fn drift(ttl: Duration) -> Duration {
    ttl / 100 + Duration::from_millis(2)
}

thread_local! {
    /// The server the last busy attempt on this thread saw a holder on. The acquire loop
    /// runs an attempt and then waits on the same thread, so this tells the wait where the
    /// holder's release will push a wake-up.
    static WAIT_ON: Cell<Option<usize>> = const { Cell::new(None) };
}

/// One server of the quorum, and when it last failed.
#[derive(Debug)]
struct Member {
    store: Store,
    down: Mutex<Option<(Instant, String)>>,
}

impl Member {
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
            }
            Ok(_) => *self.down.lock() = None,
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

/// Answers of all servers to one operation.
struct Answers<T> {
    ok: Vec<(usize, T)>,
    failed: Vec<(usize, Error)>,
}

impl<T> Answers<T> {
    /// A hard error (bad key type, bad input) is the same on every server and not a quorum
    /// matter: report it as is.
    fn hard_error(&mut self) -> Option<Error> {
        let i = self
            .failed
            .iter()
            .position(|(_, e)| matches!(e, Error::WrongType { .. } | Error::InvalidInput { .. }))?;
        Some(self.failed.swap_remove(i).1)
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

    fn majority(&self) -> usize {
        self.members.len() / 2 + 1
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

    fn no_quorum<T>(&self, keys: &LockKeys, answers: &Answers<T>) -> Error {
        Error::NoQuorum {
            key: keys.name().to_owned(),
            answered: answers.ok.len(),
            required: self.majority(),
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
    pub(crate) fn attempt(&self, inner: &Inner, args: &AttemptArgs<'_>) -> Result<Attempt> {
        let AttemptArgs {
            keys,
            token,
            ttl,
            waiter,
            register,
            ..
        } = *args;
        WAIT_ON.with(|w| w.set(None));
        let start = Instant::now();
        let mut answers = self.each(|s| inner.attempt_on(s, args));
        let mut acquired = Vec::new();
        let mut busy = Vec::new();
        let mut block: Option<Duration> = None;
        for (i, a) in &answers.ok {
            match a {
                Attempt::Acquired { fence } => acquired.push((*i, *fence)),
                Attempt::Busy {
                    holder_ttl,
                    block: b,
                    ..
                } => {
                    busy.push((*i, *holder_ttl));
                    // Come back before the first registration lapses.
                    block = match (block, *b) {
                        (Some(x), Some(y)) => Some(x.min(y)),
                        (x, y) => x.or(y),
                    };
                }
            }
        }
        let leave_busy = || {
            if register.is_zero() {
                return;
            }
            for (i, _) in &busy {
                let _ = self.members[*i].call(|s| {
                    inner.leave_on(s, keys, waiter);
                    Ok(())
                });
            }
        };
        let q = self.majority();
        if acquired.len() >= q
            && let Some(fence) = self.settle_fence(inner, keys, token, &acquired)
            && start.elapsed() + drift(ttl) < ttl
        {
            // The busy minority registered us: a release there must not grant the lock to a
            // waiter that is gone.
            leave_busy();
            return Ok(Attempt::Acquired { fence });
        }
        // Not ours: undo everywhere we may have written (a failed reply may still have been
        // applied), so a partial acquisition blocks nobody for a whole TTL.
        // The undo hands the lock over to a waiter registered there, as a release does.
        let busy_at: Vec<usize> = busy.iter().map(|(i, _)| *i).collect();
        let grant = crate::token::new_token()?;
        for (i, m) in self.members.iter().enumerate() {
            if !busy_at.contains(&i) {
                let _ = m.call(|s| inner.release_on(s, keys, token, &grant, ""));
            }
        }
        // An error ends the acquisition: leave the servers that registered us.
        if let Some(e) = answers.hard_error() {
            leave_busy();
            return Err(e);
        }
        if answers.ok.len() < q {
            leave_busy();
            return Err(self.no_quorum(keys, &answers));
        }
        WAIT_ON.with(|w| w.set(busy_at.first().copied()));
        Ok(Attempt::Busy {
            holder_ttl: Some(Self::until_free(q, acquired.len(), &mut busy)),
            block,
            // Grants are never adopted under Redlock (see `wait`): nothing to vouch for.
            fresh: false,
            server_ms: 0,
        })
    }

    /// How long until a majority could be free: the servers we just released are free; of the
    /// busy ones, the `need`-th to expire decides. When the busy servers are fewer than a
    /// majority, nobody holds the lock: another client is half-way through (or half-way out
    /// of) an attempt, so try again after a short random pause, which also breaks ties
    /// between clients that keep splitting the servers between them.
    fn until_free(q: usize, free: usize, busy: &mut [(usize, Option<Duration>)]) -> Duration {
        if busy.len() < q {
            let jitter = crate::token::random_below(20);
            return Duration::from_millis(1 + jitter);
        }
        let need = q.saturating_sub(free).max(1);
        // No expiry sorts last: it never frees by itself.
        busy.sort_by_key(|(_, ttl)| ttl.unwrap_or(Duration::MAX));
        busy.get(need - 1)
            .and_then(|(_, ttl)| *ttl)
            .unwrap_or(crate::options::MAX_TTL)
    }

    /// The token of an acquisition held on `acquired` (server, counter) pairs: the highest
    /// counter, once a majority has a counter at least that high. `None` when too few servers
    /// could be raised (the lock is then released by the caller).
    fn settle_fence(
        &self,
        inner: &Inner,
        keys: &LockKeys,
        token: &str,
        acquired: &[(usize, u64)],
    ) -> Option<u64> {
        let fence = acquired.iter().map(|(_, f)| *f).max()?;
        let mut settled = acquired.iter().filter(|(_, f)| *f == fence).count();
        if settled < self.majority() {
            for (i, f) in acquired.iter().filter(|(_, f)| *f < fence) {
                let raised = self.members[*i].call(|s| {
                    let mut conn = inner.conn(s)?;
                    Ok(scripts::RAISE_FENCE
                        .key(&keys.lock)
                        .key(&keys.fence)
                        .arg(token)
                        .arg(fence)
                        .invoke::<i64>(conn.con())?)
                });
                if matches!(raised, Ok(1)) {
                    settled += 1;
                    tracing::debug!(target: "redis_lock", key = keys.name(), from = f, to = fence, "redlock: fencing counter caught up");
                }
            }
        }
        (settled >= self.majority()).then_some(fence)
    }

    pub(crate) fn renew(
        &self,
        inner: &Inner,
        keys: &LockKeys,
        token: &str,
        ttl: Duration,
    ) -> Result<Renewal> {
        let start = Instant::now();
        let mut answers = self.each(|s| inner.renew_on(s, keys, token, ttl));
        let renewed = answers
            .ok
            .iter()
            .filter(|(_, r)| *r == Renewal::Renewed)
            .count();
        let q = self.majority();
        if renewed >= q && start.elapsed() + drift(ttl) < ttl {
            return Ok(Renewal::Renewed);
        }
        if let Some(e) = answers.hard_error() {
            return Err(e);
        }
        if renewed + answers.failed.len() >= q {
            // The servers that did not answer may still hold it: undecided, try again.
            return Err(self.no_quorum(keys, &answers));
        }
        let taken = answers.ok.iter().any(|(_, r)| *r == Renewal::Taken);
        Ok(if taken { Renewal::Taken } else { Renewal::Gone })
    }

    pub(crate) fn release(
        &self,
        inner: &Inner,
        keys: &LockKeys,
        token: &str,
        grant: &str,
        registration: &str,
    ) -> Result<ReleaseOutcome> {
        let mut answers = self.each(|s| inner.release_on(s, keys, token, grant, registration));
        let released = answers
            .ok
            .iter()
            .filter(|(_, r)| *r == ReleaseOutcome::Released)
            .count();
        if released >= self.majority() {
            return Ok(ReleaseOutcome::Released);
        }
        if let Some(e) = answers.hard_error() {
            return Err(e);
        }
        if answers.ok.len() < self.majority() {
            return Err(self.no_quorum(keys, &answers));
        }
        let lost = answers.ok.iter().any(|(_, r)| *r == ReleaseOutcome::Lost);
        Ok(if lost {
            ReleaseOutcome::Lost
        } else {
            ReleaseOutcome::Late
        })
    }

    pub(crate) fn owned_ttl(
        &self,
        inner: &Inner,
        keys: &LockKeys,
        token: &str,
    ) -> Result<OwnedTtl> {
        let mut answers = self.each(|s| inner.owned_ttl_on(s, keys, token));
        let q = self.majority();
        let mut ours: Vec<Duration> = answers
            .ok
            .iter()
            .filter_map(|(_, t)| match t {
                OwnedTtl::Left(d) => Some(*d),
                OwnedTtl::NoExpiry => Some(Duration::MAX),
                _ => None,
            })
            .collect();
        if ours.len() >= q {
            // Held while a majority holds it: until the q-th longest remaining TTL runs out.
            ours.sort_unstable_by(|a, b| b.cmp(a));
            let left = ours[q - 1];
            return Ok(if left == Duration::MAX {
                OwnedTtl::NoExpiry
            } else {
                OwnedTtl::Left(left.saturating_sub(drift(left)))
            });
        }
        if let Some(e) = answers.hard_error() {
            return Err(e);
        }
        if ours.len() + answers.failed.len() >= q {
            return Err(self.no_quorum(keys, &answers));
        }
        let taken = answers.ok.iter().any(|(_, t)| *t == OwnedTtl::NotOurs);
        Ok(if taken {
            OwnedTtl::NotOurs
        } else {
            OwnedTtl::Gone
        })
    }

    /// The holder a majority of the servers agree on (same host, pid and fencing token).
    pub(crate) fn inspect(
        &self,
        inner: &Inner,
        name: &str,
        keys: &LockKeys,
    ) -> Result<Option<LockInfo>> {
        let mut answers = self.each(|s| inner.inspect_on(s, name, keys));
        if let Some(e) = answers.hard_error() {
            return Err(e);
        }
        let q = self.majority();
        if answers.ok.len() < q {
            return Err(self.no_quorum(keys, &answers));
        }
        let infos: Vec<&LockInfo> = answers.ok.iter().filter_map(|(_, i)| i.as_ref()).collect();
        for candidate in &infos {
            let same: Vec<&&LockInfo> = infos
                .iter()
                .filter(|i| {
                    i.host == candidate.host
                        && i.pid == candidate.pid
                        && i.fencing_token == candidate.fencing_token
                        && i.owned == candidate.owned
                })
                .collect();
            if same.len() >= q {
                let mut ttls: Vec<Duration> = same
                    .iter()
                    .map(|i| i.remaining_ttl.unwrap_or(Duration::MAX))
                    .collect();
                ttls.sort_unstable_by(|a, b| b.cmp(a));
                let mut info = (*candidate).clone();
                info.remaining_ttl = Some(ttls[q - 1]).filter(|t| *t != Duration::MAX);
                return Ok(Some(info));
            }
        }
        Ok(None)
    }

    pub(crate) fn force_release(
        &self,
        inner: &Inner,
        _name: &str,
        keys: &LockKeys,
    ) -> Result<Option<(String, u32)>> {
        let mut answers = self.each(|s| inner.force_release_on(s, keys));
        if let Some(e) = answers.hard_error() {
            return Err(e);
        }
        if answers.ok.len() < self.majority() {
            return Err(self.no_quorum(keys, &answers));
        }
        Ok(answers.ok.into_iter().find_map(|(_, holder)| holder))
    }

    /// Blocks on the wake-up list of the server where the last attempt saw the holder, else
    /// of the first one that can be asked, for at most `timeout`.
    ///
    /// Each server's release grants the lock there to its registered waiters with the same
    /// grant token. Popping that grant on one server would make two waiters that pop it on
    /// different servers both its owner, so under Redlock a waiter only *peeks* (is woken, and
    /// leaves the grant in place); its next attempt takes the grant on each server with its
    /// own token (`ACQUIRE` gives a pending grant to a registered waiter), and it holds the
    /// lock only with a majority, as any attempt.
    pub(crate) fn wait(&self, inner: &Inner, list: &str, timeout: Duration) -> Wake {
        let first = WAIT_ON.with(Cell::get).unwrap_or(0);
        let order = (0..self.total()).map(|k| (first + k) % self.total());
        for i in order {
            let m = &self.members[i];
            if m.down
                .lock()
                .as_ref()
                .is_some_and(|(until, _)| Instant::now() < *until)
            {
                continue;
            }
            match inner.wait_on(&m.store, list, timeout, false) {
                Wake::Failed => continue,
                other => return other,
            }
        }
        Wake::Failed
    }

    pub(crate) fn ping(&self, inner: &Inner) -> Result<()> {
        let answers = self.each(|s| {
            let mut conn = inner.conn(s)?;
            redis::cmd("PING").query::<()>(conn.con())?;
            Ok(())
        });
        if answers.ok.len() >= self.majority() {
            return Ok(());
        }
        Err(Error::NoQuorum {
            key: String::new(),
            answered: answers.ok.len(),
            required: self.majority(),
            total: self.total(),
            last_error: answers
                .failed
                .last()
                .map(|(i, e)| format!("{}: {e}", self.members[*i].store.label))
                .unwrap_or_default(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn drift_is_one_percent_plus_two_ms() {
        assert_eq!(drift(Duration::from_secs(10)), Duration::from_millis(102));
        assert_eq!(drift(Duration::from_millis(100)), Duration::from_millis(3));
    }

    #[test]
    fn a_majority_must_free_up() {
        let ms = Duration::from_millis;
        // 3 servers, none free, held with 100/300/200 ms left: free once two have expired.
        let mut busy = [(0, Some(ms(100))), (1, Some(ms(300))), (2, Some(ms(200)))];
        assert_eq!(Quorum::until_free(2, 0, &mut busy), ms(200));
        // One is free already: the first to expire is enough.
        let mut busy = [(1, Some(ms(300))), (2, Some(ms(200)))];
        assert_eq!(Quorum::until_free(2, 1, &mut busy), ms(200));
        // Only one busy server of three: nobody holds a majority, retry soon.
        let mut busy = [(1, Some(ms(30_000)))];
        assert!(Quorum::until_free(2, 1, &mut busy) <= ms(21));
    }
}
