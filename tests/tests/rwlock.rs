//! The read-write lock on real servers: readers overlap while a writer is exclusive, a waiting
//! writer is not starved, crashed readers' shares free within their TTL, renewal, loss and
//! release outcomes per share, downgrade and refused upgrade, fencing across reads and writes,
//! Cluster, the Redlock refusal, and bad input that leaves Redis untouched.

use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Barrier, Mutex};
use std::time::{Duration, Instant};

use redis_lock::testing::{RedisCluster, RedisServer};
use redis_lock::{Error, LockMode, LockOptions, LostReason, ReleaseOutcome, RetryStrategy};
use redis_lock_tests::holder::Holder;
use redis_lock_tests::{client, cluster_client, redlock_client, wait_until};

const HOLDER: &str = env!("CARGO_BIN_EXE_lock-holder");

fn ttl(ms: u64) -> LockOptions {
    LockOptions::new().ttl(Duration::from_millis(ms))
}

/// Every key of the server and its value, as `DUMP` sees it: to show a refused call changed
/// nothing.
fn snapshot(server: &RedisServer) -> Vec<(String, Vec<u8>)> {
    let mut con = server.connection();
    let mut keys: Vec<String> = redis::cmd("KEYS").arg("*").query(&mut con).unwrap();
    keys.sort();
    keys.into_iter()
        .map(|k| {
            let dump: Vec<u8> = redis::cmd("DUMP").arg(&k).query(&mut con).unwrap();
            (k, dump)
        })
        .collect()
}

/// Runs `f` on another thread (which holds nothing of this one's) and returns its result.
fn elsewhere<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
    std::thread::spawn(f).join().unwrap()
}

/// Current holders, counted in memory around each hold.
#[derive(Debug, Default)]
struct Holders {
    readers: AtomicU32,
    writers: AtomicU32,
    max_readers: AtomicU32,
    violations: AtomicU32,
}

#[test]
fn eight_readers_hold_at_once_and_a_writer_waits_for_all_of_them() {
    let server = RedisServer::start();
    let locks = client(&server);
    let all_in = Arc::new(Barrier::new(9));
    let leave = Arc::new(Barrier::new(9));
    let readers: Vec<_> = (0..8)
        .map(|_| {
            let locks = locks.clone();
            let (all_in, leave) = (Arc::clone(&all_in), Arc::clone(&leave));
            std::thread::spawn(move || {
                let share = locks
                    .try_read_lock_for("catalog", Duration::from_secs(10))
                    .unwrap()
                    .expect("readers share the lock");
                all_in.wait();
                leave.wait();
                share.release().unwrap()
            })
        })
        .collect();
    // Passing the barrier needs all 8 shares held at the same moment.
    all_in.wait();
    let info = locks.inspect("catalog").unwrap().expect("held");
    assert_eq!(info.mode, Some(LockMode::Read));
    assert_eq!(info.readers, 8, "{info:?}");
    assert!(
        locks.try_write_lock("catalog").unwrap().is_none(),
        "a writer is kept out while readers hold"
    );
    leave.wait();
    for r in readers {
        assert_eq!(r.join().unwrap(), ReleaseOutcome::Released);
    }
    let writer = locks
        .try_write_lock("catalog")
        .unwrap()
        .expect("free again");
    assert_eq!(
        locks.inspect("catalog").unwrap().unwrap().mode,
        Some(LockMode::Write)
    );
    assert_eq!(writer.release().unwrap(), ReleaseOutcome::Released);
    assert!(locks.inspect("catalog").unwrap().is_none(), "nothing left");
}

#[test]
fn readers_overlap_while_writers_are_exclusive() {
    let server = RedisServer::start();
    let locks = client(&server);
    let holders = Arc::new(Holders::default());
    // A counter that only stays exact if writers never overlap: read, pause, write.
    let counter = Arc::new(AtomicI64::new(0));
    let stop_at = Instant::now() + Duration::from_secs(20);
    const READS: u32 = 40;
    const WRITES: i64 = 15;
    let mut threads = Vec::new();
    for _ in 0..8 {
        let (locks, holders) = (locks.clone(), Arc::clone(&holders));
        threads.push(std::thread::spawn(move || {
            for _ in 0..READS {
                if Instant::now() > stop_at {
                    break;
                }
                let share = locks.read_lock("rw").unwrap();
                let now = holders.readers.fetch_add(1, Ordering::SeqCst) + 1;
                holders.max_readers.fetch_max(now, Ordering::SeqCst);
                if holders.writers.load(Ordering::SeqCst) != 0 {
                    holders.violations.fetch_add(1, Ordering::SeqCst);
                }
                std::thread::sleep(Duration::from_millis(3));
                holders.readers.fetch_sub(1, Ordering::SeqCst);
                assert_eq!(share.release().unwrap(), ReleaseOutcome::Released);
            }
        }));
    }
    let writes = Arc::new(AtomicU64::new(0));
    for _ in 0..2 {
        let (locks, holders) = (locks.clone(), Arc::clone(&holders));
        let (counter, writes) = (Arc::clone(&counter), Arc::clone(&writes));
        threads.push(std::thread::spawn(move || {
            for _ in 0..WRITES {
                if Instant::now() > stop_at {
                    break;
                }
                let writer = locks.write_lock("rw").unwrap();
                if holders.writers.fetch_add(1, Ordering::SeqCst) != 0
                    || holders.readers.load(Ordering::SeqCst) != 0
                {
                    holders.violations.fetch_add(1, Ordering::SeqCst);
                }
                let seen = counter.load(Ordering::SeqCst);
                std::thread::sleep(Duration::from_millis(2));
                counter.store(seen + 1, Ordering::SeqCst);
                writes.fetch_add(1, Ordering::SeqCst);
                holders.writers.fetch_sub(1, Ordering::SeqCst);
                assert_eq!(writer.release().unwrap(), ReleaseOutcome::Released);
            }
        }));
    }
    for t in threads {
        t.join().unwrap();
    }
    assert!(Instant::now() < stop_at, "the load finished in time");
    assert_eq!(holders.violations.load(Ordering::SeqCst), 0, "{holders:?}");
    assert_eq!(
        counter.load(Ordering::SeqCst),
        i64::try_from(writes.load(Ordering::SeqCst)).unwrap(),
        "no lost update"
    );
    assert_eq!(writes.load(Ordering::SeqCst), 2 * WRITES as u64);
    let max = holders.max_readers.load(Ordering::SeqCst);
    println!("max concurrent readers observed: {max} of 8");
    assert!(max > 1, "readers overlapped ({max})");
}

