//! Where locks live: one store, or a Redlock quorum of independent stores. The only place that
//! matches on the deployment; it runs a primitive's operations (the `seam`) on the store or on
//! every server of the quorum and hands back one combined answer.

pub(crate) mod lanes;
pub(crate) mod quorum;
pub(crate) mod send;

use std::collections::BTreeSet;
use std::sync::Weak;
use std::time::Duration;

use crate::error::{Error, Result};
use crate::store::connection::PooledConn;
use crate::store::notify::{LossDetection, Watcher};
use crate::store::waiting::WaitFor;
use crate::store::{Ack, Store, Wake};
use crate::wire::commit::{self, Check, Committed};
use crate::wire::multi::{AllArgs, AllAttempt};
use crate::wire::request::Request;
use crate::wire::seam::Primitive;
use crate::wire::token::new_token;
use crate::wire::{
    Attempt, AttemptArgs, Broken, Claim, ClaimArgs, Holder, LockKeys, OwnedTtl, Release,
    ReleaseArgs, Renewal,
};
use quorum::Quorum;
pub(crate) use send::attempt_on;
use send::{check_once, claim_on, combined_on, leave_on, release_on, release_with, renew_on};

#[derive(Debug)]
pub(crate) enum Deployment {
    Single(Store),
    Quorum(Quorum),
}

/// The combined answer to one attempt, and where a waiter should block next.
#[derive(Debug, Clone)]
pub(crate) struct Attempted {
    pub(crate) attempt: Attempt,
    /// The server a quorum saw the holder on: its release pushes the wake-up there. What the
    /// wait step needs from the attempt travels here, not through shared state.
    pub(crate) wait_on: Option<usize>,
}

/// What watching a held lock came to ([`Deployment::watch`]).
#[derive(Debug)]
pub(crate) enum Watched {
    /// No store notifies: nothing was registered or sent.
    Off,
    /// Registered, not checked: the listener is still connecting, and tells the watcher to
    /// check once it listens (the key could not be tracked before).
    Pending,
    /// Registered and checked.
    Checked(Result<OwnedTtl>),
}

impl Deployment {
    /// How long a lock taken or renewed with `ttl` is safe to rely on, measured from just
    /// before the request was sent. One store: the TTL. A quorum: the TTL minus the clock
    /// drift allowance, since each server's clock times the key on its own.
    pub(crate) fn validity(&self, ttl: Duration) -> Duration {
        match self {
            Deployment::Single(_) => ttl,
            Deployment::Quorum(_) => ttl.saturating_sub(quorum::drift(ttl)),
        }
    }

    /// Fair waiting needs one queue; a quorum would keep one per server, and no one order
    /// holds across a majority.
    pub(crate) fn allows_fair(&self) -> bool {
        matches!(self, Deployment::Single(_))
    }

    /// A Redlock quorum rather than one store.
    pub(crate) fn is_quorum(&self) -> bool {
        matches!(self, Deployment::Quorum(_))
    }

    pub(crate) fn attempt(
        &self,
        p: &dyn Primitive,
        args: &AttemptArgs<'_>,
        ack: Option<Ack>,
    ) -> Result<Attempted> {
        match self {
            Deployment::Single(store) => Ok(Attempted {
                attempt: attempt_on(store, p, args, ack)?,
                wait_on: None,
            }),
            Deployment::Quorum(q) => q.attempt(p, args, ack),
        }
    }

    /// One all-or-nothing attempt on several locks of `p` (`a.members`), as one script.
    /// `Ok(None)` when that is not possible here (a quorum, keys in several Cluster slots, a
    /// primitive without [`AllAtOnce`](crate::wire::seam::AllAtOnce)): take the members one by one instead.
    pub(crate) fn attempt_all(
        &self,
        p: &dyn Primitive,
        a: &AllArgs<'_>,
    ) -> Result<Option<AllAttempt>> {
        let (Deployment::Single(store), Some(all)) = (self, p.all_at_once()) else {
            return Ok(None);
        };
        let keys: Vec<&LockKeys> = a.members.iter().map(|m| m.0).collect();
        if !store.one_script(&keys) {
            return Ok(None);
        }
        let mut conn = store.conn()?;
        all.attempt_all(a).on(&mut conn).map(Some)
    }

    /// A waiter's claim of a grant it popped, with replica acknowledgement as for an attempt.
    /// `Ok(None)` when there are no grants to claim: only a single store hands them out to pop
    /// (under Redlock each server's release grants its copy of the lock under the same token,
    /// so a waiter only peeks and takes the grants by attempting again), and only a primitive
    /// with [`Grants`](crate::wire::seam::Grants) makes them.
    pub(crate) fn claim(
        &self,
        p: &dyn Primitive,
        c: &ClaimArgs<'_>,
        ack: Option<Ack>,
    ) -> Result<Option<Claim>> {
        match self {
            Deployment::Single(store) => claim_on(store, p, c, ack),
            Deployment::Quorum(_) => Ok(None),
        }
    }

