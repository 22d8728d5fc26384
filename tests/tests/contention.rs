//! Waiting under contention, against real redis-server processes: waiters are woken by the
//! release one at a time, the lock goes to a waiter rather than back to the releasing thread,
//! fair mode keeps arrival order, dead and departed waiters hold nobody up for long, budgets
//! are kept, a small pool is not starved, and nothing but the fencing counter stays behind.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, mpsc};
use std::time::{Duration, Instant};

use redis_lock::{LockClient, LockOptions, ReleaseOutcome, RetryStrategy};
use redis_lock_tests::{
    RedisServer, blocked_clients, client, read_line_starting, signal, spawn_holder, wait_until,
    zcard,
};

const HOLDER: &str = env!("CARGO_BIN_EXE_lock-holder");

/// Waits until `n` waiters of lock `name` are registered (in the fair queue with `fair`).
fn await_waiters(server: &RedisServer, name: &str, n: usize, fair: bool) {
    let key = if fair {
        format!("lock:{{{name}}}:queue")
    } else {
        format!("lock:{{{name}}}:waiters")
    };
    assert!(
        wait_until(Duration::from_secs(10), || zcard(server, &key) == n),
        "{n} waiters never registered in {key} (have {})",
        zcard(server, &key)
    );
}

fn keys(server: &RedisServer) -> Vec<String> {
    let mut k: Vec<String> = redis::cmd("KEYS")
        .arg("*")
        .query(&mut server.connection())
        .unwrap();
    k.sort();
    k
}

fn blpop_calls(server: &RedisServer) -> u64 {
    server.command_calls("blpop").unwrap()
}

#[test]
fn one_release_wakes_one_waiter() {
    let server = RedisServer::start();
    let holder = client(&server);
    let guard = holder
        .options("herd")
        .ttl(Duration::from_secs(30))
        .acquire()
        .unwrap();
    const N: usize = 6;
    let blpops_before = blpop_calls(&server);
    // One client per waiter, so each one's requests are counted on its own.
    // (Without loss notification, whose checks of a lock held 20 ms would add to the count.)
    let waiters: Vec<LockClient> = (0..N)
        .map(|_| redis_lock_tests::client_without_notification(&server.url()))
        .collect();
    let (tx, rx) = mpsc::channel();
    let threads: Vec<_> = waiters
        .iter()
        .cloned()
        .map(|locks| {
            let tx = tx.clone();
            std::thread::spawn(move || {
                let g = locks
                    .try_lock_for("herd", Duration::from_secs(30))
                    .unwrap()
                    .expect("every waiter gets the lock in turn");
                tx.send(()).unwrap();
                // Long enough that a herd woken by one release would retry meanwhile.
                std::thread::sleep(Duration::from_millis(20));
                drop(g);
            })
        })
        .collect();
    await_waiters(&server, "herd", N, false);
    // All of them blocked (Redis 7.0 counts a BLPOP in commandstats when it blocks, Redis 7.2+
    // and Valkey when it returns: the server's blocked-client count is the same everywhere).
    assert!(wait_until(Duration::from_secs(10), || blocked_clients(
        &server
    ) >= N as u64));
    drop(guard);
    for _ in 0..N {
        rx.recv_timeout(Duration::from_secs(20)).unwrap();
    }
    for t in threads {
        t.join().unwrap();
    }
    // Each waiter: a native attempt that finds the lock busy, the script attempt that
    // registers it, one BLPOP that hands it the lock, and its release; plus a claim if it
    // waited too long to vouch for the grant (under heavy load). A herd would add a BLPOP and
    // a failed attempt per needless wake-up.
    let requests: u64 = waiters.iter().map(LockClient::request_count).sum();
    assert!(requests >= 4 * N as u64, "{requests}");
    assert!(
        requests <= 5 * N as u64,
        "waiters were woken needlessly: {requests}"
    );
    assert_eq!(
        blpop_calls(&server) - blpops_before,
        N as u64,
        "each waiter blocked exactly once"
    );
}

#[test]
fn the_releasing_thread_does_not_take_the_lock_back() {
    let server = RedisServer::start();
    let locks = client(&server);
    let guard = locks.lock("again").unwrap();
    let first = guard.fencing_token();
    let other = client(&server);
    let waiter = std::thread::spawn(move || {
        let g = other
            .try_lock_for("again", Duration::from_secs(20))
            .unwrap()
            .unwrap();
        g.fencing_token()
    });
    await_waiters(&server, "again", 1, false);
    drop(guard);
    // Asks again at once, as a worker loop does: the waiter must come first.
    let mine = locks
        .try_lock_for("again", Duration::from_secs(20))
        .unwrap()
        .unwrap();
    let theirs = waiter.join().unwrap();
    // Fencing tokens follow the order of holders (a busy native attempt may use up a number
    // in between, so they need not be consecutive).
    assert!(theirs > first, "{theirs} after {first}");
    assert!(
        mine.fencing_token() > theirs,
        "the waiter got the lock right after the release: {} vs {theirs}",
        mine.fencing_token()
    );
}

