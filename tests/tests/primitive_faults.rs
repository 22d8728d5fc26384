//! The mutex's fault tests (`faults.rs`), per primitive: a semaphore's permit, a read share and
//! a write lock, against real redis-server processes through a TCP proxy that loses replies,
//! delays them or stalls, and a server that is killed and restarted. Each kind must come
//! through as the mutex does: no phantom permit or share left behind by a lost reply, an
//! acquisition that cannot learn its outcome gives up what it took, a loss reported at the
//! expiry when the server is unreachable, a client that works again after a restart, and a
//! dead holder's hold taken soon after it expires, whatever the server's `hz`.

use std::sync::mpsc;
use std::time::{Duration, Instant};

use redis_lock::{
    Error, LockClient, LockGuard, LockMode, LockOptions, LostReason, ReleaseOutcome, Result,
};
use redis_lock_tests::{RedisServer, TcpProxy, client, wait_until};

/// The three kinds of hold that are not the mutex.
#[derive(Debug, Clone, Copy)]
enum Kind {
    /// A permit of a semaphore of one.
    Permit,
    Read,
    Write,
}

const KINDS: [Kind; 3] = [Kind::Permit, Kind::Read, Kind::Write];

impl Kind {
    fn name(self) -> &'static str {
        match self {
            Kind::Permit => "sem",
            Kind::Read => "reads",
            Kind::Write => "writes",
        }
    }

    /// One attempt (blocking up to the options' wait) to take this kind of hold on `name`.
    fn take(self, locks: &LockClient, name: &str, opts: LockOptions) -> Result<Option<LockGuard>> {
        match self {
            Kind::Permit => locks.semaphore(name, 1)?.try_acquire_with(&opts),
            Kind::Read => locks.try_acquire_with(name, &opts.mode(LockMode::Read)),
            Kind::Write => locks.try_acquire_with(name, &opts.mode(LockMode::Write)),
        }
    }

    /// The acquisition a leftover of this kind would keep out: the semaphore's only permit,
    /// or the write lock (a share or a write lock keeps a writer out). Returns how long it
    /// took, or `None` when it did not get in within `limit`.
    fn rival(self, locks: &LockClient, name: &str, limit: Duration) -> Option<Duration> {
        let start = Instant::now();
        let got = match self {
            Kind::Permit => locks
                .semaphore(name, 1)
                .unwrap()
                .try_acquire_for(limit)
                .unwrap(),
            Kind::Read | Kind::Write => locks.try_write_lock_for(name, limit).unwrap(),
        }?;
        let took = start.elapsed();
        assert_eq!(got.release().unwrap(), ReleaseOutcome::Released);
        Some(took)
    }
}

/// The reply to an acquisition is lost after the script ran: the caller asks again with the
/// same token and holds exactly what Redis holds (one permit, one share: not two), and once it
/// lets go nothing is left that keeps the next caller out.
#[test]
fn a_lost_acquire_reply_leaves_no_phantom_permit_or_share() {
    let server = RedisServer::start();
    let proxy = TcpProxy::start(server.port()).unwrap();
    // Without loss notification: its connections' traffic through the proxy would take the
    // reply the proxy cuts.
    let cut = redis_lock_tests::client_without_notification(&proxy.url());
    let other = client(&server);
    for kind in KINDS {
        let name = kind.name();
        // Warm the connection and the script cache, then lose the next reply.
        let warm = kind.take(&cut, name, LockOptions::new()).unwrap().unwrap();
        assert_eq!(warm.release().unwrap(), ReleaseOutcome::Released);
        let connections = proxy.accepted();
        proxy.cut_next_replies(1);
        let guard = kind
            .take(&cut, name, LockOptions::new().ttl(Duration::from_secs(30)))
            .unwrap_or_else(|e| panic!("{kind:?}: a lost reply is recovered by asking again: {e}"))
            .unwrap_or_else(|| panic!("{kind:?}: free, yet not taken"));
        assert!(
            proxy.accepted() > connections,
            "{kind:?}: the reply was cut, so the client asked again on a new connection"
        );
        assert!(!guard.is_lost(), "{kind:?}");
        guard.ensure_held().unwrap();
        match kind {
            Kind::Permit => {
                let semaphore = other.semaphore(name, 1).unwrap();
                assert_eq!(semaphore.available().unwrap(), 0, "{kind:?}");
                let holders = semaphore.inspect().unwrap().holders;
                assert_eq!(holders.len(), 1, "{kind:?}: {holders:?}");
            }
            Kind::Read | Kind::Write => {
                let info = other.inspect(name).unwrap().expect("held");
                assert_eq!(info.fencing_token, guard.fencing_token(), "{kind:?}");
                if let Kind::Read = kind {
                    assert_eq!(info.readers, 1, "{kind:?}: one share, not two");
                }
            }
        }
        assert_eq!(
            guard.release().unwrap(),
            ReleaseOutcome::Released,
            "{kind:?}"
        );
        let took = kind
            .rival(&other, name, Duration::from_secs(2))
            .unwrap_or_else(|| panic!("{kind:?}: a phantom kept the next caller out"));
        assert!(took < Duration::from_millis(500), "{kind:?}: {took:?}");
    }
}

