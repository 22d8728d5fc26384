//! Multi-locks (`lock_all`) against real redis-server processes, Redlock and a Redis Cluster:
//! all or nothing under contention from threads asking for overlapping sets in any order,
//! exclusion with single locks, waiting by notification, a killed holder, failures in the
//! middle of an acquisition, and bad input.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use redis_lock::{
    CancelToken, Error, LockClient, LockMode, LockOptions, MAX_LOCK_ALL, ReleaseOutcome,
    RetryStrategy,
};
use redis_lock_tests::holder::Holder;
use redis_lock_tests::{
    RedisCluster, RedisServer, TcpProxy, client, cluster_client, redlock_client, wait_until,
};

const HOLDER: &str = env!("CARGO_BIN_EXE_lock-holder");
const NAMES: [&str; 5] = ["n0", "n1", "n2", "n3", "n4"];

/// A small deterministic generator (xorshift), so a failing run can be told apart by seed.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    /// A non-empty subset of `NAMES` in random order.
    fn subset(&mut self) -> Vec<&'static str> {
        let mut picked: Vec<&str> = NAMES
            .iter()
            .copied()
            .filter(|_| self.next().is_multiple_of(2))
            .collect();
        if picked.is_empty() {
            picked.push(NAMES[usize::try_from(self.next() % 5).unwrap()]);
        }
        for i in (1..picked.len()).rev() {
            let j = usize::try_from(self.next() % (i as u64 + 1)).unwrap();
            picked.swap(i, j);
        }
        picked
    }
}

#[derive(Default)]
struct Counts {
    /// Per name: a counter incremented without atomicity (load, pause, store), and whether a
    /// thread is inside.
    counters: [AtomicU64; 5],
    inside: [AtomicBool; 5],
    /// Per name: how many acquisitions included it.
    expected: [AtomicU64; 5],
    acquisitions: AtomicU64,
    violations: AtomicU64,
    partial: AtomicU64,
    timeouts: AtomicU64,
}

fn index(name: &str) -> usize {
    NAMES.iter().position(|n| *n == name).unwrap()
}

/// `threads` threads lock random subsets of the 5 names in random order for `run`, each
/// acquisition bounded by 10 s; returns the counts. Every acquisition is checked while held:
/// each member is held by it in Redis (`inspect` shows its fencing token), and no other thread
/// is inside any member.
fn contend(locks: &LockClient, threads: u64, run: Duration) -> Arc<Counts> {
    let counts = Arc::new(Counts::default());
    let started = Instant::now();
    let handles: Vec<_> = (0..threads)
        .map(|t| {
            let (locks, counts) = (locks.clone(), Arc::clone(&counts));
            std::thread::spawn(move || {
                let mut rng = Rng(0x9E37_79B9_7F4A_7C15 ^ (t + 1));
                // Bounded in count and time.
                for _ in 0..10_000 {
                    if started.elapsed() >= run {
                        break;
                    }
                    let subset = rng.subset();
                    let guard = match locks.try_lock_all_for(&subset, Duration::from_secs(10)) {
                        Ok(Some(guard)) => guard,
                        Ok(None) => {
                            counts.timeouts.fetch_add(1, Ordering::SeqCst);
                            continue;
                        }
                        Err(e) => panic!("lock_all failed: {e:?}"),
                    };
                    for name in &subset {
                        let i = index(name);
                        if counts.inside[i].swap(true, Ordering::SeqCst) {
                            counts.violations.fetch_add(1, Ordering::SeqCst);
                        }
                        // All or nothing: every member is ours in Redis right now.
                        let info = locks.inspect(name).unwrap();
                        if info.map(|i| i.fencing_token) != guard.fencing_token(name) {
                            counts.partial.fetch_add(1, Ordering::SeqCst);
                        }
                    }
                    for name in &subset {
                        let i = index(name);
                        let v = counts.counters[i].load(Ordering::SeqCst);
                        std::thread::yield_now();
                        counts.counters[i].store(v + 1, Ordering::SeqCst);
                        counts.expected[i].fetch_add(1, Ordering::SeqCst);
                    }
                    for name in &subset {
                        counts.inside[index(name)].store(false, Ordering::SeqCst);
                    }
                    counts.acquisitions.fetch_add(1, Ordering::SeqCst);
                    let outcomes = guard.release().unwrap();
                    assert!(outcomes.iter().all(|(_, o)| *o == ReleaseOutcome::Released));
                }
            })
        })
        .collect();
    for h in handles {
        h.join().unwrap();
    }
    counts
}

