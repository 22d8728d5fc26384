//! Round-trip time, the raw two-round-trip baseline, and uncontended acquire + release cycles.

use std::time::{Duration, Instant};

use redis_lock::{LockClient, LockOptions};

use crate::report::Json;
use crate::stats::{CpuScope, RedisCounters, Summary, cpu_us, summarize};

/// The plain commands a mutex cycle sends itself besides scripts: the native fast path's
/// `SET NX PX` and `INCR` (see [`RedisCounters::usec_since`]). An uncontended cycle runs no
/// script that calls either, so counting them by name counts each once.
pub(crate) const NATIVE: &[&str] = &["set", "incr"];

/// Compare-and-delete, the second round trip of the raw baseline.
const CAD: &str =
    "if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end return 0";

/// Latencies in µs of `op` run repeatedly for `time` (after a short warm-up), the client's
/// CPU µs per run (`getrusage`, around the loop only), and the Redis-side cost per run:
/// command execution µs (`INFO commandstats`) and process CPU µs (`INFO cpu`).
pub(crate) fn measure(url: &str, time: Duration, op: impl FnMut()) -> Measured {
    measure_on(&[url.to_owned()], time, &[], op)
}

/// [`measure`] of an `op` that sends plain commands `sent` (lowercase) itself besides
/// scripts: their Redis time counts too.
pub(crate) fn measure_sending(
    url: &str,
    time: Duration,
    sent: &[&str],
    op: impl FnMut(),
) -> Measured {
    measure_on(&[url.to_owned()], time, sent, op)
}

/// [`measure`] on a deployment of several servers: their counters are summed.
/// `sent`: the plain commands `op` sends itself besides scripts (see
/// [`RedisCounters::usec_since`]).
fn measure_on(urls: &[String], time: Duration, sent: &[&str], mut op: impl FnMut()) -> Measured {
    for _ in 0..200 {
        op();
    }
    let mut probes: Vec<redis::Connection> = urls
        .iter()
        .map(|u| {
            redis::Client::open(u.as_str())
                .unwrap()
                .get_connection()
                .unwrap()
        })
        .collect();
    let read = |probes: &mut Vec<redis::Connection>| {
        RedisCounters::sum(probes.iter_mut().map(RedisCounters::read).collect())
    };
    let calibrate = read(&mut probes);
    let before = read(&mut probes);
    let probe_bytes = calibrate.probe_bytes(&before);
    let mut lat = Vec::with_capacity(1 << 16);
    let (process_cpu, thread_cpu) = (cpu_us(CpuScope::Process), cpu_us(CpuScope::Thread));
    let start = Instant::now();
    while start.elapsed() < time {
        let t = Instant::now();
        op();
        lat.push(t.elapsed().as_secs_f64() * 1e6);
    }
    let process_cpu = cpu_us(CpuScope::Process) - process_cpu;
    let thread_cpu = cpu_us(CpuScope::Thread) - thread_cpu;
    let after = read(&mut probes);
    let n = lat.len().max(1) as f64;
    let (net_in, net_out) = after.net_since(&before, probe_bytes);
    let commands = after
        .calls_since(&before)
        .into_iter()
        .map(|(k, v)| (k, v as f64 / n))
        .collect();
    Measured {
        commands,
        redis_exec_us: after.usec_since(&before, sent) as f64 / n,
        redis_cpu_us: (after.cpu_s - before.cpu_s) * 1e6 / n,
        request_bytes: net_in as f64 / n,
        reply_bytes: net_out as f64 / n,
        client_cpu_us: process_cpu / n,
        client_thread_cpu_us: thread_cpu / n,
        lat: summarize(&mut lat),
    }
}

