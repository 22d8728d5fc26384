//! The same runs on every deployment, side by side with the single server of the same run:
//! uncontended cycles and contended runs (one key, and the workers spread over 64 keys) on a
//! single server, a Redlock of 3 servers (uncontended also with one server stopped), a
//! 3-master Cluster and a Sentinel group (master + replica + 3 sentinels). Uncontended also on
//! a single server with one replica and no Sentinel: the Sentinel master's like (its replica
//! runs on the same cores, and the master propagates every script's effects to it), so the
//! Sentinel row is compared with both.

use std::time::Duration;

use redis_lock::LockClient;
use redis_lock::testing::{RedisCluster, RedisServer, SentinelGroup};

use crate::contended::{self, Mode, Run};
use crate::report::{Json, Table, f};
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

    // Uncontended.
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
    let mut rows = Vec::new();
    for d in &deployments {
        let (m, req) = uncontended::cycles_on(&d.client, &d.probes, s.short);
        rows.push((d.name, m, req));
    }
    // A server with a replica, as the Sentinel master has, without the Sentinel.
    let replicated = LockClient::open(&primary.url()).unwrap();
    let (m, req) = uncontended::cycles_on(&replicated, &[primary.url()], s.short);
    rows.insert(1, ("single server + 1 replica (no Sentinel)", m, req));
    // A Redlock server stopped: the other two decide.
    redlock_servers[2].kill();
    let two: Vec<String> = redlock_urls[..2].to_vec();
    let (m, req) = uncontended::cycles_on(&deployments[1].client, &two, s.short);
    rows.push(("redlock, 3 servers, 1 stopped", m, req));
    redlock_servers[2].restart();
    let (single_p50, single_rate) = (rows[0].1.lat.p50, uncontended::per_second(&rows[0].1));
    let replicated_rate = uncontended::per_second(&rows[1].1);
    let mut json_rows = Vec::new();
    for (name, m, req) in &rows {
        let rate = uncontended::per_second(m);
        t.row(vec![
            (*name).to_owned(),
            f(rate, 0),
            f(m.lat.p50, 1),
            f(m.lat.p99, 1),
            f(m.lat.p50 / single_p50, 2),
            f(rate / single_rate, 2),
            f(rate / replicated_rate, 2),
            f(*req, 2),
            f(m.redis_exec_us, 1),
        ]);
        json_rows.push(
            uncontended::json(m)
                .with("deployment", *name)
                .with("requests_per_cycle", *req)
                .with("p50_ratio_to_single", m.lat.p50 / single_p50)
                .with("rate_ratio_to_single", rate / single_rate)
                .with("rate_ratio_to_replicated", rate / replicated_rate),
        );
    }
    let mut text = format!(
        "\nDeployments: uncontended acquire + release (watchdog on), {} s each\n{}",
        f(s.short.as_secs_f64(), 1),
        t.render()
    );

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
            .with("contended", Json::Arr(contended_json)),
    }
}
