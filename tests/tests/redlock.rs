//! Redlock over three independent servers: majority acquisition, renewal and release, a
//! clear error without a majority, loss reported to a holder that loses its majority, and
//! fencing tokens that keep increasing while servers come and go.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use redis_lock::{Error, LockClient, LostReason, ReleaseOutcome};
use redis_lock_tests::{
    Contention, RedisServer, TcpProxy, assert_names_holder, holds, redlock_client, requests, shown,
    wait_until,
};

fn three() -> [RedisServer; 3] {
    [
        RedisServer::start(),
        RedisServer::start(),
        RedisServer::start(),
    ]
}

#[test]
fn acquires_on_all_and_releases_on_all() {
    let [a, b, c] = three();
    let locks = redlock_client(&[&a, &b, &c]);
    let other = redlock_client(&[&a, &b, &c]);
    let guard = locks.try_lock("job").unwrap().expect("free");
    // Acquired once a majority has it; the third server's answer may still be on its way.
    let on_all = || holds(&a, "job") && holds(&b, "job") && holds(&c, "job");
    assert!(wait_until(Duration::from_secs(2), on_all));
    assert!(other.try_lock("job").unwrap().is_none());
    let info = other.inspect("job").unwrap().expect("held by a majority");
    assert_eq!(info.fencing_token, guard.fencing_token());
    assert!(info.remaining_ttl.is_some());
    assert!(guard.remaining_ttl().unwrap().is_some());
    assert_eq!(guard.release().unwrap(), ReleaseOutcome::Released);
    let on_none = || !holds(&a, "job") && !holds(&b, "job") && !holds(&c, "job");
    assert!(wait_until(Duration::from_secs(2), on_none));
    assert!(other.inspect("job").unwrap().is_none());
    locks.ping().unwrap();
}

#[test]
fn one_server_down_locks_are_still_acquired_and_renewed() {
    let [mut a, b, c] = three();
    a.kill();
    let locks = redlock_client(&[&a, &b, &c]);
    let other = redlock_client(&[&a, &b, &c]);
    let guard = locks
        .options("one-down")
        .ttl(Duration::from_millis(600))
        .acquire()
        .unwrap();
    assert!(holds(&b, "one-down") && holds(&c, "one-down"));
    // Several renewal periods (200 ms) beyond the TTL: the watchdog keeps it on the majority.
    let until = Instant::now() + Duration::from_millis(1500);
    while Instant::now() < until {
        assert!(!guard.is_lost(), "lost with 2 of 3 servers up");
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(other.try_lock("one-down").unwrap().is_none(), "still held");
    locks.ping().unwrap();
    assert_eq!(guard.release().unwrap(), ReleaseOutcome::Released);
    assert!(other.try_lock("one-down").unwrap().is_some());
}

#[test]
fn two_servers_down_is_a_clear_no_quorum_error_within_the_budget() {
    let [mut a, mut b, c] = three();
    a.kill();
    b.kill();
    let locks = redlock_client(&[&a, &b, &c]);
    let started = Instant::now();
    let err = locks
        .options("job")
        .wait(Duration::from_secs(3))
        .acquire()
        .unwrap_err();
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "{:?}",
        started.elapsed()
    );
    match &err {
        Error::NoQuorum {
            key,
            answered,
            required,
            total,
            ..
        } => {
            assert_eq!(
                (key.as_str(), *answered, *required, *total),
                ("job", 1, 2, 3)
            );
        }
        other => panic!("expected NoQuorum, got {other}"),
    }
    assert!(err.is_connection_error());
    assert!(err.to_string().contains("1 of 3"), "{err}");
    // The one server that answered was given its partial lock back.
    assert!(!holds(&c, "job"));
    assert!(matches!(locks.ping(), Err(Error::NoQuorum { .. })));
}

