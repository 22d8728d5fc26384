//! The semaphore with expiring permits, end to end on real servers: at most N holders (threads
//! and processes), a killed holder's permit back within its TTL, renewal, loss, release
//! outcomes, inspection, changing the limit, waiters woken by a release, fencing, Cluster,
//! the Redlock refusal, and bad input.

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use redis_lock::testing::RedisCluster;
use redis_lock::{
    Error, LockClient, LockMode, LockOptions, MAX_PERMITS, ReleaseOutcome, RetryStrategy, Semaphore,
};
use redis_lock_tests::{
    RedisServer, client, cluster_client, command_counts, read_line_starting, redlock_client,
    reset_stats, spawn_holder, wait_until,
};

const HOLDER: &str = env!("CARGO_BIN_EXE_lock-holder");

fn keys_of(server: &RedisServer) -> Vec<String> {
    let mut keys: Vec<String> = redis::cmd("KEYS")
        .arg("*")
        .query(&mut server.connection())
        .unwrap();
    keys.sort();
    keys
}

/// Threads that each take a permit, count themselves in, hold 1 ms, count out, release.
/// Returns (highest count seen, acquisitions).
fn contend(semaphore: &Semaphore, threads: usize, iterations: u32) -> (u32, u64) {
    let inside = Arc::new(AtomicU32::new(0));
    let highest = Arc::new(AtomicU32::new(0));
    let acquired = Arc::new(AtomicU64::new(0));
    let start = Arc::new(Barrier::new(threads));
    let handles: Vec<_> = (0..threads)
        .map(|_| {
            let (semaphore, inside, highest, acquired, start) = (
                semaphore.clone(),
                Arc::clone(&inside),
                Arc::clone(&highest),
                Arc::clone(&acquired),
                Arc::clone(&start),
            );
            std::thread::spawn(move || {
                start.wait();
                let opts = LockOptions::new().wait(Duration::from_secs(30));
                for _ in 0..iterations {
                    let permit = semaphore.acquire_with(&opts).unwrap();
                    let now = inside.fetch_add(1, Ordering::SeqCst) + 1;
                    highest.fetch_max(now, Ordering::SeqCst);
                    std::thread::sleep(Duration::from_millis(1));
                    inside.fetch_sub(1, Ordering::SeqCst);
                    assert_eq!(permit.release().unwrap(), ReleaseOutcome::Released);
                    acquired.fetch_add(1, Ordering::SeqCst);
                }
            })
        })
        .collect();
    for h in handles {
        h.join().unwrap();
    }
    (
        highest.load(Ordering::SeqCst),
        acquired.load(Ordering::SeqCst),
    )
}

#[test]
fn at_most_three_of_eight_threads_hold_a_permit_at_once() {
    let server = RedisServer::start();
    let locks = client(&server);
    let semaphore = locks.semaphore("pool-of-3", 3).unwrap();
    let (highest, acquired) = contend(&semaphore, 8, 40);
    assert_eq!(acquired, 8 * 40);
    assert_eq!(highest, 3, "8 threads on 3 permits: 3 at once, never 4");
    assert_eq!(semaphore.available().unwrap(), 3, "all given back");
}

#[test]
fn fair_waiters_also_stay_within_the_limit() {
    let server = RedisServer::start();
    let locks = client(&server);
    let semaphore = locks.semaphore("fair-3", 3).unwrap();
    let inside = Arc::new(AtomicU32::new(0));
    let highest = Arc::new(AtomicU32::new(0));
    let handles: Vec<_> = (0..6)
        .map(|_| {
            let (semaphore, inside, highest) =
                (semaphore.clone(), Arc::clone(&inside), Arc::clone(&highest));
            std::thread::spawn(move || {
                let opts = LockOptions::new()
                    .wait(Duration::from_secs(30))
                    .retry(RetryStrategy::fair());
                for _ in 0..20 {
                    let permit = semaphore.acquire_with(&opts).unwrap();
                    let now = inside.fetch_add(1, Ordering::SeqCst) + 1;
                    highest.fetch_max(now, Ordering::SeqCst);
                    std::thread::sleep(Duration::from_millis(1));
                    inside.fetch_sub(1, Ordering::SeqCst);
                    drop(permit);
                }
            })
        })
        .collect();
    for h in handles {
        h.join().unwrap();
    }
    assert_eq!(highest.load(Ordering::SeqCst), 3);
}

#[test]
fn at_most_three_of_four_processes_hold_a_permit_at_once() {
    let server = RedisServer::start();
    let url = server.url();
    let mut children: Vec<_> = (0..4)
        .map(|_| spawn_holder(HOLDER, &["permits", &url, "procs-3", "3", "60"]))
        .collect();
    let mut highest = 0;
    for child in &mut children {
        let line = read_line_starting(child, "DONE", Duration::from_secs(60)).expect("DONE");
        let seen: u32 = line["DONE ".len()..].parse().unwrap();
        highest = highest.max(seen);
        child.wait().unwrap();
    }
    assert_eq!(
        highest, 3,
        "the Redis counter of holders reached 3, never 4"
    );
}

