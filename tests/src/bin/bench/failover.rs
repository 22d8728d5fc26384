//! Failover under load: workers contend for one key while the deployment loses a server.
//!
//! - Sentinel (replica acknowledgement on): the master is failed over (`SENTINEL FAILOVER`)
//!   a third of the way in.
//! - Redlock over 3 servers: one server is killed a third of the way in and restarted (empty)
//!   two thirds of the way in.
//!
//! Failed acquisitions are counted and retried. The figures: acquisitions before and after,
//! errors, the longest stall (the longest time without any acquisition, from the event on),
//! how long the failover took, and mutual-exclusion violations (the key's counter, unique
//! fences, no overlap), which SAFETY.md promises to be 0 for both. For Sentinel also when the
//! new master had a replica online again (the sentinels demote the old master and it resyncs;
//! "-" when not within the run): with replica acknowledgement on, no acquisition can succeed
//! before.

use std::sync::Arc;
use std::time::{Duration, Instant};

use redis_lock::LockClient;
use redis_lock::testing::{RedisServer, SentinelGroup};

use crate::contended::{Event, Mode, Spec, counter_values, work_counting_errors};
use crate::report::{Json, Table, f};
use crate::stats::now_ns;

pub(crate) struct Report {
    pub(crate) text: String,
    pub(crate) json: Json,
}

/// What one run saw.
struct Seen {
    label: &'static str,
    events: Vec<Event>,
    errors: u64,
    counter: i64,
    /// When the fault began and (for a failover) was over, ns.
    fault_at: u64,
    fault_done: u64,
    start: u64,
    stop: u64,
    /// When (ns) the new master had a replica online again, if that was watched.
    replica_back: Option<u64>,
}

/// Runs `workers` threads on `client` until `total` has passed, calling `fault` at a third
/// of the way with the start instant (it returns when its fault is over, or after injecting
/// it and waiting as it likes).
#[allow(clippy::too_many_arguments)]
fn contend(
    label: &'static str,
    client: &LockClient,
    counter_url: &str,
    workers: usize,
    hold: Duration,
    total: Duration,
    replicas: Option<u32>,
    fault: impl FnOnce(Instant),
) -> Seen {
    let key = format!("failover-{}", label.replace(' ', "-"));
    let start = now_ns();
    let stop = start + u64::try_from(total.as_nanos()).unwrap_or(u64::MAX);
    let handles: Vec<_> = (0..workers)
        .map(|w| {
            let client = client.clone();
            let spec = Spec {
                counter_url: counter_url.to_owned(),
                key: key.clone(),
                hold,
                mode: Mode::Notify,
                stop_at: stop,
                keys: 1,
                replicas,
                tolerate_errors: true,
            };
            std::thread::spawn(move || {
                work_counting_errors(&client, &spec, u32::try_from(w).unwrap())
            })
        })
        .collect();
    let began = Instant::now();
    std::thread::sleep(total / 3);
    let fault_at = now_ns();
    fault(began);
    let fault_done = now_ns();
    let mut events = Vec::new();
    let mut errors = 0;
    for h in handles {
        let (e, n) = h.join().unwrap();
        events.extend(e);
        errors += n;
    }
    let counter = counter_values(counter_url, &key, 1).values().copied().sum();
    Seen {
        label,
        events,
        errors,
        counter,
        fault_at,
        fault_done,
        start,
        stop,
        replica_back: None,
    }
}