#[test]
fn a_waiting_writer_is_not_starved_by_a_stream_of_readers() {
    let server = RedisServer::start();
    let locks = client(&server);
    let stop = Arc::new(AtomicBool::new(false));
    let reads = Arc::new(AtomicU64::new(0));
    let deadline = Instant::now() + Duration::from_secs(20);
    // Six readers, each holding 30 ms and coming straight back: without writer preference,
    // some reader holds a share at every moment.
    let readers: Vec<_> = (0..6)
        .map(|_| {
            let (locks, stop, reads) = (locks.clone(), Arc::clone(&stop), Arc::clone(&reads));
            std::thread::spawn(move || {
                while !stop.load(Ordering::SeqCst) && Instant::now() < deadline {
                    let share = locks.read_lock("stream").unwrap();
                    reads.fetch_add(1, Ordering::SeqCst);
                    std::thread::sleep(Duration::from_millis(30));
                    drop(share);
                }
            })
        })
        .collect();
    assert!(wait_until(Duration::from_secs(5), || reads
        .load(Ordering::SeqCst)
        >= 12));
    // The bound: readers in when the writer arrives finish their 30 ms holds; the writer
    // then gets the lock. 1 s leaves room for a loaded machine.
    let bound = Duration::from_secs(1);
    let mut waits = Vec::new();
    for _ in 0..3 {
        let asked = Instant::now();
        let writer = locks
            .try_write_lock_for("stream", Duration::from_secs(10))
            .unwrap()
            .expect("the writer gets the lock");
        waits.push(asked.elapsed());
        assert_eq!(locks.inspect("stream").unwrap().unwrap().readers, 0);
        drop(writer);
        let before = reads.load(Ordering::SeqCst);
        assert!(
            wait_until(Duration::from_secs(5), || reads.load(Ordering::SeqCst)
                > before + 3),
            "readers come back after the writer"
        );
    }
    stop.store(true, Ordering::SeqCst);
    for r in readers {
        r.join().unwrap();
    }
    println!("writer waits under a stream of readers: {waits:?}");
    for w in &waits {
        assert!(*w < bound, "writer waited {w:?}, bound {bound:?}");
    }
}

#[test]
fn a_writers_release_wakes_every_waiting_reader_at_once() {
    let server = RedisServer::start();
    // Counts the waiting's own requests: without loss notification's (notify.rs), whose checks
    // of the four shares held together would add to them.
    let locks = redis_lock_tests::client_without_notification(&server.url());
    let writer = locks.write_lock("wake").unwrap();
    let entered = Arc::new(Mutex::new(Vec::new()));
    let together = Arc::new(Barrier::new(4));
    let readers: Vec<_> = (0..4)
        .map(|_| {
            let (locks, entered, together) =
                (locks.clone(), Arc::clone(&entered), Arc::clone(&together));
            std::thread::spawn(move || {
                // Notified waiting (the default): no polling.
                let share = locks
                    .try_read_lock_for("wake", Duration::from_secs(20))
                    .unwrap()
                    .expect("woken by the release");
                entered.lock().unwrap().push(Instant::now());
                together.wait(); // all four hold at once
                drop(share);
            })
        })
        .collect();
    assert!(wait_until(Duration::from_secs(5), || {
        locks.inspect("wake").unwrap().unwrap().waiters == 4
    }));
    let requests = locks.request_count();
    let released = Instant::now();
    assert_eq!(writer.release().unwrap(), ReleaseOutcome::Released);
    for r in readers {
        r.join().unwrap();
    }
    let entered = entered.lock().unwrap();
    let last = entered.iter().max().unwrap().duration_since(released);
    println!("4 readers in {last:?} after the writer's release");
    // The writer's TTL is the client's default, 30 s: only the release can have woken them.
    assert!(last < Duration::from_secs(2), "{last:?}");
    // Per reader at most: BLPOP reply, attempt, release (+ the writer's release).
    let sent = locks.request_count() - requests;
    assert!(sent <= 1 + 4 * 3, "no polling: {sent} requests");
}