fn assert_exact(counts: &Counts, what: &str) {
    let acquisitions = counts.acquisitions.load(Ordering::SeqCst);
    eprintln!("{what}: {acquisitions} multi-lock acquisitions");
    assert!(acquisitions > 0, "{what}: nothing acquired");
    assert_eq!(
        counts.violations.load(Ordering::SeqCst),
        0,
        "{what}: overlap"
    );
    assert_eq!(
        counts.partial.load(Ordering::SeqCst),
        0,
        "{what}: partial set"
    );
    assert_eq!(
        counts.timeouts.load(Ordering::SeqCst),
        0,
        "{what}: a 10 s wait ran out"
    );
    for (i, name) in NAMES.iter().enumerate() {
        assert_eq!(
            counts.counters[i].load(Ordering::SeqCst),
            counts.expected[i].load(Ordering::SeqCst),
            "{what}: counter of {name} lost increments"
        );
    }
}

#[test]
fn eight_threads_on_random_overlapping_subsets_never_deadlock_and_count_exactly() {
    let server = RedisServer::start();
    let locks = client(&server);
    let counts = contend(&locks, 8, Duration::from_secs(6));
    assert_exact(&counts, "one server");
    let left: Vec<String> = redis::cmd("KEYS")
        .arg("lock:{n?}")
        .query(&mut server.connection())
        .unwrap();
    assert!(left.is_empty(), "every lock released: {left:?}");
}

#[test]
fn redlock_multi_locks_count_exactly() {
    let servers = [
        RedisServer::start(),
        RedisServer::start(),
        RedisServer::start(),
    ];
    let refs: Vec<&RedisServer> = servers.iter().collect();
    let locks = redlock_client(&refs);
    let counts = contend(&locks, 8, Duration::from_secs(4));
    assert_exact(&counts, "redlock");
}

#[test]
fn cluster_multi_locks_across_slots_count_exactly() {
    let cluster = RedisCluster::start(3);
    let locks = cluster_client(&cluster);
    let slots: std::collections::HashSet<u16> = NAMES
        .iter()
        .map(|n| cluster.keyslot(&format!("lock:{{{n}}}")))
        .collect();
    assert!(slots.len() > 1, "the names span several slots");
    let counts = contend(&locks, 8, Duration::from_secs(4));
    assert_exact(&counts, "cluster");
}

#[test]
fn names_sharing_a_hash_tag_are_taken_in_one_round_trip_on_a_cluster() {
    let cluster = RedisCluster::start(3);
    // Counts requests exactly: without loss notification's check of a lock held 2 ms (notify.rs).
    let locks = redis_lock::LockClient::cluster_builder(cluster.urls())
        .loss_notification(false)
        .build()
        .unwrap();
    let names = ["order}a", "order}b", "order}c"];
    // Warm up: the pool's first connection and the script cache.
    drop(locks.try_lock_all(names).unwrap().expect("free"));
    let before = locks.request_count();
    let guard = locks.try_lock_all(names).unwrap().expect("free");
    assert_eq!(locks.request_count() - before, 1, "one script");
    for n in names {
        assert!(locks.inspect(n).unwrap().is_some());
    }
    drop(guard);
    for n in names {
        assert!(locks.inspect(n).unwrap().is_none());
    }
}

#[test]
fn single_locks_and_multi_locks_exclude_each_other() {
    let server = RedisServer::start();
    let locks = client(&server);
    let other = client(&server);
    let single = other.lock("a").unwrap();
    let before = locks.inspect("a").unwrap().unwrap().fencing_token;
    assert!(locks.try_lock_all(["b", "a", "c"]).unwrap().is_none());
    // Nothing taken: b and c stay free, and no fencing token was used on a.
    assert!(locks.inspect("b").unwrap().is_none());
    assert!(locks.inspect("c").unwrap().is_none());
    let err = locks.acquire_all_with(["a", "b"], &LockOptions::new().wait(Duration::ZERO));
    assert!(
        matches!(&err, Err(Error::Busy { key, .. }) if key == "a,b"),
        "{err:?}"
    );
    drop(single);

    let guard = locks.lock_all(["c", "a", "b"]).unwrap();
    assert_eq!(guard.keys(), ["a", "b", "c"]);
    assert!(guard.fencing_token("a").unwrap() > before);
    assert!(
        other.try_lock("b").unwrap().is_none(),
        "b is held by the multi-lock"
    );
    let outcomes = guard.release().unwrap();
    assert_eq!(
        outcomes,
        ["a", "b", "c"].map(|n| (n.to_owned(), ReleaseOutcome::Released))
    );
    assert!(other.try_lock("b").unwrap().is_some());
}

