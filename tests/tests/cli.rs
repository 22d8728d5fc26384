//! The `redis-lock` command-line tool, run as a real process against real redis-server
//! processes: mutual exclusion of `run`, busy handling, exit codes, signal forwarding, crash
//! and loss behaviour, `status` / `list` / `release --force`, and the error cases.
//!
//! The binary lives in the `redis-lock-sync` package behind the `cli` feature, so cargo does not
//! build it for this package's tests; the first test that needs it runs
//! `cargo build -p redis-lock-sync --features cli --bin redis-lock` (a no-op when it is up to
//! date) and takes the executable's path from cargo's JSON messages. Set
//! `REDIS_LOCK_TOOL_BIN` to test another build instead.

use std::ffi::OsStr;
use std::io::Read;
use std::os::fd::{FromRawFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use redis_lock::testing::TlsRedisServer;
use redis_lock::{LockClient, ReleaseOutcome};
use redis_lock_tests::{RedisServer, client, free_port, pttl, signal, wait_until};
use serde_json::Value;

/// Exit codes documented in `redis-lock --help`.
const USAGE: i32 = 64;
const UNAVAILABLE: i32 = 69;
const BUSY: i32 = 75;
const LOST: i32 = 124;
const CANNOT_EXECUTE: i32 = 126;
const NOT_FOUND: i32 = 127;

const SIGNAL_COUNTER: &str = env!("CARGO_BIN_EXE_signal-counter");

/// Upper bound for anything that should be quick; generous for a loaded machine.
const QUICK: Duration = Duration::from_secs(20);

// ---------------------------------------------------------------------------------------
// Support

fn cli_binary() -> &'static Path {
    static BIN: OnceLock<PathBuf> = OnceLock::new();
    BIN.get_or_init(|| {
        if let Some(bin) = std::env::var_os("REDIS_LOCK_TOOL_BIN") {
            return PathBuf::from(bin);
        }
        let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
        let manifest = Path::new(env!("CARGO_MANIFEST_DIR")).join("../redis-lock/Cargo.toml");
        let mut build = Command::new(cargo);
        build
            .arg("build")
            .arg("--manifest-path")
            .arg(&manifest)
            .args(["--features", "cli", "--bin", "redis-lock"])
            .args(["--message-format", "json-render-diagnostics"]);
        if !cfg!(debug_assertions) {
            build.arg("--release");
        }
        // Cargo gives this test process variables about the package under test. Build scripts
        // that watch one of them (ring watches CARGO_MANIFEST_DIR) would rerun whenever the
        // binary is built from elsewhere, recompiling half the tree each time.
        for (name, _) in std::env::vars_os() {
            let name = name.to_string_lossy();
            if name.starts_with("CARGO_PKG_")
                || name.starts_with("CARGO_BIN_EXE_")
                || [
                    "CARGO_MANIFEST_DIR",
                    "CARGO_MANIFEST_PATH",
                    "CARGO_CRATE_NAME",
                    "CARGO_BIN_NAME",
                    "CARGO_PRIMARY_PACKAGE",
                    "CARGO_TARGET_TMPDIR",
                    "CARGO_RUSTC_CURRENT_DIR",
                    "OUT_DIR",
                ]
                .contains(&name.as_ref())
            {
                build.env_remove(name.as_ref());
            }
        }
        let out = build.stderr(Stdio::inherit()).output().unwrap();
        assert!(
            out.status.success(),
            "building the redis-lock binary failed"
        );
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .filter_map(|line| serde_json::from_str::<Value>(line).ok())
            .filter(|msg| msg["reason"] == "compiler-artifact")
            .find(|msg| msg["target"]["name"] == "redis-lock")
            .and_then(|msg| msg["executable"].as_str().map(PathBuf::from))
            .expect("cargo did not report the redis-lock executable")
    })
}

/// `redis-lock` against `server`, with no namespace from the environment.
fn tool(server: &RedisServer) -> Command {
    tool_for(&server.url())
}

fn tool_for(url: &str) -> Command {
    let mut cmd = Command::new(cli_binary());
    cmd.env("REDIS_URL", url)
        .env_remove("REDIS_LOCK_NAMESPACE")
        .env_remove("REDIS_LOCK_CONNECT_TIMEOUT")
        .stdin(Stdio::null());
    cmd
}

/// A running `redis-lock` whose stdout and stderr are collected as they come.
struct Running {
    child: Child,
    stdout: Arc<Mutex<String>>,
    stderr: Arc<Mutex<String>>,
    readers: Vec<std::thread::JoinHandle<()>>,
}

/// What a finished `redis-lock` said.
#[derive(Debug)]
struct Finished {
    code: i32,
    stdout: String,
    stderr: String,
}

fn collect(
    stream: impl Read + Send + 'static,
    into: Arc<Mutex<String>>,
) -> std::thread::JoinHandle<()> {
    std::thread::spawn(move || {
        let mut stream = stream;
        let mut buf = [0u8; 4096];
        while let Ok(n) = stream.read(&mut buf) {
            if n == 0 {
                break;
            }
            into.lock()
                .unwrap()
                .push_str(&String::from_utf8_lossy(&buf[..n]));
        }
    })
}

impl Running {
    fn start(cmd: &mut Command) -> Running {
        let mut child = cmd
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let stdout = Arc::new(Mutex::new(String::new()));
        let stderr = Arc::new(Mutex::new(String::new()));
        let readers = vec![
            collect(child.stdout.take().unwrap(), Arc::clone(&stdout)),
            collect(child.stderr.take().unwrap(), Arc::clone(&stderr)),
        ];
        Running {
            child,
            stdout,
            stderr,
            readers,
        }
    }

    fn stderr(&self) -> String {
        self.stderr.lock().unwrap().clone()
    }

    /// Waits for the exit, at most `limit` (then kills it and fails the test).
    fn finish(mut self, limit: Duration) -> Finished {
        let start = Instant::now();
        let status = loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                break status;
            }
            if start.elapsed() > limit {
                let _ = self.child.kill();
                let _ = self.child.wait();
                panic!(
                    "redis-lock did not exit within {limit:?}; stderr so far:\n{}",
                    self.stderr()
                );
            }
            std::thread::sleep(Duration::from_millis(5));
        };
        // A process the command left behind may keep the pipes open: do not wait for it.
        wait_until(Duration::from_secs(5), || {
            self.readers.iter().all(|r| r.is_finished())
        });
        use std::os::unix::process::ExitStatusExt;
        Finished {
            code: status
                .code()
                .unwrap_or_else(|| 128 + status.signal().unwrap()),
            stdout: self.stdout.lock().unwrap().clone(),
            stderr: self.stderr(),
        }
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn finish(cmd: &mut Command) -> Finished {
    Running::start(cmd).finish(QUICK)
}

/// `sh -c SCRIPT` as the command after `--`.
fn sh(script: &str) -> [&str; 3] {
    ["sh", "-c", script]
}

/// The pid a command wrote to `path`, once it is all there: the shell creates the file
/// before it writes the number, so a file that exists may still be empty.
fn pid_in(path: &Path) -> Option<libc::pid_t> {
    std::fs::read_to_string(path).ok()?.trim().parse().ok()
}

fn held(locks: &LockClient, key: &str) -> bool {
    locks.inspect(key).unwrap().is_some()
}

fn json(text: &str) -> Value {
    serde_json::from_str(text.trim()).unwrap_or_else(|e| panic!("not JSON ({e}): {text}"))
}

fn one_line(text: &str) {
    assert_eq!(text.trim_end().lines().count(), 1, "not one line: {text:?}");
}

fn path_arg(p: &Path) -> &str {
    p.to_str().unwrap()
}

/// Kills a process the test left behind (the orphaned command of a killed redis-lock).
fn kill_pid_in(file: &Path) {
    if let Ok(text) = std::fs::read_to_string(file)
        && let Ok(pid) = text.trim().parse::<libc::pid_t>()
    {
        // SAFETY: no memory-safety preconditions; a stale pid at worst gets ESRCH.
        unsafe {
            libc::kill(pid, libc::SIGKILL);
        }
    }
}

fn alive(pid: libc::pid_t) -> bool {
    // SAFETY: signal 0 only checks that the process exists.
    unsafe { libc::kill(pid, 0) == 0 }
}

// ---------------------------------------------------------------------------------------
// run: mutual exclusion, busy handling, exit codes, environment

#[test]
fn concurrent_runs_never_interleave() {
    let server = RedisServer::start();
    let log = server.dir().join("appends.log");
    let script = format!(
        "echo \"start $$\" >> {f}; sleep 0.2; echo \"end $$\" >> {f}",
        f = path_arg(&log)
    );
    let workers: Vec<_> = (0..2)
        .map(|_| {
            let url = server.url();
            let script = script.clone();
            std::thread::spawn(move || {
                for _ in 0..3 {
                    let done = finish(
                        tool_for(&url)
                            .args(["run", "appender", "--"])
                            .args(sh(&script)),
                    );
                    assert_eq!(done.code, 0, "{done:?}");
                }
            })
        })
        .collect();
    for w in workers {
        w.join().unwrap();
    }
    let text = std::fs::read_to_string(&log).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 12, "{text}");
    for pair in lines.chunks(2) {
        let start = pair[0].strip_prefix("start ").expect(&text);
        let end = pair[1].strip_prefix("end ").expect(&text);
        assert_eq!(start, end, "interleaved:\n{text}");
    }
}

#[test]
fn no_wait_skip_exits_at_once_without_running_the_command() {
    let server = RedisServer::start();
    let locks = client(&server);
    let _held = locks.lock("nightly").unwrap();
    let marker = server.dir().join("ran");
    let started = Instant::now();
    let done = finish(
        tool(&server)
            .args(["run", "nightly", "--no-wait", "--on-busy", "skip", "--"])
            .args(["touch", path_arg(&marker)]),
    );
    assert_eq!(done.code, 0, "{done:?}");
    // Not a terminal: a skip is silent, as cron wants it.
    assert_eq!(done.stderr, "");
    assert!(!marker.exists());
    // The holder keeps the lock for its 30 s TTL and beyond: no waiting happened.
    assert!(started.elapsed() < QUICK, "took {:?}", started.elapsed());
}

#[test]
fn no_wait_fail_exits_with_the_busy_code_and_names_the_holder() {
    let server = RedisServer::start();
    let locks = client(&server);
    let _held = locks.lock("nightly").unwrap();
    let marker = server.dir().join("ran");
    let done = finish(
        tool(&server)
            .args(["run", "nightly", "--no-wait", "--on-busy", "fail", "--"])
            .args(["touch", path_arg(&marker)]),
    );
    assert_eq!(done.code, BUSY, "{done:?}");
    one_line(&done.stderr);
    assert!(done.stderr.contains("busy"), "{}", done.stderr);
    assert!(
        done.stderr.contains(&format!("pid {}", std::process::id())),
        "{}",
        done.stderr
    );
    assert!(!marker.exists());

    // --busy-exit-code N, like flock -E; fail is the default.
    let done = finish(
        tool(&server)
            .args(["run", "nightly", "--no-wait", "--busy-exit-code", "9", "--"])
            .args(["touch", path_arg(&marker)]),
    );
    assert_eq!(done.code, 9, "{done:?}");
    assert!(!marker.exists());
}

