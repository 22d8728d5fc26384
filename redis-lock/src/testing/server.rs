//! One throwaway `redis-server` process.

use std::io;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// How long a server may take to answer `PING` after it was started.
const READY_TIMEOUT: Duration = Duration::from_secs(10);

/// A `redis-server` process owned by the test; killed on drop.
#[derive(Debug)]
pub struct RedisServer {
    child: Option<Child>,
    dir: tempfile::TempDir,
    port: u16,
    args: Vec<String>,
    mode: Mode,
}

/// What kind of process a [`RedisServer`] runs: a plain server, a cluster node, or a sentinel.
#[derive(Debug, Clone)]
pub(crate) enum Mode {
    Plain,
    /// `--cluster-enabled yes` with an explicit cluster bus port (the default, port + 10000,
    /// can lie above 65535 for ports from the ephemeral range).
    ClusterNode {
        bus_port: u16,
    },
    /// `redis-server sentinel.conf --sentinel`, monitoring `master` at `master_port`.
    Sentinel {
        master: String,
        master_port: u16,
        quorum: u32,
        down_after: Duration,
    },
}

/// A free TCP port on 127.0.0.1 (bound, read, released; another process could take it in
/// between, which [`RedisServer`] handles by retrying on a new port).
pub fn free_port() -> io::Result<u16> {
    Ok(TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

/// The `redis-server` binary to run: `$REDIS_LOCK_SERVER_BIN`, or `redis-server` on `PATH`.
///
/// # Errors
///
/// `NotFound`, with a message that says how to install it, when neither exists.
pub fn server_binary() -> io::Result<PathBuf> {
    find_binary("REDIS_LOCK_SERVER_BIN", "redis-server")
}

pub(crate) fn find_binary(var: &str, name: &str) -> io::Result<PathBuf> {
    if let Some(bin) = std::env::var_os(var) {
        let bin = PathBuf::from(bin);
        if bin.is_file() {
            return Ok(bin);
        }
        return Err(io::Error::new(
            io::ErrorKind::NotFound,
            format!("${var} is set to {}, which is not a file", bin.display()),
        ));
    }
    std::env::var_os("PATH")
        .iter()
        .flat_map(std::env::split_paths)
        .map(|dir| dir.join(name))
        .find(|p| p.is_file())
        .ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::NotFound,
                format!(
                    "{name} not found on PATH: install it (Debian/Ubuntu: `sudo apt-get install redis-server`) or set ${var} to its path"
                ),
            )
        })
}

impl RedisServer {
    /// Starts a server with default settings.
    ///
    /// # Panics
    ///
    /// When `redis-server` cannot be found or does not come up (the message says why); use
    /// [`try_start`](Self::try_start) to handle that.
    pub fn start() -> RedisServer {
        Self::start_with(&[])
    }

    /// Starts a server with extra `redis-server` arguments (for example
    /// `["--requirepass", "secret"]`).
    ///
    /// # Panics
    ///
    /// As [`start`](Self::start).
    pub fn start_with(args: &[&str]) -> RedisServer {
        match Self::try_start_with(args) {
            Ok(s) => s,
            Err(e) => panic!("starting redis-server failed: {e}"),
        }
    }

    /// Starts a server with default settings.
    ///
    /// # Errors
    ///
    /// When `redis-server` cannot be found or does not answer within 10 s.
    pub fn try_start() -> io::Result<RedisServer> {
        Self::try_start_with(&[])
    }

    /// Starts a server with extra arguments.
    ///
    /// # Errors
    ///
    /// As [`try_start`](Self::try_start).
    pub fn try_start_with(args: &[&str]) -> io::Result<RedisServer> {
        Self::try_start_mode(Mode::Plain, args)
    }

    pub(crate) fn try_start_mode(mode: Mode, args: &[&str]) -> io::Result<RedisServer> {
        let mut server = RedisServer {
            child: None,
            dir: tempfile::Builder::new()
                .prefix("redis-lock-test")
                .tempdir()?,
            port: 0,
            args: args.iter().map(|s| (*s).to_owned()).collect(),
            mode,
        };
        // The port can be taken between `free_port` and the bind of redis-server.
        let mut last = None;
        for _ in 0..5 {
            server.port = free_port()?;
            if let Mode::ClusterNode { bus_port } = &mut server.mode {
                *bus_port = free_port()?;
            }
            match server.spawn() {
                Ok(()) => return Ok(server),
                Err(e) => last = Some(e),
            }
        }
        Err(last.unwrap_or_else(|| io::Error::other("redis-server did not start")))
    }

    fn spawn(&mut self) -> io::Result<()> {
        let bin = server_binary()?;
        let port = self.port.to_string();
        let mut cmd = Command::new(bin);
        match &self.mode {
            Mode::Plain => {}
            Mode::ClusterNode { bus_port } => {
                cmd.args([
                    "--cluster-enabled",
                    "yes",
                    "--cluster-config-file",
                    "nodes.conf",
                ])
                .args(["--cluster-port", &bus_port.to_string()]);
            }
            Mode::Sentinel {
                master,
                master_port,
                quorum,
                down_after,
            } => {
                // Sentinel rewrites its config file, so it must be a file of its own.
                let conf = self.dir.path().join("sentinel.conf");
                let down_ms = down_after.as_millis();
                std::fs::write(
                    &conf,
                    format!(
                        "sentinel monitor {master} 127.0.0.1 {master_port} {quorum}\n\
                         sentinel down-after-milliseconds {master} {down_ms}\n\
                         sentinel failover-timeout {master} {}\n\
                         sentinel parallel-syncs {master} 1\n",
                        down_ms * 5
                    ),
                )?;
                cmd.arg(conf).arg("--sentinel");
            }
        }
        let child = cmd
            .args([
                "--port",
                &port,
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--appendonly",
                "no",
            ])
            .arg("--dir")
            .arg(self.dir.path())
            .arg("--logfile")
            .arg(self.log_path())
            .args(&self.args)
            .current_dir(self.dir.path())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()?;
        self.child = Some(child);
        self.wait_ready()
    }