#[test]
fn a_waiting_multi_lock_is_woken_by_the_release_of_its_busy_member() {
    let server = RedisServer::start();
    let locks = client(&server);
    let holder = client(&server).lock("b").unwrap();
    let waiter = {
        let locks = locks.clone();
        std::thread::spawn(move || {
            let got = locks.try_lock_all_for(["a", "b"], Duration::from_secs(20));
            (
                Instant::now(),
                got.map(|g| g.map(|g| g.fencing_tokens().len())),
            )
        })
    };
    let registered = || -> usize {
        redis::cmd("ZCARD")
            .arg("lock:{b}:waiters")
            .query(&mut server.connection())
            .unwrap()
    };
    assert!(wait_until(Duration::from_secs(10), || registered() == 1));
    // It waits for b holding nothing: a stays free meanwhile.
    assert!(locks.inspect("a").unwrap().is_none());
    let released = Instant::now();
    drop(holder);
    let (got_at, got) = waiter.join().unwrap();
    assert_eq!(got.unwrap(), Some(2));
    let took = got_at.duration_since(released);
    eprintln!("multi-lock acquired {took:?} after the release of its busy member");
    assert!(
        took < Duration::from_millis(500),
        "woken, not polling: {took:?}"
    );
}

#[test]
fn a_lost_member_marks_the_guard_lost_and_names_it() {
    let server = RedisServer::start();
    let locks = client(&server);
    let guard = locks
        .acquire_all_with(
            ["a", "b"],
            &LockOptions::new().ttl(Duration::from_millis(300)),
        )
        .unwrap();
    locks.force_release("b").unwrap();
    // The watchdog finds it at its next renewal (ttl / 3).
    assert!(wait_until(Duration::from_secs(5), || guard.is_lost()));
    let (name, _) = guard.lost_member().unwrap();
    assert_eq!(name, "b");
    let err = guard.ensure_held().unwrap_err();
    assert!(
        matches!(&err, Error::Lost { key, .. } if key == "b"),
        "{err:?}"
    );
    let outcomes = guard.release().unwrap();
    assert_eq!(outcomes[0], ("a".to_owned(), ReleaseOutcome::Released));
    assert_ne!(outcomes[1].1, ReleaseOutcome::Released);
}

#[test]
fn sigkill_of_a_multi_lock_holder_frees_every_member_within_the_ttl() {
    let server = RedisServer::start();
    let locks = client(&server);
    let mut holder = Holder::spawn(HOLDER, &["hold-all", &server.url(), "x,y,z", "1000"]);
    assert!(holder.expect("ACQUIRED", Duration::from_secs(20)).is_some());
    for n in ["x", "y", "z"] {
        assert!(locks.inspect(n).unwrap().is_some());
    }
    let killed = Instant::now();
    holder.kill();
    let guard = locks
        .try_lock_all_for(["x", "y", "z"], Duration::from_secs(5))
        .unwrap()
        .expect("every member freed");
    let took = killed.elapsed();
    eprintln!("members freed {took:?} after the SIGKILL (ttl 1 s)");
    assert!(took < Duration::from_millis(1500), "{took:?}");
    drop(guard);
}

