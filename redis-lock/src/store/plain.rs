//! A plain (TCP or Unix socket) connection to one server whose reads survive signals.
//!
//! A socket with a receive timeout (`SO_RCVTIMEO`) fails `recv` with `EINTR` whenever a signal
//! handler runs, `SA_RESTART` or not, and also after the process was stopped and continued
//! (SIGSTOP/SIGCONT); see signal(7). The `redis` crate's connection turns that into an I/O
//! error and then skips the reply when it arrives, so the request is lost and the caller
//! cannot tell whether it ran. Cron jobs and CLIs get signals all the time, so for plain
//! connections (the common case) we speak RESP ourselves (replies parsed by `wire::resp`), over
//! a reader that resumes an interrupted read within the time that is left (a sentinel master's
//! connections and those to the sentinels too). TLS, RESP3 and Cluster connections still use
//! the `redis` crate's (SAFETY.md says so).

use std::io::{self, Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
#[cfg(unix)]
use std::os::unix::net::UnixStream;
use std::time::{Duration, Instant};

use redis::{ConnectionAddr, ConnectionInfo, ConnectionLike, RedisError, RedisResult, Value};

/// The socket under a [`Plain`] connection.
enum Socket {
    Tcp(TcpStream),
    #[cfg(unix)]
    Unix(UnixStream),
}

impl Socket {
    /// The socket to `addr`, connected by `deadline` (a Unix socket connects at once).
    fn connect(addr: &ConnectionAddr, deadline: Instant) -> RedisResult<Socket> {
        match addr {
            ConnectionAddr::Tcp(host, port) => {
                let stream = connect_tcp(host, *port, deadline)?;
                stream.set_nodelay(true)?;
                Ok(Socket::Tcp(stream))
            }
            #[cfg(unix)]
            ConnectionAddr::Unix(path) => Ok(Socket::Unix(UnixStream::connect(path)?)),
            _ => Err(RedisError::from((
                redis::ErrorKind::InvalidClientConfig,
                "not a plain connection",
            ))),
        }
    }

    fn set_read_timeout(&self, d: Option<Duration>) -> io::Result<()> {
        match self {
            Socket::Tcp(s) => s.set_read_timeout(d),
            #[cfg(unix)]
            Socket::Unix(s) => s.set_read_timeout(d),
        }
    }

    fn set_write_timeout(&self, d: Option<Duration>) -> io::Result<()> {
        match self {
            Socket::Tcp(s) => s.set_write_timeout(d),
            #[cfg(unix)]
            Socket::Unix(s) => s.set_write_timeout(d),
        }
    }
}

/// A TCP connection to `host`, trying the addresses it resolves to in turn until one
/// accepts, all of them within the one `deadline`; the last failure when none does.
fn connect_tcp(host: &str, port: u16, deadline: Instant) -> RedisResult<TcpStream> {
    let mut last = None;
    for addr in (host, port).to_socket_addrs()? {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            last = Some(io::Error::new(
                io::ErrorKind::TimedOut,
                "connecting timed out (connect timeout)",
            ));
            break;
        }
        match TcpStream::connect_timeout(&addr, left) {
            Ok(s) => return Ok(s),
            Err(e) => last = Some(e),
        }
    }
    Err(last
        .unwrap_or_else(|| {
            io::Error::new(
                io::ErrorKind::NotFound,
                "the host name resolved to no address",
            )
        })
        .into())
}

/// Ends a [`Plain`] connection from another thread: a read blocked on it returns at once
/// (the notification listener's, when its client is dropped).
pub(crate) struct Closer(Socket);

impl Closer {
    pub(crate) fn close(&self) {
        let _ = match &self.0 {
            Socket::Tcp(s) => s.shutdown(std::net::Shutdown::Both),
            #[cfg(unix)]
            Socket::Unix(s) => s.shutdown(std::net::Shutdown::Both),
        };
    }

    /// Another handle on the same socket, for a wait on it while the connection may be
    /// dropped by another thread (the socket stays open until both are gone).
    pub(crate) fn try_clone_for_poll(&self) -> Option<Closer> {
        Some(Closer(match &self.0 {
            Socket::Tcp(s) => Socket::Tcp(s.try_clone().ok()?),
            #[cfg(unix)]
            Socket::Unix(s) => Socket::Unix(s.try_clone().ok()?),
        }))
    }

