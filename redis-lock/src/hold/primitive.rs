//! What a primitive is to the layers above the deployment: [`Lock`] (its kind, the one check
//! of the options it takes, whether its lock has one holder's fencing token, what a thread
//! that holds the name already does), on top of its operations on one store
//! (`wire::seam::Primitive`, the supertrait); and the shape of the table from kind to
//! primitive (`primitives!`), filled in by `hold/mod.rs`.

use std::sync::Arc;

use super::Kind;
use crate::error::Result;
use crate::options::LockOptions;
use crate::wire::seam::Primitive;

/// A primitive as the acquire loop, the lease, handles and the public surface see it.
pub(crate) trait Lock: Primitive {
    /// Which primitive this is (its name in metrics, spans and a handle's text form:
    /// [`Kind::word`]).
    fn kind(&self) -> Kind;

    /// The one check of what an acquisition asks for (`opts`, and `fair`: a fair retry
    /// strategy): `Error::InvalidInput` for an option this primitive cannot honour, before
    /// anything is sent. Also asked for a release's cool-down (`LockGuard::release_after`:
    /// `opts` with that cool-down alone).
    fn check(&self, opts: &LockOptions, fair: bool) -> Result<()>;

    /// Its lock has one holder, whose own fencing token `inspect` reports (a mutex, a write
    /// lock), so a resumed handle's token is compared with it; `false` for a lock of many
    /// holders (read shares, permits), whose `inspect` shows one of them.
    fn holder_fence(&self) -> bool;

    /// The primitive its keys belong to, for the calls that find a lock's primitive by
    /// asking each of the table (`Inner::any_primitive`): the sides of a read-write lock
    /// are one. By default its kind.
    fn family(&self) -> Kind {
        self.kind()
    }

    /// Shown by the calls about any lock (`LockClient::inspect`, `force_release`, `list`) as
    /// one holder's lock. A primitive of many holders with a view of its own answers `false`
    /// (the semaphore: `Semaphore::inspect` lists its permits), and those calls answer
    /// `WrongType` on its keys, as on any key not a lock's.
    fn shown_as_lock(&self) -> bool {
        true
    }

    /// What an acquisition does when this thread already holds the same name through this
    /// client, by a lease of kind `held` under `token`. By default: join it (if reentrant)
    /// when it is of this kind; anything else is a new attempt.
    fn nested(&self, held: Kind, token: &str) -> Nested {
        let _ = token;
        if held == self.kind() {
            Nested::Join
        } else {
            Nested::Attempt(None)
        }
    }
}

/// See [`Lock::nested`].
#[derive(Debug)]
pub(crate) enum Nested {
    /// Join the held lease if the acquisition is reentrant, else `Error::AlreadyHeld`.
    Join,
    /// Refuse with `Error::UpgradeRefused`: the acquisition would wait for this very thread.
    Refuse,
    /// Attempt as usual, with this primitive instead (`None`: the same).
    Attempt(Option<Arc<dyn Lock>>),
}

/// What an instance of a primitive is made with: the parameters some primitives take per
/// call (the others ignore them).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Params {
    /// A semaphore's number of permits, stored if the name has no limit yet.
    pub(crate) permits: u32,
}

impl Params {
    /// No parameter given: one permit (a semaphore made this way, for a resumed permit, never
    /// attempts, which is the only use of its permits).
    pub(crate) const DEFAULT: Params = Params { permits: 1 };
}

/// The table from kind to primitive: the `Kind` enum and, per kind, its word and how it is
/// made. One row per kind: `Kind = "word" [/ "serde name"] => constructor [, mod module];`,
/// where the constructor is a `fn(Params) -> Arc<dyn Lock>`, and `mod module` declares the
/// module the primitive is in, so that a primitive in one file is added by one row (the
/// library's own primitives declare their modules as usual, where `cargo fmt` finds them). A
/// row's attributes (`#[cfg(test)]`) go to everything the row makes. The serde name is what a
/// serialized lease handle calls the kind (the word, when none is given).
macro_rules! primitives {
    ($(
        $(#[$attr:meta])*
        $kind:ident = $word:literal $(/ $serde:literal)? => $make:path $(, mod $module:ident)?;
    )*) => {
        $( $(#[$attr])* $(pub(crate) mod $module;)? )*

        /// Which primitive holds a lock (see the table in `hold/mod.rs`).
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
        #[cfg_attr(
            feature = "serde",
            derive(serde::Serialize, serde::Deserialize),
            // The name and spelling lease handles were serialized with before this table.
            serde(rename = "HoldKind", rename_all = "lowercase")
        )]
        pub(crate) enum Kind {
            $(
                $(#[$attr])*
                $(#[cfg_attr(feature = "serde", serde(rename = $serde))])?
                $kind,
            )*
        }

        impl Kind {
            /// Every kind, in the table's order.
            pub(crate) const ALL: &'static [Kind] = &[$($(#[$attr])* Kind::$kind,)*];

            /// Its word: in metrics and spans, and in a lease handle's text form.
            pub(crate) fn word(self) -> &'static str {
                match self {
                    $($(#[$attr])* Kind::$kind => $word,)*
                }
            }

            /// The primitive of this kind, made with `params`.
            pub(crate) fn make(
                self,
                params: $crate::hold::primitive::Params,
            ) -> std::sync::Arc<dyn $crate::hold::primitive::Lock> {
                match self {
                    $($(#[$attr])* Kind::$kind => $make(params),)*
                }
            }
        }
    };
}

impl Kind {
    /// The kind whose word is `word`.
    pub(crate) fn from_word(word: &str) -> Option<Kind> {
        Kind::ALL.iter().copied().find(|k| k.word() == word)
    }

    /// The kind an acquisition with `mode` takes: the mutex, or a side of the read-write
    /// lock.
    pub(crate) fn of_mode(mode: Option<crate::options::LockMode>) -> Kind {
        use crate::options::LockMode;
        match mode {
            None => Kind::Mutex,
            Some(LockMode::Read) => Kind::Read,
            Some(LockMode::Write) => Kind::Write,
        }
    }

    /// The kind a lease handle made before handles carried their kind holds: a mutex.
    pub(crate) fn unnamed() -> Kind {
        Kind::Mutex
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_kind_makes_a_primitive_of_its_kind_and_reads_back_from_its_word() {
        for &kind in Kind::ALL {
            assert_eq!(kind.make(Params::DEFAULT).kind(), kind);
            assert_eq!(Kind::from_word(kind.word()), Some(kind));
        }
        assert_eq!(Kind::from_word("upgrade"), None);
    }
}
