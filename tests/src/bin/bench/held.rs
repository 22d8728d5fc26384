//! Many locks held at once by one process: memory per held lock, the renewal load Redis sees,
//! and how quickly a drop frees the key.

use std::time::{Duration, Instant};

use redis_lock::LockOptions;

use crate::contended::bench_client;
use crate::report::{Json, f};
use crate::stats::{RedisCounters, rss_kib, summarize};

#[derive(Debug)]
pub(crate) struct Held {
    pub(crate) json: Json,
    pub(crate) lines: Vec<String>,
}

/// Holds `n` locks (watchdog on, `ttl`) for `watch`, then drops them one by one.
pub(crate) fn run(url: &str, n: usize, ttl: Duration, watch: Duration) -> Held {
    let client = bench_client(url);
    let mut probe = redis::Client::open(url).unwrap().get_connection().unwrap();
    let opts = LockOptions::new().ttl(ttl);
    // Warm up: pool connections and one watchdog thread exist before the first reading.
    drop(client.acquire_with("held-warmup", &opts).unwrap());
    let rss_before = rss_kib();
    let started = Instant::now();
    let guards: Vec<_> = (0..n)
        .map(|i| client.acquire_with(&format!("held-{i}"), &opts).unwrap())
        .collect();
    let acquire_s = started.elapsed().as_secs_f64();
    let rss_held = rss_kib();
    let per_lock_kib = (rss_held.saturating_sub(rss_before)) as f64 / n as f64;
    // Renewals as Redis counts them: every script call in the window is a renewal.
    let before = RedisCounters::read(&mut probe);
    std::thread::sleep(watch);
    let after = RedisCounters::read(&mut probe);
    let renewals: u64 = after
        .calls_since(&before)
        .iter()
        .filter(|(k, _)| k.as_str() == "evalsha" || k.as_str() == "eval")
        .map(|(_, v)| v)
        .sum();
    let renewals_per_s = renewals as f64 / watch.as_secs_f64();
    let expected_per_s = n as f64 / (ttl.as_secs_f64() / 3.0);
    let lost = guards.iter().filter(|g| g.is_lost()).count();
    let mut drop_us = Vec::with_capacity(n);
    let mut still_there = 0;
    for (i, g) in guards.into_iter().enumerate() {
        let t = Instant::now();
        drop(g);
        drop_us.push(t.elapsed().as_secs_f64() * 1e6);
        let exists: bool = redis::cmd("EXISTS")
            .arg(format!("lock:{{held-{i}}}"))
            .query(&mut probe)
            .unwrap();
        still_there += usize::from(exists);
    }
    let drop_us = summarize(&mut drop_us);
    let json = Json::obj()
        .with("locks", n)
        .with("ttl_ms", ttl.as_millis() as f64)
        .with("acquire_all_s", acquire_s)
        .with("rss_before_kib", rss_before)
        .with("rss_held_kib", rss_held)
        .with("rss_per_held_lock_kib", per_lock_kib)
        .with("renewals_per_s", renewals_per_s)
        .with("renewals_expected_per_s", expected_per_s)
        .with("lost_while_held", lost)
        .with("release_p50_us", drop_us.p50)
        .with("release_p99_us", drop_us.p99)
        .with("release_max_us", drop_us.max)
        .with("keys_left_after_drop", still_there);
    let lines = vec![
        format!(
            "{n} locks held (ttl {} ms, watchdog on): RSS {} KiB per held lock ({} -> {} KiB)",
            ttl.as_millis(),
            f(per_lock_kib, 1),
            rss_before,
            rss_held
        ),
        format!(
            "renewals seen by Redis: {}/s (expected n / (ttl/3) = {}/s); lost while held: {lost}",
            f(renewals_per_s, 0),
            f(expected_per_s, 0)
        ),
        format!(
            "release (drop -> key gone): p50 {} us, p99 {} us, max {} us; keys still there after drop: {still_there}",
            f(drop_us.p50, 0),
            f(drop_us.p99, 0),
            f(drop_us.max, 0)
        ),
    ];
    Held { json, lines }
}