/// Every reply of an acquisition comes back too late (200 ms each way, a 300 ms reply
/// timeout): the script ran in Redis, the caller gets a connection error, and what it took is
/// given up under its token, so the next caller gets in at once rather than after the 5 s TTL.
#[test]
fn an_acquisition_whose_replies_time_out_gives_the_permit_or_share_up() {
    let server = RedisServer::start();
    let proxy = TcpProxy::start(server.port()).unwrap();
    let slow = LockClient::builder(&proxy.url())
        .io_timeout(Duration::from_millis(300))
        .build()
        .unwrap();
    let other = client(&server);
    for kind in KINDS {
        let name = kind.name();
        let warm = kind.take(&slow, name, LockOptions::new()).unwrap().unwrap();
        assert_eq!(warm.release().unwrap(), ReleaseOutcome::Released);
        proxy.set_latency(Duration::from_millis(200));
        let err = kind
            .take(&slow, name, LockOptions::new().ttl(Duration::from_secs(5)))
            .unwrap_err();
        assert!(err.is_connection_error(), "{kind:?}: {err}");
        proxy.set_latency(Duration::ZERO);
        let took = kind
            .rival(&other, name, Duration::from_secs(3))
            .unwrap_or_else(|| panic!("{kind:?}: kept for its TTL by a caller that gave up"));
        assert!(took < Duration::from_secs(1), "{kind:?}: {took:?}");
    }
}

/// With the server unreachable (a stalled proxy), each kind reports its loss as
/// `RenewalFailed` when its TTL runs out, not when a stuck renewal finally gives up.
#[test]
fn on_lost_fires_at_the_expiry_for_every_kind_when_the_server_cannot_be_reached() {
    let server = RedisServer::start();
    let proxy = TcpProxy::start(server.port()).unwrap();
    let locks = LockClient::builder(&proxy.url())
        .io_timeout(Duration::from_secs(3))
        .connect_timeout(Duration::from_secs(3))
        .build()
        .unwrap();
    let (tx, rx) = mpsc::channel();
    let mut guards = Vec::new();
    let mut sent = Vec::new();
    for (i, kind) in KINDS.into_iter().enumerate() {
        let tx = tx.clone();
        sent.push(Instant::now());
        let opts = LockOptions::new()
            .ttl(Duration::from_millis(900))
            .on_lost(move |e| {
                let _ = tx.send((i, Instant::now(), e.reason));
            });
        guards.push(kind.take(&locks, kind.name(), opts).unwrap().unwrap());
    }
    proxy.stall(true);
    let mut seen = [false; 3];
    for _ in KINDS {
        let (i, at, reason) = rx.recv_timeout(Duration::from_secs(10)).unwrap();
        let kind = KINDS[i];
        assert_eq!(reason, LostReason::RenewalFailed, "{kind:?}");
        assert!(!seen[i], "{kind:?} reported twice");
        seen[i] = true;
        let after = at.duration_since(sent[i]);
        assert!(
            after >= Duration::from_millis(900) && after < Duration::from_millis(900 + 250),
            "{kind:?}: on_lost {after:?} after acquiring a 900 ms hold"
        );
        assert!(guards[i].is_lost(), "{kind:?}");
    }
    proxy.stall(false);
}

