//! A blocking distributed lock on Redis, for programs without an async runtime.
//!
//! `redis-lock` gives threads in different processes (and on different machines) a
//! `Mutex`-like lock through one Redis server: a pooled connection, an RAII guard that
//! releases on drop, and a watchdog thread per held lock that keeps the lock alive while the
//! guard lives and tells the holder when the lock was lost anyway.
//!
//! The [`guide`] module is the user's guide: holding and losing a lock, waiting, the other
//! primitives, deployments, the attribute, the command line, observability, testing, failures.
//!
//! # Quick start
//!
//! ```no_run
//! use std::time::Duration;
//!
//! fn main() -> redis_lock::Result<()> {
//!     let locks = redis_lock::LockClient::open("redis://127.0.0.1/")?;
//!
//!     // Waits until the lock is free, like `Mutex::lock`.
//!     let guard = locks.lock("nightly-report")?;
//!     // ... do the work; the watchdog renews the lock meanwhile ...
//!     guard.check_held()?; // asks Redis: still ours? then commit
//!     drop(guard); // released
//!
//!     // One attempt only: `None` means somebody else holds it.
//!     match locks.try_lock("nightly-report")? {
//!         Some(_guard) => println!("got it"),
//!         None => println!("busy"),
//!     }
//!
//!     // Everything else goes through per-call options.
//!     let guard = locks
//!         .options("invoice:42")
//!         .ttl(Duration::from_secs(5))
//!         .wait(Duration::from_secs(1))
//!         .metadata("settling")
//!         .acquire()?;
//!     println!("fencing token {}", guard.fencing_token());
//!     Ok(())
//! }
//! ```
//!
//! # Several locks, handing a lock on, cancelling a wait
//!
//! - [`LockClient::lock_all`] (and `try_lock_all`, `try_lock_all_for`, `acquire_all_with`)
//!   takes several locks together, all or none, into one [`MultiGuard`]; callers asking for
//!   overlapping sets in any order do not deadlock.
//! - [`LockGuard::handle`] and [`LockGuard::into_handle`] turn a held lock into a
//!   [`LeaseHandle`] another thread or process resumes with [`LockClient::resume`]: whoever
//!   has the handle owns the lock.
//! - [`LockOptions::cancel`] with a [`CancelToken`] lets another thread stop a waiting
//!   acquisition: it fails with [`Error::Cancelled`] within a round trip or two.
//!
//! # Semantics & limits
//!
//! - **Lease, not a mutex.** A lock is a Redis key with a TTL. The watchdog renews it every
//!   `ttl / 3`; if the holder process dies, the lock frees up within one TTL. A transient
//!   Redis error during renewal is retried until the lock would have expired; then the guard
//!   counts as lost.
//! - **A lock can be lost while held**: a process paused (GC, swap, `SIGSTOP`) past the TTL,
//!   a Redis restart without persistence, an operator breaking the lock. The guard finds out
//!   (watchdog, [`LockGuard::is_lost`], [`LockGuard::ensure_held`], the `on_lost` callback),
//!   but only after the fact. For writes that must never come from a stale holder, pass
//!   [`LockGuard::fencing_token`] to the resource and have it reject lower tokens.
//! - **Release tells the truth**: [`LockGuard::release`] reports
//!   [`ReleaseOutcome::Released`], [`Late`](ReleaseOutcome::Late) (it had expired) or
//!   [`Lost`](ReleaseOutcome::Lost) (someone else holds it; their lock is untouched).
//! - **Waiting** is by notification: a waiter registers with the lock when it finds it
//!   busy and blocks (`BLPOP`) on a wake-up list; a release that sees live waiters grants the
//!   lock to exactly one of them through that list, so the lock goes to a waiter (not back to
//!   the thread that released it) as soon as the release's reply reaches it. A waiter never
//!   sleeps longer than the holder's remaining TTL, so a crashed holder is noticed when its
//!   lock expires. [`RetryStrategy::fair`] hands the lock over in strict arrival order.
//! - **Clocks**: expiry is measured by Redis; the holder's own estimate starts before its
//!   request is sent, so it errs on the side of "lost".
//! - **One Redis** is a single point of truth: if it fails over to a replica that had not
//!   received the lock, two holders can exist. [`LockOptions::replicas`] (`WAIT`) and
//!   [`LockOptions::replicas_fsynced`] (`WAITAOF`) make acquisition wait for replica
//!   acknowledgement.
//! - **Fencing tokens live in Redis too**: a Redis that loses its data (restart without
//!   persistence) loses the counter with the locks; the next acquisition starts a new counter
//!   from the clock in microseconds, so tokens keep increasing unless that clock is behind
//!   the one that started the lost counter. Two holders at once remain possible after such a
//!   loss: run Redis with `appendonly yes` and `appendfsync always` to keep locks and counter.
//!   `SAFETY.md` in the repository lists every guarantee and limit with the test that
//!   exercises it.
//! - **Beyond one Redis**: [`LockClient::sentinel_builder`] follows Sentinel failovers,
//!   `LockClient::cluster_builder` (feature `cluster`) works on Redis Cluster, and
//!   [`LockClient::redlock_builder`] holds a lock on a majority of independent servers.
//!   `SAFETY.md` compares what each survives and costs.
//!
//! # Cargo features
//!
//! - `macros` (default): the `#[distributed_lock]` attribute, with
//!   [`set_default_client`] for the client it uses.
//! - `cluster`: `LockClient::cluster_builder`, through the `redis` crate's cluster client.
//! - `testing`: `testing::RedisServer`, throwaway `redis-server` processes for your tests
//!   (with replicas, a fault-injecting TCP proxy, TLS servers, a Redis Cluster and a Sentinel
//!   group).
//! - `tls`: `rediss://` URLs, through rustls with the ring crypto provider (builds with a C
//!   compiler only, no OpenSSL). `rediss://host/#insecure` skips certificate verification; to
//!   verify against your own CA, build a `redis::Client` with `redis::Client::build_with_tls`
//!   and pass it to [`LockClient::from_pool`].
//! - `metrics`: metrics through the [`metrics`](https://docs.rs/metrics) facade, so any
//!   exporter works (see [`describe_metrics`] for the list). Without it, spans are still
//!   there (see "Observability").
//! - `serde`: `Serialize` and `Deserialize` for [`LeaseHandle`].
//! - `cli`: the `redis-lock` command-line tool (`cargo install --path redis-lock --features
//!   cli`; it includes `tls`). The library itself does not use the tool's dependencies.

