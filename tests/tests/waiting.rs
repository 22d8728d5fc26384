//! Many threads waiting through one client, against real redis-server processes: they share
//! one blocking connection per lock name, each is woken by the release that frees its turn
//! (no polling: commands per acquisition do not grow with the waiters), cancels among
//! hundreds leave nothing behind, a killed process of waiting threads leaves no stuck grant,
//! and fair mode keeps its order.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use redis_lock::{CancelToken, Error, LockClient, LockOptions, RetryStrategy};
use redis_lock_tests::{
    RedisServer, blocked_clients, client, signal, spawn_holder, wait_until, zcard,
};

const HOLDER: &str = env!("CARGO_BIN_EXE_lock-holder");

/// Small stacks: a thousand threads.
fn spawn<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> std::thread::JoinHandle<T> {
    std::thread::Builder::new()
        .stack_size(256 * 1024)
        .spawn(f)
        .unwrap()
}

fn connected_clients(server: &RedisServer) -> u64 {
    server
        .info_field("clients", "connected_clients")
        .unwrap()
        .parse()
        .unwrap()
}

fn registered(server: &RedisServer, name: &str) -> usize {
    zcard(server, &format!("lock:{{{name}}}:waiters"))
}

/// `threads` threads of `locks` wait on `names` (spread evenly) while a holder holds each,
/// then every one acquires once (holding 1 ms). Returns the client's requests per
/// acquisition and the most connections Redis saw while they waited.
fn everyone_in_turn(
    server: &RedisServer,
    locks: &LockClient,
    names: &[String],
    threads: usize,
) -> (f64, u64) {
    let holder = client(server);
    let guards: Vec<_> = names.iter().map(|n| holder.lock(n).unwrap()).collect();
    let before = locks.request_count();
    let got = Arc::new(AtomicUsize::new(0));
    let waiting: Vec<_> = (0..threads)
        .map(|i| {
            let (locks, got) = (locks.clone(), Arc::clone(&got));
            let name = names[i % names.len()].clone();
            spawn(move || {
                let g = locks
                    .try_lock_for(&name, Duration::from_secs(120))
                    .unwrap()
                    .expect("every waiter gets the lock in turn");
                got.fetch_add(1, Ordering::SeqCst);
                std::thread::sleep(Duration::from_millis(1));
                drop(g);
            })
        })
        .collect();
    let per_name = threads / names.len();
    for name in names {
        assert!(
            wait_until(Duration::from_secs(60), || registered(server, name)
                == per_name),
            "{name}: {} of {per_name} registered",
            registered(server, name)
        );
    }
    // Every waiter blocked in one of the lock names' BLPOPs: one blocked client per name.
    assert!(
        wait_until(Duration::from_secs(10), || blocked_clients(server)
            == names.len() as u64),
        "{} clients blocked for {} names",
        blocked_clients(server),
        names.len()
    );
    let connections = connected_clients(server);
    let waited = locks.request_count() - before;
    drop(guards);
    for t in waiting {
        t.join().unwrap();
    }
    assert_eq!(got.load(Ordering::SeqCst), threads);
    let requests = locks.request_count() - before;
    // While they waited: an attempt each (two for the first ones, whose native attempt found
    // the lock busy) and a BLPOP per name, nothing more (no polling).
    assert!(
        waited <= (2 * threads + 3 * names.len()) as u64,
        "{waited} requests for {threads} threads to start waiting"
    );
    (requests as f64 / threads as f64, connections)
}

#[test]
fn hundreds_of_threads_on_one_client_acquire_in_turn_without_polling() {
    let server = RedisServer::start();
    let locks = client(&server);
    let names = ["one".to_owned()];
    let (few, _) = everyone_in_turn(&server, &locks, &names, 8);
    let (many, connections) = everyone_in_turn(&server, &locks, &names, 256);
    // Commands per acquisition do not grow with the number of waiters: an attempt, the
    // BLPOP that pops the grant (and one more when the leadership changes hands), a release.
    assert!(
        few <= 6.0 && many <= 6.0,
        "requests per acquisition: 8 threads {few:.2}, 256 threads {many:.2}"
    );
    // The lock pool (16) and one waiting connection, whatever the number of threads; the
    // holder's client's and this client's loss notification (3 each, once a lock was held
    // 2 ms: the listener, the tracked connection and the canary's).
    assert!(
        connections <= 16 + 4 + 6,
        "{connections} connections for 256 waiting threads"
    );
}

#[test]
fn a_thousand_threads_on_one_client_work_without_raising_pool_sizes() {
    let server = RedisServer::start();
    // The defaults a new user gets (16 connections, 5 s to get one): 1,024 threads starting
    // at once on a loaded machine can wait longer than the tests' usual 2 s for a connection.
    let locks = LockClient::open(&server.url()).unwrap();
    let names: Vec<String> = (0..16).map(|i| format!("k{i}")).collect();
    let (per_acquisition, connections) = everyone_in_turn(&server, &locks, &names, 1024);
    assert!(
        per_acquisition <= 6.0,
        "{per_acquisition:.2} requests per acquisition"
    );
    // The lock pool (16) and one waiting connection per name (16); loss notification's, as
    // above.
    assert!(
        connections <= 16 + 16 + 4 + 6,
        "{connections} connections for 1024 threads on 16 names"
    );
}

