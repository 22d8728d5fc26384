//! Loss notification: a held lock changed by somebody else (`force_release`, `DEL`, a
//! takeover, a release through a shared handle) is known lost at once, through Redis's
//! client-side tracking, not at the next renewal; the lock's own renewals and release cost no
//! check; a server or ACL that refuses tracking leaves renewal as the detector, and the client
//! says so.
//!
//! Every lock here has the default 30 s TTL unless said otherwise: its first renewal is 10 s
//! away, so a loss noticed within a second was notified, not found by the watchdog.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use redis_lock::{LockClient, LockGuard, LockOptions, LossDetection, LostReason};
use redis_lock_tests::{
    RedisServer, acl_url, acl_user, admin, client, client_for, redlock_client, wait_until,
};

/// Far below the first renewal (10 s), far above a notification's round trips.
const NOTICED: Duration = Duration::from_secs(1);

/// A lock held by `locks`, with a callback that records when it was called, once it is
/// watched (the client asks to be notified after the lock has been held 2 ms).
fn watched(locks: &LockClient, name: &str) -> (LockGuard, Arc<AtomicU64>, Instant) {
    let called = Arc::new(AtomicU64::new(0));
    let epoch = Instant::now();
    let on_lost = {
        let called = Arc::clone(&called);
        move |_: &redis_lock::LostEvent| {
            let at = u64::try_from(epoch.elapsed().as_micros()).unwrap_or(u64::MAX);
            called.store(at.max(1), Ordering::SeqCst);
        }
    };
    let guard = locks
        .acquire_with(name, &LockOptions::new().on_lost(on_lost))
        .unwrap();
    assert!(
        wait_until(Duration::from_secs(2), || locks.loss_detection()
            == LossDetection::Notified),
        "{:?}",
        locks.loss_detection()
    );
    (guard, called, epoch)
}

/// Waits (bounded) for `guard` to know its loss; returns how long that took after `changed`.
fn noticed(guard: &LockGuard, changed: Instant) -> Duration {
    assert!(
        wait_until(NOTICED, || guard.is_lost()),
        "still believed held {:?} after the change",
        changed.elapsed()
    );
    changed.elapsed()
}

fn reason(guard: &LockGuard) -> LostReason {
    match guard.ensure_held() {
        Err(redis_lock::Error::Lost { reason, .. }) => reason,
        other => panic!("not lost: {other:?}"),
    }
}

#[test]
fn force_release_is_known_at_once_with_on_lost_called() {
    let server = RedisServer::start();
    let locks = client(&server);
    let (guard, called, epoch) = watched(&locks, "n-force");
    // Watched: wait past the first check so the change below is announced, not found by it.
    std::thread::sleep(Duration::from_millis(20));
    let changed = Instant::now();
    client(&server).force_release("n-force").unwrap();
    let took = noticed(&guard, changed);
    assert_eq!(reason(&guard), LostReason::Deleted);
    assert!(wait_until(NOTICED, || called.load(Ordering::SeqCst) > 0));
    let at = Duration::from_micros(called.load(Ordering::SeqCst));
    assert!(epoch + at >= changed, "on_lost before the change");
    eprintln!("force_release noticed after {took:?}");
}

#[test]
fn del_and_a_takeover_are_known_at_once_with_their_reasons() {
    let server = RedisServer::start();
    let locks = client(&server);
    let (deleted, _, _) = watched(&locks, "n-del");
    let (taken, _, _) = watched(&locks, "n-taken");
    std::thread::sleep(Duration::from_millis(20));

    let changed = Instant::now();
    admin(&server, &["DEL", "lock:{n-del}"]);
    noticed(&deleted, changed);
    assert_eq!(reason(&deleted), LostReason::Deleted);
    assert!(
        !taken.is_lost(),
        "a change to another key is not this lock's"
    );

    // Somebody else's lock under the name (as after an expiry and a takeover).
    let changed = Instant::now();
    admin(
        &server,
        &[
            "SET",
            "lock:{n-taken}",
            "intruder\nhost\n1\n0\n",
            "PX",
            "30000",
        ],
    );
    noticed(&taken, changed);
    assert_eq!(reason(&taken), LostReason::TakenOver);
}

