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

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use redis::{ConnectionLike, ErrorKind, RedisError, RedisResult, ServerErrorKind, Value};

use super::plain::Plain;
use super::sentinel::SentinelTarget;

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

/// Creates connections with a bounded connect time and a bounded wait for each reply.
#[derive(Debug, Clone)]
pub(crate) struct Manager {
    pub(crate) target: Target,
    pub(crate) connect_timeout: Duration,
    pub(crate) io_timeout: Duration,
}

/// The connection inside a [`Conn`].
pub(super) enum Link {
    /// A plain TCP or Unix connection of our own, whose reads survive signals (`plain.rs`).
    Plain(Plain),
    Server(redis::Connection),
    // Boxed: a cluster connection is four times the size of a server connection.
    #[cfg(feature = "cluster")]
    Cluster(Box<redis::cluster::ClusterConnection>),
}

impl Link {
    /// Our own plain connection where it serves `info` (plain TCP or Unix, RESP2), else the
    /// `redis` crate's, connected within `connect_timeout`.
    pub(super) fn open(
        info: &redis::ConnectionInfo,
        connect_timeout: Duration,
        io_timeout: Duration,
    ) -> RedisResult<Link> {
        if Plain::serves(info) {
            return Ok(Link::Plain(Plain::connect(
                info,
                connect_timeout,
                io_timeout,
            )?));
        }
        Ok(Link::Server(
            redis::Client::open(info.clone())?.get_connection_with_timeout(connect_timeout)?,
        ))
    }

    pub(super) fn con(&mut self) -> &mut dyn ConnectionLike {
        match self {
            Link::Plain(c) => c,
            Link::Server(c) => c,
            #[cfg(feature = "cluster")]
            Link::Cluster(c) => &mut **c,
        }
    }

    fn con_ref(&self) -> &dyn ConnectionLike {
        match self {
            Link::Plain(c) => c,
            Link::Server(c) => c,
            #[cfg(feature = "cluster")]
            Link::Cluster(c) => &**c,
        }
    }

    fn set_timeouts(&self, read: Duration, write: Option<Duration>) -> RedisResult<()> {
        match self {
            // Set at connect; a blocking command raises its own deadline (`Plain::blocking`).
            Link::Plain(_) => Ok(()),
            Link::Server(c) => {
                c.set_read_timeout(Some(read))?;
                write.map_or(Ok(()), |w| c.set_write_timeout(Some(w)))
            }
            #[cfg(feature = "cluster")]
            Link::Cluster(c) => {
                c.set_read_timeout(Some(read))?;
                write.map_or(Ok(()), |w| c.set_write_timeout(Some(w)))
            }
        }
    }
}

/// A Redis connection that knows whether it is still usable.
pub(crate) struct Conn {
    inner: Link,
    broken: bool,
    io_timeout: Duration,
    /// For a sentinel master: the epoch this connection was made in, and the current one.
    /// A connection from an older epoch may point at a demoted master.
    epoch: Option<(u64, Arc<SentinelTarget>)>,
}

impl std::fmt::Debug for Conn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Conn")
            .field("broken", &self.broken)
            .finish_non_exhaustive()
    }
}

fn breaks_connection(e: &RedisError) -> bool {
    e.is_io_error()
        || e.is_timeout()
        || e.is_connection_dropped()
        || e.is_unrecoverable_error()
        // The server was turned into a replica (a failover): look for the master again.
        || e.kind() == ErrorKind::Server(ServerErrorKind::ReadOnly)
}

impl Conn {
    fn note<T>(&mut self, r: RedisResult<T>) -> RedisResult<T> {
        if let Err(e) = &r
            && breaks_connection(e)
        {
            self.broken = true;
        }
        r
    }

    fn stale(&self) -> bool {
        self.epoch.as_ref().is_some_and(|(epoch, target)| {
            *epoch != target.epoch.load(std::sync::atomic::Ordering::Acquire)
        })
    }