    pub(crate) fn renew(
        &self,
        p: &dyn Primitive,
        keys: &LockKeys,
        token: &str,
        ttl: Duration,
    ) -> Result<Renewal> {
        match self {
            Deployment::Single(store) => renew_on(store, p, keys, token, ttl),
            Deployment::Quorum(q) => q.renew(p, keys, token, ttl),
        }
    }

    /// Gives the lock up, handing it over to a waiter under the token `grant` where one is
    /// registered (after `cooldown`, if not zero); `registration` is our own leftover waiter
    /// id to forget (or "").
    pub(crate) fn release(&self, p: &dyn Primitive, r: &ReleaseArgs<'_>) -> Result<Release> {
        match self {
            Deployment::Single(store) => release_on(store, p, r),
            Deployment::Quorum(q) => q.release(p, r),
        }
    }

    /// [`release`](Self::release) on a sentinel-managed master, followed by `WAIT` for the
    /// replica acknowledgement `ack` on the same connection: `true` with the answer when
    /// enough replicas have the release, so it survives a failover. `false` when they do not
    /// (or the wait failed): the master that answered may have been failed over already (it
    /// keeps serving for seconds), and the new one may still hold the lock. Elsewhere a plain
    /// release, `true`.
    pub(crate) fn release_acked(
        &self,
        p: &dyn Primitive,
        r: &ReleaseArgs<'_>,
        ack: Ack,
    ) -> Result<(Release, bool)> {
        match self {
            Deployment::Single(store) if store.epoch().is_some() => on_master(store, |conn| {
                let release = release_with(store, conn, p, r)?;
                let acked = store
                    .await_replicas(conn, ack)
                    .is_ok_and(|acked| acked >= ack.count);
                Ok((release, acked))
            }),
            _ => self.release(p, r).map(|release| (release, true)),
        }
    }

    pub(crate) fn owned_ttl(
        &self,
        p: &dyn Primitive,
        keys: &LockKeys,
        token: &str,
    ) -> Result<OwnedTtl> {
        match self {
            Deployment::Single(store) => {
                let mut conn = store.conn()?;
                p.owned_ttl(keys, token).on(&mut conn)
            }
            Deployment::Quorum(q) => q.owned_ttl(p, keys, token),
        }
    }

    /// Runs `commands` under `check` for the holder of `tokens` (one lock's token, or each
    /// member's of a multi-lock), atomically with the check, in one request
    /// (`wire/commit.rs`), then waits for `ack` (the replica acknowledgement the lock was
    /// taken with): the replies, or which lock was not ours (nothing ran). Never sent again
    /// after a failure: a commit whose reply was lost may have run. On a Redis Cluster every
    /// key, the locks' and the commands', must be in one slot, which the server's `COMMAND
    /// GETKEYS` tells before the commit is sent; a quorum refuses it before anything is sent
    /// (its servers cannot apply writes atomically together).
    pub(crate) fn commit(
        &self,
        check: &Check,
        tokens: &[&str],
        commands: &[Vec<&[u8]>],
        ack: Option<Ack>,
    ) -> Result<(Committed, Option<u32>)> {
        let store = match self {
            Deployment::Single(store) => store,
            Deployment::Quorum(_) => {
                return Err(Error::invalid(
                    "commit",
                    "a Redlock quorum cannot apply writes atomically with its lock on every \
                     server; protect the resource with the guard's fencing token instead",
                ));
            }
        };
        let mut conn = store.conn()?;
        let data_keys = if store.cluster {
            let found = commit::keys_of(&mut conn, commands)?;
            one_slot(&check.keys, &found)?;
            found
        } else {
            Vec::new()
        };
        let committed = commit::commit(check, tokens, &data_keys, commands).on(&mut conn)?;
        let acked = match (&committed, ack) {
            (Committed::Applied(_), Some(ack)) => Some(store.await_replicas(&mut conn, ack)?),
            _ => None,
        };
        Ok((committed, acked))
    }

