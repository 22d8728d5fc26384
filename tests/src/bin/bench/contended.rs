//! Contended runs: N workers (threads of one process, or processes) take one key (or one of
//! K keys, picked at random each time) in a loop, hold it for `hold` (a read-modify-write of
//! the key's counter on a second Redis inside), release it, and at once ask again. Every
//! acquisition is recorded with `CLOCK_MONOTONIC` times, so handoffs can be measured across
//! processes: per key, fences order the acquisitions. The lock side can be any deployment
//! (`threads_on`): its servers' counters are summed.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};
use std::sync::{Arc, Barrier};
use std::time::Duration;

use redis_lock::{LockClient, LockOptions, RetryStrategy};

use crate::report::{Json, f};
use crate::stats::{RedisCounters, Summary, now_ns, sleep_until_ns, summarize};

/// How waiters wait.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Mode {
    /// The default: woken by the release.
    Notify,
    /// Fair mode: strict arrival order.
    Fair,
    /// Plain retrying every 10 ms, as most lock libraries do.
    Poll10,
}

impl Mode {
    pub(crate) fn name(self) -> &'static str {
        match self {
            Mode::Notify => "notify",
            Mode::Fair => "fair",
            Mode::Poll10 => "retry-10ms",
        }
    }

    pub(crate) fn parse(s: &str) -> Option<Mode> {
        [Mode::Notify, Mode::Fair, Mode::Poll10]
            .into_iter()
            .find(|m| m.name() == s)
    }

    fn strategy(self) -> RetryStrategy {
        match self {
            Mode::Notify => RetryStrategy::notify(),
            Mode::Fair => RetryStrategy::fair(),
            Mode::Poll10 => RetryStrategy::fixed(Duration::from_millis(10)),
        }
    }
}

/// One acquisition: who, which fence, and when (ns, `CLOCK_MONOTONIC`) the worker asked,
/// got the lock, and started releasing it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Event {
    pub(crate) worker: u32,
    /// Which of the run's keys (0 when there is one).
    pub(crate) key: u32,
    pub(crate) fence: u64,
    pub(crate) call: u64,
    pub(crate) acq: u64,
    pub(crate) rel: u64,
}

/// What one worker does.
#[derive(Debug, Clone)]
pub(crate) struct Spec {
    pub(crate) counter_url: String,
    pub(crate) key: String,
    pub(crate) hold: Duration,
    pub(crate) mode: Mode,
    /// Stop asking for the lock after this instant.
    pub(crate) stop_at: u64,
    /// How many keys the workers spread over (1: `key` itself).
    pub(crate) keys: u32,
    /// Wait for this many replicas to acknowledge each acquisition (`LockOptions::replicas`).
    pub(crate) replicas: Option<u32>,
    /// A failed acquisition is counted and tried again (failover runs), not a panic.
    pub(crate) tolerate_errors: bool,
}

impl Spec {
    fn lock_name(&self, k: u32) -> String {
        if self.keys <= 1 {
            self.key.clone()
        } else {
            format!("{}-{k}", self.key)
        }
    }
}

/// The worker loop; returns its acquisitions.
pub(crate) fn work(client: &LockClient, spec: &Spec, worker: u32) -> Vec<Event> {
    work_counting_errors(client, spec, worker).0
}