#[test]
fn a_killed_readers_share_frees_within_its_ttl() {
    let server = RedisServer::start();
    let locks = client(&server);
    let mut reader = Holder::spawn(HOLDER, &["read", &server.url(), "crash", "800"]);
    reader.expect("ACQUIRED", Duration::from_secs(10)).unwrap();
    let mine = locks
        .acquire_with("crash", &ttl(800).mode(LockMode::Read))
        .expect("readers share");
    let other = locks.clone();
    assert!(elsewhere(move || other
        .try_write_lock("crash")
        .unwrap()
        .is_none()));
    reader.kill();
    let killed = Instant::now();
    drop(mine);
    // The live reader left; the dead one's share lapses within its TTL (800 ms from its last
    // renewal, at most 800 ms before the kill), and the waiting writer comes back for it.
    let writer = locks
        .try_write_lock_for("crash", Duration::from_secs(5))
        .unwrap()
        .expect("the dead reader's share lapsed");
    let waited = killed.elapsed();
    assert!(locks.inspect("crash").unwrap().unwrap().mode == Some(LockMode::Write));
    println!("writer in {waited:?} after the reader was killed (TTL 800 ms)");
    assert!(waited < Duration::from_millis(800 + 300), "{waited:?}");
    drop(writer);
}

#[test]
fn renewal_keeps_each_share_alive_and_never_touches_another() {
    let server = RedisServer::start();
    let locks = client(&server);
    let renewed = locks
        .acquire_with("renew", &ttl(300).mode(LockMode::Read))
        .unwrap();
    let other = locks.clone();
    let unrenewed = std::thread::spawn(move || {
        other
            .acquire_with("renew", &ttl(300).mode(LockMode::Read).watchdog(false))
            .unwrap()
    })
    .join()
    .unwrap();
    // Past both TTLs (the point of the test is time passing).
    std::thread::sleep(Duration::from_millis(900));
    assert!(!renewed.is_lost(), "the watchdog renewed its share");
    let left = renewed.remaining_ttl().unwrap().expect("an expiry");
    assert!(left <= Duration::from_millis(300), "{left:?}");
    assert!(matches!(unrenewed.remaining_ttl(), Err(Error::Lost { .. })));
    assert!(unrenewed.is_lost());
    assert_eq!(locks.inspect("renew").unwrap().unwrap().readers, 1);
    let other = locks.clone();
    assert!(elsewhere(move || other
        .try_write_lock("renew")
        .unwrap()
        .is_none()));
    assert_eq!(unrenewed.release().unwrap(), ReleaseOutcome::Late);
    // The late release touched nothing of the live share.
    assert!(!renewed.is_lost());
    assert_eq!(locks.inspect("renew").unwrap().unwrap().readers, 1);
    renewed.extend(Duration::from_secs(5)).unwrap();
    let left = renewed.remaining_ttl().unwrap().unwrap();
    assert!(left > Duration::from_secs(4), "{left:?}");
    assert_eq!(renewed.release().unwrap(), ReleaseOutcome::Released);
    assert!(locks.inspect("renew").unwrap().is_none());
}

#[test]
fn losses_are_reported_for_shares_and_writers() {
    let server = RedisServer::start();
    let locks = client(&server);
    let lost = Arc::new(Mutex::new(Vec::new()));
    let seen = Arc::clone(&lost);
    let share = locks
        .acquire_with(
            "lose",
            &ttl(300)
                .mode(LockMode::Read)
                .on_lost(move |e| seen.lock().unwrap().push(e.reason)),
        )
        .unwrap();
    assert!(locks.force_release("lose").unwrap().is_some());
    assert!(
        wait_until(Duration::from_secs(2), || share.is_lost()),
        "the watchdog noticed"
    );
    assert!(matches!(share.ensure_held(), Err(Error::Lost { .. })));
    assert_eq!(lost.lock().unwrap().len(), 1);
    drop(share);
    // A writer whose lock expired and was taken by readers: lost, taken over.
    let writer = locks
        .acquire_with("lose", &ttl(100).mode(LockMode::Write).watchdog(false))
        .unwrap();
    assert!(wait_until(Duration::from_secs(2), || locks
        .inspect("lose")
        .unwrap()
        .is_none()));
    let reader = locks;
    let share = std::thread::spawn(move || reader.read_lock("lose").unwrap())
        .join()
        .unwrap();
    assert!(matches!(
        writer.remaining_ttl(),
        Err(Error::Lost {
            reason: LostReason::TakenOver,
            ..
        })
    ));
    assert_eq!(writer.release().unwrap(), ReleaseOutcome::Lost);
    assert_eq!(share.release().unwrap(), ReleaseOutcome::Released);
}

