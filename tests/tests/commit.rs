//! Commit under the lock (`LockGuard::commit`): the user's commands applied only while the
//! guard holds its lock, atomically with the check, against real servers. A lock broken or
//! expired between `check_held` and the commit writes nothing; the rightful holder's commit
//! applies every command and shapes the replies as `Pipeline::query` does; every primitive
//! (lock, read share, write lock, permit); a Cluster key outside the lock's slot and a Redlock
//! quorum are refused before anything is sent; and threads that increment a counter only
//! through commits, some of them paused past their TTL, leave it equal to the commits
//! reported `Ok`.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use redis_lock::testing::RedisCluster;
use redis_lock::{Error, LockClient, LockGuard, LostReason};
use redis_lock_tests::{
    RedisServer, client, client_without_notification, cluster_client, held_everywhere, wait_until,
};

fn get(server: &RedisServer, key: &str) -> Option<String> {
    redis::cmd("GET")
        .arg(key)
        .query(&mut server.connection())
        .unwrap()
}

fn set(server: &RedisServer, key: &str, value: i64) {
    let _: () = redis::cmd("SET")
        .arg(key)
        .arg(value)
        .query(&mut server.connection())
        .unwrap();
}

/// A withdrawal of 60 and its history entry, the history's reply ignored.
fn withdraw(account: &str) -> redis::Pipeline {
    let mut pipe = redis::pipe();
    pipe.cmd("DECRBY")
        .arg(format!("{account}:balance"))
        .arg(60)
        .cmd("RPUSH")
        .arg(format!("{account}:history"))
        .arg("-60")
        .ignore();
    pipe
}

#[test]
fn the_holders_commit_applies_every_command_and_returns_the_pipelines_replies() {
    let server = RedisServer::start();
    let locks = client(&server);
    set(&server, "a1:balance", 100);
    let guard = locks.lock("a1").unwrap();
    let (balance,): (i64,) = guard.commit(&withdraw("a1")).unwrap();
    assert_eq!(balance, 40);
    assert_eq!(get(&server, "a1:balance").as_deref(), Some("40"));
    let history: Vec<String> = redis::cmd("LRANGE")
        .arg("a1:history")
        .arg(0)
        .arg(-1)
        .query(&mut server.connection())
        .unwrap();
    assert_eq!(history, ["-60"]);
    // An atomic pipeline's replies come back the same way; the guard still holds.
    let mut atomic = redis::pipe();
    atomic
        .atomic()
        .cmd("INCR")
        .arg("a1:n")
        .cmd("GET")
        .arg("a1:missing");
    let (n, missing): (i64, Option<String>) = guard.commit(&atomic).unwrap();
    assert_eq!((n, missing), (1, None));
    assert!(!guard.is_lost());
    guard.check_held().unwrap();
}

#[test]
fn a_lock_broken_between_the_check_and_the_commit_writes_nothing() {
    let server = RedisServer::start();
    // Without loss notification the guard cannot learn of the break before its commit: the
    // server's check is what refuses it.
    let locks = client_without_notification(&server.url());
    set(&server, "a2:balance", 100);
    let guard = locks.lock("a2").unwrap();
    guard.check_held().unwrap();
    locks.force_release("a2").unwrap();
    // Taken by another meanwhile: not ours either.
    let other = client(&server)
        .try_lock("a2")
        .unwrap()
        .expect("free after the break");
    match guard.commit::<(i64,)>(&withdraw("a2")) {
        Err(Error::Lost { key, reason }) => {
            assert_eq!(key, "a2");
            assert_eq!(reason, LostReason::TakenOver);
        }
        other => panic!("expected Lost, got {other:?}"),
    }
    assert_eq!(get(&server, "a2:balance").as_deref(), Some("100"));
    assert!(guard.is_lost(), "the guard is marked lost");
    // The new holder commits.
    let (balance,): (i64,) = other.commit(&withdraw("a2")).unwrap();
    assert_eq!(balance, 40);
}

