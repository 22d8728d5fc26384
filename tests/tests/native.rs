//! The mutex's two forms in Redis (ARCHITECTURE.md, "The native fast path"): an uncontended
//! lock is a string taken with `SET NX PX` + `INCR` and released by `DELIFEQ` where the server
//! has it (Valkey 9), elsewhere by a script that reads the lock key alone; a waiter's
//! registration turns it into a hash, so the release hands it over. Against real
//! redis-server processes (each server of `scripts/test-valkey` runs them).

use std::time::Duration;

use redis_lock::{LockOptions, ReleaseOutcome};
use redis_lock_tests::{
    RedisServer, command_counts, has_delifeq, pttl, reset_stats, stored_fence, stored_token,
    wait_until,
};

/// Every test here counts the protocol's own requests and commands exactly: clients without
/// loss notification, whose check of a lock held over 2 ms would add to them (its own costs
/// are counted in `notify.rs`).
fn client(server: &RedisServer) -> redis_lock::LockClient {
    redis_lock_tests::client_without_notification(&server.url())
}

fn key_type(redis: &mut redis::Connection, key: &str) -> String {
    redis::cmd("TYPE").arg(key).query(redis).unwrap()
}

#[test]
fn an_uncontended_cycle_is_two_requests_of_native_commands_and_one_script() {
    let server = RedisServer::start();
    let locks = client(&server);
    let opts = LockOptions::new()
        .ttl(Duration::from_secs(10))
        .metadata("nightly");
    // Scripts loaded (the first release answers NOSCRIPT once).
    drop(locks.acquire_with("native", &opts).unwrap());
    let mut redis = server.connection();
    reset_stats(&mut redis);
    let before = locks.request_count();
    let guard = locks.acquire_with("native", &opts).unwrap();
    assert_eq!(guard.release().unwrap(), ReleaseOutcome::Released);
    assert_eq!(locks.request_count() - before, 2);
    // Native `SET` of the lock, and of the fencing counter's start (`NX`), its `INCR` and
    // `PEXPIRE GT` (it lives as long as the lock); the release is `DELIFEQ` where the server
    // has it, else a script that reads the lock alone: no `EXISTS` of the registry, no `TIME`.
    let counts = command_counts(&mut redis);
    let release: &[(&str, u64)] = if has_delifeq(&mut redis) {
        &[("delifeq", 1)]
    } else {
        &[("evalsha", 1), ("get", 1), ("del", 1)]
    };
    let expected: std::collections::BTreeMap<String, u64> =
        [("set", 2), ("incr", 1), ("pexpire", 1)]
            .iter()
            .chain(release)
            .map(|(c, n)| ((*c).to_owned(), *n))
            .collect();
    assert_eq!(counts, expected);

    // A string `token \n host \n pid \n since \n meta`, with the TTL asked for.
    let guard = locks.acquire_with("native", &opts).unwrap();
    assert_eq!(key_type(&mut redis, "lock:{native}"), "string");
    let value: String = redis::cmd("GET")
        .arg("lock:{native}")
        .query(&mut redis)
        .unwrap();
    let fields: Vec<&str> = value.split('\n').collect();
    assert_eq!(fields.len(), 5, "{value:?}");
    assert_eq!(fields[0], guard.token());
    assert_eq!(fields[2], std::process::id().to_string());
    assert_eq!(fields[4], "nightly");
    let left = pttl(&mut redis, "lock:{native}");
    assert!(left > 9_000 && left <= 10_000, "{left}");
    assert_eq!(
        stored_fence(&mut redis, "lock:{native}"),
        Some(guard.fencing_token())
    );
    let info = locks.inspect("native").unwrap().unwrap();
    assert_eq!(
        (info.pid, info.metadata.as_deref(), info.fencing_token),
        (
            Some(std::process::id()),
            Some("nightly"),
            guard.fencing_token()
        )
    );
}

