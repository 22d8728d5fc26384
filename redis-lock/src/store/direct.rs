//! The direct path: the calling thread writes one packed request (a `wire::request::Request`'s
//! bytes) on a pooled plain connection and reads its reply when the socket is readable, so one
//! thread can ask several servers at once (`poll(2)` on their sockets) without waking another
//! thread. The caller decodes the reply with the same request (`deploy/quorum/fan_out.rs`).
//! Only plain TCP/Unix connections of our own pools take this path (`plain.rs`); the callers
//! use their usual path for the rest.

use std::sync::atomic::Ordering;
use std::time::Instant;

use redis::{ErrorKind, RedisError, RedisResult, Value};

use super::Store;
use super::connection::PooledConn;
use crate::wire::request::is_no_script;

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

impl Store {
    /// Sends `packed` on an idle pooled plain connection, from this thread. `None` when there
    /// is none (no connection yet, every one busy, or not a plain one): use the usual path,
    /// which may wait for a connection. `Some(Err)`: the write failed (the connection is
    /// dropped).
    #[cfg(unix)]
    pub(crate) fn send_direct(&self, packed: &[u8]) -> Option<RedisResult<Sent>> {
        let mut conn = self.pool.try_get(&self.requests)?;
        conn.plain()?;
        // Counted before it is written, as everywhere: once the server has answered, the
        // count already says so.
        conn.requests.fetch_add(1, Ordering::Relaxed);
        let r = conn.plain()?.send(packed);
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
