//! Core behaviour of the lock against real redis-server processes: mutual exclusion across
//! threads and processes, the watchdog, release outcomes, inspection and housekeeping.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use redis_lock::{Error, LockMode, LockOptions, LostReason, ReleaseOutcome, RetryStrategy};
use redis_lock_tests::{
    RedisServer, assert_names_holder, client, read_line_starting, requests, shown, signal,
    spawn_holder, wait_until,
};

const HOLDER: &str = env!("CARGO_BIN_EXE_lock-holder");

fn get_counter(server: &RedisServer, key: &str) -> i64 {
    redis::cmd("GET")
        .arg(key)
        .query::<Option<i64>>(&mut server.connection())
        .unwrap()
        .unwrap_or(0)
}

#[test]
fn eight_threads_count_exactly_under_the_lock() {
    let server = RedisServer::start();
    let locks = client(&server);
    let threads: Vec<_> = (0..8)
        .map(|_| {
            let locks = locks.clone();
            let mut redis = server.connection();
            std::thread::spawn(move || {
                for _ in 0..200 {
                    let guard = locks.lock("counter").unwrap();
                    let n: Option<i64> = redis::cmd("GET").arg("n").query(&mut redis).unwrap();
                    std::thread::yield_now();
                    redis::cmd("SET")
                        .arg("n")
                        .arg(n.unwrap_or(0) + 1)
                        .query::<()>(&mut redis)
                        .unwrap();
                    drop(guard);
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    assert_eq!(get_counter(&server, "n"), 1600);
}

#[test]
fn three_processes_count_exactly_under_the_lock() {
    let server = RedisServer::start();
    let url = server.url();
    let mut children: Vec<_> = (0..3)
        .map(|_| {
            std::process::Command::new(HOLDER)
                .args(["count", &url, "shared", "150"])
                .stdout(std::process::Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    for child in &mut children {
        assert!(read_line_starting(child, "DONE", Duration::from_secs(60)).is_some());
        assert!(child.wait().unwrap().success());
    }
    assert_eq!(get_counter(&server, "shared:counter"), 450);
}

#[test]
fn watchdog_keeps_a_short_ttl_lock_alive() {
    let server = RedisServer::start();
    let locks = client(&server);
    let guard = locks
        .options("long-job")
        .ttl(Duration::from_secs(1))
        .acquire()
        .unwrap();
    let other = client(&server);
    let start = Instant::now();
    while start.elapsed() < Duration::from_secs(4) {
        assert!(
            other.try_lock("long-job").unwrap().is_none(),
            "lock was free after {:?}",
            start.elapsed()
        );
        assert!(!guard.is_lost());
        std::thread::sleep(Duration::from_millis(100));
    }
    assert_eq!(guard.release().unwrap(), ReleaseOutcome::Released);
}

/// Renewals that fall due together go out as one pipeline on one connection, so thousands of
/// held locks cannot queue for the pool (store/combine.rs). The server is paused while 64
/// renewals fall due: each renewal taking a pooled connection of its own would open the
/// whole pool (16) against the paused server; combined, they wait behind one request.
#[test]
fn renewals_falling_due_together_share_one_connection() {
    const LOCKS: usize = 64;
    let server = RedisServer::start();
    let locks = redis_lock::LockClient::builder(&server.url())
        .io_timeout(Duration::from_secs(3))
        .build()
        .unwrap();
    let mut probe = server.connection();
    let guards: Vec<_> = (0..LOCKS)
        .map(|i| {
            locks
                .options(&format!("batch-{i}"))
                .ttl(Duration::from_millis(1500))
                .acquire()
                .unwrap()
        })
        .collect();
    let connections = |probe: &mut redis::Connection| -> u64 {
        let info: String = redis::cmd("INFO").arg("stats").query(probe).unwrap();
        info.lines()
            .find_map(|l| l.strip_prefix("total_connections_received:"))
            .and_then(|v| v.trim().parse().ok())
            .unwrap()
    };
    let before = connections(&mut probe);
    server.pause();
    // The renewals fall due a third of the TTL after each acquisition (within a few ms of
    // each other): keep the server paused past that, then let it answer.
    std::thread::sleep(Duration::from_millis(800));
    server.resume();
    // Unrenewed since the pause, a key has at most 700 ms left; renewed every 500 ms, at
    // least 1000 ms.
    let renewed = wait_until(Duration::from_secs(3), || {
        (0..LOCKS).all(|i| {
            redis::cmd("PTTL")
                .arg(format!("lock:{{batch-{i}}}"))
                .query::<i64>(&mut probe)
                .unwrap()
                > 900
        })
    });
    assert!(renewed, "every lock renewed once the server answered");
    let opened = connections(&mut probe) - before;
    assert!(
        opened <= 2,
        "{LOCKS} renewals falling due together opened {opened} connections"
    );
    for g in guards {
        assert!(!g.is_lost());
        assert_eq!(g.release().unwrap(), ReleaseOutcome::Released);
    }
}

#[test]
fn without_watchdog_the_lock_expires() {
    let server = RedisServer::start();
    let locks = client(&server);
    let guard = locks
        .options("short-job")
        .ttl(Duration::from_millis(300))
        .watchdog(false)
        .acquire()
        .unwrap();
    let other = client(&server);
    assert!(other.try_lock("short-job").unwrap().is_none());
    // Waiting is bounded by the holder's TTL: this returns once it expires.
    let second = other
        .try_lock_for("short-job", Duration::from_secs(5))
        .unwrap();
    assert!(second.is_some());
    assert!(guard.is_lost());
    assert!(matches!(guard.ensure_held(), Err(Error::Lost { .. })));
    assert_eq!(guard.release().unwrap(), ReleaseOutcome::Lost);
}

#[test]
fn killed_holder_process_frees_the_lock_within_its_ttl() {
    let server = RedisServer::start();
    let mut holder = spawn_holder(HOLDER, &["hold", &server.url(), "crash", "1000", "on"]);
    assert!(read_line_starting(&mut holder, "ACQUIRED", Duration::from_secs(10)).is_some());
    let locks = client(&server);
    assert!(locks.try_lock("crash").unwrap().is_none());
    signal(&holder, libc::SIGKILL);
    let killed = Instant::now();
    holder.wait().unwrap();
    let guard = locks.try_lock_for("crash", Duration::from_secs(5)).unwrap();
    assert!(guard.is_some());
    let took = killed.elapsed();
    assert!(
        took < Duration::from_millis(1500),
        "took {took:?} for a 1 s TTL"
    );
}

#[test]
fn late_release_after_expiry() {
    let server = RedisServer::start();
    let locks = client(&server);
    let guard = locks
        .options("late")
        .ttl(Duration::from_millis(100))
        .watchdog(false)
        .acquire()
        .unwrap();
    assert!(wait_until(Duration::from_secs(2), || locks
        .inspect("late")
        .unwrap()
        .is_none()));
    assert_eq!(guard.release().unwrap(), ReleaseOutcome::Late);
}

#[test]
fn lost_release_leaves_the_new_holders_lock_alone() {
    let server = RedisServer::start();
    let a = client(&server);
    let b = client(&server);
    let first = a
        .options("taken")
        .ttl(Duration::from_millis(100))
        .watchdog(false)
        .acquire()
        .unwrap();
    let second = b
        .try_lock_for("taken", Duration::from_secs(2))
        .unwrap()
        .unwrap();
    assert!(second.fencing_token() > first.fencing_token());
    assert_eq!(first.release().unwrap(), ReleaseOutcome::Lost);
    // The second holder still holds it.
    assert!(second.remaining_ttl().unwrap().is_some());
    assert!(a.try_lock("taken").unwrap().is_none());
    assert_eq!(second.release().unwrap(), ReleaseOutcome::Released);
}

#[test]
fn another_client_cannot_renew_or_release_what_it_does_not_hold() {
    let server = RedisServer::start();
    let a = client(&server);
    let guard = a
        .options("mine")
        .ttl(Duration::from_secs(5))
        .acquire()
        .unwrap();
    let mut redis = server.connection();
    // A second party that knows the key but not the token, talking to Redis directly.
    // (The lock is a string `token \n info`: taken on the native fast path.)
    let deleted: i64 = redis::Script::new(
        "local v = redis.call('GET', KEYS[1]) if v and string.sub(v, 1, 33) == ARGV[1] .. '\\n' then return redis.call('DEL', KEYS[1]) end return 0",
    )
    .key("lock:{mine}")
    .arg("00000000000000000000000000000000")
    .invoke(&mut redis)
    .unwrap();
    assert_eq!(deleted, 0);
    // And through the library: a second guard cannot be had, a force-less release is not possible.
    let b = client(&server);
    assert!(b.try_lock("mine").unwrap().is_none());
    assert!(guard.remaining_ttl().unwrap().unwrap() > Duration::from_secs(4));
    guard.extend(Duration::from_secs(9)).unwrap();
    assert!(guard.remaining_ttl().unwrap().unwrap() > Duration::from_secs(8));
}

#[test]
fn extend_and_remaining_ttl_report_loss() {
    let server = RedisServer::start();
    let locks = client(&server);
    let guard = locks
        .options("ext")
        .ttl(Duration::from_secs(5))
        .acquire()
        .unwrap();
    let _: () = redis::cmd("DEL")
        .arg("lock:{ext}")
        .query(&mut server.connection())
        .unwrap();
    // Gone long before its 5 s TTL ran out: deleted, not expired.
    assert!(matches!(
        guard.remaining_ttl(),
        Err(Error::Lost {
            reason: LostReason::Deleted,
            ..
        })
    ));
    assert!(guard.is_lost());
    assert!(matches!(
        guard.extend(Duration::from_secs(5)),
        Err(Error::Lost { .. })
    ));
}

#[test]
fn watchdog_reports_a_deleted_lock_through_the_callback() {
    let server = RedisServer::start();
    let locks = client(&server);
    let calls = Arc::new(AtomicUsize::new(0));
    let seen = Arc::clone(&calls);
    let (tx, rx) = std::sync::mpsc::channel();
    let guard = locks
        .options("watched")
        .ttl(Duration::from_millis(300))
        .on_lost(move |e| {
            assert_eq!(e.key, "watched");
            seen.fetch_add(1, Ordering::SeqCst);
            let _ = tx.send(e.reason);
        })
        .acquire()
        .unwrap();
    let _: () = redis::cmd("DEL")
        .arg("lock:{watched}")
        .query(&mut server.connection())
        .unwrap();
    assert!(wait_until(Duration::from_secs(2), || guard.is_lost()));
    assert!(wait_until(Duration::from_secs(1), || calls
        .load(Ordering::SeqCst)
        == 1));
    // Found gone at a renewal, while the TTL it set still ran: somebody deleted it.
    assert_eq!(
        rx.recv_timeout(Duration::from_secs(1)).unwrap(),
        LostReason::Deleted
    );
    assert_eq!(guard.release().unwrap(), ReleaseOutcome::Late);
}

/// Redis keeps expiries in whole milliseconds. A TTL with a fraction of a millisecond is sent
/// rounded down, and the holder's own estimate must use the rounded value: it may never call
/// the lock held once Redis has dropped the key.
#[test]
fn the_local_expiry_is_never_later_than_redis() {
    let server = RedisServer::start();
    let locks = client(&server);
    let mut raw = server.connection();
    for round in 0..5 {
        let guard = locks
            .options("fraction")
            .ttl(Duration::from_micros(30_990))
            .watchdog(false)
            .acquire()
            .unwrap();
        // Ask (bounded, without sleeping: the window under test is below a millisecond) until
        // Redis no longer has the key; EXISTS expires it lazily, on time.
        let started = Instant::now();
        while redis::cmd("EXISTS")
            .arg("lock:{fraction}")
            .query::<bool>(&mut raw)
            .unwrap()
        {
            assert!(
                started.elapsed() < Duration::from_secs(1),
                "round {round}: never expired"
            );
        }
        assert!(
            guard.is_lost(),
            "round {round}: Redis dropped the key but the guard still calls it held"
        );
        assert_eq!(guard.release().unwrap(), ReleaseOutcome::Late);
    }
}

#[test]
fn max_hold_stops_renewing() {
    let server = RedisServer::start();
    let locks = client(&server);
    let guard = locks
        .options("capped")
        .ttl(Duration::from_millis(300))
        .max_hold(Duration::from_millis(400))
        .acquire()
        .unwrap();
    let other = client(&server);
    let got = other
        .try_lock_for("capped", Duration::from_secs(5))
        .unwrap();
    assert!(got.is_some());
    let err = guard.ensure_held().unwrap_err();
    assert!(err.is_lost(), "{err}");
}

#[test]
fn busy_and_timeout_are_told_apart_from_redis_errors() {
    let server = RedisServer::start();
    let locks = client(&server);
    let _held = locks.lock("busy").unwrap();
    let other = client(&server);
    assert!(other.try_lock("busy").unwrap().is_none());
    let err = other
        .acquire_with("busy", &LockOptions::new().wait(Duration::ZERO))
        .unwrap_err();
    assert!(matches!(err, Error::Busy { .. }), "{err}");
    let start = Instant::now();
    let err = other
        .acquire_with("busy", &LockOptions::new().wait(Duration::from_millis(300)))
        .unwrap_err();
    assert!(matches!(err, Error::Timeout { .. }), "{err}");
    let waited = start.elapsed();
    assert!(
        waited >= Duration::from_millis(300) && waited < Duration::from_millis(800),
        "{waited:?}"
    );
    assert!(err.is_busy() && !err.is_connection_error());
}

/// Busy and timeout errors say who holds the lock and for how much longer, as `inspect` does,
/// so that a handler can answer with `Retry-After`; the semaphore's name the permit that frees
/// first, a multi-lock's the member someone holds.
#[test]
fn busy_and_timeout_errors_carry_the_holder_and_its_remaining_ttl() {
    let server = RedisServer::start();
    let locks = client(&server);
    let _held = locks
        .options("invoice:9")
        .ttl(Duration::from_secs(20))
        .metadata("worker 3")
        .acquire()
        .unwrap();
    let other = client(&server);
    let shown = other.inspect("invoice:9").unwrap().unwrap();
    for (err, busy) in [
        (
            other
                .acquire_with("invoice:9", &LockOptions::new().wait(Duration::ZERO))
                .map(drop)
                .unwrap_err(),
            true,
        ),
        (
            other
                .acquire_with(
                    "invoice:9",
                    &LockOptions::new().wait(Duration::from_millis(50)),
                )
                .map(drop)
                .unwrap_err(),
            false,
        ),
    ] {
        assert_eq!(matches!(err, Error::Busy { .. }), busy, "{err}");
        let holder = err.holder().expect("the holder");
        assert_eq!(holder.host, shown.host);
        assert!(holder.host.is_some());
        assert_eq!(holder.pid, Some(std::process::id()));
        assert_eq!(holder.since, shown.acquired_at);
        assert!(holder.since.is_some());
        assert_eq!(holder.metadata.as_deref(), Some("worker 3"));
        let left = err.retry_after().expect("a remaining ttl");
        let before = shown.remaining_ttl.unwrap();
        assert!(
            left <= before && left > before - Duration::from_secs(2),
            "{left:?} against {before:?}"
        );
        let text = err.to_string();
        assert!(
            text.contains(&format!("(pid {})", std::process::id())) && text.contains("expires in"),
            "{text}"
        );
    }
    // A semaphore: the permit that frees first.
    let exports = locks.semaphore("exports", 1).unwrap();
    let _permit = locks
        .semaphore("exports", 1)
        .unwrap()
        .acquire_with(&LockOptions::new().metadata("export 1"))
        .unwrap();
    let err = other
        .semaphore("exports", 1)
        .unwrap()
        .acquire_with(&LockOptions::new().wait(Duration::ZERO))
        .map(drop)
        .unwrap_err();
    let first = exports.inspect().unwrap().holders.remove(0);
    let holder = err.holder().expect("the permit's holder");
    assert_eq!(holder.metadata.as_deref(), Some("export 1"));
    assert_eq!(holder.pid, Some(std::process::id()));
    assert!(err.retry_after().unwrap() <= first.remaining_ttl + Duration::from_secs(1));
    // A multi-lock: the member someone holds.
    let err = other
        .acquire_all_with(
            ["a-free", "invoice:9"],
            &LockOptions::new().wait(Duration::ZERO),
        )
        .map(drop)
        .unwrap_err();
    assert_eq!(err.holder().unwrap().metadata.as_deref(), Some("worker 3"));
    // Other errors carry none.
    let bad = other.try_lock("").unwrap_err();
    assert_eq!((bad.holder(), bad.retry_after()), (None, None));
}

/// A busy error names the holder its attempt was told of (the same as `inspect` says), at no
/// request beyond the attempt's: a `try_` call that finds the lock busy and a call that
/// reports it as an error cost the same. The mutex in both forms (native string, hash),
/// the read-write lock from both sides, a semaphore and a multi-lock.
#[test]
fn a_busy_error_names_the_holder_its_attempt_saw_at_no_extra_request() {
    let server = RedisServer::start();
    let locks = client(&server);
    let zero = LockOptions::new().wait(Duration::ZERO);
    // Each check on fresh clients, so that both calls take the same path (a lock found busy
    // lately skips the native fast path).
    let check = |name: &str, opts: &LockOptions, expected: u64| {
        let before = shown(&locks.inspect(name).unwrap().unwrap());
        let (a, b) = (client(&server), client(&server));
        let (tried, none) = requests(&a, || a.try_acquire_with(name, opts).unwrap());
        assert!(none.is_none());
        let (erred, err) = requests(&b, || b.acquire_with(name, opts).map(drop).unwrap_err());
        let after = shown(&locks.inspect(name).unwrap().unwrap());
        assert_names_holder(&err, &before, &after);
        assert_eq!((tried, erred), (expected, expected), "{name}");
    };
    // Native: the pipeline, then the script that finds it busy.
    let _native = locks
        .options("native")
        .metadata("string form")
        .acquire()
        .unwrap();
    check("native", &zero, 2);
    // A hash (a minimum hold needs the script): the script alone.
    let _hash = locks
        .options("hash")
        .metadata("hash form")
        .hold_at_least(Duration::from_millis(1))
        .acquire()
        .unwrap();
    check(
        "hash",
        &zero.clone().hold_at_least(Duration::from_millis(1)),
        1,
    );
    // A write lock keeps readers out, a reader keeps the writer out (the lock's whole TTL,
    // the share that expires first).
    let _writer = locks
        .options("rw-w")
        .mode(LockMode::Write)
        .metadata("writer")
        .acquire()
        .unwrap();
    check("rw-w", &zero.clone().mode(LockMode::Read), 1);
    let _long = locks
        .options("rw-r")
        .mode(LockMode::Read)
        .ttl(Duration::from_secs(40))
        .metadata("long reader")
        .acquire()
        .unwrap();
    let reader = client(&server);
    let _short = reader
        .options("rw-r")
        .mode(LockMode::Read)
        .ttl(Duration::from_secs(20))
        .metadata("short reader")
        .acquire()
        .unwrap();
    check("rw-r", &zero.clone().mode(LockMode::Write), 1);
    let err = client(&server)
        .acquire_with("rw-r", &zero.clone().mode(LockMode::Write))
        .map(drop)
        .unwrap_err();
    assert_eq!(
        err.holder().unwrap().metadata.as_deref(),
        Some("short reader")
    );
    // A semaphore: the permit that frees first.
    let permits = |c: &redis_lock::LockClient| c.semaphore("exports", 2).unwrap();
    let _p1 = permits(&locks)
        .acquire_with(
            &LockOptions::new()
                .ttl(Duration::from_secs(40))
                .metadata("p1"),
        )
        .unwrap();
    let _p2 = permits(&reader)
        .acquire_with(
            &LockOptions::new()
                .ttl(Duration::from_secs(20))
                .metadata("p2"),
        )
        .unwrap();
    let first = |s: &redis_lock::Semaphore| {
        let p = s
            .inspect()
            .unwrap()
            .holders
            .into_iter()
            .min_by_key(|p| p.remaining_ttl)
            .unwrap();
        (
            p.host,
            p.pid,
            p.acquired_at,
            p.metadata,
            Some(p.remaining_ttl),
        )
    };
    let before = first(&permits(&locks));
    let (a, b) = (client(&server), client(&server));
    let (tried, none) = requests(&a, || permits(&a).try_acquire_with(&zero).unwrap());
    assert!(none.is_none());
    let (erred, err) = requests(&b, || {
        permits(&b).acquire_with(&zero).map(drop).unwrap_err()
    });
    assert_names_holder(&err, &before, &first(&permits(&locks)));
    assert_eq!(before.3.as_deref(), Some("p2"));
    assert_eq!((tried, erred), (1, 1));
    // A multi-lock: the member someone holds, in one script.
    let before = shown(&locks.inspect("native").unwrap().unwrap());
    let (a, b) = (client(&server), client(&server));
    let names = ["a-free", "native"];
    let (tried, none) = requests(&a, || a.try_acquire_all_with(names, &zero).unwrap());
    assert!(none.is_none());
    let (erred, err) = requests(&b, || {
        b.acquire_all_with(names, &zero).map(drop).unwrap_err()
    });
    assert_names_holder(
        &err,
        &before,
        &shown(&locks.inspect("native").unwrap().unwrap()),
    );
    assert_eq!((tried, erred), (1, 1));
    // Waiting, then timing out: the last attempt's holder.
    let err = client(&server)
        .acquire_with("hash", &LockOptions::new().wait(Duration::from_millis(50)))
        .map(drop)
        .unwrap_err();
    assert!(err.is_timeout(), "{err}");
    assert_eq!(err.holder().unwrap().metadata.as_deref(), Some("hash form"));
}

/// `check_held` asks Redis: it reports a lock broken behind the guard's back (an operator's
/// `force_release`, a `DEL`, a takeover) at once, where the local `ensure_held` of a client
/// without loss notification still says held until the watchdog's next renewal, and marks the
/// guard lost. (With notification the local check learns it within milliseconds too:
/// `notify.rs`.)
#[test]
fn check_held_asks_redis_and_reports_a_broken_lock_at_once() {
    let server = RedisServer::start();
    let locks = redis_lock_tests::client_without_notification(&server.url());
    let operator = client(&server);
    // Force release, with the default 30 s TTL: the watchdog would renew only after 10 s.
    let guard = locks.lock("ledger").unwrap();
    let left = guard.check_held().unwrap().expect("a ttl");
    assert!(left > Duration::from_secs(25), "{left:?}");
    operator.force_release("ledger").unwrap();
    assert!(
        guard.ensure_held().is_ok(),
        "the local check cannot know yet"
    );
    let err = guard.check_held().unwrap_err();
    assert!(
        matches!(
            err,
            Error::Lost {
                reason: LostReason::Deleted,
                ..
            }
        ),
        "{err:?}"
    );
    assert!(guard.is_lost() && guard.ensure_held().is_err());
    drop(guard);
    // A `DEL` and a new owner: taken over.
    let guard = locks.lock("ledger").unwrap();
    let _: i64 = redis::cmd("DEL")
        .arg("lock:{ledger}")
        .query(&mut server.connection())
        .unwrap();
    let _other = operator.lock("ledger").unwrap();
    let err = guard.check_held().unwrap_err();
    assert!(
        matches!(
            err,
            Error::Lost {
                reason: LostReason::TakenOver,
                ..
            }
        ),
        "{err:?}"
    );
    // A multi-lock: the member broken is named.
    let both = locks.lock_all(["from", "to"]).unwrap();
    assert!(both.check_held().unwrap().is_some());
    operator.force_release("to").unwrap();
    let err = both.check_held().unwrap_err();
    assert!(
        matches!(&err, Error::Lost { key, .. } if key == "to"),
        "{err:?}"
    );
    assert!(both.is_lost());
}

#[test]
fn retry_strategies_give_up_as_configured() {
    let server = RedisServer::start();
    let locks = client(&server);
    let _held = locks
        .options("r")
        .ttl(Duration::from_secs(10))
        .acquire()
        .unwrap();
    let other = client(&server);
    let before = other.request_count();
    let r = other
        .options("r")
        .wait(Duration::from_secs(5))
        .retry(RetryStrategy::fixed(Duration::from_millis(10)).max_attempts(3))
        .try_acquire()
        .unwrap();
    assert!(r.is_none());
    // The first attempt goes the native way (`SET NX` + `INCR` in one request), finds the
    // lock busy and asks the script (one more); the client then remembers the lock is busy,
    // and the next two attempts are one script call each.
    assert_eq!(other.request_count() - before, 4);
    // Fail fast: the holder's 10 s TTL exceeds the 1 s budget, so no waiting at all.
    let start = Instant::now();
    let r = other
        .options("r")
        .wait(Duration::from_secs(1))
        .retry(RetryStrategy::notify().fail_fast(true))
        .try_acquire()
        .unwrap();
    assert!(r.is_none());
    assert!(start.elapsed() < Duration::from_millis(500));
}

#[test]
fn a_waiter_is_woken_by_the_release() {
    let server = RedisServer::start();
    let locks = client(&server);
    let held = locks
        .options("wake")
        .ttl(Duration::from_secs(30))
        .acquire()
        .unwrap();
    let other = client(&server);
    let waiter = std::thread::spawn(move || {
        let start = Instant::now();
        let g = other.try_lock_for("wake", Duration::from_secs(20)).unwrap();
        (g.is_some(), start.elapsed())
    });
    // Release only once the waiter is blocked: it registers in the same script that finds
    // the lock busy.
    let mut redis = server.connection();
    assert!(wait_until(Duration::from_secs(10), || {
        redis::cmd("ZCARD")
            .arg("lock:{wake}:waiters")
            .query::<i64>(&mut redis)
            .is_ok_and(|n| n == 1)
    }));
    drop(held);
    let (got, waited) = waiter.join().unwrap();
    assert!(got);
    // Woken by the release, not by the 30 s TTL or the 20 s budget.
    assert!(waited < Duration::from_secs(2), "{waited:?}");
}

#[test]
fn inspect_shows_holder_and_metadata() {
    let server = RedisServer::start();
    let locks = client(&server);
    assert!(locks.inspect("job").unwrap().is_none());
    let guard = locks
        .options("job")
        .ttl(Duration::from_secs(10))
        .metadata("nightly")
        .acquire()
        .unwrap();
    let info = locks.inspect("job").unwrap().unwrap();
    assert_eq!(info.pid, Some(std::process::id()));
    assert_eq!(info.metadata.as_deref(), Some("nightly"));
    assert_eq!(info.fencing_token, guard.fencing_token());
    assert!(info.owned);
    assert!(info.remaining_ttl.unwrap() > Duration::from_secs(9));
    assert!(info.host.as_ref().is_some_and(|h| !h.is_empty()));
    let age = std::time::SystemTime::now()
        .duration_since(info.acquired_at.unwrap())
        .unwrap_or_default();
    assert!(age < Duration::from_secs(5));
}

#[test]
fn release_all_frees_every_held_lock() {
    let server = RedisServer::start();
    let locks = client(&server);
    let guards: Vec<_> = (0..5)
        .map(|i| locks.lock(&format!("k{i}")).unwrap())
        .collect();
    let permit = locks.semaphore("pool", 2).unwrap().acquire().unwrap();
    let share = locks.read_lock("report").unwrap();
    let both = locks.lock_all(["m1", "m2"]).unwrap();
    assert_eq!(locks.release_all().unwrap(), 9);
    for i in 0..5 {
        assert!(locks.inspect(&format!("k{i}")).unwrap().is_none());
    }
    // The guards that live on say the lock is not held any more (another client may hold it
    // already): a thread that checks `ensure_held` before committing must not commit.
    let taken = client(&server).lock("k0").unwrap();
    for g in guards.iter().chain([&permit, &share]) {
        assert!(g.is_lost(), "{g:?}");
        assert!(
            matches!(
                g.ensure_held(),
                Err(Error::Lost {
                    reason: LostReason::Released,
                    ..
                })
            ),
            "{g:?}"
        );
    }
    assert!(both.is_lost() && both.ensure_held().is_err());
    assert_eq!(both.lost_member(), Some(("m1", LostReason::Released)));
    for g in guards {
        assert_eq!(g.release().unwrap(), ReleaseOutcome::Released);
    }
    assert_eq!(locks.release_all().unwrap(), 0);
    assert!(
        taken.ensure_held().is_ok(),
        "the other client's lock is untouched"
    );
}

#[test]
fn reentrant_acquisition_joins_on_the_same_thread_only() {
    let server = RedisServer::start();
    // Counts requests exactly: without loss notification's check of a lock held 2 ms (notify.rs).
    let locks = redis_lock_tests::client_without_notification(&server.url());
    let outer = locks.lock_reentrant("re").unwrap();
    let before = locks.request_count();
    let inner = locks.lock_reentrant("re").unwrap();
    assert_eq!(
        locks.request_count(),
        before,
        "re-entering must not talk to Redis"
    );
    assert_eq!(inner.fencing_token(), outer.fencing_token());
    assert_eq!(inner.release().unwrap(), ReleaseOutcome::StillHeld);
    assert!(locks.inspect("re").unwrap().is_some());
    // Another thread is not an owner.
    let other = locks.clone();
    let t = std::thread::spawn(move || {
        other
            .options("re")
            .reentrant(true)
            .wait(Duration::ZERO)
            .try_acquire()
            .unwrap()
            .is_none()
    });
    assert!(t.join().unwrap());
    assert_eq!(outer.release().unwrap(), ReleaseOutcome::Released);
    assert!(locks.inspect("re").unwrap().is_none());
}

#[test]
fn hold_at_least_keeps_the_lock_after_release() {
    let server = RedisServer::start();
    let locks = client(&server);
    let guard = locks
        .options("cron")
        .hold_at_least(Duration::from_millis(800))
        .acquire()
        .unwrap();
    assert_eq!(guard.release().unwrap(), ReleaseOutcome::Released);
    let info = locks
        .inspect("cron")
        .unwrap()
        .expect("still taken during the minimum hold");
    assert!(!info.owned);
    assert!(locks.try_lock("cron").unwrap().is_none());
    assert!(
        locks
            .try_lock_for("cron", Duration::from_secs(3))
            .unwrap()
            .is_some()
    );
}

#[test]
fn bad_input_gets_clear_errors() {
    let server = RedisServer::start();
    let locks = client(&server);
    let invalid = |r: redis_lock::Result<_>, what: &str| match r {
        Err(Error::InvalidInput { what: w, .. }) => assert_eq!(w, what),
        Err(e) => panic!("expected invalid {what}, got {e}"),
        Ok(_) => panic!("expected invalid {what}, got Ok"),
    };
    invalid(locks.try_lock("").map(|_| ()), "key");
    invalid(
        locks
            .try_lock(&"k".repeat(redis_lock::MAX_KEY_LEN + 1))
            .map(|_| ()),
        "key",
    );
    invalid(
        locks
            .options("k")
            .ttl(Duration::ZERO)
            .try_acquire()
            .map(|_| ()),
        "ttl",
    );
    invalid(
        locks
            .options("k")
            .ttl(Duration::MAX)
            .try_acquire()
            .map(|_| ()),
        "ttl",
    );
    invalid(locks.try_lock_for("k", Duration::MAX).map(|_| ()), "wait");
    invalid(
        redis_lock::LockClient::open("http://nope").map(|_| ()),
        "url",
    );
    invalid(
        redis_lock::LockClient::open("redis://:hunter2@[::1").map(|_| ()),
        "url",
    );
    invalid(
        redis_lock::LockClient::builder(&server.url())
            .namespace("a{b}")
            .build()
            .map(|_| ()),
        "namespace",
    );
    // A key of another type: a clear error, and the value left as it was.
    let mut redis = server.connection();
    let _: () = redis::cmd("SET")
        .arg("lock:{str}")
        .arg("user data")
        .query(&mut redis)
        .unwrap();
    assert!(matches!(
        locks.try_lock("str"),
        Err(Error::WrongType { .. })
    ));
    assert!(matches!(locks.inspect("str"), Err(Error::WrongType { .. })));
    let v: String = redis::cmd("GET")
        .arg("lock:{str}")
        .query(&mut redis)
        .unwrap();
    assert_eq!(v, "user data");
    // Nothing was written for the rejected calls.
    let keys: Vec<String> = redis::cmd("KEYS").arg("*").query(&mut redis).unwrap();
    assert_eq!(keys, vec!["lock:{str}".to_owned()]);
}

#[test]
fn unreachable_redis_fails_within_the_connect_timeout() {
    let port = redis_lock_tests::free_port().unwrap();
    let locks = redis_lock::LockClient::builder(&format!("redis://127.0.0.1:{port}/"))
        .connect_timeout(Duration::from_millis(300))
        .build()
        .unwrap();
    let start = Instant::now();
    let err = locks.try_lock("x").unwrap_err();
    assert!(err.is_connection_error(), "{err}");
    assert!(
        start.elapsed() < Duration::from_secs(1),
        "{:?}",
        start.elapsed()
    );
}

/// A lock a release has just handed to a waiter has no holder stored until the waiter claims
/// it (its watchdog's first renewal): `inspect` says the holder is unknown, `None`, where it
/// used to show an empty host, pid 0 and the Unix epoch as if they were a holder's.
#[test]
fn a_lock_handed_to_a_waiter_has_no_holder_yet() {
    let server = RedisServer::start();
    let locks = client(&server);
    // What a release's handoff leaves (`wire/lua.rs`, `hand_over`): a grant token, a fencing
    // token and an empty `info`, for the handoff grace.
    let mut redis = server.connection();
    redis::cmd("HSET")
        .arg("lock:{handed}")
        .arg(&["token", "0123456789abcdef", "fence", "7", "info", ""])
        .query::<()>(&mut redis)
        .unwrap();
    redis::cmd("PEXPIRE")
        .arg("lock:{handed}")
        .arg(60_000)
        .query::<()>(&mut redis)
        .unwrap();
    let info = locks.inspect("handed").unwrap().expect("held");
    assert!(info.owned, "a grant is owned: {info:?}");
    assert_eq!(info.fencing_token, 7);
    assert_eq!((info.host, info.pid, info.acquired_at), (None, None, None));
    // A lock with a holder says who.
    let guard = locks.lock("claimed").unwrap();
    let info = locks.inspect("claimed").unwrap().expect("held");
    assert_eq!(info.pid, Some(std::process::id()));
    assert!(
        info.host.is_some() && info.acquired_at.is_some(),
        "{info:?}"
    );
    drop(guard);
}

/// The README's account of `release()` names every outcome the enum has.
#[test]
fn the_readme_tells_every_release_outcome() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let readme = std::fs::read_to_string(root.join("README.md")).unwrap();
    // Wherever the enum lives in the library's source, its variants are the lines of its body.
    let mut variants = Vec::new();
    let mut dirs = vec![root.join("redis-lock/src")];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                dirs.push(path);
                continue;
            }
            let text = std::fs::read_to_string(&path).unwrap_or_default();
            let Some((_, body)) = text.split_once("pub enum ReleaseOutcome {") else {
                continue;
            };
            let body = body.split_once("\n}").unwrap().0;
            variants.extend(body.lines().filter_map(|line| {
                let name = line.trim().strip_suffix(',')?;
                name.chars()
                    .all(|c| c.is_ascii_alphanumeric())
                    .then(|| name.to_owned())
            }));
        }
    }
    assert!(variants.len() >= 5, "{variants:?}");
    let row = readme
        .lines()
        .find(|line| line.starts_with("| `release()` |"))
        .expect("the README's release() row");
    let example = readme
        .lines()
        .find(|line| line.contains("guard.release()?);"))
        .expect("the README's release example");
    for variant in &variants {
        assert!(
            row.contains(&format!("`{variant}`")),
            "{variant} missing: {row}"
        );
        assert!(
            example.contains(variant.as_str()),
            "{variant} missing: {example}"
        );
    }
}

#[test]
fn passwords_stay_out_of_debug_and_errors() {
    let server = RedisServer::start_with(&["--requirepass", "hunter2-secret"]);
    let url = format!("redis://:hunter2-secret@127.0.0.1:{}/", server.port());
    let locks = redis_lock_tests::client_for(&url);
    let guard = locks.lock("secret").unwrap();
    for text in [format!("{locks:?}"), format!("{guard:?}")] {
        assert!(!text.contains("hunter2"), "{text}");
    }
    assert!(!format!("{guard:?}").contains(guard.token()));
    let wrong =
        redis_lock_tests::client_for(&format!("redis://:wrong-pass@127.0.0.1:{}/", server.port()));
    let err = wrong.try_lock("secret").unwrap_err();
    assert!(!format!("{err} {err:?}").contains("wrong-pass"), "{err:?}");
    // A refused password is the server's answer, not an outage: retrying will not help.
    assert!(matches!(err, redis_lock::Error::Redis(_)), "{err:?}");
    assert!(!err.is_connection_error() && !err.is_retryable(), "{err:?}");
    let bad = redis_lock::LockClient::open("redis://:hunter2-secret@[::1").unwrap_err();
    assert!(!format!("{bad} {bad:?}").contains("hunter2"), "{bad:?}");
}

/// `lock()` waits until the lock is free unless the client's `default_wait` says otherwise.
#[test]
fn lock_waits_until_free_unless_the_client_sets_a_default_wait() {
    let server = RedisServer::start();
    let holder = client(&server);
    let bounded = redis_lock::LockClient::builder(&server.url())
        .default_wait(Duration::from_millis(200))
        .build()
        .unwrap();
    let patient = redis_lock::LockClient::builder(&server.url())
        .build()
        .unwrap();
    let held = holder.lock("patience").unwrap();
    let started = Instant::now();
    let err = bounded.lock("patience").unwrap_err();
    assert!(matches!(err, Error::Timeout { .. }), "{err}");
    assert!(started.elapsed() >= Duration::from_millis(200));
    std::thread::scope(|s| {
        let waiter = s.spawn(|| patient.lock("patience").map(|g| g.fencing_token()));
        std::thread::sleep(Duration::from_millis(700)); // held this long: the behaviour under test
        let fence = held.fencing_token();
        drop(held);
        // The next holder's token is higher (a busy native attempt may have used a number).
        assert!(waiter.join().unwrap().unwrap() > fence);
    });
}

/// A loss callback set on the client applies to `lock()` (which has no options).
#[test]
fn a_client_wide_on_lost_callback_hears_about_plain_locks() {
    let server = RedisServer::start();
    let (tx, rx) = std::sync::mpsc::channel();
    let locks = redis_lock::LockClient::builder(&server.url())
        // Short enough that even a renewal (a third of it) finds the deletion within the 2 s
        // waited below; long enough not to expire first on a loaded machine.
        .default_ttl(Duration::from_millis(1500))
        .on_lost(move |e| {
            let _ = tx.send((e.key.clone(), e.reason));
        })
        .build()
        .unwrap();
    let guard = locks.lock("watched-by-client").unwrap();
    let _: () = redis::cmd("DEL")
        .arg("lock:{watched-by-client}")
        .query(&mut server.connection())
        .unwrap();
    let (key, reason) = rx.recv_timeout(Duration::from_secs(2)).unwrap();
    assert_eq!(key, "watched-by-client");
    assert_eq!(reason, LostReason::Deleted);
    assert!(guard.is_lost());
}

/// A thread that asks again for a lock it holds, without reentrancy, would wait for itself
/// (forever, now that `lock` waits until free): a waiting call gets `AlreadyHeld` at once
/// instead. The `try_` family reports it busy (`Ok(None)`) at once, as `std`'s and
/// parking_lot's `try_lock` do, so that `?` on a `try_` call does not end the caller. A
/// reentrant acquisition still joins, and another thread still simply waits.
#[test]
fn asking_again_for_a_lock_this_thread_holds_fails_at_once() {
    let server = RedisServer::start();
    // Counts requests exactly: without loss notification's check of a lock held 2 ms (notify.rs).
    let locks = redis_lock_tests::client_without_notification(&server.url());
    let guard = locks.lock("mine").unwrap();
    assert!(locks.is_held_by_current_thread("mine"));
    assert!(!locks.is_held_by_current_thread("other"));
    let before = locks.request_count();
    let started = Instant::now();
    for err in [
        locks.lock("mine").map(drop).unwrap_err(),
        locks
            .acquire_with("mine", &LockOptions::new().wait(Duration::from_secs(5)))
            .map(drop)
            .unwrap_err(),
        locks.options("mine").acquire().map(drop).unwrap_err(),
    ] {
        assert!(
            matches!(&err, Error::AlreadyHeld { key } if key == "mine"),
            "{err:?}"
        );
    }
    let deadline = Instant::now() + Duration::from_secs(5);
    for busy in [
        locks.try_lock("mine"),
        locks.try_lock_for("mine", Duration::from_secs(5)),
        locks.try_lock_until("mine", deadline),
        locks.try_acquire_with("mine", &LockOptions::new().wait(Duration::from_secs(5))),
        locks.options("mine").try_acquire(),
    ] {
        assert!(matches!(busy, Ok(None)), "{busy:?}");
    }
    // Busy at once, not after the 5 s waits.
    assert!(started.elapsed() < Duration::from_millis(1000));
    assert_eq!(
        locks.request_count(),
        before,
        "refused without asking Redis"
    );
    // Reentrancy joins.
    let joined = locks.lock_reentrant("mine").unwrap();
    assert_eq!(joined.hold_count(), 2);
    drop(joined);
    assert_eq!(guard.hold_count(), 1);
    // Another thread is no owner: it waits (bounded here) and gets busy, not an error.
    std::thread::scope(|s| {
        let other = s
            .spawn(|| locks.try_lock_for("mine", Duration::from_millis(100)))
            .join()
            .unwrap();
        assert!(matches!(other, Ok(None)), "{other:?}");
    });
    drop(guard);
    assert!(!locks.is_held_by_current_thread("mine"));
    assert!(locks.try_lock("mine").unwrap().is_some());
}
