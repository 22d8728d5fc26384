//! Everything Redis sees: the key layout, the Lua scripts, the commands, and for each
//! protocol operation a function that takes typed arguments and returns its request as a
//! value (`request.rs`: the bytes to send and the decoder of the reply), built without a
//! connection. The seam every primitive implements (`seam.rs`) is made of these.
//!
//! Reply codes, the order of `KEYS` and `ARGV`, and the string formats that travel through
//! Redis (holder information, grants, waiter flags) are known here and nowhere else: the layers
//! above see only the types below. This layer imports nothing of the crate but `error`.
//!
//! One protocol operation is one unit, the way mini-redis keeps one command's format in one
//! file: each primitive is a folder (`mutex/`, `rwlock/`, `semaphore/`) with a file per
//! operation (`acquire.rs`, `renew.rs`, `release.rs`, ...) that holds the operation's script
//! (with its `KEYS`, `ARGV` and reply codes in its doc comment), the function that builds its
//! request and what decodes its reply (shared decoders in `reply.rs`), and their tests; the
//! folder's `mod.rs` implements the seam with them. What this file holds is what every
//! operation shares: the arguments of the seam's operations and the millisecond rounding.

pub(crate) mod commands;
#[macro_use]
pub(crate) mod keys;
#[macro_use]
mod lua;

// After `lua`: these use its macros.
pub(crate) mod cancel;
pub(crate) mod commit;
pub(crate) mod multi;
pub(crate) mod mutex;
mod reply;
pub(crate) mod request;
pub(crate) mod resp;
pub(crate) mod rwlock;
pub(crate) mod seam;
pub(crate) mod semaphore;
pub(crate) mod token;
pub(crate) mod tracking;

use std::time::Duration;

pub(crate) use keys::LockKeys;

/// A real connection a request goes out on (`Request::on`): a pooled one, a cluster's, a
/// master's tracked connection, a test's.
pub(crate) type Con<'a> = dyn redis::ConnectionLike + 'a;
pub(crate) use lua::{FENCE_MIN, HANDOFF_GRACE, LATE_MS};
pub(crate) use reply::{
    Attempt, Broken, BusyHolder, Claim, Grant, Holder, Info, NativeTry, OwnedTtl, Release, Renewal,
    parse_grant,
};
// The shared decoders, for every primitive's requests (the test-only primitive that proves
// the seam, `hold/stash.rs`, is one file outside this layer, and uses them too).
use reply::{count, int, millis, text, uint, unexpected};
pub(crate) use reply::{
    decode_attempt_reply, decode_broken, decode_claim, decode_inspect, decode_owned_ttl,
    decode_release, decode_renew,
};
use resp::Decimal;

/// Redis takes expiries in whole milliseconds. A duration is sent rounded *down*, and every
/// local estimate of an expiry must use the same rounded value (`whole_ms`), so the holder
/// never believes in a lock that Redis has already dropped.
pub(crate) fn ms(d: Duration) -> u64 {
    // Callers validated d against MAX_TTL, so this cannot saturate in practice.
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// `d` as Redis will apply it: rounded down to whole milliseconds.
pub(crate) fn whole_ms(d: Duration) -> Duration {
    Duration::from_millis(ms(d))
}

/// What a holder knows of how its lock is stored, for the release: which form to read first
/// (see `mutex/mod.rs`, "Two forms"), and whether a native compare-and-delete can release it.
/// A guess: a wrong one costs Redis one failed read (or the client one round trip), never a
/// wrong answer.
#[derive(Clone, Copy)]
pub(crate) enum Form<'a> {
    /// Most likely a hash (and always for a primitive with one form).
    Hash,
    /// Most likely a string lock whose value we do not know (a lease resumed from a handle,
    /// a multi-lock's member).
    String,
    /// Most likely the string lock we wrote, this value: where the store's server has
    /// `DELIFEQ`, that deletes it (the mutex's `native_release`).
    Written(&'a str),
}

/// Without the value: it starts with the owner token.
impl std::fmt::Debug for Form<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Form::Hash => "Hash",
            Form::String => "String",
            Form::Written(_) => "Written",
        })
    }
}