#[test]
fn holder_that_loses_its_majority_is_told() {
    let [mut a, mut b, c] = three();
    let locks = redlock_client(&[&a, &b, &c]);
    let (tx, rx) = std::sync::mpsc::channel();
    let guard = locks
        .options("job")
        .ttl(Duration::from_millis(900))
        .on_lost(move |event| {
            let _ = tx.send((event.key.clone(), event.reason, Instant::now()));
        })
        .acquire()
        .unwrap();
    a.kill();
    b.kill();
    let killed = Instant::now();
    let (key, reason, at) = rx
        .recv_timeout(Duration::from_secs(10))
        .expect("the loss is reported");
    assert_eq!(key, "job");
    assert_eq!(reason, LostReason::RenewalFailed);
    // Reported by the time the TTL (900 ms, less drift) could have run out, not long after.
    assert!(at - killed < Duration::from_secs(3), "{:?}", at - killed);
    assert!(guard.is_lost());
    assert!(matches!(guard.ensure_held(), Err(Error::Lost { .. })));
    assert!(c.pid().is_some());
}

#[test]
fn mutual_exclusion_and_wake_up_under_redlock() {
    let [a, b, c] = three();
    let clients: Vec<LockClient> = (0..2).map(|_| redlock_client(&[&a, &b, &c])).collect();
    let count = Arc::new(AtomicU64::new(0));
    let inside = Arc::new(AtomicBool::new(false));
    const THREADS: usize = 4;
    const ROUNDS: u64 = 20;
    std::thread::scope(|s| {
        for t in 0..THREADS {
            let locks = clients[t % 2].clone();
            let (count, inside) = (Arc::clone(&count), Arc::clone(&inside));
            s.spawn(move || {
                for _ in 0..ROUNDS {
                    let guard = locks
                        .options("counter")
                        .ttl(Duration::from_secs(10))
                        .wait(Duration::from_secs(60))
                        .acquire()
                        .unwrap();
                    assert!(!inside.swap(true, Ordering::SeqCst), "two holders");
                    let v = count.load(Ordering::SeqCst);
                    std::thread::yield_now();
                    count.store(v + 1, Ordering::SeqCst);
                    inside.store(false, Ordering::SeqCst);
                    assert_eq!(guard.release().unwrap(), ReleaseOutcome::Released);
                }
            });
        }
    });
    assert_eq!(count.load(Ordering::SeqCst), THREADS as u64 * ROUNDS);

    // A waiter is woken by the release, long before the holder's 30 s TTL. Under Redlock it
    // blocks in `BLMOVE` of the wake-up list onto itself: woken without taking the grant,
    // which its next attempt takes on every server.
    // Clients blocked right now (not commandstats: Valkey counts a `BLMOVE` only once it
    // returns, Redis 7.0 when it blocks).
    let blocked = || -> u64 {
        [&a, &b, &c]
            .iter()
            .map(|s| {
                s.info_field("clients", "blocked_clients")
                    .ok()
                    .and_then(|v| v.parse::<u64>().ok())
                    .unwrap_or(0)
            })
            .sum()
    };
    let guard = clients[0]
        .options("wake")
        .ttl(Duration::from_secs(30))
        .acquire()
        .unwrap();
    let waiter = clients[1].clone();
    let started = Instant::now();
    let waiting = std::thread::spawn(move || {
        let g = waiter
            .try_lock_for("wake", Duration::from_secs(20))
            .unwrap();
        (started.elapsed(), g.map(|g| g.fencing_token()))
    });
    // The waiter is blocked on one of the servers.
    assert!(wait_until(Duration::from_secs(10), || blocked() > 0));
    let fence = guard.fencing_token();
    assert_eq!(guard.release().unwrap(), ReleaseOutcome::Released);
    let (waited, next) = waiting.join().unwrap();
    assert!(waited < Duration::from_secs(10), "waited {waited:?}");
    assert!(next.expect("acquired after the release") > fence);
}

