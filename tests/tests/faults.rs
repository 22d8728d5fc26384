//! Fault injection against real redis-server processes and real OS processes: paused holders
//! fenced off, Redis killed / paused / restarted, connections cut, the pool exhausted, and a
//! multi-process mutual-exclusion checker with holders killed at random.

use std::collections::HashSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use redis_lock::{Error, LockClient, LostReason, ReleaseOutcome};
use redis_lock_tests::fenced::{FencedStore, Rejected};
use redis_lock_tests::holder::Holder;
use redis_lock_tests::{RedisServer, TcpProxy, client, client_for, wait_until};

const HOLDER: &str = env!("CARGO_BIN_EXE_lock-holder");
const LINE: Duration = Duration::from_secs(10);

fn token_of(line: &str) -> u64 {
    line.rsplit(' ').next().unwrap().parse().unwrap()
}

/// A `lock-holder` that took `name` with a 300 ms TTL (reporting `on_lost` as `ONLOST`) and
/// was then stopped (SIGSTOP, standing for a GC or VM pause) until the lock expired in Redis.
fn paused_past_its_ttl(server: &RedisServer, locks: &LockClient, name: &str) -> Holder {
    let mut holder = Holder::spawn(HOLDER, &["hold-watch", &server.url(), name, "300"]);
    holder.expect("ACQUIRED", LINE).unwrap();
    holder.signal(libc::SIGSTOP);
    assert!(wait_until(Duration::from_secs(5), || locks
        .inspect(name)
        .unwrap()
        .is_none()));
    holder
}

/// A holder stopped past its TTL (SIGSTOP, standing for a GC or VM pause) asks Redis when it
/// wakes before it reports the loss: `TakenOver` when another client holds the lock by then,
/// `Expired` when nobody does; not `RenewalFailed`, since Redis could be reached all along.
#[test]
fn a_holder_that_wakes_past_its_expiry_reports_what_redis_says() {
    let server = RedisServer::start();
    let locks = client(&server);
    for (round, take_over) in [(0, true), (1, false), (2, true), (3, false)] {
        let name = format!("paused-{round}");
        let mut holder = paused_past_its_ttl(&server, &locks, &name);
        let other = take_over.then(|| locks.try_lock(&name).unwrap().expect("expired"));
        holder.signal(libc::SIGCONT);
        let line = holder.expect("ONLOST", LINE).unwrap();
        let want = if take_over {
            "ONLOST TakenOver"
        } else {
            "ONLOST Expired"
        };
        assert_eq!(line, want, "round {round}");
        drop(other);
        holder.kill();
    }
}

/// A holder paused past its TTL while another process took the lock, that releases as soon as
/// it runs again (its release already waiting in its input), learns the loss with the right
/// reason however the race between its release and its renewal thread falls: `on_lost` is
/// called once with `TakenOver`, and the release says `Lost`.
#[test]
fn a_paused_holder_that_releases_at_once_is_told_it_was_taken_over() {
    let server = RedisServer::start();
    let locks = client(&server);
    for round in 0..5 {
        let name = format!("paused-release-{round}");
        let mut holder = paused_past_its_ttl(&server, &locks, &name);
        let other = locks.try_lock(&name).unwrap().expect("expired");
        holder.send("release");
        holder.signal(libc::SIGCONT);
        let mut lines = holder.lines_until("RELEASED", LINE).unwrap();
        assert_eq!(
            lines.last().map(String::as_str),
            Some("RELEASED Lost"),
            "round {round}"
        );
        // The renewal thread, if it learnt first, may print after the release returned.
        if !lines.iter().any(|l| l.starts_with("ONLOST")) {
            lines.push(holder.expect("ONLOST", LINE).unwrap());
        }
        // Nothing more is reported: the next answer comes with no second ONLOST before it.
        holder.send("check");
        lines.extend(holder.lines_until("RELEASED already", LINE).unwrap());
        let lost: Vec<&String> = lines.iter().filter(|l| l.starts_with("ONLOST")).collect();
        assert_eq!(lost, ["ONLOST TakenOver"], "round {round}: {lines:?}");
        assert_eq!(
            other.release().unwrap(),
            ReleaseOutcome::Released,
            "untouched"
        );
        holder.kill();
    }
}

/// A thread whose release failed (its reply cut, or timed out behind a latency spike) has
/// given the lock up as far as it is concerned: its next waiting `lock` of the name takes the
/// lock (or waits for it) instead of failing with `AlreadyHeld` as if it still held it.
#[test]
fn a_thread_whose_release_failed_can_lock_the_name_again() {
    let server = RedisServer::start();
    let proxy = TcpProxy::start(server.port()).unwrap();
    // Without loss notification: its connections' traffic through the proxy (the check 2 ms
    // into a hold) could take the reply the proxy cuts instead of the release's.
    let locks = LockClient::builder(&proxy.url())
        .io_timeout(Duration::from_millis(300))
        .loss_notification(false)
        .build()
        .unwrap();
    for round in 0..4 {
        // Warm the connection and the script cache.
        drop(locks.lock("again").unwrap());
        let guard = locks
            .options("again")
            .ttl(Duration::from_secs(10))
            .acquire()
            .unwrap();
        if round % 2 == 0 {
            proxy.cut_next_replies(1);
        } else {
            proxy.set_latency(Duration::from_millis(400));
        }
        let released = guard.release();
        proxy.set_latency(Duration::ZERO);
        assert!(released.is_err(), "round {round}: {released:?}");
        let again = locks
            .options("again")
            .ttl(Duration::from_secs(10))
            .wait(Duration::from_secs(15))
            .acquire();
        match again {
            Ok(guard) => assert_eq!(guard.release().unwrap(), ReleaseOutcome::Released),
            Err(e) => panic!("round {round}: {e:?}"),
        }
    }
}