#[test]
fn release_outcomes() {
    let server = RedisServer::start();
    let locks = client(&server);
    // Released, and StillHeld while a reentrant guard lives.
    let a = locks
        .acquire_with(
            "out",
            &LockOptions::new().mode(LockMode::Read).reentrant(true),
        )
        .unwrap();
    let b = locks
        .acquire_with(
            "out",
            &LockOptions::new().mode(LockMode::Read).reentrant(true),
        )
        .unwrap();
    assert_eq!(a.hold_count(), 2);
    assert_eq!(b.release().unwrap(), ReleaseOutcome::StillHeld);
    assert_eq!(a.release().unwrap(), ReleaseOutcome::Released);
    // Late: the share had expired.
    let late = locks
        .acquire_with("out", &ttl(50).mode(LockMode::Read).watchdog(false))
        .unwrap();
    assert!(wait_until(Duration::from_secs(2), || locks
        .inspect("out")
        .unwrap()
        .is_none()));
    assert_eq!(late.release().unwrap(), ReleaseOutcome::Late);
    // Lost: the share expired and a writer holds the lock now.
    let lost = locks
        .acquire_with("out", &ttl(50).mode(LockMode::Read).watchdog(false))
        .unwrap();
    let other = locks.clone();
    let writer = std::thread::spawn(move || {
        other
            .try_write_lock_for("out", Duration::from_secs(2))
            .unwrap()
            .unwrap()
    })
    .join()
    .unwrap();
    assert_eq!(lost.release().unwrap(), ReleaseOutcome::Lost);
    // A release with a cool-down keeps the lock, ownerless, that long.
    let cooled = Instant::now();
    assert_eq!(
        writer.release_after(Duration::from_millis(300)).unwrap(),
        ReleaseOutcome::Released
    );
    let info = locks.inspect("out").unwrap().expect("kept while cooling");
    assert!(!info.owned && info.cooling_until.is_some(), "{info:?}");
    let share = locks
        .try_read_lock_for("out", Duration::from_secs(2))
        .unwrap()
        .expect("free after the cool-down");
    assert!(cooled.elapsed() >= Duration::from_millis(300));
    drop(share);
}

#[test]
fn a_writer_may_downgrade_and_a_reader_may_not_upgrade() {
    let server = RedisServer::start();
    let locks = client(&server);
    let writer = locks.write_lock("grade").unwrap();
    let asked = Instant::now();
    let share = locks
        .read_lock("grade")
        .expect("downgrade: granted at once");
    assert!(asked.elapsed() < Duration::from_millis(500));
    assert!(share.fencing_token() > writer.fencing_token());
    let other = locks.clone();
    let try_read = move || {
        let other = other.clone();
        std::thread::spawn(move || other.try_read_lock("grade").unwrap().is_some())
            .join()
            .unwrap()
    };
    assert!(!try_read(), "still exclusive while the write lock is held");
    // Holding both, a read asks for the share it holds, not a second one: refused without
    // reentrancy, joined with it (one share, whichever lease the thread took first).
    assert!(matches!(
        locks.read_lock("grade"),
        Err(Error::AlreadyHeld { .. })
    ));
    let joined = locks
        .options("grade")
        .mode(LockMode::Read)
        .reentrant(true)
        .acquire()
        .unwrap();
    assert_eq!((joined.hold_count(), joined.token()), (2, share.token()));
    assert!(matches!(
        locks.write_lock("grade"),
        Err(Error::AlreadyHeld { .. })
    ));
    drop(joined);
    assert_eq!(writer.release().unwrap(), ReleaseOutcome::Released);
    let info = locks.inspect("grade").unwrap().unwrap();
    assert_eq!((info.mode, info.readers), (Some(LockMode::Read), 1));
    assert!(try_read(), "readers enter after the downgrade");
    // Upgrade: refused at once, not a wait for itself.
    let asked = Instant::now();
    assert!(matches!(
        locks.write_lock("grade"),
        Err(Error::UpgradeRefused { .. })
    ));
    assert!(matches!(
        locks.try_write_lock_for("grade", Duration::from_secs(30)),
        Err(Error::UpgradeRefused { .. })
    ));
    assert!(asked.elapsed() < Duration::from_millis(500));
    // A second read lock on the same thread: as the mutex, unless reentrant (the `try_`
    // family answers busy, as `std`'s `try_lock` does).
    assert!(matches!(
        locks.read_lock("grade"),
        Err(Error::AlreadyHeld { .. })
    ));
    assert!(matches!(locks.try_read_lock("grade"), Ok(None)));
    assert!(matches!(
        locks.try_read_lock_for("grade", Duration::from_secs(30)),
        Ok(None)
    ));
    assert_eq!(share.release().unwrap(), ReleaseOutcome::Released);
    let writer = locks.try_write_lock("grade").unwrap().expect("free");
    drop(writer);
}