#[test]
fn a_killed_holders_permit_comes_back_within_its_ttl() {
    let server = RedisServer::start();
    let url = server.url();
    let mut holder = spawn_holder(HOLDER, &["permit", &url, "crash", "1", "1000"]);
    assert!(read_line_starting(&mut holder, "ACQUIRED", Duration::from_secs(10)).is_some());
    let locks = client(&server);
    let semaphore = locks.semaphore("crash", 1).unwrap();
    assert!(
        semaphore.try_acquire().unwrap().is_none(),
        "held by the child"
    );
    holder.kill().unwrap();
    holder.wait().unwrap();
    let killed = Instant::now();
    let permit = semaphore
        .try_acquire_for(Duration::from_secs(5))
        .unwrap()
        .expect("the dead holder's permit comes back");
    let waited = killed.elapsed();
    // Within its TTL, plus what a loaded machine adds: not after a second TTL, nor at the
    // end of the 5 s wait.
    assert!(
        waited <= Duration::from_millis(1000 + 800),
        "back within its 1 s TTL (+ a little): {waited:?}"
    );
    assert!(permit.ensure_held().is_ok());
}

#[test]
fn renewal_keeps_a_permit_past_its_ttl() {
    let server = RedisServer::start();
    let locks = client(&server);
    let semaphore = locks.semaphore("renewed", 1).unwrap();
    let opts = LockOptions::new().ttl(Duration::from_millis(300));
    let permit = semaphore.acquire_with(&opts).unwrap();
    let rival = client(&server).semaphore("renewed", 1).unwrap();
    let until = Instant::now() + Duration::from_millis(1000);
    while Instant::now() < until {
        assert!(permit.ensure_held().is_ok());
        assert!(rival.try_acquire().unwrap().is_none());
        std::thread::sleep(Duration::from_millis(50));
    }
    let left = permit.remaining_ttl().unwrap().unwrap();
    assert!(left <= Duration::from_millis(300), "{left:?}");
    assert_eq!(permit.release().unwrap(), ReleaseOutcome::Released);
}

#[test]
fn a_deleted_permit_is_reported_lost_and_released_late() {
    let server = RedisServer::start();
    let locks = client(&server);
    let semaphore = locks.semaphore("lost", 2).unwrap();
    let lost_events = Arc::new(AtomicU32::new(0));
    let seen = Arc::clone(&lost_events);
    let opts = LockOptions::new()
        .ttl(Duration::from_millis(300))
        .on_lost(move |_| {
            seen.fetch_add(1, Ordering::SeqCst);
        });
    let permit = semaphore.acquire_with(&opts).unwrap();
    let other_client = client(&server);
    let other = other_client
        .semaphore("lost", 2)
        .unwrap()
        .acquire()
        .unwrap();
    // Break this one permit only.
    redis::cmd("ZREM")
        .arg("lock:{lost}")
        .arg(permit.token())
        .query::<i64>(&mut server.connection())
        .unwrap();
    assert!(wait_until(Duration::from_secs(2), || permit.is_lost()));
    assert!(matches!(permit.ensure_held(), Err(Error::Lost { .. })));
    assert_eq!(lost_events.load(Ordering::SeqCst), 1);
    assert_eq!(permit.release().unwrap(), ReleaseOutcome::Late);
    // The other permit was never touched.
    assert!(other.ensure_held().is_ok());
    assert!(other.remaining_ttl().unwrap().is_some());
    assert_eq!(other.release().unwrap(), ReleaseOutcome::Released);
}

/// A permit a release has just handed to a waiter has no holder stored until the waiter
/// claims it: `inspect` says the holder is unknown, `None`, as for a lock handed over (it
/// showed an empty host, pid 0 and the Unix epoch).
#[test]
fn a_permit_handed_to_a_waiter_has_no_holder_yet() {
    let server = RedisServer::start();
    let locks = client(&server);
    let semaphore = locks.semaphore("handed", 3).unwrap();
    let mine = semaphore.acquire().unwrap();
    // What a release's `hand_permit` leaves (`wire/semaphore.rs`): the grant among the
    // permits, expiring with the handoff grace (here later), and its fence alone as holder.
    let mut redis = server.connection();
    let (secs, micros): (u64, u64) = redis::cmd("TIME").query(&mut redis).unwrap();
    let now_ms = secs * 1000 + micros / 1000;
    redis::cmd("ZADD")
        .arg("lock:{handed}")
        .arg(now_ms + 60_000)
        .arg("0123456789abcdef")
        .query::<()>(&mut redis)
        .unwrap();
    redis::cmd("HSET")
        .arg("lock:{handed}:holders")
        .arg("0123456789abcdef")
        .arg("7\n\n\n0\n")
        .query::<()>(&mut redis)
        .unwrap();
    let info = semaphore.inspect().unwrap();
    assert_eq!(info.in_use, 2, "{info:?}");
    let handed = info
        .holders
        .iter()
        .find(|p| p.fencing_token == 7)
        .expect("the handed permit");
    assert_eq!(
        (&handed.host, handed.pid, handed.acquired_at),
        (&None, None, None)
    );
    let held = info
        .holders
        .iter()
        .find(|p| p.fencing_token == mine.fencing_token())
        .expect("our permit");
    assert_eq!(held.pid, Some(std::process::id()));
    assert!(
        held.host.is_some() && held.acquired_at.is_some(),
        "{held:?}"
    );
    drop(mine);
}

