//! The basics: take a lock from several threads, see who holds it, lose it, get a fencing
//! token.
//!
//! Run it with `cargo run -p redis-lock-examples --example basic`. It uses `$REDIS_URL`, or
//! starts a throwaway `redis-server` when that is unset.

use std::time::Duration;

use redis_lock::{LockClient, ReleaseOutcome};

fn main() -> redis_lock::Result<()> {
    let (url, _server) = redis_lock_examples::redis_url();
    let locks = LockClient::builder(&url).namespace("demo:").build()?;

    // Four workers take turns on one lock; each holds it for 100 ms.
    let workers: Vec<_> = (0..4)
        .map(|id| {
            let locks = locks.clone();
            std::thread::spawn(move || -> redis_lock::Result<()> {
                let guard = locks.lock("report")?;
                println!(
                    "worker {id} holds \"report\" (fencing token {})",
                    guard.fencing_token()
                );
                std::thread::sleep(Duration::from_millis(100));
                guard.check_held()?; // Redis says it is still ours: safe to commit
                Ok(())
            })
        })
        .collect();
    for w in workers {
        w.join().expect("worker panicked")?;
    }

    // Who holds a lock, and since when.
    let guard = locks.options("report").metadata("demo run").acquire()?;
    if let Some(info) = locks.inspect("report")? {
        // `None` while no holder is stored: kept after a release, or just handed over.
        let host = info.host.as_deref().unwrap_or("nobody yet");
        let pid = info.pid.map_or_else(|| "-".to_owned(), |p| p.to_string());
        println!(
            "inspect: held by {host} pid {pid} with metadata {:?}, {:?} left",
            info.metadata, info.remaining_ttl
        );
    }

    // Another thread's attempt while it is held: busy, not an error.
    let busy = std::thread::scope(|s| s.spawn(|| locks.try_lock("report")).join())
        .expect("thread panicked")?
        .is_none();
    assert!(busy);
    println!("try_lock from another thread while held: busy");
    // The holding thread asking again: `try_lock` says busy, as std's does; `lock` would wait
    // for itself, so it is refused at once instead.
    assert!(locks.try_lock("report")?.is_none());
    let again = locks.lock("report").map(drop).unwrap_err();
    println!("the same thread asking again: try_lock busy, lock refused: {again}");
    drop(guard);

    // A lock without watchdog expires after its TTL; its release then reports that.
    let guard = locks
        .options("short")
        .ttl(Duration::from_millis(200))
        .watchdog(false)
        .acquire()?;
    std::thread::sleep(Duration::from_millis(300));
    println!("after the TTL: is_lost = {}", guard.is_lost());
    let outcome = guard.release()?;
    assert_eq!(outcome, ReleaseOutcome::Late);
    println!("release after expiry: {outcome:?}");
    Ok(())
}
