//! The open connection under a pooled one: our own plain connection where it serves
//! (`store/plain.rs`), else the `redis` crate's, connected and through its handshake within
//! the connect timeout either way.

use std::time::Duration;

use redis::{ConnectionLike, ErrorKind, RedisError, RedisResult, Value};

use crate::store::plain::{self, Plain};

/// The connection inside a [`Conn`](super::Conn).
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

    pub(super) fn con_ref(&self) -> &dyn ConnectionLike {
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
            Err(e) if e.is_timeout() => return Err(plain::no_answer()),
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
