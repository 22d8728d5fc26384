//! Cool-down after release (`LockOptions::cooldown`, `LockGuard::release_after`): the lock
//! stays taken, by nobody, for the cool-down after its holder lets go, against real servers.

use std::io::BufRead;
use std::time::{Duration, Instant};

use redis_lock::{Error, ReleaseOutcome};
use redis_lock_tests::{RedisServer, client, holds, redlock_client, wait_until};

const HOLDER: &str = env!("CARGO_BIN_EXE_lock-holder");
const MS: Duration = Duration::from_millis(1);

fn raw_key_state(server: &RedisServer, key: &str) -> (i64, Option<String>) {
    let mut con = server.connection();
    let pttl: i64 = redis::cmd("PTTL").arg(key).query(&mut con).unwrap();
    (pttl, redis_lock_tests::stored_token(&mut con, key))
}

/// Two processes run the same job in a loop (50 ms body, 300 ms cool-down): however the runs
/// interleave, each starts at least 300 ms after the previous one ended, on one clock.
#[test]
fn two_processes_never_start_a_run_within_the_cooldown() {
    let server = RedisServer::start();
    let url = server.url();
    const RUNS: usize = 4;
    let children: Vec<_> = (0..2)
        .map(|_| {
            std::process::Command::new(HOLDER)
                .args(["cooldown", &url, "job", &RUNS.to_string(), "50", "300"])
                .stdout(std::process::Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    let mut runs: Vec<(u64, u64)> = Vec::new();
    for mut child in children {
        let out = std::io::BufReader::new(child.stdout.take().unwrap());
        let mut done = false;
        for line in out.lines() {
            let line = line.unwrap();
            if let Some(rest) = line.strip_prefix("RUN ") {
                let (start, end) = rest.split_once(' ').unwrap();
                runs.push((start.parse().unwrap(), end.parse().unwrap()));
            }
            done |= line == "DONE";
        }
        assert!(child.wait().unwrap().success());
        assert!(done, "the job loop finished");
    }
    assert_eq!(runs.len(), 2 * RUNS);
    runs.sort_unstable();
    for pair in runs.windows(2) {
        let gap = Duration::from_nanos(pair[1].0.saturating_sub(pair[0].1));
        assert!(
            pair[1].0 >= pair[0].1 && gap >= 300 * MS,
            "a run started {gap:?} after the previous one ended"
        );
    }
}

/// A waiter blocked while the lock cools down takes it when the cool-down ends: not before,
/// and within a few milliseconds after (not at the server's next 100 ms housekeeping tick).
#[test]
fn a_blocked_waiter_takes_the_lock_when_the_cooldown_ends() {
    let server = RedisServer::start();
    let holder = client(&server);
    let waiter = client(&server);
    let mut raw = server.connection();
    let mut taken = Vec::new();
    for round in 0..5 {
        let guard = holder.lock("cool").unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        let w = waiter.clone();
        let thread = std::thread::spawn(move || {
            let got = w.lock("cool").unwrap();
            tx.send(Instant::now()).unwrap();
            drop(got);
        });
        // The waiter has registered once the waiter set exists.
        assert!(wait_until(Duration::from_secs(2), || {
            redis::cmd("EXISTS")
                .arg("lock:{cool}:waiters")
                .query::<bool>(&mut raw)
                .unwrap()
        }));
        let sent = Instant::now();
        assert_eq!(
            guard.release_after(300 * MS).unwrap(),
            ReleaseOutcome::Released
        );
        let got = rx.recv_timeout(Duration::from_secs(5)).unwrap();
        thread.join().unwrap();
        let after = got.duration_since(sent);
        assert!(after >= 300 * MS, "round {round}: taken after {after:?}");
        // Woken at the cool-down's end, not left waiting for the next release or the
        // holder's TTL (30 s); the allowance is for a loaded machine's scheduling (the
        // median below is what tells a wake at the end from one at the server's tick).
        assert!(
            after < 2000 * MS,
            "round {round}: taken {after:?} after the release (cool-down 300 ms)"
        );
        taken.push(after);
    }
    // Most rounds within a few milliseconds: a wake at the server's 100 ms tick would put
    // the middle one 50 ms late on average.
    taken.sort();
    assert!(taken[2] < 340 * MS, "taken after {taken:?}");
}

/// With a minimum hold too, the lock frees at the later of the two.
#[test]
fn cooldown_and_minimum_hold_free_at_the_later_of_the_two() {
    let server = RedisServer::start();
    let locks = client(&server);
    let other = client(&server);
    // The minimum hold ends later: it decides. (Durations a loaded machine's stalls between
    // two steps here do not outlast.)
    let guard = locks
        .options("both")
        .hold_at_least(2000 * MS)
        .cooldown(300 * MS)
        .acquire()
        .unwrap();
    let acquired = Instant::now();
    assert_eq!(guard.release().unwrap(), ReleaseOutcome::Released);
    let info = locks.inspect("both").unwrap().expect("kept by nobody");
    assert!(!info.owned);
    assert!(info.cooling_until.is_some() && info.hold_until.is_some());
    assert!(info.remaining_ttl.unwrap() > 300 * MS, "{info:?}");
    let got = other.try_lock_for("both", Duration::from_secs(3)).unwrap();
    let after = acquired.elapsed();
    assert!(got.is_some() && after >= 2000 * MS, "{after:?}");
    drop(got);

    // The cool-down ends later: it decides.
    let guard = locks
        .options("both")
        .hold_at_least(100 * MS)
        .cooldown(2000 * MS)
        .acquire()
        .unwrap();
    std::thread::sleep(150 * MS); // past the minimum hold: the behaviour under test
    let released = Instant::now();
    assert_eq!(guard.release().unwrap(), ReleaseOutcome::Released);
    let (pttl, token) = raw_key_state(&server, "lock:{both}");
    assert_eq!(token.as_deref(), Some(""), "ownerless while it cools down");
    assert!(pttl > 1000 && pttl <= 2000, "{pttl}");
    let got = other.try_lock_for("both", Duration::from_secs(5)).unwrap();
    assert!(got.is_some() && released.elapsed() >= 2000 * MS);
}

/// A lost lock is not cooled down, fencing tokens are untouched, and nobody can renew or
/// release a cooling lock.
#[test]
fn a_lost_lock_is_not_cooled_and_tokens_keep_counting() {
    let server = RedisServer::start();
    let locks = client(&server);
    let other = client(&server);
    let first = locks
        .options("lost")
        .ttl(100 * MS)
        .watchdog(false)
        .cooldown(Duration::from_secs(5))
        .acquire()
        .unwrap();
    assert!(wait_until(Duration::from_secs(2), || first.is_lost()));
    let second = other
        .try_lock_for("lost", Duration::from_secs(1))
        .unwrap()
        .unwrap();
    // Higher, though not the next number: the counter expired with the lock, and the next
    // one starts from the clock.
    assert!(second.fencing_token() > first.fencing_token());
    let before = raw_key_state(&server, "lock:{lost}");
    assert_eq!(first.release().unwrap(), ReleaseOutcome::Lost);
    let after = raw_key_state(&server, "lock:{lost}");
    assert_eq!(before.1, after.1, "the new holder's token is untouched");
    assert!(
        after.0 > 5_000,
        "its ttl was not shortened to a cool-down: {after:?}"
    );
    assert!(second.extend(Duration::from_secs(10)).is_ok());
    let second_token = second.fencing_token();
    assert_eq!(
        second.release_after(Duration::from_millis(200)).unwrap(),
        ReleaseOutcome::Released
    );
    assert!(other.try_lock("lost").unwrap().is_none(), "cooling down");
    let third = other
        .try_lock_for("lost", Duration::from_secs(2))
        .unwrap()
        .unwrap();
    // Higher; not necessarily the next number: the attempt that found the lock cooling went
    // the native way, whose `INCR` used one up.
    assert!(third.fencing_token() > second_token);
}

#[test]
fn bad_cooldowns_are_refused_before_anything_is_written() {
    let server = RedisServer::start();
    let locks = client(&server);
    for bad in [Duration::ZERO, Duration::from_secs(400 * 24 * 3600)] {
        let err = locks.options("bad").cooldown(bad).acquire().unwrap_err();
        assert!(
            matches!(
                err,
                Error::InvalidInput {
                    what: "cooldown",
                    ..
                }
            ),
            "{err:?}"
        );
    }
    let keys: Vec<String> = redis::cmd("KEYS")
        .arg("*")
        .query(&mut server.connection())
        .unwrap();
    assert!(keys.is_empty(), "{keys:?}");
    let guard = locks.lock("bad").unwrap();
    let err = guard.release_after(Duration::ZERO).unwrap_err();
    assert!(matches!(
        err,
        Error::InvalidInput {
            what: "cooldown",
            ..
        }
    ));
}

/// Redlock: the cool-down holds on a majority like a minimum hold does.
#[test]
fn redlock_cools_down_on_every_server() {
    let servers = [
        RedisServer::start(),
        RedisServer::start(),
        RedisServer::start(),
    ];
    let refs: Vec<&RedisServer> = servers.iter().collect();
    let locks = redlock_client(&refs);
    let other = redlock_client(&refs);
    let guard = locks.options("job").cooldown(400 * MS).acquire().unwrap();
    // Acquired once a majority has it: let the third server's attempt land first, so that
    // the release below reaches all three as a release (not as the undo of a late attempt).
    assert!(wait_until(Duration::from_secs(5), || servers
        .iter()
        .all(|s| holds(s, "job"))));
    let released = Instant::now();
    assert_eq!(guard.release().unwrap(), ReleaseOutcome::Released);
    // The release returns once a majority released; the third server follows at once.
    let cooling = |server: &RedisServer| {
        let (pttl, token) = raw_key_state(server, "lock:{job}");
        token.as_deref() == Some("") && pttl > 0 && pttl <= 400
    };
    assert!(servers.iter().filter(|s| cooling(s)).count() >= 2);
    assert!(
        wait_until(Duration::from_millis(300), || servers.iter().all(cooling)),
        "every server cools down"
    );
    assert!(other.try_lock("job").unwrap().is_none());
    let got = other.try_lock_for("job", Duration::from_secs(3)).unwrap();
    assert!(got.is_some() && released.elapsed() >= 400 * MS);
}

#[redis_lock::distributed_lock(key = "macro-job", client = locks, cooldown = "300ms", on_busy = "skip")]
fn cooled_job(locks: &redis_lock::LockClient, runs: &std::sync::atomic::AtomicU32) {
    runs.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
}

/// The macro form: a second call within the cool-down is skipped, one after it runs.
#[test]
fn the_macro_cools_down_after_each_call() {
    use std::sync::atomic::{AtomicU32, Ordering};
    let server = RedisServer::start();
    let locks = client(&server);
    let runs = AtomicU32::new(0);
    cooled_job(&locks, &runs);
    let ended = Instant::now();
    cooled_job(&locks, &runs);
    assert_eq!(
        runs.load(Ordering::SeqCst),
        1,
        "skipped: still cooling down"
    );
    let info = locks.inspect("macro-job").unwrap().expect("cooling down");
    assert!(!info.owned && info.cooling_until.is_some());
    assert!(wait_until(Duration::from_secs(2), || {
        cooled_job(&locks, &runs);
        runs.load(Ordering::SeqCst) == 2
    }));
    assert!(ended.elapsed() >= 300 * MS);
}