impl<'a> Form<'a> {
    /// The form a holder expects: taken on the native fast path (`native`) or not, and what
    /// that path wrote, when the holder kept it.
    pub(crate) fn of(native: bool, value: Option<&'a str>) -> Form<'a> {
        match (native, value) {
            (false, _) => Form::Hash,
            (true, None) => Form::String,
            (true, Some(value)) => Form::Written(value),
        }
    }

    /// The lock was most likely taken on the native fast path.
    pub(crate) fn is_string(&self) -> bool {
        !matches!(self, Form::Hash)
    }
}

/// What one acquisition attempt sends, the same to every store it goes to.
#[derive(Debug, Clone, Copy)]
pub(crate) struct AttemptArgs<'a> {
    pub(crate) keys: &'a LockKeys,
    pub(crate) token: &'a str,
    pub(crate) ttl: Duration,
    /// `host \n pid \n`: the start of the holder information (see [`holder_prefix`]).
    pub(crate) holder: &'a str,
    pub(crate) meta: &'a str,
    pub(crate) min_hold: Duration,
    /// The acquisition's waiter id (names it in the registry and its fair wake-up list).
    pub(crate) waiter: &'a str,
    /// Register as a waiter that comes back within this long, if the lock is busy; zero: do
    /// not register (the caller will not wait).
    pub(crate) register: Duration,
    /// Fair mode: queue in arrival order.
    pub(crate) fair: bool,
    /// An earlier attempt of this acquisition registered already.
    pub(crate) registered: bool,
    /// This attempt takes the primitive's native fast path first, writing this value (made
    /// before the attempt, so that the holder keeps it for its release). Decided once, by the
    /// primitive's `Native` capability (`deploy::seam`), for an attempt the deployment lets
    /// take it (one store, where a pipeline of native commands is one request, and no recent
    /// sign that the lock is busy); `None`: the script.
    pub(crate) native: Option<&'a str>,
    /// The caller's clock when it made the attempt, Unix ms ([`unix_ms_now`]): the mutex
    /// stores it as the holder's `since`, and a fencing counter that is gone starts from it
    /// (× 1000), so every server of a Redlock starts the same number.
    pub(crate) since: u64,
    /// After a native attempt that found the key taken: the fencing number it used up and
    /// whether it started the counter, for the script to give back (the mutex's `acquire`).
    pub(crate) burned: Option<(u64, bool)>,
}

/// This machine's clock, Unix milliseconds (0 before 1970).
pub(crate) fn unix_ms_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// What a waiter's claim of a grant it popped sends.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ClaimArgs<'a> {
    pub(crate) keys: &'a LockKeys,
    /// The grant token: the lock is ours under it.
    pub(crate) grant: &'a str,
    pub(crate) ttl: Duration,
    /// `host \n pid \n` (see [`holder_prefix`]).
    pub(crate) holder: &'a str,
    pub(crate) meta: &'a str,
    pub(crate) min_hold: Duration,
    /// Our own waiter registration to forget, or "".
    pub(crate) registration: &'a str,
}

/// What a release sends.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ReleaseArgs<'a> {
    pub(crate) keys: &'a LockKeys,
    pub(crate) token: &'a str,
    /// The owner token a waiter the lock is handed to gets.
    pub(crate) grant: &'a str,
    /// Our own leftover waiter registration to forget, or "".
    pub(crate) registration: &'a str,
    /// Keep the lock ownerless this long (zero: none).
    pub(crate) cooldown: Duration,
    /// Undoing an acquisition that was never held: no minimum hold or cool-down applies.
    pub(crate) undo: bool,
    pub(crate) form: Form<'a>,
    /// Sent on a connection that routes by key (a Redis Cluster's): the script then names
    /// every key it touches, not just the ones it reads from `KEYS` (see the mutex's release).
    pub(crate) routed: bool,
}

impl AttemptArgs<'_> {
    /// The numbers among the first six `ARGV` of the semaphore's and the read-write lock's
    /// acquire scripts (see [`script_args`](Self::script_args)): ttl_ms, register_ms.
    pub(crate) fn numbers(&self) -> [Decimal; 2] {
        [Decimal::new(ms(self.ttl)), Decimal::new(ms(self.register))]
    }

    /// The first six `ARGV` of the semaphore's and the read-write lock's acquire scripts:
    /// token, ttl_ms, holder, meta, waiter id, register_ms (`numbers`: from
    /// [`numbers`](Self::numbers)).
    pub(crate) fn script_args<'d>(&'d self, numbers: &'d [Decimal; 2]) -> [&'d [u8]; 6] {
        let [ttl, register] = numbers;
        [
            self.token.as_bytes(),
            ttl.as_bytes(),
            self.holder.as_bytes(),
            self.meta.as_bytes(),
            self.waiter.as_bytes(),
            register.as_bytes(),
        ]
    }
}

/// The start of the holder information stored with every lock this process takes: `host \n
/// pid \n`; the scripts append the acquisition time and the metadata.
pub(crate) fn holder_prefix(host: &str, pid: u32) -> String {
    format!("{host}\n{pid}\n")
}

/// `holder` (a [`holder_prefix`]) followed by this machine's clock as the holder's `since`:
/// `host \n pid \n since \n`, what a holder without stored information yet gets when it
/// replaces its metadata (a grant not claimed yet).
pub(crate) fn holder_since_now(holder: &str) -> String {
    let mut info = String::with_capacity(holder.len() + 16);
    info.push_str(holder);
    info.push_str(&unix_ms_now().to_string());
    info.push('\n');
    info
}
