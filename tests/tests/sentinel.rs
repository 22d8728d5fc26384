//! Sentinel: the client finds the master by name, and follows a failover.

use std::time::Duration;

use redis_lock::testing::{RedisServer, SentinelGroup};
use redis_lock::{Error, LockClient, ReleaseOutcome};
use redis_lock_tests::{Contention, holds, sentinel_client, wait_until};

#[test]
fn acquisitions_follow_a_failover_to_the_new_master() {
    let group = SentinelGroup::start();
    let locks = sentinel_client(&group);
    let old_master = group.master_port();

    // Acknowledged by the replica before it counts: this lock survives the failover.
    let kept = locks
        .options("kept")
        .ttl(Duration::from_secs(3))
        .replicas(1, Duration::from_secs(2))
        .acquire()
        .unwrap();
    assert!(holds(group.master(), "kept"));
    assert!(
        holds(group.replica(), "kept"),
        "WAIT made sure the replica has it"
    );
    // Busy connections of the old master in the pool, to be dropped after the failover.
    let before: Vec<_> = (0..4)
        .map(|i| locks.try_lock(&format!("before-{i}")).unwrap().unwrap())
        .collect();

    let new_master = group.failover();
    assert_ne!(new_master, old_master);

    // Within a few sentinel checks (every 100 ms) new acquisitions land on the new master.
    let mut n = 0;
    assert!(
        wait_until(Duration::from_secs(10), || {
            n += 1;
            let name = format!("after-{n}");
            match locks.try_lock(&name) {
                Ok(Some(_g)) => holds(group.master(), &name),
                _ => false,
            }
        }),
        "no acquisition reached the new master"
    );
    // ... and from then on all of them do.
    for i in 0..20 {
        let name = format!("settled-{i}");
        let g = locks.try_lock(&name).unwrap().expect("free");
        assert!(
            holds(group.master(), &name),
            "{name} went to the new master"
        );
        assert_eq!(group.master().port(), new_master);
        drop(g);
    }

    // The replicated lock is still held on the new master, and its holder still renews it.
    let other = sentinel_client(&group);
    assert!(
        other.try_lock("kept").unwrap().is_none(),
        "kept is still held"
    );
    assert!(wait_until(Duration::from_secs(5), || kept
        .remaining_ttl()
        .is_ok()));
    assert!(!kept.is_lost());
    assert_eq!(kept.release().unwrap(), ReleaseOutcome::Released);
    assert!(other.try_lock("kept").unwrap().is_some());
    drop(before);
}

#[test]
fn sentinel_builder_rejects_bad_settings() {
    let no_sentinels: [&str; 0] = [];
    let err = LockClient::sentinel_builder("m", no_sentinels)
        .build()
        .unwrap_err();
    assert!(
        matches!(
            err,
            Error::InvalidInput {
                what: "sentinels",
                ..
            }
        ),
        "{err}"
    );
    let err = LockClient::sentinel_builder("", ["redis://127.0.0.1:1/"])
        .build()
        .unwrap_err();
    assert!(
        matches!(
            err,
            Error::InvalidInput {
                what: "master_name",
                ..
            }
        ),
        "{err}"
    );
    let err = LockClient::builder("redis://127.0.0.1/")
        .master_auth(None, "secret")
        .build()
        .unwrap_err();
    assert!(
        matches!(
            err,
            Error::InvalidInput {
                what: "master_auth",
                ..
            }
        ),
        "{err}"
    );
    assert!(!format!("{err:?}").contains("secret"));
    let err = LockClient::sentinel_builder("m", ["redis://user:hunter2@[bad"])
        .build()
        .unwrap_err();
    assert!(!err.to_string().contains("hunter2"), "{err}");
}

#[test]
fn unreachable_sentinels_fail_fast_with_a_clear_error() {
    let gone = RedisServer::start();
    let url = gone.url();
    drop(gone);
    let locks = LockClient::sentinel_builder("nobody", [url])
        .connect_timeout(Duration::from_millis(300))
        .build()
        .unwrap();
    let started = std::time::Instant::now();
    let err = locks.try_lock("x").unwrap_err();
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );
    assert!(err.is_connection_error(), "{err}");
}

