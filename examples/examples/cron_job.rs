//! A cron-style job that must run once per period across machines: `#[distributed_lock]`
//! with `on_busy = "skip"` (whoever is second skips) and `hold_at_least` (the lock outlives
//! the run until the period is over, so machines whose clocks tick a little later skip too).
//!
//! Run it with `cargo run -p redis-lock-examples --example cron_job`. It uses `$REDIS_URL`,
//! or starts a throwaway `redis-server` when that is unset. Three "machines" (threads, each
//! with a lock client of its own, as separate hosts would have) tick every 250 ms, out of
//! step with each other, for 5 s; the job runs about once per 1 s period, on whichever machine
//! ticked first, and the program exits.
//!
//! For real machines, run it in two terminals against one Redis:
//! `REDIS_URL=redis://127.0.0.1:6379/ cargo run -p redis-lock-examples --example cron_job`.

use std::sync::Mutex;
use std::time::{Duration, Instant};

use redis_lock::{LockClient, distributed_lock};

const PERIOD: Duration = Duration::from_secs(1);
const TICK: Duration = Duration::from_millis(250);
const RUN_FOR: Duration = Duration::from_secs(5);

struct Machine {
    name: String,
    locks: LockClient,
}

/// When each run started, and on which machine.
static RUNS: Mutex<Vec<(Duration, String)>> = Mutex::new(Vec::new());

/// The job. Skipped (and logged at info level) while another machine holds the lock, and
/// for the rest of the period after a run: `hold_at_least` equals the period.
#[distributed_lock(
    key = "cron:report",
    on_busy = "skip",
    hold_at_least = "1s",
    ttl = 30,
    client = &machine.locks
)]
fn send_report(machine: &Machine, started: Instant) {
    let at = started.elapsed();
    println!(
        "{:>6.2} s  {} sends the report",
        at.as_secs_f64(),
        machine.name
    );
    RUNS.lock().unwrap().push((at, machine.name.clone()));
    std::thread::sleep(Duration::from_millis(100)); // the work
}

fn main() -> redis_lock::Result<()> {
    let (url, _server) = redis_lock_examples::redis_url();
    let started = Instant::now();
    let machines: Vec<_> = ["machine-a", "machine-b", "machine-c"]
        .into_iter()
        .enumerate()
        .map(|(i, name)| {
            let machine = Machine {
                name: name.to_owned(),
                locks: LockClient::builder(&url).namespace("cron-demo:").build()?,
            };
            // Each machine's scheduler: tick, run the job (or skip it), sleep, repeat.
            let offset = Duration::from_millis(70 * i as u64);
            Ok(std::thread::spawn(move || {
                std::thread::sleep(offset);
                while started.elapsed() < RUN_FOR {
                    send_report(&machine, started);
                    std::thread::sleep(TICK);
                }
            }))
        })
        .collect::<redis_lock::Result<_>>()?;
    for machine in machines {
        machine.join().expect("scheduler thread panicked");
    }

    let runs = RUNS.lock().unwrap();
    let closest = runs
        .windows(2)
        .map(|w| w[1].0.saturating_sub(w[0].0))
        .min()
        .unwrap_or_default();
    println!(
        "{} runs in {:.1} s from 3 machines ticking every {} ms; closest two runs {} ms apart \
         (period {} ms)",
        runs.len(),
        started.elapsed().as_secs_f64(),
        TICK.as_millis(),
        closest.as_millis(),
        PERIOD.as_millis()
    );
    Ok(())
}
