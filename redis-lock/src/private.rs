//! What `#[distributed_lock]` expands to. Not public API: no stability promise, may change in
//! any release.
//!
//! The expansion of a locked function is, in outline:
//!
//! ```text
//! let held = match enter(client, Target::Lock(key), options, "path::to::function") {
//!     Continue(held) => held,      // the lock is ours (or joined, when re-entered)
//!     Break(ret) => return ret,    // Err(lock error) / skipped
//! };
//! finish(call_once(move || -> Ret { body }), held)  // release; a lost lock turns Ok into Err
//! ```
//!
//! The traits below decide, per return type, what "failed", "skipped" and "lost" look like.
//! Whether the function's return type implements them is the one check that needs types, so
//! their `on_unimplemented` messages are the macro's error messages for it.

use std::ops::ControlFlow;
use std::sync::Arc;
use std::time::Duration;

use crate::client::LockClient;
use crate::error::{Error, LostReason, Result};
use crate::guard::LockGuard;
use crate::hold::lease::{Lease, ReleaseOutcome};
use crate::multi::MultiGuard;
use crate::options::LockOptions;

pub use crate::global::default_client;
pub use std::format;

/// Passes a `client = <expr>` through, so `&Arc<LockClient>` or `&LazyLock<LockClient>`
/// deref-coerce to `&LockClient` here.
#[inline]
pub fn client(client: &LockClient) -> Result<&LockClient> {
    Ok(client)
}

/// Calls the body. A closure passed here is `FnOnce`, so a body may return a reborrow of a
/// `&mut` parameter; and the body's `return` and `?` end the closure, not the function, so
/// `finish` sees every outcome.
#[inline(always)]
pub fn call_once<R, F: FnOnce() -> R>(body: F) -> R {
    body()
}

/// A lock taken (or joined) for one call of a locked function, and what its return type does
/// when the lock turns out lost.
#[must_use]
pub struct Held<R> {
    guard: Holding,
    lost: fn(R, Error, &'static str) -> R,
    function: &'static str,
}

/// One lock (`key = ...`) or several (`keys = [...]`).
#[derive(Debug)]
enum Holding {
    One(LockGuard),
    All(MultiGuard),
}

impl<R> std::fmt::Debug for Held<R> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Held")
            .field("guard", &self.guard)
            .field("function", &self.function)
            .finish()
    }
}

impl<R> Held<R> {
    /// The guard, for `guard = name` with `key`.
    ///
    /// # Panics
    ///
    /// Never from the macro's expansion, which calls it for `key` only.
    #[inline]
    pub fn guard(&self) -> &LockGuard {
        match &self.guard {
            Holding::One(guard) => guard,
            Holding::All(_) => unreachable!("the expansion binds a MultiGuard for `keys`"),
        }
    }

    /// The guard, for `guard = name` with `keys`.
    ///
    /// # Panics
    ///
    /// Never from the macro's expansion, which calls it for `keys` only.
    #[inline]
    pub fn multi_guard(&self) -> &MultiGuard {
        match &self.guard {
            Holding::All(guard) => guard,
            Holding::One(_) => unreachable!("the expansion binds a LockGuard for `key`"),
        }
    }
}

/// Releases the lock (one round trip, the same one dropping the guard would make; none for a
/// re-entered lock) and hands back what the body returned, unless the lock was lost during the
/// call. The body's value comes first so that it is computed before `held` is moved here.
pub fn finish<R>(ret: R, held: Held<R>) -> R {
    match lost_during_call(held.guard) {
        None => ret,
        Some(lost) => (held.lost)(ret, lost, held.function),
    }
}

/// `Some(Error::Lost)` when a lock was not held for the whole call.
fn lost_during_call(holding: Holding) -> Option<Error> {
    match holding {
        Holding::One(guard) => lost_one(guard),
        Holding::All(guard) => lost_all(guard),
    }
}

/// [`lost_one`] for every member: the first member lost, by name.
fn lost_all(guard: MultiGuard) -> Option<Error> {
    let seen = guard.ensure_held().err();
    let leases = guard.leases().to_vec();
    let outcomes = guard.release().unwrap_or_default();
    seen.or_else(|| {
        outcomes
            .into_iter()
            .zip(leases)
            .find_map(|((key, outcome), lease)| match outcome {
                ReleaseOutcome::Late => Some(Error::Lost {
                    key,
                    reason: found_gone(&lease),
                }),
                ReleaseOutcome::Lost => Some(Error::Lost {
                    key,
                    reason: LostReason::TakenOver,
                }),
                _ => None,
            })
    })
}

