//! Beyond the mutex: read-write locks, semaphores, several locks at once, lease handles.
//!
//! Every primitive hands out [`LockGuard`](crate::LockGuard)s with the same machinery: a
//! watchdog per held share or permit, loss reporting, `release` outcomes and fencing tokens.
//! Read-write locks and semaphores work on a single server, Sentinel and Cluster, and are
//! refused under Redlock with `Error::InvalidInput` before anything is sent (SAFETY.md says
//! why).
//!
//! # Read-write locks
//!
//! Many readers or one writer. Each reader's share has its own token and TTL, so a crashed
//! reader's share frees within its TTL; a writer that waits keeps new readers out (no writer
//! starvation); a release that frees the lock wakes the waiting writers, or every waiting
//! reader at once. The thread holding the write lock may take a read share (downgrade); a
//! reader asking for the write lock fails at once with `Error::UpgradeRefused`.
//! `inspect` and `list` report `mode`, `readers` and `writers_waiting`.
//!
//! ```no_run
//! fn main() -> redis_lock::Result<()> {
//!     let locks = redis_lock::LockClient::open("redis://127.0.0.1/")?;
//!
//!     let share = locks.read_lock("catalog")?; // any number of readers at once
//!     drop(share);
//!
//!     let writer = locks.write_lock("catalog")?; // alone; new readers wait while it waits
//!     let token = writer.fencing_token(); // above every read's and write's before it
//!     let share = locks.read_lock("catalog")?; // downgrade: granted at once
//!     writer.release()?; // now only read
//!     drop(share);
//!
//!     // The options form takes the mode; `try_read_lock_for`, `try_write_lock_until`, ... too.
//!     let share = locks.options("catalog").mode(redis_lock::LockMode::Read).acquire()?;
//!     println!("read under {}, after the write under {token}", share.fencing_token());
//!     Ok(())
//! }
//! ```
//!
//! # Semaphores: at most N holders
//!
//! [`LockClient::semaphore`](crate::LockClient::semaphore) returns a
//! [`Semaphore`](crate::Semaphore) whose permits are guards. The limit is stored in Redis by
//! the first acquisition and wins over the `permits` a later client asks for;
//! `set_permits` changes it for everyone (lowering it revokes no held permit). A crashed
//! holder's permit comes back within its TTL; a release hands its permit to a waiter at
//! once.
//!
//! ```no_run
//! use std::time::Duration;
//!
//! fn main() -> redis_lock::Result<()> {
//!     let locks = redis_lock::LockClient::open("redis://127.0.0.1/")?;
//!     let exports = locks.semaphore("exports", 3)?; // 3 permits, stored in Redis on first use
//!
//!     let permit = exports.acquire()?; // waits while 3 others hold one
//!     println!("token {}, {} free", permit.fencing_token(), exports.available()?);
//!     drop(permit); // handed to the next waiter at once
//!
//!     if let Some(_permit) = exports.try_acquire_for(Duration::from_secs(5))? { /* ... */ }
//!     for p in exports.inspect()?.holders {
//!         if let (Some(pid), Some(host)) = (p.pid, &p.host) { // None: just handed to a waiter
//!             println!("pid {pid} on {host}");
//!         }
//!     }
//!     exports.set_permits(5)?; // for every client; held permits stay
//!     Ok(())
//! }
//! ```
//!
//! # Several locks at once
//!
//! [`lock_all`](crate::LockClient::lock_all) (and `try_lock_all`, `try_lock_all_for`,
//! `acquire_all_with`) takes several locks together, all or none, into one
//! [`MultiGuard`](crate::MultiGuard) with a fencing token and a release outcome per member.
//! Callers asking for overlapping sets in any order do not deadlock. On one server, or names
//! in one Cluster slot, it is one round trip; at most [`MAX_LOCK_ALL`](crate::MAX_LOCK_ALL)
//! names; options it cannot honour (minimum hold, replica acknowledgement, reentrancy, fair
//! waiting, a read or write mode) are refused before anything is sent.
//!
//! ```no_run
//! fn main() -> redis_lock::Result<()> {
//!     let locks = redis_lock::LockClient::open("redis://127.0.0.1/")?;
//!     // Both accounts or neither; no deadlock with a transfer the other way round.
//!     let both = locks.lock_all(["account:7", "account:9"])?;
//!     println!("{:?}", both.fencing_tokens());
//!     drop(both); // both released
//!     Ok(())
//! }
//! ```
//!
//! # Lease handles: a held lock as a value
//!
//! [`LockGuard::into_handle`](crate::LockGuard::into_handle) turns a held lock (a mutex, a
//! read share, a write lock or a permit) into a [`LeaseHandle`](crate::LeaseHandle): name,
//! kind, fencing token, TTL, expiry and the secret owner token, as text
//! (`to_string_secret`, `parse`) or through serde (feature `serde`). Another thread or
//! process resumes it with [`LockClient::resume`](crate::LockClient::resume) and gets a guard
//! with its own watchdog. A handle given up by `into_handle` is resumed **once**, in any
//! process: the resume moves the lock to a new owner token in one atomic script, and a
//! second resume fails with `Error::HandleSpent`.
//!
//! A shared handle ([`LockGuard::handle`](crate::LockGuard::handle)) shares the guard's lease
//! and owner token by design: it can be resumed any number of times, and whichever guard
//! releases first frees the lock. The others learn of it within about a round trip where
//! loss notification is on, else at their next renewal (within a third of the TTL), or at
//! their `extend` or release.
//!
//! A handle records the deployment it was made on (a server's or each Redlock server's
//! address, a Sentinel master's name; no passwords), and a client of another deployment
//! refuses it (`InvalidInput`) before sending anything. Whoever has the handle owns the lock:
//! treat its text as a secret (the CLI passes it in an environment variable, not on the
//! command line).
//!
//! ```no_run
//! use redis_lock::LeaseHandle;
//!
//! fn main() -> redis_lock::Result<()> {
//!     let locks = redis_lock::LockClient::open("redis://127.0.0.1/")?;
//!     let handle = locks.lock("export")?.into_handle(); // not released, watchdog stopped
//!     let text = handle.to_string_secret(); // e.g. passed to a worker in its environment
//!     // ... in the worker (another process, same namespace):
//!     let handle: LeaseHandle = text.parse()?;
//!     let guard = locks.resume(&handle)?; // its own token and watchdog
//!     assert!(locks.resume(&handle).is_err()); // resumed once: Error::HandleSpent
//!     guard.release()?;
//!     Ok(())
//! }
//! ```