//!
//! # Observability
//!
//! Every acquisition runs in an `acquire` span (target `redis_lock`, level INFO) with the
//! lock's name, [label](LockOptions::label), primitive and wait budget, and on close its
//! outcome (`acquired`, `busy`, `timeout`, `error`), the time waited, the attempts made and
//! the fencing token; a `hold` span covers each held lock from acquisition to release (or
//! drop), with how it ended (`released`, `late`, `lost`, `expired`). Both carry
//! `otel.kind` and `otel.status_code` for OpenTelemetry bridges. Owner tokens and passwords
//! never appear in spans, events, `Debug` or errors.
//!
//! With the `metrics` feature the same events feed metrics (see [`describe_metrics`]),
//! labelled by the lock's *label*, never by its name, so that the number of time series
//! stays bounded.
//!
// Without the `metrics` feature there is no `describe_metrics` to link to (a default build's
// docs had two broken links): the links above go to the feature's description instead.
#![cfg_attr(
    not(feature = "metrics"),
    doc = "[`describe_metrics`]: #cargo-features"
)]
#![warn(missing_docs)]
// docs.rs builds with every feature and `--cfg docsrs`: each gated item says which feature it
// needs.
#![cfg_attr(docsrs, feature(doc_cfg))]
#![cfg_attr(not(test), deny(clippy::panic))]

// Layers, bottom up (arrows point down only; `scripts/check-layers` enforces it):
// wire (what Redis sees) <- store (connections to one deployment) <- deploy (one store or a
// quorum; the primitive seam) <- hold (acquire loop, lease, watchdog, registry, retry) <- the
// public surface below. `error` and `options` are vocabulary every layer may use.
mod deploy;
pub mod guide;
mod hold;
mod store;
mod wire;

#[doc(hidden)]
#[path = "private.rs"]
pub mod __private;
mod builder;
mod cancel;
mod client;
mod error;
mod global;
mod guard;
mod handle;
mod info;
mod leader;
mod list;
mod multi;
mod observe;
mod options;
mod retry;
mod rwlock;
mod semaphore;

#[cfg(feature = "testing")]
#[cfg_attr(docsrs, doc(cfg(feature = "testing")))]
pub mod testing;

pub use builder::Builder;
pub use cancel::CancelToken;
pub use client::{LockClient, LockRequest};
pub use error::{Error, HolderInfo, LostReason, Result};
pub use global::{default_client, set_default_client};
pub use guard::LockGuard;
pub use handle::LeaseHandle;
pub use hold::lease::ReleaseOutcome;
pub use hold::multi::MAX_LOCK_ALL;
#[cfg(feature = "metrics")]
pub use hold::observe::describe_metrics;
pub use info::LockInfo;
pub use leader::{Leader, Leadership};
pub use multi::MultiGuard;
pub use observe::{LockChange, LockObserver, PermitsChange};
pub use options::{LockMode, LockOptions, LostEvent, MAX_METADATA_LEN, MAX_TTL};
pub use retry::RetryStrategy;
pub use semaphore::{PermitInfo, Semaphore, SemaphoreInfo};
pub use store::notify::LossDetection;
pub use wire::keys::{MAX_KEY_LEN, MAX_NAMESPACE_LEN};
pub use wire::semaphore::MAX_PERMITS;

#[cfg(feature = "macros")]
#[cfg_attr(docsrs, doc(cfg(feature = "macros")))]
pub use redis_lock_macros::distributed_lock;

/// The `redis` crate this library is built on, re-exported so that [`Error::Redis`]'s source,
/// [`LockClient::from_pool`]'s connections and your own commands use the very same version,
/// without a second `redis` dependency to keep in step.
pub use redis;

/// The `r2d2` crate this library pools connections with, re-exported for
/// [`LockClient::from_pool`] and the source of [`Error::Pool`].
pub use r2d2;

// `#[distributed_lock]` names this library `::redis_lock` when used inside this package (its
// doctests, binary and examples link it under that name): this makes the name work in the
// library itself too (only its unit tests use the attribute so far).
#[allow(unused_extern_crates)]
extern crate self as redis_lock;

/// The attribute in this package's doctests, which are crates of their own that link the
/// library as `redis_lock` (the manifest lookup answers "this package itself" there too).
///
/// ```no_run
/// #[redis_lock::distributed_lock(key = "report:{day}", ttl = 10, wait = "0s")]
/// fn report(day: u32) -> redis_lock::Result<u32> {
///     Ok(day)
/// }
///
/// fn main() {
///     let _ = report(1);
/// }
/// ```
#[cfg(all(doctest, feature = "macros"))]
pub struct AttributeInDoctests;