/// Servers with an append-only file keep their counters across a restart. Each step takes
/// one server down and brings the previous one back, so every majority mixes servers whose
/// counters drifted apart; the tokens still increase strictly (without raising the lagging
/// counters, the last step would hand out a token equal to the one before).
#[test]
fn fencing_tokens_increase_while_servers_come_and_go() {
    let durable = ["--appendonly", "yes", "--appendfsync", "always"];
    let mut servers = [
        RedisServer::start_with(&durable),
        RedisServer::start_with(&durable),
        RedisServer::start_with(&durable),
    ];
    let mut tokens = Vec::new();
    let mut take = |servers: &[RedisServer; 3], times: usize| {
        // A new client per step, so no server is skipped as "failed moments ago".
        let locks = redlock_client(&[&servers[0], &servers[1], &servers[2]]);
        for _ in 0..times {
            let g = locks.try_lock("fenced").unwrap().expect("free");
            tokens.push(g.fencing_token());
            assert_eq!(g.release().unwrap(), ReleaseOutcome::Released);
        }
        // A quorum's release returns once a majority has answered; the last live server's
        // can land a moment later. Killed before it lands, that server would keep the lock
        // in its append-only file, and the next step's majority would find it held.
        assert!(wait_until(Duration::from_secs(2), || servers
            .iter()
            .filter(|s| s.pid().is_some())
            .all(|s| !holds(s, "fenced"))));
    };
    take(&servers, 2);
    servers[0].kill();
    take(&servers, 3);
    servers[0].restart();
    servers[1].kill();
    take(&servers, 1);
    servers[1].restart();
    servers[2].kill();
    take(&servers, 1);
    assert!(
        tokens.windows(2).all(|w| w[0] < w[1]),
        "tokens must strictly increase: {tokens:?}"
    );
    let counter = |s: &RedisServer| -> u64 {
        redis::cmd("GET")
            .arg("lock:{fenced}:fence")
            .query(&mut s.connection())
            .unwrap()
    };
    assert_eq!(counter(&servers[0]), *tokens.last().unwrap());
    assert_eq!(counter(&servers[1]), *tokens.last().unwrap(), "caught up");
}

#[test]
fn redlock_builder_rejects_bad_server_lists() {
    let none: [&str; 0] = [];
    let err = LockClient::redlock_builder(none).build().unwrap_err();
    assert!(
        matches!(err, Error::InvalidInput { what: "urls", .. }),
        "{err}"
    );
    let err =
        LockClient::redlock_builder(["redis://:pw@127.0.0.1:7000/", "redis://127.0.0.1:7000/"])
            .build()
            .unwrap_err();
    assert!(err.to_string().contains("twice"), "{err}");
    assert!(!err.to_string().contains("pw@"), "{err}");
}

/// One server listed twice would cast two votes: under another name that resolves to it
/// (`localhost` and `127.0.0.1`), in another database (`/0` and `/1`), or through the same Unix
/// socket. Refused at build, with a message naming both URLs; distinct servers are fine.
#[test]
fn a_server_listed_twice_under_another_name_or_database_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("redis.sock");
    let [a, b, c] = [
        RedisServer::start_with(&["--unixsocket", socket.to_str().unwrap()]),
        RedisServer::start(),
        RedisServer::start(),
    ];
    let (pa, pb) = (a.port(), b.port());
    let unix = format!("redis+unix://{}", socket.display());
    for (urls, first, second) in [
        (
            [
                format!("redis://localhost:{pa}/"),
                b.url(),
                format!("redis://127.0.0.1:{pa}/"),
            ],
            format!("redis://localhost:{pa}/"),
            format!("redis://127.0.0.1:{pa}/"),
        ),
        (
            [
                format!("redis://127.0.0.1:{pb}/0"),
                format!("redis://:pw@127.0.0.1:{pb}/1"),
                c.url(),
            ],
            format!("redis://127.0.0.1:{pb}/0"),
            format!("redis://:***@127.0.0.1:{pb}/1"),
        ),
        (
            [format!("{unix}?db=2"), b.url(), format!("{unix}?db=3")],
            format!("{unix}?db=2"),
            format!("{unix}?db=3"),
        ),
    ] {
        let err = LockClient::redlock_builder(&urls).build().unwrap_err();
        let text = err.to_string();
        assert!(
            matches!(err, Error::InvalidInput { what: "urls", .. }),
            "{urls:?}: {err:?}"
        );
        assert!(
            text.contains(&format!("{first} and {second} are the same server"))
                && text.contains("twice"),
            "{urls:?}: {text}"
        );
        assert!(!text.contains("pw@"), "{text}");
    }
    // Three distinct servers, one of them named `localhost`, one through its socket.
    let locks = LockClient::redlock_builder([format!("redis://localhost:{pb}/"), c.url(), unix])
        .connect_timeout(Duration::from_millis(300))
        .io_timeout(Duration::from_millis(300))
        .build()
        .unwrap();
    let guard = locks.try_lock("distinct").unwrap().expect("free");
    assert_eq!(guard.release().unwrap(), ReleaseOutcome::Released);
}