/// flock's short options: `-n` (no wait), `-w SECONDS`, `-E CODE`, `-c 'shell text'`.
#[test]
fn flock_style_short_options() {
    let server = RedisServer::start();
    let locks = client(&server);
    let held = locks.lock("short").unwrap();
    let marker = server.dir().join("short-ran");
    let done = finish(tool(&server).args([
        "run",
        "short",
        "-n",
        "-E",
        "42",
        "-c",
        &format!("touch {}", path_arg(&marker)),
    ]));
    assert_eq!(done.code, 42, "{done:?}");
    assert!(!marker.exists());
    let started = Instant::now();
    let done = finish(tool(&server).args(["run", "short", "-w", "300ms", "-E", "7", "-c", "true"]));
    assert_eq!(done.code, 7, "{done:?}");
    assert!(started.elapsed() >= Duration::from_millis(300));
    drop(held);
    let done = finish(tool(&server).args([
        "run",
        "short",
        "-n",
        "-c",
        &format!("echo $REDIS_LOCK_KEY > {}", path_arg(&marker)),
    ]));
    assert_eq!(done.code, 0, "{done:?}");
    assert_eq!(std::fs::read_to_string(&marker).unwrap().trim(), "short");
}

#[test]
fn wait_gives_up_after_its_budget() {
    let server = RedisServer::start();
    let locks = client(&server);
    let _held = locks.lock("report").unwrap();
    let started = Instant::now();
    let done = finish(tool(&server).args(["run", "report", "--wait", "600ms", "--", "true"]));
    let took = started.elapsed();
    assert_eq!(done.code, BUSY, "{done:?}");
    assert!(
        done.stderr.contains("after waiting 600ms"),
        "{}",
        done.stderr
    );
    assert!(took >= Duration::from_millis(600), "gave up after {took:?}");
    // Not a terminal: no live status line, just the one error line.
    one_line(&done.stderr);
    assert!(!done.stderr.contains("waiting 0") && !done.stderr.contains('\r'));
}

#[test]
fn a_waiting_run_starts_when_the_holder_releases() {
    let server = RedisServer::start();
    let locks = client(&server);
    let guard = locks.lock("report").unwrap();
    let marker = server.dir().join("ran");
    let waiting = Running::start(
        tool(&server)
            .args(["run", "report", "--"])
            .args(["touch", path_arg(&marker)]),
    );
    // The tool blocks on the lock's wake-up list while it waits.
    let mut redis = server.connection();
    assert!(wait_until(QUICK, || {
        let clients: String = redis::cmd("CLIENT").arg("LIST").query(&mut redis).unwrap();
        clients.contains("cmd=blpop")
    }));
    assert!(!marker.exists());
    assert_eq!(guard.release().unwrap(), ReleaseOutcome::Released);
    let done = waiting.finish(QUICK);
    assert_eq!(done.code, 0, "{done:?}");
    assert!(marker.exists());
    assert!(!held(&locks, "report"));
}

#[test]
fn exit_codes_pass_through() {
    let server = RedisServer::start();
    let locks = client(&server);
    for (script, code) in [
        ("exit 0", 0),
        ("exit 7", 7),
        ("exit 255", 255),
        ("kill -KILL $$", 128 + 9),
    ] {
        let done = finish(tool(&server).args(["run", "job", "--"]).args(sh(script)));
        assert_eq!(done.code, code, "{script}: {done:?}");
        assert!(!held(&locks, "job"), "{script}: lock left behind");
    }
}

#[test]
fn the_command_sees_the_lock_in_its_environment() {
    let server = RedisServer::start();
    let locks = client(&server);
    let earlier = locks.lock("env-job").unwrap();
    let earlier_token = earlier.fencing_token();
    drop(earlier);
    let done = finish(
        tool(&server)
            .args(["run", "env-job", "--ttl", "5s", "--"])
            .args(sh("echo \"$REDIS_LOCK_KEY|$REDIS_LOCK_NAMESPACE|$REDIS_LOCK_FENCING_TOKEN|$REDIS_LOCK_TTL_MS\"")),
    );
    assert_eq!(done.code, 0, "{done:?}");
    let fields: Vec<&str> = done.stdout.trim().split('|').collect();
    assert_eq!(fields[..2], ["env-job", "lock:"]);
    let token: u64 = fields[2].parse().unwrap();
    assert!(token > earlier_token, "{token} after {earlier_token}");
    assert_eq!(fields[3], "5000");
}

#[test]
fn metadata_and_minimum_hold_show_in_status() {
    let server = RedisServer::start();
    let locks = client(&server);
    let done = finish(
        tool(&server)
            .args([
                "run",
                "weekly",
                "--hold-at-least",
                "3s",
                "--metadata",
                "weekly report",
            ])
            .args(["--", "true"]),
    );
    assert_eq!(done.code, 0, "{done:?}");
    // The command is done, but the lock stays taken (by nobody) for the minimum hold.
    let status = finish(tool(&server).args(["status", "weekly", "--json"]));
    assert_eq!(status.code, 0, "{status:?}");
    let v = json(&status.stdout);
    assert_eq!(v["metadata"], "weekly report");
    assert_eq!(v["has_owner"], false);
    assert!(v["hold_until"].is_string(), "{v}");
    assert!(wait_until(QUICK, || !held(&locks, "weekly")));
}

#[test]
fn cooldown_keeps_the_next_run_out_and_shows_in_status() {
    let server = RedisServer::start();
    let locks = client(&server);
    // Before the run: its release, where the cool-down starts, comes after this. (`ended`
    // below comes after it too, by as much as a loaded machine takes to reap the process.)
    let launched = Instant::now();
    let done = finish(
        tool(&server)
            .args(["run", "rebuild", "--cooldown", "1500ms"])
            .args(["--", "true"]),
    );
    assert_eq!(done.code, 0, "{done:?}");
    let ended = Instant::now();
    // The next run, without waiting, finds the lock taken (by nobody) and is skipped.
    let next = finish(
        tool(&server)
            .args(["run", "rebuild", "--wait", "0s", "--on-busy", "skip"])
            .args(["--", "false"]),
    );
    assert_eq!(next.code, 0, "skipped, so `false` did not run: {next:?}");
    assert!(
        ended.elapsed() < Duration::from_millis(1500),
        "checked within the cool-down"
    );
    let status = finish(tool(&server).args(["status", "rebuild", "--json"]));
    let v = json(&status.stdout);
    assert_eq!(v["has_owner"], false, "{v}");
    assert!(v["cooling_until"].is_string(), "{v}");
    let text = finish(tool(&server).args(["status", "rebuild"]));
    assert!(text.stdout.contains("cooling down"), "{text:?}");
    // A waiting run starts once the cool-down is over.
    let waited = finish(tool(&server).args(["run", "rebuild", "--wait", "5s", "--", "true"]));
    assert_eq!(waited.code, 0, "{waited:?}");
    assert!(launched.elapsed() >= Duration::from_millis(1500));
    assert!(
        !held(&locks, "rebuild"),
        "released at once: no cool-down asked this time"
    );
}

// ---------------------------------------------------------------------------------------
// run: signals, crashes, lost locks

#[test]
fn signals_reach_the_command_and_the_lock_is_released_after_it_exits() {
    let server = RedisServer::start();
    let locks = client(&server);
    for (signo, name, code) in [
        (libc::SIGTERM, "TERM", 7),
        (libc::SIGINT, "INT", 8),
        (libc::SIGHUP, "HUP", 9),
    ] {
        let ready = server.dir().join(format!("ready-{name}"));
        let got = server.dir().join(format!("got-{name}"));
        let script = format!(
            "trap 'echo {name} > {got}; exit {code}' {name}; echo ready > {ready}; while :; do sleep 0.05; done",
            got = path_arg(&got),
            ready = path_arg(&ready),
        );
        let running = Running::start(
            tool(&server)
                .args(["run", "signalled", "--"])
                .args(sh(&script)),
        );
        assert!(
            wait_until(QUICK, || ready.exists()),
            "{name}: command did not start"
        );
        assert!(held(&locks, "signalled"));
        signal(&running.child, signo);
        let done = running.finish(QUICK);
        assert_eq!(done.code, code, "{name}: {done:?}");
        assert_eq!(std::fs::read_to_string(&got).unwrap().trim(), name);
        assert!(!held(&locks, "signalled"), "{name}: lock not released");
    }
}

#[test]
fn a_signal_while_waiting_ends_the_wait() {
    let server = RedisServer::start();
    let locks = client(&server);
    let _held = locks.lock("busy").unwrap();
    let marker = server.dir().join("ran");
    let waiting = Running::start(
        tool(&server)
            .args(["run", "busy", "--"])
            .args(["touch", path_arg(&marker)]),
    );
    let mut redis = server.connection();
    assert!(wait_until(QUICK, || {
        let clients: String = redis::cmd("CLIENT").arg("LIST").query(&mut redis).unwrap();
        clients.contains("cmd=blpop")
    }));
    signal(&waiting.child, libc::SIGTERM);
    let done = waiting.finish(QUICK);
    assert_eq!(done.code, 128 + libc::SIGTERM, "{done:?}");
    assert!(!marker.exists());
}