#[test]
fn a_release_through_a_shared_handle_is_known_to_the_other_holder_at_once() {
    let server = RedisServer::start();
    let locks = client(&server);
    let (guard, _, _) = watched(&locks, "n-shared");
    std::thread::sleep(Duration::from_millis(20));
    let elsewhere = client(&server);
    let other = elsewhere.resume(&guard.handle()).unwrap();
    let changed = Instant::now();
    assert_eq!(
        other.release().unwrap(),
        redis_lock::ReleaseOutcome::Released
    );
    noticed(&guard, changed);
}

#[test]
fn check_held_reports_a_loss_at_once_even_before_the_lock_is_watched() {
    let server = RedisServer::start();
    let locks = client(&server);
    let guard = locks.lock("n-check").unwrap();
    client(&server).force_release("n-check").unwrap();
    assert!(guard.check_held().is_err());
    assert!(guard.is_lost());
}

#[test]
fn own_renewals_and_release_cost_no_check() {
    let server = RedisServer::start();
    let locks = client(&server);
    // The first release learns whether the server has a native compare-and-delete.
    locks.lock("n-own-first").unwrap().release().unwrap();
    let guard = locks
        .acquire_with("n-own", &LockOptions::new().ttl(Duration::from_millis(300)))
        .unwrap();
    assert!(wait_until(Duration::from_secs(2), || locks
        .loss_detection()
        == LossDetection::Notified));
    // After the first renewal, whose script the new server did not have yet.
    std::thread::sleep(Duration::from_millis(150));
    let before = locks.request_count();
    // About 9 renewals (every 100 ms).
    std::thread::sleep(Duration::from_millis(950));
    let during = locks.request_count() - before;
    assert!(!guard.is_lost());
    assert!(
        (7..=11).contains(&during),
        "{during} requests in 950 ms of renewals every 100 ms: a renewal that came back as a \
         change would add a check each"
    );
    let before = locks.request_count();
    guard.release().unwrap();
    // The release's own change is not taken for a loss: nothing follows it.
    std::thread::sleep(Duration::from_millis(50));
    assert_eq!(locks.request_count() - before, 1);
}

/// Locks held less than 2 ms send nothing for loss notification: no check, no tracking. A
/// cycle that took 2 ms or more here (a loaded machine can stall one between its lock and
/// its release) proves nothing, so each attempt is a fresh client and five cycles, and the
/// first attempt whose cycles all ended within 2 ms of their start is the one checked.
#[test]
fn a_lock_given_back_within_two_milliseconds_sends_nothing_for_notification() {
    let server = RedisServer::start();
    let mut slowest = Vec::new();
    for _ in 0..100 {
        let locks = client(&server);
        // The first cycle opens a connection and learns what the server has: not counted,
        // and the client not kept if it took long enough to start notification (which
        // comes up in the background, so its state right after the release would not say).
        let start = Instant::now();
        locks.lock("n-short").unwrap().release().unwrap();
        if start.elapsed() >= Duration::from_millis(2) {
            slowest.push(start.elapsed());
            continue;
        }
        let before = locks.request_count();
        let mut longest = Duration::ZERO;
        for _ in 0..5 {
            let start = Instant::now();
            locks.lock("n-short").unwrap().release().unwrap();
            longest = longest.max(start.elapsed());
        }
        if longest >= Duration::from_millis(2) {
            slowest.push(longest);
            continue;
        }
        assert_eq!(locks.request_count() - before, 10);
        assert_eq!(locks.loss_detection(), LossDetection::NotStarted);
        return;
    }
    panic!("no attempt had five cycles within 2 ms each: their slowest cycles {slowest:?}");
}

#[test]
fn a_redlock_holder_knows_at_once_when_the_quorum_lost_its_lock() {
    let servers = [
        RedisServer::start(),
        RedisServer::start(),
        RedisServer::start(),
    ];
    let all: Vec<&RedisServer> = servers.iter().collect();
    let locks = redlock_client(&all);
    let (guard, _, _) = watched(&locks, "n-redlock");
    std::thread::sleep(Duration::from_millis(20));
    // One server's key gone: the majority still holds it.
    admin(&servers[0], &["DEL", "lock:{n-redlock}"]);
    std::thread::sleep(Duration::from_millis(200));
    assert!(!guard.is_lost(), "two of three servers still hold it");
    // A second: lost.
    let changed = Instant::now();
    admin(&servers[1], &["DEL", "lock:{n-redlock}"]);
    noticed(&guard, changed);
}

