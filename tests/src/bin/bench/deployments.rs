//! The same runs on every deployment, side by side with the single server of the same run:
//! uncontended cycles and contended runs (one key, and the workers spread over 64 keys) on a
//! single server, a Redlock of 3 servers (uncontended also with one server stopped), a
//! 3-master Cluster and a Sentinel group (master + replica + 3 sentinels). Uncontended also on
//! a single server with one replica and no Sentinel: the Sentinel master's like (its replica
//! runs on the same cores, and the master propagates every script's effects to it), so the
//! Sentinel row is compared with both. The uncontended runs are interleaved in short rounds
//! and reported as medians with the range of their ratios (`interleaved`); Redlock is compared
//! back to back with one of its own servers alone (`back_to_back`: alternating blocks of
//! cycles, the same server process on both sides); the contended runs take one sample each.

use std::time::{Duration, Instant};

use redis_lock::LockClient;
use redis_lock::testing::{RedisCluster, RedisServer, SentinelGroup};

use crate::contended::{self, Mode, Run};
use crate::report::{Json, Table, f};
use crate::stats::summarize;
use crate::uncontended;

/// What the section printed and its JSON.
pub(crate) struct Report {
    pub(crate) text: String,
    pub(crate) json: Json,
}

/// Settings of the section.
pub(crate) struct Settings<'a> {
    pub(crate) single_url: &'a str,
    pub(crate) counter_url: &'a str,
    pub(crate) rtt_us: f64,
    pub(crate) workers: usize,
    pub(crate) hold: Duration,
    pub(crate) duration: Duration,
    pub(crate) short: Duration,
}

/// One deployment: its name, a client, and the URLs of the servers that run lock commands.
struct Deployment {
    name: &'static str,
    client: LockClient,
    probes: Vec<String>,
}