/// The same while the lease lives on elsewhere: a renewal in flight (stuck in a stalled
/// proxy, holding the pool's one connection) when the release fails (no connection in time):
/// the thread holds the name no longer, and a waiting `lock` is not `AlreadyHeld`.
#[test]
fn a_failed_release_leaves_the_name_no_longer_held_by_the_thread() {
    let server = RedisServer::start();
    let proxy = TcpProxy::start(server.port()).unwrap();
    let locks = LockClient::builder(&proxy.url())
        .pool_size(1)
        .pool_timeout(Duration::from_millis(200))
        .io_timeout(Duration::from_secs(2))
        .build()
        .unwrap();
    drop(locks.lock("stuck").unwrap());
    let guard = locks
        .options("stuck")
        .ttl(Duration::from_millis(1500))
        .acquire()
        .unwrap();
    let before = locks.request_count();
    proxy.stall(true);
    // The watchdog's renewal (a third of the TTL in) is sent and stuck, with the connection.
    assert!(wait_until(Duration::from_secs(3), || locks.request_count() > before));
    let released = guard.release();
    assert!(matches!(released, Err(Error::Pool(_))), "{released:?}");
    assert!(!locks.is_held_by_current_thread("stuck"));
    let again = locks
        .options("stuck")
        .wait(Duration::from_millis(100))
        .acquire();
    assert!(
        !matches!(again, Err(Error::AlreadyHeld { .. })),
        "{again:?}"
    );
    drop(again);
    proxy.stall(false);
    // Redis still has the lock until it expires: the thread waits for it, then takes it.
    let guard = locks
        .options("stuck")
        .wait(Duration::from_secs(10))
        .acquire()
        .unwrap();
    assert_eq!(guard.release().unwrap(), ReleaseOutcome::Released);
}

#[test]
fn paused_holder_is_fenced_off_and_its_release_leaves_the_new_lock_alone() {
    let server = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    let store_path = dir.path().join("store.log");
    let store = FencedStore::new(&store_path);
    let store_arg = store_path.to_str().unwrap();

    let mut first = Holder::spawn(HOLDER, &["hold", &server.url(), "job", "600", "on"]);
    let t1 = token_of(&first.expect("ACQUIRED", LINE).unwrap());
    first.send(&format!("write {store_arg} first-holder"));
    first.expect("WRITTEN", LINE).unwrap();

    // The holder freezes (GC pause, swap, SIGSTOP) past its TTL: its watchdog cannot renew.
    first.signal(libc::SIGSTOP);
    let locks = client(&server);
    let second = locks
        .try_lock_for("job", Duration::from_secs(5))
        .unwrap()
        .expect("the paused holder's lock expires after its TTL");
    let t2 = second.fencing_token();
    assert!(t2 > t1, "{t2} > {t1}");
    assert_eq!(store.write(t2, "second-holder").unwrap(), Ok(()));

    // It wakes up and, not having looked at the lock, writes: the store rejects it.
    first.signal(libc::SIGCONT);
    first.send(&format!("write {store_arg} stale"));
    assert_eq!(
        first.expect("REJECTED", LINE).unwrap(),
        format!("REJECTED {t2}")
    );
    // Its next check reports the loss, and its release says "lost" ...
    first.send("check");
    assert!(first.expect("", LINE).unwrap().starts_with("LOST"));
    first.send("release");
    assert_eq!(first.expect("RELEASED", LINE).unwrap(), "RELEASED Lost");
    assert!(first.finish(LINE));
    // ... without touching the second holder's lock.
    let info = locks.inspect("job").unwrap().unwrap();
    assert_eq!(info.fencing_token, t2);
    assert!(info.owned);
    assert!(second.remaining_ttl().unwrap().is_some());
    assert_eq!(second.release().unwrap(), ReleaseOutcome::Released);

    let entries: Vec<_> = store.entries().unwrap();
    assert_eq!(
        entries,
        vec![
            (t1, "first-holder".to_owned()),
            (t2, "second-holder".to_owned())
        ]
    );
    assert_eq!(
        store.write(t1, "again").unwrap(),
        Err(Rejected { highest: t2 })
    );
}