/// The attribute macro works unchanged on a Redlock client: the body runs under a lock held on
/// every server, and the lock is released afterwards.
#[redis_lock::distributed_lock(key = "report:{day}", client = locks, ttl = 10)]
fn locked_report(locks: &LockClient, day: u32, servers: &[&RedisServer]) -> Result<usize, Error> {
    Ok(servers
        .iter()
        .filter(|s| holds(s, &format!("report:{day}")))
        .count())
}

#[test]
fn the_macro_works_on_a_redlock_client() {
    let [a, b, c] = three();
    let locks = redlock_client(&[&a, &b, &c]);
    // The acquisition returns once a majority has it; the third server may answer later.
    let held = locked_report(&locks, 7, &[&a, &b, &c]).unwrap();
    assert!(held >= 2, "held on {held} of 3 servers");
    assert!(wait_until(Duration::from_secs(2), || !holds(
        &a, "report:7"
    ) && !holds(
        &b, "report:7"
    ) && !holds(
        &c, "report:7"
    )));
}

/// A release can overtake a slow server's attempt (each goes out on its own thread and
/// connection): the attempt then lands on a released lock. The late answer releases it there,
/// instead of leaving a lock nobody holds until its TTL.
#[test]
fn an_attempt_that_lands_after_the_release_is_undone() {
    let [a, b, c] = three();
    let proxy = TcpProxy::start(c.port()).unwrap();
    let locks = LockClient::redlock_builder([a.url(), b.url(), proxy.url()])
        .connect_timeout(Duration::from_secs(2))
        .io_timeout(Duration::from_secs(2))
        .build()
        .unwrap();
    drop(locks.lock("warm").unwrap());
    for round in 0..3 {
        // The attempt to the third server is held up in the proxy; the release is not.
        proxy.set_latency(Duration::from_millis(300));
        let guard = locks
            .options("overtaken")
            .ttl(Duration::from_secs(10))
            .acquire()
            .unwrap();
        proxy.set_latency(Duration::ZERO);
        let fence = guard.fencing_token();
        assert_eq!(guard.release().unwrap(), ReleaseOutcome::Released);
        // The held-up attempt runs on the third server (its fencing counter moves)...
        assert!(wait_until(Duration::from_secs(3), || {
            redis::cmd("GET")
                .arg("lock:{overtaken}:fence")
                .query::<Option<u64>>(&mut c.connection())
                .unwrap()
                .is_some_and(|f| f >= fence)
        }));
        // ...and without the undo the third server keeps the lock for its whole 10 s TTL.
        assert!(
            wait_until(Duration::from_secs(3), || !holds(&c, "overtaken")),
            "round {round}: the third server still holds a released lock"
        );
        assert!(!holds(&a, "overtaken") && !holds(&b, "overtaken"));
    }
}

