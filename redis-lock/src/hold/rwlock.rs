//! The read-write lock's implementation of the primitive seam: each operation is the matching
//! typed call of `wire::rwlock`, for the side (read or write) this instance takes; and the
//! rules for a thread that already holds the name (downgrade, refused upgrade).

use std::sync::Arc;
use std::time::Duration;

use redis::ConnectionLike;

use crate::deploy::seam::{Nested, Primitive};
use crate::error::{Error, Result};
use crate::wire::rwlock::{self as script, Side};
use crate::wire::{
    Attempt, AttemptArgs, Broken, Claim, Form, Holder, LockKeys, OwnedTtl, Release, Renewal,
};

/// Many readers or one writer: one side of it per instance.
#[derive(Clone)]
pub(crate) struct RwLock {
    side: Side,
    /// A read taken by the thread that holds the write lock: the writer's owner token, which
    /// lets the share in beside it (a downgrade). Empty otherwise.
    under: String,
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

impl RwLock {
    /// The read side.
    pub(crate) fn read() -> RwLock {
        RwLock {
            side: Side::Read,
            under: String::new(),
        }
    }

    /// The write side.
    pub(crate) fn write() -> RwLock {
        RwLock {
            side: Side::Write,
            under: String::new(),
        }
    }
}

/// What `LockOptions` a read-write lock cannot honour, refused before anything is sent.
fn unsupported(args: &AttemptArgs<'_>) -> Result<()> {
    if args.fair {
        return Err(Error::invalid(
            "retry",
            "fair waiting is not available for read-write locks: readers enter together, and \
             waiting writers already keep new readers out; use a non-fair strategy",
        ));
    }
    if !args.min_hold.is_zero() {
        return Err(Error::invalid(
            "hold_at_least",
            "a minimum hold is not available for read-write locks",
        ));
    }
    Ok(())
}

impl Primitive for RwLock {
    fn kind(&self) -> &'static str {
        match self.side {
            Side::Read => "read",
            Side::Write => "write",
        }
    }

    fn attempt(&self, con: &mut dyn ConnectionLike, args: &AttemptArgs<'_>) -> Result<Attempt> {
        unsupported(args)?;
        script::acquire(con, self.side, args, &self.under)
    }

    fn claim(
        &self,
        _con: &mut dyn ConnectionLike,
        _keys: &LockKeys,
        _grant: &str,
        _ttl: Duration,
        _holder: &str,
        _meta: &str,
        _min_hold: Duration,
        _registration: &str,
    ) -> Result<Claim> {
        // Nothing is ever granted through the wake-up list: a woken waiter attempts again.
        Ok(Claim::NotOurs)
    }

    fn renew(
        &self,
        con: &mut dyn ConnectionLike,
        keys: &LockKeys,
        token: &str,
        ttl: Duration,
    ) -> Result<Renewal> {
        script::renew(con, self.side, keys, token, ttl)
    }

    fn release(
        &self,
        con: &mut dyn ConnectionLike,
        keys: &LockKeys,
        token: &str,
        undo: bool,
        cooldown: Duration,
        _grant: &str,
        registration: &str,
        _form: Form<'_>,
    ) -> Result<Release> {
        script::release(con, self.side, keys, token, undo, cooldown, registration)
    }

    fn owned_ttl(
        &self,
        con: &mut dyn ConnectionLike,
        keys: &LockKeys,
        token: &str,
    ) -> Result<OwnedTtl> {
        script::owned_ttl(con, self.side, keys, token)
    }

    fn leave(
        &self,
        con: &mut dyn ConnectionLike,
        keys: &LockKeys,
        waiter: &str,
        _grant: &str,
    ) -> Result<()> {
        script::leave(con, keys, waiter)
    }

    fn raise_fence(
        &self,
        _con: &mut dyn ConnectionLike,
        _keys: &LockKeys,
        _token: &str,
        _fence: u64,
    ) -> Result<bool> {
        // Only a quorum raises fences, and read-write locks are refused there.
        Ok(false)
    }

    fn inspect(&self, con: &mut dyn ConnectionLike, keys: &LockKeys) -> Result<Option<Holder>> {
        script::inspect(con, keys)
    }

    fn force_release(
        &self,
        con: &mut dyn ConnectionLike,
        keys: &LockKeys,
        _grant: &str,
    ) -> Result<Broken> {
        script::force_release(con, keys)
    }

    fn wake_list(&self, keys: &LockKeys, _waiter: &str, _fair: bool) -> String {
        script::wake_list(keys, self.side)
    }

    fn nested(&self, held: &'static str, token: &str) -> Nested {
        nested(self.side, held, token)
    }

    /// Not under Redlock: the quorum rules (undoing partial attempts, waking, raising fences)
    /// were designed and tested for one owner per server; shares and waiting writers per
    /// server have not been shown sound there (SAFETY.md), so they are refused.
    fn quorum_sound(&self) -> bool {
        false
    }
}

/// The rules for a thread that already holds the name (see [`Primitive::nested`]):
///
/// | holds \ asks | read                         | write                          |
/// |--------------|------------------------------|--------------------------------|
/// | read         | join (reentrant) or `AlreadyHeld` | refused: `UpgradeRefused`  |
/// | write        | a new share beside it (downgrade) | join (reentrant) or `AlreadyHeld` |
/// | mutex        | an attempt (`WrongType`)     | an attempt (`WrongType`)       |
///
/// A thread that holds both a write lock and a share under it is asked per lease; the
/// acquisition lets a join win over the others (`Inner::acquire_in_span`).
fn nested(side: Side, held: &'static str, token: &str) -> Nested {
    match (side, held) {
        (Side::Read, "read") | (Side::Write, "write") => Nested::Join,
        (Side::Write, "read") => Nested::Refuse,
        (Side::Read, "write") => Nested::Attempt(Some(Arc::new(RwLock {
            side: Side::Read,
            under: token.to_owned(),
        }))),
        _ => Nested::Attempt(None),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_thread_that_holds_the_name_downgrades_but_never_upgrades() {
        assert!(matches!(nested(Side::Read, "read", "t"), Nested::Join));
        assert!(matches!(nested(Side::Write, "write", "t"), Nested::Join));
        assert!(matches!(nested(Side::Write, "read", "t"), Nested::Refuse));
        let Nested::Attempt(Some(p)) = nested(Side::Read, "write", "writer-token") else {
            panic!("a read under a write is a new share");
        };
        assert_eq!(p.kind(), "read");
        let debug = format!("{p:?}");
        assert!(debug.contains("downgrade: true"), "{debug}");
        assert!(
            !debug.contains("writer-token"),
            "no token in Debug: {debug}"
        );
        assert!(matches!(
            nested(Side::Read, "mutex", "t"),
            Nested::Attempt(None)
        ));
        assert!(matches!(
            nested(Side::Write, "mutex", "t"),
            Nested::Attempt(None)
        ));
    }
}
