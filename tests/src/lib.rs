//! Test support shared by the end-to-end tests: throwaway Redis servers (re-exported from
//! `redis_lock::testing`), clients with short timeouts, and the `lock-holder` helper process.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use redis_lock::LockClient;
pub use redis_lock::testing::{RedisCluster, RedisServer, SentinelGroup, TcpProxy, free_port};

pub mod fenced;
pub mod holder;
pub mod soak;

/// `CLOCK_MONOTONIC` in nanoseconds: one clock for every process on this machine, so times
/// printed by different test processes can be compared.
pub fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec; CLOCK_MONOTONIC always exists on Linux.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    u64::try_from(ts.tv_sec).unwrap_or(0) * 1_000_000_000 + u64::try_from(ts.tv_nsec).unwrap_or(0)
}

/// What `inspect` showed of a holder: host, pid, acquisition time, metadata, remaining TTL.
pub type Shown = (
    Option<String>,
    Option<u32>,
    Option<std::time::SystemTime>,
    Option<String>,
    Option<Duration>,
);

/// What `inspect` shows of a lock's holder, as [`Shown`].
pub fn shown(info: &redis_lock::LockInfo) -> Shown {
    (
        info.host.clone(),
        info.pid,
        info.acquired_at,
        info.metadata.clone(),
        info.remaining_ttl,
    )
}

/// Asserts that busy or timeout error `err` names the holder `inspect` showed just before
/// (`before`) and just after (`after`) it: the same host, pid, acquisition time and metadata,
/// a remaining TTL between the two readings.
pub fn assert_names_holder(err: &redis_lock::Error, before: &Shown, after: &Shown) {
    assert!(err.is_busy(), "{err}");
    let h = err.holder().unwrap_or_else(|| panic!("a holder in {err}"));
    let named = (h.host.clone(), h.pid, h.since, h.metadata.clone());
    assert!(h.host.is_some() && h.since.is_some(), "{h:?}");
    assert_eq!(
        named,
        (before.0.clone(), before.1, before.2, before.3.clone())
    );
    assert_eq!(named, (after.0.clone(), after.1, after.2, after.3.clone()));
    let ttl = err.retry_after().expect("a remaining ttl");
    let (hi, lo) = (before.4.expect("a ttl"), after.4.expect("a ttl"));
    assert!(lo <= ttl && ttl <= hi, "{lo:?} <= {ttl:?} <= {hi:?}");
}

/// How many requests `client` sent while `f` ran, and what `f` returned.
pub fn requests<T>(client: &LockClient, f: impl FnOnce() -> T) -> (u64, T) {
    let before = client.request_count();
    let out = f();
    (client.request_count() - before, out)
}

/// A lock client for `server` with timeouts short enough for tests.
pub fn client(server: &RedisServer) -> LockClient {
    client_for(&server.url())
}

/// A lock client for `url` with timeouts short enough for tests.
pub fn client_for(url: &str) -> LockClient {
    LockClient::builder(url)
        .connect_timeout(Duration::from_millis(500))
        .pool_timeout(Duration::from_secs(2))
        .io_timeout(Duration::from_millis(500))
        .build()
        .unwrap()
}

/// [`client_for`] without loss notification: for tests that count the requests, commands or
/// connections of another feature exactly, which the notification's own (a check per lock
/// held over 2 ms, its three connections; counted in `tests/tests/notify.rs`) would blur.
pub fn client_without_notification(url: &str) -> LockClient {
    LockClient::builder(url)
        .connect_timeout(Duration::from_millis(500))
        .pool_timeout(Duration::from_secs(2))
        .io_timeout(Duration::from_millis(500))
        .loss_notification(false)
        .build()
        .unwrap()
}

/// A lock client for `cluster` with timeouts short enough for tests.
pub fn cluster_client(cluster: &RedisCluster) -> LockClient {
    LockClient::cluster_builder(cluster.urls())
        .connect_timeout(Duration::from_millis(500))
        .pool_timeout(Duration::from_secs(2))
        .io_timeout(Duration::from_millis(500))
        .build()
        .unwrap()
}

/// A lock client for the master of `group`, checking the sentinels every 100 ms.
pub fn sentinel_client(group: &SentinelGroup) -> LockClient {
    LockClient::sentinel_builder(SentinelGroup::MASTER_NAME, group.sentinel_urls())
        .sentinel_check_interval(Duration::from_millis(100))
        .connect_timeout(Duration::from_millis(500))
        .pool_timeout(Duration::from_secs(2))
        .io_timeout(Duration::from_millis(500))
        .build()
        .unwrap()
}