    #[cfg(unix)]
    fn fd(&self) -> std::os::fd::RawFd {
        use std::os::fd::AsRawFd;
        match &self.0 {
            Socket::Tcp(s) => s.as_raw_fd(),
            Socket::Unix(s) => s.as_raw_fd(),
        }
    }

    /// Whether the server closed the connection: its end of the stream is reached (or the
    /// socket failed), whether or not bytes are still unread before it. Asked without
    /// waiting.
    #[cfg(unix)]
    pub(crate) fn peer_closed(&self) -> bool {
        let mut fd = libc::pollfd {
            fd: self.fd(),
            events: libc::POLLRDHUP,
            revents: 0,
        };
        // SAFETY: `fd` is one valid pollfd for the call; the fd is open while `self` lives.
        let n = unsafe { libc::poll(&raw mut fd, 1, 0) };
        n > 0 && fd.revents & (libc::POLLRDHUP | libc::POLLHUP | libc::POLLERR) != 0
    }

    #[cfg(not(unix))]
    pub(crate) fn peer_closed(&self) -> bool {
        false
    }
}

/// What [`Plain::wait`] saw.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Seen {
    /// The subscribed connection has something to read (or is closed: the read says).
    pub(crate) message: bool,
    /// The other connection watched was hung up by the server.
    pub(crate) hung_up: bool,
}

impl Read for &Socket {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match self {
            Socket::Tcp(s) => (&*s).read(buf),
            #[cfg(unix)]
            Socket::Unix(s) => (&*s).read(buf),
        }
    }
}

impl Write for &Socket {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match self {
            Socket::Tcp(s) => (&*s).write(buf),
            #[cfg(unix)]
            Socket::Unix(s) => (&*s).write(buf),
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// Reads from the socket, resuming a read a signal interrupted as long as the reply's
/// deadline has not passed (with the receive timeout cut to what is left).
struct Resuming<'a> {
    socket: &'a Socket,
    deadline: Instant,
    /// The receive timeout was cut and must be restored.
    cut: bool,
}

impl Read for Resuming<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        loop {
            match (&mut &*self.socket).read(buf) {
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {
                    let left = self.deadline.saturating_duration_since(Instant::now());
                    if left.is_zero() {
                        return Err(io::Error::new(
                            io::ErrorKind::TimedOut,
                            "no reply within the timeout (interrupted by signals)",
                        ));
                    }
                    self.socket.set_read_timeout(Some(left))?;
                    self.cut = true;
                }
                other => return other,
            }
        }
    }
}

/// How much a connection reads at once at first (its buffer grows for a longer reply).
const READ_BUFFER: usize = 4096;

/// A connection speaking RESP2 over a plain socket; replies are parsed by `wire::resp` from a
/// buffer the connection keeps.
pub(crate) struct Plain {
    socket: Socket,
    /// Replies read and not parsed yet: `buf[..filled]`. Zeroed once, when made or grown, and
    /// reused: a read never clears it again.
    buf: Vec<u8>,
    filled: usize,
    io_timeout: Duration,
    db: i64,
    open: bool,
}

impl Plain {
    /// Whether `info` names a server this connection type can reach (not TLS).
    pub(crate) fn serves(info: &ConnectionInfo) -> bool {
        // RESP3 (`?protocol=resp3`) needs a `HELLO` handshake: left to the `redis` crate.
        if info.redis_settings().protocol() != redis::ProtocolVersion::RESP2 {
            return false;
        }
        match info.addr() {
            ConnectionAddr::Tcp(..) => true,
            #[cfg(unix)]
            ConnectionAddr::Unix(_) => true,
            _ => false,
        }
    }

