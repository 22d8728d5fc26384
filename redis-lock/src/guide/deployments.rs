//! Deployments: a single server, Sentinel, Cluster, Redlock; replica acknowledgement.
//!
//! The same [`LockClient`](crate::LockClient), guards, watchdog, attribute and CLI work on
//! every deployment; only the builder differs. SAFETY.md, "By deployment", compares what each
//! survives, point by point.
//!
//! | deployment | builder | survives | costs |
//! |---|---|---|---|
//! | single server | [`LockClient::open`](crate::LockClient::open), [`builder`](crate::LockClient::builder) | a holder's crash | 2 round trips per lock cycle |
//! | Sentinel | [`sentinel_builder`](crate::LockClient::sentinel_builder) | the master's loss (automatic failover); locks not yet replicated can be lost unless taken with `.replicas(n, timeout)` | as a single server; +1 round trip per acquisition and release with `.replicas` |
//! | Cluster (feature `cluster`) | `LockClient::cluster_builder` | as Sentinel, per slot; names spread over the masters | as a single server |
//! | Redlock | [`redlock_builder`](crate::LockClient::redlock_builder) | the loss of a minority of independent servers, every lock kept | N requests per acquisition, release and renewal, sent at once: about one round trip of the majority's slower server |
//!
//! Waiting hands the lock over on release everywhere; fair mode works on a single server,
//! Sentinel and Cluster and is refused under Redlock. Read-write locks and semaphores are
//! refused under Redlock too.
//!
//! ```no_run
//! use std::time::Duration;
//!
//! fn main() -> redis_lock::Result<()> {
//!     // Sentinel: the master's name and the sentinels; follows failovers.
//!     let sentinel = redis_lock::LockClient::sentinel_builder(
//!         "mymaster",
//!         ["redis://10.0.0.1:26379/", "redis://10.0.0.2:26379/", "redis://10.0.0.3:26379/"],
//!     )
//!     .master_auth(None, "master-password")
//!     .build()?;
//!     // Survive a failover: count the lock (and its release) only once a replica has it.
//!     let guard = sentinel.options("report").replicas(1, Duration::from_millis(100)).acquire()?;
//!     drop(guard);
//!
//!     // Redlock: independent servers (3 or 5), held by a majority; short per-server timeouts.
//!     let redlock = redis_lock::LockClient::redlock_builder([
//!         "redis://10.0.0.1:6379/",
//!         "redis://10.0.0.2:6379/",
//!         "redis://10.0.0.3:6379/",
//!     ])
//!     .connect_timeout(Duration::from_millis(100))
//!     .io_timeout(Duration::from_millis(100))
//!     .build()?;
//!     match redlock.try_lock("report") {
//!         Ok(Some(guard)) => println!("fencing token {}", guard.fencing_token()),
//!         Ok(None) => println!("busy"),
//!         Err(e) if e.is_connection_error() => println!("no majority reachable: {e}"),
//!         Err(e) => return Err(e),
//!     }
//!     Ok(())
//! }
//! ```
//!
//! With the `cluster` feature, `LockClient::cluster_builder(["redis://10.0.0.1:7000/",
//! "redis://10.0.0.2:7000/"]).build()` connects to a Redis Cluster through some seed nodes;
//! every key of one lock shares a slot (the lock name is the hash tag).
//!
//! # Replica acknowledgement
//!
//! [`LockOptions::replicas(n, timeout)`](crate::LockOptions::replicas) makes each
//! acquisition wait (`WAIT`) until `n` replicas have the lock;
//! [`replicas_fsynced`](crate::LockOptions::replicas_fsynced) asks for `WAITAOF` instead
//! (the replicas also wrote it to their append-only file; servers without `WAITAOF` fall
//! back to `WAIT`, with one warning). Too few acknowledgements in time: the lock is deleted
//! and the call fails with `Error::ReplicaAck`. On Sentinel a release of such a lock waits
//! for the same acknowledgement, and a release a failover kept from the new master is sent
//! again there once the sentinels name it. On a Cluster `WAIT` goes to every master, so each
//! needs `n` replicas.
//!
//! # Redlock
//!
//! The servers are asked at once, from the calling thread, and a call returns when a
//! majority has decided, so a slow or dead minority does not delay it. The fencing token is
//! the majority's highest counter, and lagging counters are raised before the acquisition
//! counts. A TTL no longer than the clock-drift allowance (1 % + 2 ms) is refused; one server
//! listed twice (under another name, database or socket) is refused by `build`. For a lock
//! that must survive a restarted server, restart it only after one maximum TTL (Redlock's
//! delayed restart, an operator rule the library cannot enforce), or run the servers with
//! `appendonly yes` and `appendfsync always`.
//!
//! # Servers it is tested on
//!
//! The whole suite runs on Redis 7.0 (`scripts/test`); the server-facing suites also run on
//! Valkey 8.1 and 9.1 (`scripts/test-valkey`): locks, waiting, fair mode, fencing, faults,
//! ACLs, replica acknowledgement, Cluster, Sentinel, Redlock, every primitive, loss
//! notification, the attribute and the CLI. TLS is tested on Redis only (the Valkey wheels
//! are built without TLS). On a server with `DELIFEQ` (Valkey 9) the release of an
//! uncontended lock is that one native command instead of a script. Benchmarks and examples
//! run on Redis.
//!
//! # TLS and connection settings
//!
//! With the `tls` feature, `rediss://` URLs connect through rustls;
//! `rediss://host/#insecure` skips certificate verification. To verify against your own CA,
//! build a `redis::Client` with `redis::Client::build_with_tls` and pass it to
//! [`LockClient::from_pool`](crate::LockClient::from_pool). Every failure is bounded in
//! time: `Builder::connect_timeout` (connect and handshake), `io_timeout` (a reply),
//! `pool_timeout` (a pooled connection).
