//! Throwaway `redis-server` processes for tests (feature `testing`).
//!
//! Each [`RedisServer`] runs its own `redis-server` on a free port on 127.0.0.1, in a
//! temporary directory, with persistence off, and is killed when dropped. Tests can kill,
//! pause (`SIGSTOP`), resume and restart it to exercise failures, start replicas of it
//! ([`RedisServer::start_replica_of`]), and put a [`TcpProxy`] in front of it to slow down,
//! stall or cut connections, or a [`FaultProxy`] that numbers request boundaries and injects a
//! [`Fault`] at one; [`TlsRedisServer`] serves TLS with certificates made for the
//! test. [`RedisCluster`] forms a Redis Cluster of masters (and migrates slots);
//! [`SentinelGroup`] runs a master, a replica and three sentinels, and fails over. The binary is `$REDIS_LOCK_SERVER_BIN` if set, else
//! `redis-server` from `PATH` (a `valkey-server` works too); the cluster support runs
//! `$REDIS_LOCK_REDIS_CLI_BIN`, else `redis-cli`.
//!
//! ```no_run
//! use redis_lock::testing::RedisServer;
//!
//! let server = RedisServer::start();
//! let locks = redis_lock::LockClient::open(&server.url()).unwrap();
//! let guard = locks.lock("job").unwrap();
//! # drop(guard);
//! ```

// Test support panics with a clear message instead of making every test unwrap.
#![allow(clippy::panic)]

mod cluster;
mod faults;
mod proxy;
mod replica;
mod sentinel;
mod server;
mod tls;

pub use cluster::{RedisCluster, SlotMigration, cli_binary};
pub use faults::{Fault, FaultProxy};
pub use proxy::TcpProxy;
pub use sentinel::SentinelGroup;
pub use server::{RedisServer, free_port, server_binary};
pub use tls::{TlsCerts, TlsRedisServer};

/// What a client has registered for the locks it holds and waits for
/// ([`LockClient::registrations`](crate::LockClient::registrations)).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Registrations {
    /// Locks in the client's registry (held, or given up by a failed release while a guard
    /// of them lives).
    pub held: usize,
    /// Locks registered for loss notification.
    pub watchers: usize,
    /// Lock names this client's threads wait on (one blocking connection each).
    pub waiting_groups: usize,
    /// Threads waiting.
    pub waiting_threads: usize,
    /// Releases (and undos of acquisitions) Redis did not answer, being sent again in the
    /// background until it does.
    pub giving_back: usize,
    /// Connections in the client's pools, idle or in use (not a registration: bounded by the
    /// pools' sizes, and closed when idle long enough).
    pub pooled_connections: usize,
}
