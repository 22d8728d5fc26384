//! The connection the lock operations check out, from our pool or an application's, and
//! where every request they send is counted (the client's request counter).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use redis::{ConnectionLike, RedisError, RedisResult, ServerErrorKind, Value};

use super::Manager;
use super::link::Link;
#[cfg(feature = "cluster")]
use super::node::Node;
use crate::store::plain::Plain;

/// The pool the lock operations use: ours, or one the application built.
#[derive(Clone)]
pub(crate) enum Pool {
    Managed(r2d2::Pool<Manager>),
    External(r2d2::Pool<redis::Client>),
}

/// A checked-out connection; returns to its pool on drop. Every request sent through it (a
/// command, a script call, a pipeline) is counted in the client's request counter: the one
/// place requests are counted.
pub(crate) struct PooledConn {
    conn: Checkout,
    pub(in crate::store) requests: Arc<AtomicU64>,
}

enum Checkout {
    Managed(r2d2::PooledConnection<Manager>),
    External(r2d2::PooledConnection<redis::Client>),
}

/// Why a checkout gave no connection. Either way nothing was sent.
#[derive(Debug)]
pub(crate) enum CheckoutError {
    /// No connection became free within the pool timeout (on an application's pool, also
    /// one that could not connect).
    Pool(r2d2::Error),
    /// The connection could not be opened: refused, no answer within the connect timeout, or
    /// a handshake the server refused (a wrong password).
    Connect(RedisError),
}

impl From<r2d2::Error> for CheckoutError {
    fn from(e: r2d2::Error) -> CheckoutError {
        CheckoutError::Pool(e)
    }
}

/// A connection of one of our pools, opened (on this thread) if r2d2 just made it.
pub(crate) fn checkout(
    pool: &r2d2::Pool<Manager>,
    timeout: Duration,
) -> Result<r2d2::PooledConnection<Manager>, CheckoutError> {
    let mut conn = pool.get_timeout(timeout)?;
    // On failure the connection is broken, and dropping it here drops it from the pool.
    conn.open().map_err(CheckoutError::Connect)?;
    Ok(conn)
}

impl Pool {
    /// Connections the pool has made (idle or checked out).
    #[cfg(feature = "testing")]
    pub(crate) fn connections(&self) -> usize {
        let state = match self {
            Pool::Managed(p) => p.state(),
            Pool::External(p) => p.state(),
        };
        usize::try_from(state.connections).unwrap_or(usize::MAX)
    }

    /// A connection within `timeout` (a free one, or a new one, which this thread opens within
    /// the connect timeout).
    pub(crate) fn get_timeout(
        &self,
        timeout: Duration,
        requests: &Arc<AtomicU64>,
    ) -> Result<PooledConn, CheckoutError> {
        let conn = match self {
            Pool::Managed(p) => Checkout::Managed(checkout(p, timeout)?),
            Pool::External(p) => Checkout::External(p.get_timeout(timeout)?),
        };
        Ok(PooledConn {
            conn,
            requests: Arc::clone(requests),
        })
    }

    /// An idle open connection, or `None` at once (none idle, or none open yet: an unopened
    /// one goes back, for a caller that may wait while it opens).
    pub(crate) fn try_get(&self, requests: &Arc<AtomicU64>) -> Option<PooledConn> {
        let conn = match self {
            Pool::Managed(p) => Checkout::Managed(p.try_get().filter(|c| c.opened())?),
            Pool::External(p) => Checkout::External(p.try_get()?),
        };
        Some(PooledConn {
            conn,
            requests: Arc::clone(requests),
        })
    }

    pub(crate) fn state(&self) -> r2d2::State {
        match self {
            Pool::Managed(p) => p.state(),
            Pool::External(p) => p.state(),
        }
    }
}

impl PooledConn {
    /// A connection of the waiting connections' pool (always one of ours).
    pub(crate) fn waiter(
        conn: r2d2::PooledConnection<Manager>,
        requests: &Arc<AtomicU64>,
    ) -> PooledConn {
        PooledConn {
            conn: Checkout::Managed(conn),
            requests: Arc::clone(requests),
        }
    }

    /// Our own plain connection under this checkout, if it is one (`direct.rs`).
    pub(in crate::store) fn plain(&mut self) -> Option<&mut Plain> {
        match &mut self.conn {
            Checkout::Managed(c) => match &mut c.inner {
                Some(Link::Plain(p)) => Some(p),
                _ => None,
            },
            Checkout::External(_) => None,
        }
    }

    fn raw(&mut self) -> &mut dyn ConnectionLike {
        match &mut self.conn {
            Checkout::Managed(c) => &mut **c,
            Checkout::External(c) => &mut **c,
        }
    }

