//! One-shot jobs at an instant that can be taken back, and the client's periodic jobs, run on
//! the client's one housekeeping thread (`redis-lock-pool`).
//!
//! Most jobs are cancelled (a blocking wait's wake-up, ended early by a release or a cancel; a
//! request's expiry alarm, answered in time), so a cancelled job must be gone at once, with
//! what it captured: at a thousand waits a second with a minute's timeout, a queue that kept
//! them until their time would hold sixty thousand. A job lives in an ordered map until it runs
//! or is cancelled, and the thread sleeps until the earliest; a job that comes earlier than
//! every other wakes it to sleep less. Nothing else is queued anywhere, so what a quiet client
//! keeps does not depend on how many jobs it once had.

use std::collections::BTreeMap;
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex, MutexGuard};

type Job = Box<dyn FnOnce() + Send>;

/// The client's jobs at an instant (see the module's documentation). Cheap to clone; the
/// thread ends when the last clone is dropped.
#[derive(Clone)]
pub(crate) struct Timer {
    shared: Arc<Shared>,
    /// Stops the thread when the last clone goes. Jobs hold the shared state, never this, so
    /// a pending job does not keep the thread.
    _owner: Arc<Owner>,
}

impl std::fmt::Debug for Timer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Timer")
            .field("jobs", &self.shared.state.lock().jobs.len())
            .finish()
    }
}

struct Shared {
    state: Mutex<State>,
    /// Wakes the thread: a job earlier than every other, or the stop.
    wake: Condvar,
}

#[derive(Default)]
struct State {
    jobs: BTreeMap<(Instant, u64), Job>,
    next_id: u64,
    stop: bool,
}

impl State {
    fn insert(&mut self, at: Instant, job: Job) -> (Instant, u64) {
        let key = (at, self.next_id);
        self.next_id += 1;
        self.jobs.insert(key, job);
        key
    }
}

struct Owner(Arc<Shared>);

impl Drop for Owner {
    fn drop(&mut self) {
        self.0.state.lock().stop = true;
        self.0.wake.notify_one();
    }
}

/// A job not run yet; [`cancel`](Self::cancel) takes it back. Dropping it leaves the job.
#[derive(Debug)]
pub(crate) struct TimerHandle {
    shared: Weak<Shared>,
    key: (Instant, u64),
}

impl TimerHandle {
    /// Removes the job if it has not run (what it captured is dropped now).
    pub(crate) fn cancel(&self) {
        if let Some(shared) = self.shared.upgrade() {
            let job = shared.state.lock().jobs.remove(&self.key);
            drop(job);
        }
    }
}

impl Timer {
    /// Starts the housekeeping thread.
    pub(crate) fn start() -> std::io::Result<Timer> {
        let shared = Arc::new(Shared {
            state: Mutex::new(State::default()),
            wake: Condvar::new(),
        });
        let thread = Arc::clone(&shared);
        std::thread::Builder::new()
            .name("redis-lock-pool".into())
            .spawn(move || run(&thread))?;
        Ok(Timer {
            _owner: Arc::new(Owner(Arc::clone(&shared))),
            shared,
        })
    }

    /// Runs `job` on the housekeeping thread `after` from now, unless cancelled first.
    pub(crate) fn after(
        &self,
        after: Duration,
        job: impl FnOnce() + Send + 'static,
    ) -> TimerHandle {
        let key = schedule(&self.shared, Instant::now() + after, Box::new(job));
        TimerHandle {
            shared: Arc::downgrade(&self.shared),
            key,
        }
    }

    /// Runs `job` every `period` (the first time one period from now) until the client is
    /// dropped. A run that takes longer than a period delays the next, never doubles it.
    pub(crate) fn every(&self, period: Duration, job: impl Fn() + Send + Sync + 'static) {
        repeat(
            Arc::downgrade(&self.shared),
            Instant::now() + period,
            period,
            Arc::new(job),
        );
    }

    /// Jobs waiting to run.
    #[cfg(test)]
    fn pending(&self) -> usize {
        self.shared.state.lock().jobs.len()
    }
}

/// Adds a job, waking the thread if it is now the earliest.
fn schedule(shared: &Shared, at: Instant, job: Job) -> (Instant, u64) {
    let mut state = shared.state.lock();
    let key = state.insert(at, job);
    if state.jobs.keys().next() == Some(&key) {
        shared.wake.notify_one();
    }
    key
}

