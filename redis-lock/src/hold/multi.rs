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

use tracing::Span;

use super::acquire::{Deadline, start_lease};
use super::cancel::CancelToken;
use super::lease::{Lease, Start};
use super::observe::{self, Labels};
use super::retry::{RetryStrategy, Step};
use super::{Inner, registry};
use crate::deploy::ReleaseArgs;
use crate::error::{Error, Result};
use crate::options::{LockOptions, MAX_METADATA_LEN, validate_cooldown, validate_ttl};
use crate::wire::multi::AllAttempt;
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

/// Options a multi-lock cannot honour are refused rather than ignored.
fn validate(opts: &LockOptions, retry: &RetryStrategy, ttl: Duration) -> Result<()> {
    validate_ttl(ttl)?;
    if let Some(cooldown) = opts.cooldown {
        validate_cooldown(cooldown)?;
    }
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
    if retry.is_fair() {
        return refuse(
            "retry",
            "a multi-lock does not wait in a fair queue; use a non-fair strategy",
        );
    }
    if opts
        .metadata
        .as_ref()
        .is_some_and(|m| m.len() > MAX_METADATA_LEN)
    {
        return refuse("metadata", "longer than the limit");
    }
    Ok(())
}

/// One multi-lock acquisition.
struct AllAcquisition<'a> {
    inner: &'a Arc<Inner>,
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
    ) -> Result<Option<Vec<Arc<Lease>>>> {
        let labels = Labels {
            label: opts
                .label
                .clone()
                .unwrap_or(std::borrow::Cow::Borrowed(observe::OTHER)),
            primitive: KIND,
        };
        let retry = opts.retry.as_ref().unwrap_or(&self.config.default_retry);
        let waits = deadline.at > deadline.started && *retry != RetryStrategy::none();
        let joined = names.join(",");
        let span = observe::acquire_span(&joined, &labels, waits, deadline.budget());
        let parent = Span::current();
        let mut attempts = 0;
        let result = span.in_scope(|| {
            self.acquire_all_in_span(
                names,
                opts,
                retry,
                deadline,
                &labels,
                &parent,
                &mut attempts,
            )
        });
        let outcome = match &result {
            Ok(Some(_)) => Ok(observe::Outcome::Acquired),
            Ok(None) if waits => Ok(observe::Outcome::Timeout),
            Ok(None) => Ok(observe::Outcome::Busy),
            Err(e) => Err(e),
        };
        let fence = result
            .as_ref()
            .ok()
            .and_then(|l| l.as_ref().and_then(|l| l.iter().map(|l| l.fence).max()));
        observe::acquired(&span, &labels, deadline.started, outcome, attempts, fence);
        result
    }

    #[allow(clippy::too_many_arguments)]
    fn acquire_all_in_span(
        self: &Arc<Self>,
        names: &[String],
        opts: &LockOptions,
        retry: &RetryStrategy,
        deadline: &Deadline,
        labels: &Labels,
        parent: &Span,
        attempts: &mut u32,
    ) -> Result<Option<Vec<Arc<Lease>>>> {
        let keys = names
            .iter()
            .map(|name| self.keys(name))
            .collect::<Result<Vec<_>>>()?;
        let ttl = opts.ttl.unwrap_or(self.config.default_ttl);
        validate(opts, retry, ttl)?;
        self.check_ttl(ttl)?;
        let cancel = opts.cancel.as_ref();
        let cancelled = || {
            cancel
                .is_some_and(CancelToken::is_cancelled)
                .then(|| Error::Cancelled {
                    key: names.join(","),
                })
        };
        if let Some(e) = cancelled() {
            return Err(e);
        }
        if let Some(name) = names
            .iter()
            .find(|name| registry::held_here(self, name).is_some())
        {
            // Waiting would wait for this very thread.
            return Err(Error::AlreadyHeld { key: name.clone() });
        }
        let a = AllAcquisition {
            inner: self,
            names,
            keys,
            opts,
            ttl,
            ids: new_ids()?,
        };
        // Members taken alone while waiting for them (index, lease), sorted by index: the
        // whole set is attempted again with them.
        let mut held: Vec<(usize, Arc<Lease>)> = Vec::new();
        // Gives back the held members from index `from` on.
        let give_back = |held: &mut Vec<(usize, Arc<Lease>)>, from: usize| {
            let keep = held.partition_point(|(i, _)| *i < from);
            for (_, lease) in held.drain(keep..) {
                let _ = lease.release();
            }
        };
        loop {
            if let Some(e) = cancelled() {
                give_back(&mut held, 0);
                return Err(e);
            }
            *attempts += 1;
            let sent = Instant::now();
            let attempt = match a.attempt(&held) {
                Ok(attempt) => attempt,
                Err(e) => {
                    give_back(&mut held, 0);
                    return Err(e);
                }
            };
            let (index, holder_ttl) = match attempt {
                AllAttempt::Acquired { fences } => {
                    let leases = a.hold(fences, held, sent, labels, parent)?;
                    tracing::debug!(target: "redis_lock", keys = %names.join(","), attempts = *attempts, "locks acquired together");
                    return Ok(Some(leases));
                }
                AllAttempt::Busy { index, holder_ttl } => (index, holder_ttl),
            };
            let left = deadline.at.saturating_duration_since(Instant::now());
            match retry.next(*attempts, left, holder_ttl, None) {
                Step::Stop => {
                    give_back(&mut held, 0);
                    return Ok(None);
                }
                Step::WaitSignal(_) => {
                    // Only ever wait for a name after every name held (see the module's doc).
                    give_back(&mut held, index);
                    // Wait for the busy member as any waiter does, and take it.
                    match self.acquire(&self.mutex, &names[index], opts, deadline) {
                        Ok(Some(lease)) => held.push((index, lease)),
                        Ok(None) => {
                            give_back(&mut held, 0);
                            return Ok(None);
                        }
                        Err(e) => {
                            give_back(&mut held, 0);
                            return Err(e);
                        }
                    }
                }
                Step::Sleep(d) => {
                    give_back(&mut held, 0);
                    match cancel {
                        Some(token) => {
                            token.sleep(d);
                        }
                        None => std::thread::sleep(d),
                    }
                }
            }
        }
    }
}

