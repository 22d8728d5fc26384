//! Testing your own code against real servers: the `testing` feature.
//!
//! `redis_lock::testing` (feature `testing`, for `[dev-dependencies]`) starts throwaway
//! servers on free 127.0.0.1 ports, each in a temporary directory with persistence off, and
//! stops them when dropped. Nothing touches a Redis you already run.
//!
//! ```toml
//! [dev-dependencies]
//! redis-lock-sync = { version = "0.1", features = ["testing"] }
//! ```
//!
//! | type | what it starts |
//! |---|---|
//! | `RedisServer` | one `redis-server` (`start`, `start_with(args)`); `kill`, `pause` (`SIGSTOP`), `resume`, `restart`, replicas |
//! | `TcpProxy` | a proxy in front of a server: latency, stalls, cut replies and connections |
//! | `TlsRedisServer` | a TLS server with certificates made for the test |
//! | `RedisCluster` | a Redis Cluster of N masters (`start(3)`), with slot migration |
//! | `SentinelGroup` | a master, a replica and three sentinels (`start()`), with failover |
//!
//! The binary is `$REDIS_LOCK_SERVER_BIN` if set, else `redis-server` from `PATH` (a
//! `valkey-server` works too); the cluster support runs `$REDIS_LOCK_REDIS_CLI_BIN`, else
//! `redis-cli`.
//!
//! ```no_run
//! use std::time::Duration;
//! use redis_lock::testing::{RedisServer, TcpProxy};
//!
//! fn main() -> redis_lock::Result<()> {
//!     let server = RedisServer::start();
//!     let locks = redis_lock::LockClient::open(&server.url())?;
//!     let guard = locks.lock("job")?;
//!     drop(guard);
//!
//!     // The same server 50 ms away, then stalled: see how your code copes.
//!     let proxy = TcpProxy::start(server.port()).expect("proxy");
//!     proxy.set_latency(Duration::from_millis(50));
//!     let slow = redis_lock::LockClient::builder(&proxy.url())
//!         .io_timeout(Duration::from_millis(200))
//!         .build()?;
//!     proxy.stall(true);
//!     assert!(slow.try_lock("job").is_err()); // an error within the timeouts, not a hang
//!     Ok(())
//! }
//! ```
//!
//! `LockClient::registrations` (with the feature) tells what a client has registered for the
//! locks it holds and waits for: after your code ran, a quiet client holds nothing, watches
//! nothing and waits for nothing, whatever failed on the way.
//!
//! ```no_run
//! # fn main() -> redis_lock::Result<()> {
//! # let server = redis_lock::testing::RedisServer::start();
//! let locks = redis_lock::LockClient::open(&server.url())?;
//! // ... the code under test takes and releases locks ...
//! let left = locks.registrations();
//! assert_eq!((left.held, left.watchers, left.waiting_threads), (0, 0, 0));
//! # Ok(()) }
//! ```
//!
//! The repository's own suite (`scripts/test`) is built on the same types; its end-to-end
//! tests in `tests/tests/` are examples of killing, pausing and failing over servers under a
//! held lock.