#[test]
fn redis_killed_while_held_then_restarted() {
    let mut server = RedisServer::start();
    let locks = client(&server);
    let losses = Arc::new(AtomicUsize::new(0));
    let seen = Arc::clone(&losses);
    let guard = locks
        .options("outage")
        .ttl(Duration::from_millis(800))
        .on_lost(move |e| {
            assert_eq!(e.reason, LostReason::RenewalFailed);
            seen.fetch_add(1, Ordering::SeqCst);
        })
        .acquire()
        .unwrap();
    let killed = Instant::now();
    server.kill();
    // The watchdog keeps retrying until the lock would have expired, then reports the loss.
    assert!(wait_until(Duration::from_secs(5), || guard.is_lost()));
    let noticed = killed.elapsed();
    assert!(noticed < Duration::from_secs(3), "{noticed:?}");
    assert!(wait_until(Duration::from_secs(1), || losses
        .load(Ordering::SeqCst)
        == 1));
    assert!(matches!(
        guard.ensure_held(),
        Err(Error::Lost {
            reason: LostReason::RenewalFailed,
            ..
        })
    ));
    // While Redis is down, calls fail with a connection error (not a hang, not a panic).
    let start = Instant::now();
    let err = locks.try_lock("outage").unwrap_err();
    assert!(err.is_connection_error(), "{err}");
    assert!(start.elapsed() < Duration::from_secs(3));

    server.restart();
    // The pool reconnects: the lock (gone with the restart) can be taken again.
    let next = locks
        .try_lock("outage")
        .unwrap()
        .expect("free after the restart");
    assert!(!next.is_lost());
    assert_eq!(guard.release().unwrap(), ReleaseOutcome::Lost);
    assert_eq!(next.release().unwrap(), ReleaseOutcome::Released);
    assert_eq!(losses.load(Ordering::SeqCst), 1);
}

#[test]
fn paused_redis_fails_operations_within_the_io_timeout() {
    let server = RedisServer::start();
    let io_timeout = Duration::from_millis(300);
    let locks = LockClient::builder(&server.url())
        .io_timeout(io_timeout)
        .connect_timeout(io_timeout)
        .build()
        .unwrap();
    locks.ping().unwrap(); // one pooled connection
    let cold = LockClient::builder(&server.url())
        .io_timeout(io_timeout)
        .connect_timeout(io_timeout)
        .build()
        .unwrap();
    server.pause();
    for (name, client) in [("warm", &locks), ("cold", &cold)] {
        let start = Instant::now();
        let err = client
            .options("frozen")
            .ttl(Duration::from_millis(500))
            .try_acquire()
            .unwrap_err();
        let took = start.elapsed();
        assert!(err.is_connection_error(), "{name}: {err}");
        // Bounded by the timeouts (0.3 s), not hanging; generous for a loaded machine.
        assert!(took < Duration::from_secs(2), "{name}: {took:?}");
    }
    server.resume();
    // The timed-out connection was dropped, not reused: its late reply (to the acquisition
    // sent while Redis was frozen) is not read as the answer to the next command.
    let other = locks.try_lock("other").unwrap().unwrap();
    assert_eq!(other.key(), "other");
    let info = locks.inspect("other").unwrap().unwrap();
    assert_eq!(info.fencing_token, other.fencing_token());
}

/// Every reply of an acquisition comes back too late (200 ms each way, a 300 ms reply
/// timeout): the acquire script ran in Redis, but the caller gets an error. It asks again with
/// the same token and, failing that too, gives the lock up under its token: the next caller
/// gets it within a few round trips, not after the 5 s TTL.
#[test]
fn acquisition_whose_replies_time_out_gives_the_lock_up() {
    let server = RedisServer::start();
    let proxy = TcpProxy::start(server.port()).unwrap();
    let locks = LockClient::builder(&proxy.url())
        .io_timeout(Duration::from_millis(300))
        .build()
        .unwrap();
    // Warm the connection and Redis's script cache (a NOSCRIPT reply would stop the attempt).
    assert_eq!(cycles(&locks, 1), 0);
    proxy.set_latency(Duration::from_millis(200));
    let err = locks
        .options("phantom")
        .ttl(Duration::from_secs(5))
        .try_acquire()
        .unwrap_err();
    assert!(err.is_connection_error(), "{err}");
    let direct = client(&server);
    let start = Instant::now();
    let next = direct
        .try_lock_for("phantom", Duration::from_secs(3))
        .unwrap()
        .expect("given up by the caller that could not learn its outcome");
    assert!(
        start.elapsed() < Duration::from_secs(1),
        "{:?}",
        start.elapsed()
    );
    let fence = next.fencing_token();
    assert!(fence >= 2, "the lost acquisition did run: {fence}");
    proxy.set_latency(Duration::ZERO);
}

/// Client ids of the server's `normal` connections, except the one asking.
fn client_ids(probe: &mut redis::Connection) -> HashSet<u64> {
    let me: u64 = redis::cmd("CLIENT").arg("ID").query(probe).unwrap();
    // The pool's connections, not the loss notification's two (a subscriber, flag `P`, and a
    // tracked connection, flag `t`), which the cut below kills too and which reconnect at once
    // on their own.
    let list: String = redis::cmd("CLIENT").arg("LIST").query(probe).unwrap();
    list.lines()
        .filter(|l| {
            l.split(' ')
                .find_map(|f| f.strip_prefix("flags="))
                .is_some_and(|flags| !flags.contains('P') && !flags.contains('t'))
        })
        .filter_map(|l| l.strip_prefix("id="))
        .filter_map(|l| l.split(' ').next()?.parse().ok())
        .filter(|id| *id != me)
        .collect()
}