impl AllAcquisition<'_> {
    /// One all-or-nothing attempt; the members in `held` (sorted by index) are ours already.
    fn attempt(&self, held: &[(usize, Arc<Lease>)]) -> Result<AllAttempt> {
        let inner = self.inner;
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
        let meta = self.opts.metadata.as_deref().unwrap_or("");
        let once = || {
            inner
                .deployment
                .attempt_all(&inner.mutex, &members, self.ttl, &inner.holder, meta)
        };
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
        if let Some(all) = all {
            return Ok(all);
        }
        // One by one, in name order.
        let mut fences = vec![0; self.keys.len()];
        let mut taken = Vec::new();
        for (k, keys) in self.keys.iter().enumerate() {
            if let Some(lease) = mine(k) {
                fences[k] = lease.fence;
                continue;
            }
            let args = AttemptArgs {
                keys,
                token: &self.ids.token,
                ttl: self.ttl,
                holder: &inner.holder,
                meta,
                min_hold: Duration::ZERO,
                waiter: &self.ids.waiter,
                register: Duration::ZERO,
                fair: false,
                registered: false,
                native: !inner.deployment.is_quorum(),
                // Made by the fast path itself: a member's lease keeps no value.
                value: "",
            };
            match inner.deployment.attempt(&inner.mutex, &args, None) {
                Ok(attempted) => match attempted.attempt {
                    Attempt::Acquired { fence } => {
                        fences[k] = fence;
                        taken.push(k);
                    }
                    Attempt::Busy { holder_ttl, .. } => {
                        self.undo(taken);
                        return Ok(AllAttempt::Busy {
                            index: k,
                            holder_ttl,
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

    /// Gives up members `which` taken (or maybe taken) under this acquisition's token.
    fn undo(&self, which: impl IntoIterator<Item = usize>) {
        for k in which {
            let undone = self.inner.deployment.release(
                &self.inner.mutex,
                &ReleaseArgs {
                    keys: &self.keys[k],
                    token: &self.ids.token,
                    cooldown: Duration::ZERO,
                    grant: &self.ids.grant,
                    registration: "",
                    undo: true,
                    native: true,
                    value: None,
                },
            );
            if let Err(error) = undone {
                tracing::warn!(target: "redis_lock", key = %self.names[k], %error, "could not give back a lock of a failed multi-lock acquisition; it expires with its ttl");
            }
        }
    }

    /// Every member is ours: one lease each (the member already held keeps its own).
    fn hold(
        &self,
        fences: Vec<u64>,
        held: Vec<(usize, Arc<Lease>)>,
        sent: Instant,
        labels: &Labels,
        parent: &Span,
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
                // One script took every member as a hash (one by one: natively, a guess).
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
            match start_lease(
                inner,
                &inner.mutex,
                &self.names[k],
                self.keys[k].clone(),
                labels,
                parent,
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

    #[test]
    fn options_a_multi_lock_cannot_honour_are_refused() {
        let ttl = Duration::from_secs(1);
        let notify = RetryStrategy::notify();
        assert!(validate(&LockOptions::new(), &notify, ttl).is_ok());
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
                    validate(&opts, &retry, ttl),
                    Err(Error::InvalidInput { .. })
                ),
                "{opts:?}"
            );
        }
        assert!(validate(&LockOptions::new(), &notify, Duration::ZERO).is_err());
    }
}
