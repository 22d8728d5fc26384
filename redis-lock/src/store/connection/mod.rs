//! Pooled connections: an r2d2 manager with connect and response timeouts, and a connection
//! wrapper that remembers when it broke.
//!
//! r2d2 pings every connection on checkout by default (`is_valid`), one extra round trip per
//! lock operation. Our `is_valid` sends nothing: a connection marks itself broken the moment a
//! command on it fails with an I/O error or a timeout (or `READONLY`: its server was demoted),
//! and r2d2 drops it when it comes back or at the next checkout. A timed-out connection must
//! never be reused: the late reply would be read as the answer to the next command.
//!
//! The same manager serves a single server, a Redis Cluster (each pooled connection is a
//! cluster connection that routes by slot) and a sentinel-managed master.
//!
//! r2d2 makes a connection on its own thread when a checkout finds none idle, and a connect
//! that fails there is retried in the background (200 ms, then doubling up to half the pool
//! timeout) while the caller waits in `get_timeout`, which hears nothing of the failure: a
//! refused connection cost the whole timeout, and the acquire loop's second attempt doubled
//! it. So the manager's `connect` only makes an unopened [`Conn`] (at once; it never fails),
//! and the thread that checks one out opens it ([`Conn::open`]): a refused connect fails that
//! caller at once, a server that accepts but never answers fails it within the connect
//! timeout (which bounds the handshake too), and nothing is retried behind its back.
//!
//! The parts: `link` opens the connection itself (ours, or the `redis` crate's), `conn` is the
//! connection r2d2 pools and the manager's side of r2d2, `pooled` the checked-out connection
//! the lock operations use, which counts their requests, and `node` (Cluster) one node of a
//! cluster reached through a cluster connection.

use std::sync::Arc;
use std::time::Duration;

use redis::RedisError;

use super::sentinel::SentinelTarget;

mod conn;
mod link;
#[cfg(feature = "cluster")]
mod node;
mod pooled;

pub(crate) use conn::Conn;
pub(crate) use pooled::{CheckoutError, Pool, PooledConn, checkout};

/// Where new connections go.
#[derive(Debug, Clone)]
pub(crate) enum Target {
    /// One server.
    Server(redis::Client),
    /// A Redis Cluster: each connection holds one connection per node and routes every
    /// command to the node that serves its keys' slot, following `MOVED`/`ASK`.
    #[cfg(feature = "cluster")]
    Cluster(redis::cluster::ClusterClient),
    /// The master of a sentinel-monitored group.
    Sentinel(Arc<SentinelTarget>),
}

impl Target {
    /// A Redis Cluster (scripts may only name keys of one slot).
    pub(crate) fn is_cluster(&self) -> bool {
        #[cfg(feature = "cluster")]
        if let Target::Cluster(_) = self {
            return true;
        }
        false
    }
}

/// Creates connections with a bounded connect time and a bounded wait for each reply. For
/// r2d2 it makes unopened connections; the thread that checks one out opens it.
#[derive(Debug, Clone)]
pub(crate) struct Manager {
    pub(crate) target: Target,
    pub(crate) connect_timeout: Duration,
    pub(crate) io_timeout: Duration,
}

/// r2d2's error handler: r2d2 reports a connection that failed its checkout test (broken, or
/// of a former master) and drops it; our connects never fail inside r2d2 (see the module's
/// documentation). Kept in our log stream (r2d2 would use `log`).
#[derive(Debug)]
pub(crate) struct LogErrors;

impl r2d2::HandleError<RedisError> for LogErrors {
    fn handle_error(&self, error: RedisError) {
        tracing::debug!(target: "redis_lock", %error, "dropped a pooled connection at checkout");
    }
}

/// `true` when a server answered the connect with a refusal (wrong password, ACL, a command
/// it rejects): retrying will not help. Anything else (refused, reset, no sentinel knows the
/// master) stays an outage.
pub(crate) fn is_refused_by_server(e: &RedisError) -> bool {
    matches!(
        e.kind(),
        redis::ErrorKind::AuthenticationFailed | redis::ErrorKind::Server(_)
    ) && !crate::error::is_network_error(e)
}