#[test]
fn a_lock_expired_while_its_holder_was_paused_writes_nothing() {
    let server = RedisServer::start();
    let locks = client_without_notification(&server.url());
    set(&server, "a3:balance", 100);
    // No watchdog: the lock runs out as it would for a holder paused past its TTL.
    let guard = locks
        .options("a3")
        .ttl(Duration::from_millis(200))
        .watchdog(false)
        .acquire()
        .unwrap();
    guard.check_held().unwrap();
    assert!(wait_until(Duration::from_secs(5), || {
        !redis_lock_tests::holds(&server, "a3")
    }));
    let err = guard.commit::<(i64,)>(&withdraw("a3")).unwrap_err();
    assert!(matches!(err, Error::Lost { .. }), "{err:?}");
    assert_eq!(get(&server, "a3:balance").as_deref(), Some("100"));
}

#[test]
fn a_failing_command_stops_the_commit_and_the_ones_before_it_stay() {
    let server = RedisServer::start();
    let locks = client(&server);
    let _: () = redis::cmd("RPUSH")
        .arg("a4:list")
        .arg("x")
        .query(&mut server.connection())
        .unwrap();
    let guard = locks.lock("a4").unwrap();
    let mut pipe = redis::pipe();
    pipe.cmd("SET")
        .arg("a4:first")
        .arg("1")
        .cmd("INCR")
        .arg("a4:list")
        .cmd("SET")
        .arg("a4:after")
        .arg("1");
    let err = guard.commit::<()>(&pipe).unwrap_err();
    assert!(matches!(err, Error::Redis(_)), "{err:?}");
    assert_eq!(get(&server, "a4:first").as_deref(), Some("1"));
    assert_eq!(get(&server, "a4:after"), None);
    assert!(!guard.is_lost(), "a failed command is not a loss");
}

/// Commits under `guard`, then breaks its lock and commits again: the first applies, the
/// second writes nothing.
fn commits_only_while_held(server: &RedisServer, locks: &LockClient, guard: LockGuard, key: &str) {
    let mut incr = redis::pipe();
    incr.cmd("INCR").arg(key);
    let (n,): (i64,) = guard.commit(&incr).unwrap();
    assert_eq!(n, 1);
    // Broken from outside: the key of the hold removed.
    let _: () = redis::cmd("FLUSHALL")
        .query(&mut server.connection())
        .unwrap();
    set(server, key, 10);
    let err = guard.commit::<(i64,)>(&incr).unwrap_err();
    assert!(matches!(err, Error::Lost { .. }), "{err:?}");
    assert_eq!(get(server, key).as_deref(), Some("10"));
    let _ = locks;
}

#[test]
fn a_read_share_a_write_lock_and_a_permit_commit_only_while_held() {
    let server = RedisServer::start();
    let locks = client_without_notification(&server.url());
    let read = locks.read_lock("r1").unwrap();
    commits_only_while_held(&server, &locks, read, "r1:n");
    let write = locks.write_lock("w1").unwrap();
    commits_only_while_held(&server, &locks, write, "w1:n");
    let permit = locks.semaphore("s1", 2).unwrap().acquire().unwrap();
    commits_only_while_held(&server, &locks, permit, "s1:n");
}

