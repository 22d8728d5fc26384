//! Watching a lock from outside (`LockClient::observe`): an observer reports the state it
//! finds, then every change of a contended lock in order (tokens increasing), each within
//! milliseconds of the change through client-side tracking; a holder's renewals are not
//! changes; where the server does not notify (Redlock) it reads every third of the TTL and
//! says so; dropping it ends its thread and its registration; an observer of a semaphore
//! reports each change of its permits in use, a permit's expiry included.

use std::time::{Duration, Instant};

use redis_lock::testing::RedisServer;
use redis_lock::{LockClient, LockGuard};
use redis_lock_tests::{client, redlock_client, wait_until};

fn observer_threads() -> usize {
    redis_lock_tests::soak::thread_names()
        .iter()
        .filter(|n| n.starts_with("redis-lock-obse"))
        .count()
}

/// p99 of `n` `PING` round trips on a plain connection: the same run's reference.
fn ping_p99(server: &RedisServer, n: usize) -> Duration {
    let mut conn = server.connection();
    let mut times: Vec<Duration> = (0..n)
        .map(|_| {
            let t = Instant::now();
            let _: String = redis::cmd("PING").query(&mut conn).unwrap();
            t.elapsed()
        })
        .collect();
    times.sort();
    times[n * 99 / 100]
}

#[test]
fn an_observer_sees_each_change_within_milliseconds() {
    let server = RedisServer::start();
    let watcher = client(&server);
    let observer = watcher.observe("job").unwrap();
    let first = observer
        .recv_timeout(Duration::from_secs(5))
        .unwrap()
        .expect("the state now");
    assert!(first.now.is_none() && first.before.is_none(), "{first:?}");
    assert!(wait_until(Duration::from_secs(5), || observer.notified()));

    // Two holders take turns; each change is timed from just before it was made (the lock
    // is free, so a take is made at once).
    let holders = [client(&server), client(&server)];
    let mut delays = Vec::new();
    let mut tokens = Vec::new();
    for i in 0..20 {
        let at = Instant::now();
        let guard: LockGuard = holders[i % 2].lock("job").unwrap();
        let seen = observer
            .recv_timeout(Duration::from_secs(5))
            .unwrap()
            .expect("taken");
        delays.push(seen.seen_at.saturating_duration_since(at));
        assert!(seen.is_taken(), "{seen:?}");
        assert_eq!(
            seen.now.as_ref().map(|n| n.fencing_token),
            Some(guard.fencing_token())
        );
        tokens.push(guard.fencing_token());
        let at = Instant::now();
        drop(guard);
        let seen = observer
            .recv_timeout(Duration::from_secs(5))
            .unwrap()
            .expect("freed");
        delays.push(seen.seen_at.saturating_duration_since(at));
        assert!(seen.is_freed(), "{seen:?}");
        assert_eq!(seen.before.map(|b| b.fencing_token), tokens.last().copied());
    }
    assert!(tokens.windows(2).all(|w| w[0] < w[1]), "{tokens:?}");
    assert_eq!(
        observer.try_recv().unwrap(),
        None,
        "no change was reported twice"
    );
    delays.sort();
    let p99 = delays[delays.len() * 99 / 100];
    let reference = ping_p99(&server, 200);
    println!(
        "change -> observer over {} changes: p50 {:?}, p99 {p99:?}; PING p99 {reference:?}",
        delays.len(),
        delays[delays.len() / 2]
    );
    // 10 ms on a quiet machine; a loaded one (the suite's other tests) stretches every
    // round trip, which the same run's PING shows.
    assert!(
        p99 <= Duration::from_millis(10) + reference * 10,
        "p99 {p99:?}"
    );
}

#[test]
fn an_observer_sees_every_holder_of_a_contended_lock_in_order() {
    let server = RedisServer::start();
    let observer = client(&server).observe("busy").unwrap();
    assert!(observer.recv().unwrap().now.is_none());
    assert!(wait_until(Duration::from_secs(5), || observer.notified()));
    // Three threads contend, each holding 15 ms: a release often hands the lock straight to
    // a waiter, which the observer sees as a take with a new token (never as free).
    let takers: Vec<_> = (0..3)
        .map(|_| {
            let url = server.url();
            std::thread::spawn(move || {
                let locks = redis_lock_tests::client_for(&url);
                (0..8)
                    .map(|_| {
                        let guard = locks.lock("busy").unwrap();
                        std::thread::sleep(Duration::from_millis(15));
                        guard.fencing_token()
                    })
                    .collect::<Vec<u64>>()
            })
        })
        .collect();
    let mut taken: Vec<u64> = takers.into_iter().flat_map(|t| t.join().unwrap()).collect();
    taken.sort();
    let mut seen = Vec::new();
    while let Some(change) = observer.recv_timeout(Duration::from_millis(500)).unwrap() {
        if change.is_taken() {
            seen.push(change.now.unwrap().fencing_token);
        }
    }
    // Every acquisition seen as a take. Seen besides them: a release's grant to a waiter
    // that passed it on (a token nobody held). The tokens shown are `inspect`'s: a lock taken
    // on the native fast path while others attempt does not keep its token in Redis, and
    // shows the fencing counter's value, which their failed attempts move ahead of it; the
    // holders' own tokens are checked in order by the test above.
    assert!(
        seen.len() >= taken.len(),
        "{} takes seen of {}: {seen:?}",
        seen.len(),
        taken.len()
    );
    assert_eq!(seen.last(), taken.last(), "the last holder seen: {seen:?}");
}