/// Polls the server at `url` every 20 ms until `INFO replication` lists a replica online;
/// when (ns), or `None` if not by `until` (the end of the run: "-" in the table).
fn replica_online(url: &str, until: Instant) -> Option<u64> {
    let client = redis::Client::open(url).ok()?;
    while Instant::now() < until {
        let info: Option<String> = client
            .get_connection_with_timeout(Duration::from_secs(1))
            .ok()
            .and_then(|mut c| redis::cmd("INFO").arg("replication").query(&mut c).ok());
        if info.is_some_and(|i| {
            i.lines()
                .any(|l| l.starts_with("slave") && l.contains("state=online"))
        }) {
            return Some(now_ns());
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    None
}

/// Mutual-exclusion violations: the counter, unique fences, no overlap.
fn violations(s: &Seen) -> u64 {
    let mut by_fence = s.events.clone();
    by_fence.sort_by_key(|e| e.fence);
    let mut v = u64::from(s.counter != i64::try_from(by_fence.len()).unwrap_or(-1));
    for pair in by_fence.windows(2) {
        if pair[1].fence == pair[0].fence || pair[1].acq < pair[0].rel {
            v += 1;
        }
    }
    v
}

/// The longest time without an acquisition from the fault on, ms.
fn stall_ms(s: &Seen) -> f64 {
    let mut times: Vec<u64> = s
        .events
        .iter()
        .map(|e| e.acq)
        .filter(|t| *t >= s.fault_at)
        .collect();
    times.sort_unstable();
    let mut last = s.fault_at;
    let mut worst = 0;
    for t in times.iter().copied().chain([s.stop]) {
        worst = worst.max(t.saturating_sub(last));
        last = t;
    }
    worst as f64 / 1e6
}

pub(crate) fn run(counter_url: &str, workers: usize, hold: Duration, total: Duration) -> Report {
    let mut seen = Vec::new();

    // Sentinel: fail the master over; replica acknowledgement on.
    {
        let group = SentinelGroup::start();
        let mut watcher = None;
        let client =
            LockClient::sentinel_builder(SentinelGroup::MASTER_NAME, group.sentinel_urls())
                .sentinel_check_interval(Duration::from_millis(100))
                .io_timeout(Duration::from_millis(500))
                .build()
                .unwrap();
        let mut s = contend(
            "sentinel failover, replicas(1)",
            &client,
            counter_url,
            workers,
            hold,
            total,
            Some(1),
            |began| {
                group.failover();
                let url = group.master().url();
                watcher = Some(std::thread::spawn(move || {
                    replica_online(&url, began + total)
                }));
            },
        );
        s.replica_back = watcher.and_then(|w| w.join().ok()).flatten();
        seen.push(s);
    }

    // Redlock: kill one of three servers, restart it (empty) later.
    {
        let servers: Arc<std::sync::Mutex<[RedisServer; 3]>> = Arc::new(std::sync::Mutex::new([
            RedisServer::start(),
            RedisServer::start(),
            RedisServer::start(),
        ]));
        let urls: Vec<String> = servers
            .lock()
            .unwrap()
            .iter()
            .map(RedisServer::url)
            .collect();
        let client = LockClient::redlock_builder(urls)
            .connect_timeout(Duration::from_millis(200))
            .io_timeout(Duration::from_millis(500))
            .build()
            .unwrap();
        let restart = {
            let servers = Arc::clone(&servers);
            move |began: Instant| {
                servers.lock().unwrap()[2].kill();
                std::thread::sleep(
                    (began + total * 2 / 3).saturating_duration_since(Instant::now()),
                );
                servers.lock().unwrap()[2].restart();
            }
        };
        let mut s = contend(
            "redlock, 1 of 3 killed + restarted",
            &client,
            counter_url,
            workers,
            hold,
            total,
            None,
            restart,
        );
        // The fault is the kill; it is "over" at once (the restart is part of the run).
        s.fault_done = s.fault_at;
        seen.push(s);
    }

    let mut t = Table::new(&[
        "failover under load",
        "acq before",
        "acq after",
        "errors",
        "failover ms",
        "stall ms",
        "replica back ms",
        "violations",
    ]);
    let mut json = Vec::new();
    for s in &seen {
        let before = s.events.iter().filter(|e| e.acq < s.fault_at).count();
        let after = s.events.len() - before;
        let failover_ms = (s.fault_done - s.fault_at) as f64 / 1e6;
        let stall = stall_ms(s);
        let v = violations(s);
        let back_ms = s
            .replica_back
            .map(|t| t.saturating_sub(s.fault_at) as f64 / 1e6);
        t.row(vec![
            s.label.to_owned(),
            before.to_string(),
            after.to_string(),
            s.errors.to_string(),
            f(failover_ms, 0),
            f(stall, 0),
            back_ms.map_or_else(|| "-".to_owned(), |ms| f(ms, 0)),
            v.to_string(),
        ]);
        json.push(
            Json::obj()
                .with("run", s.label)
                .with("acquisitions_before", before)
                .with("acquisitions_after", after)
                .with("errors", s.errors)
                .with("failover_ms", failover_ms)
                .with("stall_ms", stall)
                .with("replica_back_ms", back_ms.unwrap_or(f64::NAN))
                .with("window_s", (s.stop - s.start) as f64 / 1e9)
                .with("violations", v),
        );
    }
    Report {
        text: format!(
            "\nFailover under load: {workers} threads (notify), hold {} us, {} s per run; the fault a third of the way in\n{}",
            hold.as_micros(),
            f(total.as_secs_f64(), 0),
            t.render()
        ),
        json: Json::Arr(json),
    }
}
