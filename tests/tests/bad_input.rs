//! Bad input, as a table: every case gets a clear `Error::InvalidInput` or `Error::WrongType`
//! (never a panic, never a silent success), and Redis is left exactly as it was: every key,
//! type, value and TTL compared before and after.

use std::collections::BTreeMap;
use std::time::Duration;

use redis_lock::{Error, LockClient, MAX_KEY_LEN, MAX_METADATA_LEN, MAX_NAMESPACE_LEN, MAX_TTL};
use redis_lock_tests::{RedisServer, client};

/// Every key with its type, its serialized value (`DUMP`) and its remaining TTL.
type Dump = BTreeMap<Vec<u8>, (String, Vec<u8>, i64)>;

fn dump(server: &RedisServer) -> Dump {
    let mut con = server.connection();
    let keys: Vec<Vec<u8>> = redis::cmd("KEYS").arg("*").query(&mut con).unwrap();
    keys.into_iter()
        .map(|k| {
            let kind: String = redis::cmd("TYPE").arg(&k).query(&mut con).unwrap();
            let value: Vec<u8> = redis::cmd("DUMP").arg(&k).query(&mut con).unwrap();
            let pttl: i64 = redis::cmd("PTTL").arg(&k).query(&mut con).unwrap();
            (k, (kind, value, pttl))
        })
        .collect()
}

/// Equal, except that a TTL may have run down (or been renewed) by up to `slack`.
fn assert_same(before: &Dump, after: &Dump, slack: i64) {
    assert_eq!(
        before.keys().collect::<Vec<_>>(),
        after.keys().collect::<Vec<_>>(),
        "the set of keys changed"
    );
    for (k, (kind, value, pttl)) in before {
        let (kind2, value2, pttl2) = &after[k];
        let name = String::from_utf8_lossy(k);
        assert_eq!(kind, kind2, "type of {name}");
        assert_eq!(value, value2, "value of {name}");
        if *pttl < 0 || *pttl2 < 0 {
            assert_eq!(pttl, pttl2, "expiry of {name}");
        } else {
            assert!(
                (pttl - pttl2).abs() <= slack,
                "ttl of {name}: {pttl} vs {pttl2}"
            );
        }
    }
}