#[test]
fn a_failure_on_one_member_mid_acquisition_leaves_none_held() {
    // Redlock takes the members one by one: a member whose key holds another type fails
    // after the first two were taken on every server.
    let servers = [
        RedisServer::start(),
        RedisServer::start(),
        RedisServer::start(),
    ];
    for s in &servers {
        let _: () = redis::cmd("SET")
            .arg("lock:{c}")
            .arg("not a lock")
            .query(&mut s.connection())
            .unwrap();
    }
    let refs: Vec<&RedisServer> = servers.iter().collect();
    let locks = redlock_client(&refs);
    let err = locks.try_lock_all(["a", "b", "c"]).unwrap_err();
    assert!(
        matches!(err, Error::WrongType { .. } | Error::NoQuorum { .. }),
        "{err:?}"
    );
    assert!(
        wait_until(Duration::from_secs(2), || servers.iter().all(|s| {
            let n: i64 = redis::cmd("EXISTS")
                .arg("lock:{a}")
                .arg("lock:{b}")
                .query(&mut s.connection())
                .unwrap();
            n == 0
        })),
        "a and b were given back on every server"
    );
}

/// Redlock's members share one owner token. With the third server slow, both members'
/// attempts are still in flight there when the guard is released: each member's release must
/// leave that server to its own late attempt (and only its own), which then releases it. A
/// record of in-flight attempts kept per token instead of per member let the second member
/// overwrite the first's, so one member stayed held on the slow server for its whole TTL.
#[test]
fn members_released_while_their_attempts_are_late_are_freed_everywhere() {
    let servers = [
        RedisServer::start(),
        RedisServer::start(),
        RedisServer::start(),
    ];
    let proxy = TcpProxy::start(servers[2].port()).unwrap();
    let locks = LockClient::redlock_builder([servers[0].url(), servers[1].url(), proxy.url()])
        .connect_timeout(Duration::from_secs(2))
        .io_timeout(Duration::from_secs(2))
        .build()
        .unwrap();
    let held = |s: &RedisServer| -> i64 {
        redis::cmd("EXISTS")
            .arg("lock:{a}")
            .arg("lock:{b}")
            .query(&mut s.connection())
            .unwrap()
    };
    let fences = || -> Vec<u64> {
        redis::cmd("MGET")
            .arg("lock:{a}:fence")
            .arg("lock:{b}:fence")
            .query::<Vec<Option<u64>>>(&mut servers[2].connection())
            .unwrap()
            .into_iter()
            .map(Option::unwrap_or_default)
            .collect()
    };
    // Connections (and the script cache) warmed up before the proxy turns slow.
    drop(locks.lock_all(["a", "b"]).unwrap());
    assert!(wait_until(Duration::from_secs(3), || servers
        .iter()
        .all(|s| held(s) == 0)));
    for round in 0..3 {
        let before = fences();
        // The attempts to the third server are held up in the proxy; the releases are not.
        proxy.set_latency(Duration::from_millis(300));
        let guard = locks
            .try_lock_all_for(["a", "b"], Duration::from_secs(5))
            .unwrap()
            .expect("free");
        proxy.set_latency(Duration::ZERO);
        let outcomes = guard.release().unwrap();
        assert!(
            outcomes.iter().all(|(_, o)| *o == ReleaseOutcome::Released),
            "{outcomes:?}"
        );
        // The held-up attempts run on the third server (both fencing counters move)...
        assert!(
            wait_until(Duration::from_secs(3), || fences()
                .iter()
                .zip(&before)
                .all(|(now, then)| now > then)),
            "round {round}: the attempts never reached the third server: {before:?}"
        );
        // ...and each member is released there, after its attempt.
        assert!(
            wait_until(Duration::from_secs(3), || held(&servers[2]) == 0),
            "round {round}: the slow server still holds a released member"
        );
        assert_eq!(held(&servers[0]) + held(&servers[1]), 0, "round {round}");
    }
}

#[test]
fn a_lost_reply_of_the_one_script_leaves_none_held() {
    let server = RedisServer::start();
    let proxy = TcpProxy::start(server.port()).unwrap();
    let locks = client_for_proxy(&proxy);
    locks.ping().unwrap();
    // The script runs and takes all three; its reply is cut, and so is the resent one's.
    proxy.cut_next_replies(2);
    let err = locks.try_lock_all(["a", "b", "c"]).unwrap_err();
    assert!(err.is_connection_error(), "{err:?}");
    let held: i64 = redis::cmd("EXISTS")
        .arg("lock:{a}")
        .arg("lock:{b}")
        .arg("lock:{c}")
        .query(&mut server.connection())
        .unwrap();
    assert_eq!(
        held, 0,
        "given back under its token after the replies were lost"
    );
    // One lost reply only: the resent script finds them its own, and keeps them.
    proxy.cut_next_replies(1);
    let guard = locks.try_lock_all(["a", "b", "c"]).unwrap().expect("free");
    let fences: Vec<u64> = guard.fencing_tokens().iter().map(|(_, f)| *f).collect();
    for (n, f) in ["a", "b", "c"].iter().zip(&fences) {
        assert_eq!(locks.inspect(n).unwrap().unwrap().fencing_token, *f);
    }
    drop(guard);
}

