//! Many locks held at once by one process: memory per held lock, the renewal load Redis sees,
//! how late renewals come (measured from outside the library), none lost, and how quickly a
//! drop frees the key.
//!
//! **Renewal lag, from outside.** The watchdog renews a lock by setting its key's TTL back to
//! `ttl`; it means to do so when a third of the TTL has passed, that is when the key's `PTTL`
//! reaches `ttl * 2/3`. A separate connection samples every key's `PTTL` (pipelined, in
//! chunks) every `ttl / 12`; each sample gives the key's expiry on this process's clock,
//! `E = sample time + PTTL`. `E` stays put between renewals and jumps when one happens; a
//! renewal at server time `r` sets `E' = r + ttl`, and it was due when the `PTTL` fell to
//! `ttl * 2/3`, at `E - ttl * 2/3`. So its lag is `(E' - ttl) - (E - ttl * 2/3) =
//! E' - E - ttl/3`: exact up to the sample's timing (half a chunk's round trip) and the
//! `PTTL`'s 1 ms resolution, however often the keys are sampled, as long as no key is renewed
//! twice between two of its samples (a jump seen after a gap of more than `ttl/3` is left out
//! and counted).

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use redis_lock::{LockOptions, LostEvent};

use crate::contended::bench_client;
use crate::report::{Json, f};
use crate::stats::{RedisCounters, Summary, rss_kib, summarize};

#[derive(Debug)]
pub(crate) struct Held {
    pub(crate) json: Json,
    pub(crate) lines: Vec<String>,
}

/// How many keys one sampling pipeline asks about.
const CHUNK: usize = 500;

/// Taking the locks stops here even if fewer than asked are held (the row stays bounded).
const ACQUIRE_LIMIT: Duration = Duration::from_secs(30);

/// The lock key of `name` under the default namespace.
fn key(name: &str) -> String {
    format!("lock:{{{name}}}")
}

/// Threads of this process (`Threads` in `/proc/self/status`).
fn threads() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("Threads:"))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0)
}

/// What the sampler saw of the held keys.
#[derive(Debug, Default)]
struct Sampled {
    /// Lag of each renewal seen, ms (negative: early).
    lags_ms: Vec<f64>,
    /// Keys seen gone (`PTTL` -2) or without a TTL (-1) while held.
    gone: usize,
    /// Renewals seen only after a gap long enough to hide a second one: left out.
    unbracketed: usize,
    /// Sampling passes over all keys.
    passes: usize,
    /// Longest gap between two samples of one key, ms.
    max_gap_ms: f64,
    /// Round trip of each sampling pipeline, ms: a sample's time is the middle of its
    /// pipeline's round trip, so half of this bounds its timing error.
    pipeline_ms: Vec<f64>,
}

/// A renewal moves the expiry by about `ttl / 3`; timing noise moves it by a few ms.
fn is_renewal(jump_ms: f64, ttl_ms: f64) -> bool {
    jump_ms > ttl_ms / 10.0
}

/// Lag of a renewal that moved a key's expiry from `before_ms` to `after_ms` (see the
/// module's doc comment).
fn renewal_lag_ms(before_ms: f64, after_ms: f64, ttl_ms: f64) -> f64 {
    after_ms - before_ms - ttl_ms / 3.0
}

/// Samples the `PTTL` of `keys` every `ttl / 12` for `watch` and works out each renewal's lag.
fn sample(
    probe: &mut redis::Connection,
    keys: &[String],
    ttl: Duration,
    watch: Duration,
) -> Sampled {
    let ttl_ms = ttl.as_secs_f64() * 1e3;
    let every = ttl / 12;
    let base = Instant::now();
    let ms = |t: Instant| t.duration_since(base).as_secs_f64() * 1e3;
    // Per key: (expiry, sample time) of its last sample, ms since `base`.
    let mut last: Vec<Option<(f64, f64)>> = vec![None; keys.len()];
    let mut gone = vec![false; keys.len()];
    let mut out = Sampled::default();
    while base.elapsed() < watch {
        let pass = Instant::now();
        for (c, chunk) in keys.chunks(CHUNK).enumerate() {
            let mut pipe = redis::pipe();
            for k in chunk {
                pipe.cmd("PTTL").arg(k);
            }
            let sent = Instant::now();
            let pttls: Vec<i64> = pipe.query(probe).expect("PTTL pipeline");
            out.pipeline_ms.push(sent.elapsed().as_secs_f64() * 1e3);
            // Each PTTL ran at some point of this round trip: take its middle.
            let at = (ms(sent) + ms(Instant::now())) / 2.0;
            for (j, pttl) in pttls.into_iter().enumerate() {
                let i = c * CHUNK + j;
                if pttl < 0 {
                    gone[i] = true;
                    continue;
                }
                let expiry = at + pttl as f64;
                if let Some((prev, prev_at)) = last[i] {
                    let gap = at - prev_at;
                    out.max_gap_ms = out.max_gap_ms.max(gap);
                    if is_renewal(expiry - prev, ttl_ms) {
                        if gap < ttl_ms / 3.0 {
                            out.lags_ms.push(renewal_lag_ms(prev, expiry, ttl_ms));
                        } else {
                            out.unbracketed += 1;
                        }
                    }
                }
                last[i] = Some((expiry, at));
            }
        }
        out.passes += 1;
        if let Some(rest) = every.checked_sub(pass.elapsed()) {
            std::thread::sleep(rest.min(watch.saturating_sub(base.elapsed())));
        }
    }
    out.gone = gone.iter().filter(|g| **g).count();
    out
}