#[test]
fn a_crashed_holder_is_noticed_when_its_ttl_runs_out() {
    let server = RedisServer::start();
    let mut holder = spawn_holder(HOLDER, &["hold", &server.url(), "crash", "1500", "on"]);
    assert!(read_line_starting(&mut holder, "ACQUIRED", Duration::from_secs(10)).is_some());
    let locks = client(&server);
    let waiter = std::thread::spawn(move || {
        let g = locks
            .try_lock_for("crash", Duration::from_secs(30))
            .unwrap();
        (g.is_some(), Instant::now())
    });
    await_waiters(&server, "crash", 1, false);
    let killed = Instant::now();
    signal(&holder, libc::SIGKILL);
    holder.wait().unwrap();
    let (got, at) = waiter.join().unwrap();
    assert!(got);
    // The lock had at most 1.5 s to live; the waiter's 30 s budget is not what ended its wait.
    let after = at - killed;
    assert!(
        after < Duration::from_secs(4),
        "noticed {after:?} after the crash"
    );
}

/// A waiter takes a lock whose holder died (its guard forgotten, no watchdog) soon after the
/// lock expires, also on a server whose event loop turns once a second (`hz 1`): Redis ends a
/// blocked `BLPOP` only at its loop's next turn, up to 1/`hz` late, so the client wakes the
/// loop when the wait should end (`Store::wake_at`). Without that, each round would be late
/// by 0-1000 ms. Seven rounds, at least five of them under 250 ms: by chance, without the
/// wake, 1.3 %; and a loaded machine may stall two rounds.
#[test]
fn a_waiter_takes_an_expired_lock_on_time_whatever_the_servers_hz() {
    const TTL: Duration = Duration::from_millis(300);
    let server = RedisServer::start_with(&["--hz", "1"]);
    let holders = client(&server);
    let waiters = client(&server);
    let mut late = Vec::new();
    for round in 0..7 {
        let name = format!("expired-{round}");
        let sent = Instant::now();
        let guard = holders
            .options(&name)
            .ttl(TTL)
            .watchdog(false)
            .acquire()
            .unwrap();
        std::mem::forget(guard); // as if its process had died: nothing is released
        let got = waiters
            .try_lock_for(&name, Duration::from_secs(5))
            .unwrap()
            .expect("free once it expired");
        let at = Instant::now();
        // Redis set the TTL after `sent`: the lock cannot have been free before this.
        assert!(at >= sent + TTL, "round {round}: taken before its expiry");
        late.push(at - (sent + TTL));
        drop(got);
    }
    assert!(
        late.iter()
            .filter(|l| **l < Duration::from_millis(250))
            .count()
            >= 5,
        "taken this long after the expiry: {late:?}"
    );
}

#[test]
fn try_lock_for_keeps_its_budget_and_leaves_no_registration() {
    let server = RedisServer::start();
    let locks = client(&server);
    let _guard = locks
        .options("budget")
        .ttl(Duration::from_secs(30))
        .acquire()
        .unwrap();
    let other = client(&server);
    for retry in [RetryStrategy::notify(), RetryStrategy::fair()] {
        let start = Instant::now();
        let r = other
            .options("budget")
            .wait(Duration::from_millis(400))
            .retry(retry.clone())
            .try_acquire()
            .unwrap();
        let waited = start.elapsed();
        assert!(r.is_none());
        assert!(
            waited >= Duration::from_millis(400) && waited < Duration::from_millis(1500),
            "{retry:?}: returned after {waited:?}"
        );
        // It left the registry and the queue on its way out.
        assert_eq!(zcard(&server, "lock:{budget}:waiters"), 0);
        assert_eq!(zcard(&server, "lock:{budget}:queue"), 0);
    }
}

