//! Where one uncontended cycle's Redis time goes, per command, for the three primitives: a
//! lock (`acquire_with` + drop), a permit of a semaphore of 3 (`acquire_with` + drop) and a read
//! share (`read_lock` + drop), one thread each in turn, for `SECS` seconds per kind (2 by
//! default), against its own server.
//!
//! ```text
//! cargo run --release -p redis-lock-tests --bin cycle-cost [SECS]
//! REDIS_LOCK_SERVER_BIN=/path/to/valkey-server cargo run --release -p redis-lock-tests --bin cycle-cost
//! ```
//!
//! Per kind: cycles, wall time per cycle, this process's CPU per cycle (user + system,
//! `getrusage`), and from `INFO commandstats` (reset before each kind) the calls and `usec` of
//! every command per cycle. "top-level" adds up only what the client sends (a script's `usec`
//! already includes the commands it runs); the other lines show where inside the scripts the
//! time goes. Timing on a shared machine moves between runs: compare builds in alternation.

use std::time::{Duration, Instant};

use redis_lock::testing::RedisServer;
use redis_lock::{LockClient, LockOptions};

/// Commands the client sends itself, per kind; the rest of `commandstats` are commands its
/// scripts ran (`commandstats` cannot tell a script's `INCR` from the native path's).
fn top_level(kind: &str) -> &'static [&'static str] {
    match kind {
        "lock" => &["evalsha", "eval", "set", "incr", "delifeq", "script|load"],
        _ => &["evalsha", "eval", "script|load"],
    }
}

fn main() {
    let secs: f64 = std::env::args()
        .nth(1)
        .map_or(2.0, |s| s.parse().expect("SECS: a number of seconds"));
    let server = RedisServer::start();
    let locks = LockClient::open(&server.url()).expect("client");
    let permits = locks.semaphore("cost-permit", 3).expect("semaphore");
    let mut redis = server.connection();
    let opts = LockOptions::new();
    let cycle = |kind: &str| match kind {
        "lock" => drop(locks.acquire_with("cost-lock", &opts).expect("lock")),
        "permit" => drop(permits.acquire_with(&opts).expect("permit")),
        _ => drop(locks.read_lock("cost-read").expect("read lock")),
    };
    println!("server: {}", server_version(&mut redis));
    for kind in ["lock", "permit", "read"] {
        // Scripts loaded, connections made, the server's commands learnt.
        for _ in 0..200 {
            cycle(kind);
        }
        redis::cmd("CONFIG")
            .arg("RESETSTAT")
            .query::<()>(&mut redis)
            .expect("CONFIG RESETSTAT");
        let cpu = cpu_time();
        let start = Instant::now();
        let mut n = 0u32;
        while start.elapsed().as_secs_f64() < secs {
            cycle(kind);
            n += 1;
        }
        let wall = start.elapsed() / n;
        let cpu = (cpu_time() - cpu) / n;
        let stats = command_stats(&mut redis);
        let per = |usec: f64| usec / f64::from(n);
        let top: f64 = stats
            .iter()
            .filter(|(name, _, _)| top_level(kind).contains(&name.as_str()))
            .map(|(_, _, usec)| per(*usec))
            .sum();
        println!(
            "{kind}: {n} cycles, {:.1} us each; client cpu {:.2} us/cycle; redis exec (top-level) {top:.2} us/cycle",
            wall.as_secs_f64() * 1e6,
            cpu.as_secs_f64() * 1e6,
        );
        for (name, calls, usec) in &stats {
            println!(
                "  {name:<14} calls/cycle {:5.2}  usec/cycle {:6.2}",
                calls / f64::from(n),
                per(*usec)
            );
        }
    }
}

fn server_version(redis: &mut redis::Connection) -> String {
    let info: String = redis::cmd("INFO")
        .arg("server")
        .query(redis)
        .expect("INFO server");
    let field = |f: &str| {
        info.lines()
            .find_map(|l| l.strip_prefix(f))
            .unwrap_or("?")
            .trim()
            .to_owned()
    };
    if info.contains("valkey_version") {
        format!("valkey {}", field("valkey_version:"))
    } else {
        format!("redis {}", field("redis_version:"))
    }
}

/// `(command, calls, usec)` from `INFO commandstats`, without `INFO` and `CONFIG` themselves.
fn command_stats(redis: &mut redis::Connection) -> Vec<(String, f64, f64)> {
    let info: String = redis::cmd("INFO")
        .arg("commandstats")
        .query(redis)
        .expect("INFO commandstats");
    info.lines()
        .filter_map(|line| {
            let (name, stats) = line.strip_prefix("cmdstat_")?.split_once(':')?;
            let field = |f: &str| -> Option<f64> {
                stats
                    .split(',')
                    .find_map(|kv| kv.strip_prefix(f))?
                    .parse()
                    .ok()
            };
            Some((name.to_owned(), field("calls=")?, field("usec=")?))
        })
        .filter(|(name, _, _)| name != "info" && !name.starts_with("config"))
        .collect()
}

/// This process's user + system CPU time so far.
fn cpu_time() -> Duration {
    // SAFETY: `getrusage` fills the struct it is given; a zeroed `rusage` is a valid value.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: RUSAGE_SELF with a valid pointer to a live struct.
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut usage) };
    let tv = |t: libc::timeval| {
        Duration::from_secs(u64::try_from(t.tv_sec).unwrap_or(0))
            + Duration::from_micros(u64::try_from(t.tv_usec).unwrap_or(0))
    };
    tv(usage.ru_utime) + tv(usage.ru_stime)
}