#[test]
fn fencing_tokens_increase_across_reads_and_writes() {
    let server = RedisServer::start();
    let locks = client(&server);
    let mut last = 0;
    for _ in 0..3 {
        let r1 = locks.read_lock("fence").unwrap();
        let other = locks.clone();
        let r2 = std::thread::spawn(move || other.read_lock("fence").unwrap())
            .join()
            .unwrap();
        assert!(r1.fencing_token() > last);
        assert_ne!(r1.fencing_token(), r2.fencing_token());
        let highest = r1.fencing_token().max(r2.fencing_token());
        drop((r1, r2));
        let w = locks.write_lock("fence").unwrap();
        assert!(
            w.fencing_token() > highest,
            "a write is above every read before it"
        );
        last = w.fencing_token();
        // The mutex of another name shares nothing with it.
        drop(w);
    }
}

#[test]
fn rw_locks_on_a_cluster_live_on_their_masters() {
    let cluster = RedisCluster::start(3);
    let locks = cluster_client(&cluster);
    let mut owners = std::collections::HashSet::new();
    for i in 0..12 {
        let name = format!("rw-{i}");
        let slot = cluster.keyslot(&format!("lock:{{{name}}}"));
        for key in ["readers", "writers", "fence", "signal", "waiters"] {
            assert_eq!(cluster.keyslot(&format!("lock:{{{name}}}:{key}")), slot);
        }
        owners.insert(cluster.node_for_slot(slot).port());
        let r = locks.read_lock(&name).unwrap();
        let other = locks.clone();
        let n = name.clone();
        let r2 = std::thread::spawn(move || other.read_lock(&n).unwrap())
            .join()
            .unwrap();
        assert_eq!(locks.inspect(&name).unwrap().unwrap().readers, 2);
        let (other, n) = (locks.clone(), name.clone());
        assert!(elsewhere(move || other
            .try_write_lock(&n)
            .unwrap()
            .is_none()));
        let highest = r.fencing_token().max(r2.fencing_token());
        drop((r, r2));
        let w = locks.write_lock(&name).unwrap();
        assert!(w.fencing_token() > highest);
        let other = locks.clone();
        let n = name.clone();
        let waiting = std::thread::spawn(move || {
            other
                .try_read_lock_for(&n, Duration::from_secs(10))
                .unwrap()
                .map(|g| g.fencing_token())
        });
        assert!(wait_until(Duration::from_secs(5), || locks
            .inspect(&name)
            .unwrap()
            .unwrap()
            .waiters
            == 1));
        let fence = w.fencing_token();
        drop(w);
        let read_after = waiting.join().unwrap().expect("woken by the release");
        assert!(read_after > fence);
    }
    assert!(owners.len() >= 2, "names on different masters: {owners:?}");
    assert_eq!(locks.list("rw-*").unwrap().len(), 0, "all released");
}

#[test]
fn redlock_refuses_rw_locks_before_sending_anything() {
    let servers = [
        RedisServer::start(),
        RedisServer::start(),
        RedisServer::start(),
    ];
    let locks = redlock_client(&servers.iter().collect::<Vec<_>>());
    for result in [
        locks.read_lock("r"),
        locks.write_lock("r"),
        locks.options("r").mode(LockMode::Read).acquire(),
    ] {
        match result {
            Err(Error::InvalidInput { what, reason }) => {
                assert_eq!(what, "primitive");
                assert!(reason.contains("Redlock"), "{reason}");
            }
            other => panic!("{other:?}"),
        }
    }
    for s in &servers {
        assert!(snapshot(s).is_empty(), "nothing written");
    }
}

#[test]
fn bad_input_is_refused_and_leaves_redis_untouched() {
    let server = RedisServer::start();
    let locks = client(&server);
    // A mutex's name used as a read-write lock, and the reverse.
    let mutex = locks.lock("m").unwrap();
    let before = snapshot(&server);
    let other = locks.clone();
    std::thread::spawn(move || {
        for r in [other.try_read_lock("m"), other.try_write_lock("m")] {
            assert!(matches!(r, Err(Error::WrongType { .. })), "{r:?}");
        }
    })
    .join()
    .unwrap();
    assert_eq!(snapshot(&server), before, "Redis untouched");
    drop(mutex);
    let share = locks.read_lock("r").unwrap();
    let before = snapshot(&server);
    let other = locks.clone();
    std::thread::spawn(move || {
        assert!(matches!(other.try_lock("r"), Err(Error::WrongType { .. })));
    })
    .join()
    .unwrap();
    assert_eq!(snapshot(&server), before, "Redis untouched");
    // Foreign data under a lock name.
    redis::cmd("SET")
        .arg("lock:{s}")
        .arg("x")
        .query::<()>(&mut server.connection())
        .unwrap();
    let before = snapshot(&server);
    assert!(matches!(
        locks.try_write_lock("s"),
        Err(Error::WrongType { .. })
    ));
    assert!(matches!(
        locks.try_read_lock("s"),
        Err(Error::WrongType { .. })
    ));
    assert_eq!(snapshot(&server), before, "Redis untouched");
    // A free lock whose fencing counter is foreign data: refused by the read's fast path
    // (and the write's full path) before anything is written.
    redis::cmd("SADD")
        .arg("lock:{f}:fence")
        .arg("x")
        .query::<()>(&mut server.connection())
        .unwrap();
    let before = snapshot(&server);
    for r in [locks.try_read_lock("f"), locks.try_write_lock("f")] {
        match r {
            Err(Error::WrongType { redis_key }) => assert_eq!(redis_key, "lock:{f}:fence"),
            other => panic!("{other:?}"),
        }
    }
    // Options a read-write lock cannot honour, and bad names.
    for (opts, what) in [
        (
            LockOptions::new()
                .mode(LockMode::Read)
                .retry(RetryStrategy::fair()),
            "retry",
        ),
        (
            LockOptions::new()
                .mode(LockMode::Write)
                .hold_at_least(Duration::from_secs(1)),
            "hold_at_least",
        ),
    ] {
        match locks.try_acquire_with("fresh", &opts) {
            Err(Error::InvalidInput { what: w, .. }) => assert_eq!(w, what),
            other => panic!("{other:?}"),
        }
    }
    assert!(matches!(
        locks.read_lock(""),
        Err(Error::InvalidInput { .. })
    ));
    assert!(matches!(
        locks.acquire_with(
            "t",
            &LockOptions::new().mode(LockMode::Write).ttl(Duration::ZERO)
        ),
        Err(Error::InvalidInput { .. })
    ));
    assert!("shared".parse::<LockMode>().is_err());
    assert_eq!(snapshot(&server), before, "Redis untouched");
    drop(share);
}

