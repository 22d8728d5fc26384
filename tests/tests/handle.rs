//! Lease handles against a real redis-server: a guard given up to a handle stays held with
//! no watchdog, a resumed guard extends and releases, the text and serde forms read back,
//! handles of permits, read shares and write locks resume as what they hold (also on a Cluster
//! and through Sentinel), and handles for another namespace, altered or malformed ones are
//! refused with Redis untouched.

use std::time::{Duration, Instant};

use redis_lock::{
    Error, LeaseHandle, LockClient, LockMode, LockOptions, LostReason, ReleaseOutcome,
};
use redis_lock_tests::holder::Holder;
use redis_lock_tests::{RedisServer, client, stored_token, wait_until, zcard};

fn dump(server: &RedisServer, name: &str) -> (Vec<u8>, i64) {
    let mut con = server.connection();
    let key = format!("lock:{{{name}}}");
    let bytes: Vec<u8> = redis::cmd("DUMP").arg(&key).query(&mut con).unwrap();
    let ttl: i64 = redis::cmd("PTTL").arg(&key).query(&mut con).unwrap();
    (bytes, ttl)
}

#[test]
fn into_handle_keeps_the_lock_held_and_a_resumed_guard_extends_and_releases_it() {
    let server = RedisServer::start();
    // Without loss notification: its check 2 ms into the hold would be counted below.
    let locks = redis_lock_tests::client_without_notification(&server.url());
    let guard = locks
        .options("job")
        .ttl(Duration::from_millis(600))
        .acquire()
        .unwrap();
    let fence = guard.fencing_token();
    let before = locks.request_count();
    let handle = guard.into_handle();
    assert_eq!(locks.request_count(), before, "nothing sent by into_handle");
    assert_eq!(
        (handle.name(), handle.namespace(), handle.fencing_token()),
        ("job", "lock:", fence)
    );
    assert_eq!(handle.ttl(), Duration::from_millis(600));
    // No watchdog any more: the lock is not renewed, but still held.
    assert!(locks.inspect("job").unwrap().is_some());
    let before = locks.request_count();
    std::thread::sleep(Duration::from_millis(300)); // past the first renewal (ttl / 3)
    assert_eq!(locks.request_count(), before, "the watchdog stopped");

    let resumed = locks
        .resume(&handle.to_string_secret().parse().unwrap())
        .unwrap();
    assert_eq!(resumed.fencing_token(), fence);
    resumed.extend(Duration::from_secs(30)).unwrap();
    assert!(resumed.remaining_ttl().unwrap().unwrap() > Duration::from_secs(20));
    assert_eq!(resumed.release().unwrap(), ReleaseOutcome::Released);
    assert!(locks.inspect("job").unwrap().is_none());
    // Spent: resumed once already (and the lock is gone).
    let err = locks.resume(&handle).unwrap_err();
    assert!(matches!(err, Error::HandleSpent { .. }), "{err:?}");
}