#[test]
fn release_outcomes() {
    let server = RedisServer::start();
    let locks = client(&server);
    let semaphore = locks.semaphore("outcomes", 2).unwrap();
    let permit = semaphore.acquire().unwrap();
    assert_eq!(permit.release().unwrap(), ReleaseOutcome::Released);
    // Expired without a watchdog: late.
    let opts = LockOptions::new()
        .ttl(Duration::from_millis(100))
        .watchdog(false);
    let permit = semaphore.acquire_with(&opts).unwrap();
    assert!(wait_until(Duration::from_secs(2), || permit.is_lost()));
    std::thread::sleep(Duration::from_millis(5));
    assert_eq!(permit.release().unwrap(), ReleaseOutcome::Late);
    // Releasing twice reports the first outcome; extend works on a live permit.
    let permit = semaphore.acquire().unwrap();
    permit.extend(Duration::from_secs(20)).unwrap();
    assert!(permit.remaining_ttl().unwrap().unwrap() > Duration::from_secs(15));
    assert_eq!(permit.release().unwrap(), ReleaseOutcome::Released);
    assert_eq!(semaphore.available().unwrap(), 2);
}

#[test]
fn available_and_holders_can_be_inspected() {
    let server = RedisServer::start();
    let locks = client(&server);
    let semaphore = locks.semaphore("inspected", 3).unwrap();
    let info = semaphore.inspect().unwrap();
    assert_eq!((info.limit, info.in_use, info.available), (3, 0, 3));
    let a = semaphore
        .acquire_with(&LockOptions::new().metadata("export 1"))
        .unwrap();
    let other = client(&server);
    let b = other.semaphore("inspected", 3).unwrap().acquire().unwrap();
    assert_eq!(semaphore.available().unwrap(), 1);
    let info = semaphore.inspect().unwrap();
    assert_eq!((info.limit, info.in_use, info.available), (3, 2, 1));
    assert_eq!(info.holders.len(), 2);
    let mine = info
        .holders
        .iter()
        .find(|p| p.fencing_token == a.fencing_token())
        .unwrap();
    assert_eq!(mine.metadata.as_deref(), Some("export 1"));
    assert_eq!(mine.pid, Some(std::process::id()));
    assert!(mine.host.as_ref().is_some_and(|h| !h.is_empty()));
    assert!(mine.acquired_at.is_some());
    assert!(mine.remaining_ttl > Duration::ZERO);
    assert!(
        info.holders
            .iter()
            .any(|p| p.fencing_token == b.fencing_token())
    );
    let debug = format!("{info:?} {a:?}");
    assert!(!debug.contains(a.token()), "no owner token in Debug");
    // A third takes the last permit, a fourth waits and is counted.
    let third = client(&server);
    let c = third.semaphore("inspected", 3).unwrap().acquire().unwrap();
    let waiter = {
        let s = other.semaphore("inspected", 3).unwrap();
        std::thread::spawn(move || s.try_acquire_for(Duration::from_secs(10)).unwrap())
    };
    assert!(wait_until(Duration::from_secs(5), || {
        semaphore.inspect().unwrap().waiters == 1
    }));
    assert_eq!(semaphore.available().unwrap(), 0);
    drop(c);
    let got = waiter.join().unwrap().expect("woken with the freed permit");
    drop((a, b, got));
}

#[test]
fn the_stored_limit_wins_and_set_permits_changes_it() {
    let server = RedisServer::start();
    let locks = client(&server);
    let two = locks.semaphore("resized", 2).unwrap();
    let p1 = two.acquire().unwrap();
    let p2 = two.acquire_with(&LockOptions::new()).unwrap_err();
    assert!(
        matches!(p2, Error::AlreadyHeld { .. }),
        "one permit per thread: {p2:?}"
    );
    // The `try_` family reports the permit this thread holds as busy, as `try_lock` does.
    assert!(matches!(two.try_acquire(), Ok(None)));
    assert!(matches!(
        two.try_acquire_for(Duration::from_secs(30)),
        Ok(None)
    ));
    let other = client(&server);
    let five = other.semaphore("resized", 5).unwrap();
    assert_eq!(five.limit().unwrap(), 2, "the stored limit wins");
    let p2 = five.acquire().unwrap();
    let third = {
        let five = five.clone();
        std::thread::spawn(move || five.try_acquire().unwrap().is_some())
            .join()
            .unwrap()
    };
    assert!(!third, "2 of 2 held");
    // Lowering never revokes: both stay held; a release then does not make room.
    assert_eq!(two.set_permits(1).unwrap(), Some(2));
    assert!(p1.ensure_held().is_ok() && p2.ensure_held().is_ok());
    assert_eq!(two.inspect().unwrap().in_use, 2);
    assert_eq!(two.available().unwrap(), 0);
    drop(p1);
    let try_other = |s: &Semaphore| {
        let s = s.clone();
        std::thread::spawn(move || s.try_acquire().unwrap().map(|p| p.release().unwrap()))
            .join()
            .unwrap()
    };
    assert_eq!(try_other(&two), None, "1 held of a limit of 1");
    drop(p2);
    assert_eq!(try_other(&two), Some(ReleaseOutcome::Released));
    // Raising wakes a blocked waiter at once.
    let held: Vec<_> = (0..1).map(|_| two.acquire().unwrap()).collect();
    let waiter = {
        let s = five.clone();
        std::thread::spawn(move || {
            let p = s.try_acquire_for(Duration::from_secs(10)).unwrap();
            (p.is_some(), Instant::now())
        })
    };
    assert!(wait_until(Duration::from_secs(5), || {
        two.inspect().unwrap().waiters == 1
    }));
    let raised = Instant::now();
    assert_eq!(two.set_permits(3).unwrap(), Some(1));
    let (got, at) = waiter.join().unwrap();
    assert!(got);
    let took = at.duration_since(raised);
    assert!(
        took < Duration::from_millis(200),
        "woken by the raise: {took:?}"
    );
    assert_eq!(five.limit().unwrap(), 3);
    drop(held);
}