/// A client dropped while its last acquisition's attempt is still in flight on a slow server
/// finishes that late work first: the attempt's answer releases the lock there (the release
/// skipped that server). Otherwise the next client, with another server down, found the lock
/// busy on one of the two servers up, right after the release returned `Released`.
#[test]
fn a_dropped_client_finishes_the_release_of_an_attempt_still_in_flight() {
    let [mut a, b, c] = three();
    let proxy = TcpProxy::start(c.port()).unwrap();
    let urls = [a.url(), b.url(), proxy.url()];
    let build = || {
        LockClient::redlock_builder(urls.iter().cloned())
            .connect_timeout(Duration::from_secs(2))
            .io_timeout(Duration::from_secs(2))
            .build()
            .unwrap()
    };
    let locks = build();
    drop(locks.lock("handed").unwrap());
    assert!(wait_until(Duration::from_secs(3), || !holds(&c, "handed")));
    // The attempt to the third server is held up in the proxy (each way); the release skips it.
    proxy.set_latency(Duration::from_millis(300));
    let guard = locks
        .options("handed")
        .ttl(Duration::from_secs(10))
        .acquire()
        .unwrap();
    assert_eq!(guard.release().unwrap(), ReleaseOutcome::Released);
    let dropped = Instant::now();
    drop(locks);
    let took = dropped.elapsed();
    assert!(took < Duration::from_secs(5), "the drop waited {took:?}");
    assert!(
        !holds(&c, "handed"),
        "released there before the drop returned"
    );
    a.kill();
    let next = build();
    let guard = next
        .try_lock("handed")
        .unwrap()
        .expect("free on both servers that are up");
    assert_eq!(guard.release().unwrap(), ReleaseOutcome::Released);
    proxy.set_latency(Duration::ZERO);
}

/// Fair mode would need one arrival order across a majority; each server keeps its own queue,
/// so it is refused with a clear error instead of silently waiting unfairly.
#[test]
fn fair_waiting_is_refused_under_redlock() {
    let [a, b, c] = three();
    let locks = redlock_client(&[&a, &b, &c]);
    let err = locks
        .options("fair")
        .retry(redis_lock::RetryStrategy::fair())
        .try_acquire()
        .unwrap_err();
    assert!(matches!(err, Error::InvalidInput { .. }), "{err:?}");
    assert!(err.to_string().contains("Redlock"), "{err}");
    assert!(
        ![&a, &b, &c].iter().any(|s| holds(s, "fair")),
        "nothing taken"
    );
}

/// A busy error under Redlock names the holder a majority of the servers reported in their
/// busy answers, with the TTL `inspect` reports (how long a majority still holds it), at no request
/// beyond the attempt's one per server.
#[test]
fn a_busy_error_names_the_majoritys_holder_at_no_extra_request() {
    let [a, b, c] = three();
    let locks = redlock_client(&[&a, &b, &c]);
    let _held = locks
        .options("report")
        .ttl(Duration::from_secs(30))
        .metadata("nightly")
        .acquire()
        .unwrap();
    // Acquired once a majority has it: wait for the third server too, so that every
    // attempt below finds it busy everywhere (and leaves nothing to undo).
    assert!(wait_until(Duration::from_secs(5), || {
        [&a, &b, &c].iter().all(|s| holds(s, "report"))
    }));
    let zero = redis_lock::LockOptions::new().wait(Duration::ZERO);
    let before = shown(&locks.inspect("report").unwrap().unwrap());
    let (x, y) = (redlock_client(&[&a, &b, &c]), redlock_client(&[&a, &b, &c]));
    let (tried, none) = requests(&x, || x.try_acquire_with("report", &zero).unwrap());
    assert!(none.is_none());
    let (erred, err) = requests(&y, || {
        y.acquire_with("report", &zero).map(drop).unwrap_err()
    });
    let after = shown(&locks.inspect("report").unwrap().unwrap());
    assert_names_holder(&err, &before, &after);
    assert_eq!(err.holder().unwrap().metadata.as_deref(), Some("nightly"));
    assert_eq!((tried, erred), (3, 3));
}

