//! The connection r2d2 pools: opened by the thread that checks it out, and marked broken the
//! moment a command on it fails in a way that leaves it unusable; and the manager's side of
//! r2d2, which makes such connections unopened and checks them without a round trip
//! (`store/connection/mod.rs` says why).

use std::sync::Arc;
use std::time::Duration;

use redis::{ConnectionLike, ErrorKind, RedisError, RedisResult, ServerErrorKind, Value};

use super::link::Link;
use super::{Manager, Target};
use crate::store::plain::{Closer, Seen};
use crate::store::sentinel::SentinelTarget;

/// For a sentinel master's connection: the epoch it was made in, and the current one.
type Epoch = Option<(u64, Arc<SentinelTarget>)>;

/// A Redis connection that knows whether it is still usable.
pub(crate) struct Conn {
    /// `None` until the thread that first checks it out opens it (see
    /// `store/connection/mod.rs`); a connection that failed to open is `broken` and dropped.
    pub(super) inner: Option<Link>,
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
    pub(crate) fn closer(&self) -> Option<Closer> {
        match &self.inner {
            Some(Link::Plain(plain)) => plain.closer().ok(),
            _ => None,
        }
    }

    /// Waits at most `timeout` for a message on this subscribed connection, or for the
    /// server to hang up `other` (see
    /// [`Plain::wait`](crate::store::plain::Plain::wait)).
    pub(crate) fn wait(&mut self, other: Option<&Closer>, timeout: Duration) -> RedisResult<Seen> {
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
    /// when none came (see [`Plain::receive`](crate::store::plain::Plain::receive)).
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

    /// Runs on r2d2's thread: makes an unopened connection, at once and without fail (see
    /// `store/connection/mod.rs`); the thread that checks it out opens it.
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
