//! Security: owner tokens, nobody but the holder can renew or release, the minimal Redis ACL
//! rule, and credentials kept out of `Debug`, `Display`, errors and log events.

use std::collections::HashSet;
use std::sync::{LazyLock, Mutex};
use std::time::Duration;

use redis_lock::{Error, LockClient, LostReason, ReleaseOutcome};
use redis_lock_tests::{
    RedisServer, acl_denied, acl_url, acl_user, admin, client, client_for, wait_until,
};

// --- owner tokens ---------------------------------------------------------------------------

#[test]
fn owner_tokens_are_128_random_bits_and_never_repeat() {
    let server = RedisServer::start();
    let locks = client(&server);
    const N: usize = 2000;
    let tokens: Vec<String> = (0..N)
        .map(|i| {
            let guard = locks.try_lock(&format!("t{}", i % 4)).unwrap().unwrap();
            guard.token().to_owned()
        })
        .collect();
    let distinct: HashSet<&String> = tokens.iter().collect();
    assert_eq!(distinct.len(), N);
    let mut ones = [0usize; 128];
    for t in &tokens {
        assert_eq!(t.len(), 32, "{t}");
        let bits = u128::from_str_radix(t, 16).unwrap();
        for (i, count) in ones.iter_mut().enumerate() {
            *count += usize::from(bits >> i & 1 == 1);
        }
    }
    // Every one of the 128 bits varies like a coin (expected N/2 = 1000, standard deviation
    // about 22): a counter, a timestamp or a short random part would leave bits stuck.
    for (i, count) in ones.iter().enumerate() {
        assert!(
            (800..=1200).contains(count),
            "bit {i} set {count} times of {N}"
        );
    }
    // The token is what the lock stores.
    let guard = locks.try_lock("stored").unwrap().unwrap();
    let stored = redis_lock_tests::stored_token(&mut server.connection(), "lock:{stored}");
    assert_eq!(stored.as_deref(), Some(guard.token()));
}

#[test]
fn a_client_with_a_stale_token_cannot_renew_or_release_the_current_lock() {
    let server = RedisServer::start();
    let stale_client = client(&server);
    let stale = stale_client
        .options("shared")
        .ttl(Duration::from_millis(200))
        .watchdog(false)
        .acquire()
        .unwrap();
    let owner = client(&server);
    let current = owner
        .try_lock_for("shared", Duration::from_secs(5))
        .unwrap()
        .unwrap();
    // The lock's whole value, whichever form it has (a string or a hash).
    let hash = |s: &RedisServer| -> Vec<u8> {
        redis::cmd("DUMP")
            .arg("lock:{shared}")
            .query(&mut s.connection())
            .unwrap()
    };
    let before = hash(&server);
    let ttl_before = current.remaining_ttl().unwrap().unwrap();
    // The stale holder knows the key and has a real (old) token: the library's own renew and
    // release scripts refuse it.
    assert!(matches!(
        stale.extend(Duration::from_secs(60)),
        Err(Error::Lost {
            reason: LostReason::TakenOver,
            ..
        })
    ));
    assert!(matches!(stale.remaining_ttl(), Err(Error::Lost { .. })));
    assert_eq!(stale.release().unwrap(), ReleaseOutcome::Lost);
    assert_eq!(hash(&server), before);
    let ttl_after = current.remaining_ttl().unwrap().unwrap();
    assert!(
        ttl_after <= ttl_before,
        "the stale extend did not extend it"
    );
    assert!(!current.is_lost());
    assert_eq!(current.release().unwrap(), ReleaseOutcome::Released);
}

// --- ACL --------------------------------------------------------------------------------------

/// The minimal rule's commands (one list, in the test library).
const COMMANDS: &[&str] = redis_lock_tests::LOCK_ACL_COMMANDS;

