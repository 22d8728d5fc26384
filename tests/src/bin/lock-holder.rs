//! A separate OS process that takes locks, for multi-process and fault tests.
//!
//! ```text
//! lock-holder hold URL KEY TTL_MS WATCHDOG(on|off)
//!     acquires KEY, prints "ACQUIRED <fencing token>", then obeys stdin lines:
//!     "check" -> "HELD" | "LOST <reason>";  "release" -> "RELEASED <outcome>";
//!     "write PATH ENTRY" -> "WRITTEN" | "REJECTED <highest>" (a `FencedStore` write with the
//!     guard's fencing token);  EOF -> exit
//! lock-holder wait URL KEY MODE(notify|fair) [TTL_MS]
//!     waits up to 60 s for KEY with that retry strategy (and TTL, default 10 s), then behaves
//!     as `hold` (a process that is killed while it waits shows how dead waiters are dealt
//!     with)
//! lock-holder signalled URL KEY
//!     handles SIGUSR1 (SA_RESTART, counting), prints "READY", reads a line, prints "ASKING",
//!     then acquires KEY (3 s reply timeout) and prints "ACQUIRED <fence> <signals seen>" or
//!     "FAILED <error>", then behaves as `hold`
//! lock-holder wait-many URL KEY THREADS
//!     THREADS threads of one client wait up to 60 s each for KEY (notify), each printing
//!     "ACQUIRED" when it holds it and releasing at once (a process with many waiting threads
//!     to SIGKILL)
//! lock-holder read URL KEY TTL_MS
//!     takes a read share of the read-write lock KEY (TTL_MS, watchdog on), then behaves as
//!     `hold`
//! lock-holder write-wait URL KEY
//!     waits up to 60 s for the write lock of the read-write lock KEY, then behaves as `hold`
//!     (a writer killed while it waits shows how a dead waiting writer is dealt with)
//! lock-holder count URL KEY ITERATIONS
//!     ITERATIONS times: lock KEY, GET counter, SET counter+1, unlock; then prints "DONE"
//! lock-holder churn URL KEY DIR THREADS ITERATIONS TTL_MS
//!     THREADS threads, ITERATIONS times each: lock KEY; append "enter T PID TID" to
//!     DIR/raw.log; two writes with token T to the fenced store DIR/store.log; append
//!     "exit T PID TID"; release. Prints "UNCLEAN T <outcome>" for a release that was not
//!     clean, then "DONE".
//! lock-holder hold-all URL KEYS TTL_MS
//!     acquires the comma-separated KEYS together (`lock_all`), prints "ACQUIRED", then waits
//!     for EOF on stdin (a process to SIGKILL while it holds a multi-lock)
//! lock-holder cooldown URL KEY RUNS BODY_MS COOLDOWN_MS
//!     RUNS times: lock KEY (waiting) with a cool-down of COOLDOWN_MS; print
//!     "RUN <start ns> <end ns>" (CLOCK_MONOTONIC) around a body of BODY_MS; release. Then
//!     prints "DONE".
//! lock-holder permit URL NAME PERMITS TTL_MS
//!     takes a permit of the semaphore NAME (PERMITS, waiting up to 30 s), prints
//!     "ACQUIRED <fencing token>", then behaves as `hold`
//! lock-holder hold-watch URL KEY TTL_MS
//!     as `hold` with the watchdog on, and an `on_lost` callback that prints
//!     "ONLOST <reason>" (`LostReason`'s `Debug`)
//! lock-holder campaign URL ELECTION VALUE TTL_MS
//!     campaigns in ELECTION with VALUE (waiting up to 60 s); prints "LEADER <fencing token>
//!     <monotonic ns>" once elected and "ONLOST <reason> <monotonic ns>" when it loses the
//!     leadership; resigns at EOF or "exit" on stdin
//! lock-holder commit-count URL KEY ITERATIONS TTL_MS
//!     ITERATIONS times: lock KEY, commit `INCR KEY:counter` + `RPUSH KEY:log <token>` under
//!     it, print "OK" or "LOST"; then "DONE"
//! lock-holder resume URL HANDLE
//!     resumes the lease handle HANDLE (its text form), prints "RESUME ok <fencing token>" or
//!     "RESUME failed <error>", and on success behaves as `hold`
//! lock-holder permits URL NAME PERMITS ITERATIONS
//!     ITERATIONS times: take a permit of NAME; INCR NAME:inside (the holders right now, as
//!     Redis counts them), remember the highest count seen; hold 2 ms; DECR; release. Then
//!     prints "DONE <highest count seen>".
//! ```

use std::io::{BufRead, Write};
use std::time::Duration;

