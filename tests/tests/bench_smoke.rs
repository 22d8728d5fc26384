//! The benchmark suite runs (`--quick`, short rows) and its own checks hold: every contended
//! row (threads and processes; notify, fair and 10 ms retrying; every deployment; both
//! failover runs; the read-write lock's read-mostly load and its mutex comparison) finds zero
//! mutual exclusion violations, and the JSON report is written.

use std::process::Command;
use std::time::{Duration, Instant};

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
        "read-write lock: 95 % read, 5 % write",
    ] {
        assert!(report.contains(label), "row {label} missing:\n{report}");
    }
    let violations: Vec<&str> = report
        .split("\"violations\": ")
        .skip(1)
        .map(|rest| rest.split([',', '\n']).next().unwrap_or(""))
        .collect();
    // 6 single-server rows, 8 deployment rows, 2 failover runs, 2 read-write lock rows.
    assert_eq!(violations.len(), 18, "{report}");
    assert!(
        violations.iter().all(|v| *v == "0"),
        "{violations:?}\n{report}"
    );
    assert!(report.contains("\"rss_per_held_lock_kib\""), "{report}");
    let table = String::from_utf8_lossy(&out.stdout);
    assert!(table.contains("raw SET NX PX + EVALSHA del"), "{table}");
}