#[test]
fn a_release_wakes_a_blocked_waiter_at_once() {
    let server = RedisServer::start();
    let locks = client(&server);
    let semaphore = locks.semaphore("handoff", 1).unwrap();
    let mut took = Vec::new();
    for _ in 0..5 {
        let permit = semaphore
            .acquire_with(&LockOptions::new().ttl(Duration::from_secs(30)))
            .unwrap();
        let waiter = {
            let s = semaphore.clone();
            std::thread::spawn(move || {
                let p = s.try_acquire_for(Duration::from_secs(20)).unwrap();
                let at = Instant::now();
                (p.map(|p| p.fencing_token()), at)
            })
        };
        // The waiter registered and blocks in BLPOP.
        assert!(wait_until(Duration::from_secs(5), || {
            server.info_field("clients", "blocked_clients").unwrap() == "1"
        }));
        let fence = permit.fencing_token();
        let released = Instant::now();
        assert_eq!(permit.release().unwrap(), ReleaseOutcome::Released);
        let (got, at) = waiter.join().unwrap();
        let got = got.expect("the waiter got the permit");
        assert!(got > fence);
        took.push(at.duration_since(released));
    }
    took.sort();
    // The TTL is 30 s and nothing polls: without the release's wake-up the waiter would block
    // for 20 s. Every round well under a second; the median within a few milliseconds (a
    // round can be slower when the test machine stalls a thread).
    assert!(took[4] < Duration::from_secs(1), "{took:?}");
    assert!(took[2] < Duration::from_millis(50), "{took:?}");
}

/// A release that grants its permit to a blocked waiter reads only what decides something:
/// no fair queue (none exists) and no wake-up list's type (none pending); one `EXISTS` says
/// so. And every key of the semaphore still expires after the grant: when the released
/// permit was the last, its keys went with it and the grant makes them anew, with a TTL.
#[test]
fn a_grant_reads_only_what_it_needs_and_every_key_keeps_a_ttl() {
    let server = RedisServer::start();
    // Counts the protocol's own commands exactly: without loss notification's (notify.rs).
    let client =
        |server: &RedisServer| redis_lock_tests::client_without_notification(&server.url());
    let locks = client(&server);
    // The scripts loaded (the first EVALSHA of each answers NOSCRIPT).
    drop(locks.semaphore("warm", 1).unwrap().acquire().unwrap());
    let mut probe = server.connection();
    let pttl = |probe: &mut redis::Connection, key: &str| -> i64 {
        redis::cmd("PTTL").arg(key).query(probe).unwrap()
    };
    for (name, permits) in [("last", 1u32), ("others", 3)] {
        let semaphore = locks.semaphore(name, permits).unwrap();
        let opts = LockOptions::new().ttl(Duration::from_secs(30));
        // One client per holder: a thread holds one permit of a semaphore per client.
        let mut held: Vec<_> = (0..permits)
            .map(|_| {
                client(&server)
                    .semaphore(name, permits)
                    .unwrap()
                    .acquire_with(&opts)
                    .unwrap()
            })
            .collect();
        let waiter = {
            let s = semaphore.clone();
            std::thread::spawn(move || s.try_acquire_for(Duration::from_secs(20)).unwrap())
        };
        assert!(wait_until(Duration::from_secs(5), || {
            server.info_field("clients", "blocked_clients").unwrap() == "1"
        }));
        // A grant stamped in the registration's millisecond is claimed (a round trip and a
        // script more, see `take_grant`): release once the server clock has moved on.
        let server_ms = |probe: &mut redis::Connection| -> u64 {
            let (s, us): (u64, u64) = redis::cmd("TIME").query(probe).unwrap();
            s * 1000 + us / 1000
        };
        let registered = server_ms(&mut probe);
        assert!(wait_until(Duration::from_secs(1), || server_ms(&mut probe)
            > registered + 1));
        reset_stats(&mut probe);
        let released = held.pop().unwrap();
        assert_eq!(released.release().unwrap(), ReleaseOutcome::Released);
        let granted = waiter.join().unwrap().expect("the waiter got the permit");
        let calls = command_counts(&mut probe);
        let get = |name: &str| calls.get(name).copied().unwrap_or(0);
        assert_eq!(get("evalsha"), 1, "{name}: the release alone: {calls:?}");
        assert_eq!(
            get("type"),
            0,
            "{name}: no wake-up list to probe: {calls:?}"
        );
        assert_eq!(get("zrange"), 1, "{name}: the grants, no queue: {calls:?}");
        let (permits_key, holders_key) = (
            format!("lock:{{{name}}}"),
            format!("lock:{{{name}}}:holders"),
        );
        let (p, h) = (
            pttl(&mut probe, &permits_key),
            pttl(&mut probe, &holders_key),
        );
        if permits == 1 {
            assert!(p > 0 && h > 0, "{name}: the grant's keys expire: {p} {h}");
        } else {
            assert!(
                p > 25_000 && h > 25_000,
                "{name}: still the holders' TTL: {p} {h}"
            );
        }
        drop(granted);
        drop(held);
    }
}

