//! Memory and resources stay flat: one client shared by 16 threads runs every primitive
//! (locks, read and write locks, permits, two-name multi-locks, waits cancelled after 5 ms,
//! hand-offs through a handle, locks broken while held) with loss notification on, under a
//! global allocator that counts live heap bytes. Whatever an operation registers is gone when
//! it ends, whichever thread wins, so the heap measured while the client is quiet reaches a
//! plateau; and a dropped client leaves no thread and no connection behind.
//!
//! The benchmark's soak rows (`scripts/bench --only soak`) run the same workload for minutes,
//! each kind alone.

use std::sync::Arc;
use std::time::Duration;

use redis_lock::LockClient;
use redis_lock_tests::soak::{self, Counting, Kind, World, thread_names};
use redis_lock_tests::{RedisServer, wait_until};

#[global_allocator]
static ALLOC: Counting = Counting;

/// The client's own threads, as the kernel shows their names (15 characters): housekeeping,
/// the pools' connection maker, the notification listener. (The renewal threads are the
/// process's, shared by every client, and exit after 30 s without a lock to renew.)
const CLIENT_THREADS: [&str; 3] = ["redis-lock-pool", "redis-lock-conn", "redis-lock-noti"];

fn client_threads() -> usize {
    thread_names()
        .iter()
        .filter(|n| CLIENT_THREADS.contains(&n.as_str()))
        .count()
}

/// Connections to `server` other than the one asking.
fn connections(server: &RedisServer) -> usize {
    let list: String = redis::cmd("CLIENT")
        .arg("LIST")
        .query(&mut server.connection())
        .unwrap();
    list.lines().count().saturating_sub(1)
}

#[test]
fn the_heap_reaches_a_plateau_and_a_dropped_client_leaves_nothing_behind() {
    let server = RedisServer::start();
    assert_eq!(client_threads(), 0, "{:?}", thread_names());
    let client = LockClient::builder(&server.url())
        // Long enough that a loaded machine's stall between two renewals (a third of it
        // apart) does not let the blocker's lock run out and the blocked lock be taken.
        .default_ttl(Duration::from_millis(3000))
        .connect_timeout(Duration::from_secs(1))
        .build()
        .unwrap();
    let world = Arc::new(World::new(client, "soak:", 40, Duration::from_millis(2)));

    // Every primitive in turn: two warm-up rounds, then five measured.
    let measured = soak::measure(&world, Kind::Mix, 16, (2, 5), Duration::from_secs(3));
    let low = measured.low_growth_per_1000();
    println!(
        "{} ops after the warm-up: {:+.1} B per 1,000 ops ({low:+.1} between the lows of each \
         half), {:.1} allocations per op; settled heap {} then {:?}",
        measured.ops(),
        measured.growth_per_1000(),
        measured.allocs_per_op,
        measured.base,
        measured.rounds
    );
    assert!(measured.ops() > 1_000, "{measured:?}");
    assert!(
        measured.always_quiet(&world),
        "registrations left after the operations ended: {:?} {:?}",
        measured.base_registrations,
        measured.rounds
    );
    // The leaks this guards against grew 3,500 to 5,900 B per 1,000 operations of this mix,
    // in every round; under a loaded test run single settled heaps move by a few KB either way
    // (measured up to 71 B per 1,000 operations between the lows). The long soak
    // (`scripts/soak`) measures to the byte.
    assert!(
        low <= 500.0,
        "the live heap grew {low:+.1} B per 1,000 operations (base, then per round: \
         operations, settled heap, threads, registrations): {} {:?}",
        measured.base,
        measured.rounds
    );

    // The load stopped: only the blocker is held; connections within the pools' bounds.
    let quiet = world.client.registrations();
    assert_eq!(
        (quiet.held, quiet.waiting_groups, quiet.waiting_threads),
        (1, 0, 0)
    );
    let open = connections(&server);
    // The pool (16); a waiting connection per name waited on lately (kept for a minute): 40
    // mutex names, 40 read-write lock names, the semaphore, the blocked lock; the notification's
    // two.
    assert!((1..=16 + 82 + 2).contains(&open), "{open} connections");
    assert_eq!(
        client_threads(),
        CLIENT_THREADS.len(),
        "{:?}",
        thread_names()
    );

    // The client dropped: its threads end and its connections close at once.
    let world = Arc::into_inner(world).expect("the soak's threads are done");
    drop(world);
    assert!(
        wait_until(Duration::from_secs(2), || client_threads() == 0),
        "{:?}",
        thread_names()
    );
    assert!(
        wait_until(Duration::from_secs(2), || connections(&server) == 0),
        "{} connections left",
        connections(&server)
    );
}