#[test]
fn inspect_and_list_show_readers_and_writers() {
    let server = RedisServer::start();
    let locks = client(&server);
    let share = locks
        .acquire_with(
            "shown",
            &LockOptions::new().mode(LockMode::Read).metadata("report"),
        )
        .unwrap();
    let info = locks.inspect("shown").unwrap().unwrap();
    assert_eq!(info.mode, Some(LockMode::Read));
    assert_eq!(info.readers, 1);
    assert_eq!(info.pid, Some(std::process::id()));
    assert_eq!(info.metadata.as_deref(), Some("report"));
    assert_eq!(info.fencing_token, share.fencing_token());
    assert!(info.owned);
    // A writer waiting is counted, and keeps new readers out.
    let other = locks.clone();
    let writer = std::thread::spawn(move || {
        other
            .try_write_lock_for("shown", Duration::from_secs(10))
            .unwrap()
            .is_some()
    });
    assert!(wait_until(Duration::from_secs(5), || locks
        .inspect("shown")
        .unwrap()
        .unwrap()
        .writers_waiting
        == 1));
    let other = locks.clone();
    assert!(
        std::thread::spawn(move || other.try_read_lock("shown").unwrap().is_none())
            .join()
            .unwrap()
    );
    let mutex = locks.lock("plain").unwrap();
    let listed = locks.list("*").unwrap();
    let names: Vec<_> = listed.iter().map(|i| (i.key.as_str(), i.mode)).collect();
    assert_eq!(
        names,
        [("plain", None), ("shown", Some(LockMode::Read))],
        "{listed:?}"
    );
    drop(share);
    assert!(writer.join().unwrap());
    drop(mutex);
}

#[test]
fn rw_locks_through_sentinel() {
    let group = redis_lock::testing::SentinelGroup::start();
    let locks = redis_lock_tests::sentinel_client(&group);
    let r1 = locks.read_lock("s").unwrap();
    let other = locks.clone();
    let r2 = elsewhere(move || other.read_lock("s").unwrap());
    let other = locks.clone();
    assert!(
        elsewhere(move || other.try_write_lock("s").unwrap().is_none()),
        "a writer is kept out while readers hold"
    );
    let highest = r1.fencing_token().max(r2.fencing_token());
    drop((r1, r2));
    let w = locks
        .options("s")
        .mode(LockMode::Write)
        .replicas(1, Duration::from_secs(2))
        .acquire()
        .unwrap();
    assert!(w.fencing_token() > highest);
    assert_eq!(w.release().unwrap(), ReleaseOutcome::Released);
}

/// Readers that entered `read_report` (none leaves before all have entered).
static READING: AtomicU32 = AtomicU32::new(0);

/// Waits (bounded) inside a read lock until `expected` readers have entered: they are then
/// all inside at once.
#[redis_lock::distributed_lock(key = "report:{id}", client = locks, mode = "read", wait = "10s")]
fn read_report(locks: &redis_lock::LockClient, id: u32, expected: u32) -> redis_lock::Result<bool> {
    READING.fetch_add(1, Ordering::SeqCst);
    let met = wait_until(Duration::from_secs(10), || {
        READING.load(Ordering::SeqCst) >= expected
    });
    Ok(met)
}

#[redis_lock::distributed_lock(key = "report:{id}", client = locks, mode = "write", wait = "0s")]
fn rebuild_report(locks: &redis_lock::LockClient, id: u32) -> redis_lock::Result<u64> {
    Ok(locks
        .inspect(&format!("report:{id}"))?
        .map_or(0, |i| i.fencing_token))
}