/// Every operation of the library once: ping, acquire, extend, remaining TTL, inspect, a
/// waiter woken by the release (BLPOP; a fair waiter) and an attempt on the lock handed to
/// it, a grant left to a dead waiter and attempts that find it (`LLEN`; a fair one behind the
/// dead head: `ZSCORE`), release, replica acknowledgement (WAIT), force release.
fn workload(server: &RedisServer, url: &str) -> redis_lock::Result<()> {
    let locks = client_for(url);
    locks.ping()?;
    let guard = locks
        .options("acl")
        .ttl(Duration::from_secs(5))
        .wait(Duration::from_secs(1))
        .acquire()?;
    guard.extend(Duration::from_secs(6))?;
    guard.remaining_ttl()?;
    locks.inspect("acl")?;
    let waiter = {
        let other = client_for(url);
        // Another client: the waiter's own thread asking again would be refused at once
        // (`AlreadyHeld`) without a round trip.
        let third = client_for(url);
        std::thread::spawn(move || {
            let got = other
                .options("acl")
                .wait(Duration::from_secs(2))
                .retry(redis_lock::RetryStrategy::fair())
                .try_acquire()?;
            // An attempt on a lock that was handed over and not yet claimed (LLEN).
            let busy = third.try_lock("acl")?.is_none();
            Ok::<bool, Error>(got.is_some() && busy)
        })
    };
    // Release once the waiter blocks in BLPOP (or after a bounded wait if it cannot).
    wait_until(Duration::from_secs(2), || {
        server.info_field("clients", "blocked_clients").unwrap() == "1"
    });
    guard.release()?;
    if !waiter.join().unwrap()? {
        return Err(Error::Busy {
            key: "acl".into(),
            holder: None,
        });
    }
    // A waiter registered but not blocked (its process died): the release grants the lock
    // on the shared wake-up list, where the grant stays; an attempt then finds it pending
    // (the list exists, so it reads its length: LLEN) and, not having waited, stays out. With
    // the dead waiter queued first too, a fair caller bounds its wait by the dead head's
    // registration (ZSCORE); once it has waited, it may take the grant left on the list.
    // (Taken in fair mode, so the lock is a hash, as a registration through the library
    // would have made it: a string lock's release does not read the registry.)
    let deserted = locks
        .options("acl-d")
        .ttl(Duration::from_secs(5))
        .wait(Duration::ZERO)
        .retry(redis_lock::RetryStrategy::fair())
        .acquire()?;
    admin(
        server,
        &["ZADD", "lock:{acl-d}:waiters", "4000000000000", "gone"],
    );
    deserted.release()?;
    if locks.try_lock("acl-d")?.is_some() {
        return Err(Error::Busy {
            key: "acl-d".into(),
            holder: None,
        });
    }
    admin(server, &["ZADD", "lock:{acl-d}:queue", "1", "gone"]);
    let behind = locks
        .options("acl-d")
        .wait(Duration::from_millis(50))
        .retry(redis_lock::RetryStrategy::fair())
        .try_acquire()?;
    if let Some(guard) = behind {
        guard.release()?;
    }
    match locks
        .options("acked")
        .replicas(1, Duration::from_millis(10))
        .wait(Duration::ZERO)
        .acquire()
    {
        Err(Error::ReplicaAck { .. }) => {}
        Err(e) => return Err(e),
        Ok(_) => panic!("no replica can acknowledge"),
    }
    locks.force_release("acl")?;

    // Several locks at once (one script), a lease handle resumed, a cancelled waiter.
    let both = locks.lock_all(["acl-a", "acl-b"])?;
    let handle = locks
        .options("acl-h")
        .wait(Duration::ZERO)
        .acquire()?
        .into_handle();
    client_for(url).resume(&handle)?.release()?;
    let cancel = redis_lock::CancelToken::new();
    let waiter = {
        let (other, cancel) = (client_for(url), cancel.clone());
        std::thread::spawn(move || {
            other.acquire_with(
                "acl-a",
                &redis_lock::LockOptions::new()
                    .wait(Duration::from_secs(1))
                    .cancel(cancel),
            )
        })
    };
    wait_until(Duration::from_secs(1), || {
        server.info_field("clients", "blocked_clients").unwrap() == "1"
    });
    cancel.cancel();
    match waiter.join().unwrap() {
        Err(Error::Cancelled { .. }) => {}
        Err(e) => return Err(e),
        Ok(_) => {
            return Err(Error::Busy {
                key: "acl-a".into(),
                holder: None,
            });
        }
    }
    both.release()?;
    Ok(())
}

