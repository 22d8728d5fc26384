//! The watchdog: one renewal thread per held lock, taken from a pool of parked threads. It
//! talks only to the lease: asks it what is next, tells it to renew.
//!
//! Spawning and joining an OS thread costs about two Redis round trips on loopback, which
//! would halve the throughput of short lock holds. So a watchdog thread whose lock was
//! released is handed the next lock; each held lock still has a thread of its own. A thread
//! without work for `IDLE_EXIT` exits.
//!
//! Waking a thread costs a context switch, and on a small machine that is a good part of a
//! short lock cycle (it also delays the next holder in a handoff). So neither acquisition nor
//! release wakes the watchdog in the common case:
//!
//! - **Release** marks the lease stopped and puts its thread back in the idle list without
//!   waking it. The thread sleeps on until the renewal time it had planned, then finds the
//!   lease stopped and goes idle (or finds a new lease there).
//! - **Acquisition** hands the new lease to an idle thread and wakes it only if the thread
//!   would otherwise sleep past the new lease's first renewal (a thread that just released a
//!   lock of the same TTL plans to wake earlier than the new lock needs, so it is not woken).
//!
//! Release still never waits for the watchdog: a renewal in flight compares the token, so it
//! cannot revive a deleted lock or extend a new holder's.

use std::sync::{Arc, LazyLock, Weak};
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex};

use super::lease::{Lease, Next, Renewer};
use crate::error::LostReason;

/// How long a parked watchdog thread waits for a new lock before it exits.
const IDLE_EXIT: Duration = Duration::from_secs(30);

/// Renewal needs little stack: a Redis round trip and a log event. Only touched pages count
/// towards resident memory, so this is a ceiling, not a cost.
const STACK_SIZE: usize = 128 * 1024;

/// A renewal thread.
struct Worker {
    slot: Mutex<Slot>,
    cond: Condvar,
}

impl std::fmt::Debug for Worker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Worker").finish_non_exhaustive()
    }
}

struct Slot {
    /// The lease this thread renews. Weak: a released lease that the thread has not looked at
    /// again must not keep the lease (and its client) alive.
    job: Option<Weak<Lease>>,
    mode: Mode,
    /// Set by `detach` while the thread is running (say, in a renewal stuck on an unreachable
    /// server): it must not be handed a new lock before it is free, so it goes back to the
    /// idle list itself when it is done.
    return_idle: bool,
}

/// What the thread is doing, so that `start` knows whether it must wake it.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Mode {
    /// Running: it looks at its job again before it sleeps.
    Awake,
    /// Sleeping until this instant.
    Sleeping(Instant),
    /// Waiting for a job.
    Idle,
}

static IDLE: LazyLock<Mutex<Vec<Arc<Worker>>>> = LazyLock::new(|| Mutex::new(Vec::new()));

/// Starts renewing `lease` on a parked thread, or on a new one when none is parked.
pub(crate) fn start(lease: &Arc<Lease>) -> std::io::Result<()> {
    let parked = IDLE.lock().pop();
    if let Some(worker) = parked {
        *lease.watchdog.lock() = Some(Arc::clone(&worker) as Arc<dyn Renewer>);
        let first_renewal = lease.first_renewal();
        let mut slot = worker.slot.lock();
        slot.job = Some(Arc::downgrade(lease));
        let wake = match slot.mode {
            Mode::Awake => false,
            Mode::Sleeping(until) => until > first_renewal,
            Mode::Idle => true,
        };
        drop(slot);
        if wake {
            worker.cond.notify_one();
        }
        return Ok(());
    }
    let worker = Arc::new(Worker {
        slot: Mutex::new(Slot {
            job: Some(Arc::downgrade(lease)),
            mode: Mode::Awake,
            return_idle: false,
        }),
        cond: Condvar::new(),
    });
    *lease.watchdog.lock() = Some(Arc::clone(&worker) as Arc<dyn Renewer>);
    let thread = Arc::clone(&worker);
    let spawned = std::thread::Builder::new()
        .name("redis-lock-watchdog".into())
        .stack_size(STACK_SIZE)
        .spawn(move || run(&thread));
    if let Err(e) = spawned {
        lease.watchdog.lock().take();
        return Err(e);
    }
    Ok(())
}

impl Renewer for Worker {
    /// The thread replans.
    fn nudge(&self) {
        self.cond.notify_one();
    }

    /// Released: back in the idle list at once, or, while the thread is running (a renewal
    /// in flight), once it is done.
    fn detach(self: Arc<Self>) {
        let mut slot = self.slot.lock();
        if slot.mode == Mode::Awake {
            slot.return_idle = true;
        } else {
            drop(slot);
            IDLE.lock().push(self);
        }
    }
}

fn run(worker: &Arc<Worker>) {
    let mut slot = worker.slot.lock();
    loop {
        slot.mode = Mode::Awake;
        let Some(lease) = slot.job.as_ref().and_then(Weak::upgrade) else {
            slot.job = None;
            slot.mode = Mode::Idle;
            if std::mem::take(&mut slot.return_idle) {
                IDLE.lock().push(Arc::clone(worker));
            }
            if worker.cond.wait_for(&mut slot, IDLE_EXIT).timed_out() && slot.job.is_none() {
                drop(slot);
                if retire(worker) {
                    return;
                }
                slot = worker.slot.lock();
            }
            continue;
        };
        match lease.next(Instant::now()) {
            Next::Stopped => {
                // Released (`detach` has already put this thread back in the idle list) or
                // lost (it frees itself here).
                finish(worker, &mut slot, &lease);
            }
            Next::Sleep(until) => {
                // Not kept while asleep: a released lease (and its client) must be free to go
                // at once, on the thread that lets go of it last (see `Slot::job`).
                drop(lease);
                slot.mode = Mode::Sleeping(until);
                worker.cond.wait_until(&mut slot, until);
            }
            Next::Renew => {
                drop(slot);
                let finished = lease.renew_now();
                slot = worker.slot.lock();
                if finished {
                    finish(worker, &mut slot, &lease);
                }
            }
            Next::Check => {
                drop(slot);
                let finished = lease.check_now();
                slot = worker.slot.lock();
                if finished {
                    finish(worker, &mut slot, &lease);
                }
            }
            Next::MaxHoldExpired => {
                drop(slot);
                lease.mark_lost(LostReason::MaxHoldReached);
                slot = worker.slot.lock();
                finish(worker, &mut slot, &lease);
            }
        }
    }
}

/// The thread is done with a lease that is still held (lost): it frees itself for the next one
/// unless a release already did.
fn finish(worker: &Arc<Worker>, slot: &mut Slot, lease: &Arc<Lease>) {
    if slot
        .job
        .as_ref()
        .is_some_and(|j| j.ptr_eq(&Arc::downgrade(lease)))
    {
        slot.job = None;
    }
    let mine = lease.watchdog.lock().take().is_some();
    if mine {
        IDLE.lock().push(Arc::clone(worker));
    }
}

/// Exits the idle thread unless `start` has just taken it from the idle list.
fn retire(worker: &Arc<Worker>) -> bool {
    let mut idle = IDLE.lock();
    match idle.iter().position(|w| Arc::ptr_eq(w, worker)) {
        Some(i) => {
            idle.swap_remove(i);
            true
        }
        None => false,
    }
}
