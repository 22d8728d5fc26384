//! Metrics for a contended lock, served on `/metrics` in the Prometheus text format.
//!
//! Six worker threads build reports for three shards, each under a lock per shard taken by
//! `#[distributed_lock(key = "report:{shard}")]`, so they wait for each other. The
//! `metrics` feature of redis-lock records every acquisition, hold, handoff and renewal
//! through the `metrics` facade; `metrics-exporter-prometheus` turns that into what
//! Prometheus scrapes, served here from a small synchronous HTTP server (tiny_http).
//!
//! Run it with `cargo run -p redis-lock-examples --example metrics`. It uses `$REDIS_URL`, or
//! starts a throwaway `redis-server`. By default it runs the workers once, scrapes its own
//! `/metrics`, prints the redis-lock lines and exits. With `-- --serve` the workers keep
//! going and it serves on 127.0.0.1:9184 (or `$PORT`) until you press Ctrl-C:
//!
//! ```text
//! curl http://127.0.0.1:9184/metrics
//! ```
//!
//! Note the `label="report:{shard}"`: metrics carry the key *template*, never the lock name
//! (`report:0`, `report:1`, ...), so a lock per customer does not make a series per customer.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::sync::Arc;
use std::time::Duration;

use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle};
use redis_lock::{LockClient, distributed_lock};
use tiny_http::{Response, Server};

const WORKERS: u32 = 6;
const SHARDS: u32 = 3;
/// Reports each worker builds in the demo run.
const ROUNDS: u32 = 20;

/// The work done under the lock of one shard.
#[distributed_lock(key = "report:{shard}", ttl = 10, wait = "30s")]
fn build_report(shard: u32) -> redis_lock::Result<()> {
    std::thread::sleep(Duration::from_millis(3));
    let _ = shard;
    Ok(())
}

fn workers(rounds: Option<u32>) -> Vec<std::thread::JoinHandle<redis_lock::Result<()>>> {
    (0..WORKERS)
        .map(|w| {
            std::thread::spawn(move || {
                let mut i = 0u32;
                while rounds.is_none_or(|r| i < r) {
                    build_report((w + i) % SHARDS)?;
                    i += 1;
                }
                Ok(())
            })
        })
        .collect()
}

/// Serves `GET /metrics` from `handle` until the process ends.
fn serve(server: Arc<Server>, handle: PrometheusHandle) {
    std::thread::spawn(move || {
        for request in server.incoming_requests() {
            let response = if request.url() == "/metrics" {
                Response::from_string(handle.render()).with_header(
                    "Content-Type: text/plain; version=0.0.4"
                        .parse::<tiny_http::Header>()
                        .expect("a valid header"),
                )
            } else {
                Response::from_string("see /metrics").with_status_code(404)
            };
            let _ = request.respond(response);
        }
    });
}

/// `GET path` on 127.0.0.1:`port`: the body.
fn get(port: u16, path: &str) -> std::io::Result<String> {
    let mut stream = TcpStream::connect(("127.0.0.1", port))?;
    stream.set_read_timeout(Some(Duration::from_secs(10)))?;
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n"
    )?;
    let mut reply = String::new();
    stream.read_to_string(&mut reply)?;
    Ok(reply
        .split_once("\r\n\r\n")
        .map_or(String::new(), |(_, b)| b.to_owned()))
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    // The recorder first: clients built afterwards describe their metrics to it.
    // Buckets (histograms) rather than the exporter's default summaries: they aggregate
    // across instances, so a dashboard can plot a fleet-wide p99 of lock waits.
    let handle = PrometheusBuilder::new()
        .set_buckets(&[
            0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
        ])?
        .install_recorder()?;
    let (url, _server) = redis_lock_examples::redis_url();
    redis_lock::set_default_client(LockClient::open(&url)?)?;

    let serving = std::env::args().any(|a| a == "--serve");
    let addr = if serving {
        format!(
            "127.0.0.1:{}",
            std::env::var("PORT").unwrap_or("9184".into())
        )
    } else {
        "127.0.0.1:0".to_owned()
    };
    let server = Arc::new(Server::http(addr.as_str()).map_err(|e| e.to_string())?);
    let port = server.server_addr().to_ip().map_or(0, |a| a.port());
    serve(Arc::clone(&server), handle);
    println!("metrics on http://127.0.0.1:{port}/metrics");

    if serving {
        for worker in workers(None) {
            worker.join().expect("worker panicked")?;
        }
        return Ok(());
    }
    for worker in workers(Some(ROUNDS)) {
        worker.join().expect("worker panicked")?;
    }
    let body = get(port, "/metrics")?;
    let ours: Vec<&str> = body
        .lines()
        .filter(|l| l.contains("redis_lock_") && !l.contains("_bucket"))
        .collect();
    for line in &ours {
        println!("{line}");
    }
    let acquired = format!(
        "redis_lock_acquire_seconds_count{{outcome=\"acquired\",primitive=\"mutex\",label=\"report:{{shard}}\"}} {}",
        WORKERS * ROUNDS
    );
    if !ours.iter().any(|l| *l == acquired) {
        return Err(format!("expected the line {acquired:?} in /metrics").into());
    }
    if ours.iter().any(|l| l.contains("label=\"report:0\"")) {
        return Err("a lock name leaked into a label".into());
    }
    println!(
        "ok: {} acquisitions of 3 contended locks, labelled by key template",
        WORKERS * ROUNDS
    );
    Ok(())
}
