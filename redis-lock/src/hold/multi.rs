//! The multi-lock: several mutex locks taken all or none, then held as one lease per member.
//!
//! Each attempt takes every member or none: as one script (`wire::multi`, through the seam)
//! where one script can name every key (one server, or one Cluster slot); elsewhere (Redlock,
//! keys in several Cluster slots) one member after the other in name order, undoing the ones
//! taken when a later one is busy or fails. The caller gets every member or none.
//!
//! Waiting is by notification, through the ordinary acquire loop: when the set is busy at
//! member `i` (names sorted), the caller acquires member `i` alone (registering as its
//! waiter, woken by its release, handed the lock) and then attempts the whole set again with
//! the members it holds already its own. Before it waits for member `i` it gives back every
//! member it holds whose name sorts after `i`'s; so a caller only ever waits for a name that
//! sorts after every name it holds, every wait-for edge between callers goes from a lower
//! name to a higher one, and no cycle (deadlock) can form, whatever order callers ask in.
//! Keeping the members below `i` lets a caller asking for many names make progress against
//! callers asking for few. Polling strategies hold nothing between whole-set attempts.
//!
//! Each member is then an ordinary lease with its own watchdog (watchdog threads are pooled
//! and reused, so this costs no thread per member beyond those already parked), so renewal,
//! loss detection and release per member are the mutex's, unchanged.

use std::sync::Arc;
use std::time::{Duration, Instant};

use super::acquire::{Deadline, Report, Taken, holder_info, observed, start_lease};
use super::lease::{Lease, Start};
use super::primitive::{Lock, Params};
use super::{Inner, Kind, giveback, registry};
use crate::cancel::CancelToken;
use crate::error::{Error, Result};
use crate::options::{LockOptions, validate};
use crate::retry::{RetryStrategy, Step};
use crate::wire::multi::{AllArgs, AllAttempt};
use crate::wire::token::random_below;
use crate::wire::token::{Ids, new_ids};
use crate::wire::{Attempt, AttemptArgs, LockKeys};

/// Most locks one multi-lock takes.
pub const MAX_LOCK_ALL: usize = 64;

/// Its name in spans and metrics.
const KIND: &str = "multi";

/// The names of a multi-lock, sorted, or why they cannot be one: none, too many, or one
/// named twice. Nothing is sent for bad input.
pub(crate) fn members(mut names: Vec<String>) -> Result<Vec<String>> {
    if names.is_empty() {
        return Err(Error::invalid("keys", "the list of lock names is empty"));
    }
    if names.len() > MAX_LOCK_ALL {
        return Err(Error::invalid(
            "keys",
            format!(
                "{} lock names; at most {MAX_LOCK_ALL} are taken at once",
                names.len()
            ),
        ));
    }
    names.sort();
    if let Some(pair) = names.windows(2).find(|pair| pair[0] == pair[1]) {
        return Err(Error::invalid(
            "keys",
            format!("{:?} is named more than once", pair[0]),
        ));
    }
    Ok(names)
}

/// Options a multi-lock cannot honour are refused rather than ignored (its check, in the shape
/// of a primitive's `Lock::check`; the limits every acquisition is held to come first).
fn check(opts: &LockOptions, fair: bool) -> Result<()> {
    let refuse = |what, reason: &str| Err(Error::invalid(what, reason.to_owned()));
    if !opts.hold_at_least.is_zero() {
        return refuse("hold_at_least", "a multi-lock has no minimum hold");
    }
    if opts.replicas.is_some() {
        return refuse(
            "replicas",
            "a multi-lock does not wait for replica acknowledgement",
        );
    }
    if opts.reentrant {
        return refuse("reentrant", "a multi-lock is not reentrant");
    }
    if opts.mode.is_some() {
        return refuse(
            "mode",
            "a multi-lock takes mutex locks; take read and write locks one at a time",
        );
    }
    if fair {
        return refuse(
            "retry",
            "a multi-lock does not wait in a fair queue; use a non-fair strategy",
        );
    }
    Ok(())
}

/// One multi-lock acquisition.
struct AllAcquisition<'a> {
    inner: &'a Arc<Inner>,
    /// The primitive of every member.
    mutex: Arc<dyn Lock>,
    names: &'a [String],
    keys: Vec<LockKeys>,
    opts: &'a LockOptions,
    ttl: Duration,
    ids: Ids,
}