#[test]
fn a_waiter_turns_the_string_into_a_hash_and_is_handed_the_lock() {
    let server = RedisServer::start();
    let locks = client(&server);
    let guard = locks
        .options("handed")
        .ttl(Duration::from_secs(30))
        .acquire()
        .unwrap();
    let mut redis = server.connection();
    assert_eq!(key_type(&mut redis, "lock:{handed}"), "string");
    let waiter = std::thread::spawn({
        let other = client(&server);
        move || {
            let g = other
                .try_lock_for("handed", Duration::from_secs(20))
                .unwrap()
                .unwrap();
            g.fencing_token()
        }
    });
    assert!(wait_until(Duration::from_secs(10), || {
        server.info_field("clients", "blocked_clients").unwrap() == "1"
    }));
    // Same owner, same holder information, the TTL kept; the counter stands for the fence.
    assert_eq!(key_type(&mut redis, "lock:{handed}"), "hash");
    assert_eq!(
        stored_token(&mut redis, "lock:{handed}").as_deref(),
        Some(guard.token())
    );
    let left = pttl(&mut redis, "lock:{handed}");
    assert!(left > 25_000 && left <= 30_000, "{left}");
    let info = locks.inspect("handed").unwrap().unwrap();
    assert_eq!(info.pid, Some(std::process::id()));
    assert_eq!(info.fencing_token, guard.fencing_token());
    assert_eq!(info.waiters, 1);
    // The holder's renewal and remaining TTL work on the hash too.
    guard.extend(Duration::from_secs(40)).unwrap();
    assert!(guard.remaining_ttl().unwrap().unwrap() > Duration::from_secs(35));
    // The release sees the registration and hands the lock over: the waiter has it long
    // before the 40 s TTL would have run out.
    let first = guard.fencing_token();
    let released = std::time::Instant::now();
    assert_eq!(guard.release().unwrap(), ReleaseOutcome::Released);
    let theirs = waiter.join().unwrap();
    assert!(released.elapsed() < Duration::from_secs(5));
    assert!(theirs > first, "{theirs} after {first}");
}

#[test]
fn a_busy_native_attempt_gives_its_fencing_number_back() {
    let server = RedisServer::start();
    let (a, b) = (client(&server), client(&server));
    let held = a.lock("counted").unwrap();
    let mut redis = server.connection();
    let counter = |redis: &mut redis::Connection| -> u64 {
        redis::cmd("GET")
            .arg("lock:{counted}:fence")
            .query(redis)
            .unwrap()
    };
    assert_eq!(counter(&mut redis), held.fencing_token());
    reset_stats(&mut redis);
    assert!(b.try_lock("counted").unwrap().is_none());
    let counts = command_counts(&mut redis);
    // The native attempt's `INCR` ran, and the script that found the lock busy took it back.
    assert_eq!(counts.get("incr"), Some(&1), "{counts:?}");
    assert_eq!(counts.get("decr"), Some(&1), "{counts:?}");
    assert_eq!(counter(&mut redis), held.fencing_token());
    // The client now knows the lock is busy: its next attempt is the script alone.
    reset_stats(&mut redis);
    assert!(b.try_lock("counted").unwrap().is_none());
    let counts = command_counts(&mut redis);
    assert_eq!(counts.get("set"), None, "{counts:?}");
    assert_eq!(counts.get("evalsha"), Some(&1), "{counts:?}");
    drop(held);
    assert_eq!(
        b.try_lock("counted").unwrap().unwrap().fencing_token(),
        counter(&mut redis)
    );
}

/// Each holder reads first the form its lock most likely has: a lock taken through the
/// script (here in fair mode, a hash) is released without a `GET` that would fail on it, a
/// lock taken natively without an `HMGET`.
#[test]
fn a_release_reads_the_form_its_holder_expects_first() {
    let server = RedisServer::start();
    let locks = client(&server);
    let mut redis = server.connection();
    for _ in 0..2 {
        // The second round counts: scripts loaded.
        let fair = locks
            .options("forms")
            .retry(redis_lock::RetryStrategy::fair())
            .acquire()
            .unwrap();
        assert_eq!(key_type(&mut redis, "lock:{forms}"), "hash");
        reset_stats(&mut redis);
        assert_eq!(fair.release().unwrap(), ReleaseOutcome::Released);
    }
    let counts = command_counts(&mut redis);
    assert_eq!(counts.get("get"), None, "{counts:?}");
    assert_eq!(counts.get("hmget"), Some(&1), "{counts:?}");

    let native = locks.lock("forms").unwrap();
    reset_stats(&mut redis);
    drop(native);
    let counts = command_counts(&mut redis);
    assert_eq!(counts.get("hmget"), None, "{counts:?}");
    // Where the server has `DELIFEQ`, the value the holder wrote is compared natively.
    let (get, delifeq) = if has_delifeq(&mut redis) {
        (None, Some(&1))
    } else {
        (Some(&1), None)
    };
    assert_eq!(counts.get("get"), get, "{counts:?}");
    assert_eq!(counts.get("delifeq"), delifeq, "{counts:?}");
}

