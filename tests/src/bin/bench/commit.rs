//! Commit under the lock against the two-step commit it replaces, and the time from a change
//! to an observer of it. The commit, on one held lock: the
//! two-step form asks `check_held()` and then sends a plain pipeline (`INCR` + `SET`) on an
//! application's own connection (two round trips, and a gap between them in which the lock
//! can be lost); `commit` sends the same pipeline with the ownership check as one script (one
//! round trip, no gap). In alternating slices, so that the machine's drift weighs on both.

use std::time::Duration;

use redis_lock::LockClient;

use crate::report::{Json, f};
use crate::uncontended::{self, Alternating, Measured, per_second};

#[derive(Debug)]
pub(crate) struct Commit {
    pub(crate) json: Json,
    pub(crate) lines: Vec<String>,
}

fn pipeline() -> redis::Pipeline {
    let mut pipe = redis::pipe();
    pipe.cmd("INCR")
        .arg("bench:commit:n")
        .cmd("SET")
        .arg("bench:commit:last")
        .arg("x")
        .ignore();
    pipe
}

pub(crate) fn run(url: &str, client: &LockClient, total: Duration) -> Commit {
    let guard = client
        .options("bench:commit")
        .ttl(Duration::from_secs(60))
        .acquire()
        .expect("the bench's lock");
    let pipe = pipeline();
    let mut app = redis::Client::open(url).unwrap().get_connection().unwrap();
    let requests = |m: &Measured| m.commands.values().sum::<f64>();
    let two_step = |slice| {
        uncontended::measure_sending(url, slice, &["incr", "set"], || {
            guard.check_held().expect("held");
            let (_n,): (i64,) = pipe.query(&mut app).expect("the plain pipeline");
        })
    };
    let one_step = |slice| {
        uncontended::measure(url, slice, || {
            let (_n,): (i64,) = guard.commit(&pipe).expect("the commit");
        })
    };
    let a: Alternating = uncontended::alternating(total, 9, two_step, one_step);
    let (two, one) = (&a.raw, &a.cycle);
    let lines = vec![
        a.line_against(
            "commit(INCR + SET)",
            "check_held() + the same pipeline on a plain connection",
            "two-step",
        ),
        format!(
            "commit: 1 round trip, Redis exec {} us, {} calls as Redis counts them (script-internal included); check_held() + pipeline: 2 round trips, Redis exec {} us, {} calls; commit/two-step Redis exec ratio median {}",
            f(one.redis_exec_us, 1),
            f(requests(one), 1),
            f(two.redis_exec_us, 1),
            f(requests(two), 1),
            f(a.by_exec[a.by_exec.len() / 2], 2),
        ),
    ];
    drop(guard);
    Commit {
        json: Json::obj()
            .with("commit", uncontended::json(one))
            .with("check_held_then_pipeline", uncontended::json(two))
            .with("rate_ratio_median", a.by_rate[a.by_rate.len() / 2])
            .with("per_second_commit", per_second(one))
            .with("per_second_two_step", per_second(two)),
        lines,
    }
}

/// Change to observer: a holder takes and releases a free lock `changes / 2` times; each
/// change is timed from just before it is made to the observer's reading of it
/// (`LockChange::seen_at`).
pub(crate) fn observe(url: &str, changes: usize) -> Commit {
    let watcher = crate::contended::bench_client(url);
    let holder = crate::contended::bench_client(url);
    let observer = watcher.observe("bench:observed").expect("an observer");
    observer.recv().expect("the first state");
    let mut delays = Vec::with_capacity(changes);
    for _ in 0..changes / 2 {
        let at = std::time::Instant::now();
        let guard = holder.lock("bench:observed").expect("free");
        let seen = observer
            .recv_timeout(Duration::from_secs(5))
            .expect("observing")
            .expect("the take seen");
        delays.push(seen.seen_at.saturating_duration_since(at).as_secs_f64() * 1e6);
        let at = std::time::Instant::now();
        drop(guard);
        let seen = observer
            .recv_timeout(Duration::from_secs(5))
            .expect("observing")
            .expect("the release seen");
        delays.push(seen.seen_at.saturating_duration_since(at).as_secs_f64() * 1e6);
    }
    let s = crate::stats::summarize(&mut delays);
    Commit {
        json: Json::obj()
            .with("changes", delays.len() as f64)
            .with("p50_us", s.p50)
            .with("p99_us", s.p99)
            .with("max_us", s.max)
            .with("notified", observer.notified()),
        lines: vec![format!(
            "change to observer: {} changes (take, release) of a free lock, notified {}: p50 {} us, p99 {} us, max {} us",
            delays.len(),
            observer.notified(),
            f(s.p50, 0),
            f(s.p99, 0),
            f(s.max, 0),
        )],
    }
}
