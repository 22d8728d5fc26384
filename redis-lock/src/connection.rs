//! Pooled connections: an r2d2 manager with connect and response timeouts, and a connection
//! wrapper that remembers when it broke.
//!
//! r2d2 pings every connection on checkout by default (`test_on_check_out`), one extra round
//! trip per lock operation. We turn that off and instead mark a connection broken the moment a
//! command on it fails with an I/O error or a timeout; r2d2 asks `has_broken` when the
//! connection comes back and drops it then. A timed-out connection must never be reused: the
//! late reply would be read as the answer to the next command.

use std::time::Duration;

use redis::{ConnectionLike, RedisError, RedisResult, Value};

/// Creates connections with a bounded connect time and a bounded wait for each reply.
#[derive(Debug, Clone)]
pub(crate) struct Manager {
    pub(crate) client: redis::Client,
    pub(crate) connect_timeout: Duration,
    pub(crate) io_timeout: Duration,
}

/// A Redis connection that knows whether it is still usable.
pub(crate) struct Conn {
    inner: redis::Connection,
    broken: bool,
    io_timeout: Duration,
}

impl std::fmt::Debug for Conn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Conn")
            .field("broken", &self.broken)
            .finish_non_exhaustive()
    }
}

fn breaks_connection(e: &RedisError) -> bool {
    e.is_io_error() || e.is_timeout() || e.is_connection_dropped() || e.is_unrecoverable_error()
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

    /// Runs a blocking command (`BLPOP`) that may legitimately take `block` before replying:
    /// the reply timeout is raised for this one command, then restored.
    pub(crate) fn blocking_query<T: redis::FromRedisValue>(
        &mut self,
        cmd: &redis::Cmd,
        block: Duration,
    ) -> RedisResult<T> {
        let r = self
            .inner
            .set_read_timeout(Some(block + self.io_timeout))
            .and_then(|()| cmd.query(&mut self.inner));
        let r = self.note(r);
        if !self.broken {
            let restore = self.inner.set_read_timeout(Some(self.io_timeout));
            self.note(restore)?;
        }
        r
    }
}

impl ConnectionLike for Conn {
    fn req_packed_command(&mut self, cmd: &[u8]) -> RedisResult<Value> {
        let r = self.inner.req_packed_command(cmd);
        self.note(r)
    }

    fn req_packed_commands(
        &mut self,
        cmd: &[u8],
        offset: usize,
        count: usize,
    ) -> RedisResult<Vec<Value>> {
        let r = self.inner.req_packed_commands(cmd, offset, count);
        self.note(r)
    }

    fn get_db(&self) -> i64 {
        self.inner.get_db()
    }

    fn check_connection(&mut self) -> bool {
        let ok = self.inner.check_connection();
        self.broken |= !ok;
        ok
    }

    fn is_open(&self) -> bool {
        !self.broken && self.inner.is_open()
    }
}

impl r2d2::ManageConnection for Manager {
    type Connection = Conn;
    type Error = RedisError;

    fn connect(&self) -> RedisResult<Conn> {
        let inner = self
            .client
            .get_connection_with_timeout(self.connect_timeout)?;
        inner.set_read_timeout(Some(self.io_timeout))?;
        inner.set_write_timeout(Some(self.io_timeout))?;
        Ok(Conn {
            inner,
            broken: false,
            io_timeout: self.io_timeout,
        })
    }

    fn is_valid(&self, conn: &mut Conn) -> RedisResult<()> {
        redis::cmd("PING").query::<()>(conn)
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

/// A checked-out connection; returns to its pool on drop.
pub(crate) enum PooledConn {
    Managed(r2d2::PooledConnection<Manager>),
    External(r2d2::PooledConnection<redis::Client>),
}

impl Pool {
    pub(crate) fn get_timeout(&self, timeout: Duration) -> Result<PooledConn, r2d2::Error> {
        Ok(match self {
            Pool::Managed(p) => PooledConn::Managed(p.get_timeout(timeout)?),
            Pool::External(p) => PooledConn::External(p.get_timeout(timeout)?),
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
    pub(crate) fn con(&mut self) -> &mut dyn ConnectionLike {
        match self {
            PooledConn::Managed(c) => &mut **c,
            PooledConn::External(c) => &mut **c,
        }
    }

    /// A command the server may hold for up to `block` before replying (`WAIT`). On an
    /// application's pool the connection's own timeouts apply.
    pub(crate) fn blocking_query<T: redis::FromRedisValue>(
        &mut self,
        cmd: &redis::Cmd,
        block: Duration,
    ) -> RedisResult<T> {
        match self {
            PooledConn::Managed(c) => c.blocking_query(cmd, block),
            PooledConn::External(c) => cmd.query(&mut **c),
        }
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

/// Error handler that keeps r2d2's connect failures in our log stream (r2d2 would use `log`).
#[derive(Debug)]
pub(crate) struct LogErrors;

impl r2d2::HandleError<RedisError> for LogErrors {
    fn handle_error(&self, error: RedisError) {
        tracing::warn!(target: "redis_lock", %error, "connecting to redis failed");
    }
}