/// Runs `n` short lock cycles one after another; returns how many failed and whether every
/// failure was a connection error.
fn cycles(locks: &LockClient, n: usize) -> usize {
    let mut failed = 0;
    for i in 0..n {
        match locks.try_lock(&format!("cycle{i}")) {
            Ok(Some(g)) => assert_eq!(g.release().unwrap(), ReleaseOutcome::Released),
            Ok(None) => panic!("cycle{i} was busy"),
            Err(e) => {
                assert!(e.is_connection_error(), "{e}");
                failed += 1;
            }
        }
    }
    failed
}

#[test]
fn client_kill_leaves_no_broken_connection_in_the_pool() {
    let server = RedisServer::start();
    let locks = client(&server);
    // Several connections open at once: three guards held by three threads.
    let guards: Vec<_> = std::thread::scope(|s| {
        let hs: Vec<_> = (0..3)
            .map(|i| {
                let locks = &locks;
                s.spawn(move || {
                    locks
                        .options(&format!("held{i}"))
                        .ttl(Duration::from_secs(1))
                        .acquire()
                        .unwrap()
                })
            })
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let mut probe = server.connection();
    // Cut every connection the client has. The pool may still be finishing a connect it
    // started for one of the three threads when the first connection served them all: cut
    // until no connection but the probe's has shown up for three looks in a row.
    let (mut before, mut cut) = (HashSet::new(), 0);
    let mut quiet = 0;
    for _ in 0..200 {
        let ids = client_ids(&mut probe);
        if ids.is_empty() {
            quiet += 1;
            if quiet == 3 {
                break;
            }
        } else {
            quiet = 0;
            let killed: i64 = ["normal", "pubsub"]
                .iter()
                .map(|kind| {
                    redis::cmd("CLIENT")
                        .arg("KILL")
                        .arg("TYPE")
                        .arg(*kind)
                        .query::<i64>(&mut probe)
                        .unwrap()
                })
                .sum();
            // At least those listed (one that connected in between is cut too).
            assert!(usize::try_from(killed).unwrap() >= ids.len());
            cut += usize::try_from(killed).unwrap();
            before.extend(ids);
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    assert!(quiet == 3 && !before.is_empty(), "{quiet} {before:?}");

    // Each cut connection fails at most once, then is dropped; after that everything works.
    // (At most: an acquisition whose reply was lost asks again on a fresh connection, a
    // renewal may meet the cut connection first, and the pool may not hand it out at all.)
    let failed = cycles(&locks, 10);
    assert!(failed <= cut, "{failed} failures for {cut} cut connections");
    assert_eq!(cycles(&locks, 10), 0);
    // The watchdogs got through too (a failed renewal is retried on a new connection):
    // the guards were not lost.
    std::thread::sleep(Duration::from_millis(1200));
    for g in &guards {
        assert!(!g.is_lost(), "{g:?}");
    }
    // No connection from before the cut is left.
    let after = client_ids(&mut probe);
    assert!(!after.is_empty());
    assert!(after.is_disjoint(&before), "{before:?} {after:?}");
    for g in guards {
        assert_eq!(g.release().unwrap(), ReleaseOutcome::Released);
    }
}

#[test]
fn connections_cut_mid_operation_by_a_proxy_are_replaced() {
    let server = RedisServer::start();
    let proxy = TcpProxy::start(server.port()).unwrap();
    let locks = client_for(&proxy.url());
    assert_eq!(cycles(&locks, 3), 0);
    let accepted = proxy.accepted();
    // Slow every packet down so that the next acquisition is in flight when the cut comes.
    proxy.set_latency(Duration::from_millis(300));
    let cutter = std::thread::scope(|s| {
        let op = s.spawn(|| {
            let start = Instant::now();
            (locks.try_lock("mid"), start.elapsed())
        });
        assert!(wait_until(Duration::from_secs(2), || proxy
            .open_connections()
            > 0));
        std::thread::sleep(Duration::from_millis(100));
        let cut = proxy.drop_connections();
        let (result, took) = op.join().unwrap();
        let err = result.expect_err("the connection was cut mid-operation");
        assert!(err.is_connection_error(), "{err}");
        assert!(took < Duration::from_secs(2), "{took:?}");
        cut
    });
    assert!(cutter >= 1);
    proxy.set_latency(Duration::ZERO);
    assert_eq!(cycles(&locks, 10), 0);
    assert!(proxy.accepted() > accepted, "a new connection was made");
}

#[test]
fn exhausted_pool_fails_with_a_pool_error_instead_of_hanging() {
    let server = RedisServer::start();
    let proxy = TcpProxy::start(server.port()).unwrap();
    let locks = LockClient::builder(&proxy.url())
        .pool_size(1)
        .pool_timeout(Duration::from_millis(300))
        .io_timeout(Duration::from_secs(3))
        .build()
        .unwrap();
    locks.ping().unwrap();
    // The proxy stalls: the only connection is taken by a call that waits for its reply.
    proxy.stall(true);
    std::thread::scope(|s| {
        let stuck = s.spawn(|| locks.try_lock("a"));
        assert!(wait_until(Duration::from_secs(2), || locks.request_count() >= 2));
        let start = Instant::now();
        let err = locks.try_lock("b").unwrap_err();
        let took = start.elapsed();
        assert!(matches!(err, Error::Pool(_)), "{err}");
        assert!(
            took >= Duration::from_millis(300) && took < Duration::from_secs(2),
            "{took:?}"
        );
        proxy.stall(false);
        // The stuck call completes once the proxy forwards again.
        assert!(stuck.join().unwrap().unwrap().is_some());
    });
}

/// A small deterministic generator for the fault schedule; the seed is printed so a failing
/// schedule can be replayed with `REDIS_LOCK_FAULT_SEED`.
struct Schedule(u64);

impl Schedule {
    fn new() -> Schedule {
        let seed = std::env::var("REDIS_LOCK_FAULT_SEED")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or_else(|| {
                std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .unwrap()
                    .subsec_nanos()
                    .into()
            });
        eprintln!("fault schedule seed: REDIS_LOCK_FAULT_SEED={seed}");
        Schedule(seed)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        (self.0 >> 33) % n
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Event {
    Enter(u64, u32, u32),
    Exit(u64, u32, u32),
}

fn parse_raw(line: &str) -> Event {
    let f: Vec<&str> = line.split(' ').collect();
    let (t, p, d) = (
        f[1].parse().unwrap(),
        f[2].parse().unwrap(),
        f[3].parse().unwrap(),
    );
    match f[0] {
        "enter" => Event::Enter(t, p, d),
        "exit" => Event::Exit(t, p, d),
        other => panic!("bad log line {other:?}"),
    }
}

#[test]
fn mutual_exclusion_holds_while_holders_are_killed_and_paused_at_random() {
    const PROCESSES: usize = 4;
    const THREADS: &str = "3";
    const ITERATIONS: &str = "15";
    const TTL_MS: u64 = 300;
    const KILLS: usize = 3;
    let server = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    let (url, dir_arg) = (server.url(), dir.path().to_str().unwrap().to_owned());
    let ttl_arg = TTL_MS.to_string();
    let spawn = || {
        Holder::spawn(
            HOLDER,
            &[
                "churn", &url, "shared", &dir_arg, THREADS, ITERATIONS, &ttl_arg,
            ],
        )
    };
    let mut rng = Schedule::new();
    let mut running: Vec<Holder> = (0..PROCESSES).map(|_| spawn()).collect();
    let mut killed = HashSet::new();
    let mut paused = None;
    let started = Instant::now();
    // KILLS holders killed (each replaced by a fresh process) and one paused past its TTL,
    // at random moments and in random order.
    let pause_at = rng.below(KILLS as u64 + 1);
    for step in 0..=KILLS as u64 {
        std::thread::sleep(Duration::from_millis(50 + rng.below(250)));
        // Prefer the process holding the lock right now, so kills and the pause hit holders.
        let holder_pid = client(&server)
            .inspect("shared")
            .unwrap()
            .and_then(|info| info.pid);
        let i = running
            .iter()
            .position(|h| Some(h.pid()) == holder_pid)
            .unwrap_or_else(|| usize::try_from(rng.below(running.len() as u64)).unwrap());
        if step == pause_at {
            running[i].signal(libc::SIGSTOP);
            paused = Some(running[i].pid());
            std::thread::sleep(Duration::from_millis(TTL_MS * 2));
            running[i].signal(libc::SIGCONT);
        } else {
            running[i].kill();
            killed.insert(running[i].pid());
            running.swap_remove(i);
            running.push(spawn());
        }
    }
    for holder in &mut running {
        let lines = holder
            .lines_until("DONE", Duration::from_secs(90))
            .expect("holder finished");
        if Some(holder.pid()) != paused {
            // A holder that was never paused always released a lock it still held.
            let unclean: Vec<_> = lines.iter().filter(|l| !l.starts_with("DONE")).collect();
            assert!(unclean.is_empty(), "pid {}: {unclean:?}", holder.pid());
        }
        assert!(holder.finish(LINE));
    }
    let elapsed = started.elapsed();

    // 1. The raw log (written without fencing): among holders that were never paused, every
    // "enter" is followed by its own "exit", unless its process was killed while holding.
    let raw = std::fs::read_to_string(dir.path().join("raw.log")).unwrap();
    let mut open: Option<(u64, u32, u32)> = None;
    let mut exits = 0;
    let mut killed_holding = 0;
    for event in raw.lines().map(parse_raw) {
        let pid = match event {
            Event::Enter(_, p, _) | Event::Exit(_, p, _) => p,
        };
        if Some(pid) == paused {
            continue;
        }
        match event {
            Event::Enter(t, p, d) => {
                if let Some((ot, op, _)) = open {
                    assert!(
                        killed.contains(&op),
                        "overlap: token {t} (pid {p}) entered while {ot} (pid {op}) held the lock"
                    );
                    assert!(t > ot);
                    killed_holding += 1;
                }
                open = Some((t, p, d));
            }
            Event::Exit(t, p, d) => {
                assert_eq!(open, Some((t, p, d)), "exit without its enter");
                open = None;
                exits += 1;
            }
        }
    }
    // Every process still running at the end did all its cycles.
    assert!(exits >= PROCESSES * 3 * 15 - 3 * 15, "{exits} cycles");

    // 2. The fenced store: tokens never go down, and each token belongs to one holder.
    let entries = FencedStore::new(dir.path().join("store.log"))
        .entries()
        .unwrap();
    assert!(entries.len() >= exits * 2);
    eprintln!(
        "checker: {} processes, {} killed, pid {paused:?} paused, {exits} clean cycles, {killed_holding} killed while holding, {} fenced writes, {elapsed:?}",
        PROCESSES + KILLS,
        killed.len(),
        entries.len()
    );
    let mut owner = std::collections::HashMap::new();
    for pair in entries.windows(2) {
        assert!(pair[0].0 <= pair[1].0, "{pair:?}");
    }
    for (token, entry) in &entries {
        let who: Vec<&str> = entry.split(' ').take(2).collect();
        let first = owner.entry(*token).or_insert_with(|| who.clone());
        assert_eq!(*first, who, "token {token} used by two holders");
    }
}

// ---------------------------------------------------------------------------------------
// Faults found by driving the public API from outside: each test fails without its fix.

fn raw_token(server: &RedisServer, name: &str) -> Option<String> {
    redis_lock_tests::stored_token(&mut server.connection(), &format!("lock:{{{name}}}"))
}

/// `release_all` in flight on one thread and `guard.release()` on another, and the
/// connection then cut: each reports only what happened in Redis. The guard's release waits
/// for the one in flight, finds it failed, and releases for real.
#[test]
fn concurrent_releases_report_what_happened_in_redis() {
    let server = RedisServer::start();
    let proxy = TcpProxy::start(server.port()).unwrap();
    let locks = LockClient::builder(&proxy.url())
        .io_timeout(Duration::from_secs(5))
        .build()
        .unwrap();
    let guard = locks.lock("both").unwrap();
    proxy.stall(true);
    std::thread::scope(|s| {
        let all = s.spawn(|| locks.release_all());
        // `release_all`'s request is on its way (the stalled proxy holds it).
        assert!(wait_until(LINE, || locks.request_count() >= 2));
        let mine = s.spawn(|| guard.release());
        proxy.drop_connections();
        proxy.stall(false);
        let all = all.join().unwrap();
        let mine = mine.join().unwrap();
        let held = raw_token(&server, "both").is_some();
        // Whatever each says, it matches Redis: a Released is a lock that is gone, and at
        // most one of them released it.
        assert!(
            all.is_err() || held == (all.as_ref().ok() == Some(&0)),
            "{all:?}"
        );
        match &mine {
            Ok(ReleaseOutcome::Released) => assert!(!held, "guard said Released: {all:?}"),
            // `release_all`'s request ran first: the guard's found its lock gone.
            Ok(ReleaseOutcome::Late) => assert!(
                !held && all.as_ref().ok() == Some(&1),
                "guard said Late: {all:?}"
            ),
            Ok(other) => panic!("{other:?}"),
            Err(e) => assert!(held, "guard failed ({e}) but the lock is gone"),
        }
        assert!(
            !held,
            "one of the two released it for real: {all:?} {mine:?}"
        );
    });
}

/// Signals during a blocking call (a handled SIGUSR1 with SA_RESTART, and SIGSTOP/SIGCONT)
/// while the server delays the reply: the acquisition succeeds, and no lock nobody owns is
/// left behind.
#[test]
fn signals_during_a_delayed_reply_do_not_break_the_acquisition() {
    let server = RedisServer::start();
    let mut holder = Holder::spawn(HOLDER, &["signalled", &server.url(), "sig"]);
    holder.expect("READY", LINE).unwrap();
    // Warm the script cache so the attempt is one request.
    drop(client(&server).lock("sig").unwrap());
    server.pause();
    holder.send("go");
    holder.expect("ASKING", LINE).unwrap();
    // The request now waits for a reply that the paused server holds back: signal it.
    for _ in 0..10 {
        holder.signal(libc::SIGUSR1);
        std::thread::sleep(Duration::from_millis(20));
    }
    holder.signal(libc::SIGSTOP);
    std::thread::sleep(Duration::from_millis(100));
    holder.signal(libc::SIGCONT);
    std::thread::sleep(Duration::from_millis(50));
    server.resume();
    let line = holder.expect("ACQUIRED", LINE);
    assert!(line.is_some(), "the acquisition failed under signals");
    let seen: usize = line.unwrap().rsplit(' ').next().unwrap().parse().unwrap();
    assert!(seen >= 1, "the handler ran");
    assert!(raw_token(&server, "sig").is_some());
    holder.send("release");
    assert_eq!(
        holder.expect("RELEASED", LINE).as_deref(),
        Some("RELEASED Released")
    );
    assert_eq!(raw_token(&server, "sig"), None, "no lock nobody owns");
}

/// The reply to an acquire is lost after the script ran (the connection is cut on its way
/// back): the caller finds out that it holds the lock (or gives it up), and nobody else waits
/// out a lock nobody owns.
#[test]
fn a_lost_acquire_reply_leaves_no_phantom_lock() {
    let server = RedisServer::start();
    let proxy = TcpProxy::start(server.port()).unwrap();
    let cut = client_for(&proxy.url());
    let other = client(&server);
    // Warm the connection and the script cache, then lose the next reply.
    drop(cut.lock("phantom").unwrap());
    proxy.cut_next_replies(1);
    let result = cut
        .options("phantom")
        .ttl(Duration::from_secs(30))
        .acquire();
    match result {
        Ok(guard) => {
            assert_eq!(
                raw_token(&server, "phantom").as_deref(),
                Some(guard.token()),
                "the caller holds what Redis holds"
            );
            drop(guard);
        }
        Err(e) => panic!("a lost reply should be recovered by asking again: {e}"),
    }
    let start = Instant::now();
    let next = other
        .try_lock_for("phantom", Duration::from_secs(2))
        .unwrap();
    assert!(next.is_some(), "a phantom lock kept the next caller out");
    assert!(
        start.elapsed() < Duration::from_millis(500),
        "{:?}",
        start.elapsed()
    );
}

/// A holder asking for a 200 ms TTL that receives the lock from a release and is killed at
/// once leaves it taken for about its own TTL, not the 1 s handoff grace.
#[test]
fn a_short_lock_taken_by_handoff_frees_within_its_ttl_when_its_holder_dies() {
    let server = RedisServer::start();
    let locks = client(&server);
    let first = locks.lock("short").unwrap();
    let mut waiter = Holder::spawn(HOLDER, &["wait", &server.url(), "short", "notify", "200"]);
    let mut raw = server.connection();
    assert!(wait_until(LINE, || {
        redis::cmd("EXISTS")
            .arg("lock:{short}:waiters")
            .query::<bool>(&mut raw)
            .unwrap()
    }));
    drop(first);
    waiter.expect("ACQUIRED", LINE).unwrap();
    waiter.kill();
    let killed = Instant::now();
    assert!(wait_until(Duration::from_secs(3), || raw_token(
        &server, "short"
    )
    .is_none()));
    let freed = killed.elapsed();
    assert!(
        freed < Duration::from_millis(200 + 150),
        "freed {freed:?} after its 200 ms holder died"
    );
}

/// A client of the server behind `proxy`, with 3 s connect and reply timeouts: a stalled
/// proxy leaves its requests hanging that long.
fn through_proxy(proxy: &TcpProxy) -> LockClient {
    LockClient::builder(&proxy.url())
        .io_timeout(Duration::from_secs(3))
        .connect_timeout(Duration::from_secs(3))
        .build()
        .unwrap()
}

/// With the server unreachable (a stalled proxy: renewals hang until their reply timeout),
/// the loss is reported when the lock runs out, as `RenewalFailed`, not when the stuck
/// renewal finally gives up.
#[test]
fn on_lost_fires_at_the_expiry_when_the_server_cannot_be_reached() {
    let server = RedisServer::start();
    let proxy = TcpProxy::start(server.port()).unwrap();
    let locks = through_proxy(&proxy);
    let (tx, rx) = std::sync::mpsc::channel();
    let sent = Instant::now();
    let guard = locks
        .options("cut-off")
        .ttl(Duration::from_millis(900))
        .on_lost(move |e| {
            let _ = tx.send((Instant::now(), e.reason));
        })
        .acquire()
        .unwrap();
    proxy.stall(true);
    let (at, reason) = rx.recv_timeout(Duration::from_secs(10)).unwrap();
    assert_eq!(reason, LostReason::RenewalFailed);
    let after = at.duration_since(sent);
    // The stuck renewal (sent a third of the TTL in) gives up after the 3 s reply timeout: a
    // report that waited for it would come 3.3 s in at the earliest. The bound is the TTL
    // plus half of the reply timeout; the rest is left to a loaded machine.
    assert!(
        after >= Duration::from_millis(900) && after < Duration::from_millis(900 + 1500),
        "on_lost {after:?} after acquiring a 900 ms lock"
    );
    assert!(guard.is_lost());
    proxy.stall(false);
}

/// Renewals of many locks go out combined (one request carries them all): when the server
/// stops answering, every one of the locks still reports its loss at its own expiry (none
/// waits on the one request in flight past it), and once the server answers again the client
/// renews new locks as before.
#[test]
fn many_locks_cut_off_together_all_report_the_loss_and_the_client_recovers() {
    const LOCKS: usize = 100;
    let server = RedisServer::start();
    let proxy = TcpProxy::start(server.port()).unwrap();
    let locks = through_proxy(&proxy);
    let (tx, rx) = std::sync::mpsc::channel();
    let mut guards = Vec::new();
    for i in 0..LOCKS {
        let tx = tx.clone();
        let sent = Instant::now();
        let guard = locks
            .options(&format!("cut-off-{i}"))
            .ttl(Duration::from_millis(900))
            .on_lost(move |e| {
                let _ = tx.send((i, Instant::now().duration_since(sent), e.reason));
            })
            .acquire()
            .unwrap();
        guards.push(guard);
    }
    proxy.stall(true);
    // Every report is collected before anything is asserted, and the proxy answers again
    // first: a failed assertion would otherwise drop 100 guards whose releases each wait out
    // the stalled proxy's reply timeout (minutes, not a failure).
    let reports: Vec<_> = (0..LOCKS)
        .map_while(|_| rx.recv_timeout(Duration::from_secs(10)).ok())
        .collect();
    let all_lost = guards.iter().all(|g| g.is_lost());
    proxy.stall(false);
    assert_eq!(reports.len(), LOCKS, "losses reported: {reports:?}");
    let mut seen = HashSet::new();
    // A lock whose report waited on the stuck renewal would report it at the earliest the
    // reply timeout (3 s) after that renewal went out, itself after the lock was taken: the
    // bound is the TTL plus half of that, which leaves the rest to a loaded machine.
    for &(i, after, reason) in &reports {
        assert_eq!(reason, LostReason::RenewalFailed, "lock {i}");
        assert!(
            after >= Duration::from_millis(900) && after < Duration::from_millis(900 + 1500),
            "lock {i}: on_lost {after:?} after acquiring a 900 ms lock"
        );
        assert!(seen.insert(i));
    }
    assert!(all_lost);
    // The request that was in flight fails within the reply timeout; then the lost locks'
    // releases and new locks' renewals go out again.
    drop(guards);
    let mut guard = None;
    assert!(wait_until(Duration::from_secs(10), || {
        guard = locks
            .options("after-the-cut")
            .ttl(Duration::from_millis(900))
            .try_acquire()
            .unwrap_or(None);
        guard.is_some()
    }));
    let guard = guard.unwrap();
    // Held for well past its TTL: only renewals keep it.
    std::thread::sleep(Duration::from_millis(2000));
    assert!(
        !guard.is_lost(),
        "a 900 ms lock renewed past its TTL after the cut"
    );
    guard.ensure_held().unwrap();
    assert_eq!(guard.release().unwrap(), ReleaseOutcome::Released);
}

/// A server frozen by a long command (`DEBUG SLEEP`) runs the requests it queued once it
/// wakes: an acquisition that failed for lack of an answer must not leave a lock that nobody
/// owns for its TTL. A client with no connection yet cannot even queue its undo behind the
/// attempt, so the undo is sent again until Redis answers it. Each call fails (or succeeds)
/// within its timeouts, not the freeze.
#[test]
fn an_acquisition_during_a_freeze_leaves_no_lock_that_nobody_owns() {
    let server = RedisServer::start_with(&["--enable-debug-command", "yes"]);
    let warm = client(&server);
    drop(warm.lock("warm-up").unwrap());
    let cold = client(&server);
    let freeze = Duration::from_secs(3);
    // Connected before the freeze: a connection's handshake would wait for it.
    let mut probe = server.connection();
    let freezer = {
        let mut redis = server.connection();
        std::thread::spawn(move || {
            redis::cmd("DEBUG")
                .arg("SLEEP")
                .arg(freeze.as_secs())
                .query::<()>(&mut redis)
        })
    };
    // The freeze is on once a PING goes unanswered.
    probe
        .set_read_timeout(Some(Duration::from_millis(50)))
        .unwrap();
    assert!(wait_until(Duration::from_secs(2), || redis::cmd("PING")
        .query::<String>(&mut probe)
        .is_err()));
    let frozen_at = Instant::now();
    let took: Vec<Duration> = std::thread::scope(|s| {
        [(&cold, "frozen-cold"), (&warm, "frozen-warm")]
            .map(|(locks, name)| {
                s.spawn(move || {
                    let started = Instant::now();
                    let got = locks.try_lock(name);
                    let took = started.elapsed();
                    match got {
                        Err(e) => assert!(e.is_connection_error(), "{name}: {e}"),
                        // Got it after all (an answer came in time): a lock with an owner.
                        Ok(guard) => drop(guard),
                    }
                    took
                })
            })
            .into_iter()
            .map(|h| h.join().unwrap())
            .collect()
    });
    for took in &took {
        assert!(*took < freeze, "a call waited out the freeze: {took:?}");
    }
    assert!(freezer.join().unwrap().is_ok());
    assert!(frozen_at.elapsed() >= freeze - Duration::from_millis(200));
    // Redis is awake: within a few seconds neither lock is there (without the undo sent
    // again, the cold client's attempt holds its lock for the whole default TTL, 30 s).
    assert!(
        wait_until(Duration::from_secs(5), || {
            !redis_lock_tests::holds(&server, "frozen-cold")
                && !redis_lock_tests::holds(&server, "frozen-warm")
        }),
        "a lock nobody owns: cold {}, warm {}",
        redis_lock_tests::holds(&server, "frozen-cold"),
        redis_lock_tests::holds(&server, "frozen-warm")
    );
}