    /// Watches a held lock for changes by anybody else (`store/notify/`): registers
    /// `watcher` (id `id`) for the lock's key on every store and checks, on the connection
    /// that keeps the key tracked, that `token` still owns it. Called again after each
    /// notification.
    pub(crate) fn watch(
        &self,
        p: &dyn Primitive,
        keys: &LockKeys,
        token: &str,
        id: u64,
        watcher: &Weak<dyn Watcher>,
    ) -> Watched {
        match self {
            Deployment::Single(store) => {
                let watching = store
                    .notifier(&keys.lock)
                    .and_then(|n| n.watch(&keys.lock, id, Weak::clone(watcher)));
                match watching {
                    None => Watched::Off,
                    Some(false) => Watched::Pending,
                    Some(true) => Watched::Checked(again_after_failover(store, || {
                        check_once(store, p, keys, token)
                    })),
                }
            }
            Deployment::Quorum(q) => q.watch(p, keys, token, id, watcher),
        }
    }

    /// Replaces the metadata of the lock `token` holds: its time left, or why it is not ours;
    /// on a quorum once a majority replaced it.
    pub(crate) fn proclaim(
        &self,
        p: &dyn Primitive,
        keys: &LockKeys,
        token: &str,
        meta: &str,
        holder: &str,
    ) -> Result<OwnedTtl> {
        match self {
            Deployment::Single(store) => {
                on_master(store, |conn| p.proclaim(keys, token, meta, holder).on(conn))
            }
            Deployment::Quorum(q) => q.proclaim(p, keys, token, meta, holder),
        }
    }

    /// For an observer of a lock it does not hold: registers `watcher` (id `id`) for the lock
    /// key where the store notifies, and reads who holds it on the connection that keeps the
    /// key tracked, so that the next change by anybody reaches the watcher. The holder, and
    /// whether changes are notified (else the caller polls: a quorum, a store without
    /// notification).
    pub(crate) fn observe(
        &self,
        p: &dyn Primitive,
        keys: &LockKeys,
        id: u64,
        watcher: &Weak<dyn Watcher>,
    ) -> (Result<Option<Holder>>, bool) {
        match self {
            Deployment::Single(store) => observe_on(store, keys, &p.inspect(keys), id, watcher),
            Deployment::Quorum(q) => (q.inspect(p, keys), false),
        }
    }

    /// [`observe`](Self::observe) with the request `read` (a semaphore's permits, say), on
    /// the one store of a single-store deployment; refused on a quorum (`not_single`).
    pub(crate) fn observe_with<T>(
        &self,
        keys: &LockKeys,
        read: &Request<T>,
        id: u64,
        watcher: &Weak<dyn Watcher>,
        not_single: impl FnOnce() -> Error,
    ) -> (Result<T>, bool) {
        match self {
            Deployment::Single(store) => observe_on(store, keys, read, id, watcher),
            Deployment::Quorum(_) => (Err(not_single()), false),
        }
    }

    /// Stops watching (before a release is sent, so its own change is not taken for a loss).
    pub(crate) fn unwatch(&self, keys: &LockKeys, id: u64) {
        for store in self.stores() {
            for notifier in store.notifiers() {
                notifier.unwatch(&keys.lock, id);
            }
        }
    }

    /// How this deployment's losses are found: notified only when every store notifies.
    pub(crate) fn loss_detection(&self) -> LossDetection {
        let all: Vec<LossDetection> = self
            .stores()
            .iter()
            .flat_map(|s| s.notifiers())
            .map(|n| n.detection())
            .collect();
        if all.contains(&LossDetection::Renewal) {
            LossDetection::Renewal
        } else if all.contains(&LossDetection::Reconnecting) {
            LossDetection::Reconnecting
        } else if all.is_empty() || all.contains(&LossDetection::NotStarted) {
            LossDetection::NotStarted
        } else {
            LossDetection::Notified
        }
    }

    /// Moves a lock held under `token` to the owner token `fresh` (a lease handle resumed
    /// once); on a quorum, held under `fresh` once a majority moved it.
    pub(crate) fn transfer(
        &self,
        p: &dyn Primitive,
        keys: &LockKeys,
        token: &str,
        fresh: &str,
    ) -> Result<OwnedTtl> {
        match self {
            Deployment::Single(store) => {
                let mut conn = store.conn()?;
                p.transfer(keys, token, fresh).on(&mut conn)
            }
            Deployment::Quorum(q) => q.transfer(p, keys, token, fresh),
        }
    }

    /// Unregisters a waiter that gives up, passing on a grant a release made for it. Best
    /// effort: a registration that is not removed lapses by itself within the waiter margin.
    pub(crate) fn leave(&self, p: &dyn Primitive, keys: &LockKeys, waiter: &str) {
        match self {
            Deployment::Single(store) => leave_on(store, p, keys, waiter),
            Deployment::Quorum(q) => q.leave(p, keys, waiter),
        }
    }