pub(crate) fn run(s: &Settings<'_>) -> Report {
    let mut redlock_servers = [
        RedisServer::start(),
        RedisServer::start(),
        RedisServer::start(),
    ];
    let cluster = RedisCluster::start(3);
    let sentinel = SentinelGroup::start();
    let primary = RedisServer::start();
    let _replica = RedisServer::start_replica_of(&primary);
    let redlock_urls: Vec<String> = redlock_servers.iter().map(RedisServer::url).collect();
    let deployments = [
        Deployment {
            name: "single server",
            client: LockClient::open(s.single_url).unwrap(),
            probes: vec![s.single_url.to_owned()],
        },
        Deployment {
            name: "redlock, 3 servers",
            client: LockClient::redlock_builder(redlock_urls.iter().cloned())
                .build()
                .unwrap(),
            probes: redlock_urls.clone(),
        },
        Deployment {
            name: "cluster, 3 masters",
            client: LockClient::cluster_builder(cluster.urls()).build().unwrap(),
            probes: cluster.urls(),
        },
        Deployment {
            name: "sentinel (1 replica)",
            client: LockClient::sentinel_builder(
                SentinelGroup::MASTER_NAME,
                sentinel.sentinel_urls(),
            )
            .build()
            .unwrap(),
            probes: vec![sentinel.master().url()],
        },
    ];

    // Uncontended: every deployment in each of `ROUNDS` rounds, in an order rotated from round
    // to round; each figure is a median over the rounds, each ratio the median of the ratios
    // within a round (see `interleaved`).
    let replicated = LockClient::open(&primary.url()).unwrap();
    let replicated_probes = [primary.url()];
    let mut entries: Vec<(&str, &LockClient, &[String])> = vec![
        (
            deployments[0].name,
            &deployments[0].client,
            &deployments[0].probes,
        ),
        (
            "single server + 1 replica (no Sentinel)",
            &replicated,
            &replicated_probes,
        ),
    ];
    // Redlock is measured back to back with one of its own servers below.
    entries.extend(
        deployments[2..]
            .iter()
            .map(|d| (d.name, &d.client, d.probes.as_slice())),
    );
    let rows = interleaved(&entries, s.short);
    let replicated_rate = rows[1].rate;
    // Redlock against its first server alone (another client, another key), in alternating
    // blocks; then with its third server stopped, the other two deciding.
    let alone = LockClient::open(&redlock_urls[0]).unwrap();
    let redlock = &deployments[1].client;
    // As many blocks as the other rows' time allows (a quick run: a few).
    let blocks = if s.short < Duration::from_secs(1) {
        4
    } else {
        BLOCKS
    };
    let mut pairs = vec![back_to_back("redlock, 3 servers", redlock, &alone, blocks)];
    redlock_servers[2].kill();
    pairs.push(back_to_back(
        "redlock, 3 servers, 1 stopped",
        redlock,
        &alone,
        blocks,
    ));
    redlock_servers[2].restart();
    let mut t = Table::new(&[
        "uncontended",
        "cycles/s",
        "p50 us",
        "p99 us",
        "p50 x single",
        "rate x single",
        "rate x 1 replica",
        "req/cycle",
        "redis exec us",
    ]);
    let mut json_rows = Vec::new();
    for r in &rows {
        t.row(vec![
            r.name.to_owned(),
            f(r.rate, 0),
            f(r.p50, 1),
            f(r.p99, 1),
            f(r.p50_x_single, 2),
            f(r.rate_x_single, 2),
            f(r.rate / replicated_rate, 2),
            f(r.requests, 2),
            f(r.redis_exec_us, 1),
        ]);
        json_rows.push(
            uncontended::json(&r.middle)
                .with("deployment", r.name)
                .with("rounds", f64::from(uncontended::ROUNDS))
                .with("median_per_s", r.rate)
                .with("median_p50_us", r.p50)
                .with("requests_per_cycle", r.requests)
                .with("p50_ratio_to_single", r.p50_x_single)
                .with("rate_ratio_to_single", r.rate_x_single)
                .with("rate_ratio_to_single_min", r.rate_x_single_range.0)
                .with("rate_ratio_to_single_max", r.rate_x_single_range.1)
                .with("rate_ratio_to_replicated", r.rate / replicated_rate),
        );
    }
    let mut text = format!(
        "\nDeployments: uncontended acquire + release (watchdog on), {} rounds of {} s per deployment, \
         the deployments in a rotated order each round (Redlock: back to back below); figures are medians over the rounds, ratios the median of the \
         ratios to the single server within a round (range of rate x single: {}); rate x 1 replica is the \
         ratio of the medians\n{}",
        uncontended::ROUNDS,
        f(s.short.as_secs_f64() / f64::from(uncontended::ROUNDS), 2),
        rows.iter()
            .skip(1)
            .map(|r| format!(
                "{} {}-{}",
                r.name,
                f(r.rate_x_single_range.0, 2),
                f(r.rate_x_single_range.1, 2)
            ))
            .collect::<Vec<_>>()
            .join("; "),
        t.render()
    );
    let mut t = Table::new(&[
        "back to back",
        "p50 us",
        "p99 us",
        "alone p50 us",
        "alone p99 us",
        "p50 x alone",
        "block ratios",
        "req/cycle",
    ]);
    let mut pair_json = Vec::new();
    for b in &pairs {
        t.row(vec![
            b.name.to_owned(),
            f(b.p50, 1),
            f(b.p99, 1),
            f(b.alone_p50, 1),
            f(b.alone_p99, 1),
            f(b.p50 / b.alone_p50, 2),
            format!("{}-{}", f(b.ratio_range.0, 2), f(b.ratio_range.1, 2)),
            f(b.requests, 2),
        ]);
        pair_json.push(
            Json::obj()
                .with("deployment", b.name)
                .with("blocks", b.blocks as f64)
                .with("cycles_per_block", BLOCK as f64)
                .with("p50_us", b.p50)
                .with("p99_us", b.p99)
                .with("alone_p50_us", b.alone_p50)
                .with("alone_p99_us", b.alone_p99)
                .with("p50_ratio_to_alone", b.p50 / b.alone_p50)
                .with("block_p50_ratio_min", b.ratio_range.0)
                .with("block_p50_ratio_max", b.ratio_range.1)
                .with("requests_per_cycle", b.requests),
        );
    }
    text.push_str(&format!(
        "\nRedlock back to back with its first server alone: {blocks} blocks of {BLOCK} try_lock + release cycles each, \
         alternating (the one that goes first alternates too), another client and key for the server alone; \
         p50 and p99 over every cycle, block ratios the range of the p50 ratios of adjacent blocks\n{}",
        t.render()
    ));

    // Contended: one key, then the workers spread over 64 keys.
    let mut t = Table::new(contended::HEADER);
    let mut contended_json = Vec::new();
    for d in &deployments {
        for keys in [1u32, 64] {
            let run = Run {
                label: format!("{}: {} keys", d.name, keys),
                key: format!("dep-{}-{keys}", d.name.replace([' ', ',', '(', ')'], "")),
                keys,
                mode: Mode::Notify,
                workers: s.workers,
                hold: s.hold,
                time: s.duration,
                windowed: false,
            };
            let outcome = contended::threads_on(&d.client, &d.probes, s.counter_url, &run);
            let a = contended::analyze(&outcome, s.rtt_us);
            eprintln!("  done: {}", run.label);
            t.row(a.row);
            contended_json.push(
                a.json
                    .with("deployment", d.name)
                    .with("keys", u64::from(keys)),
            );
        }
    }
    text.push_str(&format!(
        "\nDeployments: {} threads (notify), hold {} us, {} s per row; handoffs per key; RT = single-server PING p50\n{}",
        s.workers,
        s.hold.as_micros(),
        f(s.duration.as_secs_f64(), 1),
        t.render()
    ));
    Report {
        text,
        json: Json::obj()
            .with("uncontended", Json::Arr(json_rows))
            .with("redlock_back_to_back", Json::Arr(pair_json))
            .with("contended", Json::Arr(contended_json)),
    }
}