#[test]
fn minimal_acl_rule_is_enough_and_every_command_in_it_is_needed() {
    let server = RedisServer::start();
    let url = acl_url(&server);
    let setuser = |commands: &[&str]| acl_user(&server, commands);

    // On a server with `DELIFEQ` (Valkey 9) the rule has it too (SAFETY.md): the release of
    // an uncontended lock uses it. Without it the server refuses the first such release and
    // the client uses the script from then on (`native.rs`), so the loop below checks it is
    // asked for all the same.
    let with_delifeq: Vec<&str> = COMMANDS.iter().copied().chain(["delifeq"]).collect();
    let commands = if redis_lock_tests::has_delifeq(&mut server.connection()) {
        &with_delifeq[..]
    } else {
        COMMANDS
    };
    setuser(commands);
    workload(&server, &url).unwrap();
    assert_eq!(acl_denied(&server), HashSet::new());

    // Keys outside `~lock:*` are refused by Redis, and the library reports it.
    let other_ns = LockClient::builder(&url)
        .namespace("other:")
        .build()
        .unwrap();
    let err = other_ns.try_lock("x").unwrap_err();
    assert!(matches!(err, Error::Redis(_)), "{err}");
    let cause = std::error::Error::source(&err).map(ToString::to_string);
    assert!(
        cause
            .as_deref()
            .is_some_and(|c| c.to_ascii_lowercase().contains("no permissions")),
        "{err}: {cause:?}"
    );

    // Take any one command away and the workload runs into it.
    for missing in commands {
        let fewer: Vec<&str> = commands.iter().copied().filter(|c| c != missing).collect();
        // The workload's handoff steps depend on timing (an attempt that meets a grant not
        // yet claimed); on a loaded machine one run can miss the path, so up to three runs
        // are given to run into the missing command.
        let mut seen = HashSet::new();
        for _ in 0..3 {
            setuser(&fewer);
            let _ = workload(&server, &url);
            seen = acl_denied(&server);
            if seen.contains(missing.trim_start_matches('&')) {
                break;
            }
        }
        // A channel's denial names the channel.
        let denied = missing.trim_start_matches('&');
        assert!(seen.contains(denied), "without {missing}: denied {seen:?}");
        if *missing == "pexpire" {
            // The plain acquisition sets its TTL with the key (`SET NX PX`): however far the
            // workload got, it left no lock without expiry there. (Redis does not roll a
            // script back: a script stopped by a missing permission keeps what it wrote, so
            // test an ACL rule before relying on it.)
            let pttl: i64 = redis::cmd("PTTL")
                .arg("lock:{acl}")
                .query(&mut server.connection())
                .unwrap();
            assert_ne!(pttl, -1);
        }
    }
}

// --- credentials ------------------------------------------------------------------------------

/// Every tracing event of this test binary, as text (all threads: the watchdog logs too).
static EVENTS: LazyLock<Mutex<Vec<String>>> = LazyLock::new(|| Mutex::new(Vec::new()));

struct Capture;

struct Fields<'a>(&'a mut String);

impl tracing::field::Visit for Fields<'_> {
    fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn std::fmt::Debug) {
        use std::fmt::Write;
        let _ = write!(self.0, " {}={value:?}", field.name());
    }
}

impl tracing::Subscriber for Capture {
    fn enabled(&self, _: &tracing::Metadata<'_>) -> bool {
        true
    }
    fn new_span(&self, span: &tracing::span::Attributes<'_>) -> tracing::span::Id {
        let mut text = format!("span {}", span.metadata().name());
        span.record(&mut Fields(&mut text));
        EVENTS.lock().unwrap().push(text);
        tracing::span::Id::from_u64(1)
    }
    fn record(&self, _: &tracing::span::Id, values: &tracing::span::Record<'_>) {
        let mut text = String::from("record");
        values.record(&mut Fields(&mut text));
        EVENTS.lock().unwrap().push(text);
    }
    fn record_follows_from(&self, _: &tracing::span::Id, _: &tracing::span::Id) {}
    fn event(&self, event: &tracing::Event<'_>) {
        let mut text = format!("{} {}", event.metadata().level(), event.metadata().target());
        event.record(&mut Fields(&mut text));
        EVENTS.lock().unwrap().push(text);
    }
    fn enter(&self, _: &tracing::span::Id) {}
    fn exit(&self, _: &tracing::span::Id) {}
}

fn install_capture() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| tracing::subscriber::set_global_default(Capture).unwrap());
}