/// `Some(Error::Lost)` when the lock was not held for the whole call: the watchdog or the
/// local expiry estimate says so, or the release found the key expired or re-owned.
fn lost_one(guard: LockGuard) -> Option<Error> {
    let seen = guard.ensure_held().err();
    let key = guard.key().to_owned();
    let lease = Arc::clone(&guard.lease);
    let lost = |reason| Error::Lost { key, reason };
    match guard.release() {
        Ok(ReleaseOutcome::Late) => seen.or_else(|| Some(lost(found_gone(&lease)))),
        Ok(ReleaseOutcome::Lost) => seen.or_else(|| Some(lost(LostReason::TakenOver))),
        // A failed release is logged by the lease and the lock expires with its TTL; as far
        // as this process can tell it was held for the whole call.
        Ok(_) | Err(_) => seen,
    }
}

/// Why a `Late` release found the lock gone: the reason the lease kept (`Deleted` when it
/// went before its TTL could have run out).
fn found_gone(lease: &Lease) -> LostReason {
    lease.lost_reason().unwrap_or(LostReason::Expired)
}

/// What a locked function takes: the attribute's `key` (one lock; its mode, `mode = "read"`,
/// is in the options), `key` with `permits = N` (a permit of that semaphore), or `keys` (every
/// lock together).
#[derive(Debug, Clone, Copy)]
pub enum Target<'a> {
    Lock(&'a str),
    Permit(&'a str, u32),
    All(&'a [&'a str]),
}

impl Target<'_> {
    /// The options the expansion's come to: a single lock or permit is reentrant (a locked
    /// function may call itself, or another of the same lock); a multi-lock is not.
    fn options(self, options: LockOptions, function: &'static str) -> LockOptions {
        let options = options.metadata(function);
        match self {
            Target::Lock(_) | Target::Permit(..) => options.reentrant(true),
            Target::All(_) => options,
        }
    }

    /// Takes it, waiting as the options say: busy until the end of the wait is an error (with
    /// its holder), as the client's waiting calls report it. A lock's primitive comes from the
    /// table of primitives by its mode (`LockClient::acquire_with`), a permit's from its
    /// semaphore.
    fn acquire(self, client: &LockClient, options: &LockOptions) -> Result<Holding> {
        Ok(match self {
            Target::Lock(key) => Holding::One(client.acquire_with(key, options)?),
            Target::Permit(key, permits) => {
                Holding::One(client.semaphore(key, permits)?.acquire_with(options)?)
            }
            Target::All(keys) => Holding::All(client.acquire_all_with(keys, options)?),
        })
    }

    /// Takes it if it is free within the wait: `Ok(None)` when busy until its end (also when
    /// this thread holds it already and may not join it), as the client's `try_` calls
    /// answer.
    fn try_acquire(self, client: &LockClient, options: &LockOptions) -> Result<Option<Holding>> {
        Ok(match self {
            Target::Lock(key) => client.try_acquire_with(key, options)?.map(Holding::One),
            Target::Permit(key, permits) => client
                .semaphore(key, permits)?
                .try_acquire_with(options)?
                .map(Holding::One),
            Target::All(keys) => client
                .try_acquire_all_with(keys, options)?
                .map(Holding::All),
        })
    }
}

/// Takes the lock(s) for a function whose lock failures go through its `Result`.
pub fn enter<R: Fallible>(
    client: Result<&LockClient>,
    target: Target<'_>,
    options: LockOptions,
    function: &'static str,
) -> ControlFlow<R, Held<R>> {
    let options = target.options(options, function);
    match client.and_then(|client| target.acquire(client, &options)) {
        Ok(guard) => ControlFlow::Continue(Held {
            guard,
            lost: |ret, error, _| R::lost(ret, error),
            function,
        }),
        Err(error) => ControlFlow::Break(R::lock_failed(error)),
    }
}

/// Takes the lock(s) for an `on_busy = "skip"` function: busy skips the call. Without an
/// explicit `wait`, one attempt is made.
pub fn enter_or_skip<R: Skippable>(
    client: Result<&LockClient>,
    target: Target<'_>,
    options: LockOptions,
    function: &'static str,
) -> ControlFlow<R, Held<R>> {
    let mut options = target.options(options, function);
    if options.wait.is_none() {
        options = options.wait(Duration::ZERO);
    }
    match client.and_then(|client| target.try_acquire(client, &options)) {
        Ok(Some(guard)) => ControlFlow::Continue(Held {
            guard,
            lost: R::lost,
            function,
        }),
        Ok(None) => {
            match target {
                Target::Lock(key) => {
                    tracing::info!(target: "redis_lock", key, function, "call skipped: the lock is busy");
                }
                Target::Permit(key, _) => {
                    tracing::info!(target: "redis_lock", key, function, "call skipped: no permit is free");
                }
                Target::All(keys) => {
                    tracing::info!(target: "redis_lock", keys = %keys.join(","), function, "call skipped: a lock is busy");
                }
            }
            ControlFlow::Break(R::skipped())
        }
        Err(error) => ControlFlow::Break(R::lock_failed(error, function)),
    }
}

