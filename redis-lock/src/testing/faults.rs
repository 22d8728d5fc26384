//! A loopback proxy that numbers the request boundaries of the connections through it and
//! injects one fault (or a few) at chosen boundaries: the fault explorer's
//! (`tests/tests/explore.rs`) way to break a client at every point of a scenario.
//!
//! A **boundary** is the moment just before one complete client-to-server command is
//! forwarded. The proxy parses the RESP requests it carries (a pipeline is several commands,
//! each its own boundary; a command split over several reads is one) and numbers them from 0
//! in the order the proxy sees them, across every connection through this proxy (command,
//! waiting, renewal and notification connections alike). Boundaries are as deterministic as
//! the client's traffic through the proxy: one thread's calls on a client without loss
//! notification, with leases short enough to be quick yet long enough that no renewal falls
//! inside the scenario, number the same way on every run.
//!
//! The faults ([`Fault`]) stand for what can happen to a client or its server at that moment:
//! the request or its reply lost, the client dead or paused, the server restarted without its
//! data, the lock's keys expired. A restart is emulated rather than real: `FLUSHALL`,
//! `SCRIPT FLUSH`, and every other client's connection killed (`CLIENT KILL ID`), all in a
//! few hundred microseconds while the server keeps its port, so that the request at the
//! boundary still reaches the server, now without its data and scripts; a real
//! [`RedisServer::restart`](super::RedisServer::restart) would cost a process start per run
//! and cut the boundary's own connection too (which [`Fault::Drop`] covers).

use std::collections::HashMap;
use std::io::{self, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// How often a forwarding thread looks at the stop and pause flags while idle.
const TICK: Duration = Duration::from_millis(5);

/// What happens at a boundary.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Fault {
    /// The request never arrives: its connection is cut before it is forwarded.
    Drop,
    /// The request runs but its reply is lost: the connection is cut when the reply comes.
    LoseReply,
    /// The client dies here: every connection through the proxy is cut, the request is not
    /// forwarded, and every later connection is closed at once, for the proxy's lifetime.
    Die,
    /// The client pauses here: nothing is forwarded in either direction for the proxy's pause
    /// ([`FaultProxy::set_pause`]); then the request and everything after it go on.
    Pause,
    /// The server restarts without its data just before the request arrives: `FLUSHALL`,
    /// `SCRIPT FLUSH`, and every other connection to the server killed.
    Restart,
    /// The lock's keys expire just before the request arrives: every key matching the
    /// proxy's patterns ([`FaultProxy::set_key_patterns`]) is deleted.
    Expire,
}

impl Fault {
    /// Every fault, in a fixed order.
    pub const ALL: [Fault; 6] = [
        Fault::Drop,
        Fault::LoseReply,
        Fault::Die,
        Fault::Pause,
        Fault::Restart,
        Fault::Expire,
    ];

    /// The fault called `name` (its variant's name, as `Debug` prints it).
    pub fn parse(name: &str) -> Option<Fault> {
        Fault::ALL.into_iter().find(|f| format!("{f:?}") == name)
    }
}

/// Forwards connections from a free port on 127.0.0.1 to a target port on 127.0.0.1, numbering
/// every request boundary and injecting the faults armed at them.
///
/// ```no_run
/// use redis_lock::testing::{Fault, FaultProxy, RedisServer};
///
/// let server = RedisServer::start();
/// let proxy = FaultProxy::start(server.port()).unwrap();
/// proxy.arm(1, Fault::LoseReply);
/// let locks = redis_lock::LockClient::open(&proxy.url()).unwrap();
/// let _ = locks.ping();
/// println!("{} boundaries: {:?}", proxy.boundaries(), proxy.commands());
/// ```
#[derive(Debug)]
pub struct FaultProxy {
    port: u16,
    shared: Arc<Shared>,
    acceptor: Option<JoinHandle<()>>,
}

#[derive(Debug)]
struct Shared {
    target: SocketAddr,
    stop: AtomicBool,
    dead: AtomicBool,
    /// Nothing is forwarded before this instant (a [`Fault::Pause`]).
    paused_until: Mutex<Option<Instant>>,
    state: Mutex<State>,
    /// Held while a fault that acts on the server (a restart, an expiry) runs: taken under
    /// `state` when the fault is claimed, so that [`FaultProxy::disarm`] can wait it out.
    acting: Mutex<()>,
    next_id: AtomicU64,
    open: Mutex<HashMap<u64, (TcpStream, TcpStream)>>,
}

