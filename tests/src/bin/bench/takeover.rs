//! Expired-lock takeover: how long after a crashed holder's lock expires a blocked waiter has
//! it.
//!
//! Each run: a holder takes a fresh key with a short TTL and the watchdog off, then forgets
//! its guard (`std::mem::forget`: no release, no renewal, as if its process had died); a
//! waiter on another client blocks in `try_lock_for` at once. The lock expires at the
//! holder's acquisition + TTL; the figure is the waiter's `try_lock_for` returning minus that
//! expiry, both on `CLOCK_MONOTONIC`. The expiry is taken from the start of the holder's
//! acquire call: Redis set the key's TTL after that, so the true expiry is no earlier and the
//! figure is an upper bound, high by at most the holder's acquire call (printed). A waiter
//! that returns before that expiry would have taken a lock that was still held: counted, must
//! be 0.

use std::time::{Duration, Instant};

use redis_lock::LockOptions;

use crate::contended::bench_client;
use crate::report::{Json, f};
use crate::stats::{now_ns, summarize};

#[derive(Debug)]
pub(crate) struct Takeover {
    pub(crate) json: Json,
    pub(crate) lines: Vec<String>,
}

/// The section stops starting runs after this, even if fewer than asked have run.
const LIMIT: Duration = Duration::from_secs(60);

/// What one run measured, ns on `CLOCK_MONOTONIC`.
#[derive(Debug, Clone, Copy)]
struct Sample {
    /// Start of the holder's acquire call.
    asked: u64,
    /// The holder's acquire call returned.
    held: u64,
    /// The waiter's `try_lock_for` returned with the lock.
    taken: u64,
}

/// How late the waiter took the lock after its expiry, ms (negative: before the expiry).
fn late_ms(s: Sample, ttl: Duration) -> f64 {
    let expiry = s.asked as f64 + ttl.as_nanos() as f64;
    (s.taken as f64 - expiry) / 1e6
}

/// `runs` takeovers of locks with `ttl`, one after another.
pub(crate) fn run(url: &str, runs: usize, ttl: Duration) -> Takeover {
    let holder = bench_client(url);
    let waiter = bench_client(url);
    let opts = LockOptions::new().ttl(ttl).watchdog(false);
    // Warm up both clients (pool connections, scripts loaded).
    drop(holder.acquire_with("takeover-warmup", &opts).unwrap());
    drop(waiter.try_lock_for("takeover-warmup", ttl).unwrap());
    let started = Instant::now();
    let mut samples = Vec::with_capacity(runs);
    let mut failed = Vec::new();
    for i in 0..runs {
        if started.elapsed() > LIMIT {
            break;
        }
        let name = format!("takeover-{i}");
        let asked = now_ns();
        let guard = holder.acquire_with(&name, &opts).unwrap();
        let held = now_ns();
        // The holder stops without releasing: no release, no watchdog (it is off).
        std::mem::forget(guard);
        let got = waiter.try_lock_for(&name, ttl * 10);
        let taken = now_ns();
        match got {
            Ok(Some(g)) => {
                drop(g);
                samples.push(Sample { asked, held, taken });
            }
            Ok(None) => failed.push(format!("run {i}: not acquired within {:?}", ttl * 10)),
            Err(e) => failed.push(format!("run {i}: {e}")),
        }
    }
    let section_s = started.elapsed().as_secs_f64();
    let before_expiry = samples.iter().filter(|s| late_ms(**s, ttl) < 0.0).count();
    let each: Vec<f64> = samples.iter().map(|s| late_ms(*s, ttl)).collect();
    let late = summarize(&mut each.clone());
    let mut acquire_us: Vec<f64> = samples
        .iter()
        .map(|s| (s.held - s.asked) as f64 / 1e3)
        .collect();
    let acquire_us = summarize(&mut acquire_us);
    let json = Json::obj()
        .with("runs", runs)
        .with("done", samples.len())
        .with("failed", failed.len())
        .with("ttl_ms", ttl.as_millis() as f64)
        .with("late_p50_ms", late.p50)
        .with("late_p99_ms", late.p99)
        .with("late_max_ms", late.max)
        .with("late_mean_ms", late.mean)
        .with("acquired_before_expiry", before_expiry)
        .with("holder_acquire_p99_us", acquire_us.p99)
        .with("section_s", section_s)
        .with(
            "late_ms_each",
            each.iter().map(|v| Json::from(*v)).collect::<Vec<_>>(),
        );
    let mut lines = vec![format!(
        "expired-lock takeover ({} of {runs} runs, ttl {} ms, watchdog off, holder forgets its guard, waiter blocked in try_lock_for): expiry -> waiter has it p50 {} ms, p99 {} ms, max {} ms; acquired before expiry: {before_expiry}; the holder's acquire call (expiry uncertainty) p99 {} us; {} s",
        samples.len(),
        ttl.as_millis(),
        f(late.p50, 1),
        f(late.p99, 1),
        f(late.max, 1),
        f(acquire_us.p99, 0),
        f(section_s, 1)
    )];
    lines.extend(failed.iter().map(|e| format!("  FAILED {e}")));
    Takeover { json, lines }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lateness_counts_from_the_start_of_the_holders_acquire_call_plus_the_ttl() {
        let ttl = Duration::from_millis(300);
        let s = Sample {
            asked: 1_000_000_000,
            held: 1_000_200_000,
            taken: 1_305_000_000,
        };
        assert_eq!(late_ms(s, ttl), 5.0);
        let early = Sample {
            taken: 1_299_000_000,
            ..s
        };
        assert_eq!(late_ms(early, ttl), -1.0);
    }
}