    /// Blocks until a release wakes us or `timeout` passes, in the group of this client's
    /// threads waiting on the same lock (`store/waiting.rs`). A single store pops the grant;
    /// a quorum only peeks, on the server `wait_on` the attempt saw the holder on.
    /// `cancelled`: the waiter's cancel flag (a cancel also calls [`wake`](Self::wake)).
    pub(crate) fn wait(
        &self,
        keys: &LockKeys,
        list: &str,
        waiter: &str,
        timeout: Duration,
        wait_on: Option<usize>,
        cancelled: Option<&dyn Fn() -> bool>,
    ) -> Wake {
        let w = WaitFor {
            keys,
            list,
            waiter,
            timeout,
            pop: !self.is_quorum(),
            cancelled,
        };
        match self {
            Deployment::Single(store) => store.wait(&w),
            Deployment::Quorum(q) => q.wait(&w, wait_on),
        }
    }

    /// Ends the wait of waiter `id` on `keys` (a cancel): on every store, where its waiting
    /// group wakes it (see `store/waiting.rs`).
    pub(crate) fn wake(&self, keys: &LockKeys, id: &str) -> Result<()> {
        match self {
            Deployment::Single(store) => store.wake(keys, id),
            Deployment::Quorum(q) => {
                for store in q.stores() {
                    store.wake(keys, id)?;
                }
                Ok(())
            }
        }
    }

    pub(crate) fn inspect(&self, p: &dyn Primitive, keys: &LockKeys) -> Result<Option<Holder>> {
        match self {
            Deployment::Single(store) => {
                let mut conn = store.conn()?;
                p.inspect(keys).on(&mut conn)
            }
            Deployment::Quorum(q) => q.inspect(p, keys),
        }
    }

    pub(crate) fn force_release(&self, p: &dyn Primitive, keys: &LockKeys) -> Result<Broken> {
        match self {
            Deployment::Single(store) => {
                let mut conn = store.conn()?;
                p.force_release(keys, &new_token()?).on(&mut conn)
            }
            Deployment::Quorum(q) => q.force_release(p, keys),
        }
    }

    /// The names of the lock keys matching the `SCAN` pattern `pattern`. A quorum scans every
    /// server (a majority must answer): a lock held by a majority is on at least one server
    /// of any majority.
    pub(crate) fn scan(&self, namespace: &str, pattern: &str) -> Result<BTreeSet<String>> {
        match self {
            Deployment::Single(store) => store.scan(namespace, pattern),
            Deployment::Quorum(q) => q.scan(namespace, pattern),
        }
    }

    /// `PING`: one store must answer; a quorum, a majority of its servers.
    pub(crate) fn ping(&self) -> Result<()> {
        match self {
            Deployment::Single(store) => store.ping(),
            Deployment::Quorum(q) => q.ping(),
        }
    }

    /// The stores, for `Debug` and for operations that go to every one of them.
    pub(crate) fn stores(&self) -> Vec<&Store> {
        match self {
            Deployment::Single(store) => vec![store],
            Deployment::Quorum(q) => q.stores().collect(),
        }
    }
}

impl Deployment {
    /// The sentinel epoch of a sentinel-managed master (how often it was seen to move);
    /// `None` for every other deployment.
    pub(crate) fn epoch(&self) -> Option<u64> {
        match self {
            Deployment::Single(store) => store.epoch(),
            Deployment::Quorum(_) => None,
        }
    }

    /// Runs `job` once the sentinels name another master than in `epoch`, unless `until` has
    /// passed. `false` where masters do not move that way (no sentinels): nothing is kept.
    pub(crate) fn after_move(
        &self,
        epoch: Option<u64>,
        until: std::time::Instant,
        job: crate::store::sentinel::MoveJob,
    ) -> bool {
        match self {
            Deployment::Single(store) => store.after_move(epoch, until, job),
            Deployment::Quorum(_) => false,
        }
    }

    /// The one store of a single-store deployment (a server, Sentinel, Cluster); `None` under
    /// Redlock. For primitives that are only sound on one store (the semaphore) and their
    /// calls outside the seam.
    pub(crate) fn single(&self) -> Option<&Store> {
        match self {
            Deployment::Single(store) => Some(store),
            Deployment::Quorum(_) => None,
        }
    }
}

/// Whether `e` is what a failover looks like from a client: the connection broke or could
/// not be made, or the server answered that it is a replica now (`READONLY`) or has lost its
/// master (`MASTERDOWN`).
pub(crate) fn is_failover_error(e: &Error) -> bool {
    use redis::{ErrorKind, ServerErrorKind};
    e.is_connection_error()
        || matches!(e, Error::Redis(r) if matches!(
            r.kind(),
            ErrorKind::Server(ServerErrorKind::ReadOnly | ServerErrorKind::MasterDown)
        ))
}

