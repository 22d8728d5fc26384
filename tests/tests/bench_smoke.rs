//! The benchmark suite runs (`--quick`, short rows) and its own checks hold: every contended
//! row (threads and processes; notify, fair and 10 ms retrying; every deployment; both
//! failover runs; the semaphore's notify and fair rows, never more than 3 permits held; the
//! read-write lock's read-mostly load and its mutex comparison) finds zero mutual exclusion
//! violations, and the JSON report is written.
//! The cost columns are there and add up: client CPU, and request and reply bytes per cycle
//! (the raw loop's bytes are known exactly); the held-locks row loses none and measures
//! renewal lag; the takeover row ran every run and took no lock before its expiry.

use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::Value;

#[test]
fn quick_benchmark_runs_and_finds_no_violations() {
    let dir = std::env::temp_dir().join(format!("redis-lock-bench-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let json = dir.join("bench.json");
    let start = Instant::now();
    let out = Command::new(env!("CARGO_BIN_EXE_bench"))
        .args(["--quick", "--duration", "0.5", "--workers", "4", "--json"])
        .arg(&json)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "bench failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(start.elapsed() < Duration::from_secs(120));
    let report = std::fs::read_to_string(&json).unwrap();
    let _ = std::fs::remove_dir_all(&dir);
    for label in [
        "notify x4 threads",
        "fair x4 threads",
        "retry-10ms x4 threads",
        "notify x4 processes",
        "fair x4 processes",
        "retry-10ms x4 processes",
        "single server: 1 keys",
        "redlock, 3 servers: 64 keys",
        "cluster, 3 masters: 1 keys",
        "sentinel (1 replica): 64 keys",
        "uncontended_permit",
        "redlock_back_to_back",
        "redlock, 3 servers, 1 stopped",
        "read-write lock: 95 % read, 5 % write",
        "x64 threads, 1 key",
        "x64 threads, 64 keys",
    ] {
        assert!(report.contains(label), "row {label} missing:\n{report}");
    }
    let violations: Vec<&str> = report
        .split("\"violations\": ")
        .skip(1)
        .map(|rest| rest.split([',', '\n']).next().unwrap_or(""))
        .collect();
    // 6 single-server rows, 4 shared-client rows, 8 deployment rows, 2 failover runs, 2
    // semaphore rows, 2 read-write lock rows.
    assert_eq!(violations.len(), 24, "{report}");
    assert!(
        violations.iter().all(|v| *v == "0"),
        "{violations:?}\n{report}"
    );
    assert!(report.contains("\"rss_per_held_lock_kib\""), "{report}");
    let table = String::from_utf8_lossy(&out.stdout);
    assert!(table.contains("raw SET NX PX + EVALSHA del"), "{table}");
    for column in ["client cpu us", "thread cpu us", "req B", "reply B"] {
        assert!(table.contains(column), "column {column} missing:\n{table}");
    }
    assert!(table.contains("renewal lag"), "{table}");
    assert!(table.contains("expired-lock takeover"), "{table}");
    check_costs(&serde_json::from_str(&report).unwrap());
}

fn num(v: &Value, path: &[&str]) -> f64 {
    let mut at = v;
    for p in path {
        at = &at[*p];
    }
    at.as_f64()
        .unwrap_or_else(|| panic!("{} is not a number: {at}", path.join(".")))
}

/// The new cost figures: present, and right where they can be known.
fn check_costs(report: &Value) {
    // The raw loop sends `SET raw <32 hex> NX PX 10000` (88 bytes of RESP) and
    // `EVALSHA <sha> 1 raw <32 hex>` (119), and gets `+OK` and `:1` (5 + 4): exactly, once the
    // benchmark's own INFO traffic is taken out. A few bytes of slack for INFO replies that
    // grow by a digit during the row.
    let raw = ["uncontended", "raw_baseline"];
    let req = num(report, &[raw[0], raw[1], "request_bytes_per_op"]);
    let reply = num(report, &[raw[0], raw[1], "reply_bytes_per_op"]);
    assert!((req - 207.0).abs() < 2.0, "raw loop request bytes {req}");
    assert!((reply - 9.0).abs() < 2.0, "raw loop reply bytes {reply}");
    for row in ["raw_baseline", "watchdog_on", "watchdog_off"] {
        let cpu = num(report, &["uncontended", row, "client_cpu_us_per_op"]);
        let thread = num(report, &["uncontended", row, "client_thread_cpu_us_per_op"]);
        assert!(
            cpu > 0.0 && thread > 0.0,
            "{row}: cpu {cpu}, thread {thread}"
        );
        // Every thread of the process includes the measuring one (getrusage's own rounding
        // aside).
        assert!(
            cpu >= thread * 0.95,
            "{row}: process {cpu} < thread {thread}"
        );
        // A lock cycle sends at least the raw loop's two commands.
        assert!(num(report, &["uncontended", row, "request_bytes_per_op"]) >= req - 2.0);
    }
    let held = &report["held"];
    assert_eq!(num(held, &["held"]), num(held, &["locks"]), "{held}");
    assert_eq!(num(held, &["lost_while_held"]), 0.0, "{held}");
    assert_eq!(num(held, &["keys_gone_while_held"]), 0.0, "{held}");
    assert_eq!(num(held, &["keys_left_after_drop"]), 0.0, "{held}");
    // TTL 3 s held 2 s (the full run's TTL, so a loaded machine's late renewals still land in
    // time): a renewal per key every second, so about two per key are sampled; half that
    // leaves room for a slow sampler on a loaded machine.
    assert!(
        num(held, &["renewals_sampled"]) >= num(held, &["held"]) / 2.0,
        "{held}"
    );
    assert!(num(held, &["renewal_lag_p99_ms"]).is_finite(), "{held}");
    let takeover = &report["takeover"];
    assert_eq!(
        num(takeover, &["done"]),
        num(takeover, &["runs"]),
        "{takeover}"
    );
    assert_eq!(
        num(takeover, &["acquired_before_expiry"]),
        0.0,
        "{takeover}"
    );
    assert!(num(takeover, &["late_p99_ms"]) >= 0.0, "{takeover}");
}