    fn wait_ready(&mut self) -> io::Result<()> {
        let client = self.client();
        let start = Instant::now();
        while start.elapsed() < READY_TIMEOUT {
            if let Some(child) = self.child.as_mut()
                && let Some(status) = child.try_wait()?
            {
                self.child = None;
                return Err(io::Error::other(format!(
                    "redis-server exited with {status}; log:\n{}",
                    self.log()
                )));
            }
            let ready = client
                .get_connection_with_timeout(Duration::from_millis(200))
                .and_then(|mut c| redis::cmd("PING").query::<String>(&mut c));
            match ready {
                Ok(_) => return self.ours(),
                // Still replaying its append-only file: not ready for the test yet.
                Err(e) if e.code() == Some("LOADING") => {}
                // A server reply (NOAUTH with --requirepass, for example) means it is up.
                Err(e) if !(e.is_io_error() || e.is_connection_refusal() || e.is_timeout()) => {
                    return Ok(());
                }
                Err(_) => {}
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        self.kill();
        Err(io::Error::new(
            io::ErrorKind::TimedOut,
            format!(
                "redis-server did not answer PING within {READY_TIMEOUT:?}; log:\n{}",
                self.log()
            ),
        ))
    }

    /// Whether the server that answered on the port is the process this spawned: another
    /// process's server can take the port between `free_port` and the bind (two test suites
    /// at once), and ours then exits while theirs answers. Not ours: an error, so that the
    /// caller starts again on another port, and our process is stopped.
    fn ours(&mut self) -> io::Result<()> {
        let Some(pid) = self.pid() else {
            return Ok(());
        };
        let info = self
            .client()
            .get_connection_with_timeout(Duration::from_secs(2))
            .and_then(|mut c| redis::cmd("INFO").arg("server").query::<String>(&mut c));
        let answered = info.ok().and_then(|info| {
            info.lines()
                .find_map(|l| l.strip_prefix("process_id:"))
                .and_then(|p| p.trim().parse::<u32>().ok())
        });
        match answered {
            Some(other) if other != pid => {
                self.kill();
                Err(io::Error::new(
                    io::ErrorKind::AddrInUse,
                    format!(
                        "port {} answered by another server (pid {other})",
                        self.port
                    ),
                ))
            }
            // Ours, or a server that does not say (a password set): as before.
            _ => Ok(()),
        }
    }

    /// The port the server listens on (127.0.0.1).
    pub fn port(&self) -> u16 {
        self.port
    }

    /// `redis://127.0.0.1:<port>/`.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/", self.port)
    }

    /// A plain `redis` client for this server, to look at keys directly.
    pub fn client(&self) -> redis::Client {
        redis::Client::open(self.url()).expect("a loopback URL always parses")
    }

    /// A plain connection to this server.
    ///
    /// # Panics
    ///
    /// When the server is not running.
    pub fn connection(&self) -> redis::Connection {
        self.client()
            .get_connection_with_timeout(Duration::from_secs(2))
            .expect("connecting to the test redis-server")
    }

    /// Process id of the running server, if it runs.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// The server's working directory.
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    fn log_path(&self) -> PathBuf {
        self.dir.path().join("redis.log")
    }

    /// The server's log file so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.log_path()).unwrap_or_default()
    }

    /// Kills the server with `SIGKILL` and waits for it to exit. Its data is gone (no
    /// persistence).
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            self.signal_child(&child, libc::SIGCONT);
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Stops the server with `SIGSTOP`: connections stay open but nothing is answered.
    pub fn pause(&self) {
        if let Some(child) = &self.child {
            self.signal_child(child, libc::SIGSTOP);
        }
    }

    /// Resumes a paused server with `SIGCONT`.
    pub fn resume(&self) {
        if let Some(child) = &self.child {
            self.signal_child(child, libc::SIGCONT);
        }
    }

    /// Kills the server (if it runs) and starts a new one on the same port, with an empty
    /// data set.
    ///
    /// # Panics
    ///
    /// When the new server does not come up.
    pub fn restart(&mut self) {
        self.kill();
        if let Err(e) = self.spawn() {
            panic!("restarting redis-server on port {} failed: {e}", self.port);
        }
    }

    fn signal_child(&self, child: &Child, signal: libc::c_int) {
        if let Ok(pid) = libc::pid_t::try_from(child.id()) {
            // SAFETY: `kill` has no memory-safety preconditions; the pid is our own child,
            // which has not been reaped (we hold its `Child`), so it cannot be a recycled pid.
            unsafe {
                libc::kill(pid, signal);
            }
        }
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        self.kill();
    }
}
