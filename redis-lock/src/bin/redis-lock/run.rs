//! `redis-lock run`: take the lock, run the command under it, give the lock back.
//!
//! Three things can happen while the command runs: a signal arrives (forward it), the
//! watchdog finds the lock lost (warn, maybe stop the command), the command exits (done).
//! Each arrives on its own thread, so they all become events on one channel and the main
//! thread handles them in order.

use std::io::IsTerminal;
use std::process::Child;
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender};
use std::time::{Duration, Instant};

use redis_lock::{LockClient, LockGuard, LockOptions, LostReason, MultiGuard, ReleaseOutcome};

use crate::args::{OnBusy, RunArgs};
use crate::child;
use crate::duration::human;
use crate::exit::{self, Failure};
use crate::holder;
use crate::signals::{self, Received};
use crate::waitline::WaitLine;

/// A wait for a busy lock is cut into slices this long, so that a signal or the end of the
/// wait budget is noticed within one slice. Each slice still blocks on the lock's wake-up
/// list, so a release hands the lock over at once.
const SLICE: Duration = Duration::from_millis(250);

/// The variables `run` sets in one mode and not in another (`Holding::env`); those it does
/// not set are removed from the command's environment.
const PER_MODE_ENV: [&str; 4] = [
    "REDIS_LOCK_FENCING_TOKEN",
    crate::args::HANDLE_ENV,
    "REDIS_LOCK_KEYS",
    "REDIS_LOCK_FENCING_TOKENS",
];

#[derive(Debug)]
enum Event {
    Signal(Received),
    /// The lock named (with `--also`, the member that was lost) and why.
    Lost(String, LostReason),
    ChildExited,
}

enum Acquired {
    Held(Holding),
    Busy,
    Interrupted(Received),
}

/// The lock, or with `--also` the locks, held for the command.
enum Holding {
    One(LockGuard),
    All(MultiGuard),
}

impl Holding {
    /// What the command finds in its environment about the lock(s) besides the key. Every
    /// name either arm sets is in [`PER_MODE_ENV`].
    fn env(&self, key: &str) -> Vec<(&'static str, String)> {
        match self {
            // A secret: whoever has it owns the lock (`redis-lock release/extend --handle`).
            Holding::One(guard) => vec![
                (
                    "REDIS_LOCK_FENCING_TOKEN",
                    guard.fencing_token().to_string(),
                ),
                (crate::args::HANDLE_ENV, guard.handle().to_string_secret()),
            ],
            Holding::All(guard) => vec![
                (
                    "REDIS_LOCK_FENCING_TOKEN",
                    guard.fencing_token(key).unwrap_or(0).to_string(),
                ),
                ("REDIS_LOCK_KEYS", guard.keys().join(",")),
                (
                    "REDIS_LOCK_FENCING_TOKENS",
                    guard
                        .fencing_tokens()
                        .iter()
                        .map(|(name, token)| format!("{name}={token}"))
                        .collect::<Vec<_>>()
                        .join(","),
                ),
            ],
        }
    }
}