#[test]
fn threads_whose_locks_are_broken_or_run_out_never_commit_and_the_counter_counts_every_ok() {
    let server = RedisServer::start();
    let oks = Arc::new(AtomicU64::new(0));
    let lost = Arc::new(AtomicU64::new(0));
    let threads: Vec<_> = (0..4u64)
        .map(|t| {
            let (url, oks, lost) = (server.url(), Arc::clone(&oks), Arc::clone(&lost));
            std::thread::spawn(move || {
                // Without loss notification a holder learns of a break only from the commit.
                let locks = client_without_notification(&url);
                let breaker = client_without_notification(&url);
                let mut incr = redis::pipe();
                incr.cmd("INCR").arg("c:counter").ignore();
                for i in 0..30u64 {
                    let pause = (i + t) % 3 == 1;
                    let guard = locks
                        .options("c")
                        .ttl(Duration::from_millis(if pause { 100 } else { 5_000 }))
                        .watchdog(!pause)
                        .wait(Duration::from_secs(10))
                        .acquire()
                        .unwrap();
                    if (i + t) % 3 == 0 {
                        // Broken by an operator while the holder works on.
                        breaker.force_release("c").unwrap();
                    } else if pause {
                        // Paused past the TTL (no watchdog to renew it): the pause is the point,
                        // so time is the condition. (The fencing counter cannot tell: other
                        // threads' failed native attempts move it while the lock is ours.)
                        std::thread::sleep(Duration::from_millis(150));
                    }
                    match guard.commit::<()>(&incr) {
                        Ok(()) => oks.fetch_add(1, Ordering::SeqCst),
                        Err(Error::Lost { .. }) => lost.fetch_add(1, Ordering::SeqCst),
                        Err(e) => panic!("{e}"),
                    };
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    let counter: u64 = get(&server, "c:counter").map_or(0, |c| c.parse().unwrap());
    assert_eq!(
        counter,
        oks.load(Ordering::SeqCst),
        "a commit after a loss was applied"
    );
    assert_eq!(
        lost.load(Ordering::SeqCst),
        80,
        "every broken or run-out hold lost"
    );
}

#[test]
fn redlock_refuses_a_commit_before_sending_and_points_to_fencing() {
    let servers = [
        RedisServer::start(),
        RedisServer::start(),
        RedisServer::start(),
    ];
    // Without loss notification: watching the lock reads it on every server in the
    // background, which the request count would see.
    let locks = LockClient::redlock_builder(servers.iter().map(RedisServer::url))
        .io_timeout(Duration::from_millis(300))
        .loss_notification(false)
        .build()
        .unwrap();
    let guard = locks.lock("q1").unwrap();
    // Every server's attempt counted (a request is counted before it is sent).
    assert!(held_everywhere(&servers, "q1"));
    let mut pipe = redis::pipe();
    pipe.cmd("SET").arg("q1:data").arg("x");
    let before = locks.request_count();
    match guard.commit::<()>(&pipe) {
        Err(Error::InvalidInput { what, reason }) => {
            assert_eq!(what, "commit");
            assert!(reason.contains("fencing"), "{reason}");
        }
        other => panic!("expected InvalidInput, got {other:?}"),
    }
    assert_eq!(locks.request_count(), before, "nothing was sent");
    for s in &servers {
        assert_eq!(get(s, "q1:data"), None);
    }
}

#[test]
fn a_cluster_commit_runs_in_the_locks_slot_and_refuses_a_key_outside_it() {
    let cluster = RedisCluster::start(3);
    let locks = cluster_client(&cluster);
    let guard = locks.lock("acct:7").unwrap();
    let mut inside = redis::pipe();
    inside.cmd("INCRBY").arg("{acct:7}:balance").arg(5);
    let (n,): (i64,) = guard.commit(&inside).unwrap();
    assert_eq!(n, 5);
    let mut outside = redis::pipe();
    outside
        .cmd("INCRBY")
        .arg("{acct:7}:balance")
        .arg(5)
        .cmd("SET")
        .arg("elsewhere")
        .arg("x");
    match guard.commit::<()>(&outside) {
        Err(Error::InvalidInput { what, reason }) => {
            assert_eq!(what, "commit");
            assert!(reason.contains("elsewhere"), "{reason}");
        }
        other => panic!("expected InvalidInput, got {other:?}"),
    }
    let node = cluster.node_for_slot(cluster.keyslot("{acct:7}:balance"));
    assert_eq!(get(node, "{acct:7}:balance").as_deref(), Some("5"));
    let other = cluster.node_for_slot(cluster.keyslot("elsewhere"));
    assert_eq!(get(other, "elsewhere"), None);
}

#[test]
fn a_multi_lock_commits_only_while_it_holds_every_member() {
    let server = RedisServer::start();
    let locks = client_without_notification(&server.url());
    set(&server, "m:1:balance", 100);
    set(&server, "m:2:balance", 0);
    let both = locks.lock_all(["m:1", "m:2"]).unwrap();
    let mut transfer = redis::pipe();
    transfer
        .cmd("DECRBY")
        .arg("m:1:balance")
        .arg(25)
        .cmd("INCRBY")
        .arg("m:2:balance")
        .arg(25);
    let (from, to): (i64, i64) = both.commit(&transfer).unwrap();
    assert_eq!((from, to), (75, 25));
    // One member broken: nothing is written, and that member is named.
    locks.force_release("m:2").unwrap();
    match both.commit::<(i64, i64)>(&transfer) {
        Err(Error::Lost { key, .. }) => assert_eq!(key, "m:2"),
        other => panic!("expected Lost, got {other:?}"),
    }
    assert_eq!(get(&server, "m:1:balance").as_deref(), Some("75"));
    assert_eq!(get(&server, "m:2:balance").as_deref(), Some("25"));
    assert_eq!(both.lost_member().map(|(k, _)| k), Some("m:2"));
}

#[test]
fn through_sentinel_a_commit_runs_on_the_master_and_waits_for_the_replica_acknowledgement() {
    let group = redis_lock::testing::SentinelGroup::start();
    let locks = redis_lock_tests::sentinel_client(&group);
    let guard = locks
        .options("s:acct")
        .replicas(1, Duration::from_secs(2))
        .acquire()
        .unwrap();
    let mut incr = redis::pipe();
    incr.cmd("INCRBY").arg("s:acct:balance").arg(7);
    let (n,): (i64,) = guard.commit(&incr).unwrap();
    assert_eq!(n, 7);
    // With the replica stopped, the write is applied on the master but not acknowledged.
    group.pause_replica();
    let err = guard.commit::<(i64,)>(&incr).unwrap_err();
    group.resume_replica();
    match err {
        Error::ReplicaAck {
            key,
            required,
            acked,
        } => assert_eq!((key.as_str(), required, acked), ("s:acct", 1, 0)),
        other => panic!("expected ReplicaAck, got {other:?}"),
    }
    assert_eq!(get(group.master(), "s:acct:balance").as_deref(), Some("14"));
}

#[test]
fn processes_killed_and_paused_past_their_ttl_never_commit_after_a_loss() {
    use redis_lock_tests::holder::Holder;
    const HOLDER: &str = env!("CARGO_BIN_EXE_lock-holder");
    let server = RedisServer::start();
    let mut holders: Vec<Holder> = (0..3)
        .map(|_| Holder::spawn(HOLDER, &["commit-count", &server.url(), "p", "150", "300"]))
        .collect();
    // Let them commit a while, then pause one past its TTL (it holds the lock, or waits for
    // it, most of the time) and kill another.
    assert!(holders[0].expect("OK", Duration::from_secs(10)).is_some());
    holders[0].signal(libc::SIGSTOP);
    assert!(holders[1].expect("OK", Duration::from_secs(10)).is_some());
    // Paused past its TTL (300 ms) while the others go on.
    std::thread::sleep(Duration::from_millis(600));
    holders[0].signal(libc::SIGCONT);
    holders[1].kill();
    // The two `OK`s read above.
    let mut oks = 2;
    for (i, h) in holders.iter_mut().enumerate() {
        let lines = h.rest(Duration::from_secs(60));
        if i != 1 {
            assert_eq!(lines.last().map(String::as_str), Some("DONE"), "{lines:?}");
        }
        assert!(lines.iter().all(|l| !l.starts_with("ERROR")), "{lines:?}");
        oks += lines.iter().filter(|l| *l == "OK").count() as u64;
    }
    let counter: u64 = get(&server, "p:counter").unwrap().parse().unwrap();
    let log: Vec<u64> = redis::cmd("LRANGE")
        .arg("p:log")
        .arg(0)
        .arg(-1)
        .query(&mut server.connection())
        .unwrap();
    assert_eq!(counter, log.len() as u64);
    // Every commit reported Ok landed; the killed process may have landed one it could not
    // report.
    assert!(
        oks <= counter && counter <= oks + 1,
        "oks {oks}, counter {counter}"
    );
    // No commit after a loss: a holder whose lock was taken over would append a lower token
    // after a higher one.
    assert!(log.windows(2).all(|w| w[0] < w[1]), "{log:?}");
}
