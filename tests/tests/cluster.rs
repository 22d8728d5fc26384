//! Redis Cluster: locks spread over the masters (and `list` finds them on every master), all
//! keys of one lock in one slot (also for
//! names with braces), waiting routed to the slot's master, and a lock that lives through a
//! slot migration.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use redis_lock::testing::RedisCluster;
use redis_lock::{Error, LockClient, ReleaseOutcome};
use redis_lock_tests::{cluster_client, wait_until, zcard};

/// The Redis keys of lock `name` under the default namespace (as ARCHITECTURE.md lays out).
fn redis_keys(name: &str) -> [String; 3] {
    let lock = format!("lock:{{{name}}}");
    [
        lock.clone(),
        format!("{lock}:fence"),
        format!("{lock}:signal"),
    ]
}

/// Whether `node` stores `key` (a node that does not serve the key's slot answers `MOVED`).
fn exists(node: &redis_lock::testing::RedisServer, key: &str) -> bool {
    redis::cmd("EXISTS")
        .arg(key)
        .query::<i64>(&mut node.connection())
        .is_ok_and(|n| n == 1)
}

/// The keys a node stores in `slot` (works while the slot is being imported, where a plain
/// `EXISTS` would be redirected).
fn keys_in_slot(node: &redis_lock::testing::RedisServer, slot: u16) -> Vec<String> {
    redis::cmd("CLUSTER")
        .arg("GETKEYSINSLOT")
        .arg(slot)
        .arg(100)
        .query(&mut node.connection())
        .unwrap()
}

#[test]
fn locks_spread_over_masters_and_live_on_their_slot_owner() {
    let cluster = RedisCluster::start(3);
    let locks = cluster_client(&cluster);
    let mut owners = HashSet::new();
    let mut guards = Vec::new();
    for i in 0..30 {
        let name = format!("job-{i}");
        let [lock, fence, signal] = redis_keys(&name);
        let slot = cluster.keyslot(&lock);
        assert_eq!(cluster.keyslot(&fence), slot);
        assert_eq!(cluster.keyslot(&signal), slot);
        let owner = cluster.node_for_slot(slot);
        owners.insert(owner.port());
        let guard = locks.try_lock(&name).unwrap().expect("free lock");
        assert!(
            exists(owner, &lock),
            "{lock} is on the master of slot {slot}"
        );
        assert!(exists(owner, &fence));
        for other in cluster.nodes().iter().filter(|n| n.port() != owner.port()) {
            assert!(!exists(other, &lock), "only the slot's master has {lock}");
        }
        guards.push(guard);
    }
    assert!(
        owners.len() >= 2,
        "30 locks landed on {} master(s)",
        owners.len()
    );
    // Held everywhere: a second client is refused each one, through whichever master.
    let other = cluster_client(&cluster);
    for i in 0..30 {
        assert!(other.try_lock(&format!("job-{i}")).unwrap().is_none());
    }
    // `list` scans every master, not just the node a connection happens to pick.
    let listed: Vec<String> = other
        .list("job-*")
        .unwrap()
        .into_iter()
        .map(|i| i.key)
        .collect();
    let mut expected: Vec<String> = (0..30).map(|i| format!("job-{i}")).collect();
    expected.sort();
    assert_eq!(
        listed,
        expected,
        "every lock, from {} masters",
        owners.len()
    );
    for guard in guards {
        assert_eq!(guard.release().unwrap(), ReleaseOutcome::Released);
    }
    assert!(other.list("job-*").unwrap().is_empty());
    assert!(other.try_lock("job-0").unwrap().is_some());
}

