//! The semaphore under contention: `workers` threads on a semaphore of 3 permits, each holding
//! its permit for `hold`: how many permits are in use on average (the target is close to 3),
//! the handoff from a release to the waiter it wakes (in round trips), fairness, and the
//! check that no more than 3 ever held at once. Plus the uncontended permit cycle.

use std::collections::BTreeMap;
use std::sync::{Arc, Barrier};
use std::time::Duration;

use redis_lock::{LockClient, LockOptions, RetryStrategy};

use crate::report::{Json, Table, f};
use crate::stats::{RedisCounters, now_ns, summarize};

/// Permits of the benchmark's semaphore.
pub(crate) const PERMITS: u32 = 3;

/// One permit held: when its worker asked, got it and gave it back (CLOCK_MONOTONIC ns).
#[derive(Debug, Clone, Copy)]
struct Held {
    worker: usize,
    call: u64,
    acq: u64,
    rel: u64,
}

/// The figures of one contended run.
pub(crate) struct Contended {
    pub(crate) row: Vec<String>,
    pub(crate) json: Json,
}

pub(crate) const HEADER: &[&str] = &[
    "semaphore of 3",
    "acq/s",
    "in use (avg of 3)",
    "handoff p50 us (RT)",
    "handoff p99 us (RT)",
    "req/acq",
    "redis exec us/acq",
    "min/max per worker",
    "most at once",
    "violations",
];

/// `workers` threads sharing one client contend for permits of one semaphore for `time`
/// (after a 300 ms warm-up that is not counted).
pub(crate) fn contended(
    url: &str,
    fair: bool,
    workers: usize,
    hold: Duration,
    time: Duration,
    rtt_us: f64,
) -> Contended {
    let client = LockClient::builder(url).build().unwrap();
    client.ping().unwrap();
    let name = if fair { "sem-fair" } else { "sem-notify" };
    let semaphore = client.semaphore(name, PERMITS).unwrap();
    let retry = if fair {
        RetryStrategy::fair()
    } else {
        RetryStrategy::notify()
    };
    let warm_up = 300_000_000u64;
    let barrier = Arc::new(Barrier::new(workers + 1));
    let start = Arc::new(std::sync::Mutex::new((0u64, 0u64)));
    let handles: Vec<_> = (0..workers)
        .map(|w| {
            let (semaphore, barrier, start, retry) = (
                semaphore.clone(),
                Arc::clone(&barrier),
                Arc::clone(&start),
                retry.clone(),
            );
            std::thread::spawn(move || {
                barrier.wait();
                let (_, stop) = *start.lock().unwrap();
                let opts = LockOptions::new()
                    .ttl(Duration::from_secs(10))
                    .wait(Duration::from_secs(30))
                    .retry(retry);
                let mut held = Vec::new();
                while now_ns() < stop {
                    let call = now_ns();
                    let permit = semaphore.acquire_with(&opts).unwrap();
                    let acq = now_ns();
                    std::thread::sleep(hold);
                    let rel = now_ns();
                    drop(permit);
                    held.push(Held {
                        worker: w,
                        call,
                        acq,
                        rel,
                    });
                }
                held
            })
        })
        .collect();
    let requests = client.request_count();
    let mut probe = redis::Client::open(url).unwrap().get_connection().unwrap();
    let counters = RedisCounters::read(&mut probe);
    let go = now_ns();
    let (from, to) = (go + warm_up, go + warm_up + nanos(time));
    *start.lock().unwrap() = (from, to);
    barrier.wait();
    let mut all: Vec<Held> = Vec::new();
    for h in handles {
        all.extend(h.join().unwrap());
    }
    // Requests per acquisition over the whole run (warm-up included).
    let per_acq = (client.request_count() - requests) as f64 / all.len().max(1) as f64;
    // Redis's command execution per acquisition over the whole run, likewise: what the
    // single-threaded server spends between a release and the next acquisition.
    let after = RedisCounters::read(&mut probe);
    let n = all.len().max(1) as f64;
    let exec_per_acq = after.usec_since(&counters, &[]) as f64 / n;
    // Per command: calls and µs per acquisition (script-internal commands under their names).
    let commands = Json::Obj(
        after
            .calls_since(&counters)
            .into_iter()
            .map(|(name, calls)| {
                let usec = after.usec.get(&name).copied().unwrap_or(0)
                    - counters.usec.get(&name).copied().unwrap_or(0);
                let entry = Json::obj()
                    .with("calls", calls as f64 / n)
                    .with("usec", usec as f64 / n);
                (name, entry)
            })
            .collect(),
    );
    let mut c = analyze(
        &all,
        fair,
        workers,
        from,
        to,
        rtt_us,
        (per_acq, exec_per_acq),
    );
    c.json = c.json.with("redis_commands_per_acquisition", commands);
    c
}

fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