    /// Connects, authenticates and selects the database, all within `connect_timeout` (one
    /// deadline for the TCP connect, shared in turn by the addresses a host name resolves to,
    /// and the handshake's replies). The handshake is `AUTH` and `SELECT` where the URL asks
    /// for them, else one `PING`: a server that accepts connections but never answers fails
    /// here, where nothing was sent, instead of at the first request, whose fate would be
    /// unknown.
    pub(crate) fn connect(
        info: &ConnectionInfo,
        connect_timeout: Duration,
        io_timeout: Duration,
    ) -> RedisResult<Plain> {
        let deadline = Instant::now() + connect_timeout;
        let socket = Socket::connect(info.addr(), deadline)?;
        socket.set_read_timeout(Some(io_timeout))?;
        socket.set_write_timeout(Some(io_timeout))?;
        let settings = info.redis_settings();
        let mut con = Plain {
            socket,
            buf: vec![0; READ_BUFFER],
            filled: 0,
            io_timeout,
            db: settings.db(),
            open: true,
        };
        con.greet(settings, deadline)?;
        Ok(con)
    }

    /// The handshake, every reply due by `deadline`: `AUTH` and `SELECT` where the URL asks
    /// for them, else one `PING`, so that even a server that needs neither has answered once.
    fn greet(
        &mut self,
        settings: &redis::RedisConnectionInfo,
        deadline: Instant,
    ) -> RedisResult<()> {
        if let Some(password) = settings.password() {
            let mut auth = redis::cmd("AUTH");
            if let Some(user) = settings.username() {
                auth.arg(user);
            }
            auth.arg(password);
            // An `AuthenticationFailed` error, as the `redis` crate reports it, so a refused
            // password is told from an unreachable server.
            self.handshake(&auth, deadline).map_err(|e| {
                if e.kind() == redis::ErrorKind::Io {
                    e
                } else {
                    RedisError::from((
                        redis::ErrorKind::AuthenticationFailed,
                        "Password authentication failed",
                        e.to_string(),
                    ))
                }
            })?;
        }
        if settings.db() != 0 {
            let mut select = redis::cmd("SELECT");
            select.arg(settings.db());
            self.handshake(&select, deadline)?;
        }
        if settings.password().is_none() && settings.db() == 0 {
            self.handshake(&redis::cmd("PING"), deadline)?;
        }
        Ok(())
    }

    /// One command of the handshake, its reply due by `deadline`; a server error is an error.
    fn handshake(&mut self, cmd: &redis::Cmd, deadline: Instant) -> RedisResult<()> {
        let left = deadline.saturating_duration_since(Instant::now());
        let reply = if left.is_zero() {
            Err(no_answer())
        } else {
            self.exchange(&cmd.get_packed_command(), 1, left)
        };
        match reply {
            Ok(mut replies) => {
                let reply = replies.pop().ok_or_else(|| {
                    RedisError::from((redis::ErrorKind::UnexpectedReturnType, "no reply"))
                })?;
                reply.extract_error().map(drop)
            }
            Err(e) if e.is_timeout() => Err(no_answer()),
            Err(e) => Err(e),
        }
    }

    /// Sends `packed` and reads `count` replies, waiting up to `timeout` for them.
    fn exchange(
        &mut self,
        packed: &[u8],
        count: usize,
        timeout: Duration,
    ) -> RedisResult<Vec<Value>> {
        let r = self.exchange_inner(packed, count, timeout);
        if r.is_err() {
            // A failed write or read leaves the stream at an unknown place: never reuse it.
            self.open = false;
        }
        r
    }