/// Client latency and Redis-side cost of one operation.
#[derive(Debug, Clone)]
pub(crate) struct Measured {
    /// Commands per operation as Redis counts them (script-internal ones included).
    pub(crate) commands: std::collections::BTreeMap<String, f64>,
    pub(crate) lat: Summary,
    pub(crate) redis_exec_us: f64,
    pub(crate) redis_cpu_us: f64,
    /// Bytes the servers read from clients per operation (`total_net_input_bytes`), the
    /// benchmark's own `INFO` readings left out.
    pub(crate) request_bytes: f64,
    /// Bytes the servers wrote to clients per operation (`total_net_output_bytes`), likewise.
    pub(crate) reply_bytes: f64,
    /// The client's CPU µs per operation, every thread of this process (`RUSAGE_SELF`): the
    /// measuring thread and whatever the operation leaves to others (renewal threads).
    pub(crate) client_cpu_us: f64,
    /// The measuring thread's own CPU µs per operation (`RUSAGE_THREAD`).
    pub(crate) client_thread_cpu_us: f64,
}

/// Cycles per second implied by a latency summary (µs).
pub(crate) fn per_second(m: &Measured) -> f64 {
    if m.lat.mean > 0.0 {
        1e6 / m.lat.mean
    } else {
        0.0
    }
}

/// `PING` round trips on one plain connection.
pub(crate) fn rtt(url: &str, time: Duration) -> Measured {
    let mut conn = redis::Client::open(url).unwrap().get_connection().unwrap();
    measure(url, time, || {
        redis::cmd("PING").query::<String>(&mut conn).unwrap();
    })
}

/// `PING` round trips after 1 ms of sleep each: what a round trip costs a thread that was
/// idle, like a waiter woken from `BLPOP` or a holder coming back from a 1 ms hold (on a busy
/// machine the thread first waits for a CPU).
pub(crate) fn rtt_after_idle(url: &str, time: Duration) -> Measured {
    let mut conn = redis::Client::open(url).unwrap().get_connection().unwrap();
    let mut lat = Vec::new();
    let start = Instant::now();
    while start.elapsed() < time {
        std::thread::sleep(Duration::from_millis(1));
        let t = Instant::now();
        redis::cmd("PING").query::<String>(&mut conn).unwrap();
        lat.push(t.elapsed().as_secs_f64() * 1e6);
    }
    Measured {
        commands: std::collections::BTreeMap::new(),
        redis_exec_us: 0.0,
        redis_cpu_us: 0.0,
        request_bytes: f64::NAN,
        reply_bytes: f64::NAN,
        // Not measured: the loop sleeps.
        client_cpu_us: f64::NAN,
        client_thread_cpu_us: f64::NAN,
        lat: summarize(&mut lat),
    }
}

/// The floor for one lock cycle: `SET NX PX`, then an `EVALSHA` compare-and-delete, on one
/// plain connection.
pub(crate) fn raw_baseline(url: &str, time: Duration) -> Measured {
    let mut conn = redis::Client::open(url).unwrap().get_connection().unwrap();
    let script = redis::Script::new(CAD);
    let mut i = 0u64;
    measure_on(&[url.to_owned()], time, &["set"], || {
        i += 1;
        let token = format!("{i:032x}");
        let ok: Option<String> = redis::cmd("SET")
            .arg("raw")
            .arg(&token)
            .arg("NX")
            .arg("PX")
            .arg(10_000)
            .query(&mut conn)
            .unwrap();
        assert!(ok.is_some(), "the raw key is never held across cycles");
        let deleted: i64 = script.key("raw").arg(&token).invoke(&mut conn).unwrap();
        assert_eq!(deleted, 1);
    })
}

/// Uncontended `lock` + release of one key on one thread.
/// Uncontended cycles on any deployment (`probes`: its servers), with the client's requests
/// per cycle.
/// `sent`: as for [`measure_on`] ([`NATIVE`] where the deployment takes the native fast
/// path, nothing on a Redlock quorum, whose scripts call `INCR` themselves).
pub(crate) fn cycles_on(
    client: &LockClient,
    probes: &[String],
    sent: &[&str],
    time: Duration,
) -> (Measured, f64) {
    let opts = LockOptions::new().ttl(Duration::from_secs(10));
    let mut n = 0u64;
    let mut requests = 0u64;
    let m = measure_on(probes, time, sent, || {
        let before = client.request_count();
        let guard = client
            .acquire_with("uncontended-deployment", &opts)
            .unwrap();
        drop(guard);
        requests += client.request_count() - before;
        n += 1;
    });
    (m, requests as f64 / n.max(1) as f64)
}

