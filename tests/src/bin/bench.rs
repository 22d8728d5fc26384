//! The benchmark suite (see `BENCHMARKS.md`). Run it with `scripts/bench`, which is
//! `cargo run --release -p redis-lock-tests --bin bench -- [OPTIONS]`:
//!
//! ```text
//! --quick            smoke test: short runs (about 15 s in all)
//! --duration SECS    length of each contended row (default 10)
//! --workers N        contending workers (default 8)
//! --hold-us US       how long each acquisition holds the lock (default 1000)
//! --modes LIST       contended rows to run, of notify,fair,retry-10ms (default: all)
//! --only LIST        sections to run, of uncontended,commit,contended,shared,held,notice,takeover,
//!                    deployments,failover,semaphore,rwlock (default: all)
//! --json PATH        where to write the JSON report (default target/bench.json)
//! ```
//!
//! It starts its own `redis-server`s on free loopback ports: one for the locks, one for the
//! counter the contended workers increment under the lock (so that counter traffic does not
//! show up in the lock server's command and CPU statistics). Every figure of one run comes
//! from the same servers, side by side.

use std::time::Duration;

use redis_lock::testing::RedisServer;

#[path = "bench/commit.rs"]
mod commit;
#[path = "bench/contended.rs"]
mod contended;
#[path = "bench/deployments.rs"]
mod deployments;
#[path = "bench/failover.rs"]
mod failover;
#[path = "bench/held.rs"]
mod held;
#[path = "bench/notice.rs"]
mod notice;
#[path = "bench/report.rs"]
mod report;
#[path = "bench/rwlock.rs"]
mod rwlock;
#[path = "bench/semaphore.rs"]
mod semaphore;
#[path = "bench/stats.rs"]
mod stats;
#[path = "bench/takeover.rs"]
mod takeover;
#[path = "bench/uncontended.rs"]
mod uncontended;

use contended::Mode;
use report::{Json, Table, f};

/// The sections, in the order they run.
const SECTIONS: [&str; 11] = [
    "uncontended",
    "commit",
    "contended",
    "shared",
    "held",
    "notice",
    "takeover",
    "deployments",
    "failover",
    "semaphore",
    "rwlock",
];

#[derive(Debug)]
struct Args {
    quick: bool,
    duration: Duration,
    workers: usize,
    hold: Duration,
    modes: Vec<Mode>,
    sections: Vec<String>,
    json: String,
}

fn parse_args(args: &[String]) -> Result<Args, String> {
    let mut a = Args {
        quick: false,
        duration: Duration::from_secs(10),
        workers: 8,
        hold: Duration::from_millis(1),
        modes: vec![Mode::Notify, Mode::Fair, Mode::Poll10],
        sections: SECTIONS.iter().map(|s| (*s).to_owned()).collect(),
        json: "target/bench.json".to_owned(),
    };
    let mut duration_set = false;
    let mut it = args.iter();
    while let Some(arg) = it.next() {
        let mut value = || it.next().ok_or(format!("{arg} needs a value"));
        match arg.as_str() {
            "--quick" => a.quick = true,
            "--duration" => {
                let s: f64 = value()?.parse().map_err(|e| format!("--duration: {e}"))?;
                if !(s > 0.0 && s < 3600.0) {
                    return Err("--duration must be between 0 and 3600 seconds".into());
                }
                a.duration = Duration::from_secs_f64(s);
                duration_set = true;
            }
            "--workers" => {
                a.workers = value()?.parse().map_err(|e| format!("--workers: {e}"))?;
                if !(1..=64).contains(&a.workers) {
                    return Err("--workers must be between 1 and 64".into());
                }
            }
            "--hold-us" => {
                a.hold =
                    Duration::from_micros(value()?.parse().map_err(|e| format!("--hold-us: {e}"))?)
            }
            "--modes" => {
                a.modes = value()?
                    .split(',')
                    .map(|m| Mode::parse(m).ok_or(format!("unknown mode {m:?}")))
                    .collect::<Result<_, _>>()?
            }
            "--only" => {
                a.sections = value()?.split(',').map(str::to_owned).collect();
                if let Some(bad) = a.sections.iter().find(|s| !SECTIONS.contains(&s.as_str())) {
                    return Err(format!("unknown section {bad:?}"));
                }
            }
            "--json" => a.json = value()?.clone(),
            "-h" | "--help" => return Err(String::new()),
            other => return Err(format!("unknown argument {other:?}")),
        }
    }
    if a.quick && !duration_set {
        a.duration = Duration::from_secs(1);
    }
    Ok(a)
}