/// A native release (`DELIFEQ`, where the server has it) that deletes nothing leaves the
/// answer to the script: late when the lock expired, lost when another holder took it. Where
/// the server lacks the command, or the user may not run it, the script releases, and the
/// client stops asking.
#[test]
fn a_native_release_that_deletes_nothing_asks_the_script_which_outcome() {
    let server = RedisServer::start();
    let locks = client(&server);
    let mut redis = server.connection();
    let delifeq = has_delifeq(&mut redis);
    let short = LockOptions::new()
        .ttl(Duration::from_millis(100))
        .watchdog(false);
    // Warm up: scripts loaded, the server's commands learnt.
    drop(locks.acquire_with("outcomes", &short).unwrap());

    let late = locks.acquire_with("outcomes", &short).unwrap();
    assert!(wait_until(Duration::from_secs(2), || {
        locks.inspect("outcomes").unwrap().is_none()
    }));
    reset_stats(&mut redis);
    assert_eq!(late.release().unwrap(), ReleaseOutcome::Late);
    let counts = command_counts(&mut redis);
    // The script answered (once more after loading it, where `DELIFEQ` did every release
    // before and the script was never needed).
    assert!(counts.get("evalsha").is_some_and(|&n| n >= 1), "{counts:?}");
    assert_eq!(counts.get("delifeq"), delifeq.then_some(&1), "{counts:?}");

    let lost = locks.acquire_with("outcomes", &short).unwrap();
    let other = client(&server);
    let mut taken = None;
    assert!(
        wait_until(Duration::from_secs(2), || {
            taken = other.try_lock("outcomes").unwrap();
            taken.is_some()
        }),
        "the expired lock is taken by another client"
    );
    assert_eq!(lost.release().unwrap(), ReleaseOutcome::Lost);
    let taker = taken.expect("taken");
    assert_eq!(
        stored_token(&mut redis, "lock:{outcomes}").as_deref(),
        Some(taker.token()),
        "the other holder's lock is untouched"
    );
    drop(taker);

    if delifeq {
        // A user whose ACL lacks `DELIFEQ` releases through the script.
        redis::cmd("ACL")
            .arg("SETUSER")
            .arg("nodelifeq")
            .arg("on")
            .arg(">secret")
            .arg("~*")
            .arg("+@all")
            .arg("-delifeq")
            .query::<()>(&mut redis)
            .unwrap();
        let url = format!("redis://nodelifeq:secret@127.0.0.1:{}", server.port());
        let limited = redis_lock_tests::client_for(&url);
        let cycles = || {
            for _ in 0..3 {
                let guard = limited.lock("limited").unwrap();
                assert_eq!(guard.release().unwrap(), ReleaseOutcome::Released);
            }
            assert_eq!(
                stored_token(&mut server.connection(), "lock:{limited}"),
                None
            );
        };
        let refusals = |redis: &mut redis::Connection| {
            let errors: String = redis::cmd("INFO").arg("errorstats").query(redis).unwrap();
            let noperm = errors
                .lines()
                .find_map(|l| l.strip_prefix("errorstat_NOPERM:count="))
                .and_then(|n| n.trim().parse::<u64>().ok());
            (noperm.unwrap_or(0), errors)
        };
        // Refused (once per release in flight while it is learnt: an acquisition's undo
        // re-sent in the background, on a slow machine, can be a second), then not asked again.
        cycles();
        let (learnt, errors) = refusals(&mut redis);
        assert!(learnt >= 1, "{errors}");
        cycles();
        let (after, errors) = refusals(&mut redis);
        assert_eq!(after, learnt, "asked again after a refusal: {errors}");
    }
}