/// A Redlock client over `servers` with timeouts short enough for tests.
pub fn redlock_client(servers: &[&RedisServer]) -> LockClient {
    LockClient::redlock_builder(servers.iter().map(|s| s.url()))
        .connect_timeout(Duration::from_millis(300))
        .pool_timeout(Duration::from_secs(2))
        .io_timeout(Duration::from_millis(300))
        .build()
        .unwrap()
}

/// Waits (up to 5 s) until every server of a Redlock holds `name`: an acquisition returns once
/// a majority has it, and the last server's attempt may still be on its way.
pub fn held_everywhere(servers: &[RedisServer], name: &str) -> bool {
    wait_until(Duration::from_secs(5), || {
        servers.iter().all(|s| holds(s, name))
    })
}

/// Whether `server` has the lock key of `name` under the default namespace (`lock:{name}`).
pub fn holds(server: &RedisServer, name: &str) -> bool {
    redis::cmd("EXISTS")
        .arg(format!("lock:{{{name}}}"))
        .query::<i64>(&mut server.connection())
        .is_ok_and(|n| n == 1)
}

/// The owner token stored in mutex lock key `key`, whichever form the lock has: a string
/// `token \n info` (taken on the native fast path) or a hash's `token` field (taken through
/// the script). `None` when the key is absent or holds neither.
pub fn stored_token(redis: &mut redis::Connection, key: &str) -> Option<String> {
    match redis::cmd("GET").arg(key).query::<Option<String>>(redis) {
        Ok(v) => v.and_then(|v| v.split_once('\n').map(|(t, _)| t.to_owned())),
        Err(_) => redis::cmd("HGET")
            .arg(key)
            .arg("token")
            .query::<Option<String>>(redis)
            .ok()
            .flatten(),
    }
}

/// The fencing token Redis keeps for mutex lock key `key`: a hash's `fence` field, or for a
/// lock without one (taken on the native fast path) the fencing counter `key:fence`, which
/// stands for it.
pub fn stored_fence(redis: &mut redis::Connection, key: &str) -> Option<u64> {
    let field = redis::cmd("HGET")
        .arg(key)
        .arg("fence")
        .query::<Option<u64>>(redis)
        .ok()
        .flatten();
    field.or_else(|| {
        redis::cmd("GET")
            .arg(format!("{key}:fence"))
            .query::<Option<u64>>(redis)
            .ok()
            .flatten()
    })
}

/// `ZCARD key` on `server`: how many waiters are registered in `key:waiters`, queued in
/// `key:queue`, ...
pub fn zcard(server: &RedisServer, key: &str) -> usize {
    redis::cmd("ZCARD")
        .arg(key)
        .query(&mut server.connection())
        .unwrap()
}

/// `PTTL key`: the key's remaining TTL in ms (`-1` without expiry, `-2` absent).
pub fn pttl(redis: &mut redis::Connection, key: &str) -> i64 {
    redis::cmd("PTTL").arg(key).query(redis).unwrap()
}

/// Clients blocked in a command on `server` (`INFO clients`): waiters in `BLPOP`.
pub fn blocked_clients(server: &RedisServer) -> u64 {
    server
        .info_field("clients", "blocked_clients")
        .unwrap()
        .parse()
        .unwrap()
}

/// Sends the command `args` to `server` as its default (administrative) user.
pub fn admin(server: &RedisServer, args: &[&str]) -> redis::Value {
    let mut c = redis::cmd(args[0]);
    for a in &args[1..] {
        c.arg(*a);
    }
    c.query(&mut server.connection()).unwrap()
}

/// The URL of the user [`acl_user`] makes.
pub fn acl_url(server: &RedisServer) -> String {
    format!("redis://locker:locker-pass@127.0.0.1:{}/", server.port())
}

/// Makes (again) the user `locker` (password `locker-pass`, see [`acl_url`]), allowed the keys
/// `lock:*` and exactly `commands`; then a cold script cache (so `SCRIPT LOAD` is needed), no
/// keys (a script stopped half-way by a missing permission keeps what it wrote, say a lock
/// without TTL) and an empty ACL log.
pub fn acl_user(server: &RedisServer, commands: &[&str]) {
    admin(server, &["ACL", "DELUSER", "locker"]);
    // `&channel` items are channel permissions, the rest commands.
    let plus: Vec<String> = commands
        .iter()
        .map(|c| {
            if c.starts_with('&') {
                (*c).to_owned()
            } else {
                format!("+{c}")
            }
        })
        .collect();
    let mut args = vec![
        "ACL",
        "SETUSER",
        "locker",
        "on",
        ">locker-pass",
        "resetkeys",
        "~lock:*",
        "resetchannels",
        "-@all",
    ];
    args.extend(plus.iter().map(String::as_str));
    admin(server, &args);
    admin(server, &["SCRIPT", "FLUSH"]);
    admin(server, &["FLUSHALL"]);
    admin(server, &["ACL", "LOG", "RESET"]);
}

