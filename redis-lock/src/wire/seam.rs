//! The seam every lock primitive plugs into: what a primitive does on *one* store, in one
//! request each. The deployment runs these on its single store or on every server of a
//! quorum and combines the answers; the acquire loop, waiting, watchdog, lease, registry and
//! retry above only ever see the combined answer.
//!
//! Its shape says what a primitive can do, the way `lock_api` separates `RawMutex` from
//! `RawMutexFair` and `RawMutexTimed`: [`Primitive`] is what every primitive has; each
//! capability some primitives have is a trait of its own, which a primitive declares by
//! answering its accessor (`Primitive::grants`, ...) with itself. A primitive without a
//! capability answers `None`, and the layers above take the path that needs none of it; no
//! primitive answers an operation it cannot do with a placeholder.
//!
//! | capability | who has it | what needs it |
//! |---|---|---|
//! | [`Grants`]: a release hands the lock to one waiter as a grant it pops and claims | mutex, semaphore | the handoff (`hold/acquire/handoff.rs`), an adopted grant's first renewal |
//! | [`Native`]: a native fast path (no script) for some attempts | mutex | the acquire loop (the value the holder keeps for its release) |
//! | [`Redlock`]: sound under Redlock, with a fencing token of its own that a quorum raises to agree | mutex | every operation on a quorum (others are refused before anything is sent) |
//! | [`AllAtOnce`]: several locks of it taken all or none by one script | mutex | the multi-lock |
//!
//! Every operation returns a [`Request`]: a value built without a connection, which the
//! deployment sends on its single store or on each server of a quorum (one executor per
//! transport, `deploy/mod.rs`), so acquire, renew and release walk down from the deployment
//! to the primitive's wire operations and never back up. Each primitive implements it beside
//! its operations (`mutex/mod.rs`, `rwlock/mod.rs`, `semaphore/mod.rs`). What the layers
//! above need of a primitive besides these (its kind, which options it takes, what a thread
//! that holds the name already does) is `hold::primitive::Lock`, whose supertrait this is.

use std::sync::Arc;
use std::time::Duration;

use super::commit::Check;
use super::multi::{AllArgs, AllAttempt};
use super::request::Request;
use super::{
    Attempt, AttemptArgs, Broken, Claim, ClaimArgs, Holder, LockKeys, NativeTry, OwnedTtl, Release,
    ReleaseArgs, Renewal,
};
use crate::error::Error;

