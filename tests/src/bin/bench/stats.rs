//! Clock, percentiles and what Redis says about itself (`INFO commandstats`, `INFO cpu`).

use std::collections::BTreeMap;
use std::time::Duration;

/// `CLOCK_MONOTONIC` in nanoseconds: the same clock in every process on this machine, so
/// events recorded by worker processes can be ordered against each other.
pub(crate) fn now_ns() -> u64 {
    redis_lock_tests::monotonic_ns()
}

/// Sleeps until `CLOCK_MONOTONIC` reaches `at_ns`.
pub(crate) fn sleep_until_ns(at_ns: u64) {
    let now = now_ns();
    if at_ns > now {
        std::thread::sleep(Duration::from_nanos(at_ns - now));
    }
}

/// Percentiles of a sample, in the sample's unit.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Summary {
    pub(crate) count: usize,
    pub(crate) mean: f64,
    pub p50: f64,
    pub p99: f64,
    pub p999: f64,
    pub(crate) max: f64,
}

/// Nearest-rank percentiles of `values` (sorted in place).
pub(crate) fn summarize(values: &mut [f64]) -> Summary {
    if values.is_empty() {
        return Summary::default();
    }
    values.sort_by(f64::total_cmp);
    let rank = |q: f64| {
        let i = ((q * values.len() as f64).ceil() as usize).clamp(1, values.len()) - 1;
        values[i]
    };
    Summary {
        count: values.len(),
        mean: values.iter().sum::<f64>() / values.len() as f64,
        p50: rank(0.50),
        p99: rank(0.99),
        p999: rank(0.999),
        max: values[values.len() - 1],
    }
}

/// A snapshot of the counters Redis keeps about itself.
#[derive(Debug, Clone, Default)]
pub(crate) struct RedisCounters {
    /// Calls per command (`INFO commandstats`), commands run inside scripts included.
    pub(crate) calls: BTreeMap<String, u64>,
    /// Microseconds Redis spent executing each command (`usec` in `INFO commandstats`).
    pub(crate) usec: BTreeMap<String, u64>,
    /// `used_cpu_sys + used_cpu_user` of the server process, seconds.
    pub(crate) cpu_s: f64,
    /// Bytes the server has read from clients (`total_net_input_bytes` in `INFO stats`).
    pub(crate) net_in: u64,
    /// Bytes the server has written to clients (`total_net_output_bytes`).
    pub(crate) net_out: u64,
}

impl RedisCounters {
    /// The counters of several servers, added up (a deployment of several).
    pub(crate) fn sum(all: Vec<RedisCounters>) -> RedisCounters {
        let mut total = RedisCounters::default();
        for c in all {
            for (k, v) in c.calls {
                *total.calls.entry(k).or_default() += v;
            }
            for (k, v) in c.usec {
                *total.usec.entry(k).or_default() += v;
            }
            total.cpu_s += c.cpu_s;
            total.net_in += c.net_in;
            total.net_out += c.net_out;
        }
        total
    }

    pub(crate) fn read(conn: &mut redis::Connection) -> RedisCounters {
        let text: String = redis::cmd("INFO")
            .arg("commandstats")
            .query(conn)
            .expect("INFO commandstats");
        let mut calls = BTreeMap::new();
        let mut usec = BTreeMap::new();
        for line in text.lines() {
            // cmdstat_evalsha:calls=12,usec=34,...
            let Some(rest) = line.strip_prefix("cmdstat_") else {
                continue;
            };
            let Some((name, fields)) = rest.split_once(':') else {
                continue;
            };
            let n = fields
                .split(',')
                .find_map(|f| f.strip_prefix("calls="))
                .and_then(|v| v.parse().ok())
                .unwrap_or(0);
            calls.insert(name.to_owned(), n);
            let u = fields
                .split(',')
                .find_map(|f| f.strip_prefix("usec="))
                .and_then(|v| v.parse().ok())
                .unwrap_or(0);
            usec.insert(name.to_owned(), u);
        }
        let text: String = redis::cmd("INFO").arg("cpu").query(conn).expect("INFO cpu");
        let field = |name: &str| -> f64 {
            text.lines()
                .find_map(|l| l.strip_prefix(name)?.strip_prefix(':'))
                .and_then(|v| v.trim().parse().ok())
                .unwrap_or(0.0)
        };
        let cpu_s = field("used_cpu_sys") + field("used_cpu_user");
        // Last, so that the traffic of the two `INFO`s above is between this reading and the
        // previous one, like the traffic being measured: see `net_since`.
        let text: String = redis::cmd("INFO")
            .arg("stats")
            .query(conn)
            .expect("INFO stats");
        let bytes = |name: &str| -> u64 {
            text.lines()
                .find_map(|l| l.strip_prefix(name)?.strip_prefix(':'))
                .and_then(|v| v.trim().parse().ok())
                .unwrap_or(0)
        };
        RedisCounters {
            calls,
            usec,
            cpu_s,
            net_in: bytes("total_net_input_bytes"),
            net_out: bytes("total_net_output_bytes"),
        }
    }