/// The script's reply is lost, so is the resent script's, and so is the reply to the undo of
/// the first member: the caller gets its connection error at once, and every member is given
/// back once Redis answers (the first in the background), not left to its 30 s TTL.
#[test]
fn a_multi_lock_whose_undo_reply_is_lost_too_is_given_back_in_the_background() {
    let server = RedisServer::start();
    let proxy = TcpProxy::start(server.port()).unwrap();
    let locks = client_for_proxy(&proxy);
    drop(locks.lock_all(["m:x", "m:y"]).unwrap());
    proxy.cut_next_replies(3);
    let err = locks
        .acquire_all_with(
            ["m:x", "m:y"],
            &LockOptions::new().ttl(Duration::from_secs(30)),
        )
        .unwrap_err();
    assert!(err.is_connection_error(), "{err:?}");
    let mut raw = server.connection();
    let mut held = || {
        redis::cmd("EXISTS")
            .arg("lock:{m:x}")
            .arg("lock:{m:y}")
            .query::<i64>(&mut raw)
            .unwrap()
    };
    assert!(
        wait_until(Duration::from_secs(5), || held() == 0),
        "{} member(s) held by nobody",
        held()
    );
    assert!(wait_until(Duration::from_secs(2), || {
        locks.registrations().giving_back == 0
    }));
}

/// Without loss notification: its connections' traffic through the proxy (the listener's
/// setup, a check 2 ms into a hold) could take a reply the proxy cuts instead of the script's.
fn client_for_proxy(proxy: &TcpProxy) -> LockClient {
    redis_lock_tests::client_without_notification(&proxy.url())
}

#[test]
fn bad_input_is_refused_before_anything_is_sent() {
    let server = RedisServer::start();
    let locks = client(&server);
    let before = locks.request_count();
    let too_many: Vec<String> = (0..=MAX_LOCK_ALL).map(|i| format!("k{i}")).collect();
    let cases: Vec<(Vec<String>, LockOptions)> = vec![
        (vec![], LockOptions::new()),
        (vec!["a".into(), "b".into(), "a".into()], LockOptions::new()),
        (too_many, LockOptions::new()),
        (vec!["a".into(), String::new()], LockOptions::new()),
        (vec!["a".into(), "}x".into()], LockOptions::new()),
        (vec!["a".into()], LockOptions::new().ttl(Duration::ZERO)),
        (
            vec!["a".into()],
            LockOptions::new().hold_at_least(Duration::from_secs(1)),
        ),
        (
            vec!["a".into()],
            LockOptions::new().replicas(1, Duration::from_secs(1)),
        ),
        (vec!["a".into()], LockOptions::new().reentrant(true)),
        (
            vec!["a".into()],
            LockOptions::new().retry(RetryStrategy::fair()),
        ),
        (vec!["a".into()], LockOptions::new().mode(LockMode::Read)),
        (vec!["a".into()], LockOptions::new().mode(LockMode::Write)),
    ];
    for (names, opts) in cases {
        let err = locks.try_acquire_all_with(&names, &opts).unwrap_err();
        assert!(
            matches!(err, Error::InvalidInput { .. }),
            "{names:?}: {err:?}"
        );
    }
    assert_eq!(locks.request_count(), before, "nothing sent");
    let keys: i64 = redis::cmd("DBSIZE")
        .query(&mut server.connection())
        .unwrap();
    assert_eq!(keys, 0, "Redis untouched");
    // A name this thread holds: at once, its own error for a waiting call; busy for the
    // `try_` family, as `try_lock` answers.
    let held = locks.lock("a").unwrap();
    let err = locks.lock_all(["b", "a"]).map(drop).unwrap_err();
    assert!(
        matches!(&err, Error::AlreadyHeld { key } if key == "a"),
        "{err:?}"
    );
    assert!(matches!(locks.try_lock_all(["b", "a"]), Ok(None)));
    assert!(matches!(
        locks.try_lock_all_for(["b", "a"], Duration::from_secs(30)),
        Ok(None)
    ));
    drop(held);
}

