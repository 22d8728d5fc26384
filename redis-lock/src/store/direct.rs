//! The direct path: the calling thread sends one request on a pooled plain connection and
//! reads its reply when the socket is readable, so one thread can ask several servers at once
//! (`poll(2)` on their sockets) without waking another thread. A typed call of `wire/` runs
//! twice over stand-in connections: [`Capture`] records the request it sends, [`Replay`] hands
//! it the reply that arrived (and passes any further request, such as the script cache's
//! `SCRIPT LOAD` after `NOSCRIPT`, to the real connection), so decoding stays in `wire/`.
//! Only plain TCP/Unix connections of our own pools take this path (`plain.rs`); the callers
//! use their usual path for the rest.

use std::sync::atomic::Ordering;
use std::time::Instant;

use redis::{ConnectionLike, ErrorKind, RedisError, RedisResult, ServerErrorKind, Value};

use super::Store;
use super::connection::PooledConn;

/// Records the first request a typed call sends, and fails it (and any other) so the call
/// returns without waiting. `None` when the call sent a pipeline or nothing: it cannot go
/// the direct way.
pub(crate) fn capture(call: impl FnOnce(&mut dyn ConnectionLike)) -> Option<Vec<u8>> {
    let mut c = Capture {
        packed: None,
        pipelined: false,
    };
    call(&mut c);
    c.packed.filter(|_| !c.pipelined)
}

struct Capture {
    packed: Option<Vec<u8>>,
    pipelined: bool,
}

fn captured() -> RedisError {
    RedisError::from((ErrorKind::Client, "request captured, not sent"))
}

impl ConnectionLike for Capture {
    fn req_packed_command(&mut self, cmd: &[u8]) -> RedisResult<Value> {
        if self.packed.is_none() {
            self.packed = Some(cmd.to_vec());
        } else {
            // A second request depends on the first reply: not ours to send.
            self.pipelined = true;
        }
        Err(captured())
    }

    fn req_packed_commands(&mut self, _: &[u8], _: usize, _: usize) -> RedisResult<Vec<Value>> {
        self.pipelined = true;
        Err(captured())
    }

    fn get_db(&self) -> i64 {
        0
    }

    fn check_connection(&mut self) -> bool {
        false
    }

    fn is_open(&self) -> bool {
        false
    }
}

/// Hands a typed call the reply that came for its first request; any later request goes to
/// the connection (it was sent after the reply was read, so the stream is in step).
pub(crate) struct Replay<'a> {
    pub(crate) first: Option<Value>,
    pub(crate) conn: &'a mut PooledConn,
}

impl ConnectionLike for Replay<'_> {
    fn req_packed_command(&mut self, cmd: &[u8]) -> RedisResult<Value> {
        match self.first.take() {
            Some(v) => Ok(v),
            None => self.conn.req_packed_command(cmd),
        }
    }

    fn req_packed_commands(
        &mut self,
        cmd: &[u8],
        offset: usize,
        count: usize,
    ) -> RedisResult<Vec<Value>> {
        self.conn.req_packed_commands(cmd, offset, count)
    }

    fn req_command(&mut self, cmd: &redis::Cmd) -> RedisResult<Value> {
        match self.first.take() {
            Some(v) => Ok(v),
            None => self.conn.req_command(cmd),
        }
    }

    fn get_db(&self) -> i64 {
        self.conn.get_db()
    }

    fn check_connection(&mut self) -> bool {
        self.conn.check_connection()
    }

    fn is_open(&self) -> bool {
        self.conn.is_open()
    }
}

/// A request sent the direct way, and what of its reply has arrived.
pub(crate) struct Sent {
    pub(crate) conn: PooledConn,
    buf: Vec<u8>,
}

impl std::fmt::Debug for Sent {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Sent")
            .field("read", &self.buf.len())
            .finish_non_exhaustive()
    }
}

/// `true` for the reply a server gives a script it has not cached: the typed call then loads
/// the script on the connection, which is left to a thread that may block.
pub(crate) fn is_no_script(v: &Value) -> bool {
    matches!(v, Value::ServerError(e) if e.kind() == Some(ServerErrorKind::NoScript))
}

impl Store {
    /// Sends `packed` on an idle pooled plain connection, from this thread. `None` when there
    /// is none (no connection yet, every one busy, or not a plain one): use the usual path,
    /// which may wait for a connection. `Some(Err)`: the write failed (the connection is
    /// dropped).
    #[cfg(unix)]
    pub(crate) fn send_direct(&self, packed: &[u8]) -> Option<RedisResult<Sent>> {
        let mut conn = self.pool.try_get(&self.requests)?;
        let plain = conn.plain()?;
        let r = plain.send(packed);
        conn.requests.fetch_add(1, Ordering::Relaxed);
        Some(r.map(|()| Sent {
            conn,
            buf: Vec::new(),
        }))
    }