pub(crate) fn cycles(url: &str, client: &LockClient, watchdog: bool, time: Duration) -> Measured {
    let opts = LockOptions::new()
        .ttl(Duration::from_secs(10))
        .watchdog(watchdog);
    measure_on(&[url.to_owned()], time, NATIVE, || {
        let guard = client.acquire_with("uncontended", &opts).unwrap();
        drop(guard);
    })
}

/// Uncontended permit + release of a semaphore of `permits` on one thread.
pub(crate) fn permit_cycles(
    url: &str,
    client: &LockClient,
    permits: u32,
    time: Duration,
) -> Measured {
    let semaphore = client.semaphore("uncontended-semaphore", permits).unwrap();
    let opts = LockOptions::new().ttl(Duration::from_secs(10));
    measure(url, time, || {
        let permit = semaphore.acquire_with(&opts).unwrap();
        drop(permit);
    })
}

pub(crate) fn json(m: &Measured) -> Json {
    let s = &m.lat;
    Json::obj()
        .with("per_s", per_second(m))
        .with("mean_us", s.mean)
        .with("p50_us", s.p50)
        .with("p99_us", s.p99)
        .with("max_us", s.max)
        .with("samples", s.count)
        .with("redis_exec_us_per_op", m.redis_exec_us)
        .with("redis_cpu_us_per_op", m.redis_cpu_us)
        .with("request_bytes_per_op", m.request_bytes)
        .with("reply_bytes_per_op", m.reply_bytes)
        .with("client_cpu_us_per_op", m.client_cpu_us)
        .with("client_thread_cpu_us_per_op", m.client_thread_cpu_us)
        .with(
            "redis_commands_per_op",
            Json::Obj(
                m.commands
                    .iter()
                    .map(|(k, v)| (k.clone(), Json::from(*v)))
                    .collect(),
            ),
        )
}

/// Slices of [`against_raw`].
pub(crate) const ROUNDS: u32 = 5;

/// A cycle measured against the raw baseline in alternating slices, so that a change in the
/// machine's load weighs on both alike: the ratio of each pair (cycles/s and p50), and the
/// middle pair.
pub(crate) struct Alternating {
    /// Cycles/s of the cycle over the raw baseline's, per pair, sorted.
    pub(crate) by_rate: Vec<f64>,
    /// The raw baseline's p50 over the cycle's, per pair, sorted.
    pub(crate) by_p50: Vec<f64>,
    /// Redis execution per cycle over the raw baseline's, per pair, sorted.
    pub(crate) by_exec: Vec<f64>,
    /// Client CPU per cycle over the raw baseline's, per pair, sorted.
    pub(crate) by_cpu: Vec<f64>,
    pub(crate) raw: Measured,
    pub(crate) cycle: Measured,
}

/// Runs the raw baseline and `cycle` (given its slice's duration) in [`ROUNDS`] alternating
/// slices of `total / ROUNDS` each.
pub(crate) fn against_raw(
    url: &str,
    total: Duration,
    cycle: impl FnMut(Duration) -> Measured,
) -> Alternating {
    against_raw_in(url, total, ROUNDS, cycle)
}

/// [`against_raw`] in `rounds` slices (odd, so that one pair is the middle one).
pub(crate) fn against_raw_in(
    url: &str,
    total: Duration,
    rounds: u32,
    cycle: impl FnMut(Duration) -> Measured,
) -> Alternating {
    alternating(total, rounds, |slice| raw_baseline(url, slice), cycle)
}

