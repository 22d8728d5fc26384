//! Fencing tokens and the minimum hold, end to end; and what the fencing counter does when
//! Redis loses its data.

use std::time::{Duration, Instant};

use redis_lock::ReleaseOutcome;
use redis_lock_tests::{RedisServer, client};

fn hget(server: &RedisServer, key: &str, field: &str) -> Option<String> {
    redis::cmd("HGET")
        .arg(key)
        .arg(field)
        .query(&mut server.connection())
        .unwrap()
}

/// The first calls after a restart may meet pooled connections the restart cut (each fails
/// once with a connection error and is dropped); the pool holds at most 16.
fn token_after_restart(locks: &redis_lock::LockClient, key: &str) -> u64 {
    for _ in 0..17 {
        match locks.try_lock(key) {
            Ok(guard) => return guard.unwrap().fencing_token(),
            Err(e) => assert!(e.is_connection_error(), "{e}"),
        }
    }
    panic!("no acquisition succeeded after the restart");
}

#[test]
fn fencing_tokens_strictly_increase_across_clients() {
    let server = RedisServer::start();
    let clients = [client(&server), client(&server), client(&server)];
    let mut last = 0;
    for round in 0..5 {
        for locks in &clients {
            let guard = locks.try_lock("fenced").unwrap().unwrap();
            let token = guard.fencing_token();
            assert!(token > last, "round {round}: {token} after {last}");
            // The token is the one Redis keeps for the lock (what `inspect` and the CLI show):
            // a lock taken natively is a string whose token the counter stands for, exact
            // while nobody else attempts.
            let mut redis = server.connection();
            assert_eq!(
                redis_lock_tests::stored_fence(&mut redis, "lock:{fenced}"),
                Some(token)
            );
            assert_eq!(
                clients[1].inspect("fenced").unwrap().unwrap().fencing_token,
                token
            );
            last = token;
        }
    }
    // Another lock name has its own counter.
    let other = clients[0].try_lock("other").unwrap().unwrap();
    assert_eq!(other.fencing_token(), 1);
    // A failed attempt (busy) uses none: the native fast path's `INCR` (sent with the
    // `SET NX`) is given back by the script that then finds the lock busy.
    let held = clients[0].try_lock("fenced").unwrap().unwrap();
    assert_eq!(held.fencing_token(), last + 1);
    assert!(clients[1].try_lock("fenced").unwrap().is_none());
    let shown = clients[1].inspect("fenced").unwrap().unwrap().fencing_token;
    assert_eq!(shown, held.fencing_token());
    drop(held);
    let next = clients[2]
        .try_lock("fenced")
        .unwrap()
        .unwrap()
        .fencing_token();
    assert_eq!(next, last + 2);
}

#[test]
fn fencing_counter_restarts_when_redis_loses_its_data() {
    // The default test server has no persistence: a restart empties it, counter included.
    let mut server = RedisServer::start();
    let locks = client(&server);
    let before: Vec<u64> = (0..3)
        .map(|_| locks.try_lock("volatile").unwrap().unwrap().fencing_token())
        .collect();
    assert_eq!(before, vec![1, 2, 3]);
    server.restart();
    let after = token_after_restart(&locks, "volatile");
    // The documented limit: tokens repeat. A fenced resource would reject this holder.
    assert_eq!(after, 1);
}

#[test]
fn fencing_counter_survives_a_crash_with_appendfsync_always() {
    let mut server = RedisServer::start_with(&["--appendonly", "yes", "--appendfsync", "always"]);
    let locks = client(&server);
    let tokens: Vec<u64> = (0..3)
        .map(|_| locks.try_lock("durable").unwrap().unwrap().fencing_token())
        .collect();
    assert_eq!(tokens, vec![1, 2, 3]);
    let last = tokens[2];
    // SIGKILL, then a new server on the same directory, which replays the append-only file.
    server.restart();
    let after = token_after_restart(&locks, "durable");
    assert!(after > last, "{after} after {last}");
}

#[test]
fn minimum_hold_keeps_the_lock_ownerless_until_it_has_passed() {
    let server = RedisServer::start();
    let locks = client(&server);
    let hold = Duration::from_millis(1500);
    let acquired = Instant::now();
    let guard = locks
        .options("cron")
        .ttl(Duration::from_secs(30))
        .hold_at_least(hold)
        .acquire()
        .unwrap();
    let fence = guard.fencing_token();
    assert_eq!(guard.release().unwrap(), ReleaseOutcome::Released);

    // Still taken, by nobody: the token is cleared, so no holder can renew or release it,
    // and the key expires when the minimum hold ends (not after the 30 s TTL).
    assert_eq!(hget(&server, "lock:{cron}", "token").as_deref(), Some(""));
    let info = locks.inspect("cron").unwrap().unwrap();
    assert!(!info.owned);
    assert_eq!(info.fencing_token, fence);
    assert!(info.remaining_ttl.unwrap() <= hold);
    assert!(info.hold_until.is_some());
    assert!(client(&server).try_lock("cron").unwrap().is_none());

    let next = client(&server)
        .try_lock_for("cron", Duration::from_secs(10))
        .unwrap()
        .expect("free once the minimum hold has passed");
    let waited = acquired.elapsed();
    assert!(
        waited >= hold - Duration::from_millis(50) && waited < Duration::from_secs(5),
        "{waited:?}"
    );
    assert!(next.fencing_token() > fence);
}

#[test]
fn release_after_the_minimum_hold_frees_the_lock_at_once() {
    let server = RedisServer::start();
    let locks = client(&server);
    let guard = locks
        .options("short-min")
        .hold_at_least(Duration::from_millis(200))
        .acquire()
        .unwrap();
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(guard.release().unwrap(), ReleaseOutcome::Released);
    assert!(locks.inspect("short-min").unwrap().is_none());
}

#[test]
fn minimum_hold_does_not_outlive_the_ttl_of_a_crashed_holder() {
    // Without a release (the holder died, so its watchdog stopped too) the lock lives for
    // its TTL, not for the minimum hold: `hold_at_least` acts at release time only.
    let server = RedisServer::start();
    let locks = client(&server);
    let guard = locks
        .options("crashed")
        .ttl(Duration::from_millis(300))
        .watchdog(false)
        .hold_at_least(Duration::from_secs(30))
        .acquire()
        .unwrap();
    std::mem::forget(guard); // as if the process had died: nothing is released
    let start = Instant::now();
    assert!(
        client(&server)
            .try_lock_for("crashed", Duration::from_secs(5))
            .unwrap()
            .is_some()
    );
    assert!(start.elapsed() < Duration::from_secs(2));
}