    /// Bytes (in, out) the server read and wrote between `before` and `self`, less `probe`:
    /// the bytes one reading costs by itself (see [`RedisCounters::probe_bytes`]).
    pub(crate) fn net_since(&self, before: &RedisCounters, probe: (u64, u64)) -> (u64, u64) {
        (
            (self.net_in - before.net_in).saturating_sub(probe.0),
            (self.net_out - before.net_out).saturating_sub(probe.1),
        )
    }

    /// The traffic of one reading by itself (its three `INFO` requests and replies), from
    /// two readings in a row with nothing else going on: `later` taken right after `self`.
    /// A reading's replies grow a little as Redis lists more commands, so this is exact to
    /// within a few dozen bytes per row.
    pub(crate) fn probe_bytes(&self, later: &RedisCounters) -> (u64, u64) {
        (later.net_in - self.net_in, later.net_out - self.net_out)
    }

    /// Microseconds of command execution between `before` and `self`, counted once: only the
    /// commands clients send. An `EVALSHA`'s `usec` already includes the commands its script
    /// runs, and Redis counts those again under their own names, so adding every line of
    /// `INFO commandstats` counts a script's work twice. `sent` names the plain commands the
    /// measured clients send themselves beyond scripts and waits (the raw baseline's `SET`):
    /// `GET` and `SET` also run inside scripts, so they count only where a row sends them.
    pub(crate) fn usec_since(&self, before: &RedisCounters, sent: &[&str]) -> u64 {
        const TOP_LEVEL: [&str; 9] = [
            "evalsha", "eval", "script", "blpop", "blmove", "ping", "wait", "waitaof", "scan",
        ];
        self.usec
            .iter()
            .filter(|(name, _)| TOP_LEVEL.contains(&name.as_str()) || sent.contains(&name.as_str()))
            .map(|(name, n)| n - before.usec.get(name).copied().unwrap_or(0))
            .sum()
    }

    /// Calls made between `before` and `self`, per command, leaving out `INFO` (our own
    /// probes) and commands with no calls.
    pub(crate) fn calls_since(&self, before: &RedisCounters) -> BTreeMap<String, u64> {
        self.calls
            .iter()
            .filter(|(name, _)| name.as_str() != "info")
            .map(|(name, n)| {
                (
                    name.clone(),
                    n - before.calls.get(name).copied().unwrap_or(0),
                )
            })
            .filter(|(_, n)| *n > 0)
            .collect()
    }
}

/// Resident memory of this process, KiB (`VmRSS` in `/proc/self/status`).
pub(crate) fn rss_kib() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0)
}

/// Which threads [`cpu_us`] counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum CpuScope {
    /// The whole process, every thread (`RUSAGE_SELF`): the measuring thread, renewal
    /// threads, the pool's and Redlock's background threads. Child processes (the
    /// `redis-server`s this benchmark starts) are not counted.
    Process,
    /// The calling thread only (`RUSAGE_THREAD`).
    Thread,
}

/// CPU time (user + system) used so far, µs, by `scope` (`getrusage`).
pub(crate) fn cpu_us(scope: CpuScope) -> f64 {
    let who = match scope {
        CpuScope::Process => libc::RUSAGE_SELF,
        CpuScope::Thread => libc::RUSAGE_THREAD,
    };
    // SAFETY: an all-zero `rusage` is a valid value (integers and timevals only).
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: `usage` is a valid, writable rusage; `who` is one of the two values Linux
    // accepts for it.
    if unsafe { libc::getrusage(who, &mut usage) } != 0 {
        return f64::NAN;
    }
    let us = |t: libc::timeval| t.tv_sec as f64 * 1e6 + t.tv_usec as f64;
    us(usage.ru_utime) + us(usage.ru_stime)
}