/// Redis is killed under a permit, a share and a write lock: each is reported lost within
/// its TTL (and once), calls fail fast with a connection error while it is down, and after
/// the restart (the keys went with it) all three can be taken again. The old guards'
/// releases then say what Redis holds: `Lost` for the write lock (another writer has it),
/// `Late` for the permit and the share (a permit or share is its holder's alone: it expired,
/// and the new holder's is another one, left untouched).
#[test]
fn every_kind_is_reported_lost_when_redis_dies_and_works_again_after_a_restart() {
    let mut server = RedisServer::start();
    let locks = client(&server);
    let (tx, rx) = mpsc::channel();
    let guards: Vec<LockGuard> = KINDS
        .into_iter()
        .enumerate()
        .map(|(i, kind)| {
            let tx = tx.clone();
            let opts = LockOptions::new()
                .ttl(Duration::from_millis(800))
                .on_lost(move |e| {
                    let _ = tx.send((i, e.reason));
                });
            kind.take(&locks, kind.name(), opts).unwrap().unwrap()
        })
        .collect();
    let killed = Instant::now();
    server.kill();
    let mut seen = [false; 3];
    for _ in KINDS {
        let (i, reason) = rx.recv_timeout(Duration::from_secs(5)).unwrap();
        assert_eq!(reason, LostReason::RenewalFailed, "{:?}", KINDS[i]);
        assert!(!seen[i], "{:?} reported twice", KINDS[i]);
        seen[i] = true;
    }
    assert!(
        killed.elapsed() < Duration::from_secs(3),
        "{:?}",
        killed.elapsed()
    );
    for (kind, guard) in KINDS.into_iter().zip(&guards) {
        assert!(
            matches!(
                guard.ensure_held(),
                Err(Error::Lost {
                    reason: LostReason::RenewalFailed,
                    ..
                })
            ),
            "{kind:?}"
        );
        let start = Instant::now();
        let err = kind
            .take(&locks, kind.name(), LockOptions::new())
            .unwrap_err();
        assert!(err.is_connection_error(), "{kind:?}: {err}");
        assert!(start.elapsed() < Duration::from_secs(3), "{kind:?}");
    }
    server.restart();
    for (kind, guard) in KINDS.into_iter().zip(guards) {
        let next = kind
            .take(&locks, kind.name(), LockOptions::new())
            .unwrap()
            .unwrap_or_else(|| panic!("{kind:?}: free after the restart"));
        let expected = match kind {
            Kind::Permit | Kind::Read => ReleaseOutcome::Late,
            Kind::Write => ReleaseOutcome::Lost,
        };
        assert_eq!(guard.release().unwrap(), expected, "{kind:?}");
        next.ensure_held().unwrap();
        assert_eq!(
            next.release().unwrap(),
            ReleaseOutcome::Released,
            "{kind:?}"
        );
    }
    assert!(rx.try_recv().is_err(), "no loss reported twice");
}

/// A dead holder's permit, share or write lock (its guard forgotten, no watchdog) is taken
/// by the caller waiting for it soon after it expires, also on a server whose event loop
/// turns once a second (`hz 1`, which would end a blocked wait up to 1 s late; see
/// `contention.rs::a_waiter_takes_an_expired_lock_on_time_whatever_the_servers_hz`).
#[test]
fn a_dead_holders_permit_or_share_is_taken_on_time_whatever_the_servers_hz() {
    const TTL: Duration = Duration::from_millis(300);
    let server = RedisServer::start_with(&["--hz", "1"]);
    let holders = client(&server);
    let waiters = client(&server);
    for kind in KINDS {
        let name = kind.name();
        let sent = Instant::now();
        let guard = kind
            .take(&holders, name, LockOptions::new().ttl(TTL).watchdog(false))
            .unwrap()
            .unwrap();
        std::mem::forget(guard); // as if its process had died: nothing is released
        let asked = sent.elapsed();
        let took = kind
            .rival(&waiters, name, Duration::from_secs(5))
            .unwrap_or_else(|| panic!("{kind:?}: never free"));
        let at = asked + took;
        assert!(
            at >= TTL,
            "{kind:?}: taken {at:?} after a {TTL:?} hold began"
        );
        assert!(
            at < TTL + Duration::from_millis(250),
            "{kind:?}: taken {:?} after the expiry",
            at - TTL
        );
    }
}