/// The commands denied (to any user) since the last `ACL LOG RESET`.
pub fn acl_denied(server: &RedisServer) -> std::collections::HashSet<String> {
    let log: Vec<Vec<redis::Value>> = redis::cmd("ACL")
        .arg("LOG")
        .query(&mut server.connection())
        .unwrap();
    let text = |v: &redis::Value| match v {
        redis::Value::BulkString(b) => String::from_utf8_lossy(b).into_owned(),
        redis::Value::SimpleString(s) => s.clone(),
        _ => String::new(),
    };
    log.iter()
        .filter_map(|entry| {
            let i = entry.iter().position(|v| text(v) == "object")?;
            Some(text(&entry[i + 1]))
        })
        .collect()
}

/// Per-command call counts (`INFO commandstats`) since the last [`reset_stats`], without the
/// `INFO` and `CONFIG` calls that read and reset them.
pub fn command_counts(redis: &mut redis::Connection) -> std::collections::BTreeMap<String, u64> {
    let info: String = redis::cmd("INFO").arg("commandstats").query(redis).unwrap();
    info.lines()
        .filter_map(|line| {
            let (name, stats) = line.strip_prefix("cmdstat_")?.split_once(':')?;
            let calls = stats.split(',').find_map(|kv| kv.strip_prefix("calls="))?;
            Some((name.to_owned(), calls.parse().ok()?))
        })
        .filter(|(name, _)| name != "info" && !name.starts_with("config"))
        .collect()
}

/// Whether the server has `DELIFEQ` (Valkey 9), with which a lock taken on the native fast
/// path is released by one native command instead of a script (`COMMAND INFO` answers a nil
/// entry for a command it does not know).
pub fn has_delifeq(redis: &mut redis::Connection) -> bool {
    let info: Vec<redis::Value> = redis::cmd("COMMAND")
        .arg("INFO")
        .arg("DELIFEQ")
        .query(redis)
        .unwrap();
    !matches!(info.first(), None | Some(redis::Value::Nil))
}

/// `CONFIG RESETSTAT`: the command counts start again from zero.
pub fn reset_stats(redis: &mut redis::Connection) {
    redis::cmd("CONFIG")
        .arg("RESETSTAT")
        .query::<()>(redis)
        .unwrap();
}

