//! How long an unreachable Redis takes to fail. A refused connection fails at once, whatever
//! the connect timeout; a server that accepts connections but never answers fails within
//! `connect_timeout` (it bounds the TCP connect and the handshake together), not the reply
//! timeout; and neither the pool's own retrying, nor the acquire loop's second attempt after a
//! lost reply, nor the number of callers multiplies that. Both kinds of unreachable server are
//! on loopback: a port nobody listens on, and a listener nobody reads from.

use std::net::TcpListener;
use std::time::{Duration, Instant};

use redis_lock::{Error, LockClient};
use redis_lock_tests::RedisServer;

/// What "at once" allows on a loaded machine (two copies of the suite and a build beside it
/// can stall a thread for hundreds of milliseconds): far below every timeout the clients
/// here set (5 s), which is what a refusal must not wait out (r2d2's own connecting would
/// retry until the pool timeout).
const AT_ONCE: Duration = Duration::from_millis(1000);

/// The connect timeout of the clients facing a server that never answers, and what may come
/// on top of it on a loaded machine: less than a second connect timeout, so one connect
/// attempt is told from two, and far from the 5 s reply timeout.
const CONNECT: Duration = Duration::from_millis(1000);
const MARGIN: Duration = Duration::from_millis(900);

/// A loopback port nobody listens on: bound, then closed again. A connect there is refused.
fn refused_port() -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    listener.local_addr().unwrap().port()
}

/// A loopback listener that accepts connections (the kernel completes them) and never reads
/// or answers.
struct Silent(TcpListener);

impl Silent {
    fn start() -> Silent {
        Silent(TcpListener::bind("127.0.0.1:0").unwrap())
    }

    fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/", self.0.local_addr().unwrap().port())
    }
}

/// A client whose reply and pool timeouts are long, so a failure within `connect` can only
/// come from the connect timeout.
fn client(url: &str, connect: Duration) -> LockClient {
    LockClient::builder(url)
        .connect_timeout(connect)
        .io_timeout(Duration::from_secs(5))
        .pool_timeout(Duration::from_secs(5))
        .build()
        .unwrap()
}

/// How long `f` took to fail, and its error.
fn timed<T: std::fmt::Debug>(
    what: &str,
    f: impl FnOnce() -> redis_lock::Result<T>,
) -> (Duration, Error) {
    let start = Instant::now();
    match f() {
        Err(err) => (start.elapsed(), err),
        Ok(answer) => panic!("{what}: an unreachable Redis answered {answer:?}"),
    }
}

#[test]
fn a_refused_connection_fails_at_once() {
    let url = format!("redis://127.0.0.1:{}/", refused_port());
    let locks = client(&url, Duration::from_secs(5));
    // Twice each: the first call's failed connect must leave nothing behind that the next
    // one waits for (a connection the pool keeps retrying in the background).
    for round in 0..2 {
        for (what, (took, err)) in [
            ("try_lock", timed("try_lock", || locks.try_lock("refused"))),
            ("lock", timed("lock", || locks.lock("refused"))),
            ("inspect", timed("inspect", || locks.inspect("refused"))),
            ("ping", timed("ping", || locks.ping())),
        ] {
            assert!(err.is_connection_error(), "{what}: {err}");
            assert!(took < AT_ONCE, "round {round}: {what} took {took:?}: {err}");
            // The refusal itself is the error, not a pool's timeout.
            assert!(matches!(err, Error::Connect { .. }), "{what}: {err:?}");
        }
    }
}

/// The first `io::Error` in `err`'s source chain, and its kind.
fn io_kind(err: &Error) -> Option<std::io::ErrorKind> {
    let mut next = std::error::Error::source(err);
    while let Some(cause) = next {
        if let Some(io) = cause.downcast_ref::<std::io::Error>() {
            return Some(io.kind());
        }
        next = cause.source();
    }
    None
}

/// `Error::Connect`'s source keeps the operating system's kind: a refused connect is
/// `ConnectionRefused`, a server that accepts and never answers `TimedOut`.
#[test]
fn a_connect_error_keeps_the_kind_of_its_cause() {
    let url = format!("redis://127.0.0.1:{}/", refused_port());
    let (_, err) = timed("try_lock", || {
        client(&url, Duration::from_secs(5)).try_lock("refused")
    });
    assert!(matches!(err, Error::Connect { .. }), "{err:?}");
    assert_eq!(
        io_kind(&err),
        Some(std::io::ErrorKind::ConnectionRefused),
        "{err:?}"
    );
    let silent = Silent::start();
    let (_, err) = timed("try_lock", || {
        client(&silent.url(), CONNECT).try_lock("silent")
    });
    assert!(matches!(err, Error::Connect { .. }), "{err:?}");
    assert_eq!(io_kind(&err), Some(std::io::ErrorKind::TimedOut), "{err:?}");
}

