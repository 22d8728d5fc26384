//! One-shot jobs at an instant that can be taken back, on the client's housekeeping thread.
//!
//! The thread pool's own delayed jobs cannot be removed: a cancelled one stays queued, with
//! whatever it captured, until its time. Most of ours are cancelled (a blocking wait's
//! wake-up, ended early by a release or a cancel; a request's expiry alarm, answered in
//! time), so at a thousand waits a second with a minute's timeout that queue would hold sixty
//! thousand dead jobs. Here a job lives in an ordered map until it runs or is cancelled, and
//! the pool holds one wake-up for the earliest (plus one per time a new job came earlier than
//! every other, each of which finds nothing to do).

use std::collections::BTreeMap;
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use scheduled_thread_pool::ScheduledThreadPool;

type Job = Box<dyn FnOnce() + Send>;

/// The client's jobs at an instant (see the module's documentation). Cheap to clone.
#[derive(Clone)]
pub(crate) struct Timer {
    pool: Arc<ScheduledThreadPool>,
    shared: Arc<Mutex<State>>,
}

impl std::fmt::Debug for Timer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Timer")
            .field("jobs", &self.shared.lock().jobs.len())
            .finish()
    }
}

#[derive(Default)]
struct State {
    jobs: BTreeMap<(Instant, u64), Job>,
    next_id: u64,
    /// The earliest wake-up the pool holds for us.
    armed: Option<Instant>,
}

/// A job not run yet; [`cancel`](Self::cancel) takes it back. Dropping it leaves the job.
#[derive(Debug)]
pub(crate) struct TimerHandle {
    shared: Weak<Mutex<State>>,
    key: (Instant, u64),
}

impl TimerHandle {
    /// Removes the job if it has not run (what it captured is dropped now).
    pub(crate) fn cancel(&self) {
        if let Some(shared) = self.shared.upgrade() {
            let job = shared.lock().jobs.remove(&self.key);
            drop(job);
        }
    }
}

impl Timer {
    pub(crate) fn new(pool: Arc<ScheduledThreadPool>) -> Timer {
        Timer {
            pool,
            shared: Arc::default(),
        }
    }

    /// Runs `job` on the housekeeping thread `after` from now, unless cancelled first.
    pub(crate) fn after(
        &self,
        after: Duration,
        job: impl FnOnce() + Send + 'static,
    ) -> TimerHandle {
        let at = Instant::now() + after;
        let mut state = self.shared.lock();
        let key = (at, state.next_id);
        state.next_id += 1;
        state.jobs.insert(key, Box::new(job));
        if state.armed.is_none_or(|armed| at < armed) {
            state.armed = Some(at);
            arm(&self.pool, &self.shared, at);
        }
        TimerHandle {
            shared: Arc::downgrade(&self.shared),
            key,
        }
    }

    /// Jobs waiting to run.
    #[cfg(test)]
    fn pending(&self) -> usize {
        self.shared.lock().jobs.len()
    }
}

/// Has the pool wake us at `at`. Weak both ways: a dropped client's queue does not keep it.
fn arm(pool: &Arc<ScheduledThreadPool>, shared: &Arc<Mutex<State>>, at: Instant) {
    let (weak_pool, weak_shared) = (Arc::downgrade(pool), Arc::downgrade(shared));
    pool.execute_after(at.saturating_duration_since(Instant::now()), move || {
        if let (Some(pool), Some(shared)) = (weak_pool.upgrade(), weak_shared.upgrade()) {
            tick(&pool, &shared, at);
        }
    });
}

/// A wake-up set for `at`: runs every job due, and sets the next wake-up.
fn tick(pool: &Arc<ScheduledThreadPool>, shared: &Arc<Mutex<State>>, at: Instant) {
    let due: Vec<Job> = {
        let mut state = shared.lock();
        if state.armed == Some(at) {
            state.armed = None;
        }
        let now = Instant::now();
        let later = state.jobs.split_off(&(now, u64::MAX));
        let due = std::mem::replace(&mut state.jobs, later);
        if let Some(&(next, _)) = state.jobs.keys().next()
            && state.armed.is_none_or(|armed| next < armed)
        {
            state.armed = Some(next);
            arm(pool, shared, next);
        }
        due.into_values().collect()
    };
    for job in due {
        job();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    fn timer() -> Timer {
        Timer::new(Arc::new(ScheduledThreadPool::new(1)))
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
}