#[test]
fn credentials_never_appear_in_debug_display_errors_or_log_events() {
    install_capture();
    const SECRET: &str = "s3cret-Pass-4-tests";
    let server = RedisServer::start_with(&["--requirepass", SECRET]);
    let port = server.port();
    let url = format!("redis://:{SECRET}@127.0.0.1:{port}/");
    let mut texts: Vec<String> = Vec::new();

    // Connecting and acquiring.
    let builder = LockClient::builder(&url).io_timeout(Duration::from_millis(500));
    texts.push(format!("{builder:?}"));
    let locks = builder.build().unwrap();
    texts.push(format!("{locks:?}"));
    let guard = locks
        .options("secret")
        .ttl(Duration::from_millis(300))
        .acquire()
        .unwrap();
    texts.push(format!("{guard:?}"));
    let token = guard.token().to_owned();

    // Losing: the key disappears, the watchdog notices and logs.
    let mut admin = redis::Client::open(url.as_str())
        .unwrap()
        .get_connection()
        .unwrap();
    let _: () = redis::cmd("DEL")
        .arg("lock:{secret}")
        .query(&mut admin)
        .unwrap();
    assert!(wait_until(Duration::from_secs(3), || guard.is_lost()));
    let lost = guard.ensure_held().unwrap_err();
    texts.push(format!("{lost} {lost:?}"));
    texts.push(format!("{:?}", guard.release()));

    // Failing authentication, with a user name and a wrong password.
    for wrong in [
        format!("redis://:{SECRET}-wrong@127.0.0.1:{port}/"),
        format!("redis://someone:{SECRET}-wrong@127.0.0.1:{port}/"),
    ] {
        let bad = client_for(&wrong);
        texts.push(format!("{bad:?}"));
        let err = bad.try_lock("secret").unwrap_err();
        texts.push(format!("{err} {err:?}"));
        let err = bad.ping().unwrap_err();
        texts.push(format!("{err} {err:?}"));
    }
    // Unreachable server; malformed URL.
    let free = redis_lock_tests::free_port().unwrap();
    let gone = LockClient::builder(&format!("redis://:{SECRET}@127.0.0.1:{free}/"))
        .connect_timeout(Duration::from_millis(200))
        .build()
        .unwrap();
    let err = gone.try_lock("secret").unwrap_err();
    texts.push(format!("{err} {err:?}"));
    let err = LockClient::open(&format!("redis://:{SECRET}@[::1")).unwrap_err();
    texts.push(format!("{err} {err:?}"));
    // A password with a `/`, `#` or `?` (unencoded, so the URL does not parse as meant).
    for bad in ["/", "#", "?"] {
        let url = format!("redis://:{SECRET}{bad}x@127.0.0.1:{port}/");
        texts.push(format!("{:?}", LockClient::builder(&url)));
        match LockClient::open(&url) {
            Ok(c) => texts.push(format!("{c:?} {:?}", c.ping())),
            Err(err) => texts.push(format!("{err} {err:?}")),
        }
    }
    // A Unix socket's password, in the query where redis-rs reads it.
    let dir = std::env::temp_dir().join(format!("no-such-{}.sock", std::process::id()));
    for scheme in ["redis+unix", "unix"] {
        let url = format!("{scheme}://{}?pass={SECRET}", dir.display());
        let builder = LockClient::builder(&url).connect_timeout(Duration::from_millis(200));
        texts.push(format!("{builder:?}"));
        match builder.build() {
            Ok(c) => {
                texts.push(format!("{c:?}"));
                let err = c.try_lock("secret").unwrap_err();
                texts.push(format!("{err} {err:?}"));
            }
            Err(err) => texts.push(format!("{err} {err:?}")),
        }
    }

    let events = EVENTS.lock().unwrap().clone();
    // The capture works: the events this test provoked are there.
    for expected in [
        "lock acquired",
        "lock lost",
        "connecting to redis failed",
        "span acquire",
        "span hold",
    ] {
        assert!(
            events.iter().any(|e| e.contains(expected)),
            "no {expected:?} event in {events:#?}"
        );
    }
    for text in texts.iter().chain(&events) {
        assert!(!text.contains(SECRET), "password in {text:?}");
        assert!(!text.contains(&token), "owner token in {text:?}");
    }
}
