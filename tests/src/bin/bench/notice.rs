//! Loss to notice: how long after a held lock's key is changed in Redis its holder knows
//! (`is_lost()`), with many locks held and other work going on.
//!
//! One client holds `locks` locks with a 30 s TTL (the first renewal is 10 s away, so no
//! renewal finds a loss within the row); 8 other clients contend on other keys (1 ms holds)
//! the whole time. After every lock has been held long enough to be watched, the row deletes
//! one held key at a time from a separate connection (`DEL`, standing for an operator's break,
//! an eviction or a takeover) and times, on this process's clock, from just before the `DEL`
//! is sent to the lock's `on_lost` callback (which runs after `is_lost()` turned true). A
//! change not noticed within a second counts as missed.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use redis_lock::{LockClient, LockOptions, LossDetection};

use crate::contended::bench_client;
use crate::report::{Json, f};
use crate::stats::{Summary, summarize};

#[derive(Debug)]
pub(crate) struct Notice {
    pub(crate) json: Json,
    pub(crate) lines: Vec<String>,
}

/// Contending clients on other keys while the row runs.
const BUSY_WORKERS: usize = 8;
const MISSED_AFTER: Duration = Duration::from_secs(1);

pub(crate) fn run(url: &str, locks: usize, changes: usize) -> Notice {
    let holder = bench_client(url);
    let seen: Vec<Arc<Mutex<Option<Instant>>>> =
        (0..locks).map(|_| Arc::new(Mutex::new(None))).collect();
    let mut guards = Vec::with_capacity(locks);
    for (i, slot) in seen.iter().enumerate() {
        let slot = Arc::clone(slot);
        let opts = LockOptions::new()
            .ttl(Duration::from_secs(30))
            .on_lost(move |_| {
                slot.lock().unwrap().get_or_insert(Instant::now());
            });
        guards.push(holder.acquire_with(&format!("notice:{i}"), &opts).unwrap());
    }

    // Other work: contending clients on other keys.
    let stop = Arc::new(AtomicBool::new(false));
    let busy: Vec<_> = (0..BUSY_WORKERS)
        .map(|w| {
            let (url, stop) = (url.to_owned(), Arc::clone(&stop));
            std::thread::spawn(move || {
                let client = LockClient::builder(&url).build().unwrap();
                let mut cycles = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    if let Ok(g) = client.try_lock_for(
                        &format!("notice-busy:{}", w % 2),
                        Duration::from_millis(200),
                    ) && let Some(g) = g
                    {
                        std::thread::sleep(Duration::from_millis(1));
                        let _ = g.release();
                        cycles += 1;
                    }
                }
                cycles
            })
        })
        .collect();

    // Every lock watched: held well past the 2 ms after which it is.
    std::thread::sleep(Duration::from_millis(500));
    let detection = holder.loss_detection();
    let mut admin = redis::Client::open(url).unwrap().get_connection().unwrap();
    let mut took_ms = Vec::with_capacity(changes);
    let mut missed = 0usize;
    let started = Instant::now();
    for i in 0..changes.min(locks) {
        // Apart from each other: one change at a time.
        std::thread::sleep(Duration::from_millis(5));
        let sent = Instant::now();
        let _: i64 = redis::cmd("DEL")
            .arg(format!("lock:{{notice:{i}}}"))
            .query(&mut admin)
            .unwrap();
        let deadline = sent + MISSED_AFTER;
        loop {
            if let Some(at) = *seen[i].lock().unwrap() {
                took_ms.push(at.saturating_duration_since(sent).as_secs_f64() * 1e3);
                break;
            }
            if Instant::now() >= deadline {
                missed += 1;
                break;
            }
            std::thread::sleep(Duration::from_micros(200));
        }
        assert!(guards[i].is_lost() || missed > 0);
    }
    let row_s = started.elapsed().as_secs_f64();
    stop.store(true, Ordering::Relaxed);
    let busy_cycles: u64 = busy.into_iter().map(|t| t.join().unwrap_or(0)).sum();
    let still_held = guards.iter().filter(|g| !g.is_lost()).count();
    drop(guards);

    let s: Summary = summarize(&mut took_ms);
    let lines = vec![
        format!(
            "loss to notice: {} held locks, {} changes (DEL) one at a time, {BUSY_WORKERS} clients contending on other keys ({} acquisitions meanwhile); detection {detection:?}",
            locks,
            s.count + missed,
            busy_cycles
        ),
        format!(
            "  DEL sent -> on_lost: p50 {} ms, p99 {} ms, max {} ms; missed (> 1 s) {missed}; untouched locks still held {still_held} of {}",
            f(s.p50, 2),
            f(s.p99, 2),
            f(s.max, 2),
            locks - changes.min(locks)
        ),
    ];
    let json = Json::obj()
        .with("locks", locks as f64)
        .with("changes", (s.count + missed) as f64)
        .with("detection", format!("{detection:?}"))
        .with("notified", detection == LossDetection::Notified)
        .with("busy_workers", BUSY_WORKERS as f64)
        .with("busy_acquisitions", busy_cycles as f64)
        .with("notice_p50_ms", s.p50)
        .with("notice_p99_ms", s.p99)
        .with("notice_max_ms", s.max)
        .with("missed", missed as f64)
        .with("row_s", row_s);
    Notice { json, lines }
}