    #[cfg(not(unix))]
    pub(crate) fn send_direct(&self, _: &[u8]) -> Option<RedisResult<Sent>> {
        None
    }
}

impl Sent {
    #[cfg(unix)]
    fn fd(&mut self) -> std::os::fd::RawFd {
        self.conn.plain().map_or(-1, |p| p.fd())
    }

    /// Reads what arrived; the reply once it is whole. A script cache miss (`NOSCRIPT`) is not
    /// counted as a request, as on the usual path.
    pub(crate) fn read_ready(&mut self) -> RedisResult<Option<Value>> {
        let plain = self
            .conn
            .plain()
            .ok_or_else(|| RedisError::from((ErrorKind::Client, "not a plain connection")))?;
        let r = plain.read_ready(&mut self.buf)?;
        if r.as_ref().is_some_and(is_no_script) {
            self.conn.requests.fetch_sub(1, Ordering::Relaxed);
        }
        Ok(r)
    }

    /// Waits for the rest of the reply until `deadline` (for a thread that may block).
    pub(crate) fn finish(&mut self, deadline: Instant) -> RedisResult<Value> {
        loop {
            let ready = readable(&mut [&mut *self], None, deadline)?;
            if ready.is_empty() {
                // The reply may still come: the stream is out of step, never reuse it.
                if let Some(p) = self.conn.plain() {
                    p.abandon();
                }
                return Err(RedisError::from((
                    ErrorKind::Io,
                    "no reply within the timeout",
                )));
            }
            if let Some(v) = self.read_ready()? {
                return Ok(v);
            }
        }
    }
}

/// Waits until one of `sent` (or `wake`) is readable or `deadline` passes; the indices of the
/// readable ones in `sent` (empty at the deadline; `wake` readable adds none).
#[cfg(unix)]
pub(crate) fn readable(
    sent: &mut [&mut Sent],
    wake: Option<std::os::fd::RawFd>,
    deadline: Instant,
) -> RedisResult<Vec<usize>> {
    let mut fds: Vec<libc::pollfd> = sent
        .iter_mut()
        .map(|s| libc::pollfd {
            fd: s.fd(),
            events: libc::POLLIN,
            revents: 0,
        })
        .collect();
    if let Some(fd) = wake {
        fds.push(libc::pollfd {
            fd,
            events: libc::POLLIN,
            revents: 0,
        });
    }
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        // Rounded up, so a wait never ends just before its deadline.
        let ms = i32::try_from(left.as_micros().div_ceil(1000)).unwrap_or(i32::MAX);
        let nfds = libc::nfds_t::try_from(fds.len()).unwrap_or(libc::nfds_t::MAX);
        // SAFETY: `fds` is a valid array of `nfds` pollfd structures for the whole call.
        let n = unsafe { libc::poll(fds.as_mut_ptr(), nfds, ms) };
        if n < 0 {
            let e = std::io::Error::last_os_error();
            if e.kind() == std::io::ErrorKind::Interrupted {
                continue;
            }
            return Err(e.into());
        }
        if n == 0 && Instant::now() < deadline {
            continue;
        }
        return Ok(fds
            .iter()
            .take(sent.len())
            .enumerate()
            .filter(|(_, p)| p.revents != 0)
            .map(|(i, _)| i)
            .collect());
    }
}

#[cfg(not(unix))]
pub(crate) fn readable(_: &mut [&mut Sent], _: Option<i32>, _: Instant) -> RedisResult<Vec<usize>> {
    Ok(Vec::new())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn typed_get(con: &mut dyn ConnectionLike) -> RedisResult<Option<String>> {
        redis::cmd("GET").arg("k").query(con)
    }

    #[test]
    fn capture_records_the_one_request_a_typed_call_sends() {
        let packed = capture(|c| {
            let r = typed_get(c);
            assert!(r.is_err(), "a captured call gets no reply");
        });
        assert_eq!(
            packed.as_deref(),
            Some(&redis::cmd("GET").arg("k").get_packed_command()[..])
        );
    }

    #[test]
    fn a_call_of_several_requests_or_none_is_not_captured() {
        assert_eq!(capture(|_| {}), None);
        let two = capture(|c| {
            let _ = redis::cmd("PING").query::<String>(c);
            let _ = redis::cmd("PING").query::<String>(c);
        });
        assert_eq!(two, None);
        let pipe = capture(|c| {
            let _ = redis::pipe()
                .cmd("PING")
                .cmd("PING")
                .query::<Vec<String>>(c);
        });
        assert_eq!(pipe, None);
    }

    #[test]
    fn no_script_is_told_from_other_errors() {
        let no_script = redis::parse_redis_value(b"-NOSCRIPT No matching script\r\n").unwrap();
        let wrong = redis::parse_redis_value(b"-WRONGTYPE Operation\r\n").unwrap();
        assert!(is_no_script(&no_script));
        assert!(!is_no_script(&wrong));
        assert!(!is_no_script(&Value::Okay));
    }
}