#[test]
fn ctrl_c_at_the_terminal_reaches_the_command_once() {
    let server = RedisServer::start();
    let locks = client(&server);
    let dir = server.dir();
    let (mut master, slave) = pty();
    let mut cmd = tool(&server);
    cmd.args(["run", "interactive", "--", SIGNAL_COUNTER])
        .arg(dir)
        .stdin(Stdio::from(slave));
    // SAFETY: setsid and ioctl are async-signal-safe. The tool becomes a session leader with
    // the pty (its stdin) as controlling terminal, so the pty's ^C goes to its process group:
    // redis-lock and the command, as in an interactive shell.
    unsafe {
        use std::os::unix::process::CommandExt;
        cmd.pre_exec(|| {
            if libc::setsid() < 0 || libc::ioctl(0, libc::TIOCSCTTY, 0) < 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let running = Running::start(&mut cmd);
    assert!(wait_until(QUICK, || dir.join("ready").exists()
        && held(&locks, "interactive")));
    // ^C typed at the terminal: the kernel signals the whole foreground process group.
    std::io::Write::write_all(&mut master, b"\x03").unwrap();
    assert!(
        wait_until(QUICK, || dir.join("ints").exists()),
        "the command got no SIGINT"
    );
    // A SIGTERM from a process is forwarded. Had the tool forwarded the terminal's SIGINT as
    // well, it would have sent it before this SIGTERM, and the command would count two.
    signal(&running.child, libc::SIGTERM);
    let done = running.finish(QUICK);
    assert_eq!(done.code, 4, "{done:?}");
    assert_eq!(done.stdout.trim(), "1", "SIGINTs the command received");
    assert!(!held(&locks, "interactive"));
    drop(master);
}

#[test]
fn sigkill_of_the_tool_frees_the_lock_within_its_ttl() {
    let server = RedisServer::start();
    let locks = client(&server);
    let pid_file = server.dir().join("command.pid");
    let script = format!("echo $$ > {}; exec sleep 60", path_arg(&pid_file));
    let mut running = Running::start(
        tool(&server)
            .args(["run", "crashy", "--ttl", "2s", "--"])
            .args(sh(&script)),
    );
    assert!(wait_until(QUICK, || pid_file.exists() && held(&locks, "crashy")));
    signal(&running.child, libc::SIGKILL);
    running.child.wait().unwrap();
    let killed = Instant::now();
    let left = locks
        .inspect("crashy")
        .unwrap()
        .and_then(|i| i.remaining_ttl);
    assert!(
        left.is_some_and(|l| l <= Duration::from_secs(2)),
        "{left:?}"
    );
    // Nobody renews it any more: it expires within its 2 s TTL (plus slack for a busy box).
    assert!(wait_until(
        Duration::from_secs(2) + Duration::from_secs(3),
        || { !held(&locks, "crashy") }
    ));
    assert!(killed.elapsed() < Duration::from_secs(5));
    kill_pid_in(&pid_file);
}

/// Whether `pid` is gone: no such process, or a zombie nobody has reaped yet (an orphan's new
/// parent reaps it when it gets to it).
fn gone(pid: libc::pid_t) -> bool {
    if !alive(pid) {
        return true;
    }
    std::fs::read_to_string(format!("/proc/{pid}/stat")).map_or(true, |stat| {
        // `pid (comm) state ...`: the state follows the last `)`.
        stat.rsplit_once(')')
            .is_some_and(|(_, rest)| matches!(rest.trim_start().chars().next(), Some('Z' | 'X')))
    })
}

/// A SIGKILLed redis-lock takes its command with it at once (the kernel's parent-death
/// signal), where the command used to run on, without the lock, until it ended by itself.
#[test]
fn sigkill_of_the_tool_kills_its_command_at_once() {
    let server = RedisServer::start();
    let locks = client(&server);
    let dir = tempfile::tempdir().unwrap();
    let pid_file = dir.path().join("command.pid");
    let script = format!("echo $$ > {}; exec sleep 60", path_arg(&pid_file));
    let mut running = Running::start(
        tool(&server)
            .args(["run", "orphan", "--ttl", "30s", "--"])
            .args(sh(&script)),
    );
    let mut pid = None;
    assert!(wait_until(QUICK, || {
        pid = std::fs::read_to_string(&pid_file)
            .ok()
            .and_then(|text| text.trim().parse::<libc::pid_t>().ok());
        pid.is_some() && held(&locks, "orphan")
    }));
    let pid = pid.unwrap();
    assert!(alive(pid));
    signal(&running.child, libc::SIGKILL);
    running.child.wait().unwrap();
    let killed = Instant::now();
    let went = wait_until(Duration::from_secs(1), || gone(pid));
    let took = killed.elapsed();
    kill_pid_in(&pid_file);
    assert!(
        went,
        "the command outlived its killed redis-lock by {took:?}"
    );
}

#[test]
fn kill_on_loss_terminates_the_command_with_the_documented_code() {
    let server = RedisServer::start();
    let locks = client(&server);
    let pid_file = server.dir().join("command.pid");
    let script = format!("echo $$ > {}; exec sleep 60", path_arg(&pid_file));
    let running = Running::start(
        tool(&server)
            .args(["run", "guarded", "--ttl", "1s", "--kill-on-loss", "--"])
            .args(sh(&script)),
    );
    assert!(wait_until(QUICK, || pid_in(&pid_file).is_some()
        && held(&locks, "guarded")));
    let pid = pid_in(&pid_file).unwrap();
    // Behind its back: an operator breaks the lock.
    assert!(locks.force_release("guarded").unwrap().is_some());
    let done = running.finish(QUICK);
    assert_eq!(done.code, LOST, "{done:?}");
    assert!(done.stderr.contains("was lost"), "{}", done.stderr);
    assert!(done.stderr.contains("SIGTERM"), "{}", done.stderr);
    assert!(!alive(pid), "the command still runs");
}

/// With the default 30 s TTL (first renewal 10 s away), a lock broken behind the tool's back
/// stops its command within a second: the server announces the change (loss notification).
#[test]
fn kill_on_loss_stops_the_command_at_once_when_the_lock_is_broken() {
    let server = RedisServer::start();
    let locks = client(&server);
    let pid_file = server.dir().join("command.pid");
    let script = format!("echo $$ > {}; exec sleep 60", path_arg(&pid_file));
    let running = Running::start(
        tool(&server)
            .args(["run", "guarded", "--kill-on-loss", "--"])
            .args(sh(&script)),
    );
    assert!(wait_until(QUICK, || pid_in(&pid_file).is_some()
        && held(&locks, "guarded")));
    let pid = pid_in(&pid_file).unwrap();
    // Held long enough to be watched.
    std::thread::sleep(Duration::from_millis(200));
    let broken = std::time::Instant::now();
    assert!(locks.force_release("guarded").unwrap().is_some());
    assert!(
        wait_until(Duration::from_secs(2), || !alive(pid)),
        "the command still runs {:?} after its lock was broken",
        broken.elapsed()
    );
    let took = broken.elapsed();
    let done = running.finish(QUICK);
    assert_eq!(done.code, LOST, "{done:?}");
    assert!(took < Duration::from_secs(2), "{took:?}");
}

#[test]
fn kill_on_loss_escalates_to_sigkill_after_the_grace_period() {
    let server = RedisServer::start();
    let locks = client(&server);
    let pid_file = server.dir().join("command.pid");
    // The shell ignores SIGTERM; only SIGKILL stops it.
    let script = format!(
        "trap '' TERM; echo $$ > {}; while :; do sleep 0.05; done",
        path_arg(&pid_file)
    );
    let running = Running::start(
        tool(&server)
            .args([
                "run",
                "stubborn",
                "--ttl",
                "1s",
                "--kill-on-loss",
                "--kill-grace",
                "500ms",
            ])
            .arg("--")
            .args(sh(&script)),
    );
    assert!(wait_until(QUICK, || pid_in(&pid_file).is_some()
        && held(&locks, "stubborn")));
    let pid = pid_in(&pid_file).unwrap();
    let mut redis = server.connection();
    let deleted: i64 = redis::cmd("DEL")
        .arg("lock:{stubborn}")
        .query(&mut redis)
        .unwrap();
    assert_eq!(deleted, 1);
    let done = running.finish(QUICK);
    assert_eq!(done.code, LOST, "{done:?}");
    assert!(done.stderr.contains("SIGKILL"), "{}", done.stderr);
    assert!(!alive(pid), "the command still runs");
}

#[test]
fn a_lost_lock_without_kill_on_loss_warns_and_keeps_the_command() {
    let server = RedisServer::start();
    let locks = client(&server);
    let ready = server.dir().join("ready");
    let stop = server.dir().join("stop");
    let script = format!(
        "echo ready > {}; while [ ! -e {} ]; do sleep 0.05; done; exit 5",
        path_arg(&ready),
        path_arg(&stop)
    );
    let running = Running::start(
        tool(&server)
            .args(["run", "soft", "--ttl", "1s", "--"])
            .args(sh(&script)),
    );
    assert!(wait_until(QUICK, || ready.exists() && held(&locks, "soft")));
    assert!(locks.force_release("soft").unwrap().is_some());
    assert!(
        wait_until(QUICK, || running.stderr().contains("was lost")),
        "no warning: {}",
        running.stderr()
    );
    std::fs::write(&stop, "").unwrap();
    let done = running.finish(QUICK);
    assert_eq!(done.code, 5, "{done:?}");
    assert!(done.stderr.contains("keeps running"), "{}", done.stderr);
}

#[test]
fn rediss_urls_work() {
    let tls = TlsRedisServer::start();
    let locks = client(tls.server());
    let done = finish(
        tool_for(&tls.insecure_url())
            .args(["run", "over-tls", "--"])
            .args(sh("echo \"$REDIS_LOCK_FENCING_TOKEN\"")),
    );
    assert_eq!(done.code, 0, "{done:?}");
    let first: u64 = done.stdout.trim().parse().expect("a fencing token");
    let _held = locks.lock("over-tls").unwrap();
    let status = finish(tool_for(&tls.insecure_url()).args(["status", "over-tls", "--json"]));
    assert_eq!(status.code, 0, "{status:?}");
    assert_eq!(json(&status.stdout)["fencing_token"], first + 1);
}

// ---------------------------------------------------------------------------------------
// status, list, release --force

#[test]
fn status_of_a_held_and_a_free_lock() {
    let server = RedisServer::start();
    let locks = client(&server);
    let guard = locks
        .options("report")
        .metadata("cron job")
        .acquire()
        .unwrap();

    let plain = finish(tool(&server).args(["status", "report"]));
    assert_eq!(plain.code, 0, "{plain:?}");
    assert!(plain.stdout.contains("is held"), "{}", plain.stdout);
    assert!(
        plain
            .stdout
            .contains(&format!("pid {}", std::process::id()))
    );
    assert!(plain.stdout.contains("cron job"));

    let v = json(&finish(tool(&server).args(["status", "report", "--json"])).stdout);
    assert_eq!(v["key"], "report");
    assert_eq!(v["held"], true);
    assert_eq!(v["pid"], std::process::id());
    assert_eq!(v["fencing_token"], guard.fencing_token());
    assert_eq!(v["metadata"], "cron job");
    assert_eq!(v["has_owner"], true);
    let ttl = v["remaining_ttl_ms"].as_u64().unwrap();
    assert!(ttl > 0 && ttl <= 30_000, "{ttl}");
    assert!(v["acquired_at"].as_str().unwrap().ends_with('Z'));

    drop(guard);
    let free = finish(tool(&server).args(["status", "report"]));
    assert_eq!(free.code, 1, "{free:?}");
    assert!(free.stdout.contains("is free"));
    let free = finish(tool(&server).args(["status", "report", "--json"]));
    assert_eq!(free.code, 1, "{free:?}");
    assert_eq!(json(&free.stdout)["held"], false);
}

#[test]
fn leader_shows_the_value_of_a_campaign_and_of_a_command_run_as_the_leader() {
    let server = RedisServer::start();
    let locks = client(&server);
    let none = finish(tool(&server).args(["leader", "sched"]));
    assert_eq!(none.code, 1, "{none:?}");
    assert!(none.stdout.contains("has no leader"), "{}", none.stdout);

    let leadership = locks.campaign("sched", "10.0.0.7:8080").unwrap();
    let plain = finish(tool(&server).args(["leader", "sched"]));
    assert_eq!(plain.code, 0, "{plain:?}");
    assert!(
        plain.stdout.starts_with("10.0.0.7:8080 ("),
        "{}",
        plain.stdout
    );
    let v = json(&finish(tool(&server).args(["leader", "sched", "--json"])).stdout);
    assert_eq!(v["leader"], true);
    assert_eq!(v["value"], "10.0.0.7:8080");
    assert_eq!(v["pid"], std::process::id());
    assert_eq!(v["fencing_token"], leadership.fencing_token());
    leadership.resign().unwrap();

    // A command run as the leader, announcing a value, while `leader` asks.
    let running = Running::start(tool(&server).args([
        "run",
        "sched",
        "--metadata",
        "worker-2",
        "--",
        "sleep",
        "30",
    ]));
    assert!(
        wait_until(QUICK, || locks
            .leader("sched")
            .unwrap()
            .is_some_and(|l| l.value == "worker-2")),
        "{:?}",
        running.stderr()
    );
    let shown = json(&finish(tool(&server).args(["leader", "sched", "--json"])).stdout);
    assert_eq!(shown["value"], "worker-2");
}

#[test]
fn list_shows_held_locks_only() {
    let server = RedisServer::start();
    let locks = client(&server);
    let empty = finish(tool(&server).arg("list"));
    assert_eq!((empty.code, empty.stdout.as_str()), (0, ""), "{empty:?}");
    assert_eq!(
        json(&finish(tool(&server).args(["list", "--json"])).stdout),
        Value::Array(vec![])
    );

    let _a = locks
        .options("report-a")
        .metadata("first")
        .acquire()
        .unwrap();
    let _b = locks.lock("report-b").unwrap();
    let _odd = locks.lock("odd}name").unwrap();
    // Released: its fencing counter and wake-up list stay behind, but it is not held.
    drop(locks.lock("report-c").unwrap());
    let other_ns = LockClient::builder(&server.url())
        .namespace("app:")
        .build()
        .unwrap();
    let _elsewhere = other_ns.lock("report-z").unwrap();

    let plain = finish(tool(&server).arg("list"));
    assert_eq!(plain.code, 0, "{plain:?}");
    let rows: Vec<&str> = plain.stdout.lines().collect();
    assert_eq!(rows.len(), 4, "{}", plain.stdout);
    assert!(rows[0].starts_with("KEY"));
    assert!(rows[1].starts_with("odd}name"));
    assert!(rows[2].starts_with("report-a") && rows[2].contains("first"));
    assert!(rows[3].starts_with("report-b"));

    let v = json(&finish(tool(&server).args(["list", "report-*", "--json"])).stdout);
    let keys: Vec<&str> = v
        .as_array()
        .unwrap()
        .iter()
        .map(|l| l["key"].as_str().unwrap())
        .collect();
    assert_eq!(keys, ["report-a", "report-b"]);
    assert_eq!(v[0]["pid"], std::process::id());

    let v = json(&finish(tool(&server).args(["--namespace", "app:", "list", "--json"])).stdout);
    assert_eq!(v.as_array().unwrap().len(), 1, "{v}");
    assert_eq!(v[0]["key"], "report-z");
    assert_eq!(v[0]["namespace"], "app:");
}

/// `list --json` says whether anybody owns each lock as `has_owner` (it was `owned`, which
/// read as "owned by me"): true for a held lock, whoever holds it; false for one kept taken by
/// nobody after its release (a minimum hold).
#[test]
fn list_json_says_whether_a_lock_has_an_owner() {
    let server = RedisServer::start();
    // Made first: it may build the binary, which can take longer than a minimum hold.
    let mut list = tool(&server);
    let locks = client(&server);
    let theirs = client(&server);
    let held = theirs.lock("held").unwrap();
    let kept = locks
        .options("kept")
        .ttl(Duration::from_secs(60))
        .hold_at_least(Duration::from_secs(60))
        .acquire()
        .unwrap();
    kept.release().unwrap();
    assert!(
        locks.inspect("kept").unwrap().is_some_and(|i| !i.owned),
        "{:?}",
        locks.inspect("kept")
    );
    let done = finish(list.args(["list", "--json"]));
    assert_eq!(done.code, 0, "{done:?}");
    let list = json(&done.stdout);
    let entry = |key: &str| {
        list.as_array()
            .unwrap()
            .iter()
            .find(|v| v["key"] == key)
            .unwrap_or_else(|| panic!("{key} not listed: {list}"))
            .clone()
    };
    for (key, has_owner) in [("held", true), ("kept", false)] {
        let v = entry(key);
        assert_eq!(v["has_owner"], has_owner, "{v}");
        assert!(v.get("owned").is_none(), "the ambiguous name is gone: {v}");
    }
    drop(held);
}

#[test]
fn library_list_pages_through_scan_and_never_uses_keys() {
    let server = RedisServer::start();
    let locks = client(&server);
    let mut redis = server.connection();
    // Enough other keys that SCAN needs several calls (it returns about COUNT per call).
    let mut mset = redis::cmd("MSET");
    for i in 0..3000 {
        mset.arg(format!("unrelated:{i}")).arg(i);
    }
    mset.query::<()>(&mut redis).unwrap();
    let guards: Vec<_> = (0..30)
        .map(|i| locks.lock(&format!("job-{i:02}")).unwrap())
        .collect();
    // A key of another type where a lock would be is not a lock.
    redis::cmd("SET")
        .arg("lock:{not-a-lock}")
        .arg("x")
        .query::<()>(&mut redis)
        .unwrap();
    let before = locks.request_count();
    let listed = locks.list("*").unwrap();
    let names: Vec<String> = listed.iter().map(|i| i.key.clone()).collect();
    let expected: Vec<String> = (0..30).map(|i| format!("job-{i:02}")).collect();
    assert_eq!(names, expected);
    assert!(
        listed
            .iter()
            .all(|i| i.pid == Some(std::process::id()) && i.owned)
    );
    // One request per SCAN page plus one per lock: more than one page was needed.
    assert!(
        locks.request_count() - before > 31,
        "{}",
        locks.request_count() - before
    );
    assert_eq!(locks.list("job-1?").unwrap().len(), 10);
    assert!(locks.list("nothing-*").unwrap().is_empty());
    let stats: String = redis::cmd("INFO")
        .arg("commandstats")
        .query(&mut redis)
        .unwrap();
    assert!(stats.contains("cmdstat_scan:"), "{stats}");
    assert!(!stats.contains("cmdstat_keys:"), "KEYS was used");
    drop(guards);
    assert!(locks.list("*").unwrap().is_empty());
}

#[test]
fn release_force_breaks_a_held_lock_and_names_the_holder() {
    let server = RedisServer::start();
    let locks = client(&server);
    let guard = locks.lock("stuck").unwrap();
    let done = finish(tool(&server).args(["release", "stuck", "--force"]));
    assert_eq!(done.code, 0, "{done:?}");
    assert!(
        done.stdout.contains(&format!("pid {}", std::process::id())),
        "{}",
        done.stdout
    );
    assert!(!held(&locks, "stuck"));
    assert_ne!(guard.release().unwrap(), ReleaseOutcome::Released);

    let again = finish(tool(&server).args(["release", "stuck", "--force"]));
    assert_eq!(again.code, 1, "{again:?}");
    assert!(again.stdout.contains("not held"));

    let _guard = locks.lock("stuck").unwrap();
    let v = json(&finish(tool(&server).args(["release", "stuck", "--force", "--json"])).stdout);
    assert_eq!(v["broken"], true);
    assert_eq!(v["pid"], std::process::id());
    let free = finish(tool(&server).args(["release", "stuck", "--force", "--json"]));
    assert_eq!(free.code, 1);
    assert_eq!(json(&free.stdout)["broken"], false);

    // Without --force nothing is broken.
    let _guard = locks.lock("kept").unwrap();
    let refused = finish(tool(&server).args(["release", "kept"]));
    assert_eq!(refused.code, USAGE, "{refused:?}");
    assert!(held(&locks, "kept"));
}

// ---------------------------------------------------------------------------------------
// Errors: one line, non-zero, the documented code

#[test]
fn unreachable_redis_is_one_clear_line() {
    let port = free_port().unwrap();
    let url = format!("redis://:hunter2@127.0.0.1:{port}/");
    for args in [&["status", "x"][..], &["run", "x", "--", "true"], &["list"]] {
        let done = finish(tool_for(&url).args(args));
        assert_eq!(done.code, UNAVAILABLE, "{args:?}: {done:?}");
        one_line(&done.stderr);
        assert!(
            done.stderr
                .contains(&format!("cannot connect to Redis at 127.0.0.1:{port}")),
            "{}",
            done.stderr
        );
        assert!(!done.stderr.contains("hunter2"), "{}", done.stderr);
    }
}

/// A refused connection fails at once, whatever the connect timeout (2 s by default); a
/// server that accepts connections and never answers fails after `--connect-timeout` (or
/// `$REDIS_LOCK_CONNECT_TIMEOUT`), once: `run -n` no longer asked three times.
#[test]
fn unreachable_redis_fails_within_the_connect_timeout() {
    let refused = format!("redis://127.0.0.1:{}/", free_port().unwrap());
    let silent = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let silent = format!("redis://127.0.0.1:{}/", silent.local_addr().unwrap().port());
    // Above the 2 s default (and any reply timeout): a run that took at least this long
    // honoured it, which a loaded machine cannot fake the way it can stretch a short bound.
    let connect = Duration::from_millis(2500);
    // Process start and exit on a loaded machine: what is left of 1 s for a refusal, and
    // short of a second connect attempt for a silent server.
    let margin = Duration::from_millis(1000);
    let silent_margin = Duration::from_millis(2000);
    for args in [&["run", "-n", "x", "--", "true"][..], &["status", "x"]] {
        let start = Instant::now();
        let done = finish(tool_for(&refused).args(args));
        let took = start.elapsed();
        assert_eq!(done.code, UNAVAILABLE, "{args:?}: {done:?}");
        assert!(done.stderr.contains("refused"), "{}", done.stderr);
        assert!(took < margin, "refused, {args:?}: {took:?}");
        for (how, mut cmd) in [
            ("--connect-timeout", tool_for(&silent)),
            ("$REDIS_LOCK_CONNECT_TIMEOUT", tool_for(&silent)),
        ] {
            if how.starts_with('$') {
                cmd.env("REDIS_LOCK_CONNECT_TIMEOUT", "2500ms");
            } else {
                cmd.args(["--connect-timeout", "2500ms"]);
            }
            let start = Instant::now();
            let done = finish(cmd.args(args));
            let took = start.elapsed();
            assert_eq!(done.code, UNAVAILABLE, "{args:?}: {done:?}");
            one_line(&done.stderr);
            assert!(
                done.stderr
                    .contains("did not answer within the connect timeout"),
                "{}",
                done.stderr
            );
            assert!(
                took >= connect && took < connect + silent_margin,
                "silent, {how}, {args:?}: {took:?}"
            );
        }
    }
}

#[test]
fn bad_command_lines_are_one_clear_line() {
    let server = RedisServer::start();
    let cases: [(&[&str], &str); 6] = [
        (&["run", "x", "--ttl", "5parsecs", "--", "true"], "5parsecs"),
        (&["run", "x", "--wait", "soon", "--", "true"], "soon"),
        (&["run", "x"], "missing command"),
        (&["run", "x", "--"], "missing command"),
        (&["--namespace", "a{b", "status", "x"], "namespace"),
        (&["run", "", "--", "true"], "key"),
    ];
    for (args, needle) in cases {
        let done = finish(tool(&server).args(args));
        assert_eq!(done.code, USAGE, "{args:?}: {done:?}");
        one_line(&done.stderr);
        assert!(done.stderr.contains(needle), "{args:?}: {}", done.stderr);
    }
    let done = finish(tool_for("redis://:hunter2@[::1").args(["status", "x"]));
    assert_eq!(done.code, USAGE, "{done:?}");
    one_line(&done.stderr);
    assert!(done.stderr.contains("invalid url"), "{}", done.stderr);
    assert!(!done.stderr.contains("hunter2"), "{}", done.stderr);
}

#[test]
fn commands_that_cannot_start_get_127_or_126_and_free_the_lock() {
    let server = RedisServer::start();
    let locks = client(&server);
    let not_executable = server.dir().join("script.sh");
    std::fs::write(&not_executable, "#!/bin/sh\necho hi\n").unwrap();
    let cases = [
        (OsStr::new("no-such-command-anywhere"), NOT_FOUND),
        (not_executable.as_os_str(), CANNOT_EXECUTE),
        (server.dir().as_os_str(), CANNOT_EXECUTE),
    ];
    for (command, code) in cases {
        let done = finish(tool(&server).args(["run", "job", "--"]).arg(command));
        assert_eq!(done.code, code, "{command:?}: {done:?}");
        one_line(&done.stderr);
        assert!(!held(&locks, "job"), "{command:?}: lock left behind");
    }
}

#[test]
fn help_has_examples_a_crontab_line_and_the_exit_codes() {
    for args in [&["--help"][..], &["run", "--help"]] {
        let mut cmd = Command::new(cli_binary());
        let done = finish(cmd.args(args));
        assert_eq!(done.code, 0, "{done:?}");
        assert!(done.stdout.contains("Examples:"), "{args:?}");
        assert!(
            done.stdout.contains("*/15 * * * *"),
            "{args:?}: no crontab line"
        );
        for code in ["64", "69", "75", "124", "126", "127", "128+N"] {
            assert!(
                done.stdout.contains(code),
                "{args:?}: exit code {code} undocumented"
            );
        }
    }
    for sub in ["status", "list", "release"] {
        let done = finish(Command::new(cli_binary()).args([sub, "--help"]));
        assert_eq!(done.code, 0, "{done:?}");
        assert!(done.stdout.contains("redis-lock "), "{sub}: no example");
    }
}

// ---------------------------------------------------------------------------------------
// The live status line: only on a terminal

#[test]
fn the_wait_status_line_shows_on_a_terminal() {
    let server = RedisServer::start();
    let locks = client(&server);
    let _held = locks.options("tty-job").metadata("x").acquire().unwrap();
    let (mut master, slave) = pty();
    let mut running = tool(&server)
        .args(["run", "tty-job", "--wait", "2s", "--", "true"])
        .stdout(Stdio::null())
        .stderr(Stdio::from(slave))
        .spawn()
        .unwrap();
    let screen = Arc::new(Mutex::new(String::new()));
    let reader = {
        let screen = Arc::clone(&screen);
        std::thread::spawn(move || {
            let mut buf = [0u8; 1024];
            // Ends with EIO once the tool (the last holder of the slave side) has exited.
            while let Ok(n) = master.read(&mut buf) {
                if n == 0 {
                    break;
                }
                screen
                    .lock()
                    .unwrap()
                    .push_str(&String::from_utf8_lossy(&buf[..n]));
            }
        })
    };
    let start = Instant::now();
    let status = loop {
        if let Some(status) = running.try_wait().unwrap() {
            break status;
        }
        assert!(start.elapsed() < QUICK, "redis-lock did not give up");
        std::thread::sleep(Duration::from_millis(10));
    };
    // The reader stops at EIO once no process has the terminal open any more; an unrelated
    // process spawned meanwhile by a parallel test might keep it open, so do not insist.
    wait_until(Duration::from_secs(5), || reader.is_finished());
    assert_eq!(status.code(), Some(BUSY));
    let screen = screen.lock().unwrap().clone();
    // The status line is redrawn in place: each drawing starts with a carriage return.
    let drawings: Vec<&str> = screen
        .split('\r')
        .filter(|d| d.starts_with("redis-lock: waiting "))
        .collect();
    let holder = format!("held by {}", gethostname());
    assert!(
        drawings
            .iter()
            .any(|d| d.contains(&holder) && d.contains(&format!("pid {}", std::process::id()))),
        "{screen:?}"
    );
    // Cleared before the final message, which is on a line of its own.
    assert!(
        screen.contains("\r\x1b[Kredis-lock: lock \"tty-job\" is busy"),
        "{screen:?}"
    );
}

fn gethostname() -> String {
    let mut buf = [0u8; 256];
    // SAFETY: the buffer is valid for its length.
    let r = unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len()) };
    assert_eq!(r, 0);
    let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
    String::from_utf8_lossy(&buf[..end]).into_owned()
}

/// A pseudo-terminal: the master side to read, the slave side to hand to the tool.
fn pty() -> (std::fs::File, OwnedFd) {
    let mut master = -1;
    let mut slave = -1;
    // SAFETY: both out-pointers are valid; name, termios and winsize may be null.
    let r = unsafe {
        libc::openpty(
            &mut master,
            &mut slave,
            std::ptr::null_mut(),
            std::ptr::null(),
            std::ptr::null(),
        )
    };
    assert_eq!(r, 0, "openpty: {}", std::io::Error::last_os_error());
    for fd in [master, slave] {
        // SAFETY: `fd` is open. Close-on-exec keeps processes that parallel tests spawn from
        // inheriting the terminal (the tool gets the slave through `Stdio`, which dups it).
        unsafe {
            libc::fcntl(fd, libc::F_SETFD, libc::FD_CLOEXEC);
        }
    }
    // SAFETY: openpty returned two fresh descriptors that nothing else owns.
    unsafe {
        (
            std::fs::File::from_raw_fd(master),
            OwnedFd::from_raw_fd(slave),
        )
    }
}

// ---------------------------------------------------------------------------------------
// watch: a live view of holders and waiters

/// The JSON objects `watch --json` has printed so far.
fn watch_events(running: &Running) -> Vec<Value> {
    running
        .stdout
        .lock()
        .unwrap()
        .lines()
        .map(|line| serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: {line:?}")))
        .collect()
}

fn has_event(running: &Running, event: &str, check: impl Fn(&Value) -> bool) -> bool {
    wait_until(QUICK, || {
        watch_events(running)
            .iter()
            .any(|e| e["event"] == event && check(e))
    })
}

#[test]
fn watch_json_reports_holders_waiters_handoffs_and_releases() {
    let server = RedisServer::start();
    let locks = client(&server);
    let running = Running::start(tool(&server).args([
        "watch",
        "watched",
        "--json",
        "--interval",
        "20ms",
        "--duration",
        "60s",
    ]));
    assert!(
        has_event(&running, "free", |e| e["held"] == false
            && e["key"] == "watched"),
        "{:?}",
        running.stderr()
    );
    // Each step waits until watch has reported the one before: no sleeps, no races.
    let first = locks.lock("watched").unwrap();
    assert!(has_event(&running, "acquired", |e| {
        e["pid"] == u64::from(std::process::id())
            && e["fencing_token"] == first.fencing_token()
            && e["waiters"] == 0
    }));
    let waiter = std::thread::spawn({
        let locks = client(&server);
        move || {
            let guard = locks.lock("watched").unwrap();
            let fence = guard.fencing_token();
            assert_eq!(guard.release().unwrap(), ReleaseOutcome::Released);
            fence
        }
    });
    assert!(has_event(&running, "waiters", |e| e["waiters"] == 1));
    let first_fence = first.fencing_token();
    assert_eq!(first.release().unwrap(), ReleaseOutcome::Released);
    let second_fence = waiter.join().unwrap();
    assert!(second_fence > first_fence);
    // The waiter may hold it for less than an interval: then only the release is seen.
    assert!(has_event(&running, "released", |e| e["held"] == false));
    let events = watch_events(&running);
    let handoffs: Vec<&Value> = events.iter().filter(|e| e["event"] == "handoff").collect();
    for h in &handoffs {
        assert_eq!(h["fencing_token"], second_fence, "{events:#?}");
    }
    // No owner token in anything it printed.
    for e in &events {
        let obj = e.as_object().unwrap();
        assert!(!obj.contains_key("token"), "{e}");
    }
}

#[test]
fn watch_of_a_lock_name_shows_a_change_as_redis_announces_it_not_at_the_next_interval() {
    let server = RedisServer::start();
    let locks = client(&server);
    // An interval far longer than the test: whatever is reported after the first look came
    // from a notification.
    let running = Running::start(tool(&server).args([
        "watch",
        "announced",
        "--json",
        "--interval",
        "1h",
        "--duration",
        "60s",
    ]));
    assert!(has_event(&running, "free", |e| e["key"] == "announced"));
    let guard = locks.lock("announced").unwrap();
    assert!(has_event(&running, "acquired", |e| e["fencing_token"]
        == guard.fencing_token()));
    drop(guard);
    assert!(has_event(&running, "released", |e| e["held"] == false));
}

#[test]
fn watch_redraws_a_table_on_a_terminal() {
    let server = RedisServer::start();
    let locks = client(&server);
    let held = locks
        .options("tty-watched")
        .metadata("nightly")
        .acquire()
        .unwrap();
    let (mut master, slave) = pty();
    let mut running = tool(&server)
        .args(["watch", "tty-*", "--interval", "50ms", "--duration", "30s"])
        .stdout(Stdio::from(slave))
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let screen = Arc::new(Mutex::new(String::new()));
    let _reader = {
        let screen = Arc::clone(&screen);
        std::thread::spawn(move || {
            let mut buf = [0u8; 4096];
            while let Ok(n) = master.read(&mut buf) {
                if n == 0 {
                    break;
                }
                screen
                    .lock()
                    .unwrap()
                    .push_str(&String::from_utf8_lossy(&buf[..n]));
            }
        })
    };
    // The latest drawing: everything after the last clear-screen.
    let latest = || {
        let s = screen.lock().unwrap().clone();
        s.rsplit("\x1b[H\x1b[2J").next().unwrap_or("").to_owned()
    };
    let pid = std::process::id().to_string();
    let row = |drawing: &str, waiters: &str| {
        drawing.lines().any(|l| {
            let cells: Vec<&str> = l.split_whitespace().collect();
            cells.first() == Some(&"tty-watched")
                && cells.contains(&pid.as_str())
                && cells.last() == Some(&waiters)
        })
    };
    assert!(
        wait_until(QUICK, || row(&latest(), "0")),
        "no row for the holder: {:?}",
        latest()
    );
    assert!(latest().contains("WAITERS"));
    let waiter = std::thread::spawn({
        let locks = client(&server);
        move || locks.lock("tty-watched").map(|g| g.release())
    });
    assert!(
        wait_until(QUICK, || row(&latest(), "1")),
        "the waiter does not show: {:?}",
        latest()
    );
    drop(held);
    waiter.join().unwrap().unwrap().unwrap();
    assert!(
        wait_until(QUICK, || latest().contains("no lock held")
            && latest().contains("released")),
        "{:?}",
        latest()
    );
    let _ = running.kill();
    let _ = running.wait();
}

#[test]
fn status_and_list_count_waiters() {
    let server = RedisServer::start();
    let locks = client(&server);
    let held = locks.lock("counted").unwrap();
    let waiters: Vec<_> = (0..2)
        .map(|_| {
            let locks = client(&server);
            std::thread::spawn(move || locks.lock("counted").map(|g| g.release()))
        })
        .collect();
    assert!(wait_until(QUICK, || {
        locks
            .inspect("counted")
            .unwrap()
            .is_some_and(|i| i.waiters == 2)
    }));
    let status = finish(tool(&server).args(["status", "counted", "--json"]));
    let v: Value = serde_json::from_str(status.stdout.trim()).unwrap();
    assert_eq!(
        (v["waiters"].as_u64(), v["queued"].as_u64()),
        (Some(2), Some(0))
    );
    let text = finish(tool(&server).args(["status", "counted"]));
    assert!(text.stdout.contains("waiters     2"), "{text:?}");
    let list = finish(tool(&server).arg("list"));
    assert!(
        list.stdout.lines().next().unwrap().contains("WAITERS"),
        "{list:?}"
    );
    drop(held);
    for w in waiters {
        w.join().unwrap().unwrap().unwrap();
    }
}

// ---------------------------------------------------------------------------------------
// Semaphores: run --permits, status and list

#[test]
fn run_with_permits_status_and_list_show_the_semaphore() {
    let server = RedisServer::start();
    let locks = client(&server);
    let exports = locks.semaphore("exports", 2).unwrap();
    let mine = exports
        .acquire_with(&redis_lock::LockOptions::new().metadata("library"))
        .unwrap();

    // One of two permits free: the command runs, holding the second one.
    let ran = finish(tool(&server).args([
        "run",
        "--permits",
        "2",
        "-n",
        "exports",
        "--",
        "sh",
        "-c",
        "echo token=$REDIS_LOCK_FENCING_TOKEN",
    ]));
    assert_eq!(ran.code, 0, "{ran:?}");
    let token: u64 = ran
        .stdout
        .trim()
        .trim_start_matches("token=")
        .parse()
        .unwrap();
    assert!(token > mine.fencing_token());
    assert_eq!(
        exports.available().unwrap(),
        1,
        "given back after the command"
    );

    let plain = finish(tool(&server).args(["status", "exports"]));
    assert_eq!(plain.code, 0, "{plain:?}");
    assert!(
        plain.stdout.contains("1 of 2 permits in use"),
        "{}",
        plain.stdout
    );
    assert!(plain.stdout.contains("library"), "{}", plain.stdout);
    let v = json(&finish(tool(&server).args(["status", "exports", "--json"])).stdout);
    assert_eq!(v["kind"], "semaphore");
    assert_eq!(
        (v["limit"].as_u64(), v["in_use"].as_u64()),
        (Some(2), Some(1))
    );
    assert_eq!(v["holders"][0]["pid"], std::process::id());
    assert_eq!(v["holders"][0]["fencing_token"], mine.fencing_token());

    // Both permits held: busy, and the message says so.
    let other = client(&server);
    let second = other.semaphore("exports", 2).unwrap().acquire().unwrap();
    let busy = finish(tool(&server).args(["run", "--permits", "2", "-n", "exports", "--", "true"]));
    assert_eq!(busy.code, BUSY, "{busy:?}");
    assert!(
        busy.stderr.contains("all 2 permits are held"),
        "{}",
        busy.stderr
    );

    let _lock = locks.lock("report").unwrap();
    let list = finish(tool(&server).arg("list"));
    assert_eq!(list.code, 0, "{list:?}");
    assert!(list.stdout.contains("report"), "{}", list.stdout);
    let row = list
        .stdout
        .lines()
        .find(|l| l.starts_with("exports"))
        .unwrap_or_else(|| panic!("{}", list.stdout));
    assert_eq!(
        row.split_whitespace().collect::<Vec<_>>(),
        ["exports", "2", "2", "0"]
    );
    let items = json(&finish(tool(&server).args(["list", "--json"])).stdout);
    let sem = items
        .as_array()
        .unwrap()
        .iter()
        .find(|i| i["kind"] == "semaphore")
        .unwrap();
    assert_eq!(
        (sem["key"].as_str(), sem["in_use"].as_u64()),
        (Some("exports"), Some(2))
    );

    // An operator breaks every permit.
    let broke = finish(tool(&server).args(["release", "exports", "--force"]));
    assert_eq!(broke.code, 0, "{broke:?}");
    assert!(broke.stdout.contains("broke"), "{}", broke.stdout);
    assert_eq!(mine.release().unwrap(), redis_lock::ReleaseOutcome::Late);
    drop(second);
    let free = finish(tool(&server).args(["status", "exports"]));
    // Nothing held: the permits key is gone, and the name reads as free.
    assert_eq!(free.code, 1, "no permit held: {free:?}");
    assert!(free.stdout.contains("free"), "{}", free.stdout);
}

// ---------------------------------------------------------------------------------------
// Lease handles: `run` passes one to its command; `extend --handle`, `release --handle`

/// The test process holds the lock and hands its handle to a second process (the tool),
/// which extends and then releases it; the first guard then finds the lock no longer its own.
#[test]
fn a_handle_passed_to_another_process_extends_and_releases_the_lock() {
    let server = RedisServer::start();
    let locks = client(&server);
    let guard = locks
        .options("handed")
        .ttl(Duration::from_secs(60))
        .watchdog(false)
        .acquire()
        .unwrap();
    let handle = guard.handle().to_string_secret();

    let done = finish(tool(&server).args(["extend", "--handle", &handle, "--ttl", "10m"]));
    assert_eq!(done.code, 0, "{done:?}");
    assert!(!done.stdout.contains(guard.token()), "{done:?}");
    assert!(
        pttl(&mut server.connection(), "lock:{handed}") > 120_000,
        "extended to 10 minutes"
    );
    assert!(held(&locks, "handed"));

    let done = finish(tool(&server).args(["release", "--handle", &handle, "--json"]));
    assert_eq!(done.code, 0, "{done:?}");
    assert_eq!(json(&done.stdout)["released"], Value::Bool(true));
    assert!(!held(&locks, "handed"), "released by the second process");

    // The first process's guard: no longer its own.
    let err = guard.remaining_ttl().unwrap_err();
    assert!(err.is_lost(), "{err:?}");
    assert!(guard.is_lost());
    assert_eq!(guard.release().unwrap(), ReleaseOutcome::Late);

    // The handle is spent: a second release says so with the "lost" code.
    let done = finish(tool(&server).args(["release", "--handle", &handle]));
    assert_eq!(done.code, LOST, "{done:?}");
    one_line(&done.stderr);
    assert!(!done.stderr.contains(guard_token_of(&handle)), "{done:?}");
}

fn guard_token_of(handle: &str) -> &str {
    handle.split(':').nth(4).unwrap()
}

/// `run` gives its command the handle in `$REDIS_LOCK_HANDLE`; the command finishes the lock
/// early with `release --handle`.
#[test]
fn a_run_command_releases_its_lock_early_through_the_handle() {
    let server = RedisServer::start();
    let locks = client(&server);
    let script = "\"$TOOL\" release --handle \"$REDIS_LOCK_HANDLE\" && \
                  \"$TOOL\" status early --json; echo \"status=$?\"";
    let done = finish(
        tool(&server)
            .env("TOOL", cli_binary())
            .args(["run", "early", "--ttl", "5s", "--"])
            .args(sh(script)),
    );
    assert_eq!(done.code, 0, "{done:?}");
    assert!(done.stdout.contains("released lock \"early\""), "{done:?}");
    // `status` (exit 1: free) ran after the release, inside the command.
    assert!(done.stdout.contains("\"held\":false"), "{done:?}");
    assert!(done.stdout.contains("status=1"), "{done:?}");
    assert!(!held(&locks, "early"));
}

/// The same with `--read` and `--permits`: the handle in `$REDIS_LOCK_HANDLE` is the read
/// share's or the permit's, and `extend` and `release` work on that, not on a mutex. Here
/// `--handle` alone, which reads `$REDIS_LOCK_HANDLE` (off the command line `ps` shows).
#[test]
fn a_run_command_extends_and_releases_its_share_or_permit_through_the_handle() {
    let server = RedisServer::start();
    let locks = client(&server);
    let script = "\"$TOOL\" extend --handle --ttl 1m && \"$TOOL\" release --handle";
    for (flags, name) in [(vec!["--read"], "shared"), (vec!["--permits", "2"], "pool")] {
        let done = finish(
            tool(&server)
                .env("TOOL", cli_binary())
                .arg("run")
                .args(&flags)
                .args([name, "--ttl", "5s", "--"])
                .args(sh(script)),
        );
        assert_eq!(done.code, 0, "{flags:?}: {done:?}");
        assert!(done.stdout.contains("released"), "{flags:?}: {done:?}");
    }
    // Released by the command, not left to expire: free at once.
    assert!(locks.try_write_lock("shared").unwrap().is_some());
    assert_eq!(locks.semaphore("pool", 2).unwrap().available().unwrap(), 2);
}

#[test]
fn bad_handles_are_one_clear_line_and_change_nothing() {
    let server = RedisServer::start();
    let locks = client(&server);
    let guard = locks.lock("kept").unwrap();
    let handle = guard.handle().to_string_secret();
    let token = guard_token_of(&handle).to_owned();
    let tampered = handle.replace(&token, &"0".repeat(32));
    for (args, code) in [
        (vec!["release", "--handle", "not-a-handle"], USAGE),
        (vec!["extend", "--handle", "garbage", "--ttl", "1s"], USAGE),
        (vec!["release", "--handle", &tampered], LOST),
        (vec!["extend", "--handle", &tampered, "--ttl", "1m"], LOST),
        (vec!["release", "kept", "--handle", &handle], USAGE),
        (vec!["extend", "--ttl", "1m"], USAGE),
        // `--handle` alone with no `$REDIS_LOCK_HANDLE` to read.
        (vec!["release", "--handle"], USAGE),
        (vec!["extend", "--handle", "--ttl", "1m"], USAGE),
    ] {
        let done = finish(tool(&server).env_remove("REDIS_LOCK_HANDLE").args(&args));
        assert_eq!(done.code, code, "{args:?}: {done:?}");
        one_line(&done.stderr);
        assert!(!done.stderr.contains(&token), "{done:?}");
    }
    // Under another namespace: refused before anything is sent.
    let done =
        finish(tool(&server).args(["--namespace", "other:", "release", "--handle", &handle]));
    assert_eq!(done.code, USAGE, "{done:?}");
    assert!(done.stderr.contains("namespace"), "{done:?}");
    assert!(guard.remaining_ttl().unwrap().is_some(), "still ours");
    assert_eq!(guard.release().unwrap(), ReleaseOutcome::Released);
}

// ---------------------------------------------------------------------------------------
// run with several locks: --also

#[test]
fn run_with_also_holds_every_lock_together() {
    let server = RedisServer::start();
    let locks = client(&server);
    let done = finish(
        tool(&server)
            .env("TOOL", cli_binary())
            .args(["run", "b", "--also", "a", "--also", "c", "--"])
            .args(sh(
                "echo \"$REDIS_LOCK_KEYS|$REDIS_LOCK_FENCING_TOKENS|${REDIS_LOCK_HANDLE:-none}\"; \
                 \"$TOOL\" status a --json; \"$TOOL\" status c --json",
            )),
    );
    assert_eq!(done.code, 0, "{done:?}");
    let first = done.stdout.lines().next().unwrap();
    let fields: Vec<&str> = first.split('|').collect();
    assert_eq!(fields[0], "a,b,c");
    assert!(
        fields[1].starts_with("a=") && fields[1].contains(",c="),
        "{first}"
    );
    assert_eq!(fields[2], "none", "no handle for several locks");
    assert_eq!(done.stdout.matches("\"held\":true").count(), 2, "{done:?}");
    for n in ["a", "b", "c"] {
        assert!(!held(&locks, n), "{n} released after the command");
    }

    // One of them busy: nothing is taken, busy exit code, the busy one named.
    let busy = locks.lock("c").unwrap();
    let done = finish(tool(&server).args(["run", "a", "--also", "c", "--no-wait", "--", "true"]));
    assert_eq!(done.code, BUSY, "{done:?}");
    assert!(done.stderr.contains("\"c\" held by"), "{done:?}");
    assert!(!held(&locks, "a"), "nothing taken");
    drop(busy);

    // A name twice, or --also with --hold-at-least: a usage error.
    for args in [
        &["run", "a", "--also", "a", "--", "true"][..],
        &[
            "run",
            "a",
            "--also",
            "b",
            "--hold-at-least",
            "1s",
            "--",
            "true",
        ],
    ] {
        let done = finish(tool(&server).args(args));
        assert_eq!(done.code, USAGE, "{args:?}: {done:?}");
        one_line(&done.stderr);
    }
}

/// SIGKILL of a `run` holding several locks frees every one within the TTL.
#[test]
fn sigkill_of_a_run_with_also_frees_every_lock_within_its_ttl() {
    let server = RedisServer::start();
    let locks = client(&server);
    let dir = tempfile::tempdir().unwrap();
    let pidfile = dir.path().join("pid");
    let script = format!("echo $$ > {}; exec sleep 30", path_arg(&pidfile));
    let mut running = Running::start(
        tool(&server)
            .args(["run", "x", "--also", "y", "--ttl", "1s", "--"])
            .args(sh(&script)),
    );
    assert!(wait_until(QUICK, || held(&locks, "x") && held(&locks, "y")));
    let killed = Instant::now();
    signal(&running.child, libc::SIGKILL);
    let _ = running.child.wait();
    assert!(
        wait_until(Duration::from_secs(3), || !held(&locks, "x")
            && !held(&locks, "y")),
        "freed within the TTL"
    );
    let took = killed.elapsed();
    eprintln!("run --also: both locks freed {took:?} after SIGKILL (ttl 1s)");
    assert!(took < Duration::from_millis(1500), "{took:?}");
    kill_pid_in(&pidfile);
}

/// `run --read` (flock -s) shares the lock with other readers; `run --write` waits for them;
/// `status`, `list` and their JSON show the readers, the writer and writers waiting.
#[test]
fn read_runs_share_the_lock_and_status_shows_readers_and_writers() {
    let server = RedisServer::start();
    let locks = client(&server);
    let on_thread = |mode: redis_lock::LockMode| {
        let locks = locks.clone();
        std::thread::spawn(move || {
            locks
                .options("catalog")
                .mode(mode)
                .metadata("report")
                .acquire()
                .unwrap()
        })
        .join()
        .unwrap()
    };
    let first = on_thread(redis_lock::LockMode::Read);
    let second = on_thread(redis_lock::LockMode::Read);

    // A read run enters beside the readers at once; a write run is busy.
    let read = finish(tool(&server).args(["run", "catalog", "--read", "-n", "--", "true"]));
    assert_eq!(read.code, 0, "{read:?}");
    let read = finish(tool(&server).args(["run", "catalog", "-s", "-n", "--", "true"]));
    assert_eq!(read.code, 0, "{read:?}");
    let write = finish(tool(&server).args(["run", "catalog", "--write", "-n", "--", "true"]));
    assert_eq!(write.code, BUSY, "{write:?}");
    // A mutex run on the name is a clear error, not a wait.
    let mutex = finish(tool(&server).args(["run", "catalog", "-n", "--", "true"]));
    assert_eq!(mutex.code, UNAVAILABLE, "{mutex:?}");
    assert!(mutex.stderr.contains("another type"), "{mutex:?}");
    one_line(&mutex.stderr);

    // A waiting writer shows, and keeps new readers out.
    let writer = Running::start(
        tool(&server).args(["run", "catalog", "--write", "--wait", "20s", "--", "true"]),
    );
    assert!(wait_until(QUICK, || {
        locks.inspect("catalog").unwrap().unwrap().writers_waiting == 1
    }));
    let status = finish(tool(&server).args(["status", "catalog"]));
    assert_eq!(status.code, 0, "{status:?}");
    assert!(
        status.stdout.contains("held for reading by 2 reader(s)"),
        "{}",
        status.stdout
    );
    assert!(status.stdout.contains("1 waiting"), "{}", status.stdout);
    let v = json(&finish(tool(&server).args(["status", "catalog", "--json"])).stdout);
    assert_eq!(
        (
            v["mode"].as_str(),
            v["readers"].as_u64(),
            v["writers_waiting"].as_u64()
        ),
        (Some("read"), Some(2), Some(1)),
        "{v}"
    );
    let list = finish(tool(&server).args(["list"]));
    assert!(list.stdout.contains("read(2)"), "{}", list.stdout);
    let busy = finish(tool(&server).args(["run", "catalog", "--read", "-n", "--", "true"]));
    assert_eq!(
        busy.code, BUSY,
        "a waiting writer keeps new readers out: {busy:?}"
    );

    drop((first, second));
    let done = writer.finish(QUICK);
    assert_eq!(
        done.code, 0,
        "the writer ran once the readers left: {done:?}"
    );
    let both = finish(tool(&server).args(["run", "catalog", "--read", "--write", "--", "true"]));
    assert_eq!(both.code, USAGE, "{both:?}");
}

// ---------------------------------------------------------------------------------------
// Bounds, holders that are nobody, losses under --also, nested runs, watch of anything

/// Durations that would overflow the clock (`Instant + grace`, `elapsed + interval`) are
/// refused on the command line; the longest accepted ones work.
#[test]
fn kill_grace_and_watch_interval_past_their_bounds_are_usage_errors_not_panics() {
    let server = RedisServer::start();
    let locks = client(&server);
    let huge = "18446744073709551615.999999999";
    for (args, needle) in [
        (
            &[
                "run",
                "--kill-on-loss",
                "--kill-grace",
                huge,
                "big",
                "--",
                "true",
            ][..],
            "--kill-grace",
        ),
        (&["watch", "big", "--interval", huge], "--interval"),
        (
            &["run", "--cooldown", huge, "big", "--", "true"],
            "--cooldown",
        ),
    ] {
        let done = finish(tool(&server).args(args));
        assert_eq!(done.code, USAGE, "{args:?}: {done:?}");
        one_line(&done.stderr);
        assert!(
            done.stderr.contains(needle) && done.stderr.contains("365 days"),
            "{args:?}: {}",
            done.stderr
        );
    }
    assert!(!held(&locks, "big"));

    // The longest interval: one look, then --duration is over.
    let done =
        finish(tool(&server).args(["watch", "big", "--interval", "8760h", "--duration", "1s"]));
    assert_eq!(done.code, 0, "{done:?}");
    assert!(done.stdout.contains("free"), "{done:?}");

    // The longest grace: a loss sends SIGTERM (no panic, the command does not outlive it).
    let pid_file = server.dir().join("graceful.pid");
    let script = format!("echo $$ > {}; exec sleep 60", path_arg(&pid_file));
    let running = Running::start(
        tool(&server)
            .args([
                "run",
                "big",
                "--ttl",
                "1s",
                "--kill-on-loss",
                "--kill-grace",
                "8760h",
            ])
            .arg("--")
            .args(sh(&script)),
    );
    // Until the file holds the pid: the shell creates it before it writes to it.
    let read_pid =
        || -> Option<libc::pid_t> { std::fs::read_to_string(&pid_file).ok()?.trim().parse().ok() };
    assert!(wait_until(QUICK, || read_pid().is_some() && held(&locks, "big")));
    let pid = read_pid().unwrap();
    assert!(locks.force_release("big").unwrap().is_some());
    let done = running.finish(QUICK);
    assert_eq!(done.code, LOST, "{done:?}");
    assert!(!done.stderr.contains("panicked"), "{}", done.stderr);
    assert!(!alive(pid), "the command still runs");
}

/// A lock cooling down after `run --cooldown`, or handed to a waiter that has not claimed it,
/// has no holder stored: nothing says `(pid 0)` or 1970, JSON says null.
#[test]
fn a_lock_cooling_down_or_handed_over_shows_what_it_is_not_a_fake_holder() {
    let server = RedisServer::start();
    let no_fake = |what: &str, text: &str| {
        assert!(!text.contains("(pid 0)"), "{what}: {text}");
        assert!(!text.contains("1970"), "{what}: {text}");
    };
    let done = finish(
        tool(&server)
            .args(["run", "cool", "--cooldown", "60s", "--"])
            .args(sh("echo \"$REDIS_LOCK_FENCING_TOKEN\"")),
    );
    assert_eq!(done.code, 0, "{done:?}");
    let token: u64 = done.stdout.trim().parse().expect("a fencing token");

    let status = finish(tool(&server).args(["status", "cool"]));
    assert_eq!(status.code, 0, "{status:?}");
    no_fake("status", &status.stdout);
    assert!(
        status.stdout.contains("nobody: cooling down until"),
        "{}",
        status.stdout
    );
    let v = json(&finish(tool(&server).args(["status", "cool", "--json"])).stdout);
    for field in ["host", "pid", "acquired_at", "acquired_at_unix_ms"] {
        assert!(v[field].is_null(), "{field}: {v}");
    }
    assert!(v["cooling_until"].is_string(), "{v}");
    assert_eq!(v["fencing_token"], token, "{v}");

    let list = finish(tool(&server).arg("list"));
    no_fake("list", &list.stdout);
    assert!(list.stdout.contains("(cooling down)"), "{}", list.stdout);
    let items = json(&finish(tool(&server).args(["list", "--json"])).stdout);
    assert!(items[0]["host"].is_null(), "{items}");

    let busy = finish(tool(&server).args(["run", "cool", "-n", "--", "true"]));
    assert_eq!(busy.code, BUSY, "{busy:?}");
    no_fake("busy", &busy.stderr);
    assert!(
        busy.stderr.contains("cooling down until"),
        "{}",
        busy.stderr
    );

    let watched = finish(tool(&server).args([
        "watch",
        "cool",
        "--json",
        "--interval",
        "50ms",
        "--duration",
        "10ms",
    ]));
    let event = json(watched.stdout.lines().next().unwrap_or(""));
    assert_eq!(
        (
            event["event"].as_str(),
            event["host"].is_null(),
            event["pid"].is_null()
        ),
        (Some("held"), true, true),
        "{event}"
    );
    let watched =
        finish(tool(&server).args(["watch", "cool", "--interval", "50ms", "--duration", "10ms"]));
    no_fake("watch", &watched.stdout);
    assert!(watched.stdout.contains("cooling down"), "{watched:?}");

    let broke = finish(tool(&server).args(["release", "cool", "--force"]));
    assert_eq!(broke.code, 0, "{broke:?}");
    no_fake("release", &broke.stdout);
    assert!(
        broke.stdout.contains("nobody: cooling down"),
        "{}",
        broke.stdout
    );
    let done = finish(tool(&server).args(["run", "cool", "--cooldown", "60s", "--", "true"]));
    assert_eq!(done.code, 0, "{done:?}");
    let v = json(&finish(tool(&server).args(["release", "cool", "--force", "--json"])).stdout);
    assert_eq!(v["broken"], true, "{v}");
    assert!(v["host"].is_null() && v["pid"].is_null(), "{v}");

    // A read-write lock cooling down: the library gives no mode then, so none is claimed
    // (not "mutex"), and no fencing token is stored with it.
    let done =
        finish(tool(&server).args(["run", "rw", "--read", "--cooldown", "60s", "--", "true"]));
    assert_eq!(done.code, 0, "{done:?}");
    let v = json(&finish(tool(&server).args(["status", "rw", "--json"])).stdout);
    assert!(v["mode"].is_null() && v["fencing_token"].is_null(), "{v}");
    let list = finish(tool(&server).args(["list", "rw"]));
    let row = list.stdout.lines().nth(1).unwrap_or_default().to_owned();
    assert_eq!(
        row.split_whitespace().take(4).collect::<Vec<_>>(),
        ["rw", "-", "(cooling", "down)"],
        "{}",
        list.stdout
    );

    // Just handed to a waiter, which has not written its information yet: the state a
    // handoff leaves (`lua.rs`: token, fence and an empty `info`).
    let mut redis = server.connection();
    redis::cmd("HSET")
        .arg("lock:{handed}")
        .arg(&["token", "0123456789abcdef", "fence", "7", "info", ""])
        .query::<()>(&mut redis)
        .unwrap();
    redis::cmd("PEXPIRE")
        .arg("lock:{handed}")
        .arg(60_000)
        .query::<()>(&mut redis)
        .unwrap();
    let status = finish(tool(&server).args(["status", "handed"]));
    assert_eq!(status.code, 0, "{status:?}");
    no_fake("status", &status.stdout);
    assert!(
        status.stdout.contains("handed over to a waiter"),
        "{}",
        status.stdout
    );
    let v = json(&finish(tool(&server).args(["status", "handed", "--json"])).stdout);
    assert!(v["host"].is_null() && v["pid"].is_null(), "{v}");
    assert_eq!(v["fencing_token"], 7, "{v}");
    let busy = finish(tool(&server).args(["run", "handed", "-n", "--", "true"]));
    assert_eq!(busy.code, BUSY, "{busy:?}");
    no_fake("busy", &busy.stderr);
    assert!(
        busy.stderr.contains("handed over to a waiter"),
        "{}",
        busy.stderr
    );
    let broke = finish(tool(&server).args(["release", "handed", "--force"]));
    no_fake("release", &broke.stdout);
    assert!(broke.stdout.contains("handed over"), "{}", broke.stdout);
}

/// With `--also`, the warning names the lock that was lost, not KEY.
#[test]
fn a_loss_under_also_names_the_lock_that_was_lost() {
    let server = RedisServer::start();
    let locks = client(&server);
    let ready = server.dir().join("also-ready");
    let script = format!("echo ready > {}; exec sleep 60", path_arg(&ready));
    let running = Running::start(
        tool(&server)
            .args([
                "run",
                "--kill-on-loss",
                "--ttl",
                "3s",
                "acc7",
                "--also",
                "acc9",
                "--",
            ])
            .args(sh(&script)),
    );
    assert!(wait_until(QUICK, || ready.exists()
        && held(&locks, "acc7")
        && held(&locks, "acc9")));
    let deleted: i64 = redis::cmd("DEL")
        .arg("lock:{acc9}")
        .query(&mut server.connection())
        .unwrap();
    assert_eq!(deleted, 1);
    let done = running.finish(QUICK);
    assert_eq!(done.code, LOST, "{done:?}");
    assert!(
        done.stderr.contains("lock \"acc9\" was lost"),
        "{}",
        done.stderr
    );
    assert!(
        !done.stderr.contains("lock \"acc7\" was lost"),
        "{}",
        done.stderr
    );
    assert!(!held(&locks, "acc7"), "released after the command");
}

/// A `run` inside another `run` gets only its own lock's variables: the outer handle does not
/// reach a command of an inner `--also` run (which has no handle), nor the outer key lists a
/// command of an inner single-lock run.
#[test]
fn a_run_inside_a_run_does_not_pass_the_outer_lock_on() {
    let server = RedisServer::start();
    let locks = client(&server);
    let inner = "echo \"handle=${REDIS_LOCK_HANDLE:-none}\"; \
                 \"$TOOL\" release --handle \"$REDIS_LOCK_HANDLE\"; \
                 \"$TOOL\" status outer >/dev/null && echo outer-held";
    let done = finish(
        tool(&server)
            .env("TOOL", cli_binary())
            .args(["run", "outer", "--"])
            .arg(cli_binary())
            .args(["run", "inA", "--also", "inB", "--"])
            .args(sh(inner)),
    );
    assert_eq!(done.code, 0, "{done:?}");
    assert!(done.stdout.contains("handle=none"), "{done:?}");
    assert!(
        done.stdout.contains("outer-held"),
        "the outer lock was released: {done:?}"
    );
    assert!(!done.stderr.contains("had been lost"), "{done:?}");

    let inner = "echo \"keys=${REDIS_LOCK_KEYS:-none}|${REDIS_LOCK_FENCING_TOKENS:-none}\"; \
                 test -n \"$REDIS_LOCK_HANDLE\" && echo has-handle";
    let done = finish(
        tool(&server)
            .args(["run", "outer", "--also", "other", "--"])
            .arg(cli_binary())
            .args(["run", "inner", "--"])
            .args(sh(inner)),
    );
    assert_eq!(done.code, 0, "{done:?}");
    assert!(done.stdout.contains("keys=none|none"), "{done:?}");
    assert!(done.stdout.contains("has-handle"), "{done:?}");
    for name in ["outer", "inA", "inB", "other", "inner"] {
        assert!(!held(&locks, name), "{name}");
    }
}

/// A name the library refuses ends `watch` at once with a usage error, as for `status`.
#[test]
fn watch_of_a_bad_name_is_a_usage_error_at_once() {
    let server = RedisServer::start();
    let long = "a".repeat(3000);
    for name in ["", long.as_str()] {
        let done =
            finish(tool(&server).args(["watch", name, "--interval", "20ms", "--duration", "5s"]));
        assert_eq!(done.code, USAGE, "{done:?}");
        one_line(&done.stderr);
        assert!(done.stderr.contains("key"), "{}", done.stderr);
        assert!(done.stdout.is_empty(), "{done:?}");
    }
}

/// `watch` shows a semaphore, by name and in a pattern, as `status` and `list` do.
#[test]
fn watch_shows_semaphores_by_name_and_by_pattern() {
    let server = RedisServer::start();
    let locks = client(&server);
    let exports = locks.semaphore("w-exports", 3).unwrap();
    let first = exports.acquire().unwrap();
    let _lock = locks.lock("w-lock").unwrap();
    let by_name = Running::start(tool(&server).args([
        "watch",
        "w-exports",
        "--json",
        "--interval",
        "20ms",
        "--duration",
        "60s",
    ]));
    let by_pattern = Running::start(tool(&server).args([
        "watch",
        "w-*",
        "--json",
        "--interval",
        "20ms",
        "--duration",
        "60s",
    ]));
    for running in [&by_name, &by_pattern] {
        assert!(
            has_event(running, "held", |e| e["key"] == "w-exports"
                && e["kind"] == "semaphore"
                && e["in_use"] == 1
                && e["limit"] == 3),
            "{:?} {}",
            watch_events(running),
            running.stderr()
        );
    }
    assert!(has_event(&by_pattern, "held", |e| e["key"] == "w-lock"
        && e["pid"] == std::process::id()));
    // Another client: one holding a permit cannot take a second of the same semaphore.
    let other = client(&server);
    let second = other.semaphore("w-exports", 3).unwrap().acquire().unwrap();
    for running in [&by_name, &by_pattern] {
        assert!(
            has_event(running, "permits", |e| e["in_use"] == 2),
            "{:?}",
            watch_events(running)
        );
    }
    drop((first, second));
    for running in [&by_name, &by_pattern] {
        assert!(
            has_event(running, "released", |e| e["key"] == "w-exports"
                && e["held"] == false),
            "{:?}",
            watch_events(running)
        );
        assert!(
            !running.stderr().contains("another type"),
            "{}",
            running.stderr()
        );
    }
    let text = finish(tool(&server).args(["watch", "w-exports", "--duration", "10ms"]));
    assert_eq!(text.code, 0, "{text:?}");
    assert!(text.stdout.contains("free"), "{text:?}");
}

/// `--hold-at-least 0` and `--cooldown 0` both mean none (the library's minimum hold
/// defaults to zero); neither is refused and the lock frees at once.
#[test]
fn zero_hold_at_least_and_cooldown_mean_none() {
    let server = RedisServer::start();
    let locks = client(&server);
    for flag in ["--hold-at-least", "--cooldown"] {
        let done = finish(tool(&server).args(["run", "zero", flag, "0", "--", "true"]));
        assert_eq!(done.code, 0, "{flag}: {done:?}");
        assert!(!held(&locks, "zero"), "{flag}: released at once");
    }
}

/// Every `cargo … -p NAME` in the README names a package of the workspace.
#[test]
fn readme_cargo_commands_name_real_packages() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let packages: Vec<String> = std::fs::read_dir(&root)
        .unwrap()
        .filter_map(|entry| std::fs::read_to_string(entry.ok()?.path().join("Cargo.toml")).ok())
        .filter_map(|manifest| {
            let package = manifest.split("[package]").nth(1)?;
            let line = package
                .lines()
                .find(|l| l.trim_start().starts_with("name"))?;
            Some(line.split('"').nth(1)?.to_owned())
        })
        .collect();
    let readme = std::fs::read_to_string(root.join("README.md")).unwrap();
    let named: Vec<&str> = readme
        .lines()
        .filter(|line| line.contains("cargo "))
        .flat_map(|line| line.split(" -p ").skip(1))
        .filter_map(|rest| rest.split([' ', '`']).next())
        .collect();
    assert!(named.contains(&"redis-lock-sync"), "{named:?}");
    for name in named {
        assert!(
            packages.iter().any(|p| p == name),
            "README: `-p {name}` is not a package ({packages:?})"
        );
    }
}