/// Runs the command under the lock and returns the exit code for redis-lock.
pub(crate) fn run(locks: &LockClient, server: &str, args: &RunArgs) -> Result<i32, Failure> {
    let (tx, rx) = mpsc::channel();
    let signal_tx = tx.clone();
    signals::catch(move |r| signal_tx.send(Event::Signal(r)).is_ok())
        .map_err(|e| Failure::new(exit::INTERNAL, format!("cannot catch signals: {e}")))?;

    let guard = match acquire(locks, server, args, &tx, &rx)? {
        Acquired::Held(guard) => guard,
        Acquired::Interrupted(r) => return Ok(128 + r.signo),
        Acquired::Busy => return busy(locks, args),
    };
    // A terminating signal that came in while the last attempt succeeded still counts.
    while let Ok(event) = rx.try_recv() {
        if let Event::Signal(r) = event
            && r.ends_wait()
        {
            release(guard, &args.key, false);
            return Ok(128 + r.signo);
        }
    }

    let mut env = vec![
        ("REDIS_LOCK_KEY", args.key.clone()),
        ("REDIS_LOCK_NAMESPACE", locks.namespace().to_owned()),
        ("REDIS_LOCK_TTL_MS", args.ttl.as_millis().to_string()),
    ];
    env.extend(guard.env(&args.key));
    // A run under another run (or a shell that exported them) would otherwise pass the outer
    // lock's variables on: a handle to the outer lock, its key list.
    let unset: Vec<&str> = PER_MODE_ENV
        .iter()
        .copied()
        .filter(|name| env.iter().all(|(set, _)| set != name))
        .collect();
    let mut child = match child::spawn(&args.command, &env, &unset) {
        Ok(child) => child,
        Err(failure) => {
            release(guard, &args.key, false);
            return Err(failure);
        }
    };
    let exit_tx = tx.clone();
    if let Err(e) = child::on_exit(&child, move || {
        let _ = exit_tx.send(Event::ChildExited);
    }) {
        // Without the exit watcher we cannot supervise; fall back to a plain wait.
        eprintln!("redis-lock: warning: cannot watch the command ({e}); signals are not forwarded");
        let _ = tx.send(Event::ChildExited);
    }
    let killed_for_loss = supervise(&child, args, &rx);
    let status = child.wait();
    release(guard, &args.key, killed_for_loss.is_some());
    let status = status.map_err(|e| {
        Failure::new(
            exit::INTERNAL,
            format!("waiting for the command failed: {e}"),
        )
    })?;
    Ok(if killed_for_loss == Some(true) {
        exit::LOST
    } else {
        child::exit_code(status)
    })
}

/// Takes the lock, waiting as `args` say. While waiting on a terminal, a status line shows
/// who holds the lock.
fn acquire(
    locks: &LockClient,
    server: &str,
    args: &RunArgs,
    tx: &Sender<Event>,
    rx: &Receiver<Event>,
) -> Result<Acquired, Failure> {
    let started = Instant::now();
    let mut line = WaitLine::new(&args.key);
    let semaphore = match args.permits {
        Some(n) => Some(
            locks
                .semaphore(&args.key, n)
                .map_err(|e| Failure::from_lock_error(&e, server))?,
        ),
        None => None,
    };
    loop {
        let left = args.wait.map(|w| w.saturating_sub(started.elapsed()));
        let mut opts = LockOptions::new()
            .ttl(args.ttl)
            .wait(left.map_or(SLICE, |l| l.min(SLICE)));
        if let Some(min) = args.hold_at_least {
            opts = opts.hold_at_least(min);
        }
        if let Some(cooldown) = args.cooldown {
            opts = opts.cooldown(cooldown);
        }
        if let Some(mode) = args.mode {
            opts = opts.mode(mode);
        }
        if let Some(text) = &args.metadata {
            opts = opts.metadata(text.clone());
        }
        let lost_tx = tx.clone();
        opts = opts.on_lost(move |event| {
            let _ = lost_tx.send(Event::Lost(event.key.clone(), event.reason));
        });
        let acquired = match &semaphore {
            Some(semaphore) => semaphore
                .try_acquire_with(&opts)
                .map(|g| g.map(Holding::One)),
            None if args.also.is_empty() => locks
                .try_acquire_with(&args.key, &opts)
                .map(|g| g.map(Holding::One)),
            None => {
                let names = std::iter::once(&args.key).chain(&args.also);
                locks
                    .try_acquire_all_with(names, &opts)
                    .map(|g| g.map(Holding::All))
            }
        };
        match acquired {
            Ok(Some(held)) => return Ok(Acquired::Held(held)),
            Ok(None) => {}
            Err(e) => {
                line.clear();
                return Err(Failure::from_lock_error(&e, server));
            }
        }
        while let Ok(event) = rx.try_recv() {
            if let Event::Signal(r) = event
                && r.ends_wait()
            {
                return Ok(Acquired::Interrupted(r));
            }
        }
        if left.is_some_and(|l| l <= SLICE) {
            return Ok(Acquired::Busy);
        }
        if semaphore.is_none() {
            line.update(locks);
        }
    }
}