    /// Runs a blocking command (`BLPOP`) that may legitimately take `block` before replying:
    /// the reply timeout is raised for this one command, then restored.
    pub(crate) fn blocking_query<T: redis::FromRedisValue>(
        &mut self,
        cmd: &redis::Cmd,
        block: Duration,
    ) -> RedisResult<T> {
        if let Link::Plain(plain) = &mut self.inner {
            let r = plain
                .blocking(cmd, block)
                .and_then(|v| Ok(redis::from_redis_value(v.extract_error()?)?));
            return self.note(r);
        }
        let r = self
            .inner
            .set_timeouts(block + self.io_timeout, None)
            .and_then(|()| cmd.query(self.inner.con()));
        let r = self.note(r);
        if !self.broken {
            let restore = self.inner.set_timeouts(self.io_timeout, None);
            self.note(restore)?;
        }
        r
    }
}

impl ConnectionLike for Conn {
    fn req_packed_command(&mut self, cmd: &[u8]) -> RedisResult<Value> {
        let r = self.inner.con().req_packed_command(cmd);
        self.note(r)
    }

    fn req_packed_commands(
        &mut self,
        cmd: &[u8],
        offset: usize,
        count: usize,
    ) -> RedisResult<Vec<Value>> {
        let r = self.inner.con().req_packed_commands(cmd, offset, count);
        self.note(r)
    }

    // A cluster connection routes a `Cmd` by its keys without parsing it back from bytes.
    fn req_command(&mut self, cmd: &redis::Cmd) -> RedisResult<Value> {
        let r = self.inner.con().req_command(cmd);
        self.note(r)
    }

    fn get_db(&self) -> i64 {
        self.inner.con_ref().get_db()
    }

    fn supports_pipelining(&self) -> bool {
        self.inner.con_ref().supports_pipelining()
    }

    fn check_connection(&mut self) -> bool {
        let ok = self.inner.con().check_connection();
        self.broken |= !ok;
        ok
    }

    fn is_open(&self) -> bool {
        !self.broken && !self.stale() && self.inner.con_ref().is_open()
    }
}

impl r2d2::ManageConnection for Manager {
    type Connection = Conn;
    type Error = RedisError;

    fn connect(&self) -> RedisResult<Conn> {
        let (inner, epoch) = match &self.target {
            Target::Server(client) if Plain::serves(client.get_connection_info()) => (
                Link::Plain(Plain::connect(
                    client.get_connection_info(),
                    self.connect_timeout,
                    self.io_timeout,
                )?),
                None,
            ),
            Target::Server(client) => (
                Link::Server(client.get_connection_with_timeout(self.connect_timeout)?),
                None,
            ),
            #[cfg(feature = "cluster")]
            Target::Cluster(client) => (Link::Cluster(Box::new(client.get_connection()?)), None),
            // The same plain connection as a single server's (the master is one).
            Target::Sentinel(target) => {
                let (link, epoch) = target.connect_master(
                    |info| Link::open(info, self.connect_timeout, self.io_timeout),
                    Link::con,
                )?;
                (link, Some((epoch, Arc::clone(target))))
            }
        };
        inner.set_timeouts(self.io_timeout, Some(self.io_timeout))?;
        Ok(Conn {
            inner,
            broken: false,
            io_timeout: self.io_timeout,
            epoch,
        })
    }

    /// Called on checkout: no round trip, only what the connection already knows (it broke,
    /// or it belongs to a master the sentinels no longer name).
    fn is_valid(&self, conn: &mut Conn) -> RedisResult<()> {
        if conn.is_open() {
            Ok(())
        } else {
            Err(RedisError::from((
                ErrorKind::Io,
                "pooled connection is broken or points at a former master",
            )))
        }
    }

    fn has_broken(&self, conn: &mut Conn) -> bool {
        !conn.is_open()
    }
}

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
    pub(super) requests: Arc<AtomicU64>,
}