#[test]
fn fencing_tokens_increase_across_permits() {
    let server = RedisServer::start();
    let locks = client(&server);
    let semaphore = locks.semaphore("fenced", 3).unwrap();
    let mut last = 0;
    for _ in 0..10 {
        let p = semaphore.acquire().unwrap();
        assert!(p.fencing_token() > last);
        last = p.fencing_token();
    }
    let tokens: Vec<u64> = (0..3)
        .map(|_| {
            let s = semaphore.clone();
            std::thread::spawn(move || {
                let p = s.acquire().unwrap();
                let t = p.fencing_token();
                std::mem::forget(p);
                t
            })
            .join()
            .unwrap()
        })
        .collect();
    let mut sorted = tokens.clone();
    sorted.dedup();
    assert_eq!(sorted.len(), 3, "every permit its own token: {tokens:?}");
    assert!(tokens.iter().all(|t| *t > last));
}

#[test]
fn cluster_semaphores_on_different_masters() {
    let cluster = RedisCluster::start(3);
    let locks = cluster_client(&cluster);
    // Two names whose slots are served by different masters.
    let names: Vec<String> = (0..50).map(|i| format!("sem-{i}")).collect();
    let port = |n: &str| cluster.port_for_slot(cluster.keyslot(&format!("lock:{{{n}}}")));
    let first = names[0].clone();
    let second = names
        .iter()
        .find(|n| port(n) != port(&first))
        .unwrap()
        .clone();
    for name in [&first, &second] {
        let semaphore = locks.semaphore(name, 2).unwrap();
        let (highest, acquired) = contend(&semaphore, 4, 10);
        assert_eq!((highest, acquired), (2, 40), "{name}");
        let a = semaphore.acquire().unwrap();
        let b = {
            let s = semaphore.clone();
            std::thread::spawn(move || {
                let p = s.acquire().unwrap();
                let t = p.fencing_token();
                std::mem::forget(p);
                t
            })
            .join()
            .unwrap()
        };
        assert!(b > a.fencing_token());
        assert_eq!(semaphore.available().unwrap(), 0);
        let node = cluster.node_for_slot(cluster.keyslot(&format!("lock:{{{name}}}")));
        for key in ["", ":holders", ":limit", ":fence"] {
            let key = format!("lock:{{{name}}}{key}");
            let n: i64 = redis::cmd("EXISTS")
                .arg(&key)
                .query(&mut node.connection())
                .unwrap();
            assert_eq!(n, 1, "{key} on the slot's master");
        }
    }
}

#[test]
fn redlock_is_refused() {
    let (a, b, c) = (
        RedisServer::start(),
        RedisServer::start(),
        RedisServer::start(),
    );
    let locks = redlock_client(&[&a, &b, &c]);
    match locks.semaphore("quorum", 3) {
        Err(Error::InvalidInput { what, reason }) => {
            assert_eq!(what, "semaphore");
            assert!(reason.contains("Redlock"), "{reason}");
        }
        other => panic!("{other:?}"),
    }
    for s in [&a, &b, &c] {
        assert!(keys_of(s).is_empty());
    }
}