/// A handle given up by `into_handle` is resumed once across processes: two processes resume
/// it at the same moment while a third party waits for the lock (registered, so the lock is a
/// hash; or polling with `try_lock`, so it stays the native string). Exactly one resume
/// succeeds, the other is `HandleSpent`; the lock is then under the winner's own token (not
/// the handle's), the winner holds it until it releases, and only then does the third party
/// get it, with a higher fencing token.
#[test]
fn a_handle_given_up_is_resumed_once_across_processes() {
    let server = RedisServer::start();
    let url = server.url();
    let bin = env!("CARGO_BIN_EXE_lock-holder");
    let locks = client(&server);
    let mut redis = server.connection();
    for (round, waits) in [(0, true), (1, false), (2, true), (3, false)] {
        let name = format!("once-{round}");
        let guard = locks
            .options(&name)
            .ttl(Duration::from_secs(5))
            .acquire()
            .unwrap();
        let (fence, token) = (guard.fencing_token(), guard.token().to_owned());
        let handle = guard.into_handle();
        let text = handle.to_string_secret();
        // The third party: waits registered, or polls without registering.
        let third = {
            let (locks, name) = (client(&server), name.clone());
            std::thread::spawn(move || {
                let deadline = Instant::now() + Duration::from_secs(20);
                let guard = if waits {
                    locks
                        .options(&name)
                        .wait(Duration::from_secs(20))
                        .acquire()
                        .unwrap()
                } else {
                    loop {
                        assert!(Instant::now() < deadline, "the third party never got it");
                        if let Some(g) = locks.try_lock(&name).unwrap() {
                            break g;
                        }
                        std::thread::sleep(Duration::from_millis(2));
                    }
                };
                (Instant::now(), guard.fencing_token())
            })
        };
        if waits {
            let waiters = format!("lock:{{{name}}}:waiters");
            assert!(wait_until(Duration::from_secs(5), || zcard(
                &server, &waiters
            ) == 1));
        }
        let mut a = Holder::spawn(bin, &["resume", &url, &text]);
        let mut b = Holder::spawn(bin, &["resume", &url, &text]);
        let ra = a.expect("RESUME", Duration::from_secs(10)).unwrap();
        let rb = b.expect("RESUME", Duration::from_secs(10)).unwrap();
        let ok = [&ra, &rb]
            .iter()
            .filter(|r| r.starts_with("RESUME ok"))
            .count();
        assert_eq!(
            ok, 1,
            "round {round}: exactly one resume succeeds: {ra} / {rb}"
        );
        let (mut winner, lost) = if ra.starts_with("RESUME ok") {
            (a, rb)
        } else {
            (b, ra)
        };
        assert!(lost.contains("resumed already"), "{lost}");
        winner.send("check");
        assert_eq!(
            winner.expect("", Duration::from_secs(5)).as_deref(),
            Some("HELD")
        );
        let now = stored_token(&mut redis, &format!("lock:{{{name}}}"));
        assert!(
            now.is_some_and(|t| t != token),
            "moved to the winner's own token"
        );
        // The third party is kept out until the winner releases.
        std::thread::sleep(Duration::from_millis(100));
        assert!(
            !third.is_finished(),
            "round {round}: the third party got in"
        );
        let released_at = Instant::now();
        winner.send("release");
        assert_eq!(
            winner.expect("RELEASED", Duration::from_secs(5)).as_deref(),
            Some("RELEASED Released")
        );
        let (got_at, third_fence) = third.join().unwrap();
        assert!(got_at > released_at, "round {round}: overlap");
        assert!(third_fence > fence, "round {round}: fencing tokens");
        assert!(matches!(
            locks.resume(&handle),
            Err(Error::HandleSpent { .. })
        ));
    }
}

/// A handle records the deployment it was made on: resumed by a client of another server,
/// or by a single-server client of one of a Redlock's servers (which holds a copy of the
/// lock), it is refused before anything is sent, and every server is left as it was; a client
/// of the same deployment (another URL for the same server) resumes it.
#[test]
fn a_handle_is_resumed_only_on_the_deployment_it_was_made_on() {
    let servers = [
        RedisServer::start(),
        RedisServer::start(),
        RedisServer::start(),
    ];
    let redlock = redis_lock_tests::redlock_client(&servers.iter().collect::<Vec<_>>());
    let single = client(&servers[0]);
    let elsewhere = client(&servers[1]);
    let quorum_handle = redlock.lock("q").unwrap().into_handle();
    let single_handle = single.lock("s").unwrap().into_handle();
    // A quorum's acquisition returns once a majority answered; the last server's lands after.
    assert!(wait_until(Duration::from_secs(5), || servers
        .iter()
        .all(|s| !dump(s, "q").0.is_empty())));
    let before: Vec<_> = servers
        .iter()
        .map(|s| (dump(s, "q"), dump(s, "s")))
        .collect();
    for (handle, on, what) in [
        (
            &quorum_handle,
            &single,
            "a Redlock's handle on one of its servers",
        ),
        (
            &single_handle,
            &elsewhere,
            "a server's handle on another server",
        ),
        (&single_handle, &redlock, "a server's handle on a Redlock"),
    ] {
        let sent = on.request_count();
        let err = on.resume(handle).unwrap_err();
        assert!(
            matches!(err, Error::InvalidInput { what: "handle", .. }),
            "{what}: {err:?}"
        );
        assert!(err.to_string().contains("was made on"), "{what}: {err}");
        assert_eq!(on.request_count(), sent, "{what}: nothing sent");
    }
    let after: Vec<_> = servers
        .iter()
        .map(|s| (dump(s, "q"), dump(s, "s")))
        .collect();
    assert_eq!(
        before.iter().map(|(q, s)| (&q.0, &s.0)).collect::<Vec<_>>(),
        after.iter().map(|(q, s)| (&q.0, &s.0)).collect::<Vec<_>>(),
        "every server as it was"
    );
    // The same server under another address (a name that resolves to it) is the same.
    let by_name = LockClient::open(&format!("redis://localhost:{}/", servers[0].port())).unwrap();
    let text = single_handle.to_string_secret();
    let resumed = by_name.resume(&text.parse().unwrap()).unwrap();
    assert_eq!(resumed.release().unwrap(), ReleaseOutcome::Released);
    let resumed = redlock.resume(&quorum_handle).unwrap();
    assert_eq!(resumed.release().unwrap(), ReleaseOutcome::Released);
}