/// Return types through which a lock failure reaches the caller: `Result<T, E>` with
/// `E: From<redis_lock::Error>`.
#[diagnostic::on_unimplemented(
    message = "`#[distributed_lock]` cannot report lock failures through `{Self}`",
    label = "lock failures are returned through this type",
    note = "return `Result<T, E>` with `E: From<redis_lock::Error>`, or add `on_busy = \"skip\"` \
            for a function returning `()` or `Option<T>`"
)]
pub trait Fallible: Sized {
    /// The value returned when the lock could not be taken.
    fn lock_failed(error: Error) -> Self;
    /// The value returned when the lock was lost during the call: the body's own error wins.
    fn lost(self, error: Error) -> Self;
}

impl<T, E: From<Error>> Fallible for Result<T, E> {
    #[inline]
    fn lock_failed(error: Error) -> Self {
        Err(E::from(error))
    }

    fn lost(self, error: Error) -> Self {
        match self {
            Ok(_) => Err(E::from(error)),
            Err(e) => Err(e),
        }
    }
}

/// Return types of `on_busy = "skip"` functions: `()`, `Option<T>`, and `Result` of those
/// with `E: From<redis_lock::Error>`.
#[diagnostic::on_unimplemented(
    message = "`on_busy = \"skip\"` cannot skip a function returning `{Self}`",
    label = "a skipped call must return a value of this type",
    note = "a skipped call returns `()` or `None`: return `()`, `Option<T>`, `Result<(), E>` or \
            `Result<Option<T>, E>` (with `E: From<redis_lock::Error>`)"
)]
pub trait Skippable: Sized {
    /// The value of a skipped call.
    fn skipped() -> Self;
    /// The value returned when the lock could not be taken for another reason than "busy"
    /// (Redis unreachable, invalid key): an error where the type can carry one, else logged
    /// and skipped.
    fn lock_failed(error: Error, function: &'static str) -> Self;
    /// The value returned when the lock was lost during the call: an error where the type
    /// can carry one (the body's own error wins), else logged.
    fn lost(self, error: Error, function: &'static str) -> Self;
}

/// What a skipped call returns: `()` or `None`.
#[diagnostic::on_unimplemented(
    message = "`on_busy = \"skip\"` cannot make a `{Self}` for a skipped call",
    label = "a skipped call must return a value of this type",
    note = "a skipped call returns `()` or `None`: return `()`, `Option<T>`, `Result<(), E>` or \
            `Result<Option<T>, E>`"
)]
pub trait Nothing {
    /// `()` or `None`.
    fn nothing() -> Self;
}

impl Nothing for () {
    #[inline]
    fn nothing() -> Self {}
}

impl<T> Nothing for Option<T> {
    #[inline]
    fn nothing() -> Self {
        None
    }
}

fn log_unreported(error: &Error, function: &'static str, what: &str) {
    tracing::error!(target: "redis_lock", %error, function, "{what}; the return type cannot carry the error");
}

impl Skippable for () {
    fn skipped() -> Self {}

    fn lock_failed(error: Error, function: &'static str) -> Self {
        log_unreported(
            &error,
            function,
            "call skipped: the lock could not be taken",
        );
    }

    fn lost(self, error: Error, function: &'static str) -> Self {
        log_unreported(&error, function, "the lock was lost during the call");
    }
}

impl<T> Skippable for Option<T> {
    fn skipped() -> Self {
        None
    }

    fn lock_failed(error: Error, function: &'static str) -> Self {
        log_unreported(
            &error,
            function,
            "call skipped: the lock could not be taken",
        );
        None
    }

    fn lost(self, error: Error, function: &'static str) -> Self {
        log_unreported(&error, function, "the lock was lost during the call");
        self
    }
}

impl<T: Nothing, E: From<Error>> Skippable for Result<T, E> {
    fn skipped() -> Self {
        Ok(T::nothing())
    }

    fn lock_failed(error: Error, _function: &'static str) -> Self {
        Err(E::from(error))
    }

    fn lost(self, error: Error, _function: &'static str) -> Self {
        Fallible::lost(self, error)
    }
}

#[cfg(all(test, feature = "macros", feature = "testing"))]
mod tests {
    use crate::testing::RedisServer;
    use crate::{LockClient, LockInfo, distributed_lock};

    /// Inside this package the attribute is told "this crate itself" and names the runtime
    /// `::redis_lock`, as in the package's doctests, binary and examples; here the library's
    /// `extern crate self as redis_lock` is what makes that name resolve.
    #[distributed_lock(key = "inside:{n}", client = client, ttl = "2s", wait = "0s", guard = lock)]
    fn inside(client: &LockClient, n: u32) -> crate::Result<(u64, Option<LockInfo>)> {
        Ok((
            lock.fencing_token(),
            client.inspect(&format!("inside:{n}"))?,
        ))
    }

    #[test]
    fn the_attribute_works_inside_the_library() {
        let server = RedisServer::start();
        let client = LockClient::open(&server.url()).unwrap();
        let (token, holder) = inside(&client, 1).unwrap();
        let holder = holder.expect("the lock is taken while the body runs");
        assert_eq!(holder.fencing_token, token, "and it is this call's lock");
        assert!(client.inspect("inside:1").unwrap().is_none(), "released");
    }
}
