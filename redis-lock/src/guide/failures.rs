//! When Redis restarts, fails over, stalls or loses its data.
//!
//! SAFETY.md in the repository states each of these with the test that shows it; this is
//! the short form.
//!
//! # Redis restarts
//!
//! - **With persistence** (`appendonly yes`, `appendfsync always`): locks and fencing
//!   counters come back with the data. Held locks whose TTL ran out during the outage are
//!   reported lost.
//! - **Without persistence**: every lock and every fencing counter is gone. Holders still
//!   think they hold their locks until they find out (within about a round trip where loss
//!   notification is on: the client listens again after the restart and checks every held
//!   lock; else at the next renewal), and meanwhile another process can take the same lock:
//!   two holders at once. Fencing tokens keep increasing: the next acquisition starts a new
//!   counter from the clock in microseconds, above the old tokens unless that clock is
//!   behind the one that started the lost counter. Protect the resource with the token.
//! - While Redis is down, renewals fail and are retried until the lock would have expired;
//!   then the guard is lost with `LostReason::RenewalFailed` and `on_lost` runs, on time,
//!   even while a renewal is stuck in its timeout.
//! - After the restart the same client reconnects. Each pooled connection fails one
//!   operation (with `Error::is_connection_error`) before it is replaced: there is no ping
//!   on checkout, to save a round trip per operation. Retry on connection errors
//!   ([`Error::is_retryable`](crate::Error::is_retryable)).
//!
//! # Failover (Sentinel, Cluster)
//!
//! Replication is asynchronous: a lock the replica had not received when the master died is
//! gone on the promoted replica, and another client can take it; its holder is told
//! `TakenOver` or `Deleted`. Take locks with
//! [`LockOptions::replicas`](crate::LockOptions::replicas) to count them only once a replica
//! has them. On Sentinel, a release the failover kept from the new master is sent again there
//! once the sentinels name it. A Cluster follows `MOVED`, `ASK` and `TRYAGAIN`, and a held
//! lock keeps renewing while its slot migrates.
//!
//! # Stalls and lost replies
//!
//! Every call is bounded: a refused connection fails at once, a connect or handshake within
//! `connect_timeout`, a reply within `io_timeout`, a pooled connection within
//! `pool_timeout`. A connection that failed or timed out is never reused. An acquisition
//! whose reply was lost asks again with the same owner token (acquisition is idempotent per
//! token), so it keeps the lock or gives it up; a lock nobody owns is not left behind for
//! its TTL. A handled signal during a delayed reply does not fail the call.
//!
//! # A paused holder
//!
//! A holder paused past its TTL (GC, swap, `SIGSTOP`, a VM migration) loses its lock and
//! learns so only when it wakes. No lock service alone can prevent its next write: check
//! [`check_held`](crate::LockGuard::check_held) before committing to narrow the window, and
//! pass [`fencing_token`](crate::LockGuard::fencing_token) to the resource to close it.
//!
//! # Operators
//!
//! Anyone who can write the lock keys can break a lock (`DEL`,
//! [`force_release`](crate::LockClient::force_release), `redis-lock release --force`).
//! Restrict that with an ACL: SAFETY.md has the minimal rule for the library. Keep
//! `maxmemory-policy` at `noeviction`: every key of a lock has a TTL, so a `volatile-*` or
//! `allkeys-*` policy may evict a held lock or its fencing counter.