#[test]
fn bad_input_is_refused_and_redis_left_untouched() {
    let server = RedisServer::start();
    // Counts requests exactly below: without loss notification's check (notify.rs).
    let locks: LockClient = redis_lock_tests::client_without_notification(&server.url());
    for (name, permits, what) in [
        ("ok", 0, "permits"),
        ("ok", MAX_PERMITS + 1, "permits"),
        ("ok", u32::MAX, "permits"),
        ("", 3, "key"),
        ("}x", 3, "key"),
    ] {
        match locks.semaphore(name, permits) {
            Err(Error::InvalidInput { what: w, .. }) => assert_eq!(w, what, "{name:?} {permits}"),
            other => panic!("{name:?} {permits}: {other:?}"),
        }
    }
    assert!(locks.semaphore("ok", MAX_PERMITS).is_ok());
    let semaphore = locks.semaphore("ok", 3).unwrap();
    for (opts, what) in [
        (
            LockOptions::new().hold_at_least(Duration::from_secs(1)),
            "hold_at_least",
        ),
        (
            LockOptions::new().cooldown(Duration::from_secs(1)),
            "cooldown",
        ),
        (LockOptions::new().ttl(Duration::ZERO), "ttl"),
        (LockOptions::new().metadata("x".repeat(1 << 20)), "metadata"),
        (LockOptions::new().mode(LockMode::Read), "mode"),
        (LockOptions::new().mode(LockMode::Write), "mode"),
    ] {
        match semaphore.acquire_with(&opts) {
            Err(Error::InvalidInput { what: w, .. }) => assert_eq!(w, what),
            other => panic!("{what}: {other:?}"),
        }
    }
    assert!(matches!(
        semaphore.set_permits(0),
        Err(Error::InvalidInput {
            what: "permits",
            ..
        })
    ));
    assert!(keys_of(&server).is_empty(), "nothing was sent");

    // A cool-down for one release of a permit: refused like the option (it used to answer
    // `Released` and give the permit back at once); the guard is then dropped, which gives
    // the permit back as a drop does.
    let permit = semaphore.acquire().unwrap();
    let sent = locks.request_count();
    match permit.release_after(Duration::from_secs(1)) {
        Err(Error::InvalidInput { what, reason }) => {
            assert_eq!(what, "cooldown");
            assert!(reason.contains("semaphore"), "{reason}");
        }
        other => panic!("release_after of a permit: {other:?}"),
    }
    assert_eq!(
        locks.request_count(),
        sent + 1,
        "one request: the drop's release"
    );
    assert_eq!(semaphore.available().unwrap(), 3, "given back by the drop");

    // A mutex's name used as a semaphore, and the reverse: a clear error, nothing changed.
    let mutex = locks.lock("shared-name").unwrap();
    let before = keys_of(&server);
    let dump = |key: &str| -> Vec<u8> {
        redis::cmd("DUMP")
            .arg(key)
            .query(&mut server.connection())
            .unwrap()
    };
    let lock_before = dump("lock:{shared-name}");
    let as_semaphore = locks.semaphore("shared-name", 3).unwrap();
    let other_thread = {
        let s = as_semaphore.clone();
        std::thread::spawn(move || s.try_acquire().map(|p| p.is_some()))
            .join()
            .unwrap()
    };
    match other_thread {
        Err(Error::WrongType { redis_key }) => assert_eq!(redis_key, "lock:{shared-name}"),
        other => panic!("{other:?}"),
    }
    assert!(matches!(
        as_semaphore.inspect(),
        Err(Error::WrongType { .. })
    ));
    assert!(matches!(
        as_semaphore.set_permits(4),
        Err(Error::WrongType { .. })
    ));
    assert_eq!(keys_of(&server), before);
    assert_eq!(dump("lock:{shared-name}"), lock_before);
    drop(mutex);

    // A companion key of another type (the wake-up list, the limit): refused, nothing written.
    for (key, name) in [("lock:{sig}:signal", "sig"), ("lock:{lim}:limit", "lim")] {
        redis::cmd("HSET")
            .arg(key)
            .arg("f")
            .arg("v")
            .query::<i64>(&mut server.connection())
            .unwrap();
        let before = keys_of(&server);
        match locks.semaphore(name, 2).unwrap().try_acquire() {
            Err(Error::WrongType { redis_key }) => assert_eq!(redis_key, key),
            other => panic!("{key}: {other:?}"),
        }
        assert_eq!(keys_of(&server), before, "{key}");
    }

    let permit = locks.semaphore("sem-name", 2).unwrap().acquire().unwrap();
    let before = keys_of(&server);
    let as_mutex = {
        std::thread::spawn(move || locks.try_lock("sem-name").map(|g| g.is_some()))
            .join()
            .unwrap()
    };
    assert!(
        matches!(as_mutex, Err(Error::WrongType { .. })),
        "{as_mutex:?}"
    );
    assert_eq!(keys_of(&server), before);
    assert!(permit.ensure_held().is_ok());
}

#[test]
fn fair_waiters_get_permits_in_arrival_order() {
    let server = RedisServer::start();
    let locks = client(&server);
    let semaphore = locks.semaphore("fair-order", 1).unwrap();
    let held = semaphore
        .acquire_with(&LockOptions::new().ttl(Duration::from_secs(30)))
        .unwrap();
    let order = Arc::new(std::sync::Mutex::new(Vec::new()));
    let mut waiters = Vec::new();
    for i in 0..4 {
        let (s, order) = (semaphore.clone(), Arc::clone(&order));
        waiters.push(std::thread::spawn(move || {
            let opts = LockOptions::new()
                .wait(Duration::from_secs(20))
                .retry(RetryStrategy::fair());
            let permit = s.acquire_with(&opts).unwrap();
            order.lock().unwrap().push(i);
            std::thread::sleep(Duration::from_millis(10));
            drop(permit);
        }));
        // The next one arrives only once this one is queued.
        assert!(wait_until(Duration::from_secs(5), || {
            semaphore.inspect().unwrap().queued == i + 1
        }));
    }
    drop(held);
    for w in waiters {
        w.join().unwrap();
    }
    assert_eq!(*order.lock().unwrap(), vec![0, 1, 2, 3]);
}

#[test]
fn sentinel_semaphore_counts_on_the_master() {
    let group = redis_lock::testing::SentinelGroup::start();
    let locks = redis_lock_tests::sentinel_client(&group);
    let semaphore = locks.semaphore("sentinel-2", 2).unwrap();
    let (highest, acquired) = contend(&semaphore, 4, 10);
    assert_eq!((highest, acquired), (2, 40));
    let info = semaphore.inspect().unwrap();
    assert_eq!((info.limit, info.in_use), (2, 0));
    let n: i64 = redis::cmd("EXISTS")
        .arg("lock:{sentinel-2}:limit")
        .query(&mut group.master().connection())
        .unwrap();
    assert_eq!(n, 1, "the limit lives on the master");
}

// --- the attribute macro ---------------------------------------------------------------------

static MACRO_INSIDE: AtomicU32 = AtomicU32::new(0);
static MACRO_MOST: AtomicU32 = AtomicU32::new(0);

#[redis_lock::distributed_lock(key = "export-{kind}", client = locks, ttl = 10, permits = 2)]
fn export(locks: &LockClient, kind: &str) -> redis_lock::Result<u32> {
    let now = MACRO_INSIDE.fetch_add(1, Ordering::SeqCst) + 1;
    MACRO_MOST.fetch_max(now, Ordering::SeqCst);
    std::thread::sleep(Duration::from_millis(2));
    MACRO_INSIDE.fetch_sub(1, Ordering::SeqCst);
    let _ = kind;
    Ok(now)
}