/// One run of a periodic job at `at`, which schedules the next.
fn repeat(shared: Weak<Shared>, at: Instant, period: Duration, job: Arc<dyn Fn() + Send + Sync>) {
    let Some(strong) = shared.upgrade() else {
        return;
    };
    schedule(
        &strong,
        at,
        Box::new(move || {
            job();
            repeat(shared, Instant::now() + period, period, job);
        }),
    );
}

/// The housekeeping thread: runs each job at its time, without the lock, until stopped.
fn run(shared: &Shared) {
    let mut state = shared.state.lock();
    while !state.stop {
        let Some((&(at, _), _)) = state.jobs.first_key_value() else {
            shared.wake.wait(&mut state);
            continue;
        };
        if at > Instant::now() {
            shared.wake.wait_until(&mut state, at);
            continue;
        }
        if let Some((_, job)) = state.jobs.pop_first() {
            MutexGuard::unlocked(&mut state, job);
        }
    }
    // What the jobs not run captured goes now, not when the last handle does.
    let jobs = std::mem::take(&mut state.jobs);
    drop(state);
    drop(jobs);
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    fn timer() -> Timer {
        Timer::start().unwrap()
    }

    #[test]
    fn a_cancelled_job_is_gone_at_once_and_never_runs() {
        let timer = timer();
        let ran = Arc::new(AtomicUsize::new(0));
        let kept = Arc::new(());
        let handle = {
            let (ran, kept) = (Arc::clone(&ran), Arc::clone(&kept));
            timer.after(Duration::from_millis(30), move || {
                let _ = &kept;
                ran.fetch_add(1, Ordering::SeqCst);
            })
        };
        assert_eq!(Arc::strong_count(&kept), 2);
        handle.cancel();
        assert_eq!(timer.pending(), 0);
        assert_eq!(
            Arc::strong_count(&kept),
            1,
            "what it captured is dropped at the cancel"
        );
        // A later job has run: the cancelled one's time has passed.
        let (tx, rx) = std::sync::mpsc::channel();
        let _ = timer.after(Duration::from_millis(40), move || tx.send(()).unwrap());
        rx.recv_timeout(Duration::from_secs(2)).unwrap();
        assert_eq!(ran.load(Ordering::SeqCst), 0);
    }

    #[test]
    fn jobs_run_in_order_however_they_were_added() {
        let timer = timer();
        let (tx, rx) = std::sync::mpsc::channel();
        for (n, ms) in [(3, 30u64), (1, 10), (2, 20)] {
            let tx = tx.clone();
            let _ = timer.after(Duration::from_millis(ms), move || tx.send(n).unwrap());
        }
        let got: Vec<i32> = (0..3)
            .map(|_| rx.recv_timeout(Duration::from_secs(2)).unwrap())
            .collect();
        assert_eq!(got, [1, 2, 3]);
        assert_eq!(timer.pending(), 0);
    }

    #[test]
    fn a_periodic_job_runs_again_and_again() {
        let timer = timer();
        let (tx, rx) = std::sync::mpsc::channel();
        let tx = std::sync::Mutex::new(tx);
        timer.every(Duration::from_millis(5), move || {
            let _ = tx.lock().unwrap().send(());
        });
        for _ in 0..3 {
            rx.recv_timeout(Duration::from_secs(2)).unwrap();
        }
        // A run schedules the next after it sent: never more than that one is queued.
        let (mut seen, deadline) = (0, Instant::now() + Duration::from_millis(50));
        while Instant::now() < deadline {
            let pending = timer.pending();
            assert!(pending <= 1, "{pending} runs queued");
            seen = seen.max(pending);
        }
        assert_eq!(seen, 1, "its next run is queued");
    }

    #[test]
    fn the_thread_ends_with_the_last_clone_and_drops_what_the_jobs_held() {
        let timer = timer();
        let shared = Arc::downgrade(&timer.shared);
        let kept = Arc::new(());
        {
            let kept = Arc::clone(&kept);
            let _ = timer.after(Duration::from_secs(3600), move || drop(kept));
        }
        timer.every(Duration::from_secs(3600), || {});
        let clone = timer.clone();
        drop(timer);
        assert_eq!(Arc::strong_count(&kept), 2, "a clone keeps the jobs");
        drop(clone);
        // The thread lets go of the shared state as it ends, and the jobs with it.
        let deadline = Instant::now() + Duration::from_secs(2);
        while (shared.strong_count() > 0 || Arc::strong_count(&kept) > 1)
            && Instant::now() < deadline
        {
            std::thread::yield_now();
        }
        assert_eq!(shared.strong_count(), 0, "the thread ended");
        assert_eq!(Arc::strong_count(&kept), 1, "the pending job was dropped");
    }
}
