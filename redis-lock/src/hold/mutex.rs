//! The mutex's implementation of the primitive seam: each operation is the matching typed call
//! of `wire::mutex`. It has every capability: grants, the native fast path, Redlock, and
//! several locks at once (the multi-lock).

use std::sync::{Arc, LazyLock};
use std::time::Duration;

use super::Kind;
use super::primitive::{Lock, Params};
use crate::deploy::seam::{AllAtOnce, Grants, Native, Primitive, Redlock};
use crate::error::Result;
use crate::options::LockOptions;
use crate::wire::Con;
use crate::wire::commit::Check;
use crate::wire::multi::{self, AllArgs, AllAttempt};
use crate::wire::mutex as script;
use crate::wire::{
    Attempt, AttemptArgs, Broken, Claim, ClaimArgs, Holder, LockKeys, OwnedTtl, Release,
    ReleaseArgs, Renewal,
};

/// One owner at a time.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Mutex;

impl Mutex {
    /// The mutex (the table's constructor): one shared instance, since it has no state, so
    /// that a `lock` call allocates nothing for it.
    pub(crate) fn make(_: Params) -> Arc<dyn Lock> {
        static MUTEX: LazyLock<Arc<dyn Lock>> = LazyLock::new(|| Arc::new(Mutex));
        Arc::clone(&MUTEX)
    }
}

impl Primitive for Mutex {
    fn attempt(&self, con: &mut Con<'_>, args: &AttemptArgs<'_>) -> Result<Attempt> {
        script::acquire(con, args)
    }

    fn renew(
        &self,
        con: &mut Con<'_>,
        keys: &LockKeys,
        token: &str,
        ttl: Duration,
    ) -> Result<Renewal> {
        script::renew(con, keys, token, ttl)
    }

    fn release(&self, con: &mut Con<'_>, args: &ReleaseArgs<'_>) -> Result<Release> {
        script::release(con, args)
    }

    fn owned_ttl(&self, con: &mut Con<'_>, keys: &LockKeys, token: &str) -> Result<OwnedTtl> {
        script::owned_ttl(con, keys, token)
    }

    fn commit_check(&self, keys: &LockKeys) -> Check {
        script::commit_check(keys)
    }

    fn transfer(
        &self,
        con: &mut Con<'_>,
        keys: &LockKeys,
        token: &str,
        fresh: &str,
    ) -> Result<OwnedTtl> {
        script::transfer(con, keys, token, fresh)
    }

    fn leave(&self, con: &mut Con<'_>, keys: &LockKeys, waiter: &str, grant: &str) -> Result<()> {
        script::leave(con, keys, waiter, grant)
    }

    fn inspect(&self, con: &mut Con<'_>, keys: &LockKeys) -> Result<Option<Holder>> {
        script::inspect(con, keys)
    }

    fn force_release(&self, con: &mut Con<'_>, keys: &LockKeys, grant: &str) -> Result<Broken> {
        script::force_release(con, keys, grant)
    }

    fn wake_list(&self, keys: &LockKeys, waiter: &str, fair: bool) -> String {
        script::wake_list(keys, waiter, fair)
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
    fn claim(&self, con: &mut Con<'_>, args: &ClaimArgs<'_>) -> Result<Claim> {
        script::claim(con, args)
    }
}

impl Native for Mutex {
    fn value(&self, args: &AttemptArgs<'_>) -> Option<String> {
        script::native_value(args)
    }
}

impl Redlock for Mutex {
    fn raise_fence(
        &self,
        con: &mut Con<'_>,
        keys: &LockKeys,
        token: &str,
        fence: u64,
    ) -> Result<bool> {
        script::raise_fence(con, keys, token, fence)
    }
}

impl AllAtOnce for Mutex {
    fn attempt_all(&self, con: &mut Con<'_>, args: &AllArgs<'_>) -> Result<AllAttempt> {
        multi::acquire_all(con, args)
    }
}

impl Lock for Mutex {
    fn kind(&self) -> Kind {
        Kind::Mutex
    }

    /// The mutex takes every option.
    fn check(&self, _opts: &LockOptions, _fair: bool) -> Result<()> {
        Ok(())
    }

    fn holder_fence(&self) -> bool {
        true
    }
}