#[test]
fn a_server_that_never_answers_fails_within_the_connect_timeout() {
    let silent = Silent::start();
    let locks = client(&silent.url(), CONNECT);
    for (what, (took, err)) in [
        ("try_lock", timed("try_lock", || locks.try_lock("silent"))),
        ("lock", timed("lock", || locks.lock("silent"))),
        ("inspect", timed("inspect", || locks.inspect("silent"))),
        ("ping", timed("ping", || locks.ping())),
    ] {
        assert!(matches!(err, Error::Connect { .. }), "{what}: {err:?}");
        assert!(
            took >= CONNECT && took < CONNECT + MARGIN,
            "{what} took {took:?}: {err}"
        );
    }
}

/// Every handshake is bounded by the one connect timeout: our own connection's `AUTH` and
/// `SELECT`, and the `redis` crate's connections (RESP3's `HELLO`, TLS), whose own handshake
/// would read each of its replies with the whole timeout.
#[test]
fn every_kind_of_handshake_is_bounded_by_the_connect_timeout() {
    let silent = Silent::start();
    let port = silent.0.local_addr().unwrap().port();
    let mut urls = vec![
        format!("redis://127.0.0.1:{port}/3"),
        format!("redis://:secret@127.0.0.1:{port}/"),
        format!("redis://user:secret@127.0.0.1:{port}/2"),
        format!("redis://127.0.0.1:{port}/?protocol=resp3"),
        format!("redis://:secret@127.0.0.1:{port}/1?protocol=resp3"),
    ];
    if cfg!(feature = "tls") {
        urls.push(format!("rediss://127.0.0.1:{port}/#insecure"));
        urls.push(format!("rediss://:secret@127.0.0.1:{port}/4#insecure"));
    }
    for url in urls {
        let locks = client(&url, CONNECT);
        let (took, err) = timed("try_lock", || locks.try_lock("silent"));
        assert!(matches!(err, Error::Connect { .. }), "{url}: {err:?}");
        assert!(
            took >= CONNECT && took < CONNECT + MARGIN,
            "{url}: {took:?}: {err}"
        );
    }
}

/// Callers that find no connection each connect on their own thread: eight of them at once
/// all fail within one connect timeout, not one after the other.
#[test]
fn concurrent_callers_facing_a_silent_server_each_fail_within_the_connect_timeout() {
    let silent = Silent::start();
    let locks = client(&silent.url(), CONNECT);
    let took: Vec<(Duration, Error)> = std::thread::scope(|s| {
        let callers: Vec<_> = (0..8)
            .map(|i| {
                let locks = &locks;
                s.spawn(move || timed("try_lock", || locks.try_lock(&format!("silent-{i}"))))
            })
            .collect();
        callers.into_iter().map(|c| c.join().unwrap()).collect()
    });
    for (took, err) in &took {
        assert!(err.is_connection_error(), "{err}");
        assert!(*took < CONNECT + MARGIN, "{took:?}: {err}");
    }
}

/// Redlock asks its servers at once: a quorum of unreachable servers fails as fast as one.
#[test]
fn a_redlock_of_unreachable_servers_fails_within_one_connect_timeout() {
    let refused: Vec<String> = (0..3)
        .map(|_| format!("redis://127.0.0.1:{}/", refused_port()))
        .collect();
    let build = |urls: &[String], connect: Duration| {
        LockClient::redlock_builder(urls)
            .connect_timeout(connect)
            .io_timeout(Duration::from_secs(5))
            .pool_timeout(Duration::from_secs(5))
            .build()
            .unwrap()
    };
    let locks = build(&refused, Duration::from_secs(5));
    for (what, (took, err)) in [
        ("try_lock", timed("try_lock", || locks.try_lock("refused"))),
        ("lock", timed("lock", || locks.lock("refused"))),
    ] {
        assert!(matches!(err, Error::NoQuorum { .. }), "{what}: {err}");
        assert!(took < AT_ONCE, "{what} took {took:?}: {err}");
    }
    let silent = [Silent::start(), Silent::start(), Silent::start()];
    let urls: Vec<String> = silent.iter().map(Silent::url).collect();
    let locks = build(&urls, CONNECT);
    for (what, (took, err)) in [
        ("try_lock", timed("try_lock", || locks.try_lock("silent"))),
        ("lock", timed("lock", || locks.lock("silent"))),
    ] {
        assert!(matches!(err, Error::NoQuorum { .. }), "{what}: {err}");
        assert!(took < CONNECT + MARGIN, "{what} took {took:?}: {err}");
    }
}