    fn exchange_inner(
        &mut self,
        packed: &[u8],
        count: usize,
        timeout: Duration,
    ) -> RedisResult<Vec<Value>> {
        // `write_all` resumes a write that a signal interrupted.
        (&mut &self.socket).write_all(packed)?;
        let mut reader = Resuming {
            socket: &self.socket,
            deadline: Instant::now() + timeout,
            cut: false,
        };
        if timeout != self.io_timeout {
            self.socket.set_read_timeout(Some(timeout))?;
            reader.cut = true;
        }
        let mut replies = Vec::with_capacity(count);
        let mut start = 0;
        while replies.len() < count {
            match crate::wire::resp::parse(&self.buf[start..self.filled]) {
                Ok(Some((value, len))) => {
                    replies.push(value);
                    start += len;
                }
                Ok(None) => {
                    // More to read: keep the unparsed tail at the front, grow when full.
                    self.buf.copy_within(start..self.filled, 0);
                    self.filled -= start;
                    start = 0;
                    if self.filled == self.buf.len() {
                        self.buf.resize(self.buf.len() * 2, 0);
                    }
                    let n = reader.read(&mut self.buf[self.filled..])?;
                    if n == 0 {
                        return Err(io::Error::new(
                            io::ErrorKind::UnexpectedEof,
                            "the server closed the connection",
                        )
                        .into());
                    }
                    self.filled += n;
                }
                Err(()) => return Err(unexpected_bytes()),
            }
        }
        // Nothing follows a reply in RESP2 without pushes; anything that did stays for the
        // next read.
        self.buf.copy_within(start..self.filled, 0);
        self.filled -= start;
        if self.buf.len() > 16 * READ_BUFFER && self.filled == 0 {
            // A long reply (a `SCAN` page, say) does not keep its buffer.
            self.buf = vec![0; READ_BUFFER];
        }
        if reader.cut {
            self.socket.set_read_timeout(Some(self.io_timeout))?;
        }
        Ok(replies)
    }

    /// A command the server may hold for up to `block` before replying.
    pub(crate) fn blocking(&mut self, cmd: &redis::Cmd, block: Duration) -> RedisResult<Value> {
        let timeout = block + self.io_timeout;
        let mut replies = self.exchange(&cmd.get_packed_command(), 1, timeout)?;
        replies
            .pop()
            .ok_or_else(|| RedisError::from((redis::ErrorKind::UnexpectedReturnType, "no reply")))
    }
}

/// A subscribed connection (`notify.rs`): what the server sends unasked.
impl Plain {
    /// What ends this connection from another thread.
    pub(crate) fn closer(&self) -> io::Result<Closer> {
        Ok(Closer(match &self.socket {
            Socket::Tcp(s) => Socket::Tcp(s.try_clone()?),
            #[cfg(unix)]
            Socket::Unix(s) => Socket::Unix(s.try_clone()?),
        }))
    }

    /// Waits at most `timeout` until this subscribed connection has a message to read, or
    /// the server hangs up `other` (a connection of ours that only ever has replies to the
    /// requests sent on it: readable with the peer's end of the stream is closed). A message
    /// already in the buffer counts at once.
    #[cfg(unix)]
    pub(crate) fn wait(&self, other: Option<&Closer>, timeout: Duration) -> io::Result<Seen> {
        if self.filled > 0 {
            return Ok(Seen {
                message: true,
                hung_up: false,
            });
        }
        let mut fds = [
            libc::pollfd {
                fd: self.fd(),
                events: libc::POLLIN,
                revents: 0,
            },
            libc::pollfd {
                // A negative fd is skipped by poll(2).
                fd: other.map_or(-1, Closer::fd),
                events: libc::POLLRDHUP,
                revents: 0,
            },
        ];
        let ms = i32::try_from(timeout.as_millis()).unwrap_or(i32::MAX);
        // SAFETY: `fds` is a valid array of two pollfd structures for the whole call.
        let n = unsafe { libc::poll(fds.as_mut_ptr(), 2, ms) };
        if n < 0 {
            let e = io::Error::last_os_error();
            return if e.kind() == io::ErrorKind::Interrupted {
                Ok(Seen::default())
            } else {
                Err(e)
            };
        }
        let gone = libc::POLLRDHUP | libc::POLLHUP | libc::POLLERR;
        Ok(Seen {
            message: fds[0].revents != 0,
            hung_up: fds[1].revents & gone != 0,
        })
    }

    /// Without poll(2): a message is looked for at once; a hang-up is found by the next
    /// request on that connection.
    #[cfg(not(unix))]
    pub(crate) fn wait(&self, _: Option<&Closer>, _: Duration) -> io::Result<Seen> {
        Ok(Seen {
            message: true,
            hung_up: false,
        })
    }