#[derive(Debug, Default)]
struct State {
    /// The next boundary's number.
    next: u64,
    armed: Vec<(u64, Fault)>,
    fired: Vec<(u64, Fault, String)>,
    /// The command name at each boundary.
    commands: Vec<String>,
    pause: Duration,
    patterns: Vec<String>,
    /// Why a fault could not be injected as meant (an admin command failed).
    errors: Vec<String>,
}

fn locked<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl FaultProxy {
    /// Starts a proxy to `127.0.0.1:<target_port>` with nothing armed.
    ///
    /// # Errors
    ///
    /// When no loopback port can be bound.
    pub fn start(target_port: u16) -> io::Result<FaultProxy> {
        let listener = TcpListener::bind("127.0.0.1:0")?;
        let port = listener.local_addr()?.port();
        let shared = Arc::new(Shared {
            target: SocketAddr::from(([127, 0, 0, 1], target_port)),
            stop: AtomicBool::new(false),
            dead: AtomicBool::new(false),
            paused_until: Mutex::new(None),
            state: Mutex::new(State {
                pause: Duration::from_secs(1),
                ..State::default()
            }),
            acting: Mutex::new(()),
            next_id: AtomicU64::new(0),
            open: Mutex::new(HashMap::new()),
        });
        let acceptor = {
            let shared = Arc::clone(&shared);
            std::thread::Builder::new()
                .name("fault-proxy-accept".into())
                .spawn(move || accept_loop(&listener, &shared))?
        };
        Ok(FaultProxy {
            port,
            shared,
            acceptor: Some(acceptor),
        })
    }

    /// The port clients connect to.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// `redis://127.0.0.1:<port>/`.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/", self.port)
    }

    /// Injects `fault` at boundary `boundary` (numbered from 0).
    pub fn arm(&self, boundary: u64, fault: Fault) {
        locked(&self.shared.state).armed.push((boundary, fault));
    }

    /// Forgets the faults armed and not fired yet: the traffic that follows (a client's
    /// background requests while a test checks the server) passes untouched.
    /// A fault claimed before, and still acting on the server, has finished when this
    /// returns: what follows cannot be caught by it.
    pub fn disarm(&self) {
        {
            let mut state = locked(&self.shared.state);
            let next = state.next;
            state.armed.retain(|&(k, _)| k < next);
        }
        drop(locked(&self.shared.acting));
    }

    /// How long a [`Fault::Pause`] stops the traffic (1 s unless set).
    pub fn set_pause(&self, pause: Duration) {
        locked(&self.shared.state).pause = pause;
    }

    /// The `SCAN MATCH` patterns of the keys a [`Fault::Expire`] deletes.
    pub fn set_key_patterns(&self, patterns: Vec<String>) {
        locked(&self.shared.state).patterns = patterns;
    }

    /// Boundaries passed so far (the number the next one gets).
    pub fn boundaries(&self) -> u64 {
        locked(&self.shared.state).next
    }

    /// The command name at each boundary so far.
    pub fn commands(&self) -> Vec<String> {
        locked(&self.shared.state).commands.clone()
    }

    /// The faults injected so far: boundary, fault, command name.
    pub fn fired(&self) -> Vec<(u64, Fault, String)> {
        locked(&self.shared.state).fired.clone()
    }

    /// Admin commands that failed while injecting a fault.
    pub fn errors(&self) -> Vec<String> {
        locked(&self.shared.state).errors.clone()
    }

    /// Whether a [`Fault::Die`] fired.
    pub fn is_dead(&self) -> bool {
        self.shared.dead.load(Ordering::SeqCst)
    }

    /// Connections open through the proxy now.
    pub fn open_connections(&self) -> usize {
        locked(&self.shared.open).len()
    }
}

impl Drop for FaultProxy {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::SeqCst);
        let _ = TcpStream::connect_timeout(&SocketAddr::from(([127, 0, 0, 1], self.port)), TICK);
        self.shared.cut_all();
        if let Some(t) = self.acceptor.take() {
            let _ = t.join();
        }
    }
}

impl Shared {
    fn cut_all(&self) {
        let open: Vec<_> = locked(&self.open).drain().collect();
        for (_, (client, server)) in &open {
            let _ = client.shutdown(Shutdown::Both);
            let _ = server.shutdown(Shutdown::Both);
        }
    }