/// `cycle` against `base` in `rounds` alternating slices (odd, so that one pair is the middle
/// one); the ratios are the cycle's over the base's.
pub(crate) fn alternating(
    total: Duration,
    rounds: u32,
    mut base: impl FnMut(Duration) -> Measured,
    mut cycle: impl FnMut(Duration) -> Measured,
) -> Alternating {
    let slice = total / rounds;
    let mut pairs: Vec<(Measured, Measured)> =
        (0..rounds).map(|_| (base(slice), cycle(slice))).collect();
    let mut by_rate: Vec<f64> = pairs
        .iter()
        .map(|(raw, c)| per_second(c) / per_second(raw))
        .collect();
    let mut by_p50: Vec<f64> = pairs
        .iter()
        .map(|(raw, c)| raw.lat.p50 / c.lat.p50)
        .collect();
    let mut by_exec: Vec<f64> = pairs
        .iter()
        .map(|(raw, c)| c.redis_exec_us / raw.redis_exec_us)
        .collect();
    let mut by_cpu: Vec<f64> = pairs
        .iter()
        .map(|(raw, c)| c.client_cpu_us / raw.client_cpu_us)
        .collect();
    by_rate.sort_by(f64::total_cmp);
    by_p50.sort_by(f64::total_cmp);
    by_exec.sort_by(f64::total_cmp);
    by_cpu.sort_by(f64::total_cmp);
    let (raw, cycle) = pairs.swap_remove(rounds as usize / 2);
    Alternating {
        by_rate,
        by_p50,
        by_exec,
        by_cpu,
        raw,
        cycle,
    }
}

impl Alternating {
    fn median(v: &[f64]) -> f64 {
        v[v.len() / 2]
    }

    /// One line: `what` against the raw baseline, the medians with their ranges, the middle
    /// slice's figures.
    pub(crate) fn line(&self, what: &str) -> String {
        self.line_against(what, "the raw SET NX PX + EVALSHA del baseline", "raw")
    }

    /// [`line`](Self::line) against another base, named `base` (and `short` in the figures).
    pub(crate) fn line_against(&self, what: &str, base: &str, short: &str) -> String {
        use crate::report::f;
        format!(
            "uncontended {what} against {base}, {} alternating slices: \
             cycles/s ratio median {} (min {}, max {}), p50 ratio median {} (min {}, max {}); middle slice: {} cycles/s, p50 {} us, p99 {} us; {short} {} cycles/s, p50 {} us",
            self.by_rate.len(),
            f(Self::median(&self.by_rate), 3),
            f(self.by_rate[0], 3),
            f(self.by_rate[self.by_rate.len() - 1], 3),
            f(Self::median(&self.by_p50), 3),
            f(self.by_p50[0], 3),
            f(self.by_p50[self.by_p50.len() - 1], 3),
            f(per_second(&self.cycle), 0),
            f(self.cycle.lat.p50, 1),
            f(self.cycle.lat.p99, 1),
            f(per_second(&self.raw), 0),
            f(self.raw.lat.p50, 1),
        )
    }

    /// One line: Redis execution and client CPU per cycle against the raw baseline's, the
    /// medians of the pairs with their ranges, and the middle pair's figures.
    pub(crate) fn cost_line(&self, what: &str) -> String {
        use crate::report::f;
        let last = |v: &[f64]| v[v.len() - 1];
        format!(
            "{what} cost against the raw baseline, same slices: redis exec per cycle ratio median {} (min {}, max {}), client cpu per cycle ratio median {} (min {}, max {}); middle slice: redis exec {} us vs {} us, client cpu {} us vs {} us",
            f(Self::median(&self.by_exec), 2),
            f(self.by_exec[0], 2),
            f(last(&self.by_exec), 2),
            f(Self::median(&self.by_cpu), 2),
            f(self.by_cpu[0], 2),
            f(last(&self.by_cpu), 2),
            f(self.cycle.redis_exec_us, 1),
            f(self.raw.redis_exec_us, 1),
            f(self.cycle.client_cpu_us, 1),
            f(self.raw.client_cpu_us, 1),
        )
    }

    /// The middle slice's cycle with the ratios, for the JSON report.
    pub(crate) fn json(&self) -> Json {
        json(&self.cycle)
            .with("ratio_to_baseline_median", Self::median(&self.by_rate))
            .with("ratio_to_baseline_min", self.by_rate[0])
            .with(
                "ratio_to_baseline_max",
                self.by_rate[self.by_rate.len() - 1],
            )
            .with("p50_ratio_to_baseline_median", Self::median(&self.by_p50))
            .with("redis_exec_ratio_median", Self::median(&self.by_exec))
            .with("client_cpu_ratio_median", Self::median(&self.by_cpu))
    }
}