#[test]
fn a_resumed_guard_has_its_own_watchdog() {
    let server = RedisServer::start();
    let locks = client(&server);
    let handle = locks
        .options("renewed")
        // Long enough that a loaded machine's stall of a few hundred milliseconds does not
        // let it run out between two renewals (a third of it apart).
        .ttl(Duration::from_millis(1000))
        .acquire()
        .unwrap()
        .into_handle();
    let other = client(&server);
    let resumed = other.resume(&handle).unwrap();
    // Three TTLs later it is still held: renewed by the resumed guard's watchdog.
    std::thread::sleep(Duration::from_millis(3000));
    resumed.ensure_held().unwrap();
    assert!(other.inspect("renewed").unwrap().is_some());
    assert_eq!(resumed.release().unwrap(), ReleaseOutcome::Released);
}

#[test]
fn the_first_guard_reports_the_lock_gone_once_the_handle_released_it() {
    let server = RedisServer::start();
    let locks = client(&server);
    let guard = locks.lock("shared").unwrap();
    let other = client(&server);
    other
        .resume_with(&guard.handle(), false)
        .unwrap()
        .release()
        .unwrap();
    let err = guard.remaining_ttl().unwrap_err();
    assert!(err.is_lost(), "{err:?}");
    assert!(guard.ensure_held().is_err());
}

#[test]
fn serde_round_trip_and_secrets_stay_out_of_debug_display_and_errors() {
    let server = RedisServer::start();
    let locks = client(&server);
    let guard = locks.lock("serde").unwrap();
    let token = guard.token().to_owned();
    let handle = guard.handle();
    let json = serde_json::to_string(&handle).unwrap();
    assert!(json.contains(&token), "serialization carries the token");
    let back: LeaseHandle = serde_json::from_str(&json).unwrap();
    assert_eq!(back, handle);
    for shown in [format!("{handle:?}"), handle.to_string()] {
        assert!(!shown.contains(&token), "{shown}");
    }
    // A deserialized handle is checked before use, like a parsed one.
    let altered = json.replace(&token, "not-a-token");
    let bad: LeaseHandle = serde_json::from_str(&altered).unwrap();
    let err = locks.resume(&bad).unwrap_err();
    assert!(
        matches!(err, Error::InvalidInput { what: "handle", .. }),
        "{err:?}"
    );
    assert!(!format!("{err:?} {err}").contains(&token));
    drop(guard);
}

#[test]
fn bad_handles_are_refused_and_redis_is_left_untouched() {
    let server = RedisServer::start();
    let locks = client(&server);
    let guard = locks.options("kept").watchdog(false).acquire().unwrap();
    let token = guard.token().to_owned();
    let text = guard.handle().to_string_secret();
    let before = dump(&server, "kept");

    // Another namespace: refused before anything is sent.
    let other_ns = LockClient::builder(&server.url())
        .namespace("other:")
        .build()
        .unwrap();
    let sent = other_ns.request_count();
    let err = other_ns.resume(&guard.handle()).unwrap_err();
    assert!(
        matches!(err, Error::InvalidInput { what: "handle", .. }),
        "{err:?}"
    );
    assert!(err.to_string().contains("namespace"), "{err}");
    assert_eq!(other_ns.request_count(), sent, "nothing sent");

    // Malformed text: refused by the parser.
    let without_expiry = text.rsplit_once(':').unwrap().0;
    for bad in ["", "redis-lock-handle:v1:", without_expiry] {
        let err = bad.parse::<LeaseHandle>().unwrap_err();
        assert!(
            matches!(err, Error::InvalidInput { what: "handle", .. }),
            "{err:?}"
        );
    }
    // Another (well-formed) owner token: not ours, only read.
    let forged: LeaseHandle = text.replace(&token, &"f".repeat(32)).parse().unwrap();
    let err = locks.resume(&forged).unwrap_err();
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
    assert!(!format!("{err:?} {err}").contains(&token));
    // The right token with another fencing token: altered.
    let fence = guard.fencing_token();
    let altered: LeaseHandle = text
        .replace(&format!(":{fence}:"), &format!(":{}:", fence + 1))
        .parse()
        .unwrap();
    let err = locks.resume(&altered).unwrap_err();
    assert!(
        matches!(err, Error::InvalidInput { what: "handle", .. }),
        "{err:?}"
    );

    let after = dump(&server, "kept");
    assert_eq!(after.0, before.0, "the lock is byte for byte the same");
    assert!(after.1 <= before.1, "its TTL was not touched");
    assert_eq!(guard.release().unwrap(), ReleaseOutcome::Released);
}