use redis_lock::{LockClient, LockOptions, ReleaseOutcome, RetryStrategy};
use redis_lock_tests::fenced::FencedStore;

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    match args.as_slice() {
        ["hold", url, key, ttl_ms, watchdog] => {
            hold(url, key, ttl_ms.parse().unwrap(), *watchdog == "on")
        }
        ["wait", url, key, mode, ttl_ms @ ..] => {
            let retry = match *mode {
                "fair" => RetryStrategy::fair(),
                _ => RetryStrategy::notify(),
            };
            let ttl = ttl_ms.first().map_or(10_000, |t| t.parse().unwrap());
            let opts = LockOptions::new()
                .ttl(Duration::from_millis(ttl))
                .wait(Duration::from_secs(60))
                .retry(retry);
            hold_with(url, key, &opts)
        }
        ["wait-many", url, key, threads] => wait_many(url, key, threads.parse().unwrap()),
        ["read", url, key, ttl_ms] => {
            let opts = LockOptions::new()
                .mode(redis_lock::LockMode::Read)
                .ttl(Duration::from_millis(ttl_ms.parse().unwrap()));
            hold_with(url, key, &opts)
        }
        ["campaign", url, election, value, ttl_ms] => campaign(url, election, value, ttl_ms),
        ["commit-count", url, key, iterations, ttl_ms] => commit_count(
            url,
            key,
            iterations.parse().unwrap(),
            ttl_ms.parse().unwrap(),
        ),
        ["hold-watch", url, key, ttl_ms] => {
            let opts = LockOptions::new()
                .ttl(Duration::from_millis(ttl_ms.parse().unwrap()))
                .on_lost(|event| say(&format!("ONLOST {:?}", event.reason)));
            hold_with(url, key, &opts)
        }
        ["resume", url, text] => {
            let locks = redis_lock_tests::client_for(url);
            let resumed = text
                .parse::<redis_lock::LeaseHandle>()
                .and_then(|h| locks.resume(&h));
            match resumed {
                Ok(guard) => {
                    say(&format!("RESUME ok {}", guard.fencing_token()));
                    obey(guard);
                }
                Err(e) => say(&format!("RESUME failed {e}")),
            }
        }
        ["hold-all", url, keys, ttl_ms] => hold_all(url, keys, ttl_ms.parse().unwrap()),
        ["write-wait", url, key] => {
            let opts = LockOptions::new()
                .mode(redis_lock::LockMode::Write)
                .wait(Duration::from_secs(60));
            hold_with(url, key, &opts)
        }
        ["count", url, key, iterations] => count(url, key, iterations.parse().unwrap()),
        ["churn", url, key, dir, threads, iterations, ttl_ms] => churn(
            url,
            key,
            dir,
            threads.parse().unwrap(),
            iterations.parse().unwrap(),
            ttl_ms.parse().unwrap(),
        ),
        ["signalled", url, key] => signalled(url, key),
        ["cooldown", url, key, runs, body_ms, cooldown_ms] => cooldown(
            url,
            key,
            runs.parse().unwrap(),
            Duration::from_millis(body_ms.parse().unwrap()),
            Duration::from_millis(cooldown_ms.parse().unwrap()),
        ),
        ["permit", url, name, permits, ttl_ms] => {
            let locks = redis_lock_tests::client_for(url);
            let opts = LockOptions::new()
                .ttl(Duration::from_millis(ttl_ms.parse().unwrap()))
                .wait(Duration::from_secs(30));
            let semaphore = locks.semaphore(name, permits.parse().unwrap()).unwrap();
            let guard = semaphore.acquire_with(&opts).unwrap();
            say(&format!("ACQUIRED {}", guard.fencing_token()));
            obey(guard);
        }
        ["permits", url, name, permits, iterations] => permits_loop(
            url,
            name,
            permits.parse().unwrap(),
            iterations.parse().unwrap(),
        ),
        _ => {
            eprintln!(
                "usage: lock-holder hold URL KEY TTL_MS on|off | read URL KEY TTL_MS | write-wait URL KEY | wait URL KEY notify|fair | count URL KEY N | churn URL KEY DIR THREADS N TTL_MS | cooldown URL KEY RUNS BODY_MS COOLDOWN_MS"
            );
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
    let opts = LockOptions::new()
        .ttl(Duration::from_millis(ttl_ms))
        .watchdog(watchdog)
        .wait(Duration::from_secs(30));
    hold_with(url, key, &opts);
}

/// Campaigns (waiting up to 60 s), prints `LEADER <fencing token> <monotonic ns>` once
/// elected and `ONLOST <reason> <monotonic ns>` when the leadership is lost, then waits for
/// EOF on stdin (`exit` resigns).
fn campaign(url: &str, election: &str, value: &str, ttl_ms: &str) {
    let locks = redis_lock_tests::client_for(url);
    let opts = LockOptions::new()
        .ttl(Duration::from_millis(ttl_ms.parse().unwrap()))
        .wait(Duration::from_secs(60))
        .on_lost(|event| {
            say(&format!(
                "ONLOST {:?} {}",
                event.reason,
                redis_lock_tests::monotonic_ns()
            ))
        });
    let leadership = locks.campaign_with(election, value, &opts).unwrap();
    say(&format!(
        "LEADER {} {}",
        leadership.fencing_token(),
        redis_lock_tests::monotonic_ns()
    ));
    let mut line = String::new();
    while std::io::stdin().read_line(&mut line).is_ok_and(|n| n > 0) {
        if line.trim() == "exit" {
            break;
        }
        line.clear();
    }
    let _ = leadership.resign();
}

/// ITERATIONS times: lock KEY (TTL_MS, waiting up to 30 s), then commit `INCR KEY:counter` and
/// `RPUSH KEY:log <fencing token>` under it; prints `OK` or `LOST` for each commit, then
/// `DONE`.
fn commit_count(url: &str, key: &str, iterations: u64, ttl_ms: u64) {
    let locks = redis_lock_tests::client_for(url);
    let opts = LockOptions::new()
        .ttl(Duration::from_millis(ttl_ms))
        .wait(Duration::from_secs(30));
    for _ in 0..iterations {
        let guard = locks.acquire_with(key, &opts).unwrap();
        std::thread::sleep(Duration::from_millis(2));
        let mut pipe = redis_lock::redis::pipe();
        pipe.cmd("INCR")
            .arg(format!("{key}:counter"))
            .ignore()
            .cmd("RPUSH")
            .arg(format!("{key}:log"))
            .arg(guard.fencing_token())
            .ignore();
        match guard.commit::<()>(&pipe) {
            Ok(()) => say("OK"),
            Err(redis_lock::Error::Lost { .. }) => say("LOST"),
            Err(e) => say(&format!("ERROR {e}")),
        }
    }
    say("DONE");
}

fn hold_with(url: &str, key: &str, opts: &LockOptions) {
    let locks = redis_lock_tests::client_for(url);
    let guard = locks.acquire_with(key, opts).unwrap();
    say(&format!("ACQUIRED {}", guard.fencing_token()));
    obey(guard);
}

static SIGNALS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

extern "C" fn count_signal(_: libc::c_int) {
    SIGNALS.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
}

fn signalled(url: &str, key: &str) {
    // SAFETY: installs a handler that only touches an atomic; the sigaction struct is
    // zero-initialised and then filled in as sigaction(2) describes.
    unsafe {
        let mut action: libc::sigaction = std::mem::zeroed();
        action.sa_sigaction = count_signal as extern "C" fn(libc::c_int) as usize;
        action.sa_flags = libc::SA_RESTART;
        libc::sigemptyset(&mut action.sa_mask);
        assert_eq!(
            libc::sigaction(libc::SIGUSR1, &action, std::ptr::null_mut()),
            0
        );
    }
    let locks = redis_lock::LockClient::builder(url)
        .io_timeout(Duration::from_secs(3))
        .connect_timeout(Duration::from_secs(3))
        .build()
        .unwrap();
    // Connect now: the signals must hit a request, not the pool's first connect (which r2d2
    // would simply retry).
    locks.ping().unwrap();
    say("READY");
    let mut line = String::new();
    std::io::stdin().read_line(&mut line).unwrap();
    say("ASKING");
    match locks.try_lock_for(key, Duration::from_secs(5)) {
        Ok(Some(guard)) => {
            let seen = SIGNALS.load(std::sync::atomic::Ordering::SeqCst);
            say(&format!("ACQUIRED {} {seen}", guard.fencing_token()));
            obey(guard);
        }
        Ok(None) => say("FAILED busy"),
        Err(e) => say(&format!("FAILED {e}")),
    }
}

/// Obeys `check` / `release` / `write` / `exit` lines on stdin for a held lock.
fn obey(guard: redis_lock::LockGuard) {
    let token = guard.fencing_token();
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
            cmd if cmd.starts_with("write ") => {
                let mut parts = cmd.splitn(3, ' ').skip(1);
                let (Some(path), entry) = (parts.next(), parts.next().unwrap_or("")) else {
                    say("?");
                    continue;
                };
                // A stale writer does not check first: the store has to stop it.
                match FencedStore::new(path).write(token, entry) {
                    Ok(Ok(())) => say("WRITTEN"),
                    Ok(Err(rejected)) => say(&format!("REJECTED {}", rejected.highest)),
                    Err(e) => say(&format!("ERROR {e}")),
                }
            }
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

fn churn(url: &str, key: &str, dir: &str, threads: u32, iterations: u32, ttl_ms: u64) {
    let locks: LockClient = redis_lock_tests::client_for(url);
    let dir = std::path::PathBuf::from(dir);
    let store = FencedStore::new(dir.join("store.log"));
    let raw = std::sync::Arc::new(
        std::fs::OpenOptions::new()
            .append(true)
            .create(true)
            .open(dir.join("raw.log"))
            .unwrap(),
    );
    let pid = std::process::id();
    let workers: Vec<_> = (0..threads)
        .map(|tid| {
            let (locks, store, raw, key) =
                (locks.clone(), store.clone(), raw.clone(), key.to_owned());
            std::thread::spawn(move || {
                let log = |line: String| (&*raw).write_all(line.as_bytes()).unwrap();
                let opts = LockOptions::new()
                    .ttl(Duration::from_millis(ttl_ms))
                    .wait(Duration::from_secs(60));
                for i in 0..iterations {
                    let guard = locks.acquire_with(&key, &opts).unwrap();
                    let t = guard.fencing_token();
                    log(format!("enter {t} {pid} {tid}\n"));
                    let a = store.write(t, &format!("{pid} {tid} {i} a")).unwrap();
                    std::thread::sleep(Duration::from_millis(1));
                    let b = store.write(t, &format!("{pid} {tid} {i} b")).unwrap();
                    if a.is_err() || b.is_err() {
                        say(&format!("REJECTED {t}"));
                    }
                    log(format!("exit {t} {pid} {tid}\n"));
                    match guard.release() {
                        Ok(ReleaseOutcome::Released) => {}
                        other => say(&format!("UNCLEAN {t} {other:?}")),
                    }
                }
            })
        })
        .collect();
    for w in workers {
        w.join().unwrap();
    }
    say("DONE");
}

fn cooldown(url: &str, key: &str, runs: u32, body: Duration, cooldown: Duration) {
    let locks = LockClient::open(url).unwrap();
    for _ in 0..runs {
        let guard = locks
            .options(key)
            .cooldown(cooldown)
            .wait(Duration::from_secs(30))
            .acquire()
            .unwrap();
        let start = redis_lock_tests::monotonic_ns();
        std::thread::sleep(body);
        let end = redis_lock_tests::monotonic_ns();
        assert_eq!(guard.release().unwrap(), ReleaseOutcome::Released);
        say(&format!("RUN {start} {end}"));
    }
    say("DONE");
}

fn permits_loop(url: &str, name: &str, permits: u32, iterations: u32) {
    let locks: LockClient = redis_lock_tests::client_for(url);
    let semaphore = locks.semaphore(name, permits).unwrap();
    let mut redis = redis::Client::open(url).unwrap().get_connection().unwrap();
    let inside = format!("{name}:inside");
    let opts = LockOptions::new().wait(Duration::from_secs(30));
    let mut highest = 0;
    for _ in 0..iterations {
        let guard = semaphore.acquire_with(&opts).unwrap();
        let n: i64 = redis::cmd("INCR").arg(&inside).query(&mut redis).unwrap();
        highest = highest.max(n);
        std::thread::sleep(Duration::from_millis(2));
        redis::cmd("DECR")
            .arg(&inside)
            .query::<i64>(&mut redis)
            .unwrap();
        guard.release().unwrap();
    }
    say(&format!("DONE {highest}"));
}

fn hold_all(url: &str, keys: &str, ttl_ms: u64) {
    let locks = LockClient::open(url).unwrap();
    let opts = LockOptions::new().ttl(Duration::from_millis(ttl_ms));
    let guard = locks.acquire_all_with(keys.split(','), &opts).unwrap();
    println!("ACQUIRED");
    std::io::stdout().flush().unwrap();
    let mut line = String::new();
    while std::io::stdin()
        .lock()
        .read_line(&mut line)
        .is_ok_and(|n| n > 0)
    {
        line.clear();
    }
    drop(guard);
}

fn wait_many(url: &str, key: &str, threads: usize) {
    let locks = redis_lock_tests::client_for(url);
    let waiting: Vec<_> = (0..threads)
        .map(|_| {
            let (locks, key) = (locks.clone(), key.to_owned());
            std::thread::spawn(move || {
                let opts = LockOptions::new().wait(Duration::from_secs(60));
                let guard = locks.acquire_with(&key, &opts).unwrap();
                say("ACQUIRED");
                drop(guard);
            })
        })
        .collect();
    for t in waiting {
        t.join().unwrap();
    }
}