enum Checkout {
    Managed(r2d2::PooledConnection<Manager>),
    External(r2d2::PooledConnection<redis::Client>),
}

impl Pool {
    pub(crate) fn get_timeout(
        &self,
        timeout: Duration,
        requests: &Arc<AtomicU64>,
    ) -> Result<PooledConn, r2d2::Error> {
        let conn = match self {
            Pool::Managed(p) => Checkout::Managed(p.get_timeout(timeout)?),
            Pool::External(p) => Checkout::External(p.get_timeout(timeout)?),
        };
        Ok(PooledConn {
            conn,
            requests: Arc::clone(requests),
        })
    }

    /// An idle connection, or `None` at once (none idle, or none open yet).
    pub(crate) fn try_get(&self, requests: &Arc<AtomicU64>) -> Option<PooledConn> {
        let conn = match self {
            Pool::Managed(p) => Checkout::Managed(p.try_get()?),
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
    /// A connection of the waiter pool (always one of ours).
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
    pub(super) fn plain(&mut self) -> Option<&mut Plain> {
        match &mut self.conn {
            Checkout::Managed(c) => match &mut c.inner {
                Link::Plain(p) => Some(p),
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

    pub(super) fn count(&self, n: usize) {
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
            && let Link::Cluster(cluster) = &mut c.inner
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

/// One node of a cluster, reached through the cluster connection: every command goes to it.
#[cfg(feature = "cluster")]
struct Node<'a> {
    cluster: &'a mut redis::cluster::ClusterConnection,
    host: String,
    port: u16,
    requests: &'a AtomicU64,
}

#[cfg(feature = "cluster")]
impl ConnectionLike for Node<'_> {
    fn req_command(&mut self, cmd: &redis::Cmd) -> RedisResult<Value> {
        use redis::cluster_routing::{RoutingInfo, SingleNodeRoutingInfo};
        self.requests.fetch_add(1, Ordering::Relaxed);
        self.cluster.route_command(
            cmd,
            RoutingInfo::SingleNode(SingleNodeRoutingInfo::ByAddress {
                host: self.host.clone(),
                port: self.port,
            }),
        )
    }

    fn req_packed_command(&mut self, _: &[u8]) -> RedisResult<Value> {
        Err(RedisError::from((
            ErrorKind::Client,
            "a cluster node connection takes commands, not packed bytes",
        )))
    }

    fn req_packed_commands(&mut self, _: &[u8], _: usize, _: usize) -> RedisResult<Vec<Value>> {
        Err(RedisError::from((
            ErrorKind::Client,
            "a cluster node connection takes commands, not pipelines",
        )))
    }

    fn get_db(&self) -> i64 {
        0
    }

    fn check_connection(&mut self) -> bool {
        self.cluster.check_connection()
    }

    fn is_open(&self) -> bool {
        self.cluster.is_open()
    }
}

impl ConnectionLike for PooledConn {
    fn req_packed_command(&mut self, cmd: &[u8]) -> RedisResult<Value> {
        self.count(1);
        let r = self.raw().req_packed_command(cmd);
        // A packed `EVALSHA` the server's script cache lacked is sent again after loading
        // (`wire::evalsha`): counted once, as `req_command` counts it.
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

/// The last connect failure of one store's pools. r2d2 reports a checkout that timed out
/// with its own error, which says only "timed out"; this keeps what actually went wrong, so a
/// wrong password is reported as the Redis error it is, not as an unreachable server.
pub(crate) type LastConnectError = Arc<parking_lot::Mutex<Option<RedisError>>>;

/// Error handler that keeps r2d2's connect failures in our log stream (r2d2 would use `log`)
/// and remembers the last one.
#[derive(Debug)]
pub(crate) struct LogErrors(pub(crate) LastConnectError);

impl r2d2::HandleError<RedisError> for LogErrors {
    fn handle_error(&self, error: RedisError) {
        tracing::warn!(target: "redis_lock", %error, "connecting to redis failed");
        *self.0.lock() = Some(error);
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