#[test]
fn a_reentrant_sibling_of_a_handed_off_guard_reports_it_handed_off() {
    let server = RedisServer::start();
    let locks = client(&server);
    let outer = locks.lock_reentrant("nested").unwrap();
    let inner = locks.lock_reentrant("nested").unwrap();
    let handle = inner.into_handle();
    assert!(!locks.is_held_by_current_thread("nested"));
    // The sibling guard no longer holds it: the handle does.
    assert!(matches!(
        outer.ensure_held(),
        Err(Error::Lost {
            reason: LostReason::Released,
            ..
        })
    ));
    let sent = locks.request_count();
    assert_eq!(outer.release().unwrap(), ReleaseOutcome::HandedOff);
    assert_eq!(locks.request_count(), sent, "nothing sent");
    assert!(
        locks.inspect("nested").unwrap().is_some(),
        "still held for the handle"
    );
    locks.resume(&handle).unwrap().release().unwrap();
    assert!(locks.inspect("nested").unwrap().is_none());
}

/// A permit, a read share and a write lock given up to handles are resumed as what they hold
/// (not as a mutex, which would find a key of another type and call it taken over): the
/// resumed guard renews, extends and releases that permit or share, the hold stays one hold
/// (no second permit or share), and the text form says the kind (a mutex's stays as it was
/// before handles had kinds).
#[test]
fn handles_of_permits_and_read_write_locks_resume_as_what_they_hold() {
    let server = RedisServer::start();
    let locks = client(&server);
    let other = client(&server);
    let semaphore = locks.semaphore("exports", 2).unwrap();
    let mutex = locks.lock("plain").unwrap().into_handle();
    assert_eq!(mutex.kind(), "mutex");
    assert!(!mutex.is_shared(), "given up: resumed once");
    assert!(mutex.to_string_secret().contains(":mutex:once:"));
    for kind in ["semaphore", "read", "write"] {
        let opts = LockOptions::new().ttl(Duration::from_millis(600));
        let guard = match kind {
            "semaphore" => semaphore.acquire_with(&opts).unwrap(),
            "read" => locks
                .acquire_with("report", &opts.mode(LockMode::Read))
                .unwrap(),
            _ => locks
                .acquire_with("rebuild", &opts.mode(LockMode::Write))
                .unwrap(),
        };
        let (name, fence) = (guard.key().to_owned(), guard.fencing_token());
        let handle = guard.into_handle();
        assert_eq!(handle.kind(), kind);
        let text = handle.to_string_secret();
        assert!(
            text.contains(&format!(":{kind}:once:")),
            "{kind}: the text says it"
        );
        let back: LeaseHandle = text.parse().unwrap();
        assert_eq!(back, handle, "{kind}");

        let resumed = other
            .resume(&back)
            .unwrap_or_else(|e| panic!("{kind}: {e}"));
        assert_eq!(
            (resumed.key(), resumed.fencing_token()),
            (name.as_str(), fence)
        );
        resumed.ensure_held().unwrap();
        // Resumed once: the lock moved to the resumed guard's own token.
        let again = locks.resume(&back).unwrap_err();
        assert!(
            matches!(again, Error::HandleSpent { .. }),
            "{kind}: {again:?}"
        );
        resumed.ensure_held().unwrap();
        resumed.extend(Duration::from_secs(30)).unwrap();
        assert!(resumed.remaining_ttl().unwrap().unwrap() > Duration::from_secs(20));
        // Still one hold, and it keeps the others out as it did.
        match kind {
            "semaphore" => assert_eq!(semaphore.available().unwrap(), 1, "one of two in use"),
            "read" => {
                assert_eq!(locks.inspect(&name).unwrap().unwrap().readers, 1);
                assert!(locks.try_write_lock(&name).unwrap().is_none());
            }
            _ => assert!(locks.try_read_lock(&name).unwrap().is_none()),
        }
        assert_eq!(resumed.release().unwrap(), ReleaseOutcome::Released);
        match kind {
            "semaphore" => assert_eq!(semaphore.available().unwrap(), 2, "given back"),
            _ => {
                let next = locks.try_write_lock(&name).unwrap();
                assert!(
                    next.is_some(),
                    "{kind}: free once the resumed guard released it"
                );
            }
        }
    }
    // An unknown kind is not a handle of this version.
    let text = mutex.to_string_secret() + ":upgrade";
    let err = text.parse::<LeaseHandle>().unwrap_err();
    assert!(
        matches!(err, Error::InvalidInput { what: "handle", .. }),
        "{err:?}"
    );
    drop(locks.resume(&mutex).unwrap());
}