/// A caller blocked waiting for a permit or a write lock while Redis goes away does not hang
/// past its deadline: it comes back with a connection error (as the mutex's waiter does), or,
/// if Redis is back first, with the hold (the keys went with the restart).
#[test]
fn a_waiter_blocked_when_redis_dies_comes_back_within_its_deadline() {
    let mut server = RedisServer::start();
    let locks = client(&server);
    let held: Vec<LockGuard> = [Kind::Permit, Kind::Write]
        .into_iter()
        .map(|kind| {
            kind.take(&locks, kind.name(), LockOptions::new())
                .unwrap()
                .unwrap()
        })
        .collect();
    let waiters: Vec<_> = [Kind::Permit, Kind::Write]
        .into_iter()
        .map(|kind| {
            let locks = locks.clone();
            std::thread::spawn(move || {
                let start = Instant::now();
                let got = kind.take(
                    &locks,
                    kind.name(),
                    LockOptions::new().wait(Duration::from_secs(8)),
                );
                (kind, got.map(|g| g.is_some()), start.elapsed())
            })
        })
        .collect();
    // Both wait: registered in Redis.
    let mut raw = server.connection();
    assert!(wait_until(Duration::from_secs(5), || {
        ["sem", "writes"].iter().all(|name| {
            redis::cmd("EXISTS")
                .arg(format!("lock:{{{name}}}:waiters"))
                .query::<bool>(&mut raw)
                .unwrap()
        })
    }));
    drop(raw);
    server.kill();
    std::thread::sleep(Duration::from_millis(300));
    server.restart();
    for waiter in waiters {
        let (kind, got, took) = waiter.join().unwrap();
        match got {
            Ok(true) => {}
            Ok(false) => panic!("{kind:?}: gave up though the hold was free after the restart"),
            Err(e) => assert!(e.is_connection_error(), "{kind:?}: {e}"),
        }
        assert!(took < Duration::from_secs(8 + 2), "{kind:?}: {took:?}");
    }
    for guard in held {
        assert_ne!(guard.release().unwrap(), ReleaseOutcome::Released);
    }
}

/// A release whose request never reaches Redis (the connection is stalled, then cut with the
/// request still in it) fails for its caller, and the hold is given back in the background
/// once Redis can be reached: the next caller gets in at once, not after the 30 s TTL.
#[test]
fn a_release_that_never_arrived_is_sent_again_until_redis_answers() {
    let server = RedisServer::start();
    let proxy = TcpProxy::start(server.port()).unwrap();
    // Without loss notification: its connections through the proxy are not what is measured.
    let cut = redis_lock_tests::client_without_notification(&proxy.url());
    let other = client(&server);
    for kind in KINDS {
        let name = kind.name();
        let guard = kind
            .take(&cut, name, LockOptions::new().ttl(Duration::from_secs(30)))
            .unwrap()
            .unwrap_or_else(|| panic!("{kind:?}: free"));
        proxy.stall(true);
        let err = guard.release().unwrap_err();
        assert!(err.is_connection_error(), "{kind:?}: {err:?}");
        // The release is lost with the connection it waits in.
        proxy.drop_connections();
        assert_eq!(cut.registrations().giving_back, 1, "{kind:?}");
        assert!(
            kind.rival(&other, name, Duration::from_millis(100))
                .is_none(),
            "{kind:?}: still held while Redis cannot be reached"
        );
        proxy.stall(false);
        let took = kind.rival(&other, name, Duration::from_secs(10));
        assert!(
            took.is_some_and(|t| t < Duration::from_secs(5)),
            "{kind:?}: given back once Redis answered, not at the TTL: {took:?}"
        );
        assert!(
            wait_until(Duration::from_secs(2), || cut.registrations().giving_back
                == 0),
            "{kind:?}: {:?}",
            cut.registrations()
        );
    }
}