/// A lock primitive's operations on one store: what every primitive has. Each builds its
/// request without a connection; the deployment sends it, so the request counter, the reply
/// timeouts and broken-connection handling are the store's and not the primitive's business.
pub(crate) trait Primitive: Shared + Send + Sync + std::fmt::Debug {
    /// Take the lock, or find it busy (registering as a waiter as `args` say).
    fn attempt(&self, args: &AttemptArgs<'_>) -> Request<Attempt>;

    /// Extend the TTL of a lock we hold.
    fn renew(&self, keys: &LockKeys, token: &str, ttl: Duration) -> Request<Renewal>;

    /// Give the lock up: handing it to a waiter (under `args.grant`, for a primitive with
    /// [`Grants`]), keeping it ownerless for the rest of a minimum hold and for
    /// `args.cooldown` unless `args.undo` (the acquisition is being undone: it was never held).
    fn release(&self, args: &ReleaseArgs<'_>) -> Request<Release>;

    /// The remaining TTL of a lock we hold.
    fn owned_ttl(&self, keys: &LockKeys, token: &str) -> Request<OwnedTtl>;

    /// The ownership check a commit under a lock we hold runs before its commands, as a value
    /// (its script and keys): the deployment sends it with the commands (`wire/commit.rs`).
    fn commit_check(&self, keys: &LockKeys) -> Check;

    /// Move a lock we hold from owner token `token` to `fresh` (a lease handle resumed once):
    /// its fencing token, TTL and holder information stay. The remaining TTL under `fresh`,
    /// or why it is not ours under `token` (nothing is written then).
    fn transfer(&self, keys: &LockKeys, token: &str, fresh: &str) -> Request<OwnedTtl>;

    /// Replace the metadata stored with a lock we hold: its owner token, fencing token, TTL
    /// and the rest of its holder information stay (`holder`: this process's `host \n pid
    /// \n`, for a lock without holder information yet). Its remaining TTL, or why it is not
    /// ours (nothing is written then).
    fn proclaim(&self, keys: &LockKeys, token: &str, meta: &str, holder: &str)
    -> Request<OwnedTtl>;

    /// A waiter gives up: unregister, passing on a grant made for it under `grant`.
    fn leave(&self, keys: &LockKeys, waiter: &str, grant: &str) -> Request<()>;

    /// Who holds the lock.
    fn inspect(&self, keys: &LockKeys) -> Request<Option<Holder>>;

    /// Break the lock whoever holds it, handing it to a waiter under `grant`.
    fn force_release(&self, keys: &LockKeys, grant: &str) -> Request<Broken>;

    /// The wake-up list a waiter of this primitive blocks on (`waiter`: its id; `fair`: fair
    /// mode), which its releases push to.
    fn wake_list(&self, keys: &LockKeys, waiter: &str, fair: bool) -> String;

    /// [`Grants`], if its releases hand the lock over as a grant.
    fn grants(&self) -> Option<&dyn Grants> {
        None
    }

    /// [`Native`], if it has a native fast path.
    fn native(&self) -> Option<&dyn Native> {
        None
    }

    /// [`Redlock`], if it is sound on a Redlock quorum.
    fn redlock(&self) -> Option<&dyn Redlock> {
        None
    }

    /// [`AllAtOnce`], if several locks of it can be taken by one script.
    fn all_at_once(&self) -> Option<&dyn AllAtOnce> {
        None
    }
}

/// A primitive as a shared value, for the threads of a quorum that ask its servers (late
/// answers are handled after the call returned). Every primitive is a small `Clone` value.
pub(crate) trait Shared {
    fn shared(&self) -> Arc<dyn Primitive>;
}

impl<T: Primitive + Clone + 'static> Shared for T {
    fn shared(&self) -> Arc<dyn Primitive> {
        Arc::new(self.clone())
    }
}

/// Capability: a release that finds waiters hands the lock to exactly one of them as a grant
/// (an owner token pushed to its wake-up list), which the waiter that pops it adopts or claims.
/// A primitive without it wakes its waiters to attempt again: a popped grant is never theirs.
pub(crate) trait Grants {
    /// Make a popped grant ours: holder information, minimum hold, full TTL.
    fn claim(&self, args: &ClaimArgs<'_>) -> Request<Claim>;
}

/// Capability: a native fast path, native commands instead of a script for the attempts that
/// may take it (the mutex: `SET NX PX` + `INCR`).
pub(crate) trait Native {
    /// What attempt `args` writes on the native fast path, when it may take it (the one place
    /// this is decided, before the attempt: the holder keeps the value for its release);
    /// `None`: the script.
    fn value(&self, args: &AttemptArgs<'_>) -> Option<String>;

    /// The native attempt of `args` writing `value` (`pipelined`: on a connection that
    /// takes several native commands in one write; else the same as one script). Busy, the
    /// deployment then sends [`Primitive::attempt`] with what it used up.
    fn attempt_native(
        &self,
        args: &AttemptArgs<'_>,
        value: &str,
        pipelined: bool,
    ) -> Request<NativeTry>;

    /// The native release of `args`, where it may take one (a lock it wrote, nothing else to
    /// do), for a server known or hoped to have the command: `Some(true)` released,
    /// `Some(false)` not (the script then tells why), `None` the server lacks the command.
    fn release_native(&self, args: &ReleaseArgs<'_>) -> Option<Request<Option<bool>>>;
}

/// Capability: sound on a Redlock quorum, held while a majority holds it. Each server keeps
/// its own fencing counter, so an acquisition settles its token across its majority by
/// raising the counters that are behind (see `quorum/`).
pub(crate) trait Redlock {
    /// Raise this server's fencing counter to `fence` if the lock is ours here: `true` when
    /// raised (or already there), `false` when the lock is not ours on this server.
    fn raise_fence(&self, keys: &LockKeys, token: &str, fence: u64) -> Request<bool>;
}

/// Capability: several locks of this primitive taken at once, all or none, on a store where
/// one script can name all their keys (the multi-lock; elsewhere it takes them one by one).
pub(crate) trait AllAtOnce {
    fn attempt_all(&self, args: &AllArgs<'_>) -> Request<AllAttempt>;
}

/// The error of an operation on a Redlock quorum for a primitive without [`Redlock`]. The
/// layers above refuse such a primitive earlier, with its name (`Inner::check_quorum`).
pub(crate) fn not_sound_on_a_quorum() -> Error {
    Error::invalid(
        "primitive",
        "this primitive is not available under Redlock; use a single server, Sentinel or \
         Cluster",
    )
}
