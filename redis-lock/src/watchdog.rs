//! The watchdog: one renewal thread per held lock, taken from a pool of parked threads.
//!
//! Spawning and joining an OS thread costs about two Redis round trips on loopback, which
//! would halve the throughput of short lock holds. So a watchdog thread whose lock was
//! released parks itself in `IDLE` and is handed the next lock; each held lock still has a
//! thread of its own. A parked thread exits after `IDLE_EXIT` without work.

use std::sync::{Arc, LazyLock};
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex};

use crate::error::LostReason;
use crate::lease::Lease;
use crate::ops::Renewal;

/// How long a parked watchdog thread waits for a new lock before it exits.
const IDLE_EXIT: Duration = Duration::from_secs(30);

/// Renewal needs little stack: a Redis round trip and a log event. Only touched pages count
/// towards resident memory, so this is a ceiling, not a cost.
const STACK_SIZE: usize = 128 * 1024;

struct Worker {
    job: Mutex<Option<Arc<Lease>>>,
    cond: Condvar,
}

static IDLE: LazyLock<Mutex<Vec<Arc<Worker>>>> = LazyLock::new(|| Mutex::new(Vec::new()));

/// Starts renewing `lease` on a parked thread, or on a new one when none is parked.
pub(crate) fn start(lease: Arc<Lease>) -> std::io::Result<()> {
    let parked = IDLE.lock().pop();
    if let Some(worker) = parked {
        *worker.job.lock() = Some(lease);
        worker.cond.notify_one();
        return Ok(());
    }
    let worker = Arc::new(Worker {
        job: Mutex::new(Some(lease)),
        cond: Condvar::new(),
    });
    std::thread::Builder::new()
        .name("redis-lock-watchdog".into())
        .stack_size(STACK_SIZE)
        .spawn(move || run(&worker))?;
    Ok(())
}

fn run(worker: &Arc<Worker>) {
    loop {
        let Some(lease) = next_job(worker) else {
            return;
        };
        renew_until_stopped(&lease);
        drop(lease);
        IDLE.lock().push(Arc::clone(worker));
    }
}

fn next_job(worker: &Arc<Worker>) -> Option<Arc<Lease>> {
    let mut job = worker.job.lock();
    loop {
        if let Some(lease) = job.take() {
            return Some(lease);
        }
        if worker.cond.wait_for(&mut job, IDLE_EXIT).timed_out() {
            // Retire, unless `start` popped us from IDLE and is about to hand us a job. Lock
            // order is IDLE, then job, as in `start`.
            drop(job);
            let mut idle = IDLE.lock();
            job = worker.job.lock();
            if job.is_none()
                && let Some(i) = idle.iter().position(|w| Arc::ptr_eq(w, worker))
            {
                idle.swap_remove(i);
                return None;
            }
            drop(idle);
        }
    }
}

fn renew_until_stopped(lease: &Lease) {
    let mut st = lease.state.lock();
    loop {
        while !st.stop {
            let next = st.next_renew;
            if lease.cond.wait_until(&mut st, next).timed_out() && Instant::now() >= st.next_renew {
                break;
            }
        }
        if st.stop {
            return;
        }
        if st.renew_until.is_some_and(|cap| Instant::now() >= cap) {
            // max_hold reached: stop renewing, and report the loss when the TTL has run out.
            while !st.stop {
                let expiry = st.expires_at;
                if lease.cond.wait_until(&mut st, expiry).timed_out() {
                    break;
                }
            }
            if st.stop {
                return;
            }
            drop(st);
            lease.mark_lost(LostReason::MaxHoldReached);
            return;
        }
        let ttl = st.ttl;
        drop(st);
        let sent = Instant::now();
        let result = lease.inner.renew(&lease.keys, &lease.token, ttl);
        st = lease.state.lock();
        if st.stop {
            return;
        }
        match result {
            Ok(Renewal::Renewed) => {
                st.expires_at = sent + lease.inner.validity(ttl);
                st.next_renew = sent + ttl / 3;
                tracing::trace!(target: "redis_lock", key = %lease.name, ?ttl, "lock renewed");
            }
            Ok(Renewal::Gone) => {
                drop(st);
                lease.mark_lost(LostReason::Expired);
                return;
            }
            Ok(Renewal::Taken) => {
                drop(st);
                lease.mark_lost(LostReason::TakenOver);
                return;
            }
            Err(error) => {
                let now = Instant::now();
                if now >= st.expires_at {
                    drop(st);
                    lease.mark_lost(LostReason::RenewalFailed);
                    return;
                }
                tracing::warn!(target: "redis_lock", key = %lease.name, %error, "renewing lock failed; retrying until it would expire");
                let backoff = (ttl / 10).clamp(Duration::from_millis(10), Duration::from_secs(1));
                st.next_renew = (now + backoff).min(st.expires_at);
            }
        }
    }
}
