//! The read-write lock's implementation of the primitive seam: each operation is the matching
//! typed call of `wire::rwlock`, for the side (read or write) this instance takes; and the
//! rules for a thread that already holds the name (downgrade, refused upgrade). It has none
//! of the seam's capabilities: nothing is granted through its wake-up lists (a woken waiter
//! attempts again), it has no native fast path, and it is not available under Redlock.

use std::sync::Arc;
use std::time::Duration;

use super::Kind;
use super::primitive::{Lock, Nested, Params};
use crate::deploy::seam::Primitive;
use crate::error::{Error, Result};
use crate::options::LockOptions;
use crate::wire::Con;
use crate::wire::commit::Check;
use crate::wire::rwlock::{self as script, Side};
use crate::wire::{
    Attempt, AttemptArgs, Broken, Holder, LockKeys, OwnedTtl, Release, ReleaseArgs, Renewal,
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
    /// The read side (the table's constructor).
    pub(crate) fn read(_: Params) -> Arc<dyn Lock> {
        Arc::new(RwLock {
            side: Side::Read,
            under: String::new(),
        })
    }

    /// The write side (the table's constructor).
    pub(crate) fn write(_: Params) -> Arc<dyn Lock> {
        Arc::new(RwLock {
            side: Side::Write,
            under: String::new(),
        })
    }
}

impl Primitive for RwLock {
    fn attempt(&self, con: &mut Con<'_>, args: &AttemptArgs<'_>) -> Result<Attempt> {
        script::acquire(con, self.side, args, &self.under)
    }

    fn renew(
        &self,
        con: &mut Con<'_>,
        keys: &LockKeys,
        token: &str,
        ttl: Duration,
    ) -> Result<Renewal> {
        script::renew(con, self.side, keys, token, ttl)
    }

    fn release(&self, con: &mut Con<'_>, args: &ReleaseArgs<'_>) -> Result<Release> {
        script::release(con, self.side, args)
    }

    fn owned_ttl(&self, con: &mut Con<'_>, keys: &LockKeys, token: &str) -> Result<OwnedTtl> {
        script::owned_ttl(con, self.side, keys, token)
    }

    fn commit_check(&self, keys: &LockKeys) -> Check {
        script::commit_check(self.side, keys)
    }

    fn transfer(
        &self,
        con: &mut Con<'_>,
        keys: &LockKeys,
        token: &str,
        fresh: &str,
    ) -> Result<OwnedTtl> {
        script::transfer(con, self.side, keys, token, fresh)
    }

    fn leave(&self, con: &mut Con<'_>, keys: &LockKeys, waiter: &str, _grant: &str) -> Result<()> {
        script::leave(con, keys, waiter)
    }

    fn inspect(&self, con: &mut Con<'_>, keys: &LockKeys) -> Result<Option<Holder>> {
        script::inspect(con, keys)
    }

    fn force_release(&self, con: &mut Con<'_>, keys: &LockKeys, _grant: &str) -> Result<Broken> {
        script::force_release(con, keys)
    }

    fn wake_list(&self, keys: &LockKeys, _waiter: &str, _fair: bool) -> String {
        script::wake_list(keys, self.side)
    }

    // No `redlock`: the quorum rules (undoing partial attempts, waking, raising fences) were
    // designed and tested for one owner per server; shares and waiting writers per server
    // have not been shown sound there (SAFETY.md), so they are refused.
}

impl Lock for RwLock {
    fn kind(&self) -> Kind {
        match self.side {
            Side::Read => Kind::Read,
            Side::Write => Kind::Write,
        }
    }

    /// No fair waiting (readers enter together, and waiting writers already keep new readers
    /// out) and no minimum hold.
    fn check(&self, opts: &LockOptions, fair: bool) -> Result<()> {
        if fair {
            return Err(Error::invalid(
                "retry",
                "fair waiting is not available for read-write locks: readers enter together, \
                 and waiting writers already keep new readers out; use a non-fair strategy",
            ));
        }
        if !opts.hold_at_least.is_zero() {
            return Err(Error::invalid(
                "hold_at_least",
                "a minimum hold is not available for read-write locks",
            ));
        }
        Ok(())
    }

    /// The write lock has one holder; read shares are many.
    fn holder_fence(&self) -> bool {
        self.side == Side::Write
    }

    fn nested(&self, held: Kind, token: &str) -> Nested {
        nested(self.side, held, token)
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
fn nested(side: Side, held: Kind, token: &str) -> Nested {
    match (side, held) {
        (Side::Read, Kind::Read) | (Side::Write, Kind::Write) => Nested::Join,
        (Side::Write, Kind::Read) => Nested::Refuse,
        (Side::Read, Kind::Write) => Nested::Attempt(Some(Arc::new(RwLock {
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
        assert!(matches!(nested(Side::Read, Kind::Read, "t"), Nested::Join));
        assert!(matches!(
            nested(Side::Write, Kind::Write, "t"),
            Nested::Join
        ));
        assert!(matches!(
            nested(Side::Write, Kind::Read, "t"),
            Nested::Refuse
        ));
        let Nested::Attempt(Some(p)) = nested(Side::Read, Kind::Write, "writer-token") else {
            panic!("a read under a write is a new share");
        };
        assert_eq!(p.kind(), Kind::Read);
        let debug = format!("{p:?}");
        assert!(debug.contains("downgrade: true"), "{debug}");
        assert!(
            !debug.contains("writer-token"),
            "no token in Debug: {debug}"
        );
        assert!(matches!(
            nested(Side::Read, Kind::Mutex, "t"),
            Nested::Attempt(None)
        ));
        assert!(matches!(
            nested(Side::Write, Kind::Mutex, "t"),
            Nested::Attempt(None)
        ));
    }
}