/// A waiter registers on every server that finds the lock busy; when its budget runs out it
/// leaves all of them, so no release grants the lock to a waiter that is gone.
#[test]
fn a_waiter_that_gives_up_leaves_every_server() {
    let [a, b, c] = three();
    // Reply timeouts well above what a loaded machine takes: an attempt whose reply times out
    // counts as failed on that server but may still register there later, which leaves a
    // registration behind until it lapses (harmless, and not what this test is about).
    let client = || {
        LockClient::redlock_builder([a.url(), b.url(), c.url()])
            .io_timeout(Duration::from_secs(5))
            .build()
            .unwrap()
    };
    let (holder, waiter) = (client(), client());
    let guard = holder
        .options("leave")
        .ttl(Duration::from_secs(30))
        .acquire()
        .unwrap();
    // Acquired once a majority has it: on a loaded machine the third server's attempt can
    // still be on its way, and a waiter asking first would find the lock free there (and
    // undo its attempt there rather than register).
    assert!(wait_until(Duration::from_secs(5), || {
        [&a, &b, &c].iter().all(|s| holds(s, "leave"))
    }));
    let registered = |s: &RedisServer| -> usize {
        redis::cmd("ZCARD")
            .arg("lock:{leave}:waiters")
            .query(&mut s.connection())
            .unwrap()
    };
    let w = std::thread::spawn(move || waiter.try_lock_for("leave", Duration::from_millis(3000)));
    // Registered everywhere while it waits...
    assert!(wait_until(Duration::from_secs(10), || {
        [&a, &b, &c].iter().all(|s| registered(s) == 1)
    }));
    assert!(w.join().unwrap().unwrap().is_none(), "busy to the end");
    // ...and nowhere once it gave up: leaving waits for every server, so that a release
    // right after cannot grant the lock to a waiter that is gone.
    assert_eq!([&a, &b, &c].map(registered), [0, 0, 0]);
    // So the release frees the lock instead of granting it to nobody. It returns once a
    // majority released; the third server's release may still be on its way.
    assert_eq!(guard.release().unwrap(), ReleaseOutcome::Released);
    assert!(wait_until(Duration::from_secs(2), || {
        ![&a, &b, &c].iter().any(|s| holds(s, "leave"))
    }));
}

/// `list` scans every server and inspects each lock found by quorum, so a lock is listed even
/// when the first server is down.
#[test]
fn list_finds_the_majority_locks_with_a_server_down() {
    let [mut a, b, c] = three();
    let locks = redlock_client(&[&a, &b, &c]);
    let report = locks
        .options("report")
        .metadata("nightly")
        .acquire()
        .unwrap();
    let _other = locks.lock("other").unwrap();
    let names = |list: Vec<redis_lock::LockInfo>| -> Vec<String> {
        list.into_iter().map(|i| i.key).collect()
    };
    assert_eq!(names(locks.list("*").unwrap()), ["other", "report"]);
    a.kill();
    let listed = locks.list("rep*").unwrap();
    assert_eq!(names(listed.clone()), ["report"]);
    assert_eq!(listed[0].fencing_token, report.fencing_token());
    assert_eq!(listed[0].metadata.as_deref(), Some("nightly"));
}