/// The worker loop; returns its acquisitions and how many acquisitions failed.
pub(crate) fn work_counting_errors(
    client: &LockClient,
    spec: &Spec,
    worker: u32,
) -> (Vec<Event>, u64) {
    let mut counter = redis::Client::open(spec.counter_url.as_str())
        .unwrap()
        .get_connection()
        .unwrap();
    let names: Vec<String> = (0..spec.keys.max(1)).map(|k| spec.lock_name(k)).collect();
    let mut opts = LockOptions::new()
        .ttl(Duration::from_secs(10))
        .wait(Duration::from_secs(120))
        .retry(spec.mode.strategy());
    if let Some(n) = spec.replicas {
        opts = opts.replicas(n, Duration::from_millis(500));
    }
    let mut errors = 0u64;
    let hold = u64::try_from(spec.hold.as_nanos()).unwrap_or(u64::MAX);
    let mut events = Vec::new();
    // xorshift, seeded per worker: which key next (a spread, not a secret).
    let mut rng =
        0x9E37_79B9_7F4A_7C15u64 ^ (u64::from(worker) + 1).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    while now_ns() < spec.stop_at {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        let k = u32::try_from(rng % u64::from(spec.keys.max(1))).unwrap_or(0);
        let name = &names[k as usize];
        let counter_key = format!("{name}:counter");
        let call = now_ns();
        let guard = match client.acquire_with(name, &opts) {
            Ok(guard) => guard,
            Err(e) if spec.tolerate_errors => {
                let _ = e;
                errors += 1;
                std::thread::sleep(Duration::from_millis(5));
                continue;
            }
            Err(e) => panic!("acquiring {name}: {e}"),
        };
        let acq = now_ns();
        // A read-modify-write that loses updates unless the lock excludes the others.
        let n: Option<i64> = redis::cmd("GET")
            .arg(&counter_key)
            .query(&mut counter)
            .unwrap();
        sleep_until_ns(acq + hold);
        redis::cmd("SET")
            .arg(&counter_key)
            .arg(n.unwrap_or(0) + 1)
            .query::<()>(&mut counter)
            .unwrap();
        let rel = now_ns();
        events.push(Event {
            worker,
            key: k,
            fence: guard.fencing_token(),
            call,
            acq,
            rel,
        });
        drop(guard);
    }
    (events, errors)
}

/// Everything a run produced.
#[derive(Debug)]
pub(crate) struct Outcome {
    pub(crate) label: String,
    pub(crate) mode: Mode,
    pub(crate) workers: usize,
    pub(crate) events: Vec<Event>,
    /// Client-counted Redis requests of all workers.
    pub(crate) requests: u64,
    /// Each key's counter at the end.
    pub(crate) counters: BTreeMap<u32, i64>,
    pub(crate) before: RedisCounters,
    pub(crate) after: RedisCounters,
    /// Measurement window (after the warm-up), ns.
    pub(crate) start: u64,
    pub(crate) stop: u64,
    /// `requests`, `before` and `after` were read at the window's edges, not around the
    /// whole run (the counts per acquisition are then per acquisition measured).
    pub(crate) windowed: bool,
}

/// A lock client for a benchmark worker: the defaults, except a pool that is never the
/// bottleneck.
pub(crate) fn bench_client(url: &str) -> LockClient {
    LockClient::builder(url).build().unwrap()
}

pub(crate) fn counter_values(counter_url: &str, spec_key: &str, keys: u32) -> BTreeMap<u32, i64> {
    let mut c = redis::Client::open(counter_url)
        .unwrap()
        .get_connection()
        .unwrap();
    let spec = Spec {
        counter_url: String::new(),
        key: spec_key.to_owned(),
        hold: Duration::ZERO,
        mode: Mode::Notify,
        stop_at: 0,
        keys,
        replicas: None,
        tolerate_errors: false,
    };
    (0..keys.max(1))
        .map(|k| {
            let n = redis::cmd("GET")
                .arg(format!("{}:counter", spec.lock_name(k)))
                .query::<Option<i64>>(&mut c)
                .unwrap()
                .unwrap_or(0);
            (k, n)
        })
        .collect()
}

/// The summed counters of every server of a deployment.
fn read_all(probes: &mut [redis::Connection]) -> RedisCounters {
    RedisCounters::sum(probes.iter_mut().map(RedisCounters::read).collect())
}

const WARM_UP: Duration = Duration::from_millis(300);

/// `workers` threads sharing one client, on one key.
pub(crate) fn threads(
    url: &str,
    counter_url: &str,
    mode: Mode,
    workers: usize,
    hold: Duration,
    time: Duration,
) -> Outcome {
    let run = Run {
        label: format!("{} x{workers} threads", mode.name()),
        key: format!("threads-{}", mode.name()),
        keys: 1,
        mode,
        workers,
        hold,
        time,
        windowed: false,
    };
    threads_on(&bench_client(url), &[url.to_owned()], counter_url, &run)
}

