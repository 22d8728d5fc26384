//! Fencing tokens: a resource that remembers the highest token it has seen refuses a writer
//! whose lock expired while it was paused.
//!
//! A lock is a lease: a holder that freezes (a GC pause, swap, `SIGSTOP`) past its TTL loses
//! the lock without knowing it, and may write after the next holder did. No check before the
//! write closes that gap; the resource has to refuse the stale write. Every acquisition gets a
//! fencing token strictly greater than the previous one, so the resource keeps the highest
//! token it accepted and rejects lower ones.
//!
//! Run it with `cargo run -p redis-lock-examples --example fencing`. It uses `$REDIS_URL`, or
//! starts a throwaway `redis-server` when that is unset.

use std::sync::Mutex;
use std::time::Duration;

use redis_lock::{LockClient, ReleaseOutcome};

/// The protected resource: a log that accepts a write only with a token at least as high as
/// every token it accepted before. (In a database: a `fence` column and
/// `UPDATE ... WHERE fence <= $token`.)
#[derive(Debug, Default)]
struct FencedStore {
    state: Mutex<(u64, Vec<String>)>,
}

impl FencedStore {
    fn write(&self, token: u64, entry: &str) -> Result<(), String> {
        let mut state = self.state.lock().expect("not poisoned");
        let (highest, log) = &mut *state;
        if token < *highest {
            return Err(format!(
                "rejected {entry:?}: token {token} is older than {highest}"
            ));
        }
        *highest = token;
        log.push(format!("{token}: {entry}"));
        Ok(())
    }
}

fn main() -> redis_lock::Result<()> {
    let (url, _server) = redis_lock_examples::redis_url();
    let locks = LockClient::builder(&url).namespace("demo:").build()?;
    let store = FencedStore::default();

    // Holder A takes the lock and writes. Its watchdog is off to stand in for a process that
    // freezes: nothing renews the 300 ms lease.
    let a = locks
        .options("ledger")
        .ttl(Duration::from_millis(300))
        .watchdog(false)
        .acquire()?;
    store
        .write(a.fencing_token(), "A: first entry")
        .expect("A holds the lock");
    println!("A holds the lock with token {}", a.fencing_token());

    // A "freezes"; meanwhile its lease runs out and B takes the lock and writes.
    let other = LockClient::builder(&url).namespace("demo:").build()?;
    let b = other
        .try_lock_for("ledger", Duration::from_secs(5))?
        .expect("free once A's lease expired");
    println!("B holds the lock with token {}", b.fencing_token());
    store
        .write(b.fencing_token(), "B: entry")
        .expect("B holds the lock");

    // A wakes up and writes without looking: the store refuses it.
    match store.write(a.fencing_token(), "A: stale entry") {
        Err(refused) => println!("store: {refused}"),
        Ok(()) => unreachable!("a lower token is always refused"),
    }
    // A's release reports that somebody else holds the lock now, and leaves it alone.
    let outcome = a.release()?;
    assert_eq!(outcome, ReleaseOutcome::Lost);
    println!(
        "A's release: {outcome:?}; B still holds it: {}",
        !b.is_lost()
    );
    b.release()?;

    let (_, log) = &*store.state.lock().expect("not poisoned");
    println!("accepted writes: {log:?}");
    Ok(())
}