#[redis_lock::distributed_lock(key = "single", client = locks, permits = 1, on_busy = "skip")]
fn single(locks: &LockClient) -> Option<u32> {
    Some(1)
}

#[test]
fn the_macro_takes_permits() {
    let server = RedisServer::start();
    let locks = client(&server);
    let handles: Vec<_> = (0..5)
        .map(|_| {
            let locks = locks.clone();
            std::thread::spawn(move || {
                for _ in 0..10 {
                    export(&locks, "csv").unwrap();
                }
            })
        })
        .collect();
    for h in handles {
        h.join().unwrap();
    }
    assert_eq!(MACRO_MOST.load(Ordering::SeqCst), 2, "2 permits: 2 at once");
    let info = locks.semaphore("export-csv", 2).unwrap().inspect().unwrap();
    assert_eq!((info.limit, info.in_use), (2, 0));
    // No permit free: skipped; one free: run.
    let holder = client(&server)
        .semaphore("single", 1)
        .unwrap()
        .acquire()
        .unwrap();
    assert_eq!(single(&locks), None);
    drop(holder);
    assert_eq!(single(&locks), Some(1));
}

#[test]
fn force_release_breaks_every_permit_and_wakes_a_waiter() {
    let server = RedisServer::start();
    let locks = client(&server);
    let semaphore = locks.semaphore("broken", 2).unwrap();
    let a = semaphore.acquire().unwrap();
    let other = client(&server);
    let b = other.semaphore("broken", 2).unwrap().acquire().unwrap();
    let third = client(&server);
    let waiter = {
        let s = third.semaphore("broken", 2).unwrap();
        std::thread::spawn(move || s.try_acquire_for(Duration::from_secs(10)).unwrap())
    };
    assert!(wait_until(Duration::from_secs(5), || {
        semaphore.inspect().unwrap().waiters == 1
    }));
    let broken = semaphore.force_release().unwrap();
    assert_eq!(broken.map(|(_, pid)| pid), Some(std::process::id()));
    let got = waiter.join().unwrap().expect("woken by the break");
    // Asking Redis finds each permit gone (the watchdog would, at its next renewal).
    for permit in [&a, &b] {
        assert!(matches!(permit.remaining_ttl(), Err(Error::Lost { .. })));
        assert!(permit.is_lost());
    }
    assert_eq!(a.release().unwrap(), ReleaseOutcome::Late);
    assert_eq!(b.release().unwrap(), ReleaseOutcome::Late);
    assert_eq!(
        semaphore.inspect().unwrap().in_use,
        1,
        "only the woken waiter's"
    );
    drop(got);
    assert_eq!(semaphore.force_release().unwrap(), None);
}

// --- the minimal ACL rule ------------------------------------------------------------------

/// The locks' minimal rule (SAFETY.md) ...
const LOCK_COMMANDS: &[&str] = redis_lock_tests::LOCK_ACL_COMMANDS;

/// ... and what semaphores add to it (SAFETY.md, "The semaphore").
/// Beyond the lock's rule (which has `get` and `set` since the mutex's native fast path).
const SEMAPHORE_COMMANDS: &[&str] = &["zcard", "zrank", "hdel", "lrange"];

/// Every semaphore operation once: acquire, extend, remaining TTL, inspect, a fair waiter
/// woken by the release (grant), a waiter that gives up (leave), a permit lost and released
/// late, set_permits, force_release.
fn semaphore_workload(server: &RedisServer, url: &str) -> redis_lock::Result<()> {
    let locks = redis_lock_tests::client_for(url);
    let semaphore = locks.semaphore("acl", 1)?;
    let permit = semaphore.acquire_with(&LockOptions::new().ttl(Duration::from_secs(5)))?;
    permit.extend(Duration::from_secs(6))?;
    permit.remaining_ttl()?;
    semaphore.inspect()?;
    let impatient = redis_lock_tests::client_for(url);
    let gave_up = impatient
        .semaphore("acl", 1)?
        .try_acquire_for(Duration::from_millis(50))?
        .is_none();
    let other = redis_lock_tests::client_for(url);
    let waiter = std::thread::spawn(move || {
        let opts = LockOptions::new()
            .wait(Duration::from_secs(2))
            .retry(RetryStrategy::fair());
        other
            .semaphore("acl", 1)?
            .try_acquire_with(&opts)
            .map(|p| p.map(|p| p.release()))
    });
    wait_until(Duration::from_secs(2), || {
        server.info_field("clients", "blocked_clients").unwrap() == "1"
    });
    permit.release()?;
    let handed = matches!(waiter.join().unwrap()?, Some(Ok(ReleaseOutcome::Released)));
    // A fair waiter queued while the only permit is held, woken by raising the limit: it
    // finds a free permit with a queue (ZRANK).
    let b = semaphore.acquire()?;
    let queued = redis_lock_tests::client_for(url);
    let waiter = std::thread::spawn(move || {
        let opts = LockOptions::new()
            .wait(Duration::from_secs(2))
            .retry(RetryStrategy::fair());
        let permit = queued.semaphore("acl", 1)?.try_acquire_with(&opts)?;
        Ok::<bool, Error>(permit.is_some_and(|p| {
            std::mem::forget(p);
            true
        }))
    });
    wait_until(Duration::from_secs(2), || {
        server.info_field("clients", "blocked_clients").unwrap() == "1"
    });
    semaphore.set_permits(2)?;
    let raised = waiter.join().unwrap()?;
    semaphore.force_release()?;
    let late = b.release()? == ReleaseOutcome::Late;
    if gave_up && handed && raised && late {
        Ok(())
    } else {
        Err(Error::Busy {
            key: "acl".into(),
            holder: None,
        })
    }
}