#[test]
fn a_waiting_multi_lock_can_be_cancelled() {
    let server = RedisServer::start();
    let locks = client(&server);
    let _holder = client(&server).lock("b").unwrap();
    let cancel = CancelToken::new();
    let waiter = {
        let (locks, cancel) = (locks.clone(), cancel.clone());
        std::thread::spawn(move || {
            let r = locks.acquire_all_with(["a", "b"], &LockOptions::new().cancel(cancel));
            (Instant::now(), r.map(|_| ()))
        })
    };
    assert!(wait_until(Duration::from_secs(10), || {
        redis::cmd("ZCARD")
            .arg("lock:{b}:waiters")
            .query::<usize>(&mut server.connection())
            .unwrap()
            == 1
    }));
    let cancelled = Instant::now();
    cancel.cancel();
    let (returned, result) = waiter.join().unwrap();
    assert!(matches!(result, Err(Error::Cancelled { .. })), "{result:?}");
    // At once (a missed cancel waits out the holder's TTL, 30 s); the allowance is for a
    // loaded machine's scheduling, which can stall a thread for hundreds of milliseconds.
    let took = returned.duration_since(cancelled);
    assert!(took < Duration::from_millis(1000), "{took:?}");
    assert!(locks.inspect("a").unwrap().is_none());
}

#[test]
fn fencing_tokens_increase_per_member_and_extend_reaches_every_member() {
    let server = RedisServer::start();
    let locks = client(&server);
    let first = locks.lock_all(["f1", "f2"]).unwrap();
    let before: Vec<u64> = first.fencing_tokens().iter().map(|(_, f)| *f).collect();
    first.extend(Duration::from_secs(120)).unwrap();
    for n in ["f1", "f2"] {
        let pttl: i64 = redis::cmd("PTTL")
            .arg(format!("lock:{{{n}}}"))
            .query(&mut server.connection())
            .unwrap();
        assert!(pttl > 60_000, "{n}: {pttl}");
    }
    drop(first);
    // A single lock of one member in between uses a token too.
    let single = locks.lock("f2").unwrap().fencing_token();
    let second = locks.lock_all(["f2", "f1"]).unwrap();
    let after: Vec<u64> = second.fencing_tokens().iter().map(|(_, f)| *f).collect();
    assert!(after[0] > before[0], "{after:?} after {before:?}");
    assert!(
        after[1] > single && single > before[1],
        "{after:?} {single} {before:?}"
    );
}

/// Across Cluster slots the members are taken one by one: the node serving the last one is
/// killed, so that member fails after the first two were taken; both are given back.
#[test]
fn a_cluster_node_killed_under_the_last_member_leaves_none_held() {
    let cluster = RedisCluster::start(3);
    let node_of = |name: &str| {
        cluster
            .node_for_slot(cluster.keyslot(&format!("lock:{{{name}}}")))
            .port()
    };
    let victim_port = cluster.nodes()[2].port();
    // The last name (by sort order) on the victim, the others elsewhere.
    let last = (0..200)
        .map(|i| format!("z{i}"))
        .find(|n| node_of(n) == victim_port)
        .unwrap();
    let others: Vec<String> = (0..200)
        .map(|i| format!("a{i}"))
        .filter(|n| node_of(n) != victim_port)
        .take(2)
        .collect();
    let locks = cluster_client(&cluster);
    // Warm the client up (topology, script cache) while every node is there.
    drop(locks.lock_all([&others[0], &others[1]]).unwrap());
    let pid = libc::pid_t::try_from(cluster.nodes()[2].pid().unwrap()).unwrap();
    // SAFETY: no memory-safety preconditions; the pid is our own child's.
    unsafe { libc::kill(pid, libc::SIGKILL) };
    assert!(wait_until(Duration::from_secs(5), || {
        std::net::TcpStream::connect(("127.0.0.1", victim_port)).is_err()
    }));

    let node = |name: &str| {
        let port = node_of(name);
        cluster.nodes().iter().find(|n| n.port() == port).unwrap()
    };
    let fence = |name: &str| -> u64 {
        redis::cmd("GET")
            .arg(format!("lock:{{{name}}}:fence"))
            .query(&mut node(name).connection())
            .unwrap()
    };
    let before: Vec<u64> = others.iter().map(|n| fence(n)).collect();

    let names = [&others[0], &others[1], &last];
    let err = locks.try_lock_all(names).unwrap_err();
    assert!(err.is_retryable(), "{err:?}");
    for (name, before) in others.iter().zip(before) {
        assert!(fence(name) > before, "{name} was taken before the failure");
        let held: i64 = redis::cmd("EXISTS")
            .arg(format!("lock:{{{name}}}"))
            .query(&mut node(name).connection())
            .unwrap();
        assert_eq!(held, 0, "{name} was given back");
    }
}