#[test]
fn the_attribute_takes_read_and_write_locks() {
    let server = RedisServer::start();
    let locks = client(&server);
    let readers: Vec<_> = (0..3)
        .map(|_| {
            let locks = locks.clone();
            std::thread::spawn(move || read_report(&locks, 7, 3).unwrap())
        })
        .collect();
    for r in readers {
        assert!(r.join().unwrap(), "three readers were inside at once");
    }
    // Exclusive: with a reader in, the writer (no wait) is busy; alone, it runs.
    let share = locks.read_lock("report:7").unwrap();
    let other = locks.clone();
    assert!(matches!(
        elsewhere(move || rebuild_report(&other, 7)),
        Err(Error::Busy { .. })
    ));
    drop(share);
    let info_fence = rebuild_report(&locks, 7).unwrap();
    assert!(info_fence > 0, "the writer saw its own lock");
    assert!(locks.inspect("report:7").unwrap().is_none(), "released");
}

/// Mixed load, 10 % writes: no write waits out its wait bound because readers that woke and
/// blocked again took its wake-up (the benchmark's first version found writers waiting 10 s).
#[test]
fn writers_are_woken_under_a_mixed_load() {
    let server = RedisServer::start();
    let locks = client(&server);
    let deadline = Instant::now() + Duration::from_secs(30);
    let workers: Vec<_> = (0..8u32)
        .map(|w| {
            let locks = locks.clone();
            std::thread::spawn(move || {
                let mut longest = Duration::ZERO;
                for i in 0..60u32 {
                    if Instant::now() > deadline {
                        break;
                    }
                    let write = (i + w) % 10 == 0;
                    let mode = if write {
                        LockMode::Write
                    } else {
                        LockMode::Read
                    };
                    let asked = Instant::now();
                    let guard = locks
                        .try_acquire_with(
                            "mixed",
                            &ttl(10_000).mode(mode).wait(Duration::from_secs(10)),
                        )
                        .unwrap()
                        .expect("acquired within the wait");
                    if write {
                        longest = longest.max(asked.elapsed());
                    }
                    std::thread::sleep(Duration::from_millis(1));
                    drop(guard);
                }
                longest
            })
        })
        .collect();
    let longest = workers
        .into_iter()
        .map(|w| w.join().unwrap())
        .max()
        .unwrap();
    println!("longest write wait under a mixed load: {longest:?}");
    assert!(Instant::now() < deadline, "the load finished in time");
    assert!(longest < Duration::from_secs(3), "{longest:?}");
}

/// A waiting writer keeps new readers out only while it waits: one that gives up lets them in
/// at once (its leave wakes them), one that is killed (SIGKILL) by the time its registration
/// lapses (its announced wait, here the 1 s share's expiry, plus the 1 s waiter margin).
#[test]
fn a_writer_that_stops_waiting_lets_readers_in() {
    let server = RedisServer::start();
    let locks = client(&server);
    let share = locks
        .acquire_with("gate", &ttl(1000).mode(LockMode::Read))
        .unwrap();
    let writers_waiting = |locks: &redis_lock::LockClient| {
        locks
            .inspect("gate")
            .unwrap()
            .map_or(0, |i| i.writers_waiting)
    };
    // A writer that gives up.
    let other = locks.clone();
    let writer = std::thread::spawn(move || {
        let r = other.try_write_lock_for("gate", Duration::from_millis(600));
        (r.unwrap().is_none(), Instant::now())
    });
    assert!(wait_until(Duration::from_secs(5), || writers_waiting(
        &locks
    ) == 1));
    let other = locks.clone();
    let reader = std::thread::spawn(move || {
        let share = other
            .try_read_lock_for("gate", Duration::from_secs(10))
            .unwrap()
            .expect("in once the writer gave up");
        (Instant::now(), share.release().unwrap())
    });
    let (gave_up, at) = writer.join().unwrap();
    assert!(gave_up, "the share was held the whole time");
    let (entered, released) = reader.join().unwrap();
    let late = entered.saturating_duration_since(at);
    println!("reader in {late:?} after the waiting writer gave up");
    assert!(late < Duration::from_millis(500), "{late:?}");
    assert_eq!(released, ReleaseOutcome::Released);
    // A writer that is killed while it waits.
    let mut dead = Holder::spawn(HOLDER, &["write-wait", &server.url(), "gate"]);
    assert!(wait_until(Duration::from_secs(10), || writers_waiting(
        &locks
    ) == 1));
    dead.kill();
    let killed = Instant::now();
    let other = locks;
    let entered = elsewhere(move || {
        let share = other
            .try_read_lock_for("gate", Duration::from_secs(10))
            .unwrap()
            .expect("in once the dead writer's registration lapsed");
        drop(share);
        killed.elapsed()
    });
    println!("reader in {entered:?} after the waiting writer was killed");
    assert!(entered < Duration::from_millis(2000 + 500), "{entered:?}");
    drop(share);
}