#[test]
fn a_pool_of_two_is_not_starved_by_sixteen_waiters() {
    let server = RedisServer::start();
    let locks = LockClient::builder(&server.url())
        .pool_size(2)
        .pool_timeout(Duration::from_secs(5))
        .io_timeout(Duration::from_secs(1))
        .build()
        .unwrap();
    // Renewed every 500 ms: a renewal that cannot get a connection in time loses the lock.
    let guard = locks
        .options("small-pool")
        .ttl(Duration::from_millis(1500))
        .acquire()
        .unwrap();
    let got = Arc::new(AtomicUsize::new(0));
    let threads: Vec<_> = (0..16)
        .map(|_| {
            let locks = locks.clone();
            let got = Arc::clone(&got);
            std::thread::spawn(move || {
                let g = locks
                    .options("small-pool")
                    .ttl(Duration::from_millis(1500))
                    .wait(Duration::from_secs(60))
                    .acquire()
                    .unwrap();
                got.fetch_add(1, Ordering::SeqCst);
                std::thread::sleep(Duration::from_millis(5));
                assert_eq!(g.release().unwrap(), ReleaseOutcome::Released);
            })
        })
        .collect();
    await_waiters(&server, "small-pool", 16, false);
    // Several renewals while 16 threads wait.
    let held_since = Instant::now();
    assert!(!wait_until(Duration::from_secs(3), || guard.is_lost()));
    assert!(held_since.elapsed() >= Duration::from_secs(3));
    assert_eq!(got.load(Ordering::SeqCst), 0);
    assert_eq!(guard.release().unwrap(), ReleaseOutcome::Released);
    for t in threads {
        t.join().unwrap();
    }
    assert_eq!(got.load(Ordering::SeqCst), 16);
}

#[test]
fn fair_mode_hands_the_lock_over_in_arrival_order() {
    let server = RedisServer::start();
    let locks = client(&server);
    let fair = LockOptions::new()
        .wait(Duration::from_secs(30))
        .retry(RetryStrategy::fair());
    let guard = locks.acquire_with("fifo", &fair).unwrap();
    let order = Arc::new(Mutex::new(Vec::new()));
    const N: usize = 6;
    let mut threads = Vec::new();
    for i in 0..N {
        let locks = client(&server);
        let order = Arc::clone(&order);
        let fair = fair.clone();
        threads.push(std::thread::spawn(move || {
            let g = locks.acquire_with("fifo", &fair).unwrap();
            order.lock().unwrap().push(i);
            std::thread::sleep(Duration::from_millis(10));
            drop(g);
        }));
        // The next one starts only once this one holds its ticket: a known arrival order.
        await_waiters(&server, "fifo", i + 1, true);
    }
    drop(guard);
    // The releasing thread asks again at once: it queues behind everyone.
    let again = locks.acquire_with("fifo", &fair).unwrap();
    order.lock().unwrap().push(N);
    drop(again);
    for t in threads {
        t.join().unwrap();
    }
    let order = order.lock().unwrap().clone();
    assert_eq!(order, (0..=N).collect::<Vec<_>>());
}

#[test]
fn a_fair_waiter_that_gives_up_leaves_the_queue_at_once() {
    let server = RedisServer::start();
    let locks = client(&server);
    let guard = locks.lock("leave").unwrap();
    let impatient = client(&server);
    let first = std::thread::spawn(move || {
        impatient
            .options("leave")
            .wait(Duration::from_millis(300))
            .retry(RetryStrategy::fair())
            .try_acquire()
            .unwrap()
            .is_none()
    });
    await_waiters(&server, "leave", 1, true);
    let patient = client(&server);
    let (tx, rx) = mpsc::channel();
    let second = std::thread::spawn(move || {
        let g = patient
            .options("leave")
            .wait(Duration::from_secs(30))
            .retry(RetryStrategy::fair())
            .acquire()
            .unwrap();
        tx.send(Instant::now()).unwrap();
        drop(g);
    });
    await_waiters(&server, "leave", 2, true);
    assert!(first.join().unwrap(), "the impatient waiter gave up");
    await_waiters(&server, "leave", 1, true);
    let released = Instant::now();
    drop(guard);
    let got = rx.recv_timeout(Duration::from_secs(10)).unwrap();
    second.join().unwrap();
    // Not held up by the registration the first waiter left behind (it would lapse ~1 s later).
    assert!(
        got - released < Duration::from_millis(700),
        "{:?}",
        got - released
    );
}

#[test]
fn a_dead_fair_waiter_holds_up_the_queue_only_briefly() {
    let server = RedisServer::start();
    let locks = client(&server);
    let guard = locks.lock("dead-fair").unwrap();
    let mut dead = spawn_holder(HOLDER, &["wait", &server.url(), "dead-fair", "fair"]);
    await_waiters(&server, "dead-fair", 1, true);
    let live = client(&server);
    let (tx, rx) = mpsc::channel();
    let second = std::thread::spawn(move || {
        let g = live
            .options("dead-fair")
            .wait(Duration::from_secs(30))
            .retry(RetryStrategy::fair())
            .acquire()
            .unwrap();
        tx.send(Instant::now()).unwrap();
        drop(g);
    });
    await_waiters(&server, "dead-fair", 2, true);
    signal(&dead, libc::SIGKILL);
    dead.wait().unwrap();
    let released = Instant::now();
    drop(guard);
    // The head of the queue is dead: its registration lapses within its 2 s check-in
    // interval plus the 1 s margin, and then the next waiter takes over.
    let got = rx.recv_timeout(Duration::from_secs(15)).unwrap();
    second.join().unwrap();
    let stalled = got - released;
    assert!(
        stalled < Duration::from_secs(5),
        "queue stalled {stalled:?}"
    );
}