    fn raw_ref(&self) -> &dyn ConnectionLike {
        match &self.conn {
            Checkout::Managed(c) => &**c,
            Checkout::External(c) => &**c,
        }
    }

    pub(in crate::store) fn count(&self, n: usize) {
        self.requests
            .fetch_add(u64::try_from(n).unwrap_or(u64::MAX), Ordering::Relaxed);
    }

    /// A command the server may hold for up to `block` before replying (`WAIT`, `BLPOP`). On
    /// an application's pool the connection's own timeouts apply.
    pub(crate) fn blocking_query<T: redis::FromRedisValue>(
        &mut self,
        cmd: &redis::Cmd,
        block: Duration,
    ) -> RedisResult<T> {
        self.count(1);
        match &mut self.conn {
            Checkout::Managed(c) => c.blocking_query(cmd, block),
            Checkout::External(c) => cmd.query(&mut **c),
        }
    }
}

/// A script's first run on a server is answered `NOSCRIPT`, and `redis` then loads it
/// (`SCRIPT LOAD`) and runs it again: the script cache's round trips, once per server, not the
/// caller's requests, so the counter leaves them out (a lock cycle is two requests, always).
fn is_no_script(reply: &RedisResult<Value>) -> bool {
    matches!(reply, Ok(Value::ServerError(e)) if e.kind() == Some(ServerErrorKind::NoScript))
}

fn is_script_load(cmd: &redis::Cmd) -> bool {
    cmd.args_iter().next().is_some_and(
        |a| matches!(a, redis::Arg::Simple(name) if name.eq_ignore_ascii_case(b"SCRIPT")),
    )
}

impl PooledConn {
    /// Runs `f` once per node that holds keys: on a Redis Cluster once per master, with a
    /// connection that sends every command to that master (a keyless command such as `SCAN`
    /// would otherwise go to one node picked at random); elsewhere once, with this connection.
    pub(crate) fn for_each_master(
        &mut self,
        mut f: impl FnMut(&mut dyn ConnectionLike) -> RedisResult<()>,
    ) -> RedisResult<()> {
        #[cfg(feature = "cluster")]
        if let Checkout::Managed(c) = &mut self.conn
            && let Some(Link::Cluster(cluster)) = &mut c.inner
        {
            let requests = Arc::clone(&self.requests);
            let masters = crate::wire::commands::cluster_masters(&mut **cluster)?;
            requests.fetch_add(1, Ordering::Relaxed);
            for (host, port) in masters {
                let mut node = Node {
                    cluster,
                    host,
                    port,
                    requests: &requests,
                };
                f(&mut node)?;
            }
            return Ok(());
        }
        f(self)
    }
}

impl ConnectionLike for PooledConn {
    fn req_packed_command(&mut self, cmd: &[u8]) -> RedisResult<Value> {
        self.count(1);
        let r = self.raw().req_packed_command(cmd);
        // A packed `EVALSHA` the server's script cache lacked is sent again after loading
        // (`wire::request::Request::on`): counted once, as `req_command` counts it.
        if is_no_script(&r) {
            self.requests.fetch_sub(1, Ordering::Relaxed);
        }
        r
    }

    /// A pipeline is one request (one round trip: the native fast path's `SET NX` + `INCR`).
    /// Combined renewals count one per renewal themselves (`combine.rs`).
    fn req_packed_commands(
        &mut self,
        cmd: &[u8],
        offset: usize,
        count: usize,
    ) -> RedisResult<Vec<Value>> {
        self.count(1);
        self.raw().req_packed_commands(cmd, offset, count)
    }

    fn req_command(&mut self, cmd: &redis::Cmd) -> RedisResult<Value> {
        // Counted when sent (a request waiting for its reply is in flight), taken back for
        // the script cache's own round trips.
        let load = is_script_load(cmd);
        if !load {
            self.count(1);
        }
        let r = self.raw().req_command(cmd);
        if !load && is_no_script(&r) {
            self.requests.fetch_sub(1, Ordering::Relaxed);
        }
        r
    }

    fn get_db(&self) -> i64 {
        self.raw_ref().get_db()
    }

    fn supports_pipelining(&self) -> bool {
        self.raw_ref().supports_pipelining()
    }

    fn check_connection(&mut self) -> bool {
        self.raw().check_connection()
    }

    fn is_open(&self) -> bool {
        self.raw_ref().is_open()
    }
}

impl std::fmt::Debug for Pool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let s = self.state();
        f.debug_struct("Pool")
            .field("connections", &s.connections)
            .field("idle_connections", &s.idle_connections)
            .finish()
    }
}