#[test]
fn a_restarted_server_is_listened_to_again() {
    let mut server = RedisServer::start();
    let locks = client(&server);
    let (guard, _, _) = watched(&locks, "n-restart");
    server.restart();
    // The restart lost the key (no persistence): the reconnected listener has every watcher
    // check.
    assert!(
        wait_until(Duration::from_secs(3), || guard.is_lost()),
        "a lock gone with a restart stays believed held"
    );
    // And a lock taken after the restart is watched again.
    let (again, _, _) = watched(&locks, "n-restart-2");
    std::thread::sleep(Duration::from_millis(20));
    let changed = Instant::now();
    admin(&server, &["DEL", "lock:{n-restart-2}"]);
    noticed(&again, changed);
}

#[test]
fn an_acl_without_tracking_leaves_renewal_as_the_detector_and_says_so() {
    let server = RedisServer::start();
    acl_user(&server, &redis_lock_tests::lock_acl_without_notification());
    let locks = client_for(&acl_url(&server));
    let guard = locks
        .acquire_with("n-acl", &LockOptions::new().ttl(Duration::from_millis(600)))
        .unwrap();
    assert!(
        wait_until(Duration::from_secs(2), || locks.loss_detection()
            == LossDetection::Renewal),
        "{:?}",
        locks.loss_detection()
    );
    // Locks still work, and the renewal (every 200 ms) finds the loss.
    client(&server).force_release("n-acl").unwrap();
    assert!(wait_until(Duration::from_secs(2), || guard.is_lost()));
    let other = locks.try_lock("n-acl-2").unwrap().expect("free");
    other.release().unwrap();
}

#[test]
fn through_sentinel_the_new_master_is_listened_to_after_a_failover() {
    let group = redis_lock::testing::SentinelGroup::start();
    let locks = redis_lock_tests::sentinel_client(&group);
    let kept = locks
        .options("n-kept")
        .replicas(1, Duration::from_secs(2))
        .acquire()
        .unwrap();
    assert!(wait_until(Duration::from_secs(2), || locks
        .loss_detection()
        == LossDetection::Notified));
    let old = group.master_port();
    let new = group.failover();
    assert_ne!(new, old);
    // Once the client has followed the failover, the lock (replicated) is still ours, and a
    // change to it on the new master is announced.
    assert!(
        wait_until(Duration::from_secs(10), || kept.check_held().is_ok()),
        "the replicated lock is held on the new master"
    );
    // Listening to the new master: its own check after the reconnect has read the key there.
    std::thread::sleep(Duration::from_millis(500));
    let changed = Instant::now();
    admin(group.master(), &["DEL", "lock:{n-kept}"]);
    noticed(&kept, changed);
    assert_eq!(locks.loss_detection(), LossDetection::Notified);
}

#[test]
fn on_a_cluster_each_master_announces_changes_to_its_keys() {
    let cluster = redis_lock::testing::RedisCluster::start(3);
    let locks = redis_lock_tests::cluster_client(&cluster);
    // Names on different masters.
    let mut names: Vec<String> = Vec::new();
    let mut ports = std::collections::HashSet::new();
    for i in 0..200 {
        let name = format!("n-cluster-{i}");
        let port = cluster.port_for_slot(cluster.keyslot(&format!("lock:{{{name}}}")));
        if ports.insert(port) {
            names.push(name);
        }
        if names.len() == 3 {
            break;
        }
    }
    assert_eq!(names.len(), 3, "three masters");
    let held: Vec<_> = names.iter().map(|n| watched(&locks, n)).collect();
    std::thread::sleep(Duration::from_millis(100));
    for ((guard, _, _), name) in held.iter().zip(&names) {
        let key = format!("lock:{{{name}}}");
        let node = cluster.node_for_slot(cluster.keyslot(&key));
        let changed = Instant::now();
        admin(node, &["DEL", &key]);
        noticed(guard, changed);
        assert_eq!(reason(guard), LostReason::Deleted);
    }
}

