//! The mutex's implementation of the primitive seam: each operation is the matching typed call
//! of `wire::mutex`.

use std::time::Duration;

use redis::ConnectionLike;

use crate::deploy::seam::Primitive;
use crate::error::Result;
use crate::wire::multi::AllAttempt;
use crate::wire::mutex::{self as script, MinHold};
use crate::wire::{
    Attempt, AttemptArgs, Broken, Claim, Form, Holder, LockKeys, OwnedTtl, Release, Renewal,
};

/// One owner at a time.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Mutex;

impl Primitive for Mutex {
    fn kind(&self) -> &'static str {
        "mutex"
    }

    fn attempt(&self, con: &mut dyn ConnectionLike, args: &AttemptArgs<'_>) -> Result<Attempt> {
        script::acquire(con, args)
    }

    fn native_value(&self, token: &str, holder: &str, meta: &str) -> Option<String> {
        Some(script::string_value(token, holder, meta))
    }

    fn attempt_all(
        &self,
        con: &mut dyn ConnectionLike,
        members: &[(&LockKeys, &str)],
        ttl: Duration,
        holder: &str,
        meta: &str,
    ) -> Result<Option<AllAttempt>> {
        crate::wire::multi::acquire_all(con, members, ttl, holder, meta).map(Some)
    }

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
    ) -> Result<Claim> {
        script::claim(con, keys, grant, ttl, holder, meta, min_hold, registration)
    }

    fn renew(
        &self,
        con: &mut dyn ConnectionLike,
        keys: &LockKeys,
        token: &str,
        ttl: Duration,
    ) -> Result<Renewal> {
        script::renew(con, keys, token, ttl)
    }

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
    ) -> Result<Release> {
        let min_hold = if undo {
            MinHold::Ignore
        } else {
            MinHold::Respect
        };
        script::release(
            con,
            keys,
            token,
            min_hold,
            cooldown,
            grant,
            registration,
            form,
        )
    }

    fn owned_ttl(
        &self,
        con: &mut dyn ConnectionLike,
        keys: &LockKeys,
        token: &str,
    ) -> Result<OwnedTtl> {
        script::owned_ttl(con, keys, token)
    }

    fn leave(
        &self,
        con: &mut dyn ConnectionLike,
        keys: &LockKeys,
        waiter: &str,
        grant: &str,
    ) -> Result<()> {
        script::leave(con, keys, waiter, grant)
    }

    fn raise_fence(
        &self,
        con: &mut dyn ConnectionLike,
        keys: &LockKeys,
        token: &str,
        fence: u64,
    ) -> Result<bool> {
        script::raise_fence(con, keys, token, fence)
    }

    fn inspect(&self, con: &mut dyn ConnectionLike, keys: &LockKeys) -> Result<Option<Holder>> {
        script::inspect(con, keys)
    }

    fn force_release(
        &self,
        con: &mut dyn ConnectionLike,
        keys: &LockKeys,
        grant: &str,
    ) -> Result<Broken> {
        script::force_release(con, keys, grant)
    }
}