    /// The next message the server sends without a request (a subscription's), waiting at
    /// most `timeout`; `None` when none came. A timeout leaves the connection usable (what
    /// part of a message was read stays in the buffer); any other failure closes it.
    pub(crate) fn receive(&mut self, timeout: Duration) -> RedisResult<Option<Value>> {
        match self.exchange_inner(&[], 1, timeout) {
            Ok(mut replies) => Ok(replies.pop()),
            Err(e) if e.is_timeout() => {
                self.socket.set_read_timeout(Some(self.io_timeout))?;
                Ok(None)
            }
            Err(e) => {
                self.open = false;
                Err(e)
            }
        }
    }
}

/// The direct path (`direct.rs`): a request written now, its reply read when the socket is
/// readable, so the calling thread can wait on several servers at once with `poll(2)`.
impl Plain {
    #[cfg(unix)]
    pub(crate) fn fd(&self) -> std::os::fd::RawFd {
        use std::os::fd::AsRawFd;
        match &self.socket {
            Socket::Tcp(s) => s.as_raw_fd(),
            Socket::Unix(s) => s.as_raw_fd(),
        }
    }

    /// A reply is overdue: the stream is out of step, never reuse the connection.
    pub(crate) fn abandon(&mut self) {
        self.open = false;
    }

    /// Writes `packed` (a whole request); its reply is read with [`read_ready`](Self::read_ready).
    pub(crate) fn send(&mut self, packed: &[u8]) -> RedisResult<()> {
        let r = (&mut &self.socket).write_all(packed);
        if r.is_err() {
            self.open = false;
        }
        Ok(r?)
    }

    /// Reads what the socket has (call it when `poll` says it is readable: the read does not
    /// block then) into `buf`, and returns the reply once `buf` holds all of it. The
    /// connection's own buffer is bypassed: it holds nothing between replies, since a reply
    /// is read only after its request and nothing else comes (RESP2, no pushes).
    pub(crate) fn read_ready(&mut self, buf: &mut Vec<u8>) -> RedisResult<Option<Value>> {
        let r = self.read_ready_inner(buf);
        if r.is_err() {
            self.open = false;
        }
        r
    }

    fn read_ready_inner(&mut self, buf: &mut Vec<u8>) -> RedisResult<Option<Value>> {
        let mut chunk = [0u8; 4096];
        let n = loop {
            match (&mut &self.socket).read(&mut chunk) {
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                other => break other?,
            }
        };
        if n == 0 {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "the server closed the connection",
            )
            .into());
        }
        buf.extend_from_slice(&chunk[..n]);
        match crate::wire::resp::parse(buf) {
            Ok(None) => Ok(None),
            Ok(Some((value, len))) if len == buf.len() => Ok(Some(value)),
            Ok(Some(_)) | Err(()) => Err(unexpected_bytes()),
        }
    }
}

fn unexpected_bytes() -> RedisError {
    RedisError::from((redis::ErrorKind::Parse, "unexpected bytes from the server"))
}

impl ConnectionLike for Plain {
    fn req_packed_command(&mut self, cmd: &[u8]) -> RedisResult<Value> {
        let mut replies = self.exchange(cmd, 1, self.io_timeout)?;
        replies
            .pop()
            .ok_or_else(|| RedisError::from((redis::ErrorKind::UnexpectedReturnType, "no reply")))
    }

    fn req_packed_commands(
        &mut self,
        cmd: &[u8],
        offset: usize,
        count: usize,
    ) -> RedisResult<Vec<Value>> {
        let mut replies = self.exchange(cmd, offset + count, self.io_timeout)?;
        Ok(replies.split_off(offset))
    }

    fn get_db(&self) -> i64 {
        self.db
    }

    fn check_connection(&mut self) -> bool {
        redis::cmd("PING").query::<String>(self).is_ok()
    }

    fn is_open(&self) -> bool {
        self.open
    }
}

/// A handshake whose reply did not come within the connect timeout (the socket's own error,
/// "resource temporarily unavailable", says nothing useful). Also the `redis` crate's
/// connections' (`connection/link.rs`).
pub(super) fn no_answer() -> RedisError {
    std::io::Error::new(
        std::io::ErrorKind::TimedOut,
        "the server accepted the connection but did not answer within the connect timeout",
    )
    .into()
}
