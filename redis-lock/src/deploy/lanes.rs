//! Long-lived threads that talk to one server of a quorum, so that a quorum asks all its
//! servers at once without an async runtime and without a thread per call.
//!
//! The one-request operations (attempt, renewal, release) are asked by the calling thread
//! itself where it can (`Ask::Request` in `quorum/fan_out.rs`, `store/direct.rs`); a lane
//! takes what it cannot: servers without an idle plain connection, a `NOSCRIPT` reply, the replies still to
//! come once the call decided, and every other operation.
//!
//! A `Lane` is a queue of jobs and the threads that run them. It starts one thread when the
//! first job arrives and adds one whenever a job finds every thread busy, up to `max` (the
//! store's pool size: more could only wait for a connection); idle threads wait for the next
//! job and stop when the lane is dropped with its quorum. Dropping a lane waits (at most its
//! `drain` time) for the jobs still queued or running: they are a call's late work (the undo or
//! release of an attempt still in flight), which must not outlive the client by surprise: a
//! program that drops its client and goes on would otherwise race its own lock's release.

use std::cell::Cell;
use std::collections::VecDeque;
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex};

/// A unit of work for one server.
pub(crate) type Job = Box<dyn FnOnce() + Send + 'static>;

#[derive(Default)]
struct Queue {
    jobs: VecDeque<Job>,
    threads: usize,
    idle: usize,
    closed: bool,
}

struct Shared {
    queue: Mutex<Queue>,
    ready: Condvar,
    /// A thread ended.
    ended: Condvar,
}

thread_local! {
    /// This thread runs a lane: a drop here must not wait for lane threads (itself among them).
    static ON_LANE: Cell<bool> = const { Cell::new(false) };
}

/// The threads of one server.
pub(crate) struct Lane {
    shared: Arc<Shared>,
    /// Name of the threads (the server's label, without credentials).
    name: String,
    max: usize,
    /// How long a drop waits for the jobs still queued or running.
    drain: Duration,
}

impl std::fmt::Debug for Lane {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let q = self.shared.queue.lock();
        f.debug_struct("Lane")
            .field("name", &self.name)
            .field("threads", &q.threads)
            .field("queued", &q.jobs.len())
            .finish()
    }
}

impl Lane {
    /// `drain`: how long dropping the lane may wait for its jobs to finish.
    pub(crate) fn new(name: String, max: usize, drain: Duration) -> Lane {
        Lane {
            shared: Arc::new(Shared {
                queue: Mutex::new(Queue::default()),
                ready: Condvar::new(),
                ended: Condvar::new(),
            }),
            name,
            max: max.max(1),
            drain,
        }
    }

    /// Queues `job`. `Err` only when no thread runs the lane and none could be started (the
    /// system refused a thread): the job was not run, and the caller runs it itself.
    pub(crate) fn submit(&self, job: Job) -> Result<(), Job> {
        let mut q = self.shared.queue.lock();
        // An idle thread not yet spoken for by a queued job takes it; at the limit it waits.
        if q.idle > q.jobs.len() || q.threads >= self.max {
            q.jobs.push_back(job);
            drop(q);
            self.shared.ready.notify_one();
            return Ok(());
        }
        // Every thread is busy (or there is none yet): start one more for this job.
        q.threads += 1;
        q.idle += 1;
        q.jobs.push_back(job);
        drop(q);
        let shared = Arc::clone(&self.shared);
        let spawned = std::thread::Builder::new()
            .name(format!("redis-lock {}", self.name))
            .spawn(move || work(&shared));
        match spawned {
            Ok(_) => Ok(()),
            Err(_) => {
                let mut q = self.shared.queue.lock();
                q.threads -= 1;
                q.idle -= 1;
                if q.threads > 0 {
                    // Another thread will take it.
                    return Ok(());
                }
                q.jobs.pop_back().map_or(Ok(()), Err)
            }
        }
    }
}

impl Drop for Lane {
    fn drop(&mut self) {
        // Queued jobs still run (a late undo must not be lost); then the threads end. The drop
        // waits for that, bounded by `drain` (not on a lane thread: it would wait for itself).
        let mut q = self.shared.queue.lock();
        q.closed = true;
        self.shared.ready.notify_all();
        if ON_LANE.with(Cell::get) {
            return;
        }
        let until = Instant::now() + self.drain;
        while q.threads > 0 && !self.shared.ended.wait_until(&mut q, until).timed_out() {}
    }
}

fn work(shared: &Shared) {
    ON_LANE.with(|on| on.set(true));
    let mut q = shared.queue.lock();
    loop {
        if let Some(job) = q.jobs.pop_front() {
            q.idle -= 1;
            drop(q);
            job();
            q = shared.queue.lock();
            q.idle += 1;
            continue;
        }
        if q.closed {
            q.threads -= 1;
            q.idle -= 1;
            shared.ended.notify_all();
            return;
        }
        shared.ready.wait(&mut q);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::mpsc;
    use std::time::Duration;

    #[test]
    fn jobs_run_in_parallel_up_to_the_limit() {
        let lane = Lane::new("test".into(), 3, Duration::from_secs(10));
        let running = Arc::new(AtomicUsize::new(0));
        let peak = Arc::new(AtomicUsize::new(0));
        let (tx, rx) = mpsc::channel();
        for _ in 0..6 {
            let (running, peak, tx) = (Arc::clone(&running), Arc::clone(&peak), tx.clone());
            lane.submit(Box::new(move || {
                let now = running.fetch_add(1, Ordering::SeqCst) + 1;
                peak.fetch_max(now, Ordering::SeqCst);
                std::thread::sleep(Duration::from_millis(30));
                running.fetch_sub(1, Ordering::SeqCst);
                tx.send(()).unwrap();
            }))
            .map_err(|_| "no thread")
            .unwrap();
        }
        for _ in 0..6 {
            rx.recv_timeout(Duration::from_secs(10)).unwrap();
        }
        let peak = peak.load(Ordering::SeqCst);
        assert!(peak > 1, "ran one at a time");
        assert!(peak <= 3, "more threads than the limit: {peak}");
        assert!(lane.shared.queue.lock().threads <= 3);
    }

    #[test]
    fn queued_jobs_still_run_after_the_lane_is_dropped() {
        let lane = Lane::new("test".into(), 1, Duration::from_secs(10));
        let (tx, rx) = mpsc::channel();
        for i in 0..3 {
            let tx = tx.clone();
            lane.submit(Box::new(move || {
                std::thread::sleep(Duration::from_millis(10));
                tx.send(i).unwrap();
            }))
            .map_err(|_| "no thread")
            .unwrap();
        }
        drop(lane);
        // The drop waited for them: every one ran before it returned.
        let got: Vec<i32> = rx.try_iter().collect();
        assert_eq!(got, [0, 1, 2]);
    }

    #[test]
    fn a_drop_waits_for_a_stuck_job_no_longer_than_its_drain() {
        let lane = Lane::new("test".into(), 1, Duration::from_millis(100));
        let (tx, rx) = mpsc::channel::<()>();
        lane.submit(Box::new(move || {
            // Stuck until the test ends (the sender is dropped then).
            let _ = rx.recv_timeout(Duration::from_secs(10));
        }))
        .map_err(|_| "no thread")
        .unwrap();
        let start = Instant::now();
        drop(lane);
        let took = start.elapsed();
        drop(tx);
        assert!(took >= Duration::from_millis(100), "{took:?}");
        assert!(took < Duration::from_secs(5), "{took:?}");
    }
}
