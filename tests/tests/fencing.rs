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
    // Another lock name has its own counter, started from the clock (ms × 1000).
    let before = clock_floor();
    let other = clients[0].try_lock("other").unwrap().unwrap();
    assert!(
        other.fencing_token() >= before,
        "{} < {before}",
        other.fencing_token()
    );
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

/// Consecutive acquisitions of one name count up by one.
fn consecutive(tokens: &[u64]) -> bool {
    tokens.windows(2).all(|w| w[1] == w[0] + 1)
}

/// Where a new fencing counter starts: the clock, Unix ms × 1000.
fn clock_floor() -> u64 {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap();
    u64::try_from(now.as_millis()).unwrap() * 1000
}

#[test]
fn fencing_tokens_keep_increasing_when_redis_loses_its_data() {
    // The default test server has no persistence: a restart empties it, counter included. The
    // new counter starts from the clock, above every token the lost one gave.
    let mut server = RedisServer::start();
    let locks = client(&server);
    let before: Vec<u64> = (0..3)
        .map(|_| locks.try_lock("volatile").unwrap().unwrap().fencing_token())
        .collect();
    assert!(consecutive(&before), "{before:?}");
    server.restart();
    let after = token_after_restart(&locks, "volatile");
    assert!(after > before[2], "{after} after {before:?}");
}

/// Every key the library writes for a name expires, the fencing counter and a semaphore's
/// stored limit included: 10,000 names of each primitive taken and released leave nothing
/// once their TTLs have run. Taken again afterwards, each name's token is higher than the
/// last one it gave (the new counter starts from the clock).
#[test]
fn no_key_outlives_its_locks_and_tokens_keep_increasing() {
    const NAMES: usize = 10_000;
    let server = RedisServer::start();
    let locks = redis_lock::LockClient::builder(&server.url())
        .default_ttl(Duration::from_millis(500))
        .build()
        .unwrap();
    // Four threads, each name taken as a mutex (the native fast path, or the script's through
    // a minimum hold), a read or write lock, and a semaphore's permit (a few names with a
    // limit stored by `set_permits`).
    let take = |i: usize| -> [u64; 3] {
        let name = format!("order:{i}");
        let mutex = if i.is_multiple_of(2) {
            locks.try_lock(&name).unwrap().unwrap()
        } else {
            locks
                .options(&name)
                .hold_at_least(Duration::from_millis(1))
                .wait(Duration::ZERO)
                .try_acquire()
                .unwrap()
                .unwrap()
        };
        let rw_name = format!("{name}:rw");
        let rw = if i.is_multiple_of(2) {
            locks.try_read_lock(&rw_name).unwrap().unwrap()
        } else {
            locks.try_write_lock(&rw_name).unwrap().unwrap()
        };
        let sem = locks.semaphore(&format!("{name}:sem"), 2).unwrap();
        if i.is_multiple_of(1000) {
            sem.set_permits(3).unwrap();
        }
        let permit = sem.try_acquire().unwrap().unwrap();
        [
            mutex.fencing_token(),
            rw.fencing_token(),
            permit.fencing_token(),
        ]
    };
    let round = || -> Vec<[u64; 3]> {
        let mut all = vec![[0; 3]; NAMES];
        std::thread::scope(|s| {
            let parts: Vec<_> = (0..4)
                .map(|part| {
                    let take = &take;
                    s.spawn(move || {
                        (part..NAMES)
                            .step_by(4)
                            .map(|i| (i, take(i)))
                            .collect::<Vec<_>>()
                    })
                })
                .collect();
            for part in parts {
                for (i, tokens) in part.join().unwrap() {
                    all[i] = tokens;
                }
            }
        });
        all
    };
    let first = round();
    let mut redis = server.connection();
    let mut left = || -> i64 { redis::cmd("DBSIZE").query(&mut redis).unwrap() };
    assert!(left() > 0, "the keys are there while their TTLs run");
    let mut redis = server.connection();
    let keys: Vec<String> = redis::cmd("KEYS").arg("*").query(&mut redis).unwrap();
    for key in &keys {
        let pttl: i64 = redis::cmd("PTTL").arg(key).query(&mut redis).unwrap();
        // -2: expired since `KEYS`; -1 would be a key without a TTL.
        assert_ne!(pttl, -1, "{key} has no TTL");
    }
    assert!(
        redis_lock_tests::wait_until(Duration::from_secs(30), || left() == 0),
        "{} keys outlived their TTLs",
        left()
    );
    let second = round();
    for (i, (a, b)) in first.iter().zip(&second).enumerate() {
        for k in 0..3 {
            assert!(
                b[k] > a[k],
                "name {i}, primitive {k}: {} after {}",
                b[k],
                a[k]
            );
        }
    }
}

#[test]
fn fencing_counter_survives_a_crash_with_appendfsync_always() {
    let mut server = RedisServer::start_with(&["--appendonly", "yes", "--appendfsync", "always"]);
    let locks = client(&server);
    let tokens: Vec<u64> = (0..3)
        .map(|_| locks.try_lock("durable").unwrap().unwrap().fencing_token())
        .collect();
    assert!(consecutive(&tokens), "{tokens:?}");
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