#[test]
fn cluster_renewals_cost_no_check() {
    let cluster = redis_lock::testing::RedisCluster::start(3);
    let locks = redis_lock_tests::cluster_client(&cluster);
    let guard = locks
        .acquire_with(
            "n-cluster-own",
            &LockOptions::new().ttl(Duration::from_millis(300)),
        )
        .unwrap();
    assert!(wait_until(Duration::from_secs(2), || locks
        .loss_detection()
        == LossDetection::Notified));
    std::thread::sleep(Duration::from_millis(150));
    let before = locks.request_count();
    std::thread::sleep(Duration::from_millis(950));
    let during = locks.request_count() - before;
    assert!(!guard.is_lost());
    assert!(
        (7..=11).contains(&during),
        "{during} requests in 950 ms of renewals every 100 ms"
    );
}

#[test]
fn a_dropped_client_leaves_no_notification_connection_behind() {
    let server = RedisServer::start();
    let locks = client(&server);
    let (guard, _, _) = watched(&locks, "n-drop");
    drop(guard);
    drop(locks);
    // Only the probe's own connection is left, well within the listener's 500 ms slice.
    let clients = || -> u64 {
        server
            .info_field("clients", "connected_clients")
            .unwrap()
            .parse()
            .unwrap()
    };
    assert!(
        wait_until(Duration::from_millis(300), || clients() == 1),
        "{} connections left",
        clients()
    );
}

/// The id of the connection with tracking on (`flags=t` in `CLIENT LIST`) that is not the
/// canary's (whose last command is always its `GET`), if any.
fn tracked_connection(redis: &mut redis::Connection) -> Option<u64> {
    tracking_connection(redis, false)
}

/// The id of a connection with tracking on, the canary's or the other.
fn tracking_connection(redis: &mut redis::Connection, canary: bool) -> Option<u64> {
    let list: String = redis::cmd("CLIENT").arg("LIST").query(redis).unwrap();
    list.lines().find_map(|line| {
        let field = |name: &str| {
            line.split(' ')
                .find_map(|f| f.strip_prefix(name))
                .map(str::to_owned)
        };
        (field("flags=").is_some_and(|flags| flags.contains('t'))
            && (field("cmd=").as_deref() == Some("get")) == canary)
            .then(|| field("id=")?.parse().ok())
            .flatten()
    })
}

/// The canary's connection (the one that tells a full tracking table) killed: it is opened
/// again within milliseconds, the client says `Notified` again, and a loss is still announced.
#[test]
fn a_killed_canary_connection_is_opened_again() {
    let server = RedisServer::start();
    let locks = client(&server);
    let mut redis = server.connection();
    let (guard, called, _) = watched(&locks, "n-canary-kill");
    assert!(wait_until(NOTICED, || tracking_connection(
        &mut redis, true
    )
    .is_some()));
    let before = tracking_connection(&mut redis, true).unwrap();
    admin(&server, &["CLIENT", "KILL", "ID", &before.to_string()]);
    // The listener looks at the canary's connection at least every half second.
    assert!(
        wait_until(Duration::from_secs(2), || {
            tracking_connection(&mut redis, true).is_some_and(|id| id != before)
                && locks.loss_detection() == LossDetection::Notified
        }),
        "{:?}",
        locks.loss_detection()
    );
    let changed = Instant::now();
    admin(&server, &["DEL", "lock:{n-canary-kill}"]);
    noticed(&guard, changed);
    assert!(wait_until(NOTICED, || called.load(Ordering::SeqCst) > 0));
}