    /// Waits while a pause lasts (bounded by the pause itself).
    fn wait_out_pause(&self) {
        loop {
            let until = *locked(&self.paused_until);
            match until {
                Some(t) if Instant::now() < t && !self.stop.load(Ordering::SeqCst) => {
                    std::thread::sleep(TICK.min(t - Instant::now()));
                }
                _ => return,
            }
        }
    }

    fn admin(&self) -> Result<redis::Connection, String> {
        let url = format!("redis://127.0.0.1:{}/", self.target.port());
        redis::Client::open(url)
            .and_then(|c| c.get_connection_with_timeout(Duration::from_secs(2)))
            .map_err(|e| e.to_string())
    }

    /// The server loses its data and every connection but `keep` (the proxy's own side of
    /// the connection whose request is at the boundary).
    fn restart(&self, keep: Option<SocketAddr>) -> Result<(), String> {
        let mut c = self.admin()?;
        let e = |e: redis::RedisError| e.to_string();
        redis::cmd("FLUSHALL").query::<()>(&mut c).map_err(e)?;
        redis::cmd("SCRIPT")
            .arg("FLUSH")
            .query::<()>(&mut c)
            .map_err(e)?;
        let me: i64 = redis::cmd("CLIENT").arg("ID").query(&mut c).map_err(e)?;
        let list: String = redis::cmd("CLIENT").arg("LIST").query(&mut c).map_err(e)?;
        let keep = keep.map(|a| a.to_string());
        for line in list.lines() {
            let field = |name: &str| {
                line.split(' ')
                    .find_map(|kv| kv.strip_prefix(name).and_then(|v| v.strip_prefix('=')))
            };
            let Some(id) = field("id").and_then(|v| v.parse::<i64>().ok()) else {
                continue;
            };
            if id == me || field("addr").map(str::to_owned) == keep {
                continue;
            }
            // A client gone meanwhile answers an error: nothing to kill.
            let _ = redis::cmd("CLIENT")
                .arg("KILL")
                .arg("ID")
                .arg(id)
                .query::<i64>(&mut c);
        }
        Ok(())
    }

    /// Deletes every key matching `patterns`.
    fn expire(&self, patterns: &[String]) -> Result<(), String> {
        let mut c = self.admin()?;
        for pattern in patterns {
            let mut cursor = 0u64;
            // A SCAN pass over a test server's few keys: bounded by the rounds, not the time.
            for _ in 0..10_000 {
                let (next, keys): (u64, Vec<String>) = redis::cmd("SCAN")
                    .arg(cursor)
                    .arg("MATCH")
                    .arg(pattern)
                    .arg("COUNT")
                    .arg(1000)
                    .query(&mut c)
                    .map_err(|e| e.to_string())?;
                if !keys.is_empty() {
                    redis::cmd("DEL")
                        .arg(&keys)
                        .query::<i64>(&mut c)
                        .map_err(|e| e.to_string())?;
                }
                cursor = next;
                if cursor == 0 {
                    break;
                }
            }
        }
        Ok(())
    }
}

fn accept_loop(listener: &TcpListener, shared: &Arc<Shared>) {
    for client in listener.incoming() {
        if shared.stop.load(Ordering::SeqCst) {
            return;
        }
        let Ok(client) = client else { continue };
        if shared.dead.load(Ordering::SeqCst) {
            let _ = client.shutdown(Shutdown::Both);
            continue;
        }
        let Ok(server) = TcpStream::connect_timeout(&shared.target, Duration::from_secs(2)) else {
            let _ = client.shutdown(Shutdown::Both);
            continue;
        };
        let _ = client.set_nodelay(true);
        let _ = server.set_nodelay(true);
        let (Ok(c2), Ok(s2), Ok(c3), Ok(s3)) = (
            client.try_clone(),
            server.try_clone(),
            client.try_clone(),
            server.try_clone(),
        ) else {
            continue;
        };
        let id = shared.next_id.fetch_add(1, Ordering::SeqCst);
        locked(&shared.open).insert(id, (c3, s3));
        // A Die that fired between the check above and the insert: cut this one too.
        if shared.dead.load(Ordering::SeqCst) {
            shared.cut_all();
            continue;
        }
        let conn = Arc::new(Conn::default());
        let alive = Arc::new(AtomicU64::new(2));
        for requests in [true, false] {
            let (from, to) = if requests {
                (client.try_clone(), s2.try_clone())
            } else {
                (server.try_clone(), c2.try_clone())
            };
            let (Ok(from), Ok(to)) = (from, to) else {
                continue;
            };
            let (pump_shared, conn, alive) =
                (Arc::clone(shared), Arc::clone(&conn), Arc::clone(&alive));
            let spawned = std::thread::Builder::new()
                .name("fault-proxy-pump".into())
                .spawn(move || {
                    if requests {
                        pump_requests(from, to, &conn, &pump_shared);
                    } else {
                        pump_replies(from, to, &conn, &pump_shared);
                    }
                    if alive.fetch_sub(1, Ordering::SeqCst) == 1 {
                        locked(&pump_shared.open).remove(&id);
                    }
                });
            if spawned.is_err() {
                locked(&shared.open).remove(&id);
            }
        }
    }
}

