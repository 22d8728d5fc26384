//! A loopback TCP proxy that can slow down, stall and cut the connections through it.

use std::collections::HashMap;
use std::io::{self, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::thread::JoinHandle;
use std::time::Duration;

/// How often a forwarding thread looks at the stop and stall flags while idle.
const TICK: Duration = Duration::from_millis(20);

/// Forwards connections from a free port on 127.0.0.1 to a target port on 127.0.0.1.
///
/// Tests point a client at [`url`](Self::url) and then inject faults: add latency to every
/// chunk forwarded ([`set_latency`](Self::set_latency)), stop forwarding while keeping the
/// connections open ([`stall`](Self::stall)), or cut every open connection
/// ([`drop_connections`](Self::drop_connections)). Each connection uses two threads; the
/// proxy stops accepting and closes everything when dropped.
///
/// ```no_run
/// use redis_lock::testing::{RedisServer, TcpProxy};
///
/// let server = RedisServer::start();
/// let proxy = TcpProxy::start(server.port()).unwrap();
/// let locks = redis_lock::LockClient::open(&proxy.url()).unwrap();
/// locks.ping().unwrap();
/// proxy.drop_connections(); // the next command on the pooled connection fails
/// ```
#[derive(Debug)]
pub struct TcpProxy {
    port: u16,
    shared: Arc<Shared>,
    acceptor: Option<JoinHandle<()>>,
}

#[derive(Debug)]
struct Shared {
    target: SocketAddr,
    latency_us: AtomicU64,
    stalled: AtomicBool,
    /// Replies (server-to-client chunks) still to be swallowed, each cutting its connection.
    cut_replies: AtomicUsize,
    stop: AtomicBool,
    accepted: AtomicUsize,
    next_id: AtomicU64,
    /// Both ends of every open connection, to cut them.
    open: Mutex<HashMap<u64, (TcpStream, TcpStream)>>,
}

impl Shared {
    fn open(&self) -> std::sync::MutexGuard<'_, HashMap<u64, (TcpStream, TcpStream)>> {
        self.open.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl TcpProxy {
    /// Starts a proxy to `127.0.0.1:<target_port>`.
    ///
    /// # Errors
    ///
    /// When no loopback port can be bound.
    pub fn start(target_port: u16) -> io::Result<TcpProxy> {
        let listener = TcpListener::bind("127.0.0.1:0")?;
        let port = listener.local_addr()?.port();
        let shared = Arc::new(Shared {
            target: SocketAddr::from(([127, 0, 0, 1], target_port)),
            latency_us: AtomicU64::new(0),
            stalled: AtomicBool::new(false),
            cut_replies: AtomicUsize::new(0),
            stop: AtomicBool::new(false),
            accepted: AtomicUsize::new(0),
            next_id: AtomicU64::new(0),
            open: Mutex::new(HashMap::new()),
        });
        let acceptor = {
            let shared = Arc::clone(&shared);
            std::thread::Builder::new()
                .name("test-proxy-accept".into())
                .spawn(move || accept_loop(&listener, &shared))?
        };
        Ok(TcpProxy {
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

    /// Delay added before each chunk is forwarded, in both directions.
    pub fn set_latency(&self, latency: Duration) {
        let us = u64::try_from(latency.as_micros()).unwrap_or(u64::MAX);
        self.shared.latency_us.store(us, Ordering::SeqCst);
    }

    /// While stalled, nothing is forwarded in either direction and new connections are
    /// accepted but not served; the bytes wait. Connections stay open.
    pub fn stall(&self, stalled: bool) {
        self.shared.stalled.store(stalled, Ordering::SeqCst);
    }

    /// Swallows the next `n` replies: a chunk coming back from the server is dropped and its
    /// connection cut, after the server has run the command. This is a reply lost in flight:
    /// the client cannot tell whether its command ran.
    pub fn cut_next_replies(&self, n: usize) {
        self.shared.cut_replies.store(n, Ordering::SeqCst);
    }

    /// Cuts every open connection (both sides see the socket shut down) and returns how many
    /// there were. New connections are still accepted.
    pub fn drop_connections(&self) -> usize {
        let open: Vec<_> = self.shared.open().drain().collect();
        for (_, (client, server)) in &open {
            let _ = client.shutdown(Shutdown::Both);
            let _ = server.shutdown(Shutdown::Both);
        }
        open.len()
    }

    /// Connections open through the proxy now.
    pub fn open_connections(&self) -> usize {
        self.shared.open().len()
    }

    /// Connections accepted since the proxy started.
    pub fn accepted(&self) -> usize {
        self.shared.accepted.load(Ordering::SeqCst)
    }
}

impl Drop for TcpProxy {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::SeqCst);
        // Wake the acceptor, which is blocked in `accept`.
        let _ = TcpStream::connect_timeout(&SocketAddr::from(([127, 0, 0, 1], self.port)), TICK);
        self.drop_connections();
        if let Some(t) = self.acceptor.take() {
            let _ = t.join();
        }
    }
}

fn accept_loop(listener: &TcpListener, shared: &Arc<Shared>) {
    for client in listener.incoming() {
        if shared.stop.load(Ordering::SeqCst) {
            return;
        }
        let Ok(client) = client else { continue };
        shared.accepted.fetch_add(1, Ordering::SeqCst);
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
        shared.open().insert(id, (c3, s3));
        let alive = Arc::new(AtomicUsize::new(2));
        for (from, to, replies) in [(client, s2, false), (server, c2, true)] {
            let pump_shared = Arc::clone(shared);
            let alive = Arc::clone(&alive);
            let spawned = std::thread::Builder::new()
                .name("test-proxy-pump".into())
                .spawn(move || {
                    pump(from, to, replies, &pump_shared);
                    if alive.fetch_sub(1, Ordering::SeqCst) == 1 {
                        pump_shared.open().remove(&id);
                    }
                });
            if spawned.is_err() {
                shared.open().remove(&id);
            }
        }
    }
}

/// Copies `from` to `to` until either side closes or the proxy stops; then shuts both down,
/// so a cut on one side reaches the other.
fn pump(mut from: TcpStream, mut to: TcpStream, replies: bool, shared: &Shared) {
    let _ = from.set_read_timeout(Some(TICK));
    let mut buf = [0u8; 16 * 1024];
    loop {
        if shared.stop.load(Ordering::SeqCst) {
            break;
        }
        if shared.stalled.load(Ordering::SeqCst) {
            std::thread::sleep(TICK);
            continue;
        }
        let n = match from.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                ) =>
            {
                continue;
            }
            Err(_) => break,
        };
        let latency = Duration::from_micros(shared.latency_us.load(Ordering::SeqCst));
        if !latency.is_zero() {
            std::thread::sleep(latency);
        }
        while shared.stalled.load(Ordering::SeqCst) && !shared.stop.load(Ordering::SeqCst) {
            std::thread::sleep(TICK);
        }
        if replies
            && shared
                .cut_replies
                .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
                .is_ok()
        {
            break;
        }
        if to.write_all(&buf[..n]).is_err() {
            break;
        }
    }
    let _ = from.shutdown(Shutdown::Both);
    let _ = to.shutdown(Shutdown::Both);
}