/// `n` threads of one client wait on `name` with a cancel token each; every other one is
/// cancelled. The cancelled ones return `Cancelled` promptly and leave no registration; the
/// others then all acquire in turn, and nothing but the fencing counter is left.
fn cancel_among_many(fair: bool, n: usize) {
    let server = RedisServer::start();
    let locks = client(&server);
    let name = if fair { "cancel-fair" } else { "cancel-notify" };
    let retry = if fair {
        RetryStrategy::fair()
    } else {
        RetryStrategy::notify()
    };
    let holder = client(&server);
    let guard = holder.lock(name).unwrap();
    let tokens: Vec<CancelToken> = (0..n).map(|_| CancelToken::new()).collect();
    let waiting: Vec<_> = tokens
        .iter()
        .map(|token| {
            let locks = locks.clone();
            let opts = LockOptions::new()
                .wait(Duration::from_secs(60))
                .retry(retry.clone())
                .cancel(token.clone());
            spawn(move || locks.acquire_with(name, &opts).map(drop))
        })
        .collect();
    let queue = if fair { "queue" } else { "waiters" };
    let key = format!("lock:{{{name}}}:{queue}");
    assert!(wait_until(Duration::from_secs(30), || zcard(&server, &key) == n));
    // The first to arrive is likely the group's leader: cancel it among the others.
    let started = Instant::now();
    for token in tokens.iter().step_by(2) {
        token.cancel();
    }
    let mut outcomes = Vec::new();
    for (i, t) in waiting.into_iter().enumerate() {
        if i % 2 == 0 {
            let r = t.join().unwrap();
            assert!(matches!(r, Err(Error::Cancelled { .. })), "{r:?}");
        } else {
            outcomes.push(t);
        }
    }
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "cancels took {:?}",
        started.elapsed()
    );
    assert!(
        wait_until(Duration::from_secs(5), || zcard(&server, &key) == n / 2),
        "{} registrations left for {} waiters",
        zcard(&server, &key),
        n / 2
    );
    drop(guard);
    for t in outcomes {
        t.join().unwrap().unwrap();
    }
    let mut redis = server.connection();
    let keys: Vec<String> = redis::cmd("KEYS").arg("*").query(&mut redis).unwrap();
    let mut left: Vec<_> = keys.iter().filter(|k| !k.contains(":cancel:")).collect();
    left.sort();
    assert_eq!(left, [&format!("lock:{{{name}}}:fence")]);
    // The next one gets the lock at once: no grant was left to nobody.
    let start = Instant::now();
    assert!(client(&server).try_lock(name).unwrap().is_some());
    assert!(start.elapsed() < Duration::from_millis(500));
}

#[test]
fn a_waiter_cancelled_among_hundreds_leaves_nothing_behind() {
    cancel_among_many(false, 200);
}

#[test]
fn a_fair_waiter_cancelled_among_many_leaves_nothing_behind() {
    cancel_among_many(true, 40);
}

#[test]
fn a_killed_process_of_waiting_threads_leaves_no_stuck_grant() {
    let server = RedisServer::start();
    let locks = client(&server);
    let guard = locks.lock("killed").unwrap();
    let mut dead = spawn_holder(HOLDER, &["wait-many", &server.url(), "killed", "50"]);
    assert!(wait_until(Duration::from_secs(30), || registered(
        &server, "killed"
    ) == 50));
    assert!(wait_until(Duration::from_secs(10), || blocked_clients(
        &server
    ) == 1));
    signal(&dead, libc::SIGKILL);
    dead.wait().unwrap();
    // Redis dropped the dead group's BLPOP with its connection.
    assert!(wait_until(Duration::from_secs(10), || blocked_clients(
        &server
    ) == 0));
    // The release grants the lock to a dead registration; a newcomer takes the grant nobody
    // popped instead of waiting for it to lapse.
    drop(guard);
    redis_lock_tests::a_newcomer_takes_it_at_once(&server, "killed");
}

#[test]
fn a_process_of_waiting_threads_gets_the_lock_in_turn() {
    let server = RedisServer::start();
    let locks = client(&server);
    let guard = locks.lock("other-process").unwrap();
    let mut child = spawn_holder(HOLDER, &["wait-many", &server.url(), "other-process", "20"]);
    assert!(wait_until(Duration::from_secs(30), || registered(
        &server,
        "other-process"
    ) == 20));
    drop(guard);
    // Every thread of the child prints ACQUIRED; the last one's line arrives within the bound.
    let stdout = child.stdout.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        use std::io::BufRead;
        let n = std::io::BufReader::new(stdout)
            .lines()
            .map_while(Result::ok)
            .filter(|l| l == "ACQUIRED")
            .take(20)
            .count();
        let _ = tx.send(n);
    });
    assert_eq!(rx.recv_timeout(Duration::from_secs(30)).unwrap(), 20);
    child.wait().unwrap();
}