#[test]
fn a_holders_renewals_are_not_changes_and_a_break_is() {
    let server = RedisServer::start();
    let locks = client(&server);
    let observer = locks.observe("renewed").unwrap();
    assert!(observer.recv().unwrap().now.is_none());
    let holder = client(&server);
    let guard = holder
        .options("renewed")
        .ttl(Duration::from_millis(300))
        .acquire()
        .unwrap();
    let taken = observer
        .recv_timeout(Duration::from_secs(5))
        .unwrap()
        .unwrap();
    assert!(taken.is_taken());
    // About six renewals: none is reported.
    assert_eq!(
        observer.recv_timeout(Duration::from_millis(600)).unwrap(),
        None
    );
    assert!(!guard.is_lost());
    // A break is: the lock is free.
    let start = Instant::now();
    locks.force_release("renewed").unwrap();
    let freed = observer
        .recv_timeout(Duration::from_secs(5))
        .unwrap()
        .unwrap();
    assert!(freed.is_freed(), "{freed:?}");
    println!("break seen after {:?}", freed.seen_at - start);
}

#[test]
fn under_redlock_an_observer_reads_every_third_of_the_ttl_and_says_so() {
    let servers = [
        RedisServer::start(),
        RedisServer::start(),
        RedisServer::start(),
    ];
    let refs: Vec<&RedisServer> = servers.iter().collect();
    let locks = redlock_client(&refs);
    let observer = locks.observe("q").unwrap();
    assert!(observer.recv().unwrap().now.is_none());
    assert!(!observer.notified());
    let guard = redlock_client(&refs).lock("q").unwrap();
    // The default TTL is 30 s: a read every 10 s. Seen within one interval.
    let taken = observer
        .recv_timeout(Duration::from_secs(12))
        .unwrap()
        .unwrap();
    assert_eq!(
        taken.now.map(|n| n.fencing_token),
        Some(guard.fencing_token())
    );
}

#[test]
fn dropping_an_observer_ends_its_thread_and_its_registration() {
    let server = RedisServer::start();
    let locks: LockClient = client(&server);
    let before = observer_threads();
    let observer = locks.observe("gone").unwrap();
    observer.recv().unwrap();
    assert_eq!(observer_threads(), before + 1);
    assert!(wait_until(Duration::from_secs(5), || locks
        .registrations()
        .watchers
        == 1));
    drop(observer);
    assert!(wait_until(Duration::from_secs(5), || observer_threads() == before));
    assert_eq!(locks.registrations().watchers, 0);
}

#[test]
fn an_observer_follows_a_read_write_lock() {
    let server = RedisServer::start();
    let locks = client(&server);
    let holder = client(&server);
    // Taken first, so the observer finds a read-write lock where it tries a mutex.
    let read = holder.read_lock("rw").unwrap();
    let observer = locks.observe("rw").unwrap();
    let first = observer
        .recv_timeout(Duration::from_secs(5))
        .unwrap()
        .unwrap();
    assert_eq!(first.now.map(|n| n.readers), Some(1));
    drop(read);
    let freed = observer
        .recv_timeout(Duration::from_secs(5))
        .unwrap()
        .unwrap();
    assert!(freed.is_freed(), "{freed:?}");
    let write = holder.write_lock("rw").unwrap();
    let taken = observer
        .recv_timeout(Duration::from_secs(5))
        .unwrap()
        .unwrap();
    assert_eq!(
        taken.now.map(|n| n.mode),
        Some(Some(redis_lock::LockMode::Write))
    );
    drop(write);
}

/// One permit holder on a thread of its own, with a client of its own: told to take a permit
/// (it answers the permit's fencing token) and to release it (it answers 0).
fn permit_holder(
    url: String,
    name: &'static str,
    worker: usize,
) -> (
    std::sync::mpsc::Sender<bool>,
    std::sync::mpsc::Receiver<u64>,
    std::thread::JoinHandle<()>,
) {
    let (to_thread, orders) = std::sync::mpsc::channel::<bool>();
    let (answer, answers) = std::sync::mpsc::channel::<u64>();
    let thread = std::thread::spawn(move || {
        let locks = redis_lock_tests::client_for(&url);
        let semaphore = locks.semaphore(name, 4).unwrap();
        let mut held = None;
        while let Ok(take) = orders.recv() {
            if take {
                let opts = redis_lock::LockOptions::new().metadata(format!("worker {worker}"));
                let guard = semaphore.acquire_with(&opts).unwrap();
                answer.send(guard.fencing_token()).unwrap();
                held = Some(guard);
            } else {
                held.take().expect("a permit to release").release().unwrap();
                answer.send(0).unwrap();
            }
        }
    });
    (to_thread, answers, thread)
}

