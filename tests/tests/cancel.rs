//! Cancelling waiting acquisitions (`CancelToken`), against real redis-server processes: a
//! waiter blocked on Redis stops within milliseconds, leaves the queue (the next release goes
//! to another waiter), a cancel before the call sends nothing, polling waits and Redlock
//! waits stop too.

use std::sync::mpsc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use redis_lock::{CancelToken, Error, LockClient, LockGuard, LockOptions, Result, RetryStrategy};
use redis_lock_tests::{RedisServer, blocked_clients, client, holds, wait_until, zcard};

/// How soon a cancelled wait must return. Measured: 0.3-1.2 ms on loopback (SAFETY.md). A
/// wait that missed the cancel would last its whole wait (the holder's 30 s TTL, a 5 s retry
/// step): this allowance is for a loaded machine's scheduling, and still tells the two apart.
const AT_ONCE: Duration = Duration::from_millis(150);

/// A thread acquiring `name` with `opts`; it sends the instant it returned with the result.
fn waiter(
    locks: &LockClient,
    name: &str,
    opts: LockOptions,
) -> (JoinHandle<()>, mpsc::Receiver<(Instant, Result<LockGuard>)>) {
    let (tx, rx) = mpsc::channel();
    let (locks, name) = (locks.clone(), name.to_owned());
    let handle = std::thread::spawn(move || {
        let result = locks.acquire_with(&name, &opts);
        let returned = Instant::now();
        // The receiver may hold the guard; keep this thread alive until it is done with it.
        let _ = tx.send((returned, result));
    });
    (handle, rx)
}

#[test]
fn a_cancelled_waiter_returns_at_once_and_the_next_release_goes_to_another_waiter() {
    let server = RedisServer::start();
    let locks = client(&server);
    let holder = locks.lock("job").unwrap();
    let cancel = CancelToken::new();
    let (a, a_done) = waiter(&locks, "job", LockOptions::new().cancel(cancel.clone()));
    assert!(wait_until(Duration::from_secs(10), || zcard(
        &server,
        "lock:{job}:waiters"
    ) == 1));
    let (b, b_done) = waiter(&locks, "job", LockOptions::new());
    assert!(
        wait_until(Duration::from_secs(10), || zcard(
            &server,
            "lock:{job}:waiters"
        ) == 2
            // Both wait through the one blocking connection of their client's group.
            && blocked_clients(&server) == 1),
        "both waiters never blocked"
    );

    let cancelled_at = Instant::now();
    cancel.cancel();
    let (returned, result) = a_done.recv_timeout(Duration::from_secs(5)).unwrap();
    let took = returned.duration_since(cancelled_at);
    assert!(
        matches!(&result, Err(Error::Cancelled { key }) if key == "job"),
        "{result:?}"
    );
    eprintln!("cancelled waiter returned {took:?} after cancel()");
    assert!(took < AT_ONCE, "the cancel took {took:?}");
    a.join().unwrap();
    // It left the registry at once: only B is registered.
    assert_eq!(zcard(&server, "lock:{job}:waiters"), 1);
    assert!(
        b_done.try_recv().is_err(),
        "B got the lock while it was held"
    );

    let held_fence = holder.fencing_token();
    drop(holder);
    let (_, result) = b_done.recv_timeout(Duration::from_secs(5)).unwrap();
    let guard = result.expect("the release went to the other waiter");
    assert!(guard.fencing_token() > held_fence);
    drop(guard);
    b.join().unwrap();
}

#[test]
fn a_cancel_before_the_call_fails_at_once_and_sends_nothing() {
    let server = RedisServer::start();
    let locks = client(&server);
    let cancel = CancelToken::new();
    cancel.cancel();
    let before = locks.request_count();
    let started = Instant::now();
    let result = locks.options("job").cancel(cancel).acquire();
    assert!(matches!(result, Err(Error::Cancelled { .. })), "{result:?}");
    assert!(started.elapsed() < AT_ONCE);
    assert_eq!(locks.request_count(), before, "nothing was sent");
    assert!(locks.inspect("job").unwrap().is_none());
}

#[test]
fn a_polling_waiter_stops_at_the_cancel() {
    let server = RedisServer::start();
    let locks = client(&server);
    let _holder = locks.lock("job").unwrap();
    let cancel = CancelToken::new();
    let opts = LockOptions::new()
        .retry(RetryStrategy::fixed(Duration::from_secs(5)))
        .cancel(cancel.clone());
    let before = locks.request_count();
    let (w, done) = waiter(&locks, "job", opts);
    // Its first attempt went out; it now sleeps 5 s before the next.
    assert!(wait_until(Duration::from_secs(10), || locks
        .request_count()
        > before));
    let cancelled_at = Instant::now();
    cancel.cancel();
    let (returned, result) = done.recv_timeout(Duration::from_secs(4)).unwrap();
    assert!(matches!(result, Err(Error::Cancelled { .. })), "{result:?}");
    let took = returned.duration_since(cancelled_at);
    eprintln!("cancelled waiter returned {took:?} after cancel()");
    assert!(took < AT_ONCE, "the cancel took {took:?}");
    w.join().unwrap();
}

#[test]
fn a_redlock_waiter_stops_at_the_cancel_and_leaves_every_server() {
    let servers = [
        RedisServer::start(),
        RedisServer::start(),
        RedisServer::start(),
    ];
    // Reply timeouts well above what a loaded machine takes: an attempt whose reply times out
    // counts as failed on that server, and the waiter, blocked for the holder's TTL, would not
    // register there again before this test's 10 s wait ran out.
    let locks = LockClient::redlock_builder(servers.iter().map(RedisServer::url))
        .io_timeout(Duration::from_secs(5))
        .build()
        .unwrap();
    let _holder = locks.lock("job").unwrap();
    // Acquired once a majority has it: on a loaded machine the third server's attempt can
    // still be on its way, and a waiter asking first would find the lock free there, undo
    // its attempt there rather than register, and block for the holder's TTL (it failed so
    // once while other builds ran).
    assert!(wait_until(Duration::from_secs(5), || servers
        .iter()
        .all(|s| holds(s, "job"))));
    let cancel = CancelToken::new();
    let (w, done) = waiter(&locks, "job", LockOptions::new().cancel(cancel.clone()));
    assert!(wait_until(Duration::from_secs(10), || servers
        .iter()
        .all(|s| zcard(s, "lock:{job}:waiters") == 1)));
    let cancelled_at = Instant::now();
    cancel.cancel();
    let (returned, result) = done.recv_timeout(Duration::from_secs(5)).unwrap();
    assert!(matches!(result, Err(Error::Cancelled { .. })), "{result:?}");
    // A Redlock wait blocks in 10 ms slices (one source list per peek).
    let took = returned.duration_since(cancelled_at);
    assert!(
        took < AT_ONCE + Duration::from_millis(100),
        "the cancel took {took:?}"
    );
    w.join().unwrap();
    // A quorum call returns once a majority answered; the last server hears it just after.
    assert!(
        wait_until(Duration::from_secs(2), || servers
            .iter()
            .all(|s| zcard(s, "lock:{job}:waiters") == 0)),
        "it did not leave every server"
    );
}
