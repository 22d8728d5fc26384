//! Leader election on a lock (`campaign`, `proclaim`, `resign`, `leader`): the leader's value
//! seen by others and replaced without losing the leadership; a resignation elects the next
//! campaigner; and three processes campaigning while the leader is killed (a successor within
//! the TTL plus a round trip, seen by an observer at once) and paused past its TTL (told it
//! lost as soon as it runs again), with fencing tokens increasing from leader to leader.

use std::time::{Duration, Instant};

use redis_lock::Error;
use redis_lock::testing::RedisServer;
use redis_lock_tests::holder::Holder;
use redis_lock_tests::{client, monotonic_ns, wait_until};

const HOLDER: &str = env!("CARGO_BIN_EXE_lock-holder");

#[test]
fn a_leader_proclaims_and_resigns_and_the_next_campaigner_is_elected() {
    let server = RedisServer::start();
    let (a, b) = (client(&server), client(&server));
    assert_eq!(a.leader("sched").unwrap(), None);
    let first = a.campaign("sched", "10.0.0.1:80").unwrap();
    let leader = b.leader("sched").unwrap().expect("a leader");
    assert_eq!(leader.value, "10.0.0.1:80");
    assert_eq!(leader.fencing_token, first.fencing_token());
    assert_eq!(leader.pid, Some(std::process::id()));

    let observer = b.observe("sched").unwrap();
    assert!(observer.recv().unwrap().now.is_some());
    first.proclaim("10.0.0.1:81").unwrap();
    let proclaimed = observer
        .recv_timeout(Duration::from_secs(5))
        .unwrap()
        .unwrap();
    assert_eq!(
        proclaimed.now.unwrap().metadata.as_deref(),
        Some("10.0.0.1:81")
    );
    assert_eq!(b.leader("sched").unwrap().unwrap().value, "10.0.0.1:81");
    assert!(first.is_leader(), "proclaiming keeps the leadership");
    first.guard().check_held().unwrap();

    let second = std::thread::spawn(move || {
        let l = b.campaign("sched", "10.0.0.2:80").unwrap();
        (l.fencing_token(), b.leader("sched").unwrap().unwrap().value)
    });
    // The second campaigner waits while the first leads.
    assert!(wait_until(Duration::from_secs(5), || {
        observer
            .recv_timeout(Duration::from_millis(50))
            .ok()
            .flatten()
            .is_some_and(|c| c.now.is_some_and(|n| n.waiters > 0))
            || a.inspect("sched").unwrap().is_some_and(|i| i.waiters > 0)
    }));
    let token = first.fencing_token();
    first.resign().unwrap();
    let (next, value) = second.join().unwrap();
    assert!(next > token);
    assert_eq!(value, "10.0.0.2:80");
}

#[test]
fn a_former_leader_cannot_proclaim() {
    let server = RedisServer::start();
    let locks = redis_lock_tests::client_without_notification(&server.url());
    let leadership = locks.campaign("former", "x").unwrap();
    locks.force_release("former").unwrap();
    let err = leadership.proclaim("y").unwrap_err();
    assert!(matches!(err, Error::Lost { .. }), "{err:?}");
    assert!(!leadership.is_leader());
    assert_eq!(locks.leader("former").unwrap(), None, "nothing was written");
    let too_long = "v".repeat(redis_lock::MAX_METADATA_LEN + 1);
    let again = locks.campaign("former", "x").unwrap();
    assert!(matches!(
        again.proclaim(&too_long),
        Err(Error::InvalidInput { .. })
    ));
}

/// The holder whose process leads `election` now, by the pid Redis stores with it.
fn leading<'a>(
    locks: &redis_lock::LockClient,
    election: &str,
    holders: &'a mut [Holder],
    not: Option<u32>,
) -> Option<&'a mut Holder> {
    let deadline = Instant::now() + Duration::from_secs(10);
    while Instant::now() < deadline {
        if let Some(pid) = locks.leader(election).unwrap().and_then(|l| l.pid)
            && Some(pid) != not
        {
            return holders.iter_mut().find(|h| h.pid() == pid);
        }
        std::thread::sleep(Duration::from_millis(2));
    }
    None
}

fn field(line: &str, n: usize) -> u64 {
    line.split_whitespace().nth(n).unwrap().parse().unwrap()
}

#[test]
fn three_processes_elect_a_successor_when_the_leader_dies_and_a_paused_leader_learns_it_lost() {
    let server = RedisServer::start();
    let locks = client(&server);
    let ttl = Duration::from_millis(1000);
    let observer = locks.observe("election").unwrap();
    assert!(observer.recv().unwrap().now.is_none());
    let mut holders: Vec<Holder> = (0..3)
        .map(|i| {
            Holder::spawn(
                HOLDER,
                &[
                    "campaign",
                    &server.url(),
                    "election",
                    &format!("node-{i}"),
                    "1000",
                ],
            )
        })
        .collect();

    // The first leader.
    let first = leading(&locks, "election", &mut holders, None).expect("a leader");
    let line = first.expect("LEADER", Duration::from_secs(10)).unwrap();
    let first_token = field(&line, 1);
    let first_pid = first.pid();

    // Killed: a successor within the TTL and a round trip or so, seen by the observer.
    let killed_at = monotonic_ns();
    first.kill();
    let second = leading(&locks, "election", &mut holders, Some(first_pid)).expect("a successor");
    let line = second.expect("LEADER", Duration::from_secs(10)).unwrap();
    let (second_token, elected_at) = (field(&line, 1), field(&line, 2));
    let second_pid = second.pid();
    let took = Duration::from_nanos(elected_at - killed_at);
    println!("successor elected {took:?} after the kill (TTL {ttl:?})");
    assert!(took <= ttl + Duration::from_millis(500), "{took:?}");
    assert!(second_token > first_token);
    let seen_at = loop {
        let change = observer
            .recv_timeout(Duration::from_secs(5))
            .unwrap()
            .expect("seen");
        if change.now.as_ref().and_then(|n| n.pid) == Some(second_pid) {
            break monotonic_ns();
        }
    };
    println!(
        "observer saw it {:?} after the election",
        Duration::from_nanos(seen_at.saturating_sub(elected_at))
    );
    assert!(seen_at.saturating_sub(elected_at) <= 50_000_000);

    // Paused past its TTL: a third leader is elected; resumed, the second is told at once.
    second.signal(libc::SIGSTOP);
    let third = leading(&locks, "election", &mut holders, Some(second_pid)).expect("a third");
    let line = third.expect("LEADER", Duration::from_secs(10)).unwrap();
    let third_token = field(&line, 1);
    assert!(third_token > second_token);
    let second = holders.iter_mut().find(|h| h.pid() == second_pid).unwrap();
    let resumed_at = monotonic_ns();
    second.signal(libc::SIGCONT);
    let line = second
        .expect("ONLOST", Duration::from_secs(5))
        .expect("told it lost");
    let told = Duration::from_nanos(field(&line, 2).saturating_sub(resumed_at));
    println!("the paused leader was told {told:?} after it ran again: {line}");
    assert!(told <= Duration::from_millis(50), "{told:?}");
    assert!(
        line.contains("TakenOver") || line.contains("Expired"),
        "{line}"
    );
    for h in &mut holders {
        h.kill();
    }
}
