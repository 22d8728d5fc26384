//! The read-write lock to the layers above the deployment: the table's constructors (one
//! per side), its `Lock` rules, and what a thread that already holds the name does
//! (downgrade, refused upgrade). Its operations on one store are `wire::rwlock`'s.

use std::sync::Arc;

use super::Kind;
use super::primitive::{Lock, Nested, Params};
use crate::error::{Error, Result};
use crate::options::LockOptions;
use crate::wire::rwlock::{RwLock, Side};

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

    /// Both sides are one lock on the same keys.
    fn family(&self) -> Kind {
        Kind::Read
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