/// A contended run on any deployment.
#[derive(Debug, Clone)]
pub(crate) struct Run {
    pub(crate) label: String,
    pub(crate) key: String,
    pub(crate) keys: u32,
    pub(crate) mode: Mode,
    pub(crate) workers: usize,
    pub(crate) hold: Duration,
    pub(crate) time: Duration,
    /// Count commands, CPU and requests within the measurement window only (steady state:
    /// without the start, where every thread attempts at once, and the drain at the end).
    pub(crate) windowed: bool,
}

/// `run.workers` threads sharing `client`; `probes`: the URLs of the deployment's servers,
/// whose command and CPU counters are summed.
pub(crate) fn threads_on(
    client: &LockClient,
    probes: &[String],
    counter_url: &str,
    run: &Run,
) -> Outcome {
    client.ping().unwrap();
    let mut probes: Vec<redis::Connection> = probes
        .iter()
        .map(|u| {
            redis::Client::open(u.as_str())
                .unwrap()
                .get_connection()
                .unwrap()
        })
        .collect();
    let workers = run.workers;
    let barrier = Arc::new(Barrier::new(workers + 1));
    let start_slot = Arc::new(std::sync::Mutex::new(0u64));
    let handles: Vec<_> = (0..workers)
        .map(|w| {
            let client = client.clone();
            let barrier = Arc::clone(&barrier);
            let start_slot = Arc::clone(&start_slot);
            let counter_url = counter_url.to_owned();
            let run = run.clone();
            std::thread::spawn(move || {
                barrier.wait();
                let stop_at = *start_slot.lock().unwrap();
                let spec = Spec {
                    counter_url,
                    key: run.key,
                    hold: run.hold,
                    mode: run.mode,
                    stop_at,
                    keys: run.keys,
                    replicas: None,
                    tolerate_errors: false,
                };
                work(&client, &spec, u32::try_from(w).unwrap())
            })
        })
        .collect();
    let before = read_all(&mut probes);
    let requests_before = client.request_count();
    let go = now_ns();
    let start = go + nanos(WARM_UP);
    let stop = start + nanos(run.time);
    *start_slot.lock().unwrap() = stop;
    barrier.wait();
    let (before, requests_before, windowed) = if run.windowed {
        sleep_until_ns(start);
        let edge = (read_all(&mut probes), client.request_count());
        sleep_until_ns(stop);
        let requests = client.request_count() - edge.1;
        (edge.0, requests, Some((read_all(&mut probes), requests)))
    } else {
        (before, requests_before, None)
    };
    let mut events = Vec::new();
    for h in handles {
        events.extend(h.join().unwrap());
    }
    let (after, requests) = windowed.unwrap_or_else(|| {
        (
            read_all(&mut probes),
            client.request_count() - requests_before,
        )
    });
    Outcome {
        label: run.label.clone(),
        mode: run.mode,
        workers,
        events,
        requests,
        counters: counter_values(counter_url, &run.key, run.keys),
        before,
        after,
        start,
        stop,
        windowed: run.windowed,
    }
}

/// `run.workers` threads sharing a new client on `url`, and the most connections Redis saw
/// open meanwhile beyond those open before (its own probes, the sampling one).
pub(crate) fn shared_client(url: &str, counter_url: &str, run: &Run) -> (Outcome, u64) {
    let mut sampler = redis::Client::open(url).unwrap().get_connection().unwrap();
    let connected = |c: &mut redis::Connection| -> u64 {
        let info: String = redis::cmd("INFO").arg("clients").query(c).unwrap();
        info.lines()
            .find_map(|l| l.strip_prefix("connected_clients:"))
            .and_then(|n| n.trim().parse().ok())
            .unwrap_or(0)
    };
    // The run's probe (one connection) is opened inside `threads_on`.
    let baseline = connected(&mut sampler) + 1;
    let done = std::sync::atomic::AtomicBool::new(false);
    std::thread::scope(|scope| {
        let most = scope.spawn(|| {
            let mut most = 0;
            while !done.load(std::sync::atomic::Ordering::Relaxed) {
                most = most.max(connected(&mut sampler));
                std::thread::sleep(Duration::from_millis(20));
            }
            most
        });
        let client = bench_client(url);
        let outcome = threads_on(&client, &[url.to_owned()], counter_url, run);
        done.store(true, std::sync::atomic::Ordering::Relaxed);
        let most = most.join().unwrap();
        (outcome, most.saturating_sub(baseline))
    })
}

fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

/// `workers` processes (this binary, `--worker`), one client each.
pub(crate) fn processes(
    url: &str,
    counter_url: &str,
    mode: Mode,
    workers: usize,
    hold: Duration,
    time: Duration,
) -> Outcome {
    let key = format!("procs-{}", mode.name());
    let exe = std::env::current_exe().unwrap();
    let mut children: Vec<_> = (0..workers)
        .map(|w| {
            Command::new(&exe)
                .args([
                    "--worker",
                    url,
                    counter_url,
                    &key,
                    &hold.as_micros().to_string(),
                    mode.name(),
                    &w.to_string(),
                ])
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .stderr(Stdio::inherit())
                .spawn()
                .unwrap()
        })
        .collect();
    let mut readers: Vec<_> = children
        .iter_mut()
        .map(|c| BufReader::new(c.stdout.take().unwrap()))
        .collect();
    for r in &mut readers {
        let mut line = String::new();
        r.read_line(&mut line).unwrap();
        assert_eq!(line.trim(), "READY", "worker did not start");
    }
    let mut probe = redis::Client::open(url).unwrap().get_connection().unwrap();
    let before = RedisCounters::read(&mut probe);
    let go = now_ns();
    let start = go + nanos(WARM_UP);
    let stop = start + nanos(time);
    for c in &mut children {
        let stdin = c.stdin.as_mut().unwrap();
        writeln!(stdin, "GO {stop}").unwrap();
        stdin.flush().unwrap();
    }
    let mut events = Vec::new();
    let mut requests = 0;
    for r in readers {
        for line in r.lines() {
            let line = line.unwrap();
            let parts: Vec<u64> = line
                .split_whitespace()
                .skip(1)
                .map(|p| p.parse().unwrap())
                .collect();
            match (line.chars().next(), parts.as_slice()) {
                (Some('E'), [worker, fence, call, acq, rel]) => events.push(Event {
                    worker: u32::try_from(*worker).unwrap(),
                    key: 0,
                    fence: *fence,
                    call: *call,
                    acq: *acq,
                    rel: *rel,
                }),
                (Some('R'), [n]) => requests += n,
                _ => panic!("unexpected worker line {line:?}"),
            }
        }
    }
    for mut c in children {
        assert!(c.wait().unwrap().success(), "a worker failed");
    }
    let after = RedisCounters::read(&mut probe);
    Outcome {
        label: format!("{} x{workers} processes", mode.name()),
        mode,
        workers,
        events,
        requests,
        counters: counter_values(counter_url, &key, 1),
        before,
        after,
        start,
        stop,
        windowed: false,
    }
}

/// Entry point of a worker process: `--worker URL COUNTER_URL KEY HOLD_US MODE ID`.
pub(crate) fn worker_main(args: &[String]) {
    let [url, counter_url, key, hold_us, mode, id] = args else {
        panic!("bad worker arguments {args:?}");
    };
    let client = bench_client(url);
    client.ping().unwrap();
    let out = std::io::stdout();
    writeln!(out.lock(), "READY").unwrap();
    out.lock().flush().unwrap();
    let mut line = String::new();
    std::io::stdin().lock().read_line(&mut line).unwrap();
    let stop_at: u64 = line
        .trim()
        .strip_prefix("GO ")
        .and_then(|s| s.parse().ok())
        .expect("GO <stop>");
    let spec = Spec {
        counter_url: counter_url.clone(),
        key: key.clone(),
        hold: Duration::from_micros(hold_us.parse().unwrap()),
        mode: Mode::parse(mode).unwrap(),
        stop_at,
        keys: 1,
        replicas: None,
        tolerate_errors: false,
    };
    let requests_before = client.request_count();
    let events = work(&client, &spec, id.parse().unwrap());
    let requests = client.request_count() - requests_before;
    let mut out = std::io::BufWriter::new(out.lock());
    for e in &events {
        writeln!(
            out,
            "E {} {} {} {} {}",
            e.worker, e.fence, e.call, e.acq, e.rel
        )
        .unwrap();
    }
    writeln!(out, "R {requests}").unwrap();
    out.flush().unwrap();
}