#[test]
fn fair_mode_keeps_arrival_order_with_one_shared_client() {
    let server = RedisServer::start();
    let locks = client(&server);
    let fair = LockOptions::new()
        .wait(Duration::from_secs(30))
        .retry(RetryStrategy::fair());
    let guard = locks.acquire_with("fifo-shared", &fair).unwrap();
    let order = Arc::new(Mutex::new(Vec::new()));
    const N: usize = 12;
    let mut threads = Vec::new();
    for i in 0..N {
        let (locks, order, fair) = (locks.clone(), Arc::clone(&order), fair.clone());
        threads.push(spawn(move || {
            let g = locks.acquire_with("fifo-shared", &fair).unwrap();
            order.lock().unwrap().push(i);
            std::thread::sleep(Duration::from_millis(2));
            drop(g);
        }));
        // The next one starts only once this one holds its ticket: a known arrival order.
        assert!(wait_until(Duration::from_secs(10), || zcard(
            &server,
            "lock:{fifo-shared}:queue"
        ) == i + 1));
    }
    // One blocking connection for all of them.
    assert!(wait_until(Duration::from_secs(10), || blocked_clients(
        &server
    ) == 1));
    drop(guard);
    for t in threads {
        t.join().unwrap();
    }
    assert_eq!(*order.lock().unwrap(), (0..N).collect::<Vec<_>>());
}

/// `n` threads of `locks` wait on `name` until `registered` says they all wait (it releases
/// the holder's lock then), and all acquire in turn.
fn all_acquire_in_turn(locks: &LockClient, name: &str, n: usize, registered: impl Fn() -> bool) {
    let got = Arc::new(AtomicUsize::new(0));
    let waiting: Vec<_> = (0..n)
        .map(|_| {
            let (locks, got, name) = (locks.clone(), Arc::clone(&got), name.to_owned());
            spawn(move || {
                let g = locks
                    .try_lock_for(&name, Duration::from_secs(60))
                    .unwrap()
                    .expect("every waiter gets the lock in turn");
                got.fetch_add(1, Ordering::SeqCst);
                drop(g);
            })
        })
        .collect();
    assert!(
        wait_until(Duration::from_secs(30), registered),
        "the waiters never registered"
    );
    for t in waiting {
        t.join().unwrap();
    }
    assert_eq!(got.load(Ordering::SeqCst), n);
}

#[test]
fn threads_waiting_on_a_cluster_key_share_one_connection_to_its_node() {
    let cluster = redis_lock::testing::RedisCluster::start(3);
    let locks = redis_lock_tests::cluster_client(&cluster);
    let holder = redis_lock_tests::cluster_client(&cluster);
    let node = cluster.node_for_slot(cluster.keyslot("lock:{spread}"));
    let guard = holder.lock("spread").unwrap();
    let before = locks.request_count();
    let release = {
        let guard = std::sync::Mutex::new(Some(guard));
        move || drop(guard.lock().unwrap().take())
    };
    all_acquire_in_turn(&locks, "spread", 64, || {
        let ready = zcard(node, "lock:{spread}:waiters") == 64 && blocked_clients(node) == 1;
        if ready {
            release();
        }
        ready
    });
    let per_acquisition = (locks.request_count() - before) as f64 / 64.0;
    assert!(
        per_acquisition <= 6.0,
        "{per_acquisition:.2} requests per acquisition"
    );
}

#[test]
fn threads_waiting_under_redlock_peek_through_one_connection_per_server() {
    let servers = [
        RedisServer::start(),
        RedisServer::start(),
        RedisServer::start(),
    ];
    let refs: Vec<&RedisServer> = servers.iter().collect();
    // Reply timeouts well above what a loaded machine takes: 32 threads asking three servers
    // at once could see a 300 ms reply time out, and an attempt answered by one server only
    // fails with `NoQuorum` instead of waiting.
    let build = || {
        LockClient::redlock_builder(refs.iter().map(|s| s.url()))
            .io_timeout(Duration::from_secs(5))
            .build()
            .unwrap()
    };
    let locks = build();
    // The holder too: with a 300 ms reply timeout its renewals can fail on a loaded machine,
    // the lock is lost, and a waiter takes it before all of them have registered.
    let holder = build();
    let guard = holder.lock("peek").unwrap();
    let release = {
        let guard = std::sync::Mutex::new(Some(guard));
        move || drop(guard.lock().unwrap().take())
    };
    all_acquire_in_turn(&locks, "peek", 32, || {
        let registered = servers
            .iter()
            .all(|s| zcard(s, "lock:{peek}:waiters") == 32);
        let blocked: u64 = servers.iter().map(blocked_clients).sum();
        // One peek per server waited on, whatever the threads.
        assert!(
            blocked <= 3,
            "{blocked} clients blocked for 32 waiting threads"
        );
        let ready = registered && blocked >= 1;
        if ready {
            release();
        }
        ready
    });
}
