//! Replica acknowledgement against a real master and replica: the acquisition waits for the
//! replica, fails with `Error::ReplicaAck` (and leaves no lock behind) when it does not come,
//! and a lock acknowledged before a failover is still there on the promoted replica.

use std::time::{Duration, Instant};

use redis_lock::{Error, LockClient};
use redis_lock_tests::{RedisServer, client};

fn lock_exists(server: &RedisServer, key: &str) -> bool {
    redis::cmd("EXISTS")
        .arg(key)
        .query::<i64>(&mut server.connection())
        .unwrap()
        == 1
}

fn command_calls(server: &RedisServer, cmd: &str) -> u64 {
    server.command_calls(cmd).unwrap()
}

fn server_version(server: &RedisServer) -> (u32, u32) {
    let v = server.info_field("server", "redis_version").unwrap();
    let mut parts = v.split('.').map(|p| p.parse::<u32>().unwrap());
    (parts.next().unwrap(), parts.next().unwrap())
}

#[test]
fn acknowledged_acquisition_is_on_the_replica() {
    let master = RedisServer::start();
    let replica = RedisServer::start_replica_of(&master);
    let locks = client(&master);
    let guard = locks
        .options("acked")
        .replicas(1, Duration::from_secs(5))
        .acquire()
        .unwrap();
    // WAIT returned 1: the replica has processed the write, so it can be read there now.
    let mut on_replica = replica.connection();
    assert_eq!(
        redis_lock_tests::stored_token(&mut on_replica, "lock:{acked}").as_deref(),
        Some(guard.token())
    );
    assert_eq!(
        redis_lock_tests::stored_fence(&mut on_replica, "lock:{acked}"),
        Some(guard.fencing_token())
    );
    assert_eq!(command_calls(&master, "wait"), 1);
}

#[test]
fn paused_replica_fails_the_acquisition_and_leaves_no_lock() {
    let master = RedisServer::start();
    let replica = RedisServer::start_replica_of(&master);
    // One connection only: undoing the acquisition must not need a second one. A minimum
    // hold must not keep a lock that was never handed out.
    let locks = LockClient::builder(&master.url())
        .pool_size(1)
        .pool_timeout(Duration::from_secs(5))
        .io_timeout(Duration::from_millis(500))
        .build()
        .unwrap();
    replica.pause();
    let start = Instant::now();
    let err = locks
        .options("unacked")
        .replicas(1, Duration::from_millis(300))
        .hold_at_least(Duration::from_secs(30))
        .acquire()
        .unwrap_err();
    let took = start.elapsed();
    match err {
        Error::ReplicaAck {
            ref key,
            required,
            acked,
        } => {
            assert_eq!(key, "unacked");
            assert_eq!((required, acked), (1, 0));
        }
        ref other => panic!("expected ReplicaAck, got {other}"),
    }
    assert!(
        took >= Duration::from_millis(300) && took < Duration::from_secs(3),
        "{took:?}"
    );
    assert!(!lock_exists(&master, "lock:{unacked}"));
    // Free for the next caller at once.
    assert!(client(&master).try_lock("unacked").unwrap().is_some());
    replica.resume();
}

#[test]
fn acknowledgement_may_take_longer_than_the_reply_timeout() {
    let master = RedisServer::start();
    let replica = RedisServer::start_replica_of(&master);
    let locks = LockClient::builder(&master.url())
        .io_timeout(Duration::from_millis(200))
        .build()
        .unwrap();
    replica.pause();
    let start = Instant::now();
    let err = locks
        .options("slow-ack")
        .replicas(1, Duration::from_millis(1200))
        .acquire()
        .unwrap_err();
    // Not a reply timeout after 200 ms: WAIT had its full 1.2 s and answered "0 replicas".
    assert!(matches!(err, Error::ReplicaAck { acked: 0, .. }), "{err}");
    assert!(start.elapsed() >= Duration::from_millis(1200));
    assert!(!lock_exists(&master, "lock:{slow-ack}"));
    replica.resume();
    // The connection that waited is still good: the next acquisition is acknowledged.
    let guard = locks
        .options("slow-ack")
        .replicas(1, Duration::from_secs(5))
        .acquire()
        .unwrap();
    assert!(!guard.is_lost());
}

#[test]
fn no_replica_at_all_fails_the_acquisition() {
    let master = RedisServer::start();
    let locks = client(&master);
    let err = locks
        .options("alone")
        .replicas(2, Duration::from_millis(100))
        .acquire()
        .unwrap_err();
    assert!(
        matches!(
            err,
            Error::ReplicaAck {
                required: 2,
                acked: 0,
                ..
            }
        ),
        "{err}"
    );
    assert!(!lock_exists(&master, "lock:{alone}"));
}

/// `errorstat_ERR` of the server, read over `probe` (a connection of its own, so that the
/// reading opens no connection: every new connection from redis-rs sends `CLIENT SETINFO`,
/// which Redis before 7.2 answers with an error).
fn err_replies(probe: &mut redis::Connection) -> u64 {
    let info: String = redis::cmd("INFO").arg("errorstats").query(probe).unwrap();
    info.lines()
        .find_map(|l| l.strip_prefix("errorstat_ERR:count="))
        .map_or(0, |n| n.trim().parse().unwrap())
}

#[test]
fn fsynced_acknowledgement_uses_waitaof_or_falls_back_to_wait_once() {
    let master = RedisServer::start();
    let _replica = RedisServer::try_start_replica_of(&master, &["--appendonly", "yes"]).unwrap();
    let mut probe = master.connection();
    let locks = client(&master);
    let acquire = || {
        let guard = locks
            .options("disk")
            .replicas_fsynced(1, Duration::from_secs(5))
            .acquire()
            .unwrap();
        assert_eq!(
            guard.release().unwrap(),
            redis_lock::ReleaseOutcome::Released
        );
    };
    let before = err_replies(&mut probe);
    acquire();
    let after_first = err_replies(&mut probe);
    acquire();
    acquire();
    let after_third = err_replies(&mut probe);
    if server_version(&master) >= (7, 2) {
        assert_eq!(command_calls(&master, "waitaof"), 3);
        assert_eq!(command_calls(&master, "wait"), 0);
    } else {
        // No WAITAOF: the first acquisition got an "unknown command" reply and fell back to
        // WAIT; the later ones went to WAIT straight away (no further error replies).
        assert!(after_first > before);
        assert_eq!(after_third, after_first);
        assert_eq!(command_calls(&master, "wait"), 3);
    }
}

#[test]
fn acknowledged_lock_survives_failover_to_the_replica() {
    let mut master = RedisServer::start();
    let replica = RedisServer::start_replica_of(&master);
    let locks = client(&master);
    let guard = locks
        .options("failover")
        .ttl(Duration::from_secs(30))
        .replicas(1, Duration::from_secs(5))
        .acquire()
        .unwrap();
    // The master dies right after the acquisition; the replica is promoted.
    master.kill();
    let _: () = redis::cmd("REPLICAOF")
        .arg("NO")
        .arg("ONE")
        .query(&mut replica.connection())
        .unwrap();
    let promoted = client(&replica);
    let info = promoted.inspect("failover").unwrap().unwrap();
    assert_eq!(info.fencing_token, guard.fencing_token());
    // Nobody else gets the lock on the new master ...
    assert!(promoted.try_lock("failover").unwrap().is_none());
    // ... and the fencing counter carried over: the next holder's token is higher.
    promoted.force_release("failover").unwrap();
    let next = promoted.try_lock("failover").unwrap().unwrap();
    assert!(next.fencing_token() > guard.fencing_token());
}