/// How a failover can lose a lock, and how replica acknowledgement prevents it: the replica
/// misses an unacknowledged acquisition (it is paused), the master dies, the sentinels promote
/// the replica, and a second client takes the lock the first one still holds. The first
/// holder is told at its next renewal. The acknowledged lock taken before is kept.
#[test]
fn failover_loses_an_unacknowledged_lock_and_keeps_an_acknowledged_one() {
    let mut group = SentinelGroup::start();
    let first = sentinel_client(&group);
    let ttl = Duration::from_secs(15);
    let acked = first
        .options("acked")
        .ttl(ttl)
        .replicas(1, Duration::from_secs(2))
        .acquire()
        .unwrap();
    group.pause_replica();
    let (tx, rx) = std::sync::mpsc::channel();
    let unacked = first
        .options("unacked")
        .ttl(ttl)
        .on_lost(move |e| {
            let _ = tx.send(e.reason);
        })
        .acquire()
        .unwrap();
    let old = group.kill_master();
    group.resume_replica();
    let new = group.wait_for_new_master(old);
    assert!(
        !holds(group.master(), "unacked"),
        "the replica never received it"
    );
    assert!(holds(group.master(), "acked"));

    let second = sentinel_client(&group);
    let stolen = second
        .try_lock("unacked")
        .unwrap()
        .expect("two holders: the unacknowledged lock was lost in the failover");
    assert!(
        second.try_lock("acked").unwrap().is_none(),
        "acknowledged lock kept"
    );
    let reason = rx
        .recv_timeout(Duration::from_secs(20))
        .expect("the first holder is told at its next renewal");
    // Taken over when the renewal comes after the second client's acquisition; deleted when
    // it comes between the promotion and that acquisition (the new master never had the key,
    // so it is gone while its TTL still runs).
    assert!(
        matches!(
            reason,
            redis_lock::LostReason::TakenOver | redis_lock::LostReason::Deleted
        ),
        "{reason:?}"
    );
    assert!(unacked.is_lost());
    assert!(!acked.is_lost());
    assert_eq!(acked.release().unwrap(), ReleaseOutcome::Released);
    assert_eq!(group.master_port(), new);
    drop(stolen);
}

/// The failover run of the benchmark, bounded: 4 threads contend (replica acknowledgement on)
/// while the master is failed over; acquisitions go on afterwards and never overlap.
#[test]
fn contention_continues_through_a_failover_without_overlap() {
    use std::sync::atomic::Ordering::SeqCst;
    let group = SentinelGroup::start();
    let locks = sentinel_client(&group);
    let opts = redis_lock::LockOptions::new()
        .ttl(Duration::from_secs(2))
        .wait(Duration::from_secs(5))
        .replicas(1, Duration::from_millis(500));
    let run = Contention::start(&locks, "under-failover", &opts, 4);
    assert!(
        run.wait_for_more(30, Duration::from_secs(20)),
        "no acquisitions before"
    );
    group.failover();
    // The old master is demoted later: a replica must come back for acknowledgements.
    assert!(
        run.wait_for_more(30, Duration::from_secs(60)),
        "acquisitions stopped after the failover"
    );
    let counts = run.finish();
    assert_eq!(counts.violations.load(SeqCst), 0, "{counts:?}");
}

