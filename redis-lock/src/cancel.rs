//! Cancelling a waiting acquisition from another thread: the token the caller keeps, and the
//! wake-ups the acquire loop registers on it while it waits.
//!
//! A waiter blocked in `BLPOP` cannot be interrupted in its socket read, so the acquire loop
//! registers a *waker* for as long as it runs: a function that wakes it in its waiting group
//! (`store::waiting`: a thread sleeping while another blocks for the group is woken on its
//! condition variable; the one blocked in `BLPOP`, or one the `BLPOP` must return for, through
//! Redis, by a push onto the group's poke list). `cancel` sets the flag first and then runs
//! the wakers, and the loop registers its waker before it looks at the flag (the last look
//! under the group's lock, which the waker takes too), so a cancel is never missed.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use parking_lot::{Condvar, Mutex};

type Waker = Arc<dyn Fn() + Send + Sync>;

/// Cancels waiting acquisitions from another thread.
///
/// Pass a clone to [`LockOptions::cancel`](crate::LockOptions::cancel) (or
/// [`LockRequest::cancel`](crate::LockRequest::cancel)) and keep one: [`cancel`](Self::cancel)
/// stops every acquisition that was given the token, now or later. A waiting thread is woken
/// at once (the thread blocked on Redis for its client's waiters of that lock through Redis:
/// one request, sent by the cancelling thread) and returns within a round trip or two; it leaves the wait queue first, so a grant made for it goes to
/// the next waiter. The acquisition fails with [`Error::Cancelled`](crate::Error::Cancelled);
/// locks already acquired are not affected. A cancelled token stays cancelled: use a new one
/// for the next acquisition.
///
/// Cheap to clone (an `Arc` inside), `Send` and `Sync`.
///
/// # Examples
///
/// ```no_run
/// use redis_lock::{CancelToken, Error, LockOptions};
/// # fn main() -> redis_lock::Result<()> {
/// # let locks = redis_lock::LockClient::open("redis://127.0.0.1/")?;
/// let cancel = CancelToken::new();
/// let waiter = {
///     let (locks, cancel) = (locks.clone(), cancel.clone());
///     std::thread::spawn(move || locks.acquire_with("report", &LockOptions::new().cancel(cancel)))
/// };
/// // ... shutting down: stop waiting
/// cancel.cancel();
/// match waiter.join().unwrap() {
///     Err(Error::Cancelled { .. }) => println!("stopped waiting"),
///     Ok(_guard) => println!("got the lock before the cancel"),
///     Err(e) => return Err(e),
/// }
/// # Ok(()) }
/// ```
#[derive(Clone, Default)]
pub struct CancelToken {
    state: Arc<State>,
}

#[derive(Default)]
struct State {
    cancelled: AtomicBool,
    next: AtomicU64,
    wakers: Mutex<Vec<(u64, Waker)>>,
    /// Wakes acquisitions that sleep between polling attempts.
    slept: Mutex<()>,
    woken: Condvar,
}

impl std::fmt::Debug for CancelToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CancelToken")
            .field("cancelled", &self.is_cancelled())
            .field("waiting", &self.state.wakers.lock().len())
            .finish()
    }
}

impl CancelToken {
    /// A token that is not cancelled.
    ///
    /// # Examples
    ///
    /// ```
    /// let cancel = redis_lock::CancelToken::new();
    /// assert!(!cancel.is_cancelled());
    /// ```
    #[must_use]
    pub fn new() -> CancelToken {
        CancelToken::default()
    }

    /// Cancels every acquisition given this token (or a clone): those waiting now stop, and
    /// later ones fail at once. Sends one request per waiting acquisition (to wake it), from
    /// this thread. Calling it again does nothing.
    ///
    /// # Examples
    ///
    /// ```
    /// let cancel = redis_lock::CancelToken::new();
    /// cancel.cancel();
    /// assert!(cancel.is_cancelled());
    /// ```
    pub fn cancel(&self) {
        if self.state.cancelled.swap(true, Ordering::SeqCst) {
            return;
        }
        {
            let _sleepers = self.state.slept.lock();
            self.state.woken.notify_all();
        }
        let wakers = std::mem::take(&mut *self.state.wakers.lock());
        for (_, wake) in wakers {
            wake();
        }
    }

    /// Whether [`cancel`](Self::cancel) was called on this token or a clone.
    ///
    /// # Examples
    ///
    /// ```
    /// let cancel = redis_lock::CancelToken::new();
    /// let clone = cancel.clone();
    /// clone.cancel();
    /// assert!(cancel.is_cancelled());
    /// ```
    #[must_use]
    pub fn is_cancelled(&self) -> bool {
        self.state.cancelled.load(Ordering::SeqCst)
    }

    /// Runs `wake` when the token is cancelled, for as long as the returned registration
    /// lives. Register before looking at the flag (see the module's doc).
    pub(crate) fn on_cancel(&self, wake: impl Fn() + Send + Sync + 'static) -> Registered {
        let id = self.state.next.fetch_add(1, Ordering::Relaxed);
        self.state.wakers.lock().push((id, Arc::new(wake)));
        Registered {
            state: Arc::clone(&self.state),
            id,
        }
    }

    /// Sleeps for `d`, or until the token is cancelled. `true` when cancelled.
    pub(crate) fn sleep(&self, d: Duration) -> bool {
        let mut slept = self.state.slept.lock();
        if !self.is_cancelled() {
            let _ = self.state.woken.wait_for(&mut slept, d);
        }
        self.is_cancelled()
    }
}

/// A waker registered on a token; unregistered on drop.
pub(crate) struct Registered {
    state: Arc<State>,
    id: u64,
}

impl Drop for Registered {
    fn drop(&mut self) {
        self.state.wakers.lock().retain(|(id, _)| *id != self.id);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicUsize;
    use std::time::Instant;

    #[test]
    fn cancel_runs_each_registered_waker_once_and_not_unregistered_ones() {
        let token = CancelToken::new();
        let runs = Arc::new(AtomicUsize::new(0));
        let counted = |runs: &Arc<AtomicUsize>| {
            let runs = Arc::clone(runs);
            move || {
                runs.fetch_add(1, Ordering::SeqCst);
            }
        };
        let _kept = token.on_cancel(counted(&runs));
        let dropped = token.on_cancel(counted(&runs));
        drop(dropped);
        let clone = token.clone();
        clone.cancel();
        token.cancel();
        assert_eq!(runs.load(Ordering::SeqCst), 1);
        assert!(token.is_cancelled());
    }

    #[test]
    fn a_sleep_ends_at_the_cancel() {
        let token = CancelToken::new();
        let started = Instant::now();
        assert!(!token.sleep(Duration::from_millis(5)));
        assert!(started.elapsed() >= Duration::from_millis(5));
        let other = token.clone();
        let canceller = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(20));
            other.cancel();
        });
        let started = Instant::now();
        assert!(token.sleep(Duration::from_secs(10)));
        assert!(started.elapsed() < Duration::from_secs(5));
        canceller.join().unwrap();
        // Cancelled already: no sleep at all.
        let started = Instant::now();
        assert!(token.sleep(Duration::from_secs(10)));
        assert!(started.elapsed() < Duration::from_secs(1));
    }
}