/// Handles of permits and read-write locks are refused under Redlock (as those primitives
/// are), before anything is sent.
#[test]
fn permit_and_read_write_handles_are_refused_under_redlock() {
    let servers = [
        RedisServer::start(),
        RedisServer::start(),
        RedisServer::start(),
    ];
    let single = client(&servers[0]);
    let handles = [
        single
            .semaphore("exports", 2)
            .unwrap()
            .acquire()
            .unwrap()
            .into_handle(),
        single.read_lock("report").unwrap().into_handle(),
        single.write_lock("rebuild").unwrap().into_handle(),
    ];
    let redlock = redis_lock_tests::redlock_client(&servers.iter().collect::<Vec<_>>());
    for handle in &handles {
        let sent = redlock.request_count();
        let err = redlock.resume(handle).unwrap_err();
        assert!(
            matches!(err, Error::InvalidInput { .. }),
            "{}: {err:?}",
            handle.kind()
        );
        assert_eq!(redlock.request_count(), sent, "nothing sent");
        drop(single.resume(handle).unwrap());
    }
}

/// A handle of every kind made on one client is resumed by another on a Cluster (each name in
/// its own slot, on whichever master serves it) and through Sentinel: the resumed guard
/// extends and releases what the handle holds, and nothing is left held.
fn every_kind_resumes_elsewhere(locks: &LockClient, tag: &str) {
    for (i, kind) in ["mutex", "read", "write", "semaphore"]
        .into_iter()
        .enumerate()
    {
        let name = format!("{tag}-{i}");
        let guard = match kind {
            "mutex" => locks.lock(&name),
            "read" => locks.read_lock(&name),
            "write" => locks.write_lock(&name),
            _ => locks.semaphore(&name, 2).unwrap().acquire(),
        };
        let handle = guard.unwrap().into_handle();
        assert_eq!(handle.kind(), kind);
        let text = handle.to_string_secret();
        let other = locks.clone();
        // Another thread, as another process would: nothing of this thread's registry.
        let (outcome, ttl) = std::thread::spawn(move || {
            let resumed = other.resume(&text.parse().unwrap()).unwrap();
            resumed.extend(Duration::from_secs(20)).unwrap();
            let ttl = resumed.remaining_ttl().unwrap().unwrap();
            (resumed.release().unwrap(), ttl)
        })
        .join()
        .unwrap();
        assert_eq!(outcome, ReleaseOutcome::Released, "{kind}");
        assert!(ttl > Duration::from_secs(15), "{kind}: extended, {ttl:?}");
        if kind == "semaphore" {
            assert_eq!(locks.semaphore(&name, 2).unwrap().available().unwrap(), 2);
        } else {
            assert!(locks.inspect(&name).unwrap().is_none(), "{kind}");
        }
    }
}

#[test]
fn handles_of_every_kind_resume_on_a_cluster() {
    let cluster = redis_lock::testing::RedisCluster::start(3);
    every_kind_resumes_elsewhere(&redis_lock_tests::cluster_client(&cluster), "c");
}

#[test]
fn handles_of_every_kind_resume_through_sentinel() {
    let group = redis_lock::testing::SentinelGroup::start();
    every_kind_resumes_elsewhere(&redis_lock_tests::sentinel_client(&group), "s");
}