/// Shares across processes: 4 `lock-holder` processes hold read shares at once, each with its
/// own fencing token; a writer in this process waits for all of them and gets a greater token.
#[test]
fn reader_processes_share_the_lock_and_a_writer_waits_for_them() {
    let server = RedisServer::start();
    let locks = client(&server);
    let mut readers: Vec<Holder> = (0..4)
        .map(|_| Holder::spawn(HOLDER, &["read", &server.url(), "procs", "5000"]))
        .collect();
    let mut tokens: Vec<u64> = readers
        .iter_mut()
        .map(|r| {
            let line = r
                .expect("ACQUIRED", Duration::from_secs(10))
                .expect("a share");
            line.trim_start_matches("ACQUIRED ").trim().parse().unwrap()
        })
        .collect();
    // All four answered while holding: they hold at the same time.
    let info = locks.inspect("procs").unwrap().unwrap();
    assert_eq!((info.mode, info.readers), (Some(LockMode::Read), 4));
    tokens.sort_unstable();
    tokens.dedup();
    assert_eq!(tokens.len(), 4, "a token per share");
    let writer = std::thread::spawn({
        let locks = locks.clone();
        move || {
            locks
                .try_write_lock_for("procs", Duration::from_secs(20))
                .unwrap()
                .map(|g| g.fencing_token())
        }
    });
    assert!(wait_until(Duration::from_secs(5), || {
        locks.inspect("procs").unwrap().unwrap().writers_waiting == 1
    }));
    for r in &mut readers {
        r.send("release");
        assert_eq!(
            r.expect("RELEASED", Duration::from_secs(10)).as_deref(),
            Some("RELEASED Released")
        );
        assert!(r.finish(Duration::from_secs(10)));
    }
    let token = writer.join().unwrap().expect("the writer got the lock");
    assert!(token > *tokens.last().unwrap());
}

/// A read share lives through a slot migration: with only the fencing counter moved, with
/// every key moved in one batch while the slot still migrates, and after it moved; its
/// renewals (two keys: the lock and its shares) keep working, and the fencing counter moves
/// along.
#[test]
fn a_read_share_survives_a_slot_migration() {
    let cluster = RedisCluster::start(3);
    let locks = cluster_client(&cluster);
    let name = "rw-migrating";
    let lock = format!("lock:{{{name}}}");
    let slot = cluster.keyslot(&lock);
    let source = cluster.node_for_slot(slot).port();
    let target = cluster
        .nodes()
        .iter()
        .position(|n| n.port() != source)
        .unwrap();
    let target_port = cluster.nodes()[target].port();
    let share = locks
        .acquire_with(name, &ttl(900).mode(LockMode::Read))
        .unwrap();
    let fence = share.fencing_token();
    let renewals_hold = |what: &str| {
        // Three renewal periods (300 ms each): the watchdog keeps the share.
        let until = Instant::now() + Duration::from_millis(1000);
        while Instant::now() < until {
            assert!(!share.is_lost(), "lost {what}");
            std::thread::sleep(Duration::from_millis(50));
        }
        assert!(share.remaining_ttl().unwrap().is_some(), "{what}");
    };
    let migration = cluster.begin_migration(slot, target);
    redis::cmd("MIGRATE")
        .arg("127.0.0.1")
        .arg(target_port)
        .arg(format!("{lock}:fence"))
        .arg(0)
        .arg(5000)
        .query::<()>(&mut cluster.node_for_slot(slot).connection())
        .unwrap();
    renewals_hold("with the fence counter moved");
    // The lock and its shares move in one batch, as a reshard moves a slot's keys.
    while migration.move_keys(10) > 0 {}
    renewals_hold("with all keys moved");
    migration.finish();
    assert_eq!(cluster.port_for_slot(slot), target_port);
    renewals_hold("after the slot moved");
    assert_eq!(share.release().unwrap(), ReleaseOutcome::Released);
    let writer = locks.try_write_lock(name).unwrap().expect("free");
    assert!(writer.fencing_token() > fence, "the counter moved along");
}

/// A write lock keeps renewing while its slot is being migrated: it has no shares key, and a
/// renewal that declared that missing key would be answered `TRYAGAIN` for as long as the
/// migration lasts (the lock was reported lost at its TTL, found by fault injection).
#[test]
fn a_write_lock_keeps_renewing_while_its_slot_migrates() {
    let cluster = RedisCluster::start(3);
    let locks = cluster_client(&cluster);
    let name = "w-migrating";
    let slot = cluster.keyslot(&format!("lock:{{{name}}}"));
    let source = cluster.node_for_slot(slot).port();
    let target = cluster
        .nodes()
        .iter()
        .position(|n| n.port() != source)
        .unwrap();
    let writer = locks
        .acquire_with(name, &ttl(900).mode(LockMode::Write))
        .unwrap();
    let holds = |what: &str| {
        // More than a TTL (three renewal periods of 300 ms): only renewals keep it.
        let until = Instant::now() + Duration::from_millis(1200);
        while Instant::now() < until {
            assert!(!writer.is_lost(), "lost {what}: {:?}", writer.ensure_held());
            std::thread::sleep(Duration::from_millis(50));
        }
        assert!(writer.remaining_ttl().unwrap().is_some(), "{what}");
    };
    let migration = cluster.begin_migration(slot, target);
    holds("while the slot is migrating, nothing moved yet");
    while migration.move_keys(10) > 0 {}
    migration.finish();
    holds("after the slot moved");
    assert_eq!(writer.release().unwrap(), ReleaseOutcome::Released);
    assert!(locks.try_read_lock(name).unwrap().is_some(), "free");
}