#[test]
fn mutual_exclusion_per_key_on_a_cluster() {
    let cluster = RedisCluster::start(3);
    let names: Vec<String> = (0..4).map(|i| format!("counter-{i}")).collect();
    let owners: HashSet<u16> = names
        .iter()
        .map(|n| cluster.port_for_slot(cluster.keyslot(&redis_keys(n)[0])))
        .collect();
    assert!(owners.len() >= 2, "the counters should span masters");
    const THREADS: usize = 4;
    const ROUNDS: u64 = 25;
    let counters: Arc<HashMap<String, (AtomicU64, AtomicBool)>> = Arc::new(
        names
            .iter()
            .map(|n| (n.clone(), (AtomicU64::new(0), AtomicBool::new(false))))
            .collect(),
    );
    let clients: Vec<LockClient> = (0..2).map(|_| cluster_client(&cluster)).collect();
    std::thread::scope(|s| {
        for t in 0..THREADS {
            let locks = clients[t % 2].clone();
            let counters = Arc::clone(&counters);
            let names = names.clone();
            s.spawn(move || {
                for round in 0..ROUNDS {
                    for name in &names {
                        let guard = locks
                            .options(name)
                            .ttl(Duration::from_secs(10))
                            .wait(Duration::from_secs(30))
                            .acquire()
                            .unwrap();
                        let (count, inside) = &counters[name];
                        assert!(
                            !inside.swap(true, Ordering::SeqCst),
                            "two holders of {name}"
                        );
                        // Read, pause, write: a second holder in between would lose an update.
                        let v = count.load(Ordering::SeqCst);
                        if round % 5 == 0 {
                            std::thread::sleep(Duration::from_millis(1));
                        } else {
                            std::thread::yield_now();
                        }
                        count.store(v + 1, Ordering::SeqCst);
                        inside.store(false, Ordering::SeqCst);
                        assert_eq!(guard.release().unwrap(), ReleaseOutcome::Released);
                    }
                }
            });
        }
    });
    for name in &names {
        assert_eq!(
            counters[name].0.load(Ordering::SeqCst),
            THREADS as u64 * ROUNDS,
            "{name}"
        );
    }
}

#[test]
fn names_with_braces_keep_every_key_in_one_slot() {
    let cluster = RedisCluster::start(3);
    let locks = cluster_client(&cluster);
    let other = cluster_client(&cluster);
    let names = ["{user}", "a}b{c", "x{y}z", "{}", "{{", "x}}", "tail{"];
    for name in names {
        let [lock, fence, signal] = redis_keys(name);
        let slot = cluster.keyslot(&lock);
        assert_eq!(cluster.keyslot(&fence), slot, "{name}");
        assert_eq!(cluster.keyslot(&signal), slot, "{name}");
        let guard = locks.try_lock(name).unwrap().expect("free lock");
        assert!(exists(cluster.node_for_slot(slot), &lock), "{name}");
        assert!(other.try_lock(name).unwrap().is_none(), "{name}");
        let info = other.inspect(name).unwrap().expect("held");
        assert_eq!(info.fencing_token, guard.fencing_token());
        assert_eq!(guard.release().unwrap(), ReleaseOutcome::Released);
        assert!(other.try_lock(name).unwrap().is_some(), "{name}");
    }
    // A name whose braces would break the tag is refused, not scattered over slots.
    assert!(matches!(
        locks.try_lock("}x"),
        Err(Error::InvalidInput { what: "key", .. })
    ));
}

#[test]
fn waiter_blocks_on_the_slot_owner_and_is_woken_by_the_release() {
    let cluster = RedisCluster::start(3);
    let holder = cluster_client(&cluster);
    let waiter = cluster_client(&cluster);
    let name = "wake-me";
    let owner = cluster.node_for_slot(cluster.keyslot(&redis_keys(name)[0]));
    let guard = holder
        .options(name)
        .ttl(Duration::from_secs(30))
        .acquire()
        .unwrap();
    let started = Instant::now();
    let waiting = std::thread::spawn(move || {
        let g = waiter
            .try_lock_for(name, Duration::from_secs(20))
            .unwrap()
            .expect("woken by the release");
        (started.elapsed(), g.fencing_token())
    });
    // The waiter is blocked in BLPOP on the master that owns the slot.
    // (`blocked_clients`, not commandstats: Redis 7.0 counts a BLPOP when it blocks, Redis
    // 7.2+ and Valkey when it returns.)
    assert!(wait_until(Duration::from_secs(10), || owner
        .info_field("clients", "blocked_clients")
        .is_ok_and(|n| n != "0")));
    let fence = guard.fencing_token();
    assert_eq!(guard.release().unwrap(), ReleaseOutcome::Released);
    let (waited, next_fence) = waiting.join().unwrap();
    // Woken by the release, not by the holder's 30 s TTL or the 20 s budget.
    assert!(waited < Duration::from_secs(10), "waited {waited:?}");
    assert!(next_fence > fence);
}