/// The figures of one run, for the table and the JSON.
#[derive(Debug)]
pub(crate) struct Analysis {
    pub(crate) json: Json,
    pub(crate) row: Vec<String>,
}

pub(crate) const HEADER: &[&str] = &[
    "contended (1 key)",
    "acq/s",
    "other p50 us (RT)",
    "other p99 us (RT)",
    "same p50 us",
    "same %",
    "req/acq",
    "cmds/acq",
    "exec us/acq",
    "cpu us/acq",
    "min/max",
    "wait p99.9 ms",
    "wait max ms",
    "max target ms",
    "violations",
];

/// The shared-client rows: the contended columns, and the connections open.
pub(crate) fn shared_header() -> Vec<&'static str> {
    let mut header = HEADER.to_vec();
    header[0] = "shared client";
    header.push("conns");
    header
}

fn us(ns: u64) -> f64 {
    ns as f64 / 1e3
}

pub(crate) fn analyze(o: &Outcome, rtt_us: f64) -> Analysis {
    let total = o.events.len();
    let mut violations = 0u64;
    let mut same = Vec::new();
    let mut other = Vec::new();
    let keys: std::collections::BTreeSet<u32> = o
        .events
        .iter()
        .map(|e| e.key)
        .chain(o.counters.keys().copied())
        .collect();
    for k in keys {
        let mut by_fence: Vec<Event> = o.events.iter().filter(|e| e.key == k).copied().collect();
        by_fence.sort_by_key(|e| e.fence);
        // Mutual exclusion, three ways, per key: its counter lost no update, fences are
        // unique, and no acquisition returned before the previous holder started releasing.
        if o.counters.get(&k).copied().unwrap_or(0) != i64::try_from(by_fence.len()).unwrap() {
            violations += 1;
        }
        for pair in by_fence.windows(2) {
            let (a, b) = (pair[0], pair[1]);
            if b.fence == a.fence {
                violations += 1;
                continue;
            }
            if b.acq < a.rel {
                violations += 1;
            }
            // Consecutive holders (a quorum's token may skip numbers, a server's does not);
            // a handoff only when the next one was already waiting at the release (with
            // many keys a key is often free between two holders).
            if a.call < o.start || a.rel > o.stop || b.call > a.rel {
                continue;
            }
            let h = us(b.acq.saturating_sub(a.rel));
            if a.worker == b.worker {
                same.push(h);
            } else {
                other.push(h);
            }
        }
    }
    let measured: Vec<&Event> = o
        .events
        .iter()
        .filter(|e| e.call >= o.start && e.acq <= o.stop)
        .collect();
    let mut waits: Vec<f64> = measured
        .iter()
        .map(|e| (e.acq - e.call) as f64 / 1e6)
        .collect();
    let mut holds: Vec<f64> = measured.iter().map(|e| us(e.rel - e.acq)).collect();
    let mut per_worker = BTreeMap::new();
    for e in &measured {
        *per_worker.entry(e.worker).or_insert(0u64) += 1;
    }
    let min = (0..u32::try_from(o.workers).unwrap())
        .map(|w| per_worker.get(&w).copied().unwrap_or(0))
        .min()
        .unwrap_or(0);
    let max = per_worker.values().copied().max().unwrap_or(0);
    let fairness = if max > 0 {
        min as f64 / max as f64
    } else {
        0.0
    };
    let window_s = (o.stop - o.start) as f64 / 1e9;
    let acq_per_s = measured.len() as f64 / window_s;
    let same_n = same.len();
    let other_n = other.len();
    let same = summarize(&mut same);
    let other = summarize(&mut other);
    let waits = summarize(&mut waits);
    let holds = summarize(&mut holds);
    let calls = o.after.calls_since(&o.before);
    let all_calls: u64 = calls.values().sum();
    let cpu_us = (o.after.cpu_s - o.before.cpu_s) * 1e6;
    // Command execution (top-level commands only: a script's own commands are in its time).
    let exec_us = o.after.usec_since(&o.before, &[]) as f64;
    // Windowed counts are per acquisition made within the window (a waiter's call may have
    // started before it).
    let counted = if o.windowed {
        o.events
            .iter()
            .filter(|e| e.acq >= o.start && e.acq <= o.stop)
            .count()
    } else {
        total
    };
    let per_acq = |n: f64| {
        if counted > 0 { n / counted as f64 } else { 0.0 }
    };
    let same_share = if same_n + other_n > 0 {
        100.0 * same_n as f64 / (same_n + other_n) as f64
    } else {
        0.0
    };
    let handoff = if other_n > 0 { other.p50 } else { same.p50 };
    let max_wait_target_ms = 2.0 * o.workers as f64 * (holds.mean + handoff) / 1e3;
    let rt = |x: f64| x / rtt_us;
    let summary_json = |s: &Summary, unit: &str, rtt: bool| {
        let j = Json::obj()
            .with("count", s.count)
            .with(&format!("p50_{unit}"), s.p50)
            .with(&format!("p99_{unit}"), s.p99)
            .with(&format!("p999_{unit}"), s.p999)
            .with(&format!("max_{unit}"), s.max);
        if rtt {
            j.with("p50_rt", rt(s.p50)).with("p99_rt", rt(s.p99))
        } else {
            j
        }
    };
    let json = Json::obj()
        .with("label", o.label.as_str())
        .with("mode", o.mode.name())
        .with("workers", o.workers)
        .with("window_s", window_s)
        .with("acquisitions_total", total)
        .with("acquisitions_measured", measured.len())
        .with("acquisitions_per_s", acq_per_s)
        .with("hold_mean_us", holds.mean)
        .with("handoff_other_worker", summary_json(&other, "us", true))
        .with("handoff_same_worker", summary_json(&same, "us", true))
        .with("same_worker_share_pct", same_share)
        .with("requests_per_acquisition", per_acq(o.requests as f64))
        .with("redis_commands_per_acquisition", per_acq(all_calls as f64))
        .with(
            "redis_commandstats",
            Json::Obj(
                calls
                    .iter()
                    .map(|(k, v)| (k.clone(), Json::from(*v)))
                    .collect(),
            ),
        )
        .with("redis_exec_us_per_acquisition", per_acq(exec_us))
        .with(
            "redis_commandstats_usec",
            Json::Obj(
                o.after
                    .usec
                    .iter()
                    .filter(|(name, _)| name.as_str() != "info")
                    .map(|(k, v)| (k, v - o.before.usec.get(k).copied().unwrap_or(0)))
                    .filter(|(_, v)| *v > 0)
                    .map(|(k, v)| (k.clone(), Json::from(v)))
                    .collect(),
            ),
        )
        .with("redis_cpu_us_per_acquisition", per_acq(cpu_us))
        .with("fairness_min_over_max", fairness)
        .with("acquisitions_min_worker", min)
        .with("acquisitions_max_worker", max)
        .with("wait", summary_json(&waits, "ms", false))
        .with("max_wait_target_ms", max_wait_target_ms)
        .with("counter", o.counters.values().sum::<i64>() as f64)
        .with("violations", violations);
    let row = vec![
        o.label.clone(),
        f(acq_per_s, 0),
        if other_n > 0 {
            format!("{} ({})", f(other.p50, 0), f(rt(other.p50), 1))
        } else {
            "-".into()
        },
        if other_n > 0 {
            format!("{} ({})", f(other.p99, 0), f(rt(other.p99), 1))
        } else {
            "-".into()
        },
        if same_n > 0 {
            f(same.p50, 0)
        } else {
            "-".into()
        },
        f(same_share, 1),
        f(per_acq(o.requests as f64), 2),
        f(per_acq(all_calls as f64), 1),
        f(per_acq(exec_us), 1),
        f(per_acq(cpu_us), 1),
        format!("{min}/{max}={}", f(fairness, 2)),
        f(waits.p999, 1),
        f(waits.max, 1),
        f(max_wait_target_ms, 1),
        violations.to_string(),
    ];
    Analysis { json, row }
}