/// Blocks of `back_to_back`, per side (a quick run: fewer).
const BLOCKS: usize = 40;
/// Cycles per block.
const BLOCK: usize = 300;

/// A Redlock client against one of its servers alone, over the blocks of `back_to_back`.
struct Pair<'a> {
    name: &'a str,
    blocks: usize,
    p50: f64,
    p99: f64,
    alone_p50: f64,
    alone_p99: f64,
    ratio_range: (f64, f64),
    requests: f64,
}

/// `try_lock` + `release` cycles of `redlock` and of `alone` (one of its servers, through
/// another client and on another key) in alternating blocks of `BLOCK`, `blocks` each, the
/// side that goes first alternating too. What one side pays in a block the other pays in the
/// next, milliseconds away: a background load (the other deployments' servers, other work on
/// the machine) falls on both alike, and the same server process answers both.
fn back_to_back<'a>(
    name: &'a str,
    redlock: &LockClient,
    alone: &LockClient,
    blocks: usize,
) -> Pair<'a> {
    let sides = [(redlock, "b2b-redlock"), (alone, "b2b-alone")];
    let cycle = |(client, key): (&LockClient, &str)| {
        let guard = client.try_lock(key).unwrap().expect("free");
        guard.release().unwrap();
    };
    for side in sides {
        for _ in 0..BLOCK {
            cycle(side);
        }
    }
    let mut lat: [Vec<f64>; 2] = [
        Vec::with_capacity(blocks * BLOCK),
        Vec::with_capacity(blocks * BLOCK),
    ];
    let mut block_p50: [Vec<f64>; 2] = [Vec::new(), Vec::new()];
    let requests = redlock.request_count();
    for b in 0..blocks {
        for k in 0..2 {
            let i = (b + k) % 2;
            let mut block = Vec::with_capacity(BLOCK);
            for _ in 0..BLOCK {
                let t = Instant::now();
                cycle(sides[i]);
                block.push(t.elapsed().as_secs_f64() * 1e6);
            }
            lat[i].extend_from_slice(&block);
            block_p50[i].push(summarize(&mut block).p50);
        }
    }
    let requests = (redlock.request_count() - requests) as f64 / (blocks * BLOCK) as f64;
    let ratio_range = block_p50[0]
        .iter()
        .zip(&block_p50[1])
        .map(|(q, a)| q / a)
        .fold((f64::MAX, f64::MIN), |(lo, hi), x| (lo.min(x), hi.max(x)));
    let [mut q, mut a] = lat;
    let (q, a) = (summarize(&mut q), summarize(&mut a));
    Pair {
        name,
        blocks,
        p50: q.p50,
        p99: q.p99,
        alone_p50: a.p50,
        alone_p99: a.p99,
        ratio_range,
        requests,
    }
}