/// Holds `n` locks (watchdog on, `ttl`) for `watch`, sampling their keys from outside, then
/// drops them one by one.
pub(crate) fn run(url: &str, n: usize, ttl: Duration, watch: Duration) -> Held {
    let row = Instant::now();
    let client = bench_client(url);
    let mut probe = redis::Client::open(url).unwrap().get_connection().unwrap();
    // Every loss the library reports: why, and when (s since the row started).
    let losses: Arc<Mutex<Vec<(String, f64)>>> = Arc::default();
    let record = Arc::clone(&losses);
    let opts = LockOptions::new().ttl(ttl).on_lost(move |e: &LostEvent| {
        let at = row.elapsed().as_secs_f64();
        record.lock().unwrap().push((e.reason.to_string(), at));
    });
    // Warm up: pool connections and one watchdog thread exist before the first reading.
    drop(client.acquire_with("held-warmup", &opts).unwrap());
    let rss_before = rss_kib();
    let threads_before = threads();
    let started = Instant::now();
    let mut guards = Vec::with_capacity(n);
    let mut stopped = None;
    for i in 0..n {
        if started.elapsed() > ACQUIRE_LIMIT {
            stopped = Some(format!("stopped after {} s", ACQUIRE_LIMIT.as_secs()));
            break;
        }
        match client.acquire_with(&format!("held-{i}"), &opts) {
            Ok(g) => guards.push(g),
            Err(e) => {
                stopped = Some(format!("acquisition {i} failed: {e}"));
                break;
            }
        }
    }
    let held = guards.len();
    let acquire_s = started.elapsed().as_secs_f64();
    let all_taken_at = row.elapsed().as_secs_f64();
    let rss_held = rss_kib();
    let threads_held = threads();
    let per_lock_kib = (rss_held.saturating_sub(rss_before)) as f64 / held.max(1) as f64;
    let keys: Vec<String> = (0..held).map(|i| key(&format!("held-{i}"))).collect();
    // Renewals as Redis counts them: every script call in the window is a renewal.
    let before = RedisCounters::read(&mut probe);
    let watch_start = Instant::now();
    let sampled = sample(&mut probe, &keys, ttl, watch);
    let watched_s = watch_start.elapsed().as_secs_f64();
    let after = RedisCounters::read(&mut probe);
    let renewals: u64 = after
        .calls_since(&before)
        .iter()
        .filter(|(k, _)| k.as_str() == "evalsha" || k.as_str() == "eval")
        .map(|(_, v)| v)
        .sum();
    let renewals_per_s = renewals as f64 / watched_s;
    let expected_per_s = held as f64 / (ttl.as_secs_f64() / 3.0);
    let lost = guards.iter().filter(|g| g.is_lost()).count();
    let losses = losses.lock().unwrap().clone();
    let lost_while_taking = losses.iter().filter(|(_, at)| *at <= all_taken_at).count();
    let mut reasons: BTreeMap<String, usize> = BTreeMap::new();
    for (why, _) in &losses {
        *reasons.entry(why.clone()).or_default() += 1;
    }
    let first_loss_s = losses.iter().map(|(_, at)| *at).fold(f64::NAN, f64::min);
    let mut lags = sampled.lags_ms.clone();
    let lag: Summary = summarize(&mut lags);
    let mut pipeline_ms = sampled.pipeline_ms.clone();
    let pipeline = summarize(&mut pipeline_ms);
    let mut drop_us = Vec::with_capacity(held);
    let mut still_there = 0;
    for (g, k) in guards.into_iter().zip(&keys) {
        let t = Instant::now();
        drop(g);
        drop_us.push(t.elapsed().as_secs_f64() * 1e6);
        let exists: bool = redis::cmd("EXISTS").arg(k).query(&mut probe).unwrap();
        still_there += usize::from(exists);
    }
    let drop_us = summarize(&mut drop_us);
    let row_s = row.elapsed().as_secs_f64();
    let json = Json::obj()
        .with("locks", n)
        .with("held", held)
        .with("stopped", stopped.clone().unwrap_or_default())
        .with("ttl_ms", ttl.as_millis() as f64)
        .with("acquire_all_s", acquire_s)
        .with("threads_before", threads_before)
        .with("threads_held", threads_held)
        .with("rss_before_kib", rss_before)
        .with("rss_held_kib", rss_held)
        .with("rss_per_held_lock_kib", per_lock_kib)
        .with("renewals_per_s", renewals_per_s)
        .with("renewals_expected_per_s", expected_per_s)
        .with("renewals_sampled", lag.count)
        .with("renewal_lag_p50_ms", lag.p50)
        .with("renewal_lag_p99_ms", lag.p99)
        .with("renewal_lag_max_ms", lag.max)
        .with("renewals_unbracketed", sampled.unbracketed)
        .with("sampling_passes", sampled.passes)
        .with("sampling_max_gap_ms", sampled.max_gap_ms)
        .with("sampling_pipeline_p99_ms", pipeline.p99)
        .with("sampling_pipeline_max_ms", pipeline.max)
        .with("lost_while_held", lost)
        .with("keys_gone_while_held", sampled.gone)
        .with("losses_reported", losses.len())
        .with("losses_before_all_taken", lost_while_taking)
        .with("first_loss_s", first_loss_s)
        .with(
            "loss_reasons",
            Json::Obj(
                reasons
                    .iter()
                    .map(|(k, v)| (k.clone(), Json::from(*v)))
                    .collect(),
            ),
        )
        .with("release_p50_us", drop_us.p50)
        .with("release_p99_us", drop_us.p99)
        .with("release_max_us", drop_us.max)
        .with("keys_left_after_drop", still_there)
        .with("row_s", row_s);
    let mut lines = vec![
        format!(
            "{held} of {n} locks held (ttl {} ms, watchdog on), taken in {} s: RSS {} KiB per held lock ({} -> {} KiB); threads {} -> {}",
            ttl.as_millis(),
            f(acquire_s, 1),
            f(per_lock_kib, 1),
            rss_before,
            rss_held,
            threads_before,
            threads_held
        ),
        format!(
            "renewals seen by Redis: {}/s (expected n / (ttl/3) = {}/s); lost while held: {lost} (guards), {} (keys seen gone)",
            f(renewals_per_s, 0),
            f(expected_per_s, 0),
            sampled.gone
        ),
        format!(
            "renewal lag (PTTL sampled from outside every {} ms, {} passes, longest gap {} ms, pipeline round trip p99 {} ms, max {} ms): p50 {} ms, p99 {} ms, max {} ms over {} renewals ({} left out)",
            (ttl / 12).as_millis(),
            sampled.passes,
            f(sampled.max_gap_ms, 0),
            f(pipeline.p99, 1),
            f(pipeline.max, 1),
            f(lag.p50, 1),
            f(lag.p99, 1),
            f(lag.max, 1),
            lag.count,
            sampled.unbracketed
        ),
        format!(
            "release (drop -> key gone): p50 {} us, p99 {} us, max {} us; keys still there after drop: {still_there}; row took {} s",
            f(drop_us.p50, 0),
            f(drop_us.p99, 0),
            f(drop_us.max, 0),
            f(row_s, 1)
        ),
    ];
    if !losses.is_empty() {
        lines.push(format!(
            "LOST: {} reported by on_lost ({lost_while_taking} before all locks were taken at {} s; the first at {} s): {reasons:?}",
            losses.len(),
            f(all_taken_at, 1),
            f(first_loss_s, 1)
        ));
    }
    if let Some(why) = stopped {
        lines.push(format!("NOT ALL LOCKS TAKEN: {why}"));
    }
    Held { json, lines }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lag_is_the_expiry_jump_less_a_third_of_the_ttl() {
        // TTL 3 s: a renewal exactly when the PTTL reaches 2 s moves the expiry by 1 s.
        assert_eq!(renewal_lag_ms(10_000.0, 11_000.0, 3000.0), 0.0);
        assert_eq!(renewal_lag_ms(10_000.0, 11_250.0, 3000.0), 250.0);
        assert_eq!(renewal_lag_ms(10_000.0, 10_900.0, 3000.0), -100.0);
    }

    #[test]
    fn timing_noise_is_not_a_renewal() {
        assert!(!is_renewal(3.0, 3000.0));
        assert!(!is_renewal(-2.0, 3000.0));
        assert!(is_renewal(1000.0, 3000.0));
    }
}