#[test]
fn the_semaphore_needs_the_lock_rule_plus_its_own_commands_and_every_one_of_them() {
    let server = RedisServer::start();
    let url = redis_lock_tests::acl_url(&server);
    let setuser = |commands: &[&str]| redis_lock_tests::acl_user(&server, commands);
    let all: Vec<&str> = LOCK_COMMANDS
        .iter()
        .chain(SEMAPHORE_COMMANDS)
        .copied()
        .collect();
    setuser(&all);
    semaphore_workload(&server, &url).unwrap();
    assert_eq!(
        redis_lock_tests::acl_denied(&server),
        std::collections::HashSet::new()
    );
    for missing in SEMAPHORE_COMMANDS {
        let fewer: Vec<&str> = all.iter().copied().filter(|c| c != missing).collect();
        setuser(&fewer);
        let _ = semaphore_workload(&server, &url);
        assert!(
            redis_lock_tests::acl_denied(&server).contains(*missing),
            "without {missing}: denied {:?}",
            redis_lock_tests::acl_denied(&server)
        );
    }
}

/// With no permit held, nobody queued and no wake-up pending, a permit cycle takes the fast
/// paths of both scripts: no prune, no waiter or queue work, no type probe; one `TIME` each
/// (the expiry and the late check are on the server clock). A second holder's acquisition
/// finds a permit held and takes the full path, which still counts the first.
#[test]
fn an_uncontended_permit_cycle_takes_the_fast_paths() {
    let server = RedisServer::start();
    // Counts commands exactly: without loss notification's check (notify.rs).
    let locks = redis_lock_tests::client_without_notification(&server.url());
    let semaphore = locks.semaphore("fast", 2).unwrap();
    // Scripts loaded (the first EVALSHA of each answers NOSCRIPT), the limit stored.
    drop(semaphore.acquire().unwrap());
    let mut probe = server.connection();
    reset_stats(&mut probe);
    let mut last = 0;
    for _ in 0..10 {
        let permit = semaphore.acquire().unwrap();
        assert!(permit.fencing_token() > last, "fencing tokens increase");
        last = permit.fencing_token();
        assert_eq!(permit.release().unwrap(), ReleaseOutcome::Released);
    }
    let calls = command_counts(&mut probe);
    let get = |name: &str| calls.get(name).copied().unwrap_or(0);
    assert_eq!(get("evalsha"), 20, "{calls:?}");
    for full_path_only in ["zrangebyscore", "zrange", "zcard", "type", "llen", "pttl"] {
        assert_eq!(get(full_path_only), 0, "{full_path_only}: {calls:?}");
    }
    assert_eq!(get("time"), 20, "one TIME per script: {calls:?}");
    assert_eq!((get("zadd"), get("zrem")), (10, 10), "{calls:?}");
    // No key outlives the cycle but the limit and the fencing counter.
    assert_eq!(keys_of(&server), ["lock:{fast}:fence", "lock:{fast}:limit"]);

    // A permit held: the next acquisition takes the full path and counts it.
    let first = semaphore.acquire().unwrap();
    let ttl: i64 = redis::cmd("PTTL")
        .arg("lock:{fast}")
        .query(&mut probe)
        .unwrap();
    assert!(ttl > 0, "the fast path set the permits key's TTL: {ttl}");
    let ttl: i64 = redis::cmd("PTTL")
        .arg("lock:{fast}:holders")
        .query(&mut probe)
        .unwrap();
    assert!(ttl > 0, "and the holders key's: {ttl}");
    let other = client(&server);
    let second = other.semaphore("fast", 2).unwrap().try_acquire().unwrap();
    assert!(second.is_some(), "two permits");
    assert!(
        get("zcard")
            < command_counts(&mut probe)
                .get("zcard")
                .copied()
                .unwrap_or(0)
    );
    let third = client(&server).semaphore("fast", 2).unwrap().try_acquire();
    assert!(matches!(third, Ok(None)), "both permits held: {third:?}");
    drop((first, second));
}

/// `LockClient::inspect` and `force_release` ask each primitive shown as one holder's lock in
/// turn; a semaphore is not one (`Semaphore::inspect` lists every permit): on its name they
/// answer `WrongType`, write nothing, and the semaphore's own calls see and break its permits.
#[test]
fn the_clients_inspect_and_force_release_leave_a_semaphore_to_its_own_calls() {
    let server = RedisServer::start();
    let locks = client(&server);
    let semaphore = locks.semaphore("pool", 2).unwrap();
    let permit = semaphore.try_acquire().unwrap().expect("a permit is free");
    let before = keys_of(&server);
    assert!(matches!(
        locks.inspect("pool"),
        Err(Error::WrongType { redis_key }) if redis_key == "lock:{pool}"
    ));
    assert!(matches!(
        locks.force_release("pool"),
        Err(Error::WrongType { .. })
    ));
    assert_eq!(keys_of(&server), before);
    assert_eq!(semaphore.inspect().unwrap().in_use, 1);
    assert!(!permit.is_lost());
    assert_eq!(
        semaphore.force_release().unwrap().map(|(_, pid)| pid),
        Some(std::process::id())
    );
    assert_eq!(semaphore.inspect().unwrap().in_use, 0);
}
