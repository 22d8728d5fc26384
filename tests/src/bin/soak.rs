//! The heap-counting soak, long form (the benchmark's soak rows; `scripts/bench --only soak`
//! runs it): every primitive on one client shared by 16 threads, each kind alone, then the mix
//! for longer with the process's RSS read at its first and last minute.
//!
//! ```text
//! soak [--seconds S]     length of each round of a kind (default 10; 4 rounds after 2 of warm-up)
//!      [--mix-minutes M] length of the mix's RSS run (default 10)
//!      [--threads N]     threads sharing the client (default 16)
//!      [--only LIST]     kinds to run, by their position in the table (1-9)
//! ```
//!
//! Prints one row per kind: operations, live heap growth per 1,000 operations after the
//! warm-up, allocations per operation; then RSS at one minute and at the end of the mix.

use std::sync::Arc;
use std::time::{Duration, Instant};

use redis_lock::LockClient;
use redis_lock::testing::RedisServer;
use redis_lock_tests::soak::{self, Counting, Kind, World};

#[global_allocator]
static ALLOC: Counting = Counting;

fn main() {
    let mut seconds = 10.0;
    let mut mix_minutes = 10.0;
    let mut threads = 16;
    let mut only: Option<Vec<usize>> = None;
    let args: Vec<String> = std::env::args().skip(1).collect();
    let mut it = args.iter();
    while let Some(arg) = it.next() {
        let mut value = || {
            it.next()
                .unwrap_or_else(|| usage(&format!("{arg} needs a value")))
        };
        match arg.as_str() {
            "--seconds" => seconds = value().parse().unwrap_or_else(|_| usage("--seconds")),
            "--mix-minutes" => {
                mix_minutes = value().parse().unwrap_or_else(|_| usage("--mix-minutes"))
            }
            "--threads" => threads = value().parse().unwrap_or_else(|_| usage("--threads")),
            "--only" => {
                only = Some(
                    value()
                        .split(',')
                        .map(|n| n.parse().unwrap_or_else(|_| usage("--only")))
                        .collect(),
                )
            }
            _ => usage(&format!("unknown argument {arg}")),
        }
    }
    if !(seconds > 0.0 && mix_minutes >= 0.0 && (1..=256).contains(&threads)) {
        usage("out of range");
    }
    let server = RedisServer::start();
    let version = server_version(&server);
    println!(
        "soak: {threads} threads on one client, TTL 800 ms, holds of 2 ms, 40 names; {version}"
    );
    // Live heap growth per 1,000 operations after the warm-up: over all four rounds, and over
    // the rounds that started no thread and opened no connection (how many of the four).
    println!(
        "{:<32} {:>10} {:>14} {:>16} {:>10} {:>8}",
        "operation", "ops", "heap B/1k ops", "steady B/1k ops", "allocs/op", "stale"
    );
    let world = Arc::new(World::new(
        client(&server),
        "soak:",
        40,
        Duration::from_millis(2),
    ));
    for (i, kind) in Kind::ALL.iter().enumerate() {
        if only.as_ref().is_some_and(|o| !o.contains(&(i + 1))) {
            continue;
        }
        let m = soak::measure(
            &world,
            *kind,
            threads,
            (2, 4),
            Duration::from_secs_f64(seconds),
        );
        let (steady, rounds) = m.steady_growth_per_1000();
        println!(
            "{:<32} {:>10} {:>+14.1} {:>+16} {:>10.1} {:>8}",
            kind.name(),
            m.ops(),
            m.growth_per_1000(),
            format!("{steady:+.1} ({rounds}/4)"),
            m.allocs_per_op,
            m.left().watchers.saturating_sub(world.watches())
        );
        if std::env::var_os("SOAK_TRACE").is_some() {
            // One more round, recording where what it leaves behind was allocated.
            let left = soak::trace(
                || {
                    soak::round(&world, *kind, threads, Duration::from_secs_f64(seconds));
                },
                || {
                    soak::settle(&world, Duration::from_secs(5));
                },
            );
            for (bytes, count, site) in left.iter().take(6) {
                println!("  {bytes} B in {count} allocations from:\n{site}");
            }
        }
        if std::env::var_os("SOAK_DEBUG").is_some() {
            println!("  settled after warm-up {}, then {:?}", m.base, m.rounds);
        }
    }
    if mix_minutes > 0.0 {
        let total = Duration::from_secs_f64(mix_minutes * 60.0);
        let started = Instant::now();
        let mut ops = 0;
        let mut first: Option<u64> = None;
        while started.elapsed() < total {
            ops += soak::round(
                &world,
                Kind::Mix,
                threads,
                Duration::from_secs(10).min(total),
            );
            if first.is_none() && started.elapsed() >= Duration::from_secs(60).min(total) {
                first = Some(soak::rss_bytes());
            }
        }
        let (first, last) = (first.unwrap_or(0), soak::rss_bytes());
        println!(
            "mix for {:.1} min: {ops} ops; RSS {:.1} MB at 1 min, {:.1} MB at the end ({:+.1} %)",
            started.elapsed().as_secs_f64() / 60.0,
            first as f64 / 1e6,
            last as f64 / 1e6,
            (last as f64 / first.max(1) as f64 - 1.0) * 100.0
        );
    }
}

fn client(server: &RedisServer) -> LockClient {
    LockClient::builder(&server.url())
        .default_ttl(Duration::from_millis(800))
        .build()
        .expect("a client")
}

fn server_version(server: &RedisServer) -> String {
    let info: String = redis::cmd("INFO")
        .arg("server")
        .query(&mut server.connection())
        .unwrap_or_default();
    let field = |name: &str| {
        info.lines()
            .find_map(|l| l.strip_prefix(name))
            .map(|v| v.trim().to_owned())
    };
    match field("valkey_version:") {
        Some(v) => format!("Valkey {v}"),
        None => format!("Redis {}", field("redis_version:").unwrap_or_default()),
    }
}

fn usage(problem: &str) -> ! {
    eprintln!(
        "soak: {problem}\nusage: soak [--seconds S] [--mix-minutes M] [--threads N] [--only 1,2,..]"
    );
    std::process::exit(2)
}