/// The servers are asked at once, and a call returns once a majority has answered: one slow
/// server (200 ms each way, behind a proxy) does not slow down acquire, renew or release
/// while the other two are fast. It still gets every request (the lock ends up there too,
/// and is released there too).
#[test]
fn a_slow_server_does_not_slow_down_a_fast_majority() {
    let [a, b, c] = three();
    let proxy = TcpProxy::start(c.port()).unwrap();
    let urls = [a.url(), b.url(), proxy.url()];
    let build = || {
        LockClient::redlock_builder(urls.iter().cloned())
            .connect_timeout(Duration::from_secs(2))
            .io_timeout(Duration::from_secs(2))
            .build()
            .unwrap()
    };
    let locks = build();
    // Connections (and the script cache) warmed up before the proxy turns slow.
    drop(locks.lock("warm").unwrap());
    proxy.set_latency(Duration::from_millis(200));
    let mut fences = Vec::new();
    for round in 0..5 {
        let started = Instant::now();
        let guard = locks
            .options("slow-one")
            .ttl(Duration::from_secs(5))
            .acquire()
            .unwrap();
        let acquired = started.elapsed();
        guard.extend(Duration::from_secs(5)).unwrap();
        let extended = started.elapsed() - acquired;
        fences.push(guard.fencing_token());
        let released_at = Instant::now();
        assert_eq!(guard.release().unwrap(), ReleaseOutcome::Released);
        let released = released_at.elapsed();
        // A round trip through the proxy alone is 400 ms.
        for (what, took) in [
            ("acquire", acquired),
            ("extend", extended),
            ("release", released),
        ] {
            assert!(
                took < Duration::from_millis(300),
                "round {round}: {what} took {took:?}: it waited for the slow server"
            );
        }
        // The slow server got the release too, eventually.
        assert!(wait_until(Duration::from_secs(5), || !holds(
            &c, "slow-one"
        )));
    }
    assert!(fences.windows(2).all(|w| w[0] < w[1]), "{fences:?}");
    // A busy lock: the fast majority says busy, but a not-acquired attempt waits for every
    // answer (its undo must follow each attempt), so it takes the slow round trip.
    let holder = locks.lock("slow-two").unwrap();
    let other = build();
    let started = Instant::now();
    assert!(other.try_lock("slow-two").unwrap().is_none());
    assert!(
        started.elapsed() >= Duration::from_millis(350),
        "{:?}",
        started.elapsed()
    );
    drop(holder);
}

/// The Redlock failover run of the benchmark, bounded: 4 threads contend while one of three
/// servers is killed and later restarted empty; acquisitions go on throughout and never
/// overlap.
#[test]
fn contention_continues_while_a_server_is_killed_and_restarted() {
    let [a, b, mut c] = three();
    let locks = redlock_client(&[&a, &b, &c]);
    let opts = redis_lock::LockOptions::new()
        .ttl(Duration::from_secs(2))
        .wait(Duration::from_secs(5));
    let run = Contention::start(&locks, "under-kill", &opts, 4);
    assert!(
        run.wait_for_more(30, Duration::from_secs(20)),
        "no acquisitions before"
    );
    c.kill();
    assert!(
        run.wait_for_more(30, Duration::from_secs(20)),
        "acquisitions stopped with one server down"
    );
    c.restart();
    assert!(
        run.wait_for_more(30, Duration::from_secs(20)),
        "acquisitions stopped after the restart"
    );
    let counts = run.finish();
    assert_eq!(counts.violations.load(Ordering::SeqCst), 0, "{counts:?}");
}

/// The direct path (the calling thread asks every server) must cost the same requests as the
/// lanes did, also when a server forgot its scripts: `NOSCRIPT` is handed to a lane that loads
/// the script, and the cache's round trips are not counted.
#[test]
fn a_server_that_forgot_its_scripts_is_served_and_counted_as_before() {
    let [a, b, c] = three();
    // Counts requests exactly: without loss notification's check of a lock held 2 ms (notify.rs).
    let locks = LockClient::redlock_builder([&a, &b, &c].iter().map(|s| s.url()))
        .connect_timeout(Duration::from_millis(300))
        .io_timeout(Duration::from_millis(300))
        .loss_notification(false)
        .build()
        .unwrap();
    let on_all = || holds(&a, "flush") && holds(&b, "flush") && holds(&c, "flush");
    let on_none = || !holds(&a, "flush") && !holds(&b, "flush") && !holds(&c, "flush");
    for round in 0..3 {
        if round == 1 {
            redis::cmd("SCRIPT")
                .arg("FLUSH")
                .query::<()>(&mut b.connection())
                .unwrap();
        }
        let before = locks.request_count();
        let guard = locks.try_lock("flush").unwrap().expect("free");
        assert!(wait_until(Duration::from_secs(2), on_all), "round {round}");
        assert_eq!(guard.release().unwrap(), ReleaseOutcome::Released);
        assert!(wait_until(Duration::from_secs(2), on_none), "round {round}");
        // Three attempts and three releases, whichever thread sent them.
        assert!(
            wait_until(Duration::from_secs(2), || locks.request_count() - before
                == 6),
            "round {round}: {} requests",
            locks.request_count() - before
        );
    }
}