fn machine() -> Json {
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .unwrap_or_default()
        .lines()
        .find_map(|l| {
            l.strip_prefix("model name")?
                .split_once(':')
                .map(|(_, v)| v.trim().to_owned())
        })
        .unwrap_or_default();
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    let nproc = std::thread::available_parallelism().map_or(0, usize::from);
    let redis = std::process::Command::new(
        redis_lock::testing::server_binary().unwrap_or_else(|_| "redis-server".into()),
    )
    .arg("--version")
    .output()
    .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned())
    .unwrap_or_default();
    Json::obj()
        .with("nproc", nproc)
        .with("cpu", cpu)
        .with("loadavg", load.trim())
        .with("redis", redis)
}

fn main() {
    let argv: Vec<String> = std::env::args().skip(1).collect();
    if argv.first().map(String::as_str) == Some("--worker") {
        contended::worker_main(&argv[1..]);
        return;
    }
    let args = match parse_args(&argv) {
        Ok(a) => a,
        Err(e) => {
            if !e.is_empty() {
                eprintln!("bench: {e}");
            }
            eprintln!(
                "usage: bench [--quick] [--duration SECS] [--workers N] [--hold-us US] [--modes notify,fair,retry-10ms] [--only SECTIONS] [--json PATH]"
            );
            std::process::exit(2);
        }
    };
    let machine = machine();
    println!("machine: {}", machine.render().replace('\n', " "));
    let server = RedisServer::start();
    let counter_server = RedisServer::start();
    let url = server.url();
    let short = if args.quick {
        Duration::from_millis(300)
    } else {
        Duration::from_secs(2)
    };

    let run = |section: &str| args.sections.iter().any(|s| s == section);
    let mut report = Json::obj()
        .with("machine", machine)
        .with("quick", args.quick)
        .with("workers", args.workers)
        .with("hold_us", args.hold.as_micros() as f64)
        .with("contended_duration_s", args.duration.as_secs_f64());

    // Round trip (always: contended handoffs are expressed in round trips), the raw baseline,
    // and uncontended cycles, side by side.
    let rtt = uncontended::rtt(&url, short);
    let rtt_idle = uncontended::rtt_after_idle(&url, short);
    report = report.with("rtt_after_idle", uncontended::json(&rtt_idle));
    if run("uncontended") {
        let raw = uncontended::raw_baseline(&url, short);
        let client = contended::bench_client(&url);
        let on = uncontended::cycles(&url, &client, true, short);
        let off = uncontended::cycles(&url, &client, false, short);
        let permit = uncontended::permit_cycles(&url, &client, semaphore::PERMITS, short);
        // The same cycle once a metrics recorder is installed (it stays installed: last).
        #[cfg(feature = "metrics")]
        let recorded = {
            metrics_exporter_prometheus::PrometheusBuilder::new()
                .install_recorder()
                .expect("the bench installs the only recorder");
            uncontended::cycles(&url, &client, true, short)
        };
        // The headline figure: the default cycle against the raw loop in alternating slices,
        // so that the machine's drift weighs on both alike (single rows above are one sample
        // each, taken one after the other).
        let alternating = uncontended::against_raw_in(&url, short * 5, 9, |slice| {
            uncontended::cycles(&url, &client, true, slice)
        });
        // What the watchdog costs a lock given back before it is needed: on against off, in
        // alternating slices of their own.
        let watchdog = uncontended::alternating(
            short * 5,
            9,
            |slice| uncontended::cycles(&url, &client, false, slice),
            |slice| uncontended::cycles(&url, &client, true, slice),
        );
        drop(client);
        println!(
            "\nredis-lock's `metrics` feature: {}",
            if cfg!(feature = "metrics") {
                "on (no recorder installed, except in the row that says so)"
            } else {
                "off"
            }
        );
        let mut t = Table::new(&[
            "uncontended",
            "cycles/s",
            "p50 us",
            "p99 us",
            "x baseline",
            "redis exec us",
            "redis cpu us",
            "client cpu us",
            "thread cpu us",
            "req B",
            "reply B",
        ]);
        let raw_rate = uncontended::per_second(&raw);
        #[allow(unused_mut)]
        let mut rows = vec![
            ("PING round trip", &rtt),
            ("PING after 1 ms idle", &rtt_idle),
            ("raw SET NX PX + EVALSHA del", &raw),
            ("lock + release, watchdog on", &on),
            ("lock + release, watchdog off", &off),
            ("permit + release (of 3), watchdog on", &permit),
        ];
        #[cfg(feature = "metrics")]
        rows.push(("lock + release, metrics recorder", &recorded));
        for (name, s) in rows {
            t.row(vec![
                name.to_owned(),
                f(uncontended::per_second(s), 0),
                f(s.lat.p50, 1),
                f(s.lat.p99, 1),
                f(uncontended::per_second(s) / raw_rate, 3),
                f(s.redis_exec_us, 1),
                f(s.redis_cpu_us, 1),
                f(s.client_cpu_us, 1),
                f(s.client_thread_cpu_us, 1),
                f(s.request_bytes, 0),
                f(s.reply_bytes, 0),
            ]);
        }
        println!("\n{}", t.render());
        println!(
            "{}\n{}\n{}",
            alternating.line("lock + release (watchdog on)"),
            alternating.cost_line("lock + release (watchdog on)"),
            watchdog.line_against(
                "lock + release (watchdog on)",
                "the same cycle with the watchdog off",
                "off"
            )
        );
        report = report.with(
            "uncontended",
            Json::obj()
                .with("alternating", alternating.json())
                .with("watchdog_on_against_off", watchdog.json())
                .with("rtt", uncontended::json(&rtt))
                .with("raw_baseline", uncontended::json(&raw))
                .with(
                    "watchdog_on",
                    uncontended::json(&on)
                        .with("ratio_to_baseline", uncontended::per_second(&on) / raw_rate),
                )
                .with(
                    "watchdog_off",
                    uncontended::json(&off).with(
                        "ratio_to_baseline",
                        uncontended::per_second(&off) / raw_rate,
                    ),
                )
                .with(
                    "permit",
                    uncontended::json(&permit).with(
                        "ratio_to_baseline",
                        uncontended::per_second(&permit) / raw_rate,
                    ),
                ),
        );
        #[cfg(feature = "metrics")]
        {
            report = report.with(
                "uncontended_metrics_recorder",
                uncontended::json(&recorded).with(
                    "ratio_to_baseline",
                    uncontended::per_second(&recorded) / raw_rate,
                ),
            );
        }
    } else {
        report = report.with("rtt", uncontended::json(&rtt));
    }

    // Commit under the lock against check_held() + a plain pipeline; change to observer.
    if run("commit") {
        let client = contended::bench_client(&url);
        let c = commit::run(&url, &client, short * 5);
        let o = commit::observe(&url, if args.quick { 40 } else { 400 });
        println!();
        for line in c.lines.iter().chain(&o.lines) {
            println!("{line}");
        }
        report = report.with("commit", c.json).with("observe", o.json);
    }

    // Contended: one key, `workers` threads and then `workers` processes, per mode.
    if run("contended") {
        let mut t = Table::new(contended::HEADER);
        let mut runs = Vec::new();
        for kind in ["threads", "processes"] {
            for &mode in &args.modes {
                let counter_url = counter_server.url();
                let run = if kind == "threads" {
                    contended::threads(
                        &url,
                        &counter_url,
                        mode,
                        args.workers,
                        args.hold,
                        args.duration,
                    )
                } else {
                    contended::processes(
                        &url,
                        &counter_url,
                        mode,
                        args.workers,
                        args.hold,
                        args.duration,
                    )
                };
                let a = contended::analyze(&run, rtt.lat.p50);
                eprintln!("  done: {}", run.label);
                t.row(a.row);
                runs.push(a.json);
            }
        }
        println!(
            "{} workers, hold {} us, {} s per row; handoff = one holder's release to the next holder's acquire (other / same worker); RT = {} us (PING p50; {} us after 1 ms idle)",
            args.workers,
            args.hold.as_micros(),
            f(args.duration.as_secs_f64(), 1),
            f(rtt.lat.p50, 1),
            f(rtt_idle.lat.p50, 1)
        );
        println!("{}", t.render());
        report = report.with("contended", Json::Arr(runs));
    }

    // One shared client, many waiting threads: 8 to 1,024 threads (8 and 64 with `--quick`)
    // on one key and on 64 keys (notify), short rows; the connections Redis sees while they
    // wait.
    if run("shared") {
        let mut t = Table::new(&contended::shared_header());
        let mut runs = Vec::new();
        // A smoke test (`--quick`) stops at 64 threads.
        let sizes: &[usize] = if args.quick {
            &[8, 64]
        } else {
            &[8, 64, 256, 1024]
        };
        for keys in [1u32, 64] {
            for &workers in sizes {
                // Long enough on one key for ~20 turns per thread up to 256 threads (a
                // min/max fairness of 0.95 needs 20), else short.
                let time = match (args.quick, keys, workers) {
                    (true, _, _) => Duration::from_millis(500),
                    (false, 1, 64) => Duration::from_millis(2500),
                    (false, 1, 256) => Duration::from_secs(9),
                    (false, 1, 1024) => Duration::from_secs(4),
                    _ => Duration::from_millis(1500),
                };
                let run = contended::Run {
                    label: format!(
                        "x{workers} threads, {keys} key{}",
                        if keys == 1 { "" } else { "s" }
                    ),
                    key: format!("shared-{workers}-{keys}"),
                    keys,
                    mode: Mode::Notify,
                    workers,
                    hold: args.hold,
                    time,
                    windowed: true,
                };
                let (outcome, connections) =
                    contended::shared_client(&url, &counter_server.url(), &run);
                let mut a = contended::analyze(&outcome, rtt.lat.p50);
                eprintln!("  done: shared {}", run.label);
                a.row.push(connections.to_string());
                t.row(a.row);
                runs.push(a.json.with("connections_open", connections));
            }
        }
        println!(
            "one client shared by all threads (notify), hold {} us, 1.5-9 s per row; req, cmds, exec and cpu per acquisition made within the row's window; conns = the most connections Redis saw open while the row ran (INFO clients connected_clients, less the benchmark's own); RT = {} us",
            args.hold.as_micros(),
            f(rtt.lat.p50, 1),
        );
        println!("{}", t.render());
        report = report.with("shared_client", Json::Arr(runs));
    }

    // Many locks held at once.
    if run("held") {
        let (n, ttl, watch) = if args.quick {
            (1000, Duration::from_secs(3), Duration::from_secs(2))
        } else {
            (10_000, Duration::from_secs(3), Duration::from_secs(5))
        };
        let held = held::run(&url, n, ttl, watch);
        for line in &held.lines {
            println!("{line}");
        }
        report = report.with("held", held.json);
    }

    // Loss to notice: a held lock changed in Redis, and when its holder knows.
    if run("notice") {
        let (locks, changes) = if args.quick { (200, 50) } else { (1000, 300) };
        let n = notice::run(&url, locks, changes);
        for line in &n.lines {
            println!("{line}");
        }
        report = report.with("notice", n.json);
    }

    // A waiter taking over an expired lock (a holder that stopped without releasing).
    if run("takeover") {
        let (runs, ttl) = if args.quick {
            (10, Duration::from_millis(100))
        } else {
            (100, Duration::from_millis(300))
        };
        let t = takeover::run(&url, runs, ttl);
        for line in &t.lines {
            println!("{line}");
        }
        report = report.with("takeover", t.json);
    }

    // Every deployment, side by side with this run's single server.
    if run("deployments") {
        let d = deployments::run(&deployments::Settings {
            single_url: &url,
            counter_url: &counter_server.url(),
            rtt_us: rtt.lat.p50,
            workers: args.workers,
            hold: args.hold,
            duration: args.duration,
            short,
        });
        println!("{}", d.text);
        report = report.with("deployments", d.json);
    }

    // Failover under load: Sentinel, and a Redlock server killed and restarted.
    if run("failover") {
        let total = if args.quick {
            Duration::from_secs(6)
        } else {
            Duration::from_secs(20)
        };
        let r = failover::run(&counter_server.url(), args.workers, args.hold, total);
        println!("{}", r.text);
        report = report.with("failover", r.json);
    }

    // The semaphore: permits in use under contention, handoff, fairness; the permit cycle.
    if run("semaphore") {
        let (text, json) = semaphore::run(
            &url,
            args.workers,
            args.hold,
            args.duration,
            short,
            rtt.lat.p50,
        );
        println!("\n{text}");
        report = report.with("semaphore", json);
    }
    // The read-write lock: read-mostly against the mutex, and its uncontended read cycle.
    if run("rwlock") {
        let r = rwlock::run(&url, args.workers, args.hold, args.duration, short);
        println!("\n{}", r.text);
        report = report.with("rwlock", r.json);
    }

    if let Some(dir) = std::path::Path::new(&args.json).parent()
        && !dir.as_os_str().is_empty()
    {
        let _ = std::fs::create_dir_all(dir);
    }
    std::fs::write(&args.json, report.render()).unwrap();
    println!("\nJSON written to {}", args.json);
}
