//! Measures what one uncontended acquisition + release costs on each deployment: requests the
//! client sent (`LockClient::request_count`) and commands the servers ran (`INFO
//! commandstats`, top-level commands only), plus the mean wall time on loopback.
//!
//! ```text
//! cargo run --release -p redis-lock-tests --bin round-trips [ITERATIONS]
//! ```
//!
//! Starts its own throwaway servers (single, master + replica + sentinels, a 3-master
//! cluster, 3 independent servers) on free loopback ports and stops them at the end.

use std::time::{Duration, Instant};

use redis_lock::testing::{RedisCluster, RedisServer, SentinelGroup};
use redis_lock::{LockClient, LockOptions};

/// Commands a client sends itself; the rest of `commandstats` are commands scripts ran.
const TOP_LEVEL: &[&str] = &[
    "evalsha",
    "eval",
    "wait",
    "blpop",
    "blmove",
    "script|load",
    "ping",
];

fn top_level_calls(servers: &[&RedisServer]) -> u64 {
    servers
        .iter()
        .map(|s| {
            let info: String = redis::cmd("INFO")
                .arg("commandstats")
                .query(&mut s.connection())
                .unwrap();
            info.lines()
                .filter_map(|l| {
                    let (name, rest) = l.strip_prefix("cmdstat_")?.split_once(":calls=")?;
                    TOP_LEVEL
                        .contains(&name)
                        .then(|| rest.split(',').next()?.parse::<u64>().ok())?
                })
                .sum::<u64>()
        })
        .sum()
}

fn measure(what: &str, locks: &LockClient, opts: &LockOptions, servers: &[&RedisServer], n: u64) {
    // Warm up: connections, script cache, cluster slot map.
    for i in 0..10 {
        locks
            .acquire_with(&format!("warm-{i}"), opts)
            .unwrap()
            .release()
            .unwrap();
    }
    let requests = locks.request_count();
    let calls = top_level_calls(servers);
    let started = Instant::now();
    for i in 0..n {
        let guard = locks.acquire_with(&format!("rt-{i}"), opts).unwrap();
        assert!(guard.release().unwrap().is_clean());
    }
    let elapsed = started.elapsed();
    let requests = locks.request_count() - requests;
    // The INFO calls themselves are not counted: they run after the measured loop.
    let calls = top_level_calls(servers) - calls;
    println!(
        "{what:<28} {:>6.2} {:>6.2} {:>9.1}",
        requests as f64 / n as f64,
        calls as f64 / n as f64,
        elapsed.as_secs_f64() * 1e6 / n as f64
    );
}

fn quick(builder: redis_lock::Builder) -> LockClient {
    builder
        .watchdog(false)
        .connect_timeout(Duration::from_millis(500))
        .io_timeout(Duration::from_millis(500))
        .build()
        .unwrap()
}

fn main() {
    let n: u64 = std::env::args()
        .nth(1)
        .map_or(1000, |a| a.parse().expect("ITERATIONS is a number"));
    println!("{n} uncontended acquire + release, watchdog off, loopback");
    println!(
        "{:<28} {:>6} {:>6} {:>9}",
        "deployment", "client", "server", "µs/pair"
    );
    let plain = LockOptions::new();

    let single = RedisServer::start();
    let locks = quick(LockClient::builder(&single.url()));
    measure("single instance", &locks, &plain, &[&single], n);

    let group = SentinelGroup::start();
    let master = group.master();
    let replica = group.replica();
    let direct = quick(LockClient::builder(&master.url()));
    let acked = LockOptions::new().replicas(1, Duration::from_secs(1));
    measure(
        "replica ack (WAIT 1)",
        &direct,
        &acked,
        &[master, replica],
        n,
    );
    let sentinel = quick(LockClient::sentinel_builder(
        SentinelGroup::MASTER_NAME,
        group.sentinel_urls(),
    ));
    measure("sentinel", &sentinel, &plain, &[master, replica], n);
    measure(
        "sentinel + WAIT 1",
        &sentinel,
        &acked,
        &[master, replica],
        n,
    );

    let cluster = RedisCluster::start(3);
    let nodes: Vec<&RedisServer> = cluster.nodes().iter().collect();
    let clustered = quick(LockClient::cluster_builder(cluster.urls()));
    measure("cluster (3 masters)", &clustered, &plain, &nodes, n);

    let three = [
        RedisServer::start(),
        RedisServer::start(),
        RedisServer::start(),
    ];
    let refs: Vec<&RedisServer> = three.iter().collect();
    let redlock = quick(LockClient::redlock_builder(three.iter().map(|s| s.url())));
    measure("redlock (3 servers)", &redlock, &plain, &refs, n);
}