/// Four threads take permits one after the other and release them in another order: the
/// observer reports each change in order, with the permits in use before and after and the
/// permit taken or freed. A permit that runs out is reported when it expires, though no key
/// changed; another permit's renewals are not changes.
#[test]
fn an_observer_follows_a_semaphores_permits_in_use() {
    let server = RedisServer::start();
    let observer = client(&server).observe("pool").unwrap();
    let first = observer
        .recv_timeout(Duration::from_secs(5))
        .unwrap()
        .expect("the state now");
    assert!(first.now.is_none() && first.permits.is_none(), "{first:?}");
    assert!(wait_until(Duration::from_secs(5), || observer.notified()));
    let holders: Vec<_> = (0..4)
        .map(|i| permit_holder(server.url(), "pool", i))
        .collect();
    let next = || {
        observer
            .recv_timeout(Duration::from_secs(5))
            .unwrap()
            .expect("a change")
    };
    // Taken one after the other (each seen before the next is taken): 1, 2, 3, 4 in use,
    // each change naming the permit taken.
    let mut tokens = [0; 4];
    for (i, (order, answer, _)) in holders.iter().enumerate() {
        order.send(true).unwrap();
        tokens[i] = answer.recv_timeout(Duration::from_secs(5)).unwrap();
        let change = next();
        let permits = change.permits.as_ref().expect("a semaphore's change");
        assert_eq!(
            (permits.in_use_before(), permits.in_use()),
            (i as u32, i as u32 + 1),
            "{change:?}"
        );
        let taken: Vec<_> = permits.taken().collect();
        assert_eq!(taken.len(), 1, "{change:?}");
        assert_eq!(taken[0].fencing_token, tokens[i]);
        assert_eq!(
            taken[0].metadata.as_deref(),
            Some(format!("worker {i}").as_str())
        );
        assert_eq!(taken[0].pid, Some(std::process::id()));
        assert_eq!(permits.freed().count(), 0);
        assert!(change.is_taken() && !change.is_freed(), "{change:?}");
        assert!(change.now.is_none());
    }
    // Released in another order: 3, 2, 1, 0 in use, each change naming the permit freed.
    for (step, i) in [2, 0, 3, 1].into_iter().enumerate() {
        let (order, answer, _) = &holders[i];
        order.send(false).unwrap();
        assert_eq!(answer.recv_timeout(Duration::from_secs(5)).unwrap(), 0);
        let change = next();
        let permits = change.permits.as_ref().expect("a semaphore's change");
        let left = 3 - step as u32;
        assert_eq!(
            (permits.in_use_before(), permits.in_use()),
            (left + 1, left),
            "{change:?}"
        );
        let freed: Vec<u64> = permits.freed().map(|p| p.fencing_token).collect();
        assert_eq!(freed, [tokens[i]], "{change:?}");
        assert_eq!(permits.taken().count(), 0);
        assert!(!change.is_taken());
        assert_eq!(change.is_freed(), left == 0, "{change:?}");
    }
    assert_eq!(
        observer.try_recv().unwrap(),
        None,
        "no change was reported twice"
    );
    for (order, _, thread) in holders {
        drop(order);
        thread.join().unwrap();
    }

    // A permit that runs out while another is held changes no key until somebody touches the
    // semaphore: it is seen when it would have expired. The other one's renewals (every
    // 100 ms) are not changes.
    let locks = client(&server);
    let pool = locks.semaphore("pool", 4).unwrap();
    let renewed = pool
        .acquire_with(&redis_lock::LockOptions::new().ttl(Duration::from_millis(300)))
        .unwrap();
    assert_eq!(next().permits.unwrap().in_use(), 1);
    let ttl = Duration::from_millis(400);
    let taken_at = Instant::now();
    // Another client: a thread holds one permit of a semaphore per client.
    let expiring = client(&server)
        .semaphore("pool", 4)
        .unwrap()
        .acquire_with(&redis_lock::LockOptions::new().ttl(ttl).watchdog(false))
        .unwrap();
    let change = next();
    assert_eq!(change.permits.as_ref().unwrap().in_use(), 2, "{change:?}");
    let change = next();
    let permits = change.permits.as_ref().unwrap();
    assert_eq!(
        (permits.in_use_before(), permits.in_use()),
        (2, 1),
        "{change:?}"
    );
    let freed: Vec<u64> = permits.freed().map(|p| p.fencing_token).collect();
    assert_eq!(freed, [expiring.fencing_token()]);
    let after = change.seen_at.saturating_duration_since(taken_at);
    println!("a permit's expiry seen {after:?} after it was taken with a {ttl:?} TTL");
    // The server counts a permit's expiry in whole milliseconds from when it took it: up to
    // a millisecond before this thread's `taken_at` plus the TTL.
    assert!(
        after + Duration::from_millis(2) >= ttl && after <= ttl + Duration::from_millis(500),
        "{after:?}"
    );
    assert_eq!(
        observer.recv_timeout(Duration::from_millis(400)).unwrap(),
        None,
        "renewals are not changes"
    );
    assert!(!renewed.is_lost());
    drop(expiring);
    drop(renewed);
    assert!(next().is_freed());
}