fn analyze(
    all: &[Held],
    fair: bool,
    workers: usize,
    from: u64,
    to: u64,
    rtt_us: f64,
    (per_acq, exec_per_acq): (f64, f64),
) -> Contended {
    // Permits in use over the window: the held time of every permit inside it, over its length.
    let window = (to - from) as f64;
    let in_use: f64 = all
        .iter()
        .map(|h| h.rel.min(to).saturating_sub(h.acq.max(from)) as f64)
        .sum::<f64>()
        / window;
    // The most held at once (sweep over acquisitions and releases; a release at the same
    // instant as an acquisition counts first).
    let mut edges: Vec<(u64, i32)> = all.iter().flat_map(|h| [(h.acq, 1), (h.rel, -1)]).collect();
    edges.sort();
    let (mut now, mut most) = (0i32, 0i32);
    for (_, d) in &edges {
        now += d;
        most = most.max(now);
    }
    let violations = u64::from(most > PERMITS as i32);
    // Handoff: an acquisition by a worker that was already waiting at the latest release
    // before it, measured from that release.
    let mut releases: Vec<u64> = all.iter().map(|h| h.rel).collect();
    releases.sort_unstable();
    let mut handoffs: Vec<f64> = all
        .iter()
        .filter(|h| h.call >= from && h.acq <= to)
        .filter_map(|h| {
            let i = releases.partition_point(|r| *r <= h.acq);
            let last = *releases.get(i.checked_sub(1)?)?;
            (h.call < last).then(|| (h.acq - last) as f64 / 1e3)
        })
        .collect();
    let hs = summarize(&mut handoffs);
    let mut per_worker: BTreeMap<usize, u64> = (0..workers).map(|w| (w, 0)).collect();
    let mut counted = 0u64;
    for h in all.iter().filter(|h| h.acq >= from && h.acq <= to) {
        *per_worker.entry(h.worker).or_default() += 1;
        counted += 1;
    }
    let min = per_worker.values().copied().min().unwrap_or(0);
    let max = per_worker.values().copied().max().unwrap_or(0);
    let rate = counted as f64 / (window / 1e9);
    let label = format!(
        "{} x{workers} threads",
        if fair { "fair" } else { "notify" }
    );
    let row = vec![
        label.clone(),
        f(rate, 0),
        f(in_use, 2),
        format!("{} ({})", f(hs.p50, 0), f(hs.p50 / rtt_us, 1)),
        format!("{} ({})", f(hs.p99, 0), f(hs.p99 / rtt_us, 1)),
        f(per_acq, 2),
        f(exec_per_acq, 1),
        format!("{min}/{max}"),
        most.to_string(),
        violations.to_string(),
    ];
    let json = Json::obj()
        .with("label", label)
        .with("acquisitions_per_s", rate)
        .with("permits_in_use_avg", in_use)
        .with("permits", f64::from(PERMITS))
        .with("handoff_p50_us", hs.p50)
        .with("handoff_p99_us", hs.p99)
        .with("handoff_p50_rt", hs.p50 / rtt_us)
        .with("handoff_p99_rt", hs.p99 / rtt_us)
        .with("handoffs", hs.count)
        .with("requests_per_acquisition", per_acq)
        .with("redis_exec_us_per_acquisition", exec_per_acq)
        .with("min_per_worker", min as f64)
        .with("max_per_worker", max as f64)
        .with("most_at_once", f64::from(most))
        .with("violations", violations as f64);
    Contended { row, json }
}

/// The section: contended notify and fair runs, and the uncontended permit cycle against the
/// raw baseline. Returns the text and the JSON.
pub(crate) fn run(
    url: &str,
    workers: usize,
    hold: Duration,
    time: Duration,
    short: Duration,
    rtt_us: f64,
) -> (String, Json) {
    let mut t = Table::new(HEADER);
    let mut runs = Vec::new();
    for fair in [false, true] {
        let c = contended(url, fair, workers, hold, time, rtt_us);
        eprintln!("  done: semaphore {}", if fair { "fair" } else { "notify" });
        t.row(c.row);
        runs.push(c.json);
    }
    // The permit cycle against the raw baseline in alternating slices, and the lock cycle
    // measured the same way for comparison.
    let client = crate::contended::bench_client(url);
    let permit = crate::uncontended::against_raw(url, short, |slice| {
        crate::uncontended::permit_cycles(url, &client, PERMITS, slice)
    });
    let lock = crate::uncontended::against_raw(url, short, |slice| {
        crate::uncontended::cycles(url, &client, true, slice)
    });
    let text = format!(
        "{workers} workers, hold {} us, {} s per row; handoff = a release to the acquisition of a worker that was waiting then; RT = {} us\n{}\n\n{}\n{}",
        hold.as_micros(),
        f(time.as_secs_f64(), 1),
        f(rtt_us, 1),
        t.render(),
        permit.line("permit + release (of 3)"),
        lock.line("lock + release"),
    );
    let json = Json::obj()
        .with("contended", Json::Arr(runs))
        .with("uncontended_permit", permit.json())
        .with("uncontended_lock", lock.json());
    (text, json)
}
