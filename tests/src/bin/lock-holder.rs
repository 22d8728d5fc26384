//! A separate OS process that takes locks, for multi-process and fault tests.
//!
//! ```text
//! lock-holder hold URL KEY TTL_MS WATCHDOG(on|off)
//!     acquires KEY, prints "ACQUIRED <fencing token>", then obeys stdin lines:
//!     "check" -> "HELD" | "LOST <reason>";  "release" -> "RELEASED <outcome>";  EOF -> exit
//! lock-holder count URL KEY ITERATIONS
//!     ITERATIONS times: lock KEY, GET counter, SET counter+1, unlock; then prints "DONE"
//! ```

use std::io::{BufRead, Write};
use std::time::Duration;

use redis_lock::{LockClient, LockOptions};

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    match args.as_slice() {
        ["hold", url, key, ttl_ms, watchdog] => {
            hold(url, key, ttl_ms.parse().unwrap(), *watchdog == "on")
        }
        ["count", url, key, iterations] => count(url, key, iterations.parse().unwrap()),
        _ => {
            eprintln!("usage: lock-holder hold URL KEY TTL_MS on|off | count URL KEY N");
            std::process::exit(2);
        }
    }
}

fn say(line: &str) {
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{line}");
    let _ = out.flush();
}

fn hold(url: &str, key: &str, ttl_ms: u64, watchdog: bool) {
    let locks = redis_lock_tests::client_for(url);
    let opts = LockOptions::new()
        .ttl(Duration::from_millis(ttl_ms))
        .watchdog(watchdog)
        .wait(Duration::from_secs(30));
    let guard = locks.acquire_with(key, &opts).unwrap();
    say(&format!("ACQUIRED {}", guard.fencing_token()));
    let mut guard = Some(guard);
    for line in std::io::stdin().lock().lines().map_while(Result::ok) {
        match line.trim() {
            "check" => match guard.as_ref().map(|g| g.ensure_held()) {
                Some(Ok(())) => say("HELD"),
                Some(Err(e)) => say(&format!("LOST {e}")),
                None => say("RELEASED already"),
            },
            "release" => match guard.take().map(|g| g.release()) {
                Some(Ok(outcome)) => say(&format!("RELEASED {outcome:?}")),
                Some(Err(e)) => say(&format!("ERROR {e}")),
                None => say("RELEASED already"),
            },
            "exit" => break,
            _ => say("?"),
        }
    }
}

fn count(url: &str, key: &str, iterations: u32) {
    let locks: LockClient = redis_lock_tests::client_for(url);
    let mut redis = redis::Client::open(url).unwrap().get_connection().unwrap();
    let counter = format!("{key}:counter");
    for _ in 0..iterations {
        let guard = locks.lock(key).unwrap();
        let n: i64 = redis::cmd("GET")
            .arg(&counter)
            .query::<Option<i64>>(&mut redis)
            .unwrap()
            .unwrap_or(0);
        std::thread::yield_now();
        redis::cmd("SET")
            .arg(&counter)
            .arg(n + 1)
            .query::<()>(&mut redis)
            .unwrap();
        drop(guard);
    }
    say("DONE");
}