/// An observer's read of `keys` on `store` (see `Deployment::observe`): registered as a
/// watcher where the store notifies, and read there on the connection that keeps the key
/// tracked (`combined_on`), else on a pooled connection.
fn observe_on<T>(
    store: &Store,
    keys: &LockKeys,
    read: &Request<T>,
    id: u64,
    watcher: &Weak<dyn Watcher>,
) -> (Result<T>, bool) {
    let watching = store
        .notifier(&keys.lock)
        .and_then(|n| n.watch(&keys.lock, id, Weak::clone(watcher)));
    let answer = match watching {
        Some(_) => combined_on(store, &keys.lock, read),
        None => store.conn().and_then(|mut conn| read.on(&mut conn)),
    };
    (answer, watching.is_some())
}

/// A Cluster commit names only keys of one slot, the first lock's (a hash tag shared with
/// the lock name): the script runs on that lock's node, atomically there only.
fn one_slot(locks: &[String], found: &[Vec<u8>]) -> Result<()> {
    #[cfg(feature = "cluster")]
    {
        use crate::wire::keys::slot_of;
        let Some(first) = locks.first() else {
            return Ok(());
        };
        let slot = slot_of(first);
        if let Some(lock) = locks.iter().find(|k| slot_of(k) != slot) {
            return Err(Error::invalid(
                "commit",
                format!(
                    "the multi-lock's members {first:?} and {lock:?} are in different Cluster \
                     slots: one commit runs on one node; give the names one hash tag"
                ),
            ));
        }
        if let Some(key) = found.iter().find(|k| slot_of(k) != slot) {
            return Err(Error::invalid(
                "commit",
                format!(
                    "key {:?} is in another Cluster slot than the lock: give it the lock's hash \
                     tag ({{...}} in both names) so that the commit can run where the lock is",
                    String::from_utf8_lossy(key)
                ),
            ));
        }
    }
    #[cfg(not(feature = "cluster"))]
    let _ = (locks, found);
    Ok(())
}

/// Runs `op` on a pooled connection of `store`; on a sentinel-managed master, when it failed as
/// a failover would make it fail and the sentinels now name another master, once more on the
/// new master. Only for token-checked operations (renew, release), which are safe to resend:
/// the first may have been done by the old master, and the second finds the lock in the state
/// the new one has.
fn on_master<T>(store: &Store, mut op: impl FnMut(&mut PooledConn) -> Result<T>) -> Result<T> {
    again_after_failover(store, || store.conn().and_then(|mut conn| op(&mut conn)))
}

/// Runs `send`; when it failed as a failover would make it fail and the sentinels now name
/// another master, runs it once more (on the new master). The rule of `on_master`, for
/// callers that reach the master their own way (a combined renewal).
pub(crate) fn again_after_failover<T>(
    store: &Store,
    mut send: impl FnMut() -> Result<T>,
) -> Result<T> {
    let epoch = store.epoch();
    match send() {
        Err(e) if is_failover_error(&e) && store.relocate(epoch) => {
            tracing::debug!(target: "redis_lock", error = %e, "the master moved; sending again to the new one");
            send()
        }
        done => done,
    }
}

#[cfg(test)]
mod tests {
    use super::is_failover_error;
    use crate::error::Error;
    use redis::{ErrorKind, RedisError, ServerErrorKind};

    fn redis(kind: ErrorKind) -> Error {
        Error::Redis(RedisError::from((kind, "test")))
    }

    #[test]
    fn failover_errors_are_broken_connections_and_demoted_or_masterless_servers() {
        assert!(is_failover_error(&redis(ErrorKind::Server(
            ServerErrorKind::ReadOnly
        ))));
        assert!(is_failover_error(&redis(ErrorKind::Server(
            ServerErrorKind::MasterDown
        ))));
        assert!(is_failover_error(&Error::Redis(RedisError::from(
            std::io::Error::from(std::io::ErrorKind::ConnectionReset)
        ))));
        assert!(is_failover_error(&Error::Redis(RedisError::from(
            std::io::Error::from(std::io::ErrorKind::ConnectionRefused)
        ))));
        // Answers that another master would give too: not resent.
        assert!(!is_failover_error(&redis(ErrorKind::Server(
            ServerErrorKind::NoScript
        ))));
        assert!(!is_failover_error(&redis(ErrorKind::Server(
            ServerErrorKind::NoPerm
        ))));
        assert!(!is_failover_error(&Error::invalid("name", "bad")));
    }
}