/// One connection's counters, shared by its two pumps.
#[derive(Debug, Default)]
struct Conn {
    /// Requests forwarded on this connection.
    requests: AtomicU64,
    /// The reply to swallow (its index on this connection), cutting the connection; `0` for
    /// none, else index + 1.
    lose_reply: AtomicU64,
}

/// Reads into `buf` (appending) until at least one byte came, the peer closed (`false`), or the
/// proxy stopped (`false`).
fn read_more(from: &mut TcpStream, buf: &mut Vec<u8>, shared: &Shared) -> bool {
    let mut chunk = [0u8; 16 * 1024];
    loop {
        if shared.stop.load(Ordering::SeqCst) {
            return false;
        }
        match from.read(&mut chunk) {
            Ok(0) => return false,
            Ok(n) => {
                buf.extend_from_slice(&chunk[..n]);
                return true;
            }
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                ) => {}
            Err(_) => return false,
        }
    }
}

fn pump_requests(mut from: TcpStream, mut to: TcpStream, conn: &Conn, shared: &Shared) {
    let _ = from.set_read_timeout(Some(TICK * 4));
    let mut buf = Vec::new();
    'outer: while read_more(&mut from, &mut buf, shared) {
        // Every complete command in what has come so far, one boundary each.
        while let Some(len) = value_len(&buf) {
            let command: Vec<u8> = buf.drain(..len).collect();
            let (boundary, fault, pause, patterns, acting) = {
                let mut state = locked(&shared.state);
                let boundary = state.next;
                state.next += 1;
                state.commands.push(command_name(&command));
                let fault = state
                    .armed
                    .iter()
                    .find(|(k, _)| *k == boundary)
                    .map(|&(_, f)| f);
                if let Some(f) = fault {
                    let name = command_name(&command);
                    state.fired.push((boundary, f, name));
                }
                let acting = matches!(fault, Some(Fault::Restart | Fault::Expire))
                    .then(|| locked(&shared.acting));
                (boundary, fault, state.pause, state.patterns.clone(), acting)
            };
            let _ = boundary;
            let index = conn.requests.fetch_add(1, Ordering::SeqCst);
            match fault {
                Some(Fault::Drop) => break 'outer,
                Some(Fault::Die) => {
                    shared.dead.store(true, Ordering::SeqCst);
                    shared.cut_all();
                    break 'outer;
                }
                Some(Fault::LoseReply) => conn.lose_reply.store(index + 1, Ordering::SeqCst),
                Some(Fault::Pause) => {
                    *locked(&shared.paused_until) = Some(Instant::now() + pause);
                }
                Some(Fault::Restart) => {
                    if let Err(e) = shared.restart(to.local_addr().ok()) {
                        locked(&shared.state).errors.push(format!("restart: {e}"));
                    }
                }
                Some(Fault::Expire) => {
                    if let Err(e) = shared.expire(&patterns) {
                        locked(&shared.state).errors.push(format!("expire: {e}"));
                    }
                }
                None => {}
            }
            drop(acting);
            shared.wait_out_pause();
            if shared.dead.load(Ordering::SeqCst) || to.write_all(&command).is_err() {
                break 'outer;
            }
        }
    }
    let _ = from.shutdown(Shutdown::Both);
    let _ = to.shutdown(Shutdown::Both);
}