/// How long 20 holders each took to learn that their lock was deleted, sorted; with
/// `kill_first`, the tracked connection is killed (`CLIENT KILL`, as a server or proxy
/// `timeout` closing idle connections does) 500 ms before each deletion. While the client is
/// blind, `loss_detection()` never says `Notified`: whenever it does, a connection of the
/// client's is tracked.
fn notice_times(server: &RedisServer, kill_first: bool) -> Vec<Duration> {
    let locks = client(server);
    let mut redis = server.connection();
    let mut took = Vec::new();
    for round in 0..20 {
        let name = format!("n-kill-{kill_first}-{round}");
        let (guard, called, epoch) = watched(&locks, &name);
        assert!(wait_until(NOTICED, || locks.registrations().watchers == 1));
        let killed = Instant::now();
        let mut before = None;
        if kill_first {
            let id = tracked_connection(&mut redis).expect("a tracked connection");
            admin(server, &["CLIENT", "KILL", "ID", &id.to_string()]);
            before = Some(id);
        }
        // Until the deletion: once the client has seen the kill (it says so, or tracks on a
        // new connection), detection and tracking agree at every sample.
        let mut seen = before.is_none();
        while killed.elapsed() < Duration::from_millis(500) {
            let detection = locks.loss_detection();
            let tracked = tracked_connection(&mut redis);
            seen |=
                detection != LossDetection::Notified || tracked.is_some_and(|t| before != Some(t));
            if seen && detection == LossDetection::Notified {
                assert!(
                    tracked.is_some(),
                    "round {round}: Notified {:?} after the kill, with nothing tracked",
                    killed.elapsed()
                );
            }
            if !seen {
                assert!(
                    killed.elapsed() < NOTICED,
                    "round {round}: the kill not seen after {NOTICED:?}"
                );
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        assert_eq!(
            locks.loss_detection(),
            LossDetection::Notified,
            "round {round}"
        );
        let changed = Instant::now();
        admin(server, &["DEL", &format!("lock:{{{name}}}")]);
        noticed(&guard, changed);
        assert_eq!(reason(&guard), LostReason::Deleted);
        // When `on_lost` was called: the moment the client knew.
        assert!(wait_until(NOTICED, || called.load(Ordering::SeqCst) > 0));
        let at = epoch + Duration::from_micros(called.load(Ordering::SeqCst));
        took.push(at.saturating_duration_since(changed));
    }
    took.sort();
    took
}

/// A killed tracked connection is noticed at once, not at the next request on it: the keys
/// are tracked again within milliseconds and a loss 500 ms later is announced as any other,
/// not found at the next renewal (10 s away). The bound is the same run's notice time with
/// nothing killed.
#[test]
fn a_killed_tracked_connection_is_reopened_at_once_and_a_later_loss_is_notified() {
    let server = RedisServer::start();
    let reference = notice_times(&server, false);
    let killed = notice_times(&server, true);
    let (p50, p99) = (killed[killed.len() / 2], killed[killed.len() - 1]);
    let reference_p99 = reference[reference.len() - 1];
    eprintln!(
        "after a killed tracked connection: p50 {p50:?}, p99 {p99:?}; nothing killed: p50 {:?}, \
         p99 {reference_p99:?}",
        reference[reference.len() / 2]
    );
    // The renewal that would find it otherwise is 10 s away; a loaded machine's scheduling
    // can delay one round by tens of milliseconds.
    assert!(
        p99 <= (reference_p99 * 4).max(Duration::from_millis(100)),
        "{killed:?} against {reference:?}"
    );
}

/// Requests one lock held for `hold` with `ttl` costs `locks`, from its acquisition to its
/// release, less the `PEXPIRE`s `server` ran meanwhile: each renewal runs one (so does the
/// acquisition, for its fencing counter, in either mode alike), so a renewal more or less on a
/// loaded machine does not count.
fn requests_beside_renewals(
    locks: &LockClient,
    server: &RedisServer,
    ttl: Duration,
    hold: Duration,
) -> i64 {
    let mut redis = server.connection();
    redis_lock_tests::reset_stats(&mut redis);
    let before = locks.request_count();
    let guard = locks
        .acquire_with("n-short", &LockOptions::new().ttl(ttl))
        .unwrap();
    std::thread::sleep(hold);
    assert!(!guard.is_lost());
    guard.release().unwrap();
    let requests = i64::try_from(locks.request_count() - before).unwrap();
    let pexpires = redis_lock_tests::command_counts(&mut redis)
        .get("pexpire")
        .copied()
        .unwrap_or(0);
    assert!(pexpires >= 2, "ttl {ttl:?}: {pexpires} renewals");
    requests - i64::try_from(pexpires).unwrap()
}

/// At any TTL a lock's own renewals and release cost notification nothing: held for about two
/// TTLs by a new client, a lock sends as many requests besides its renewals with loss
/// notification as without, plus the one check when it becomes watched (not a check more
/// while the listener connects, nor one per renewal). The server has the scripts already (a
/// first client's cycle).
#[test]
fn a_short_lock_costs_notification_one_check_and_nothing_per_renewal() {
    let server = RedisServer::start();
    for (ttl, hold) in [(1000, 2167), (300, 1050)] {
        let (ttl, hold) = (Duration::from_millis(ttl), Duration::from_millis(hold));
        requests_beside_renewals(&client(&server), &server, ttl, hold);
        let on = requests_beside_renewals(&client(&server), &server, ttl, hold);
        let off = requests_beside_renewals(
            &redis_lock_tests::client_without_notification(&server.url()),
            &server,
            ttl,
            hold,
        );
        assert_eq!(
            on,
            off + 1,
            "ttl {ttl:?}: {on} requests besides renewals with notification, {off} without"
        );
    }
}

/// Commands from another connection in a loop until `stop`: each one the server runs makes it
/// evict from a full tracking table (as any busy server's traffic would). Bounded: at most
/// ten million.
fn traffic(
    server: &RedisServer,
    stop: &Arc<std::sync::atomic::AtomicBool>,
) -> std::thread::JoinHandle<u64> {
    let stop = Arc::clone(stop);
    let mut redis = server.connection();
    std::thread::spawn(move || {
        let mut sent = 0;
        while !stop.load(Ordering::SeqCst) && sent < 10_000_000 {
            let _: String = redis::cmd("PING").query(&mut redis).unwrap();
            sent += 1;
        }
        sent
    })
}

/// A server whose tracking table is full (`tracking-table-max-keys 2`, five locks held) forgets
/// tracked keys to make room, announcing each as a change; a check then tracks its key again
/// and pushes another out, at the pace of the server's other commands, and a key pushed out by
/// the client's own command is not announced at all. The client says so (`Renewal`), sends
/// about its renewals and nothing more while another connection keeps the server busy, finds a
/// loss at the next renewal, and once the table has room again says `Notified` and notices a
/// loss within milliseconds.
#[test]
fn a_full_tracking_table_falls_back_to_renewals_until_it_has_room() {
    let server = RedisServer::start();
    admin(&server, &["CONFIG", "SET", "tracking-table-max-keys", "2"]);
    let locks = client(&server);
    // Renewed every second.
    let ttl = Duration::from_secs(3);
    let held: Vec<LockGuard> = (0..5)
        .map(|i| {
            locks
                .acquire_with(&format!("n-evict-{i}"), &LockOptions::new().ttl(ttl))
                .unwrap()
        })
        .collect();
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let busy = traffic(&server, &stop);
    assert!(
        wait_until(Duration::from_secs(5), || locks.loss_detection()
            == LossDetection::Renewal),
        "{:?} with a full tracking table",
        locks.loss_detection()
    );
    // A quiet second for the client, a busy one for the server: a renewal per lock, and a
    // probe or two (the canary, a check per lock, the checks of the evictions until the canary
    // is evicted again), 16 to 40 requests; a check per eviction would be thousands.
    let (sent, ()) = redis_lock_tests::requests(&locks, || {
        std::thread::sleep(Duration::from_secs(1));
    });
    eprintln!("a full tracking table: {sent} requests in a second");
    assert!(
        sent <= 100,
        "{sent} requests in a second of 5 locks renewed every second"
    );
    assert_eq!(locks.loss_detection(), LossDetection::Renewal);
    // A loss is found by the next renewal, a second away at most.
    let changed = Instant::now();
    client(&server).force_release("n-evict-2").unwrap();
    assert!(
        wait_until(ttl * 2 / 3, || held[2].is_lost()),
        "not noticed after {:?}",
        changed.elapsed()
    );
    eprintln!(
        "a full tracking table: a loss noticed after {:?}",
        changed.elapsed()
    );
    assert!(held.iter().enumerate().all(|(i, g)| i == 2 || !g.is_lost()));

    // Room again: notified again, and a loss is announced (the default TTL's first renewal
    // is 10 s away).
    admin(&server, &["CONFIG", "SET", "tracking-table-max-keys", "0"]);
    let at = Instant::now();
    assert!(
        wait_until(Duration::from_secs(40), || locks.loss_detection()
            == LossDetection::Notified),
        "{:?} after the table has room",
        locks.loss_detection()
    );
    eprintln!("notified again after {:?}", at.elapsed());
    let (guard, called, _) = watched(&locks, "n-evict-late");
    std::thread::sleep(Duration::from_millis(20));
    let changed = Instant::now();
    client(&server).force_release("n-evict-late").unwrap();
    let took = noticed(&guard, changed);
    assert!(wait_until(NOTICED, || called.load(Ordering::SeqCst) > 0));
    eprintln!("room again: a loss noticed after {took:?}");
    stop.store(true, Ordering::SeqCst);
    assert!(busy.join().unwrap() > 0);
}
