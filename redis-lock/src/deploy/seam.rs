//! The seam every lock primitive plugs into: what a primitive does on *one* store, in one
//! round trip each. The deployment runs these on its single store or on every server of a
//! quorum and combines the answers; the acquire loop, waiting, watchdog, lease, registry and
//! retry above only ever see the combined answer. A primitive is its `wire/` module (scripts
//! and typed calls), an implementation of this trait that calls them, and a guard type.
//!
//! It lives in the deployment layer (not in `hold/`) because Redlock must run each operation
//! per server: undoing a partial acquisition, leaving the servers that registered a waiter,
//! settling the fencing counter.

use std::sync::Arc;
use std::time::Duration;

use redis::ConnectionLike;

use crate::error::Result;
use crate::wire::multi::AllAttempt;
use crate::wire::{
    Attempt, AttemptArgs, Broken, Claim, Form, Holder, LockKeys, OwnedTtl, Release, Renewal,
};

/// A lock primitive's operations on one store. Each takes a connection checked out by the
/// deployment, so the request counter, the reply timeouts and broken-connection handling are
/// the store's and not the primitive's business.
pub(crate) trait Primitive: Send + Sync + std::fmt::Debug {
    /// Its name in metrics and spans (`mutex`; a mode for primitives that have one).
    fn kind(&self) -> &'static str;

    /// Take the lock, or find it busy (registering as a waiter as `args` say).
    fn attempt(&self, con: &mut dyn ConnectionLike, args: &AttemptArgs<'_>) -> Result<Attempt>;

    /// What the primitive's native fast path writes for this holder (`AttemptArgs::value`),
    /// for the holder to keep for its release (see `Form::Written`). `None`: it has no native
    /// fast path, or keeps nothing.
    fn native_value(&self, _token: &str, _holder: &str, _meta: &str) -> Option<String> {
        None
    }

    /// Take several locks of this primitive at once, all or none, on a store where one script
    /// can name all their keys: `(keys, owner token)` per member. `Ok(None)`: the primitive
    /// has no such script (the multi-lock then takes the members one by one, in order).
    fn attempt_all(
        &self,
        _con: &mut dyn ConnectionLike,
        _members: &[(&LockKeys, &str)],
        _ttl: Duration,
        _holder: &str,
        _meta: &str,
    ) -> Result<Option<AllAttempt>> {
        Ok(None)
    }

    /// Make a popped grant ours: holder information, minimum hold, full TTL.
    #[allow(clippy::too_many_arguments)]
    fn claim(
        &self,
        con: &mut dyn ConnectionLike,
        keys: &LockKeys,
        grant: &str,
        ttl: Duration,
        holder: &str,
        meta: &str,
        min_hold: Duration,
        registration: &str,
    ) -> Result<Claim>;

    /// Extend the TTL of a lock we hold.
    fn renew(
        &self,
        con: &mut dyn ConnectionLike,
        keys: &LockKeys,
        token: &str,
        ttl: Duration,
    ) -> Result<Renewal>;

    /// Give the lock up (handing it to a waiter under `grant`), keeping it ownerless for the
    /// rest of a minimum hold and for `cooldown`. `undo`: the acquisition is being undone (it
    /// was never held), so neither applies. `form`: what the holder knows of the form the
    /// lock has (a hint for which to read first, and the value a native release compares).
    #[allow(clippy::too_many_arguments)]
    fn release(
        &self,
        con: &mut dyn ConnectionLike,
        keys: &LockKeys,
        token: &str,
        undo: bool,
        cooldown: Duration,
        grant: &str,
        registration: &str,
        form: Form<'_>,
    ) -> Result<Release>;

    /// The remaining TTL of a lock we hold.
    fn owned_ttl(
        &self,
        con: &mut dyn ConnectionLike,
        keys: &LockKeys,
        token: &str,
    ) -> Result<OwnedTtl>;

    /// A waiter gives up: unregister, passing on a grant made for it under `grant`.
    fn leave(
        &self,
        con: &mut dyn ConnectionLike,
        keys: &LockKeys,
        waiter: &str,
        grant: &str,
    ) -> Result<()>;

    /// Redlock: raise this server's fencing counter to `fence` if the lock is ours here.
    fn raise_fence(
        &self,
        con: &mut dyn ConnectionLike,
        keys: &LockKeys,
        token: &str,
        fence: u64,
    ) -> Result<bool>;

    /// Who holds the lock.
    fn inspect(&self, con: &mut dyn ConnectionLike, keys: &LockKeys) -> Result<Option<Holder>>;

    /// Break the lock whoever holds it, handing it to a waiter under `grant`.
    fn force_release(
        &self,
        con: &mut dyn ConnectionLike,
        keys: &LockKeys,
        grant: &str,
    ) -> Result<Broken>;

    /// What an acquisition does when this thread already holds the same name through this
    /// client, by a lease of primitive `held` (its [`kind`](Self::kind)) under `token`. The
    /// mutex: join it (if reentrant) when it is a mutex too; anything else is a new attempt.
    fn nested(&self, held: &'static str, token: &str) -> Nested {
        let _ = token;
        if held == self.kind() {
            Nested::Join
        } else {
            Nested::Attempt(None)
        }
    }

    /// The wake-up list a waiter of this primitive blocks on (`waiter`: its id; `fair`: fair
    /// mode). The mutex: the shared list, or the fair waiter's own.
    fn wake_list(&self, keys: &LockKeys, waiter: &str, fair: bool) -> String {
        crate::wire::mutex::wake_list(keys, waiter, fair)
    }

    /// Whether the primitive is sound on a Redlock quorum; if not, acquisitions under Redlock
    /// are refused with `Error::InvalidInput` before anything is sent.
    fn quorum_sound(&self) -> bool {
        true
    }

    /// The refusal of a cool-down (`Error::InvalidInput`, sent before anything else) when a
    /// release of this primitive cannot keep what it held taken by nobody for a while; `None`
    /// when it can. The same refusal for `LockOptions::cooldown` and for
    /// `LockGuard::release_after`.
    fn refuse_cooldown(&self) -> Option<crate::error::Error> {
        None
    }
}

/// See [`Primitive::nested`].
#[derive(Debug)]
pub(crate) enum Nested {
    /// Join the held lease if the acquisition is reentrant, else `Error::AlreadyHeld`.
    Join,
    /// Refuse with `Error::UpgradeRefused`: the acquisition would wait for this very thread.
    Refuse,
    /// Attempt as usual, with this primitive instead (`None`: the same).
    Attempt(Option<Arc<dyn Primitive>>),
}