/// A pooled connection the server closed while it was idle fails on the direct path like on
/// the lanes: that server counts as failed, the majority decides, and the server is used
/// again once it was skipped for a while.
#[test]
fn an_idle_connection_the_server_closed_is_a_failed_server_not_a_failed_call() {
    let [a, b, c] = three();
    let locks = redlock_client(&[&a, &b, &c]);
    let on_all = || holds(&a, "killed") && holds(&b, "killed") && holds(&c, "killed");
    let guard = locks.try_lock("killed").unwrap().expect("free");
    assert!(wait_until(Duration::from_secs(2), on_all));
    assert_eq!(guard.release().unwrap(), ReleaseOutcome::Released);
    // A release returns once a majority released: wait for all three, or the attempt below
    // (which loses `a`) can find the third server's copy still there and no majority free
    // (failed once on Valkey 8.1 under CI).
    assert!(wait_until(Duration::from_secs(2), || {
        !holds(&a, "killed") && !holds(&b, "killed") && !holds(&c, "killed")
    }));
    let killed: i64 = redis::cmd("CLIENT")
        .arg("KILL")
        .arg("TYPE")
        .arg("normal")
        .arg("SKIPME")
        .arg("yes")
        .query(&mut a.connection())
        .unwrap();
    assert!(killed > 0, "no idle connection of the client to kill");
    let started = Instant::now();
    let guard = locks.try_lock("killed").unwrap().expect("free");
    assert!(
        started.elapsed() < Duration::from_millis(300),
        "{:?}",
        started.elapsed()
    );
    assert!(holds(&b, "killed") && holds(&c, "killed"));
    assert_eq!(guard.release().unwrap(), ReleaseOutcome::Released);
    // Skipped for a while after the failure, then asked again on a new connection.
    assert!(wait_until(Duration::from_secs(3), || {
        let Some(g) = locks.try_lock("killed").unwrap() else {
            return false;
        };
        let all = holds(&a, "killed");
        g.release().unwrap();
        all
    }));
}

/// A TTL no longer than Redlock's clock-drift allowance (1 % + 2 ms) can never be acquired in
/// time: a free lock looked busy, and `acquire` with no wait budget never returned. Refused
/// before anything is sent, for an acquisition, a multi-lock and an extension; 3 ms works.
#[test]
fn a_ttl_inside_the_drift_allowance_is_refused() {
    let servers = three();
    let locks = redlock_client(&servers.iter().collect::<Vec<_>>());
    for ms in [1, 2] {
        let ttl = Duration::from_millis(ms);
        let sent = locks.request_count();
        let err = locks.options("tiny").ttl(ttl).acquire().unwrap_err();
        assert!(
            matches!(err, Error::InvalidInput { what: "ttl", .. }),
            "{ms} ms: {err:?}"
        );
        let opts = redis_lock::LockOptions::new().ttl(ttl);
        assert!(matches!(
            locks.try_acquire_all_with(["a", "b"], &opts),
            Err(Error::InvalidInput { what: "ttl", .. })
        ));
        assert_eq!(locks.request_count(), sent, "nothing sent");
    }
    let guard = locks.lock("held").unwrap();
    assert!(matches!(
        guard.extend(Duration::from_millis(2)),
        Err(Error::InvalidInput { what: "ttl", .. })
    ));
    guard.ensure_held().unwrap();
    assert_eq!(guard.release().unwrap(), ReleaseOutcome::Released);
    // The smallest TTL that can be in time is taken (on loopback), with no wait budget.
    let quick = locks
        .options("tiny")
        .ttl(Duration::from_millis(3))
        .watchdog(false)
        .wait(Duration::ZERO)
        .try_acquire();
    assert!(quick.is_ok(), "{quick:?}");
}
