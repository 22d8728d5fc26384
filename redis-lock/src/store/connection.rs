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

/// Creates connections with a bounded connect time and a bounded wait for each reply. For
/// r2d2 it makes unopened connections; the thread that checks one out opens it.
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
        Ok(Link::Server(crate_connection(info, connect_timeout)?))
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

    pub(super) fn set_timeouts(&self, read: Duration, write: Option<Duration>) -> RedisResult<()> {
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

/// A connection of the `redis` crate (TLS, RESP3), connected and through its handshake within
/// `connect_timeout` together, as our plain connection is. The crate sends its handshake
/// (`AUTH`, `SELECT`, `CLIENT SETINFO` twice) as one pipeline and reads each reply with the
/// whole of what was left when it began, reading on after a timeout: a server that accepts
/// and never answers cost the timeout once per command. So the crate connects bare (for RESP3
/// with its one `HELLO`, which carries the credentials: a server with a password refuses a
/// `HELLO` without them), and the rest goes one command at a time, each reply due by the
/// deadline: `AUTH` and `SELECT` where the URL asks for them, else (RESP2) a `PING`.
fn crate_connection(
    info: &redis::ConnectionInfo,
    connect_timeout: Duration,
) -> RedisResult<redis::Connection> {
    let deadline = std::time::Instant::now() + connect_timeout;
    let settings = info.redis_settings();
    let resp3 = settings.protocol() != redis::ProtocolVersion::RESP2;
    let mut bare = redis::RedisConnectionInfo::default()
        .set_protocol(settings.protocol())
        .set_skip_set_lib_name();
    let mut steps = Vec::new();
    match (settings.username(), settings.password()) {
        (user, Some(password)) if resp3 => {
            if let Some(user) = user {
                bare = bare.set_username(user);
            }
            bare = bare.set_password(password);
        }
        (user, Some(password)) => {
            let mut auth = redis::cmd("AUTH");
            auth.arg(user).arg(password);
            steps.push(auth);
        }
        (_, None) => {}
    }
    if settings.db() != 0 {
        let mut select = redis::cmd("SELECT");
        select.arg(settings.db());
        steps.push(select);
    }
    if steps.is_empty() && !resp3 {
        steps.push(redis::cmd("PING"));
    }
    let mut con = redis::Client::open(info.clone().set_redis_settings(bare))?
        .get_connection_with_timeout(connect_timeout)?;
    for step in &steps {
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        let reply = if left.is_zero() {
            Err(std::io::Error::from(std::io::ErrorKind::TimedOut).into())
        } else {
            con.set_read_timeout(Some(left))
                .and_then(|()| con.set_write_timeout(Some(left)))
                .and_then(|()| step.query::<Value>(&mut con))
        };
        match reply {
            Ok(_) => {}
            Err(e) if e.is_timeout() => return Err(super::plain::no_answer()),
            // As the crate reports it, so a refused password is told from an outage.
            Err(e) if step.args_iter().next() == Some(redis::Arg::Simple(b"AUTH")) => {
                return Err(if crate::error::is_network_error(&e) {
                    e
                } else {
                    RedisError::from((
                        ErrorKind::AuthenticationFailed,
                        "Password authentication failed",
                        e.to_string(),
                    ))
                });
            }
            Err(e) => return Err(e),
        }
    }
    Ok(con)
}

/// For a sentinel master's connection: the epoch it was made in, and the current one.
type Epoch = Option<(u64, Arc<SentinelTarget>)>;

/// A Redis connection that knows whether it is still usable.
pub(crate) struct Conn {
    /// `None` until the thread that first checks it out opens it (see the module's
    /// documentation); a connection that failed to open is `broken` and dropped.
    inner: Option<Link>,
    /// What opens it, until it is opened (boxed: a manager is as large as a TLS client).
    opener: Option<Box<Manager>>,
    broken: bool,
    io_timeout: Duration,
    /// For a sentinel master: the epoch this connection was made in, and the current one.
    /// A connection from an older epoch may point at a demoted master.
    epoch: Epoch,
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

    /// Opens the connection if it is not open yet, on this thread, within the connect
    /// timeout. A failure marks it broken: r2d2 drops it when it comes back.
    pub(crate) fn open(&mut self) -> RedisResult<()> {
        if self.inner.is_some() {
            return Ok(());
        }
        let Some(manager) = self.opener.take() else {
            self.broken = true;
            return Err(unopened());
        };
        match manager.link() {
            Ok((link, epoch)) => {
                self.inner = Some(link);
                self.epoch = epoch;
                Ok(())
            }
            Err(error) => {
                tracing::warn!(target: "redis_lock", %error, "connecting to redis failed");
                self.broken = true;
                Err(error)
            }
        }
    }

    /// Whether the connection was opened.
    pub(crate) fn opened(&self) -> bool {
        self.inner.is_some()
    }

    /// The open connection; an error for one that is not (a checkout opens it first).
    fn link(&mut self) -> RedisResult<&mut Link> {
        self.inner.as_mut().ok_or_else(unopened)
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
        let io_timeout = self.io_timeout;
        let link = self.link()?;
        if let Link::Plain(plain) = link {
            let r = plain
                .blocking(cmd, block)
                .and_then(|v| Ok(redis::from_redis_value(v.extract_error()?)?));
            return self.note(r);
        }
        let r = link
            .set_timeouts(block + io_timeout, None)
            .and_then(|()| cmd.query(link.con()));
        let r = self.note(r);
        if !self.broken {
            let restore = self.link()?.set_timeouts(io_timeout, None);
            self.note(restore)?;
        }
        r
    }
}

impl Conn {
    /// A connection of its own, outside any pool, opened on this thread within the connect
    /// timeout (the notification connections, `notify.rs`).
    pub(crate) fn open_now(manager: &Manager) -> RedisResult<Conn> {
        let mut conn = r2d2::ManageConnection::connect(manager)?;
        conn.open()?;
        Ok(conn)
    }

    /// Our own plain connection (TCP or Unix, RESP2), the only kind that can be subscribed
    /// for invalidations here.
    pub(crate) fn is_plain(&self) -> bool {
        matches!(self.inner, Some(Link::Plain(_)))
    }

    /// What ends this connection from another thread (a plain one only).
    pub(crate) fn closer(&self) -> Option<super::plain::Closer> {
        match &self.inner {
            Some(Link::Plain(plain)) => plain.closer().ok(),
            _ => None,
        }
    }

    /// Waits at most `timeout` for a message on this subscribed connection, or for the
    /// server to hang up `other` (see [`Plain::wait`]).
    pub(crate) fn wait(
        &mut self,
        other: Option<&super::plain::Closer>,
        timeout: Duration,
    ) -> RedisResult<super::plain::Seen> {
        let r = match self.link()? {
            Link::Plain(plain) => plain.wait(other, timeout).map_err(RedisError::from),
            _ => Err(RedisError::from((
                ErrorKind::Client,
                "only a plain connection receives messages here",
            ))),
        };
        self.note(r)
    }

    /// The next message a subscribed connection is sent, waiting at most `timeout`; `None`
    /// when none came (see [`Plain::receive`]).
    pub(crate) fn receive(&mut self, timeout: Duration) -> RedisResult<Option<Value>> {
        let r = match self.link()? {
            Link::Plain(plain) => plain.receive(timeout),
            _ => Err(RedisError::from((
                ErrorKind::Client,
                "only a plain connection receives messages here",
            ))),
        };
        self.note(r)
    }
}

impl ConnectionLike for Conn {
    fn req_packed_command(&mut self, cmd: &[u8]) -> RedisResult<Value> {
        let r = self
            .link()
            .and_then(|link| link.con().req_packed_command(cmd));
        self.note(r)
    }

    fn req_packed_commands(
        &mut self,
        cmd: &[u8],
        offset: usize,
        count: usize,
    ) -> RedisResult<Vec<Value>> {
        let r = self
            .link()
            .and_then(|link| link.con().req_packed_commands(cmd, offset, count));
        self.note(r)
    }

    // A cluster connection routes a `Cmd` by its keys without parsing it back from bytes.
    fn req_command(&mut self, cmd: &redis::Cmd) -> RedisResult<Value> {
        let r = self.link().and_then(|link| link.con().req_command(cmd));
        self.note(r)
    }

    fn get_db(&self) -> i64 {
        self.inner
            .as_ref()
            .map_or(0, |link| link.con_ref().get_db())
    }

    fn supports_pipelining(&self) -> bool {
        self.inner
            .as_ref()
            .is_none_or(|link| link.con_ref().supports_pipelining())
    }

    fn check_connection(&mut self) -> bool {
        let ok = self
            .inner
            .as_mut()
            .is_some_and(|link| link.con().check_connection());
        self.broken |= !ok;
        ok
    }

    fn is_open(&self) -> bool {
        !self.broken
            && !self.stale()
            && self
                .inner
                .as_ref()
                .is_some_and(|link| link.con_ref().is_open())
    }
}

fn unopened() -> RedisError {
    RedisError::from((ErrorKind::Client, "the pooled connection was never opened"))
}

impl Manager {
    /// Connects to the target on this thread, within the connect timeout; for a sentinel
    /// master also the epoch the connection belongs to.
    fn link(&self) -> RedisResult<(Link, Epoch)> {
        let (inner, epoch) = match &self.target {
            Target::Server(client) => (
                Link::open(
                    client.get_connection_info(),
                    self.connect_timeout,
                    self.io_timeout,
                )?,
                None,
            ),
            #[cfg(feature = "cluster")]
            Target::Cluster(client) => (Link::Cluster(Box::new(client.get_connection()?)), None),
            // The same plain connection as a single server's (the master is one).
            Target::Sentinel(target) => {
                let (link, epoch) = target.connect_master(
                    |info| {
                        let link = Link::open(info, self.connect_timeout, self.io_timeout)?;
                        // So that a master that does not answer `ROLE` fails within io_timeout.
                        link.set_timeouts(self.io_timeout, Some(self.io_timeout))?;
                        Ok(link)
                    },
                    Link::con,
                )?;
                (link, Some((epoch, Arc::clone(target))))
            }
        };
        inner.set_timeouts(self.io_timeout, Some(self.io_timeout))?;
        Ok((inner, epoch))
    }
}

impl r2d2::ManageConnection for Manager {
    type Connection = Conn;
    type Error = RedisError;

    /// Runs on r2d2's thread: makes an unopened connection, at once and without fail (see the
    /// module's documentation); the thread that checks it out opens it.
    fn connect(&self) -> RedisResult<Conn> {
        Ok(Conn {
            inner: None,
            opener: Some(Box::new(self.clone())),
            broken: false,
            io_timeout: self.io_timeout,
            epoch: None,
        })
    }

    /// Called on checkout: no round trip, only what the connection already knows (it broke,
    /// or it belongs to a master the sentinels no longer name). An unopened connection is
    /// handed out, to be opened by the thread that took it.
    fn is_valid(&self, conn: &mut Conn) -> RedisResult<()> {
        if !conn.opened() && !conn.broken || conn.is_open() {
            Ok(())
        } else {
            Err(RedisError::from((
                ErrorKind::Io,
                "pooled connection is broken or points at a former master",
            )))
        }
    }

    fn has_broken(&self, conn: &mut Conn) -> bool {
        conn.broken || conn.opened() && !conn.is_open()
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
    pub(super) fn plain(&mut self) -> Option<&mut Plain> {
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
        // (`wire::script::run`): counted once, as `req_command` counts it.
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