impl Inner {
    /// Takes every lock in `names` (sorted, distinct: see [`members`]) or none, waiting as
    /// `opts` say until `deadline`. `Ok(None)`: still busy at the end. The leases are in the
    /// order of `names`.
    pub(crate) fn acquire_all(
        self: &Arc<Self>,
        names: &[String],
        opts: &LockOptions,
        deadline: &Deadline,
    ) -> Result<Taken<Vec<Arc<Lease>>>> {
        let retry = opts.retry.as_ref().unwrap_or(&self.config.default_retry);
        observed(self, &names.join(","), KIND, opts, deadline, |report| {
            self.acquire_all_in_span(names, opts, retry, deadline, report)
        })
    }

    fn acquire_all_in_span(
        self: &Arc<Self>,
        names: &[String],
        opts: &LockOptions,
        retry: &RetryStrategy,
        deadline: &Deadline,
        report: Report<'_>,
    ) -> Result<Taken<Vec<Arc<Lease>>>> {
        let keys = names
            .iter()
            .map(|name| self.keys(name))
            .collect::<Result<Vec<_>>>()?;
        let ttl = opts.ttl.unwrap_or(self.config.default_ttl);
        validate(ttl, opts)?;
        check(opts, retry.is_fair())?;
        self.check_ttl(ttl)?;
        let a = AllAcquisition {
            inner: self,
            mutex: Kind::Mutex.make(Params::DEFAULT),
            names,
            keys,
            opts,
            ttl,
            ids: new_ids()?,
        };
        if let Some(e) = a.cancelled() {
            return Err(e);
        }
        if let Some(name) = names
            .iter()
            .find(|name| registry::held_here(self, name).is_some())
        {
            // Waiting would wait for this very thread.
            return Err(Error::AlreadyHeld { key: name.clone() });
        }
        // Members taken alone while waiting for them (index, lease), sorted by index: the
        // whole set is attempted again with them.
        let mut held: Vec<(usize, Arc<Lease>)> = Vec::new();
        let result = a.run(retry, deadline, report, &mut held);
        if !matches!(result, Ok(Taken::Acquired(_))) {
            give_back(&mut held, 0);
        }
        result
    }
}

/// Gives back the held members from index `from` on.
fn give_back(held: &mut Vec<(usize, Arc<Lease>)>, from: usize) {
    let keep = held.partition_point(|(i, _)| *i < from);
    for (_, lease) in held.drain(keep..) {
        let _ = lease.release();
    }
}