/// The lock stayed busy: skip quietly or fail with the busy code.
fn busy(locks: &LockClient, args: &RunArgs) -> Result<i32, Failure> {
    let names: Vec<&String> = std::iter::once(&args.key).chain(&args.also).collect();
    let holder = match args.permits {
        Some(n) => match locks.semaphore(&args.key, n).and_then(|s| s.inspect()) {
            Ok(info) => format!(": all {} permits are held", info.limit),
            Err(_) => String::new(),
        },
        None => names
            .iter()
            .find_map(|name| match locks.inspect(name) {
                Ok(Some(info)) if names.len() == 1 => Some(format!(": {}", holder::phrase(&info))),
                Ok(Some(info)) => Some(format!(": {name:?} {}", holder::phrase(&info))),
                _ => None,
            })
            .unwrap_or_default(),
    };
    let waited = match args.wait {
        Some(w) if !w.is_zero() => format!(" after waiting {}", human(w)),
        _ => String::new(),
    };
    match args.on_busy {
        OnBusy::Skip => {
            // Cron mails whatever a job prints, so a skip is silent unless someone watches.
            if std::io::stderr().is_terminal() {
                eprintln!(
                    "redis-lock: lock {:?} is busy{waited}{holder}; skipped",
                    args.key
                );
            }
            Ok(0)
        }
        OnBusy::Fail => Err(Failure::new(
            args.busy_exit_code,
            format!("lock {:?} is busy{waited}{holder}", args.key),
        )),
    }
}

/// Handles events until the command has exited. Returns `Some(true)` when the command was
/// stopped because the lock was lost (`--kill-on-loss`), `Some(false)` when the lock was
/// lost and the command left running, `None` when the lock held throughout.
fn supervise(child: &Child, args: &RunArgs, rx: &Receiver<Event>) -> Option<bool> {
    let mut lost = None;
    let mut kill_at: Option<Instant> = None;
    loop {
        let event = match kill_at {
            Some(at) => match rx.recv_timeout(at.saturating_duration_since(Instant::now())) {
                Ok(event) => event,
                Err(RecvTimeoutError::Timeout) => {
                    eprintln!(
                        "redis-lock: the command did not exit within {} of SIGTERM; sending SIGKILL",
                        human(args.kill_on_loss.unwrap_or_default())
                    );
                    child::signal(child, libc::SIGKILL);
                    kill_at = None;
                    continue;
                }
                Err(RecvTimeoutError::Disconnected) => return lost,
            },
            None => match rx.recv() {
                Ok(event) => event,
                Err(_) => return lost,
            },
        };
        match event {
            Event::ChildExited => return lost,
            Event::Signal(r) => {
                if r.forward() {
                    child::signal(child, r.signo);
                }
            }
            Event::Lost(key, reason) if lost.is_none() => match args.kill_on_loss {
                Some(grace) => {
                    eprintln!(
                        "redis-lock: warning: lock {key:?} was lost ({reason}); stopping the command: SIGTERM now, SIGKILL in {}",
                        human(grace)
                    );
                    child::signal(child, libc::SIGTERM);
                    // `--kill-grace` is bounded when parsed; past the clock's range (never,
                    // then) there is no SIGKILL rather than a panic that leaves the command
                    // running unsupervised.
                    kill_at = Instant::now().checked_add(grace);
                    lost = Some(true);
                }
                None => {
                    eprintln!(
                        "redis-lock: warning: lock {key:?} was lost ({reason}); the command keeps running without it"
                    );
                    lost = Some(false);
                }
            },
            Event::Lost(..) => {}
        }
    }
}

/// Gives the lock back, warning when that shows the lock had been lost (unless the loss was
/// already reported) or when Redis could not be told.
fn release(held: Holding, key: &str, loss_reported: bool) {
    let outcomes = match held {
        Holding::One(guard) => guard.release().map(|o| vec![(key.to_owned(), o)]),
        Holding::All(guard) => guard.release(),
    };
    match outcomes {
        Ok(outcomes) => {
            for (key, outcome) in outcomes {
                if matches!(outcome, ReleaseOutcome::Late | ReleaseOutcome::Lost) && !loss_reported
                {
                    eprintln!(
                        "redis-lock: warning: lock {key:?} had been lost before the command finished"
                    );
                }
            }
        }
        Err(e) => eprintln!(
            "redis-lock: warning: releasing lock {key:?} failed ({e}); it frees up when its TTL runs out"
        ),
    }
}
