//! A holder replacing the metadata stored with its lock (`LockGuard::set_metadata`), end to
//! end on real servers, for every primitive and both forms of a mutex: what others read
//! changes, the fencing token and the rest of the holder information do not, a lock that is
//! no longer ours is left untouched, and bad input is refused before anything is sent.

use std::time::Duration;

use redis_lock::{Error, LockOptions, MAX_METADATA_LEN};
use redis_lock_tests::{
    RedisServer, client, client_without_notification, held_everywhere, redlock_client, wait_until,
};

/// The fields of the lock hash `key`, or its string value as `("", value)`.
fn stored(server: &RedisServer, key: &str) -> Vec<(String, String)> {
    let mut redis = server.connection();
    match redis::cmd("GET")
        .arg(key)
        .query::<Option<String>>(&mut redis)
    {
        Ok(Some(value)) => vec![(String::new(), value)],
        _ => redis::cmd("HGETALL")
            .arg(key)
            .query::<Vec<(String, String)>>(&mut redis)
            .unwrap(),
    }
}

#[test]
fn a_mutex_holder_replaces_its_metadata_in_either_form() {
    let server = RedisServer::start();
    let locks = client(&server);
    // The native fast path's string, then the script's hash (a minimum hold needs it).
    for (name, opts) in [
        ("native", LockOptions::new().metadata("step 1")),
        (
            "hash",
            LockOptions::new()
                .metadata("step 1")
                .hold_at_least(Duration::from_millis(1)),
        ),
    ] {
        let guard = locks.acquire_with(name, &opts).unwrap();
        let before = locks.inspect(name).unwrap().expect("held");
        assert_eq!(before.metadata.as_deref(), Some("step 1"), "{name}");
        guard.set_metadata("step 2 of 3").unwrap();
        let after = locks.inspect(name).unwrap().expect("still held");
        assert_eq!(after.metadata.as_deref(), Some("step 2 of 3"), "{name}");
        assert_eq!(after.fencing_token, guard.fencing_token(), "{name}");
        assert_eq!(
            (&after.host, after.pid, after.acquired_at),
            (&before.host, before.pid, before.acquired_at),
            "{name}: only the metadata changes"
        );
        assert!(after.remaining_ttl.is_some_and(|t| !t.is_zero()), "{name}");
        assert!(guard.check_held().unwrap().is_some(), "{name}: still ours");
    }
}

#[test]
fn read_shares_the_write_lock_and_permits_replace_their_metadata() {
    let server = RedisServer::start();
    let locks = client(&server);

    let writer = locks.write_lock("doc").unwrap();
    writer.set_metadata("writing").unwrap();
    let info = locks.inspect("doc").unwrap().expect("write-locked");
    assert_eq!(info.metadata.as_deref(), Some("writing"));
    assert_eq!(info.fencing_token, writer.fencing_token());
    drop(writer);

    let one = locks
        .acquire_with(
            "doc",
            &LockOptions::new()
                .mode(redis_lock::LockMode::Read)
                .metadata("r1"),
        )
        .unwrap();
    // Another client: this thread holds one share already.
    let others = client(&server);
    let two = others
        .acquire_with(
            "doc",
            &LockOptions::new()
                .mode(redis_lock::LockMode::Read)
                .metadata("r2"),
        )
        .unwrap();
    two.set_metadata("r2, later").unwrap();
    let shares = stored(&server, "lock:{doc}");
    let field = |token: &str| {
        shares
            .iter()
            .find(|(f, _)| *f == format!("r:{token}"))
            .map(|(_, v)| v.clone())
            .expect("the share's field")
    };
    let (first, second) = (field(one.token()), field(two.token()));
    assert!(
        first.ends_with("\nr1"),
        "{first:?}: the other share is untouched"
    );
    assert!(second.ends_with("\nr2, later"), "{second:?}");
    assert!(
        second.starts_with(&format!("{}\n", two.fencing_token())),
        "{second:?}: its fence stays"
    );
    drop((one, two));

    let semaphore = locks.semaphore("pool", 2).unwrap();
    let permit = semaphore
        .acquire_with(&LockOptions::new().metadata("worker 1"))
        .unwrap();
    let other = others
        .semaphore("pool", 2)
        .unwrap()
        .acquire_with(&LockOptions::new().metadata("worker 2"))
        .unwrap();
    permit.set_metadata("worker 1: 40%").unwrap();
    let info = semaphore.inspect().unwrap();
    let meta = |fence: u64| {
        info.holders
            .iter()
            .find(|p| p.fencing_token == fence)
            .and_then(|p| p.metadata.clone())
    };
    assert_eq!(
        meta(permit.fencing_token()).as_deref(),
        Some("worker 1: 40%")
    );
    assert_eq!(meta(other.fencing_token()).as_deref(), Some("worker 2"));
    assert!(
        info.holders
            .iter()
            .all(|p| p.pid == Some(std::process::id())),
        "{info:?}"
    );
}