/// Polls `condition` every 5 ms until it holds or `limit` passes; returns whether it held.
pub fn wait_until(limit: Duration, mut condition: impl FnMut() -> bool) -> bool {
    let start = Instant::now();
    loop {
        if condition() {
            return true;
        }
        if start.elapsed() >= limit {
            return false;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// Starts the `lock-holder` helper (`bin` is `env!("CARGO_BIN_EXE_lock-holder")`, which only
/// integration tests can see) with `args`. Its stdin and stdout are piped: the test sends
/// commands (`check`, `release`, `exit`) and waits for its lines.
pub fn spawn_holder(bin: impl Into<PathBuf>, args: &[&str]) -> Child {
    Command::new(bin.into())
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap()
}

/// Reads lines of `child`'s stdout until one starts with `prefix` (bounded by `limit`).
pub fn read_line_starting(child: &mut Child, prefix: &str, limit: Duration) -> Option<String> {
    use std::io::BufRead;
    let stdout = child.stdout.take()?;
    let (tx, rx) = std::sync::mpsc::channel();
    let prefix = prefix.to_owned();
    std::thread::spawn(move || {
        let reader = std::io::BufReader::new(stdout);
        for line in reader.lines().map_while(Result::ok) {
            if line.starts_with(&prefix) {
                let _ = tx.send(line);
                return;
            }
        }
    });
    rx.recv_timeout(limit).ok()
}

/// Sends `signal` to `child`.
pub fn signal(child: &Child, signal: libc::c_int) {
    let pid = libc::pid_t::try_from(child.id()).unwrap();
    // SAFETY: no memory-safety preconditions; the child has not been reaped.
    unsafe {
        libc::kill(pid, signal);
    }
}

/// Threads contending for one lock in a loop (hold 1 ms), counting acquisitions, failed
/// acquisitions (tried again after 5 ms) and overlaps: a thread that gets the lock while
/// another still holds it is a mutual-exclusion violation. For fault tests: inject the
/// fault, wait for more acquisitions, stop.
#[derive(Debug)]
pub struct Contention {
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    counts: std::sync::Arc<ContentionCounts>,
    handles: Vec<std::thread::JoinHandle<()>>,
}

/// What a [`Contention`] counted.
#[derive(Debug, Default)]
pub struct ContentionCounts {
    pub acquired: std::sync::atomic::AtomicU64,
    pub errors: std::sync::atomic::AtomicU64,
    pub violations: std::sync::atomic::AtomicU64,
    holding: std::sync::atomic::AtomicU64,
}

impl Contention {
    /// `threads` threads of `client` taking `key` with `opts` until [`finish`](Self::finish).
    pub fn start(
        client: &LockClient,
        key: &str,
        opts: &redis_lock::LockOptions,
        threads: usize,
    ) -> Contention {
        use std::sync::atomic::Ordering::SeqCst;
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let counts = std::sync::Arc::new(ContentionCounts::default());
        let handles = (0..threads)
            .map(|_| {
                let (client, key, opts) = (client.clone(), key.to_owned(), opts.clone());
                let (stop, counts) = (std::sync::Arc::clone(&stop), std::sync::Arc::clone(&counts));
                std::thread::spawn(move || {
                    while !stop.load(SeqCst) {
                        match client.acquire_with(&key, &opts) {
                            Ok(guard) => {
                                if counts.holding.fetch_add(1, SeqCst) != 0 {
                                    counts.violations.fetch_add(1, SeqCst);
                                }
                                std::thread::sleep(Duration::from_millis(1));
                                counts.holding.fetch_sub(1, SeqCst);
                                counts.acquired.fetch_add(1, SeqCst);
                                drop(guard);
                            }
                            Err(_) => {
                                counts.errors.fetch_add(1, SeqCst);
                                std::thread::sleep(Duration::from_millis(5));
                            }
                        }
                    }
                })
            })
            .collect();
        Contention {
            stop,
            counts,
            handles,
        }
    }

    /// Acquisitions so far.
    pub fn acquired(&self) -> u64 {
        self.counts
            .acquired
            .load(std::sync::atomic::Ordering::SeqCst)
    }

    /// Waits until `n` more acquisitions than now have been made, at most `limit`.
    pub fn wait_for_more(&self, n: u64, limit: Duration) -> bool {
        let target = self.acquired() + n;
        wait_until(limit, || self.acquired() >= target)
    }

    /// Stops the threads and returns the counts.
    pub fn finish(self) -> std::sync::Arc<ContentionCounts> {
        self.stop.store(true, std::sync::atomic::Ordering::SeqCst);
        for h in self.handles {
            h.join().unwrap();
        }
        self.counts
    }
}

/// The commands redis-lock sends for locks, for the minimal ACL rule (SAFETY.md): `EVALSHA`
/// (and `SCRIPT LOAD` when the script cache is cold), `BLPOP` to wait, `WAIT` for replica
/// acknowledgement, `PING` for `LockClient::ping`; and the commands its scripts run (scripts
/// run with the caller's permissions). One list for every suite that checks the rule.
pub const LOCK_ACL_COMMANDS: &[&str] = &[
    "evalsha",
    "script|load",
    "blpop",
    "wait",
    "ping",
    "type",
    "time",
    "set",
    "get",
    "incr",
    "decr",
    "hset",
    "hget",
    "hmget",
    "pexpire",
    "pttl",
    "del",
    "llen",
    "rpush",
    "exists",
    "zadd",
    "zrem",
    "zrange",
    "zrangebyscore",
    "zscore",
    // Loss notification (client-side tracking): without these the library works, and finds a
    // lock changed by somebody else at its next renewal.
    "client|id",
    "client|tracking",
    "subscribe",
    "&__redis__:invalidate",
];

/// [`LOCK_ACL_COMMANDS`] without what loss notification needs.
pub fn lock_acl_without_notification() -> Vec<&'static str> {
    LOCK_ACL_COMMANDS
        .iter()
        .copied()
        .filter(|c| {
            ![
                "client|id",
                "client|tracking",
                "subscribe",
                "&__redis__:invalidate",
            ]
            .contains(c)
        })
        .collect()
}

/// A newcomer (a fresh client) takes `name`, which a release has just granted to a waiter
/// that died: it takes the grant nobody popped, well before the 1 s reservation lapses.
pub fn a_newcomer_takes_it_at_once(server: &RedisServer, name: &str) {
    let start = Instant::now();
    let g = client(server)
        .try_lock_for(name, Duration::from_secs(10))
        .unwrap();
    assert!(g.is_some());
    assert!(
        start.elapsed() < Duration::from_millis(700),
        "{:?}",
        start.elapsed()
    );
}