fn pump_replies(mut from: TcpStream, mut to: TcpStream, conn: &Conn, shared: &Shared) {
    let _ = from.set_read_timeout(Some(TICK * 4));
    let mut buf = Vec::new();
    let mut replies = 0u64;
    'outer: while read_more(&mut from, &mut buf, shared) {
        while let Some(len) = value_len(&buf) {
            let reply: Vec<u8> = buf.drain(..len).collect();
            let lose = conn.lose_reply.load(Ordering::SeqCst);
            // Push messages (tracking invalidations) are not replies to a request.
            let push = reply.first() == Some(&b'>');
            if !push {
                replies += 1;
                if lose != 0 && replies >= lose {
                    break 'outer;
                }
            }
            shared.wait_out_pause();
            if shared.dead.load(Ordering::SeqCst) || to.write_all(&reply).is_err() {
                break 'outer;
            }
        }
    }
    let _ = from.shutdown(Shutdown::Both);
    let _ = to.shutdown(Shutdown::Both);
}

/// The first word of a RESP command (upper case), for printing schedules.
fn command_name(command: &[u8]) -> String {
    if command.first() == Some(&b'*') {
        // *N\r\n$L\r\nNAME\r\n
        let mut lines = command.split(|&b| b == b'\n');
        let _ = lines.next();
        let _ = lines.next();
        if let Some(name) = lines.next() {
            return String::from_utf8_lossy(name.strip_suffix(b"\r").unwrap_or(name))
                .to_uppercase();
        }
    }
    let line = command
        .split(|&b| b == b' ' || b == b'\r')
        .next()
        .unwrap_or(&[]);
    String::from_utf8_lossy(line).to_uppercase()
}

/// The index just past the line starting at `pos` (its `\r\n`), and the line's text.
fn line_at(buf: &[u8], pos: usize) -> Option<(usize, &[u8])> {
    let rest = buf.get(pos..)?;
    let nl = rest.iter().position(|&b| b == b'\n')?;
    let line = &rest[..nl];
    Some((pos + nl + 1, line.strip_suffix(b"\r").unwrap_or(line)))
}

/// The length of the one complete RESP (2 or 3) value at the start of `buf`, or `None` while
/// it is incomplete. A line that does not start with a type byte is an inline command.
pub(crate) fn value_len(buf: &[u8]) -> Option<usize> {
    value_end(buf, 0, 0)
}

fn value_end(buf: &[u8], pos: usize, depth: usize) -> Option<usize> {
    if depth > 64 {
        // Deeper than any reply a lock sends: take the rest as one value.
        return Some(buf.len());
    }
    let kind = *buf.get(pos)?;
    let (after, line) = line_at(buf, pos)?;
    let number = || -> i64 {
        std::str::from_utf8(&line[1..])
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or(-1)
    };
    match kind {
        b'+' | b'-' | b':' | b'_' | b',' | b'#' | b'(' => Some(after),
        b'$' | b'=' | b'!' => {
            let n = number();
            if n < 0 {
                return Some(after);
            }
            let end = after + usize::try_from(n).ok()? + 2;
            (buf.len() >= end).then_some(end)
        }
        b'*' | b'~' | b'>' | b'%' | b'|' => {
            let n = number();
            let n = if matches!(kind, b'%' | b'|') {
                n * 2
            } else {
                n
            };
            let mut at = after;
            for _ in 0..n.max(0) {
                at = value_end(buf, at, depth + 1)?;
            }
            if kind == b'|' {
                // An attribute precedes the value it annotates.
                at = value_end(buf, at, depth + 1)?;
            }
            Some(at)
        }
        _ => Some(after),
    }
}

#[cfg(test)]
mod tests {
    use super::{command_name, value_len};

    #[test]
    fn values_are_measured_once_complete() {
        let cmd = b"*2\r\n$4\r\nPING\r\n$2\r\nhi\r\n";
        assert_eq!(value_len(cmd), Some(cmd.len()));
        for cut in 0..cmd.len() {
            assert_eq!(value_len(&cmd[..cut]), None, "{cut}");
        }
        let two = [&cmd[..], &cmd[..]].concat();
        assert_eq!(value_len(&two), Some(cmd.len()));
        assert_eq!(command_name(cmd), "PING");
        assert_eq!(value_len(b"$-1\r\n"), Some(5));
        assert_eq!(value_len(b"*-1\r\n"), Some(5));
        assert_eq!(value_len(b"*2\r\n*1\r\n:1\r\n+OK\r\nrest"), Some(17));
        assert_eq!(value_len(b"%1\r\n+a\r\n:1\r\n"), Some(12));
        assert_eq!(value_len(b"PING\r\n"), Some(6));
    }
}
