//! The mutex as a primitive of the seam (`wire/seam.rs`): each operation is the request of
//! its file in this folder. It has every capability: grants, the native fast path, Redlock,
//! and several locks at once (the multi-lock).

use std::time::Duration;

use super::super::commit::Check;
use super::super::multi::{self, AllArgs, AllAttempt};
use super::super::request::Request;
use super::super::seam::{AllAtOnce, Grants, Native, Primitive, Redlock};
use super::super::{
    Attempt, AttemptArgs, Broken, Claim, ClaimArgs, Holder, LockKeys, OwnedTtl, Release,
    ReleaseArgs, Renewal,
};
use super::NativeTry;

/// One owner at a time.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Mutex;

impl Primitive for Mutex {
    fn attempt(&self, args: &AttemptArgs<'_>) -> Request<Attempt> {
        super::acquire(args)
    }

    fn renew(&self, keys: &LockKeys, token: &str, ttl: Duration) -> Request<Renewal> {
        super::renew(keys, token, ttl)
    }

    fn release(&self, args: &ReleaseArgs<'_>) -> Request<Release> {
        super::release(args)
    }

    fn owned_ttl(&self, keys: &LockKeys, token: &str) -> Request<OwnedTtl> {
        super::owned_ttl(keys, token)
    }

    fn commit_check(&self, keys: &LockKeys) -> Check {
        super::commit_check(keys)
    }

    fn transfer(&self, keys: &LockKeys, token: &str, fresh: &str) -> Request<OwnedTtl> {
        super::transfer(keys, token, fresh)
    }

    fn leave(&self, keys: &LockKeys, waiter: &str, grant: &str) -> Request<()> {
        super::leave(keys, waiter, grant)
    }

    fn inspect(&self, keys: &LockKeys) -> Request<Option<Holder>> {
        super::inspect(keys)
    }

    fn force_release(&self, keys: &LockKeys, grant: &str) -> Request<Broken> {
        super::force_release(keys, grant)
    }

    fn wake_list(&self, keys: &LockKeys, waiter: &str, fair: bool) -> String {
        super::wake_list(keys, waiter, fair)
    }

    fn grants(&self) -> Option<&dyn Grants> {
        Some(self)
    }

    fn native(&self) -> Option<&dyn Native> {
        Some(self)
    }

    fn redlock(&self) -> Option<&dyn Redlock> {
        Some(self)
    }

    fn all_at_once(&self) -> Option<&dyn AllAtOnce> {
        Some(self)
    }
}

impl Grants for Mutex {
    fn claim(&self, args: &ClaimArgs<'_>) -> Request<Claim> {
        super::claim(args)
    }
}

impl Native for Mutex {
    fn value(&self, args: &AttemptArgs<'_>) -> Option<String> {
        super::native_value(args)
    }

    fn attempt_native(
        &self,
        args: &AttemptArgs<'_>,
        value: &str,
        pipelined: bool,
    ) -> Request<NativeTry> {
        super::native_attempt(args, value, pipelined)
    }

    fn release_native(&self, args: &ReleaseArgs<'_>) -> Option<Request<Option<bool>>> {
        super::native_release(args)
    }
}

impl Redlock for Mutex {
    fn raise_fence(&self, keys: &LockKeys, token: &str, fence: u64) -> Request<bool> {
        super::raise_fence(keys, token, fence)
    }
}

impl AllAtOnce for Mutex {
    fn attempt_all(&self, args: &AllArgs<'_>) -> Request<AllAttempt> {
        multi::acquire_all(args)
    }
}