impl AllAcquisition<'_> {
    /// `Error::Cancelled` once the acquisition's cancel token is.
    fn cancelled(&self) -> Option<Error> {
        self.opts
            .cancel
            .as_ref()
            .is_some_and(CancelToken::is_cancelled)
            .then(|| Error::Cancelled {
                key: self.names.join(","),
            })
    }

    /// Attempts the whole set until it is ours, waiting as the strategy says; `held`: the
    /// members taken alone while waiting for them (the caller gives them back unless the set
    /// is acquired, where they are among its leases).
    fn run(
        &self,
        retry: &RetryStrategy,
        deadline: &Deadline,
        report: Report<'_>,
        held: &mut Vec<(usize, Arc<Lease>)>,
    ) -> Result<Taken<Vec<Arc<Lease>>>> {
        loop {
            if let Some(e) = self.cancelled() {
                return Err(e);
            }
            let attempts = report.attempts.get() + 1;
            report.attempts.set(attempts);
            let sent = Instant::now();
            let (index, holder_ttl, holder) = match self.attempt(held)? {
                AllAttempt::Acquired { fences } => {
                    let leases = self.hold(fences, std::mem::take(held), sent, report)?;
                    tracing::debug!(target: "redis_lock", keys = %self.names.join(","), attempts, "locks acquired together");
                    return Ok(Taken::Acquired(leases));
                }
                AllAttempt::Busy {
                    index,
                    holder_ttl,
                    holder,
                } => (index, holder_ttl, holder),
            };
            let left = deadline.at.saturating_duration_since(Instant::now());
            match retry.next(attempts, left, holder_ttl, None, random_below) {
                // The busy member's holder, as the attempt's answer named it.
                Step::Stop => return Ok(Taken::Busy(holder_info(holder))),
                Step::WaitSignal(_) => {
                    // Only ever wait for a name after every name held (see the module's doc).
                    give_back(held, index);
                    // Wait for the busy member as any waiter does, and take it.
                    let inner = self.inner;
                    match inner.acquire_member(
                        &self.mutex,
                        &self.names[index],
                        self.opts,
                        deadline,
                    )? {
                        Taken::Acquired(lease) => held.push((index, lease)),
                        Taken::Busy(holder) => return Ok(Taken::Busy(holder)),
                    }
                }
                Step::Sleep(d) => {
                    give_back(held, 0);
                    match &self.opts.cancel {
                        Some(token) => {
                            token.sleep(d);
                        }
                        None => std::thread::sleep(d),
                    }
                }
            }
        }
    }

    /// One all-or-nothing attempt; the members in `held` (sorted by index) are ours already.
    fn attempt(&self, held: &[(usize, Arc<Lease>)]) -> Result<AllAttempt> {
        let mine = |k: usize| {
            held.binary_search_by_key(&k, |(i, _)| *i)
                .ok()
                .map(|at| &held[at].1)
        };
        let token = |k: usize| mine(k).map_or(self.ids.token.as_str(), |l| l.token.as_str());
        let members: Vec<(&LockKeys, &str)> = self
            .keys
            .iter()
            .enumerate()
            .map(|(k, keys)| (keys, token(k)))
            .collect();
        let inner = self.inner;
        let args = AllArgs {
            members: &members,
            ttl: self.ttl,
            holder: &inner.holder,
            meta: self.meta(),
        };
        let once = || inner.deployment.attempt_all(&*self.mutex, &args);
        let all = match once() {
            // A reply lost in flight: ask again with the same tokens (a member already ours
            // answers as taken), and if that fails too, give up whatever it may have taken.
            Err(e) if e.is_connection_error() && !e.nothing_sent() => {
                tracing::debug!(target: "redis_lock", error = %e, "acquire-all reply lost; asking again with the same tokens");
                once().inspect_err(|_| {
                    self.undo((0..self.keys.len()).filter(|k| mine(*k).is_none()))
                })?
            }
            other => other?,
        };
        match all {
            Some(all) => Ok(all),
            None => self.one_by_one(|k| mine(k).map(|l| l.fence)),
        }
    }

    fn meta(&self) -> &str {
        self.opts.metadata.as_deref().unwrap_or("")
    }

    /// The whole set one member after the other, in name order, where one script cannot take
    /// it; `held(k)`: the fence of member `k` when it is ours already.
    fn one_by_one(&self, held: impl Fn(usize) -> Option<u64>) -> Result<AllAttempt> {
        let inner = self.inner;
        let mut fences = vec![0; self.keys.len()];
        let mut taken = Vec::new();
        for (k, keys) in self.keys.iter().enumerate() {
            if let Some(fence) = held(k) {
                fences[k] = fence;
                continue;
            }
            let args = AttemptArgs {
                burned: None,
                keys,
                token: &self.ids.token,
                ttl: self.ttl,
                holder: &inner.holder,
                meta: self.meta(),
                min_hold: Duration::ZERO,
                waiter: &self.ids.waiter,
                register: Duration::ZERO,
                fair: false,
                registered: false,
                native: None,
                since: crate::wire::unix_ms_now(),
            };
            // No native fast path: a member is a hash whose fencing token is stored, so what
            // `inspect` shows is the holder's exactly (a string lock's is the counter's).
            match inner.deployment.attempt(&*self.mutex, &args, None) {
                Ok(attempted) => match attempted.attempt {
                    Attempt::Acquired { fence } => {
                        fences[k] = fence;
                        taken.push(k);
                    }
                    Attempt::Busy {
                        holder_ttl, holder, ..
                    } => {
                        self.undo(taken);
                        return Ok(AllAttempt::Busy {
                            index: k,
                            holder_ttl,
                            holder,
                        });
                    }
                },
                Err(e) => {
                    // This member too: its reply may be what was lost.
                    taken.push(k);
                    self.undo(taken);
                    return Err(e);
                }
            }
        }
        Ok(AllAttempt::Acquired { fences })
    }

    /// Gives up members `which` taken (or maybe taken) under this acquisition's token: each
    /// sent at once, and again in the background until Redis answers when it is not
    /// (`giveback.rs`), as a single lock's undo is.
    fn undo(&self, which: impl IntoIterator<Item = usize>) {
        for k in which {
            self.inner.give_back_now(giveback::Job {
                primitive: Arc::clone(&self.mutex),
                keys: self.keys[k].clone(),
                token: self.ids.token.clone(),
                grant: self.ids.grant.clone(),
                registration: String::new(),
                cooldown: Duration::ZERO,
                // A member is a string lock whose value we do not know.
                native: true,
                value: None,
                kind: giveback::Kind::Undo,
                until: Instant::now() + self.ttl,
            });
        }
    }

    /// Every member is ours: one lease each (the member already held keeps its own).
    fn hold(
        &self,
        fences: Vec<u64>,
        held: Vec<(usize, Arc<Lease>)>,
        sent: Instant,
        report: Report<'_>,
    ) -> Result<Vec<Arc<Lease>>> {
        let inner = self.inner;
        let watchdog = self.opts.watchdog.unwrap_or(inner.config.watchdog);
        let mut held = held.into_iter().peekable();
        let mut leases: Vec<Arc<Lease>> = Vec::with_capacity(fences.len());
        for (k, fence) in fences.into_iter().enumerate() {
            if let Some((_, lease)) = held.next_if(|(i, _)| *i == k) {
                leases.push(lease);
                continue;
            }
            let start = Start {
                token: self.ids.token.clone(),
                fence,
                acquired: sent,
                sent,
                set_ttl: self.ttl,
                ttl: self.ttl,
                unclaimed: None,
                registration: String::new(),
                // Every member is taken as a hash (one script, or one by one by the script).
                native: false,
                value: None,
                grant: self.ids.grant.clone(),
                max_hold: self.opts.max_hold,
                cooldown: self.opts.cooldown.unwrap_or_default(),
                on_lost: self
                    .opts
                    .on_lost
                    .clone()
                    .or_else(|| inner.config.default_on_lost.clone()),
                ack: None,
            };
            let name = &self.names[k];
            match start_lease(
                inner,
                &self.mutex,
                name,
                self.keys[k].clone(),
                report,
                start,
                watchdog,
            ) {
                Ok(lease) => leases.push(lease),
                Err(e) => {
                    // All or nothing: give back what is held, and the members not reached.
                    for lease in leases
                        .iter()
                        .chain(held.map(|(_, l)| l).collect::<Vec<_>>().iter())
                    {
                        let _ = lease.release();
                    }
                    self.undo(k + 1..self.keys.len());
                    return Err(e);
                }
            }
        }
        Ok(leases)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(list: &[&str]) -> Vec<String> {
        list.iter().map(|s| (*s).to_owned()).collect()
    }

    #[test]
    fn members_are_sorted_and_bad_lists_refused() {
        assert_eq!(members(names(&["c", "a", "b"])).unwrap(), ["a", "b", "c"]);
        for bad in [
            names(&[]),
            names(&["a", "b", "a"]),
            (0..=MAX_LOCK_ALL).map(|i| format!("k{i}")).collect(),
        ] {
            let err = members(bad).unwrap_err();
            assert!(
                matches!(err, Error::InvalidInput { what: "keys", .. }),
                "{err:?}"
            );
        }
        assert_eq!(
            members((0..MAX_LOCK_ALL).map(|i| format!("k{i}")).collect())
                .unwrap()
                .len(),
            MAX_LOCK_ALL
        );
    }

    /// The multi-lock's check after the limits every acquisition is held to, as the
    /// acquisition runs them.
    fn validate_all(opts: &LockOptions, retry: &RetryStrategy, ttl: Duration) -> Result<()> {
        validate(ttl, opts)?;
        check(opts, retry.is_fair())
    }

    #[test]
    fn options_a_multi_lock_cannot_honour_are_refused() {
        let ttl = Duration::from_secs(1);
        let notify = RetryStrategy::notify();
        assert!(validate_all(&LockOptions::new(), &notify, ttl).is_ok());
        for (opts, retry) in [
            (
                LockOptions::new().hold_at_least(Duration::from_secs(1)),
                notify.clone(),
            ),
            (
                LockOptions::new().replicas(1, Duration::from_secs(1)),
                notify.clone(),
            ),
            (LockOptions::new().reentrant(true), notify.clone()),
            (LockOptions::new(), RetryStrategy::fair()),
        ] {
            assert!(
                matches!(
                    validate_all(&opts, &retry, ttl),
                    Err(Error::InvalidInput { .. })
                ),
                "{opts:?}"
            );
        }
        assert!(validate_all(&LockOptions::new(), &notify, Duration::ZERO).is_err());
    }
}