#[test]
fn a_lock_that_is_not_ours_any_more_is_left_untouched() {
    let server = RedisServer::start();
    // Without loss notification the holder does not know yet: the write itself finds out.
    let locks = client_without_notification(&server.url());
    for (name, taker) in [("mutex", 0), ("write", 1), ("permit", 2)] {
        let guard = match taker {
            0 => locks.lock(name).unwrap(),
            1 => locks.write_lock(name).unwrap(),
            _ => locks.semaphore(name, 1).unwrap().acquire().unwrap(),
        };
        match taker {
            2 => {
                locks.semaphore(name, 1).unwrap().force_release().unwrap();
            }
            _ => {
                locks.force_release(name).unwrap();
            }
        }
        let before = stored(&server, &format!("lock:{{{name}}}"));
        let err = guard.set_metadata("too late").unwrap_err();
        assert!(matches!(err, Error::Lost { .. }), "{name}: {err:?}");
        assert!(guard.is_lost(), "{name}");
        assert_eq!(
            stored(&server, &format!("lock:{{{name}}}")),
            before,
            "{name}: nothing written"
        );
    }
}

#[test]
fn bad_metadata_is_refused_before_anything_is_sent() {
    let server = RedisServer::start();
    let locks = client(&server);
    let guard = locks
        .acquire_with("big", &LockOptions::new().metadata("m"))
        .unwrap();
    let before = stored(&server, "lock:{big}");
    let too_long = "x".repeat(MAX_METADATA_LEN + 1);
    assert!(matches!(
        guard.set_metadata(&too_long),
        Err(Error::InvalidInput { .. })
    ));
    assert_eq!(stored(&server, "lock:{big}"), before);
    assert!(guard.set_metadata(&"x".repeat(MAX_METADATA_LEN)).is_ok());

    let servers = [
        RedisServer::start(),
        RedisServer::start(),
        RedisServer::start(),
    ];
    let quorum = redlock_client(&servers.iter().collect::<Vec<_>>());
    let held = quorum
        .acquire_with("q", &LockOptions::new().metadata("first"))
        .unwrap();
    assert!(held_everywhere(&servers, "q"));
    let before: Vec<_> = servers.iter().map(|s| stored(s, "lock:{q}")).collect();
    assert!(matches!(
        held.set_metadata(&too_long),
        Err(Error::InvalidInput { .. })
    ));
    let after: Vec<_> = servers.iter().map(|s| stored(s, "lock:{q}")).collect();
    assert_eq!(after, before, "nothing written on any server");
}

/// Under Redlock the metadata is replaced on every server that holds the lock: inspect (a
/// majority's view) shows it, and the fencing token stays.
#[test]
fn a_redlock_holder_replaces_its_metadata_on_a_majority() {
    let servers = [
        RedisServer::start(),
        RedisServer::start(),
        RedisServer::start(),
    ];
    let quorum = redlock_client(&servers.iter().collect::<Vec<_>>());
    let held = quorum
        .acquire_with("q", &LockOptions::new().metadata("10.0.0.1:80"))
        .unwrap();
    // A third server's attempt that landed after the new metadata would keep the old.
    assert!(held_everywhere(&servers, "q"));
    held.set_metadata("10.0.0.2:80").unwrap();
    let info = quorum.inspect("q").unwrap().expect("held");
    assert_eq!(info.metadata.as_deref(), Some("10.0.0.2:80"));
    assert_eq!(info.fencing_token, held.fencing_token());
    // Replaced once a majority has it; the third server's reply may still be on its way.
    let info_of = |server: &RedisServer| {
        stored(server, "lock:{q}")
            .into_iter()
            .find(|(f, _)| f == "info")
            .map(|(_, v)| v)
            .unwrap_or_default()
    };
    let everywhere = wait_until(Duration::from_secs(5), || {
        servers
            .iter()
            .all(|s| info_of(s).ends_with("\n10.0.0.2:80"))
    });
    assert!(
        everywhere,
        "{:?}",
        servers.iter().map(info_of).collect::<Vec<_>>()
    );
    drop(held);
    let gone = quorum.acquire_with("q", &LockOptions::new()).unwrap();
    gone.set_metadata("mine").unwrap();
    quorum.force_release("q").unwrap();
    assert!(matches!(gone.set_metadata("late"), Err(Error::Lost { .. })));
}
