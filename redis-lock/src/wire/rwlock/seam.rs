//! The read-write lock as a primitive of the seam (`wire/seam.rs`), for the side (read or
//! write) an instance takes: each operation is the request of its file in this folder. It has
//! none of the seam's capabilities: nothing is granted through its wake-up lists (a woken
//! waiter attempts again), it has no native fast path, and it is not available under Redlock
//! (the quorum rules were designed and tested for one owner per server; shares and waiting
//! writers per server have not been shown sound there, SAFETY.md).

use std::time::Duration;

use super::super::commit::Check;
use super::super::request::Request;
use super::super::seam::Primitive;
use super::super::{
    Attempt, AttemptArgs, Broken, Holder, LockKeys, OwnedTtl, Release, ReleaseArgs, Renewal,
};
use super::Side;

/// One side of a read-write lock; `under`: the write lock's owner token a read share is
/// taken under by the thread that holds it (a downgrade), or empty.
#[derive(Clone)]
pub(crate) struct RwLock {
    pub(crate) side: Side,
    pub(crate) under: String,
}

impl std::fmt::Debug for RwLock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The writer's token is left out: it is what allows renewing and releasing.
        f.debug_struct("RwLock")
            .field("side", &self.side)
            .field("downgrade", &!self.under.is_empty())
            .finish()
    }
}

impl Primitive for RwLock {
    fn attempt(&self, args: &AttemptArgs<'_>) -> Request<Attempt> {
        super::acquire(self.side, args, &self.under)
    }

    fn renew(&self, keys: &LockKeys, token: &str, ttl: Duration) -> Request<Renewal> {
        super::renew(self.side, keys, token, ttl)
    }

    fn release(&self, args: &ReleaseArgs<'_>) -> Request<Release> {
        super::release(self.side, args)
    }

    fn owned_ttl(&self, keys: &LockKeys, token: &str) -> Request<OwnedTtl> {
        super::owned_ttl(self.side, keys, token)
    }

    fn commit_check(&self, keys: &LockKeys) -> Check {
        super::commit_check(self.side, keys)
    }

    fn transfer(&self, keys: &LockKeys, token: &str, fresh: &str) -> Request<OwnedTtl> {
        super::transfer(self.side, keys, token, fresh)
    }

    fn leave(&self, keys: &LockKeys, waiter: &str, _grant: &str) -> Request<()> {
        super::leave(keys, waiter)
    }

    fn inspect(&self, keys: &LockKeys) -> Request<Option<Holder>> {
        super::inspect(keys)
    }

    fn force_release(&self, keys: &LockKeys, _grant: &str) -> Request<Broken> {
        super::force_release(keys)
    }

    fn wake_list(&self, keys: &LockKeys, _waiter: &str, _fair: bool) -> String {
        super::wake_list(keys, self.side)
    }
}
