//! The read-write lock: a read-mostly load (95 % reads, 5 % writes) against the mutex doing
//! the same work, the writers' wait, and the uncontended read cycle against the raw baseline.

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use redis_lock::{LockClient, LockMode, LockOptions};

use crate::contended::bench_client;
use crate::report::{Json, Table, f};
use crate::stats::summarize;
use crate::uncontended::{self, Measured};

#[derive(Debug)]
pub(crate) struct RwBench {
    pub(crate) json: Json,
    pub(crate) text: String,
}

/// One row of the read-mostly load.
#[derive(Debug)]
struct Load {
    label: &'static str,
    acquisitions: u64,
    seconds: f64,
    /// How long each write waited for its lock, µs.
    write_wait_us: Vec<f64>,
    read_wait_us: Vec<f64>,
    /// Times a holder saw a writer beside anyone else (in-memory counts around each hold).
    violations: u32,
    max_readers: u32,
}

/// `workers` threads for `duration`: each operation is a write one time in 20 (staggered per
/// worker), else a read, held for `hold`. With `rw`, reads take read shares and writes the
/// write lock; without, every operation takes the mutex of another name.
fn load(url: &str, rw: bool, workers: usize, hold: Duration, duration: Duration) -> Load {
    let client = bench_client(url);
    let key = if rw { "rw-mostly" } else { "mutex-mostly" };
    let readers = Arc::new(AtomicU32::new(0));
    let writers = Arc::new(AtomicU32::new(0));
    let violations = Arc::new(AtomicU32::new(0));
    let max_readers = Arc::new(AtomicU32::new(0));
    let total = Arc::new(AtomicU64::new(0));
    let start = Instant::now();
    let stop = start + duration;
    let threads: Vec<_> = (0..workers)
        .map(|w| {
            let client = client.clone();
            let (readers, writers) = (Arc::clone(&readers), Arc::clone(&writers));
            let (violations, max_readers) = (Arc::clone(&violations), Arc::clone(&max_readers));
            let total = Arc::clone(&total);
            std::thread::spawn(move || {
                let (mut wwait, mut rwait) = (Vec::new(), Vec::new());
                let mut i = w;
                while Instant::now() < stop {
                    i += 1;
                    let write = i % 20 == 0;
                    let opts = LockOptions::new().ttl(Duration::from_secs(10));
                    let opts = match (rw, write) {
                        (false, _) => opts,
                        (true, true) => opts.mode(LockMode::Write),
                        (true, false) => opts.mode(LockMode::Read),
                    };
                    let asked = Instant::now();
                    let guard = client.acquire_with(key, &opts).unwrap();
                    let waited = asked.elapsed().as_secs_f64() * 1e6;
                    if write || !rw {
                        if writers.fetch_add(1, Ordering::SeqCst) != 0
                            || readers.load(Ordering::SeqCst) != 0
                        {
                            violations.fetch_add(1, Ordering::SeqCst);
                        }
                    } else {
                        let now = readers.fetch_add(1, Ordering::SeqCst) + 1;
                        max_readers.fetch_max(now, Ordering::SeqCst);
                        if writers.load(Ordering::SeqCst) != 0 {
                            violations.fetch_add(1, Ordering::SeqCst);
                        }
                    }
                    std::thread::sleep(hold);
                    if write || !rw {
                        writers.fetch_sub(1, Ordering::SeqCst);
                    } else {
                        readers.fetch_sub(1, Ordering::SeqCst);
                    }
                    drop(guard);
                    total.fetch_add(1, Ordering::Relaxed);
                    if write {
                        wwait.push(waited);
                    } else {
                        rwait.push(waited);
                    }
                }
                (wwait, rwait)
            })
        })
        .collect();
    let (mut write_wait_us, mut read_wait_us) = (Vec::new(), Vec::new());
    for t in threads {
        let (w, r) = t.join().unwrap();
        write_wait_us.extend(w);
        read_wait_us.extend(r);
    }
    Load {
        label: if rw {
            "read-write lock: 95 % read, 5 % write"
        } else {
            "mutex, same operations"
        },
        acquisitions: total.load(Ordering::Relaxed),
        seconds: start.elapsed().as_secs_f64(),
        write_wait_us,
        read_wait_us,
        violations: violations.load(Ordering::SeqCst),
        max_readers: max_readers.load(Ordering::SeqCst),
    }
}

/// Uncontended `read_lock` + release of one key on one thread.
fn read_cycles(url: &str, client: &LockClient, time: Duration) -> Measured {
    let opts = LockOptions::new()
        .ttl(Duration::from_secs(10))
        .mode(LockMode::Read);
    uncontended::measure(url, time, || {
        drop(client.acquire_with("uncontended-read", &opts).unwrap());
    })
}

/// The section: the two loads, then the uncontended cycles.
pub(crate) fn run(
    url: &str,
    workers: usize,
    hold: Duration,
    duration: Duration,
    short: Duration,
) -> RwBench {
    let rw = load(url, true, workers, hold, duration);
    let mutex = load(url, false, workers, hold, duration);
    let rate = |l: &Load| l.acquisitions as f64 / l.seconds;
    let speedup = rate(&rw) / rate(&mutex).max(f64::MIN_POSITIVE);
    let mut t = Table::new(&[
        "read-mostly",
        "acq/s",
        "x mutex",
        "write wait p50 us",
        "write wait p99 us",
        "read wait p99 us",
        "max readers",
        "violations",
    ]);
    let base = rate(&mutex).max(f64::MIN_POSITIVE);
    let mut rows = Vec::new();
    for l in [rw, mutex] {
        let mut w = l.write_wait_us.clone();
        let mut r = l.read_wait_us.clone();
        let (w, r) = (summarize(&mut w), summarize(&mut r));
        t.row(vec![
            l.label.to_owned(),
            f(rate(&l), 0),
            f(rate(&l) / base, 2),
            f(w.p50, 0),
            f(w.p99, 0),
            f(r.p99, 0),
            l.max_readers.to_string(),
            l.violations.to_string(),
        ]);
        rows.push(
            Json::obj()
                .with("label", l.label)
                .with("acquisitions", l.acquisitions)
                .with("per_s", rate(&l))
                .with("write_wait_p50_us", w.p50)
                .with("write_wait_p99_us", w.p99)
                .with("writes", w.count)
                .with("read_wait_p50_us", r.p50)
                .with("read_wait_p99_us", r.p99)
                .with("max_concurrent_readers", u64::from(l.max_readers))
                .with("violations", u64::from(l.violations)),
        );
    }
    // The raw baseline and the read cycle in alternating slices.
    let client = bench_client(url);
    let read = uncontended::against_raw(url, short, |slice| read_cycles(url, &client, slice));
    let text = format!(
        "{workers} workers, hold {} us, {} s per row; a write is 1 operation in 20 per worker\n{}\n{}",
        hold.as_micros(),
        f(duration.as_secs_f64(), 1),
        t.render(),
        read.line("read_lock + release"),
    );
    let json = Json::obj()
        .with("read_mostly", Json::Arr(rows))
        .with("speedup_over_mutex", speedup)
        .with("uncontended_read", read.json())
        .with("raw_baseline", uncontended::json(&read.raw));
    RwBench { json, text }
}
