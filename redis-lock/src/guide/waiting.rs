//! Waiting for a busy lock: notify and fair mode, errors, many threads, cancellation.
//!
//! # The calls
//!
//! | call | waits | busy |
//! |---|---|---|
//! | [`lock`](crate::LockClient::lock) | until the lock is free (up to `Builder::default_wait`, none by default), like `Mutex::lock` | `Err(Error::Timeout)` when a wait budget runs out |
//! | [`try_lock`](crate::LockClient::try_lock) | never: one attempt | `Ok(None)` |
//! | [`try_lock_for`](crate::LockClient::try_lock_for), [`try_lock_until`](crate::LockClient::try_lock_until) | up to a duration or an instant | `Ok(None)` |
//! | `options(name)...acquire()`, [`acquire_with`](crate::LockClient::acquire_with) | as [`LockOptions::wait`](crate::LockOptions::wait) says | `Err(Error::Busy)` / `Err(Error::Timeout)` |
//!
//! The `try_` forms answer `Ok(None)` when busy, so "busy" and "Redis failed" never look
//! alike. A waiting call that did not get the lock says who holds it and for how much
//! longer: [`Error::holder`](crate::Error::holder) (host, pid, since, metadata) and
//! [`Error::retry_after`](crate::Error::retry_after) (the remaining TTL: an HTTP
//! `Retry-After` in one line), as the last attempt's busy answer told it, at no extra
//! request. A semaphore names the permit that expires first; a read-write lock its writer,
//! or the share that expires first; Redlock the holder a majority of the servers reported.
//!
//! ```no_run
//! use std::time::Duration;
//!
//! fn main() -> redis_lock::Result<()> {
//!     let locks = redis_lock::LockClient::open("redis://127.0.0.1/")?;
//!     match locks.options("export").wait(Duration::from_millis(200)).acquire() {
//!         Ok(guard) => drop(guard),
//!         Err(e) if e.is_busy() || e.is_timeout() => {
//!             let who = e.holder().and_then(|h| h.host.clone());
//!             println!("held by {who:?}, retry after {:?}", e.retry_after());
//!         }
//!         Err(e) => return Err(e),
//!     }
//!     Ok(())
//! }
//! ```
//!
//! # Notify (the default) and fair mode
//!
//! With [`RetryStrategy::notify`](crate::RetryStrategy::notify), a waiter registers with the
//! lock when it finds it busy and blocks on Redis (`BLPOP`); a release that sees live waiters
//! grants the lock to exactly one of them, which has it when the release's reply reaches it.
//! The lock goes to a waiter, not back to the thread that released it. A waiter never sleeps
//! past the holder's TTL, so a crashed holder's lock is taken a few milliseconds after it
//! expires. [`RetryStrategy::fair`](crate::RetryStrategy::fair) hands the lock over in strict
//! arrival order (refused under Redlock, where each server would keep its own queue). Use
//! the same mode for every caller of a name: a non-fair caller can take a lock whose holder
//! expired in the few milliseconds before the fair queue's head comes back.
//!
//! The polling strategies (`none`, `fixed`, `exponential`, with `max_attempts`, `jitter`
//! and `fail_fast`) remain for callers that want them; they cost no registration in Redis but
//! share the lock unevenly (BENCHMARKS.md, "Contended: one key, 8 workers").
//!
//! ```no_run
//! use std::time::Duration;
//! use redis_lock::{LockOptions, RetryStrategy};
//!
//! fn main() -> redis_lock::Result<()> {
//!     let locks = redis_lock::LockClient::open("redis://127.0.0.1/")?;
//!     let fair = LockOptions::new().retry(RetryStrategy::fair()).wait(Duration::from_secs(10));
//!     let guard = locks.acquire_with("queue-head", &fair)?;
//!     drop(guard);
//!     let polling = LockOptions::new()
//!         .retry(RetryStrategy::fixed(Duration::from_millis(50)).jitter(Duration::from_millis(10)));
//!     let _ = locks.try_acquire_with("queue-head", &polling)?;
//!     Ok(())
//! }
//! ```
//!
//! # Many threads waiting through one client
//!
//! The threads of one client waiting on one lock name share one blocking connection: one of
//! them blocks in `BLPOP` for all, the others sleep on a condition variable, and each is
//! woken by the release that frees its turn. One client serves hundreds of waiting threads
//! without polling or a larger pool (BENCHMARKS.md, "One client, many waiting threads"). The
//! waiting connections are separate from the lock pool (one per lock name waited on at once,
//! at most 4,096 per server), so waiters never take the connections holders need for
//! renewal and release.
//!
//! # The same thread asking again
//!
//! A waiting call (`lock`, `acquire_with`) for a lock this thread already holds through the
//! same client fails at once with `Error::AlreadyHeld` instead of waiting for itself; the
//! `try_` family answers `Ok(None)`, busy, as `std`'s `try_lock` does.
//! [`lock_reentrant`](crate::LockClient::lock_reentrant), or
//! [`LockOptions::reentrant`](crate::LockOptions::reentrant)`(true)`, joins the held lock
//! instead: the lock is released with the last of the guards.
//!
//! # Cancelling a wait
//!
//! [`LockOptions::cancel`](crate::LockOptions::cancel) with a
//! [`CancelToken`](crate::CancelToken) lets another thread stop a waiting acquisition: it
//! leaves the queue within a round trip and fails with `Error::Cancelled`; the next release
//! goes to another waiter. A token cancelled before the call fails it before any request.
//!
//! ```no_run
//! use redis_lock::{CancelToken, Error, LockOptions};
//!
//! fn main() -> redis_lock::Result<()> {
//!     let locks = redis_lock::LockClient::open("redis://127.0.0.1/")?;
//!     let cancel = CancelToken::new();
//!     let waiting = {
//!         let (locks, cancel) = (locks.clone(), cancel.clone());
//!         std::thread::spawn(move || locks.acquire_with("export", &LockOptions::new().cancel(cancel)))
//!     };
//!     cancel.cancel(); // the waiter leaves the queue within a round trip
//!     assert!(matches!(waiting.join().unwrap(), Ok(_) | Err(Error::Cancelled { .. })));
//!     Ok(())
//! }
//! ```