/// One deployment's uncontended figures over the rounds of `interleaved`.
struct Row<'a> {
    name: &'a str,
    /// The round whose rate is the median, for the JSON report.
    middle: uncontended::Measured,
    rate: f64,
    p50: f64,
    p99: f64,
    requests: f64,
    redis_exec_us: f64,
    p50_x_single: f64,
    rate_x_single: f64,
    rate_x_single_range: (f64, f64),
}

/// Runs every entry (the first is the single server the others are compared with) for
/// `total / ROUNDS` in each of `ROUNDS` rounds, starting each round one entry further on.
/// On this machine one entry's rate drifts from one 2 s sample to the next by more than the
/// gap between deployments (0.82x to 1.10x for the same Sentinel row in three runs); measured
/// side by side in short slices, the drift falls on all entries alike and cancels in the
/// ratio of each round.
fn interleaved<'a>(entries: &[(&'a str, &LockClient, &[String])], total: Duration) -> Vec<Row<'a>> {
    let rounds = uncontended::ROUNDS as usize;
    let slice = total / uncontended::ROUNDS;
    let n = entries.len();
    // samples[entry][round]
    let mut samples: Vec<Vec<(uncontended::Measured, f64)>> = vec![Vec::new(); n];
    for round in 0..rounds {
        for k in 0..n {
            let i = (round + k) % n;
            let (_, client, probes) = entries[i];
            samples[i].push(uncontended::cycles_on(
                client,
                probes,
                uncontended::NATIVE,
                slice,
            ));
        }
    }
    let median = |mut v: Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    let rate = |i: usize, r: usize| uncontended::per_second(&samples[i][r].0);
    let mut rows = Vec::new();
    for (i, (name, _, _)) in entries.iter().enumerate() {
        let x_single: Vec<f64> = (0..rounds).map(|r| rate(i, r) / rate(0, r)).collect();
        let (lo, hi) = x_single
            .iter()
            .fold((f64::MAX, f64::MIN), |(lo, hi), &x| (lo.min(x), hi.max(x)));
        let by_rate = {
            let mut order: Vec<usize> = (0..rounds).collect();
            order.sort_by(|&a, &b| rate(i, a).total_cmp(&rate(i, b)));
            order[rounds / 2]
        };
        rows.push(Row {
            name,
            middle: samples[i][by_rate].0.clone(),
            rate: median((0..rounds).map(|r| rate(i, r)).collect()),
            p50: median(samples[i].iter().map(|(m, _)| m.lat.p50).collect()),
            p99: median(samples[i].iter().map(|(m, _)| m.lat.p99).collect()),
            requests: median(samples[i].iter().map(|(_, q)| *q).collect()),
            redis_exec_us: median(samples[i].iter().map(|(m, _)| m.redis_exec_us).collect()),
            p50_x_single: median(
                (0..rounds)
                    .map(|r| samples[i][r].0.lat.p50 / samples[0][r].0.lat.p50)
                    .collect(),
            ),
            rate_x_single: median(x_single),
            rate_x_single_range: (lo, hi),
        });
    }
    rows
}