/// Moves the slot of a held lock to another master while the holder keeps renewing it.
///
/// While the slot migrates, Redis runs a multi-key script only where *all* its keys are (and
/// some of a lock's keys, such as the wake-up list, usually do not exist): it answers
/// `TRYAGAIN` (keys split between the nodes) or `ASK` then `TRYAGAIN` (all moved). The client
/// retries those for about 2 s, then fails the call with an error for which
/// `Error::is_retryable()` is true; a real reshard moves a slot in milliseconds. Renewal and
/// the holder's TTL check touch the lock key alone, so they keep working throughout (following
/// `ASK`) and the holder does not lose its lock. After the slot has moved (`MOVED`), the lock
/// is still held, renewed, released, and its fencing counter moved along.
#[test]
fn lock_survives_a_slot_migration() {
    let cluster = RedisCluster::start(3);
    let holder = cluster_client(&cluster);
    let other = cluster_client(&cluster);
    let name = "migrating";
    let [lock, fence_key, _] = redis_keys(name);
    let slot = cluster.keyslot(&lock);
    let source = cluster.node_for_slot(slot).port();
    let target = cluster
        .nodes()
        .iter()
        .position(|n| n.port() != source)
        .unwrap();
    let target_port = cluster.nodes()[target].port();

    let guard = holder
        .options(name)
        .ttl(Duration::from_millis(900))
        .acquire()
        .unwrap();
    let fence = guard.fencing_token();
    let renewals_hold = |what: &str| {
        // Three renewal periods (300 ms each): the watchdog keeps the lock.
        let until = Instant::now() + Duration::from_millis(1000);
        while Instant::now() < until {
            assert!(!guard.is_lost(), "lost {what}");
            std::thread::sleep(Duration::from_millis(50));
        }
        assert!(guard.remaining_ttl().unwrap().is_some(), "{what}");
    };
    let refused_retryably = |what: &str| {
        let started = Instant::now();
        let err = other.try_lock(name).map(|g| g.is_some()).unwrap_err();
        assert!(err.is_retryable(), "{what}: {err}");
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "{what}: retries are bounded"
        );
    };

    let migration = cluster.begin_migration(slot, target);
    // Split: only the fence counter has moved; the lock key is still on the source.
    redis::cmd("MIGRATE")
        .arg("127.0.0.1")
        .arg(target_port)
        .arg(&fence_key)
        .arg(0)
        .arg(5000)
        .query::<()>(&mut cluster.node_for_slot(slot).connection())
        .unwrap();
    refused_retryably("with the keys split");
    renewals_hold("with the keys split");

    // Every key moved, the slot still migrating.
    while migration.move_keys(10) > 0 {}
    assert!(keys_in_slot(&cluster.nodes()[target], slot).contains(&lock));
    assert!(keys_in_slot(cluster.node_for_slot(slot), slot).is_empty());
    refused_retryably("with all keys moved");
    renewals_hold("with all keys moved");

    migration.finish();
    assert_eq!(cluster.port_for_slot(slot), target_port);
    renewals_hold("after the slot moved");
    assert!(other.try_lock(name).unwrap().is_none(), "held, via MOVED");
    assert_eq!(guard.release().unwrap(), ReleaseOutcome::Released);
    let next = other.try_lock(name).unwrap().expect("free after release");
    assert!(
        next.fencing_token() > fence,
        "the fence counter moved along"
    );
    assert!(exists(&cluster.nodes()[target], &lock));
}

