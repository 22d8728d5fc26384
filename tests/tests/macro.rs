//! `#[distributed_lock]` against real redis-server processes: exclusion, independent keys,
//! skip, busy errors, waiting, release on every exit path, reentrancy, minimum hold, the
//! guard binding, lost locks, the default client, and the cost in Redis commands.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use redis_lock::{Error, LockClient, distributed_lock};
use redis_lock_tests::{RedisServer, client, command_counts, reset_stats, wait_until};

#[derive(Debug)]
enum AppError {
    Lock(Error),
    Parse(std::num::ParseIntError),
    Refused(&'static str),
}

impl From<Error> for AppError {
    fn from(e: Error) -> Self {
        AppError::Lock(e)
    }
}

impl From<std::num::ParseIntError> for AppError {
    fn from(e: std::num::ParseIntError) -> Self {
        AppError::Parse(e)
    }
}

impl AppError {
    fn lock_error(self) -> Error {
        match self {
            AppError::Lock(e) => e,
            other => panic!("expected a lock error, got {other:?}"),
        }
    }
}

fn is_free(locks: &LockClient, key: &str) -> bool {
    locks.inspect(key).unwrap().is_none()
}

// --- exclusion ----------------------------------------------------------------------------

/// Inside the lock: how many callers are in the body now, and the most there ever were.
static INSIDE: AtomicUsize = AtomicUsize::new(0);
static MOST_INSIDE: AtomicUsize = AtomicUsize::new(0);

/// A read-modify-write of a Redis counter that loses updates unless calls are exclusive.
#[distributed_lock(key = "counter", client = locks, ttl = 10)]
fn bump(locks: &LockClient, redis: &mut redis::Connection) -> Result<(), AppError> {
    let now = INSIDE.fetch_add(1, Ordering::SeqCst) + 1;
    MOST_INSIDE.fetch_max(now, Ordering::SeqCst);
    let n: Option<i64> = redis::cmd("GET").arg("n").query(redis).unwrap();
    std::thread::yield_now();
    redis::cmd("SET")
        .arg("n")
        .arg(n.unwrap_or(0) + 1)
        .query::<()>(redis)
        .unwrap();
    INSIDE.fetch_sub(1, Ordering::SeqCst);
    Ok(())
}

#[test]
fn two_threads_never_overlap() {
    let server = RedisServer::start();
    let threads: Vec<_> = (0..2)
        .map(|_| {
            let locks = client(&server);
            let mut redis = server.connection();
            std::thread::spawn(move || {
                for _ in 0..150 {
                    bump(&locks, &mut redis).unwrap();
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    let n: i64 = redis::cmd("GET")
        .arg("n")
        .query(&mut server.connection())
        .unwrap();
    assert_eq!(n, 300);
    assert_eq!(MOST_INSIDE.load(Ordering::SeqCst), 1);
}

struct Accounts {
    locks: LockClient,
    inside: AtomicUsize,
}

impl Accounts {
    /// Waits (bounded) inside the lock until `expected` callers are inside at once.
    #[distributed_lock(key = "account:{id}", client = &self.locks, wait = "0s")]
    fn meet(&self, id: u32, expected: usize) -> Result<bool, AppError> {
        self.inside.fetch_add(1, Ordering::SeqCst);
        let met = wait_until(Duration::from_secs(10), || {
            self.inside.load(Ordering::SeqCst) >= expected
        });
        Ok(met)
    }
}

#[test]
fn two_key_values_run_concurrently() {
    let server = RedisServer::start();
    let accounts = Accounts {
        locks: client(&server),
        inside: AtomicUsize::new(0),
    };
    std::thread::scope(|s| {
        let one = s.spawn(|| accounts.meet(1, 2));
        let two = s.spawn(|| accounts.meet(2, 2));
        assert!(
            one.join().unwrap().unwrap(),
            "account 1 never saw account 2 inside"
        );
        assert!(
            two.join().unwrap().unwrap(),
            "account 2 never saw account 1 inside"
        );
    });

    // The same value is one lock: the second caller is turned away while the first is in.
    accounts.inside.store(0, Ordering::SeqCst);
    std::thread::scope(|s| {
        let first = s.spawn(|| accounts.meet(3, 2));
        assert!(wait_until(Duration::from_secs(10), || {
            accounts.inside.load(Ordering::SeqCst) == 1
        }));
        let second = accounts.meet(3, 2).unwrap_err().lock_error();
        assert!(
            matches!(second, Error::Busy { ref key, .. } if key == "account:3"),
            "{second:?}"
        );
        accounts.inside.fetch_add(1, Ordering::SeqCst); // let the first one out
        assert!(first.join().unwrap().unwrap());
    });
    assert!(is_free(&accounts.locks, "account:3"));
}

// --- busy: skip, error, wait ----------------------------------------------------------------

static RUNS: AtomicUsize = AtomicUsize::new(0);

#[distributed_lock(key = "nightly", client = locks, on_busy = "skip")]
fn nightly(locks: &LockClient) {
    RUNS.fetch_add(1, Ordering::SeqCst);
}

#[distributed_lock(key = "nightly", client = locks, on_busy = "skip")]
fn nightly_value(locks: &LockClient) -> Option<usize> {
    Some(RUNS.fetch_add(1, Ordering::SeqCst))
}

#[distributed_lock(key = "nightly", client = locks, on_busy = "skip")]
fn nightly_result(locks: &LockClient) -> Result<Option<&'static str>, AppError> {
    RUNS.fetch_add(1, Ordering::SeqCst);
    Ok(Some("ran"))
}

#[test]
fn on_busy_skip_skips() {
    let server = RedisServer::start();
    let locks = client(&server);
    let other = client(&server);

    let held = other.lock("nightly").unwrap();
    nightly(&locks);
    assert_eq!(nightly_value(&locks), None);
    assert!(matches!(nightly_result(&locks), Ok(None)));
    assert_eq!(RUNS.load(Ordering::SeqCst), 0, "a skipped body ran");
    drop(held);

    nightly(&locks);
    assert_eq!(nightly_value(&locks), Some(1));
    assert!(matches!(nightly_result(&locks), Ok(Some("ran"))));
    assert_eq!(RUNS.load(Ordering::SeqCst), 3);
    assert!(is_free(&locks, "nightly"));
}

#[distributed_lock(key = "report", client = locks, wait = "0s")]
fn report_now(locks: &LockClient, ran: &AtomicBool) -> Result<(), AppError> {
    ran.store(true, Ordering::SeqCst);
    Ok(())
}

#[distributed_lock(key = "report", client = locks, wait = "200ms", retry = "fixed:20ms")]
fn report_soon(locks: &LockClient, ran: &AtomicBool) -> Result<(), AppError> {
    ran.store(true, Ordering::SeqCst);
    Ok(())
}

#[test]
fn busy_is_an_error_by_default() {
    let server = RedisServer::start();
    let locks = client(&server);
    let held = client(&server).lock("report").unwrap();
    let ran = AtomicBool::new(false);

    let busy = report_now(&locks, &ran).unwrap_err().lock_error();
    assert!(
        matches!(busy, Error::Busy { ref key, .. } if key == "report"),
        "{busy:?}"
    );
    let timeout = report_soon(&locks, &ran).unwrap_err().lock_error();
    assert!(timeout.is_timeout() && timeout.is_busy(), "{timeout:?}");
    assert!(!ran.load(Ordering::SeqCst), "the body ran without the lock");

    drop(held);
    report_now(&locks, &ran).unwrap();
    assert!(ran.load(Ordering::SeqCst));
}

#[distributed_lock(key = "queue", client = locks, wait = "20s")]
fn drain(locks: &LockClient, holder_done: &AtomicBool) -> Result<bool, AppError> {
    Ok(holder_done.load(Ordering::SeqCst))
}

#[test]
fn wait_waits_for_the_holder() {
    let server = RedisServer::start();
    let locks = client(&server);
    let holder_done = AtomicBool::new(false);
    let held = client(&server).lock("queue").unwrap();
    std::thread::scope(|s| {
        let waiter = s.spawn(|| drain(&locks, &holder_done));
        // The waiter is blocked, not failed: it is still running after a while.
        assert!(!wait_until(Duration::from_millis(300), || waiter.is_finished()));
        holder_done.store(true, Ordering::SeqCst);
        drop(held);
        let started = Instant::now();
        assert!(
            waiter.join().unwrap().unwrap(),
            "the body ran before the holder released"
        );
        // Woken by the release, not by the end of the 20 s budget.
        assert!(started.elapsed() < Duration::from_secs(10));
    });
}

// --- release on every exit path -----------------------------------------------------------

#[distributed_lock(key = "exit", client = locks)]
fn exits(locks: &LockClient, how: &str) -> Result<u32, AppError> {
    if how == "early" {
        return Err(AppError::Refused("early return"));
    }
    let n: u32 = how.parse()?; // `?` with a conversion of its own
    if n == 0 {
        panic!("panicking while holding the lock");
    }
    Ok(n)
}

#[test]
fn every_exit_path_releases() {
    let server = RedisServer::start();
    let locks = client(&server);

    assert!(matches!(exits(&locks, "7"), Ok(7)));
    assert!(is_free(&locks, "exit"));

    assert!(matches!(exits(&locks, "early"), Err(AppError::Refused(_))));
    assert!(is_free(&locks, "exit"));

    match exits(&locks, "seven") {
        Err(AppError::Parse(e)) => assert_eq!(e.kind(), &std::num::IntErrorKind::InvalidDigit),
        other => panic!("{other:?}"),
    }
    assert!(is_free(&locks, "exit"));

    let panicked = catch_unwind(AssertUnwindSafe(|| exits(&locks, "0")));
    assert!(panicked.is_err());
    assert!(is_free(&locks, "exit"));

    // And the lock is usable again at once.
    assert!(locks.try_lock("exit").unwrap().is_some());
}

// --- reentrancy ----------------------------------------------------------------------------

#[distributed_lock(key = "ledger:{account}", client = locks, wait = "0s")]
fn post(locks: &LockClient, account: u32, amount: i64) -> Result<i64, AppError> {
    // Same key, same thread, same client: joins the held lock instead of finding it busy.
    let before = balance(locks, account)?;
    Ok(before + amount)
}

#[distributed_lock(key = "ledger:{account}", client = locks, wait = "0s")]
fn balance(locks: &LockClient, account: u32) -> Result<i64, AppError> {
    Ok(i64::from(account) * 100)
}

#[distributed_lock(key = "countdown", client = locks, wait = "0s")]
fn countdown(locks: &LockClient, n: u32) -> Result<u32, AppError> {
    if n == 0 {
        return Ok(0);
    }
    Ok(countdown(locks, n - 1)? + 1)
}

#[distributed_lock(key = "ledger:{account}", client = locks, wait = "0s")]
fn post_from_another_thread(locks: &LockClient, account: u32) -> Result<Error, AppError> {
    let other = std::thread::scope(|s| s.spawn(|| balance(locks, account)).join().unwrap());
    Ok(other.unwrap_err().lock_error())
}

#[test]
fn nested_same_key_calls_complete() {
    let server = RedisServer::start();
    // Counts requests exactly: without loss notification's check of a lock held 2 ms (notify.rs).
    let locks = redis_lock_tests::client_without_notification(&server.url());
    // The client's first release learns whether the server has `DELIFEQ` (on one without it,
    // one request more, once).
    drop(locks.lock("warm-up").unwrap());
    let before = locks.request_count();
    assert_eq!(post(&locks, 3, 5).unwrap(), 305);
    // One acquisition and one release for both calls: the inner one joined.
    assert_eq!(locks.request_count() - before, 2);
    assert!(is_free(&locks, "ledger:3"));

    assert_eq!(countdown(&locks, 20).unwrap(), 20);
    assert!(is_free(&locks, "countdown"));

    // Another thread is not an owner.
    let busy = post_from_another_thread(&locks, 4).unwrap();
    assert!(
        matches!(busy, Error::Busy { ref key, .. } if key == "ledger:4"),
        "{busy:?}"
    );
    assert!(is_free(&locks, "ledger:4"));
}

// --- minimum hold, guard binding, lost locks -----------------------------------------------

#[distributed_lock(key = "hourly", client = locks, on_busy = "skip", hold_at_least = "2s")]
fn hourly(locks: &LockClient) -> Option<()> {
    Some(())
}

#[test]
fn hold_at_least_keeps_the_lock_after_return() {
    let server = RedisServer::start();
    let locks = client(&server);
    let other = client(&server);
    let started = Instant::now();
    assert_eq!(hourly(&locks), Some(()));
    let info = other
        .inspect("hourly")
        .unwrap()
        .expect("released at return");
    assert!(!info.owned, "{info:?}");
    assert!(other.try_lock("hourly").unwrap().is_none());
    // A second run in the same period, from this client or another, is skipped.
    assert_eq!(hourly(&locks), None);
    assert_eq!(hourly(&other), None);
    // After the minimum hold the next period's run goes ahead.
    assert!(wait_until(Duration::from_secs(10), || is_free(
        &other, "hourly"
    )));
    assert!(started.elapsed() >= Duration::from_millis(1900));
    assert_eq!(hourly(&other), Some(()));
}

#[distributed_lock(key = "invoice:{invoice.0}:{invoice.1}", client = locks, guard = lock)]
fn fenced(
    locks: &LockClient,
    invoice: (u32, &str),
) -> Result<(u64, redis_lock::LockInfo), AppError> {
    lock.ensure_held()?;
    let info = locks.inspect(lock.key())?.expect("held during the call");
    Ok((lock.fencing_token(), info))
}

#[test]
fn guard_binding_sees_the_fencing_token() {
    let server = RedisServer::start();
    let locks = client(&server);
    let (first, info) = fenced(&locks, (7, "eu")).unwrap();
    assert!(first > 0);
    assert_eq!(info.key, "invoice:7:eu");
    assert_eq!(info.fencing_token, first);
    assert!(info.owned);
    assert!(
        info.metadata
            .as_deref()
            .is_some_and(|m| m.ends_with("::fenced")),
        "{:?}",
        info.metadata
    );
    let (second, _) = fenced(&locks, (7, "eu")).unwrap();
    assert!(second > first, "{second} after {first}");
}

/// Deletes its own lock from Redis (as an expiry or an operator would), then returns
/// `result`.
#[distributed_lock(key = "fragile", client = locks, ttl = 10)]
fn lose_it(
    locks: &LockClient,
    redis: &mut redis::Connection,
    result: Result<u32, &'static str>,
) -> Result<u32, AppError> {
    redis::cmd("DEL")
        .arg(format!("{}{{fragile}}", locks.namespace()))
        .query::<i64>(redis)
        .map(|deleted| assert_eq!(deleted, 1))
        .unwrap();
    result.map_err(AppError::Refused)
}

#[distributed_lock(key = "fragile", client = locks, on_busy = "skip")]
fn lose_it_skipping(locks: &LockClient, redis: &mut redis::Connection) -> Result<(), AppError> {
    redis::cmd("DEL")
        .arg(format!("{}{{fragile}}", locks.namespace()))
        .query::<i64>(redis)
        .unwrap();
    Ok(())
}

#[test]
fn a_lost_lock_reaches_the_caller() {
    let server = RedisServer::start();
    let locks = client(&server);
    let mut redis = server.connection();

    let lost = lose_it(&locks, &mut redis, Ok(1)).unwrap_err().lock_error();
    // Deleted a moment into a 10 s TTL: the release found it gone before it could have
    // expired, so `Deleted` (it said `Expired`).
    assert!(
        matches!(lost, Error::Lost { ref key, reason: redis_lock::LostReason::Deleted } if key == "fragile"),
        "{lost:?}"
    );
    // The body's own error wins over the loss.
    assert!(matches!(
        lose_it(&locks, &mut redis, Err("body failed")),
        Err(AppError::Refused("body failed"))
    ));
    let lost = lose_it_skipping(&locks, &mut redis)
        .unwrap_err()
        .lock_error();
    assert!(lost.is_lost(), "{lost:?}");
    // A call that keeps its lock is fine afterwards.
    assert!(matches!(exits(&locks, "3"), Ok(3)));
}

// --- the default client --------------------------------------------------------------------

#[distributed_lock(key = "default:{n}", ttl = "5s", guard = lock)]
fn with_default_client(n: u32) -> redis_lock::Result<String> {
    Ok(lock.key().to_owned())
}

/// The only test in this binary that touches the process-wide default client.
#[test]
fn the_default_client_is_used_when_set() {
    let server = RedisServer::start();
    // Counts requests exactly: without loss notification's check of a lock held 2 ms (notify.rs).
    let locks = redis_lock_tests::client_without_notification(&server.url());
    redis_lock::set_default_client(locks.clone()).unwrap();
    let again = redis_lock::set_default_client(locks.clone()).unwrap_err();
    assert!(matches!(again, Error::InvalidInput { .. }), "{again:?}");
    // The client's first release learns whether the server has `DELIFEQ`.
    drop(locks.lock("warm-up").unwrap());

    let before = locks.request_count();
    assert_eq!(with_default_client(4).unwrap(), "default:4");
    assert_eq!(
        locks.request_count() - before,
        2,
        "not locked through the default client"
    );
    assert!(is_free(&locks, "default:4"));
}

// --- cost ------------------------------------------------------------------------------------

#[distributed_lock(key = "cost:{id}", client = locks, ttl = 10, wait = "1s")]
fn annotated_work(locks: &LockClient, id: u32, out: &mut Vec<u32>) -> Result<(), AppError> {
    out.push(id);
    Ok(())
}

fn hand_written_work(locks: &LockClient, id: u32, out: &mut Vec<u32>) -> Result<(), AppError> {
    let guard = locks
        .options(&format!("cost:{id}"))
        .ttl(Duration::from_secs(10))
        .wait(Duration::from_secs(1))
        .acquire()?;
    out.push(id);
    guard.release()?;
    Ok(())
}

#[test]
fn annotated_call_costs_what_hand_written_code_costs() {
    let server = RedisServer::start();
    // Counts requests exactly: without loss notification's check of a lock held 2 ms (notify.rs).
    let locks = redis_lock_tests::client_without_notification(&server.url());
    let mut redis = server.connection();
    let mut out = Vec::new();
    // Warm up both paths: script loading and connecting happen once per client.
    annotated_work(&locks, 0, &mut out).unwrap();
    hand_written_work(&locks, 0, &mut out).unwrap();

    reset_stats(&mut redis);
    let before = locks.request_count();
    annotated_work(&locks, 1, &mut out).unwrap();
    let annotated_requests = locks.request_count() - before;
    let annotated = command_counts(&mut redis);

    reset_stats(&mut redis);
    let before = locks.request_count();
    hand_written_work(&locks, 2, &mut out).unwrap();
    let hand_requests = locks.request_count() - before;
    let hand = command_counts(&mut redis);

    assert_eq!(out, [0, 0, 1, 2]);
    assert_eq!(annotated, hand);
    assert_eq!(annotated_requests, hand_requests);
    // Acquire: `SET NX` of the lock and of the fencing counter's start, `INCR`, `PEXPIRE` in
    // one request (the native fast path); release: one script
    // call (commandstats also counts the commands the script runs inside Redis), or one
    // `DELIFEQ` where the server has it.
    let release = if redis_lock_tests::has_delifeq(&mut redis) {
        "delifeq"
    } else {
        "evalsha"
    };
    assert_eq!(annotated.get(release), Some(&1), "{annotated:?}");
    assert_eq!(annotated.get("set"), Some(&2), "{annotated:?}");
    assert_eq!(annotated_requests, 2);
}

// --- several keys ---------------------------------------------------------------------------

/// Both accounts locked together, as one multi-lock; the guard binding is the `MultiGuard`.
#[distributed_lock(keys = ["account:{from}", "account:{to}"], client = locks, ttl = 10, guard = both)]
fn transfer(locks: &LockClient, from: u32, to: u32) -> Result<Vec<String>, AppError> {
    assert!(!both.is_lost());
    Ok(both.keys().iter().map(|k| (*k).to_owned()).collect())
}

#[distributed_lock(keys = ["left", "right"], client = locks, on_busy = "skip")]
fn both_or_skip(locks: &LockClient) -> Option<()> {
    assert!(!is_free(locks, "left") && !is_free(locks, "right"));
    Some(())
}

#[test]
fn keys_take_every_lock_together_and_release_them_after_the_call() {
    let server = RedisServer::start();
    let locks = client(&server);
    let held = transfer(&locks, 2, 1).unwrap();
    assert_eq!(held, ["account:1", "account:2"]);
    assert!(is_free(&locks, "account:1") && is_free(&locks, "account:2"));

    // One of them busy: the call fails with nothing held (wait bounded by the client).
    let other = client(&server);
    let busy = other.lock("account:2").unwrap();
    let short = LockClient::builder(&server.url())
        .default_wait(Some(Duration::from_millis(100)))
        .build()
        .unwrap();
    let err = transfer(&short, 1, 2).unwrap_err().lock_error();
    assert!(err.is_timeout(), "{err:?}");
    assert!(is_free(&locks, "account:1"), "nothing held");
    drop(busy);

    assert_eq!(both_or_skip(&locks), Some(()));
    let _left = other.lock("left").unwrap();
    assert_eq!(both_or_skip(&locks), None, "skipped: one is busy");
    assert!(is_free(&locks, "right"));
}