/// A Redlock with one server down still answers at once: the down server's refusal costs
/// nothing, and the lock is taken on the two that are up.
#[test]
fn a_redlock_with_a_refused_server_acquires_and_releases_at_once() {
    let (a, b) = (RedisServer::start(), RedisServer::start());
    let urls = [
        a.url(),
        b.url(),
        format!("redis://127.0.0.1:{}/", refused_port()),
    ];
    let locks = LockClient::redlock_builder(urls)
        .connect_timeout(Duration::from_secs(5))
        .io_timeout(Duration::from_secs(5))
        .build()
        .unwrap();
    let start = Instant::now();
    let guard = locks.try_lock("two-of-three").unwrap().expect("free");
    guard.release().unwrap();
    // Busy on a majority: the answer waits for every server, the refused one included.
    let holder = locks.try_lock("busy").unwrap().expect("free");
    let other = LockClient::redlock_builder([
        a.url(),
        b.url(),
        format!("redis://127.0.0.1:{}/", refused_port()),
    ])
    .connect_timeout(Duration::from_secs(5))
    .build()
    .unwrap();
    assert!(other.try_lock("busy").unwrap().is_none());
    drop(holder);
    let took = start.elapsed();
    assert!(took < AT_ONCE * 3, "{took:?}");
}

/// Sentinel: refused sentinels fail at once; a silent sentinel costs one connect timeout
/// before the next one is asked.
#[test]
fn sentinels_that_refuse_fail_at_once() {
    let sentinels: Vec<String> = (0..2)
        .map(|_| format!("redis://127.0.0.1:{}/", refused_port()))
        .collect();
    let locks = LockClient::sentinel_builder("mymaster", sentinels)
        .connect_timeout(Duration::from_secs(5))
        .io_timeout(Duration::from_secs(5))
        .pool_timeout(Duration::from_secs(5))
        .build()
        .unwrap();
    let (took, err) = timed("try_lock", || locks.try_lock("refused"));
    assert!(err.is_connection_error(), "{err}");
    assert!(took < AT_ONCE, "{took:?}: {err}");
    let silent = Silent::start();
    let locks = LockClient::sentinel_builder("mymaster", [silent.url()])
        .connect_timeout(CONNECT)
        .io_timeout(Duration::from_secs(5))
        .pool_timeout(Duration::from_secs(5))
        .build()
        .unwrap();
    let (took, err) = timed("try_lock", || locks.try_lock("silent"));
    assert!(err.is_connection_error(), "{err}");
    assert!(took < CONNECT + MARGIN, "{took:?}: {err}");
}

/// Cluster: the `redis` crate connects to the seed nodes in turn; refused seeds fail at once,
/// and a seed that never answers costs at most what `Builder::connect_timeout` says (its
/// handshake of two `CLIENT SETINFO`, each read with the whole timeout).
#[test]
fn a_cluster_of_unreachable_seeds_fails_within_the_documented_bound() {
    let refused = [
        format!("redis://127.0.0.1:{}/", refused_port()),
        format!("redis://127.0.0.1:{}/", refused_port()),
    ];
    let locks = LockClient::cluster_builder(refused)
        .connect_timeout(Duration::from_secs(5))
        .io_timeout(Duration::from_secs(5))
        .pool_timeout(Duration::from_secs(5))
        .build()
        .unwrap();
    let (took, err) = timed("try_lock", || locks.try_lock("refused"));
    assert!(matches!(err, Error::Connect { .. }), "{err:?}");
    assert!(took < AT_ONCE, "{took:?}: {err}");
    let silent = Silent::start();
    let locks = LockClient::cluster_builder([silent.url()])
        .connect_timeout(CONNECT)
        .io_timeout(Duration::from_secs(5))
        .pool_timeout(Duration::from_secs(5))
        .build()
        .unwrap();
    let (took, err) = timed("try_lock", || locks.try_lock("silent"));
    assert!(matches!(err, Error::Connect { .. }), "{err:?}");
    assert!(took < CONNECT * 3 + MARGIN, "{took:?}: {err}");
}
