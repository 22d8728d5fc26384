//! Holding a lock: the guard, the watchdog, losing a lock, and committing under it.
//!
//! # A lease, renewed while the guard lives
//!
//! A lock is a Redis key with a TTL (default 30 s; [`LockOptions::ttl`](crate::LockOptions::ttl)
//! per call, `Builder::default_ttl` per client). While its [`LockGuard`](crate::LockGuard)
//! lives, a watchdog thread renews it every `ttl / 3`; dropping the guard releases it. If
//! the holder's process dies, nobody renews the key and the lock frees within one TTL.
//! Renewal threads are parked and reused, not spawned per lock, and renewals that fall due
//! together go out as one pipeline on one connection, so thousands of held locks do not
//! queue for the pool. [`LockOptions::watchdog`](crate::LockOptions::watchdog)`(false)`
//! turns renewal off for a lock that must end at its TTL;
//! [`LockOptions::max_hold`](crate::LockOptions::max_hold) caps how long it is renewed.
//!
//! ```no_run
//! use std::time::Duration;
//!
//! fn main() -> redis_lock::Result<()> {
//!     let locks = redis_lock::LockClient::open("redis://127.0.0.1/")?;
//!     let guard = locks
//!         .options("invoice:42")
//!         .ttl(Duration::from_secs(5)) // renewed every 5 s / 3
//!         .wait(Duration::from_secs(1))
//!         .metadata("settling") // shown by inspect, list and the CLI
//!         .acquire()?;
//!     println!("{:?} left", guard.remaining_ttl()?);
//!     guard.set_metadata("settled 3 of 4")?; // what others see now, still held
//!     guard.extend(Duration::from_secs(60))?; // one longer lease now
//!     println!("{:?}", guard.release()?); // Released, Late, Lost, StillHeld or HandedOff
//!     Ok(())
//! }
//! ```
//!
//! # A lock can be lost while held
//!
//! A lease can run out under a holder that is paused (GC, swap, `SIGSTOP`, a VM migration)
//! or whose renewals do not get through; an operator can break it
//! ([`LockClient::force_release`](crate::LockClient::force_release), `redis-lock release
//! --force`); Redis can lose it (a restart without persistence, a failover to a replica that
//! did not have it, an eviction). There are three ways to know, from cheapest to surest:
//!
//! | call | what it asks | cost |
//! |---|---|---|
//! | [`is_lost`](crate::LockGuard::is_lost), [`ensure_held`](crate::LockGuard::ensure_held) | what the client last learnt | free, local |
//! | [`commit`](crate::LockGuard::commit) | Redis, atomically with the writes: the pipeline's commands run only if the guard's token still holds the lock; marks the guard lost if not | one round trip, the writes included (not under Redlock) |
//! | [`check_held`](crate::LockGuard::check_held) | Redis: does the guard's owner token still hold the lock? Marks the guard lost if not | one round trip (a majority under Redlock) |
//! | [`fencing_token`](crate::LockGuard::fencing_token) | the resource itself: it rejects a token lower than one it has seen | nothing here; the resource keeps the highest token |
//!
//! Where the data lives in the same Redis, write it with `commit`: a pause before it (a GC, a
//! stalled VM) cannot let the write land after a loss, because Redis runs the check and the
//! commands as one script. Elsewhere, call `check_held()` right before the write; it still
//! leaves the gap between the check and the write, which only a fencing token closes.
//!
//! ```no_run
//! fn main() -> redis_lock::Result<()> {
//!     let locks = redis_lock::LockClient::open("redis://127.0.0.1/")?;
//!     let guard = locks.lock("account:7")?;
//!     let balance: i64 = 100; // ... read it, decide ...
//!     let (left,): (i64,) = guard.commit(
//!         redis::pipe()
//!             .cmd("DECRBY").arg("balance:7").arg(60)
//!             .cmd("RPUSH").arg("history:7").arg(balance - 60).ignore(),
//!     )?; // Err(Lost) and nothing written if the lock was lost meanwhile
//!     println!("balance now {left}");
//!     Ok(())
//! }
//! ```
//!
//! The callback `on_lost`
//! ([`LockOptions::on_lost`](crate::LockOptions::on_lost), or `Builder::on_lost` for every
//! lock of a client) runs once when the client learns of a loss, with a
//! [`LostEvent`](crate::LostEvent) naming the lock and the [`LostReason`](crate::LostReason):
//! `Deleted` (the key went away while its TTL still ran: `force_release`, `DEL`, a failover),
//! `Expired`, `TakenOver` (another owner's token), `RenewalFailed`, `MaxHoldReached`, or
//! `Released` (this process gave it up behind the guard's back: `release_all`, a reentrant
//! sibling's `into_handle`).
//!
//! ```no_run
//! fn main() -> redis_lock::Result<()> {
//!     let locks = redis_lock::LockClient::open("redis://127.0.0.1/")?;
//!     let guard = locks
//!         .options("ledger")
//!         .on_lost(|event| eprintln!("lost {}: {:?}", event.key, event.reason))
//!         .acquire()?;
//!     let token = guard.fencing_token();
//!     // ... compute ...
//!     guard.check_held()?; // asks Redis: still ours?
//!     // write to the resource with `token`; the resource refuses anything below its highest
//!     println!("committed under {token}");
//!     Ok(())
//! }
//! ```
//!
//! # Loss notification
//!
//! A lock held for 2 ms is watched through Redis's client-side tracking: when anybody else
//! changes its key (`force_release`, `DEL`, a release through a shared handle, a takeover
//! after expiry, an eviction), Redis tells the client, and `is_lost`, `ensure_held`,
//! `on_lost`, the metrics and the CLI's `--kill-on-loss` know within about a round trip
//! (BENCHMARKS.md, "Loss to notice": p50 0.6 ms, p99 2.2 ms). The lock's own renewals and
//! release cost nothing for it. It takes three connections per server (one receives the
//! notices, one keeps the held keys tracked and carries the renewals, one tells when the
//! server's tracking table is full) and one thread per
//! client (on a Cluster, per master that holds a watched lock). A read share or a permit is
//! checked again whenever another holder of its name enters or leaves, since they change the
//! same key.
//!
//! When a notification connection closes (a restart, a failover, a server or proxy
//! `timeout`, `CLIENT KILL`), Redis forgets what it tracked for it: the client notices at once,
//! opens it again and checks every held lock, which finds a loss that happened meanwhile;
//! until then `loss_detection()` says `Reconnecting`. A release that finds its lock gone or
//! somebody else's tells `on_lost` too, if nothing had (a holder paused past its TTL that
//! releases as soon as it runs again).
//!
//! Where the server or an ACL refuses tracking, or the connection cannot receive it (TLS,
//! RESP3, an application's pool), a loss is found at the next renewal, a third of the TTL
//! later at most; [`LockClient::loss_detection`](crate::LockClient::loss_detection) says
//! which ([`LossDetection`](crate::LossDetection)), and a warning event says so once.
//! `Builder::loss_notification(false)` turns it off (no connections, thread or checks).
//!
//! # Release outcomes
//!
//! [`LockGuard::release`](crate::LockGuard::release) returns a
//! [`ReleaseOutcome`](crate::ReleaseOutcome): `Released`; `Late` (it had expired); `Lost`
//! (somebody else holds it now, and their lock is left untouched); `StillHeld` (other guards
//! of a reentrant acquisition are alive: the lock goes with the last of them); `HandedOff`
//! (the guard was turned into a lease handle, which owns the lock now: nothing sent).
//! `is_clean()` is true for `Released`, `StillHeld` and `HandedOff`. Dropping the guard
//! releases too, without telling the outcome.
//!
//! # Fencing tokens
//!
//! Every acquisition takes the next number of the name's counter in Redis, so
//! [`fencing_token`](crate::LockGuard::fencing_token) strictly increases per lock name,
//! across clients and processes (not always by one: two busy attempts racing may use a
//! number up). Every key of a name has a TTL, the counter included, so names used once do
//! not grow Redis. When a name is taken again after its counter expired, or after Redis lost
//! its data, the new counter starts from the clock in microseconds, so tokens are large
//! numbers and keep increasing unless the clock that starts the new counter is behind the
//! one that started the old. SAFETY.md, "Fencing tokens after the counter is gone", lists the
//! exact conditions. Let the resource keep the highest token it accepted and refuse lower
//! ones: that is the only protection against a holder that paused past its TTL. The example
//! `examples/examples/fencing.rs` in the repository shows it.
//!
//! # Minimum hold and cool-down
//!
//! - [`hold_at_least(d)`](crate::LockOptions::hold_at_least) (ShedLock's `lockAtLeastFor`):
//!   a release before `d` has passed since the acquisition leaves the lock taken by nobody
//!   until then. A crashed holder's lock still frees after its TTL, not after `d`.
//! - [`cooldown(d)`](crate::LockOptions::cooldown), or
//!   [`release_after(d)`](crate::LockGuard::release_after) on a guard: after the release the
//!   lock stays taken, by nobody, for `d` ("at most one rebuild per 30 s, however short each
//!   rebuild is"). With a minimum hold too, it frees at the later of the two; waiters take it
//!   when it frees. Not for a semaphore's permits, which are given back at once.
//!
//! # Manual control and inspection
//!
//! [`LockClient::inspect`](crate::LockClient::inspect) returns a
//! [`LockInfo`](crate::LockInfo) (holder host, pid, since, metadata, TTL, fencing token);
//! [`LockClient::observe`](crate::LockClient::observe) reports it, then every change of
//! holder as Redis announces it (a dashboard, a process that must know the current leader).
//! On a semaphore's name it reports each change of the permits in use
//! ([`LockChange::permits`](crate::LockChange::permits)):
//!
//! ```no_run
//! # fn main() -> redis_lock::Result<()> {
//! # let locks = redis_lock::LockClient::open("redis://127.0.0.1/")?;
//! for change in locks.observe("scheduler")?.iter() {
//!     println!("now {:?}", change.now.map(|h| (h.host, h.fencing_token)));
//! }
//! # Ok(()) }
//! ```
//!
//! `LockClient::list(pattern)` finds held locks with `SCAN` (never `KEYS`);
//! [`release_all`](crate::LockClient::release_all) gives up every lock this client holds
//! (the guards still alive then say `LostReason::Released`);
//! [`force_release`](crate::LockClient::force_release) breaks a lock whoever holds it and
//! wakes a waiter (its holder finds out within about a round trip with loss notification,
//! else at its next renewal). Owner tokens and passwords never appear in `Debug`, errors or
//! log events.