#[test]
fn a_dead_waiter_costs_a_newcomer_nothing_much() {
    let server = RedisServer::start();
    let locks = client(&server);
    let guard = locks.lock("dead-notify").unwrap();
    let mut dead = spawn_holder(HOLDER, &["wait", &server.url(), "dead-notify", "notify"]);
    await_waiters(&server, "dead-notify", 1, false);
    signal(&dead, libc::SIGKILL);
    dead.wait().unwrap();
    // The release sees a registered (dead) waiter and reserves the lock for waiters; a
    // newcomer registers, finds the wake-up nobody took, and takes the reservation.
    drop(guard);
    // Without the unclaimed wake-up it would wait for the 1 s reservation to lapse.
    redis_lock_tests::a_newcomer_takes_it_at_once(&server, "dead-notify");
}

#[test]
fn nothing_but_the_fencing_counter_is_left_behind() {
    let server = RedisServer::start();
    let locks = client(&server);
    for (name, mode) in [("mixed-notify", "notify"), ("mixed-fair", "fair")] {
        let retry = if mode == "fair" {
            RetryStrategy::fair()
        } else {
            RetryStrategy::notify()
        };
        let fair = mode == "fair";
        // A short TTL bounds how long the dead waiter's registration can live.
        let guard = locks
            .options(name)
            .ttl(Duration::from_secs(2))
            .acquire()
            .unwrap();
        // Waiters that get the lock, waiters that give up, and one that dies while waiting.
        let mut dead = spawn_holder(HOLDER, &["wait", &server.url(), name, mode]);
        await_waiters(&server, name, 1, fair);
        let patient: Vec<_> = (0..3)
            .map(|_| {
                let locks = client(&server);
                let retry = retry.clone();
                std::thread::spawn(move || {
                    let g = locks
                        .options(name)
                        .wait(Duration::from_secs(30))
                        .retry(retry)
                        .acquire()
                        .unwrap();
                    drop(g);
                })
            })
            .collect();
        await_waiters(&server, name, 4, fair);
        signal(&dead, libc::SIGKILL);
        dead.wait().unwrap();
        let impatient: Vec<_> = (0..3)
            .map(|_| {
                let locks = client(&server);
                let retry = retry.clone();
                std::thread::spawn(move || {
                    locks
                        .options(name)
                        .wait(Duration::from_millis(200))
                        .retry(retry)
                        .try_acquire()
                        .unwrap()
                        .is_none()
                })
            })
            .collect();
        for t in impatient {
            assert!(t.join().unwrap());
        }
        drop(guard);
        for t in patient {
            t.join().unwrap();
        }
    }
    // Registrations of the dead waiters lapse; wake-ups and reservations expire.
    let expected = vec![
        "lock:{mixed-fair}:fence".to_owned(),
        "lock:{mixed-notify}:fence".to_owned(),
    ];
    assert!(
        wait_until(Duration::from_secs(10), || keys(&server) == expected),
        "left behind: {:?}",
        keys(&server)
    );
}

#[test]
fn a_lock_handed_over_gets_its_new_holders_information_and_ttl() {
    let server = RedisServer::start();
    let locks = client(&server);
    let guard = locks.lock("claimed").unwrap();
    let other = client(&server);
    let waiter = std::thread::spawn(move || {
        other
            .options("claimed")
            .ttl(Duration::from_secs(20))
            .metadata("second holder")
            .wait(Duration::from_secs(20))
            .acquire()
            .unwrap()
    });
    await_waiters(&server, "claimed", 1, false);
    drop(guard);
    let second = waiter.join().unwrap();
    // Handed over with the release's grant; the watchdog's first renewal claims it.
    assert!(
        wait_until(Duration::from_secs(3), || {
            locks.inspect("claimed").unwrap().is_some_and(|i| {
                i.metadata.as_deref() == Some("second holder")
                    && i.host.is_some()
                    && i.remaining_ttl > Some(Duration::from_secs(10))
            })
        }),
        "{:?}",
        locks.inspect("claimed")
    );
    // Past the 1 s grace of the grant: still held, with the full TTL.
    assert!(!wait_until(Duration::from_millis(1500), || second.is_lost()));
    assert!(second.remaining_ttl().unwrap() > Some(Duration::from_secs(10)));
    assert_eq!(second.release().unwrap(), ReleaseOutcome::Released);
    assert_eq!(zcard(&server, "lock:{claimed}:waiters"), 0);
}