/// A release that the dead master cannot take is sent again to the new master as soon as the
/// sentinels name it: the replicated lock does not stay there for its TTL (30 s), and a waiter
/// of another client gets it within seconds of the failover. Without the resend both wait
/// out the TTL.
#[test]
fn a_release_the_dead_master_missed_reaches_the_new_master() {
    let mut group = SentinelGroup::start();
    let holder = sentinel_client(&group);
    let ttl = Duration::from_secs(30);
    let take = |name: &str| {
        holder
            .options(name)
            .ttl(ttl)
            .replicas(1, Duration::from_secs(2))
            .acquire()
            .unwrap()
    };
    let alone = take("alone");
    let contended = take("contended");

    // Another client waits for "contended" (without replica acknowledgement: once the master
    // is killed the new one has no replica), retrying through the outage.
    let waiter = sentinel_client(&group);
    let got = std::sync::Arc::new(std::sync::Mutex::new(None));
    let thread = {
        let got = std::sync::Arc::clone(&got);
        std::thread::spawn(move || {
            let start = std::time::Instant::now();
            while start.elapsed() < Duration::from_secs(90) {
                match waiter
                    .options("contended")
                    .ttl(Duration::from_secs(5))
                    .wait(Duration::from_secs(60))
                    .acquire()
                {
                    Ok(guard) => {
                        *got.lock().unwrap() = Some(std::time::Instant::now());
                        drop(guard);
                        return;
                    }
                    Err(_) => std::thread::sleep(Duration::from_millis(50)),
                }
            }
        })
    };
    // The waiter is registered on the master (and so on the replica) before it dies.
    assert!(wait_until(Duration::from_secs(5), || {
        redis::cmd("ZCARD")
            .arg("lock:{contended}:waiters")
            .query::<i64>(&mut group.replica().connection())
            .is_ok_and(|n| n == 1)
    }));

    let killed_at = std::time::Instant::now();
    let old = group.kill_master();
    let alone_release = alone.release();
    let contended_release = contended.release();
    assert!(
        alone_release
            .as_ref()
            .is_err_and(Error::is_connection_error),
        "the dead master cannot answer: {alone_release:?}"
    );
    assert!(contended_release.is_err(), "{contended_release:?}");
    group.wait_for_new_master(old);
    let failed_over = std::time::Instant::now();

    assert!(
        wait_until(Duration::from_secs(5), || !holds(group.master(), "alone")),
        "the release reached the new master within 5 s of the failover"
    );
    assert!(
        wait_until(Duration::from_secs(5), || got.lock().unwrap().is_some()),
        "the waiter got the lock within 5 s of the failover"
    );
    let waited = got.lock().unwrap().unwrap() - killed_at;
    assert!(
        waited < failed_over - killed_at + Duration::from_secs(5) && waited < ttl / 2,
        "waited {waited:?}, failover took {:?}",
        failed_over - killed_at
    );
    thread.join().unwrap();
}

/// `SENTINEL FAILOVER` leaves the old master up and writable for seconds: a release sent there
/// after the promotion is answered "released" while the new master keeps the replicated lock.
/// A lock taken with replica acknowledgement is released with it too; unacknowledged, the
/// release is sent again once the sentinels name the new master, so the lock is gone there
/// long before its TTL (30 s).
#[test]
fn an_unacknowledged_release_is_sent_again_to_the_promoted_replica() {
    let group = SentinelGroup::start();
    let holder = sentinel_client(&group);
    let ttl = Duration::from_secs(30);
    let guard = holder
        .options("moved")
        .ttl(ttl)
        .replicas(1, Duration::from_secs(1))
        .acquire()
        .unwrap();
    let old = group.master_port();
    let replica = group.replica();
    assert!(holds(replica, "moved"));

    redis::cmd("SENTINEL")
        .arg("FAILOVER")
        .arg(SentinelGroup::MASTER_NAME)
        .query::<()>(&mut group.sentinels()[0].connection())
        .unwrap();
    // Promoted; the sentinels (and so the client) still name the old master for a while. (The
    // promotion kills the replica's normal clients: a connection may be reset, so ask anew.)
    let ask = |cmd: &redis::Cmd| -> Option<redis::Value> {
        let mut con = replica
            .client()
            .get_connection_with_timeout(Duration::from_secs(1))
            .ok()?;
        cmd.query(&mut con).ok()
    };
    assert!(wait_until(Duration::from_secs(20), || {
        matches!(ask(&redis::cmd("ROLE")), Some(redis::Value::Array(r))
            if r.first() == Some(&redis::Value::BulkString(b"master".to_vec())))
    }));
    assert_eq!(
        guard.release().unwrap(),
        ReleaseOutcome::Released,
        "the old master took it"
    );
    let new = group.wait_for_new_master(old);
    assert_eq!(new, replica.port());
    let exists = redis::cmd("EXISTS").arg("lock:{moved}").to_owned();
    assert!(
        wait_until(Duration::from_secs(5), || ask(&exists)
            == Some(redis::Value::Int(0))),
        "the release reached the new master within 5 s of the failover, not after the ttl"
    );
}