#[derive(Debug)]
enum Expect {
    Invalid(&'static str),
    WrongType(&'static str),
}

fn check(case: &str, result: redis_lock::Result<()>, expect: &Expect) {
    match (expect, &result) {
        (Expect::Invalid(what), Err(Error::InvalidInput { what: w, reason })) => {
            assert_eq!(w, what, "{case}: {reason}");
            assert!(!reason.is_empty(), "{case}");
        }
        (Expect::WrongType(key), Err(Error::WrongType { redis_key })) => {
            assert_eq!(redis_key, key, "{case}");
        }
        _ => panic!("{case}: expected {expect:?}, got {result:?}"),
    }
    // The message says what was wrong, in words.
    let text = result.unwrap_err().to_string();
    assert!(text.len() > 10, "{case}: {text}");
}

fn seed(server: &RedisServer) {
    let mut con = server.connection();
    let mut cmd = |args: &[&str]| {
        let mut c = redis::cmd(args[0]);
        for a in &args[1..] {
            c.arg(*a);
        }
        c.query::<redis::Value>(&mut con).unwrap();
    };
    cmd(&["SET", "lock:{string}", "user data"]);
    cmd(&["RPUSH", "lock:{list}", "a", "b"]);
    cmd(&["SADD", "lock:{set}", "a"]);
    cmd(&["HSET", "lock:{hash}", "user", "data"]);
    cmd(&["ZADD", "lock:{zset}", "1", "a"]);
    cmd(&["XADD", "lock:{stream}", "*", "f", "v"]);
    cmd(&["RPUSH", "lock:{fence-list}:fence", "x"]);
    cmd(&["SET", "lock:{signal-string}:signal", "x"]);
    cmd(&["SET", "app:data", "untouched", "PX", "600000"]);
}

#[test]
#[allow(deprecated)] // `waiter_pool_size` does nothing, and is still checked
fn bad_input_table() {
    let server = RedisServer::start();
    seed(&server);
    let locks = client(&server);
    // A held lock, for the guard-level cases.
    let held = locks
        .options("held")
        .ttl(Duration::from_secs(30))
        .acquire()
        .unwrap();
    let before = dump(&server);
    let url = server.url();
    let long_key = "k".repeat(MAX_KEY_LEN + 1);
    let long_ns = "n".repeat(MAX_NAMESPACE_LEN + 1);
    let long_meta = "m".repeat(MAX_METADATA_LEN + 1);
    let build = |b: redis_lock::Builder| b.build().map(drop);

    let cases: Vec<(&str, redis_lock::Result<()>, Expect)> = vec![
        (
            "empty key",
            locks.try_lock("").map(drop),
            Expect::Invalid("key"),
        ),
        (
            "oversized key",
            locks.try_lock(&long_key).map(drop),
            Expect::Invalid("key"),
        ),
        (
            "key breaking the hash tag",
            locks.try_lock("}x").map(drop),
            Expect::Invalid("key"),
        ),
        (
            "empty key to inspect",
            locks.inspect("").map(drop),
            Expect::Invalid("key"),
        ),
        (
            "empty key to force_release",
            locks.force_release("").map(drop),
            Expect::Invalid("key"),
        ),
        (
            "zero ttl",
            locks
                .options("k")
                .ttl(Duration::ZERO)
                .try_acquire()
                .map(drop),
            Expect::Invalid("ttl"),
        ),
        (
            "sub-millisecond ttl",
            locks
                .options("k")
                .ttl(Duration::from_micros(999))
                .try_acquire()
                .map(drop),
            Expect::Invalid("ttl"),
        ),
        (
            "ttl over the limit",
            locks
                .options("k")
                .ttl(MAX_TTL + Duration::from_millis(1))
                .try_acquire()
                .map(drop),
            Expect::Invalid("ttl"),
        ),
        (
            "overflowing ttl",
            locks
                .options("k")
                .ttl(Duration::MAX)
                .try_acquire()
                .map(drop),
            Expect::Invalid("ttl"),
        ),
        (
            "overflowing wait",
            locks.try_lock_for("k", Duration::MAX).map(drop),
            Expect::Invalid("wait"),
        ),
        (
            "overflowing wait in options",
            locks
                .options("k")
                .wait(Duration::MAX)
                .try_acquire()
                .map(drop),
            Expect::Invalid("wait"),
        ),
        (
            "overflowing minimum hold",
            locks
                .options("k")
                .hold_at_least(Duration::MAX)
                .try_acquire()
                .map(drop),
            Expect::Invalid("hold_at_least"),
        ),
        (
            "overflowing replica timeout",
            locks
                .options("k")
                .replicas(1, Duration::MAX)
                .try_acquire()
                .map(drop),
            Expect::Invalid("replicas"),
        ),
        (
            "oversized metadata",
            locks
                .options("k")
                .metadata(long_meta)
                .try_acquire()
                .map(drop),
            Expect::Invalid("metadata"),
        ),
        (
            "extend by zero",
            held.extend(Duration::ZERO),
            Expect::Invalid("ttl"),
        ),
        (
            "overflowing extend",
            held.extend(Duration::MAX),
            Expect::Invalid("ttl"),
        ),
        (
            "empty url",
            LockClient::open("").map(drop),
            Expect::Invalid("url"),
        ),
        (
            "not a url",
            LockClient::open("not a url").map(drop),
            Expect::Invalid("url"),
        ),
        (
            "wrong scheme",
            LockClient::open("http://127.0.0.1/").map(drop),
            Expect::Invalid("url"),
        ),
        (
            "unclosed ipv6 host",
            LockClient::open("redis://:pw@[::1").map(drop),
            Expect::Invalid("url"),
        ),
        (
            "port out of range",
            LockClient::open("redis://127.0.0.1:99999/").map(drop),
            Expect::Invalid("url"),
        ),
        (
            "database not a number",
            LockClient::open("redis://127.0.0.1/zero").map(drop),
            Expect::Invalid("url"),
        ),
        (
            "namespace with an opening brace",
            build(LockClient::builder(&url).namespace("a{")),
            Expect::Invalid("namespace"),
        ),
        (
            "namespace with a closing brace",
            build(LockClient::builder(&url).namespace("}a")),
            Expect::Invalid("namespace"),
        ),
        (
            "oversized namespace",
            build(LockClient::builder(&url).namespace(long_ns)),
            Expect::Invalid("namespace"),
        ),
        (
            "zero default ttl",
            build(LockClient::builder(&url).default_ttl(Duration::ZERO)),
            Expect::Invalid("ttl"),
        ),
        (
            "zero pool size",
            build(LockClient::builder(&url).pool_size(0)),
            Expect::Invalid("pool_size"),
        ),
        (
            "zero waiter pool size",
            build(LockClient::builder(&url).waiter_pool_size(0)),
            Expect::Invalid("waiter_pool_size"),
        ),
        (
            "zero connect timeout",
            build(LockClient::builder(&url).connect_timeout(Duration::ZERO)),
            Expect::Invalid("connect_timeout"),
        ),
        (
            "zero pool timeout",
            build(LockClient::builder(&url).pool_timeout(Duration::ZERO)),
            Expect::Invalid("pool_timeout"),
        ),
        (
            "zero io timeout",
            build(LockClient::builder(&url).io_timeout(Duration::ZERO)),
            Expect::Invalid("io_timeout"),
        ),
        // Past their bounds: each panicked or aborted the process in `build` before.
        (
            "endless io timeout",
            build(LockClient::builder(&url).io_timeout(Duration::MAX)),
            Expect::Invalid("io_timeout"),
        ),
        (
            "endless connect timeout",
            build(LockClient::builder(&url).connect_timeout(Duration::MAX)),
            Expect::Invalid("connect_timeout"),
        ),
        (
            "endless pool timeout",
            build(LockClient::builder(&url).pool_timeout(Duration::MAX)),
            Expect::Invalid("pool_timeout"),
        ),
        (
            "absurd pool size",
            build(LockClient::builder(&url).pool_size(u32::MAX)),
            Expect::Invalid("pool_size"),
        ),
        (
            "absurd waiter pool size",
            build(LockClient::builder(&url).waiter_pool_size(u32::MAX)),
            Expect::Invalid("waiter_pool_size"),
        ),
        (
            "default wait past the clock",
            build(LockClient::builder(&url).default_wait(Duration::MAX)),
            Expect::Invalid("default_wait"),
        ),
        (
            "endless sentinel check interval",
            build(
                LockClient::sentinel_builder("m", [url.as_str()])
                    .sentinel_check_interval(Duration::MAX),
            ),
            Expect::Invalid("sentinel_check_interval"),
        ),
        (
            "a sentinel-only setting on a Redlock client",
            build(LockClient::redlock_builder([url.as_str()]).master_auth(Some("bob"), "pw")),
            Expect::Invalid("master_auth"),
        ),
        (
            "a Redlock default ttl inside the drift allowance",
            build(
                LockClient::redlock_builder([url.as_str()]).default_ttl(Duration::from_millis(2)),
            ),
            Expect::Invalid("default_ttl"),
        ),
        (
            "lock key is a string",
            locks.try_lock("string").map(drop),
            Expect::WrongType("lock:{string}"),
        ),
        (
            "lock key is a list",
            locks.lock("list").map(drop),
            Expect::WrongType("lock:{list}"),
        ),
        (
            "lock key is a set",
            locks.try_lock_for("set", Duration::from_secs(1)).map(drop),
            Expect::WrongType("lock:{set}"),
        ),
        (
            "lock key is a hash redis-lock did not write",
            locks.try_lock("hash").map(drop),
            Expect::WrongType("lock:{hash}"),
        ),
        (
            "lock key is a sorted set",
            locks.try_lock("zset").map(drop),
            Expect::WrongType("lock:{zset}"),
        ),
        (
            "lock key is a stream",
            locks.try_lock("stream").map(drop),
            Expect::WrongType("lock:{stream}"),
        ),
        (
            "inspect a string",
            locks.inspect("string").map(drop),
            Expect::WrongType("lock:{string}"),
        ),
        (
            "force_release a list",
            locks.force_release("list").map(drop),
            Expect::WrongType("lock:{list}"),
        ),
        (
            "fence key is a list",
            locks.try_lock("fence-list").map(drop),
            Expect::WrongType("lock:{fence-list}:fence"),
        ),
        // A fair caller reads the wake-up list; a plain one taking a free lock natively does
        // not (`release_with_a_foreign_signal_key_changes_nothing`).
        (
            "signal key is a string",
            locks
                .options("signal-string")
                .retry(redis_lock::RetryStrategy::fair())
                .try_acquire()
                .map(drop),
            Expect::WrongType("lock:{signal-string}:signal"),
        ),
    ];
    assert!(cases.len() >= 40);
    for (case, result, expect) in cases {
        check(case, result, &expect);
    }
    // A rejected URL does not echo its password.
    let err = LockClient::open("redis://:hunter2@[::1").unwrap_err();
    assert!(!err.to_string().contains("hunter2"), "{err}");

    assert_same(&before, &dump(&server), 5_000);
    assert!(!held.is_lost());
}

/// A foreign value under a lock's wake-up list: the release of a lock that took the full path
/// (a hash) reads the list and refuses with nothing changed; a lock taken natively (a string)
/// nobody registered for is released without reading the list, which stays as it was.
#[test]
fn release_with_a_foreign_signal_key_changes_nothing() {
    let server = RedisServer::start();
    let locks = client(&server);
    let native = locks
        .options("plain")
        .ttl(Duration::from_secs(30))
        .acquire()
        .unwrap();
    let _: () = redis::cmd("SET")
        .arg("lock:{plain}:signal")
        .arg("someone else's")
        .query(&mut server.connection())
        .unwrap();
    assert_eq!(
        native.release().unwrap(),
        redis_lock::ReleaseOutcome::Released
    );
    let left: Option<String> = redis::cmd("GET")
        .arg("lock:{plain}:signal")
        .query(&mut server.connection())
        .unwrap();
    assert_eq!(left.as_deref(), Some("someone else's"));

    // Fair mode takes the full path, which leaves a hash.
    let guard = locks
        .options("sig")
        .ttl(Duration::from_secs(30))
        .retry(redis_lock::RetryStrategy::fair())
        .acquire()
        .unwrap();
    let _: () = redis::cmd("SET")
        .arg("lock:{sig}:signal")
        .arg("someone else's")
        .query(&mut server.connection())
        .unwrap();
    let before = dump(&server);
    match guard.release() {
        Err(Error::WrongType { redis_key }) => assert_eq!(redis_key, "lock:{sig}:signal"),
        other => panic!("expected WrongType, got {other:?}"),
    }
    assert_same(&before, &dump(&server), 5_000);
    match locks.force_release("sig") {
        Err(Error::WrongType { redis_key }) => assert_eq!(redis_key, "lock:{sig}:signal"),
        other => panic!("expected WrongType, got {other:?}"),
    }
    assert_same(&before, &dump(&server), 5_000);
}

/// Errors follow the standard library's guidelines: `Display` says what happened at this
/// level, `source()` carries the cause, so the whole chain (as anyhow's `{:#}` prints it) says
/// each thing once.
#[test]
fn error_chains_say_each_thing_once() {
    let unreachable = redis_lock::LockClient::builder("redis://127.0.0.1:1/")
        .connect_timeout(Duration::from_millis(200))
        .build()
        .unwrap();
    let server = RedisServer::start();
    let wrong_type = client(&server);
    let _: () = redis::cmd("SET")
        .arg("lock:{text}")
        .arg("x")
        .query(&mut server.connection())
        .unwrap();
    let errors = [
        unreachable.try_lock("job").unwrap_err(),
        wrong_type.try_lock("text").unwrap_err(),
        redis_lock::Error::System(std::io::Error::other("no threads left")),
    ];
    for err in errors {
        let mut levels = vec![err.to_string()];
        let mut cause = std::error::Error::source(&err);
        while let Some(c) = cause {
            levels.push(c.to_string());
            cause = c.source();
        }
        let chain = levels.join(": ");
        for (i, level) in levels.iter().enumerate() {
            for later in &levels[i + 1..] {
                assert!(
                    !level.contains(later.as_str()),
                    "{chain:?} repeats {later:?}"
                );
            }
        }
        if matches!(
            err,
            redis_lock::Error::System(_)
                | redis_lock::Error::Pool(_)
                | redis_lock::Error::Connect { .. }
        ) {
            assert!(levels.len() >= 2, "the cause is a source: {chain:?}");
        }
    }
}