/// Fair mode on a cluster: each fair waiter blocks on its own wake-up list
/// (`<signal>:<waiter id>`, a key the release script builds from the lock's hash tag, so it
/// is in the lock's slot), and releases hand the lock over in arrival order.
#[test]
fn fair_waiters_are_served_in_arrival_order_on_a_cluster() {
    let cluster = RedisCluster::start(3);
    let name = "fair-queue";
    let owner = cluster.node_for_slot(cluster.keyslot(&redis_keys(name)[0]));
    let queue = format!("{}:queue", redis_keys(name)[0]);
    let fair = redis_lock::LockOptions::new()
        .ttl(Duration::from_secs(30))
        .wait(Duration::from_secs(30))
        .retry(redis_lock::RetryStrategy::fair());
    let holder = cluster_client(&cluster);
    let guard = holder.acquire_with(name, &fair).unwrap();
    let order = Arc::new(std::sync::Mutex::new(Vec::new()));
    const N: usize = 3;
    let mut threads = Vec::new();
    for i in 0..N {
        let locks = cluster_client(&cluster);
        let (order, fair) = (Arc::clone(&order), fair.clone());
        threads.push(std::thread::spawn(move || {
            let g = locks.acquire_with(name, &fair).unwrap();
            order.lock().unwrap().push(i);
            drop(g);
        }));
        // The next one starts once this one holds its ticket: a known arrival order.
        assert!(wait_until(Duration::from_secs(10), || zcard(owner, &queue) == i + 1));
    }
    let started = Instant::now();
    drop(guard);
    for t in threads {
        t.join().unwrap();
    }
    // Woken by releases, not by the 30 s TTLs.
    assert!(started.elapsed() < Duration::from_secs(10));
    assert_eq!(*order.lock().unwrap(), (0..N).collect::<Vec<_>>());
    assert_eq!(zcard(owner, &queue), 0);
}

/// A release that hands the lock to the head of the fair queue writes that waiter's own
/// wake-up list, which the script names itself. While the slot migrates that list can be on
/// the other node even when every declared key is here (so Redis runs the script here): the
/// handover is then refused with a retryable error before anything is written, and made
/// once the slot has moved.
#[test]
fn a_fair_handover_waits_for_a_migrating_slot() {
    let cluster = RedisCluster::start(3);
    let holder = cluster_client(&cluster);
    let operator = cluster_client(&cluster);
    let name = "fair-migrating";
    let [lock, _, signal] = redis_keys(name);
    let (waiters, queue) = (format!("{lock}:waiters"), format!("{lock}:queue"));
    let slot = cluster.keyslot(&lock);
    let source = cluster.node_for_slot(slot);
    let target = cluster
        .nodes()
        .iter()
        .position(|n| n.port() != source.port())
        .unwrap();
    // Taken through the script (fair mode), so the lock is a hash, as it is once a waiter has
    // registered for it (a registration turns a natively taken string lock into a hash).
    let guard = holder
        .options(name)
        .ttl(Duration::from_secs(30))
        .retry(redis_lock::RetryStrategy::fair())
        .acquire()
        .unwrap();
    // A fair waiter queued for a minute (written as the acquire script would), and a shared
    // wake-up list, so that every key the release declares exists on the source.
    let head = "feedfacefeedface";
    let mut con = source.connection();
    let (secs, _): (u64, u64) = redis::cmd("TIME").query(&mut con).unwrap();
    let lapse = (secs + 60) * 1000;
    redis::pipe()
        .zadd(&waiters, head, lapse)
        .zadd(&queue, head, 1)
        .rpush(&signal, "unrelated")
        .query::<()>(&mut con)
        .unwrap();
    let migration = cluster.begin_migration(slot, target);
    let started = Instant::now();
    let err = operator.force_release(name).unwrap_err();
    assert!(err.is_retryable(), "{err}");
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "retries are bounded"
    );
    // Nothing was written: still ours, the waiter still queued, no grant.
    assert!(guard.remaining_ttl().unwrap().is_some());
    assert_eq!(zcard(source, &queue), 1);
    let handoff: Option<String> = redis::cmd("HGET")
        .arg(&lock)
        .arg("handoff")
        .query(&mut con)
        .unwrap();
    assert_eq!(handoff, None);

    migration.finish();
    let target = &cluster.nodes()[target];
    assert_eq!(guard.release().unwrap(), ReleaseOutcome::Released);
    let mut con = target.connection();
    let handoff: Option<String> = redis::cmd("HGET")
        .arg(&lock)
        .arg("handoff")
        .query(&mut con)
        .unwrap();
    assert_eq!(
        handoff.as_deref(),
        Some(head),
        "granted to the head of the queue"
    );
    let wake: usize = redis::cmd("LLEN")
        .arg(format!("{signal}:{head}"))
        .query(&mut con)
        .unwrap();
    assert_eq!(wake, 1, "the grant waits on the head's own list");
}