/// Under reply cuts (one reply in flight cut every few tens of milliseconds), no member of a
/// multi-lock is reported lost while Redis still holds it with time left: a loss reported
/// `RenewalFailed` must mean the member ran out, not that a renewal of a member whose
/// acquisition's reply came late raced the local expiry.
#[test]
fn no_member_is_reported_lost_while_redis_holds_it() {
    let server = RedisServer::start();
    let proxy = TcpProxy::start(server.port()).unwrap();
    let locks = LockClient::builder(&proxy.url())
        .io_timeout(Duration::from_millis(500))
        .build()
        .unwrap();
    let url = server.url();
    let spurious = Arc::new(AtomicU64::new(0));
    let losses = Arc::new(AtomicU64::new(0));
    let acquisitions = Arc::new(AtomicU64::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let started = Instant::now();
    let run = Duration::from_secs(8);
    std::thread::scope(|s| {
        let cutter = s.spawn(|| {
            for _ in 0..10_000 {
                if stop.load(Ordering::SeqCst) {
                    break;
                }
                proxy.cut_next_replies(1);
                std::thread::sleep(Duration::from_millis(40));
            }
        });
        let threads: Vec<_> = (0..4u64)
            .map(|t| {
                let (locks, url) = (locks.clone(), url.clone());
                let (spurious, losses, acquisitions) = (
                    Arc::clone(&spurious),
                    Arc::clone(&losses),
                    Arc::clone(&acquisitions),
                );
                std::thread::spawn(move || {
                    let mut rng = Rng(0x2545_F491_4F6C_DD1D ^ (t + 1));
                    for _ in 0..10_000 {
                        if started.elapsed() >= run {
                            break;
                        }
                        let subset = rng.subset();
                        let (spurious, losses, url) =
                            (Arc::clone(&spurious), Arc::clone(&losses), url.clone());
                        let opts = LockOptions::new()
                            .ttl(Duration::from_millis(1500))
                            .wait(Duration::from_secs(10))
                            .on_lost(move |event| {
                                losses.fetch_add(1, Ordering::SeqCst);
                                let mut con = redis::Client::open(url.as_str())
                                    .unwrap()
                                    .get_connection()
                                    .unwrap();
                                let pttl: i64 = redis::cmd("PTTL")
                                    .arg(format!("lock:{{{}}}", event.key))
                                    .query(&mut con)
                                    .unwrap();
                                eprintln!("lost {} {:?} pttl {pttl}", event.key, event.reason);
                                if pttl > 300
                                    && event.reason == redis_lock::LostReason::RenewalFailed
                                {
                                    spurious.fetch_add(1, Ordering::SeqCst);
                                }
                            });
                        let Ok(guard) = locks.acquire_all_with(&subset, &opts) else {
                            continue;
                        };
                        acquisitions.fetch_add(1, Ordering::SeqCst);
                        std::thread::sleep(Duration::from_millis(5));
                        let _ = guard.release();
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        stop.store(true, Ordering::SeqCst);
        cutter.join().unwrap();
    });
    eprintln!(
        "{} acquisitions, {} losses",
        acquisitions.load(Ordering::SeqCst),
        losses.load(Ordering::SeqCst)
    );
    assert!(acquisitions.load(Ordering::SeqCst) > 0);
    assert_eq!(
        spurious.load(Ordering::SeqCst),
        0,
        "members reported lost while held"
    );
}
