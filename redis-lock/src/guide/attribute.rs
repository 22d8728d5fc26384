//! `#[distributed_lock]`: a function run under a lock (feature `macros`, on by default).
//!
//! The attribute takes the lock before the body, releases it after the body on every exit
//! path (return, `?`, panic) and has the watchdog renew it meanwhile. Its own documentation,
//! [`distributed_lock`](crate::distributed_lock), is the full manual; this chapter is the
//! overview.
//!
//! ```no_run
//! use redis_lock::distributed_lock;
//!
//! #[derive(Debug)]
//! enum AppError { Lock(redis_lock::Error) /* , ... */ }
//! impl From<redis_lock::Error> for AppError {
//!     fn from(e: redis_lock::Error) -> Self { AppError::Lock(e) }
//! }
//! struct Invoice { id: u64 }
//!
//! /// Never settles one invoice twice at once, on any machine.
//! #[distributed_lock(key = "invoice:{invoice.id}", ttl = 10, wait = "5s", guard = lock)]
//! fn settle(invoice: &Invoice) -> Result<(), AppError> {
//!     // ... compute ...
//!     lock.check_held()?; // still ours? then commit, with lock.fencing_token()
//!     Ok(())
//! }
//!
//! /// Both accounts locked together, all or none; no deadlock with a transfer the other way.
//! #[distributed_lock(keys = ["account:{from}", "account:{to}"], ttl = 10)]
//! fn transfer(from: u64, to: u64) -> Result<(), AppError> {
//!     Ok(())
//! }
//!
//! /// A cron job: runs at most once per hour across all machines, skipped elsewhere.
//! #[distributed_lock(key = "hourly-report", on_busy = "skip", hold_at_least = "1h")]
//! fn hourly_report() {}
//!
//! fn main() -> Result<(), AppError> {
//!     // Once at startup; or set REDIS_URL; or give a function `client = <&LockClient>`.
//!     redis_lock::set_default_client(redis_lock::LockClient::open("redis://127.0.0.1/")?)?;
//!     settle(&Invoice { id: 42 })?;
//!     transfer(7, 9)?;
//!     hourly_report();
//!     Ok(())
//! }
//! ```
//!
//! | option | meaning |
//! |---|---|
//! | `key = "invoice:{invoice.id}"` | lock name; `{param}`, `{param.field}` and `{self.field}` are written with `Display`; a name that is not a parameter is a compile error |
//! | `keys = ["account:{from}", "account:{to}"]` | instead of `key`: several locks taken together, all or none (`lock_all`); `guard = g` is then a `&MultiGuard` |
//! | `ttl = 10` / `ttl = "500ms"` | whole seconds or a duration (`ms`, `s`, `m`, `h`) |
//! | `wait = "5s"` | how long to wait for a busy lock (`"0s"`: one attempt) |
//! | `retry = "notify"` | or `"none"`, `"fixed:50ms"`, `"exponential:10ms..1s"` |
//! | `on_busy = "skip"` | skip the call when busy (logged); for `()`, `Option<T>`, `Result<(), E>`, `Result<Option<T>, E>` |
//! | `hold_at_least = "1h"` | the lock stays taken that long after it was acquired (ShedLock's `lockAtLeastFor`) |
//! | `cooldown = "30s"` | the lock stays taken, by nobody, that long after the call ended |
//! | `mode = "read"` / `mode = "write"` | a side of a read-write lock: read functions run concurrently, a write function alone |
//! | `permits = 3` | a permit of the semaphore `key` of 3 permits instead of a lock: at most 3 calls at once |
//! | `client = &self.locks` | any expression yielding `&LockClient`; default: the process-wide client ([`set_default_client`](crate::set_default_client), else built from `REDIS_URL`) |
//! | `guard = lock` | binds the `&LockGuard` in the body |
//! | `crate = "::my_app::locks"` | where the library is, when the attribute cannot find it itself |
//!
//! - Lock failures come back through the function's own `Result<T, E>`
//!   (`E: From<redis_lock::Error>`): `Busy` / `Timeout` when the lock stayed taken, Redis and
//!   pool errors otherwise. A function with no way to report them (no `Result`, no
//!   `on_busy = "skip"`) does not compile.
//! - A lock lost during the call is reported too: `Err(Error::Lost { .. })` means the lock
//!   was not held for the whole call. A body that checks `lock.check_held()?` (or
//!   `lock.ensure_held()?`) before it commits returns that error itself and commits nothing;
//!   a body that does not check runs on, and the call returns `Err(Lost)` instead of its
//!   `Ok`. The body's own `Err` wins. Without a `Result` the loss is logged at error level.
//! - Nested calls with the same key on the same thread join the held lock; another thread
//!   waits like any other process.
//! - The expansion adds no Redis round trip to the same work written by hand with a guard.
//! - `async fn`, `const fn`, unknown or repeated options, `ttl = 0`, empty keys and malformed
//!   durations are compile errors at the offending token.
//!
//! # Renamed dependencies
//!
//! The attribute reads the calling package's `Cargo.toml`, so a renamed dependency needs
//! nothing more:
//!
//! ```toml
//! [dependencies]
//! locks = { package = "redis-lock-sync", version = "0.1" }
//! ```
//!
//! and `#[locks::distributed_lock(key = "report")]` works. Where the library is reached some
//! other way (a re-export through another crate), name it with `crate = "::my_app::locks"`. A
//! "cannot find `redis_lock`" error (E0433) at the attribute means exactly that.
