//! How a waiter spends its wait budget between attempts.

use std::time::Duration;

/// How to wait between acquisition attempts while another owner holds the lock.
///
/// The default, [`RetryStrategy::notify`], blocks on the lock's wake-up list until a release
/// wakes this waiter (or the holder's TTL runs out), so a free lock is handed over within a
/// few round trips and waiters do not hammer Redis. [`RetryStrategy::fair`] does the same but
/// hands the lock over in strict arrival order. The sleeping strategies exist for parity with
/// other lock libraries and for comparison: they do not register as waiters, so a release
/// does not hold the lock for them.
///
/// Every strategy stops at the wait budget of the call (`try_lock_for`, `wait(..)`), and
/// additionally at [`max_attempts`](Self::max_attempts) if set.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use redis_lock::RetryStrategy;
///
/// let polite = RetryStrategy::exponential(Duration::from_millis(5), Duration::from_millis(200))
///     .jitter(Duration::from_millis(5))
///     .max_attempts(20);
/// let impatient = RetryStrategy::notify().fail_fast(true);
/// # let _ = (polite, impatient);
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[must_use = "a retry strategy does nothing until passed to an acquisition"]
pub struct RetryStrategy {
    pub(crate) kind: Kind,
    pub(crate) max_attempts: Option<u32>,
    pub(crate) jitter: Duration,
    pub(crate) fail_fast: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    /// Block until a release wakes us (bounded by the holder's TTL).
    Notify,
    /// Queue in arrival order; block until the release wakes us in turn.
    Fair,
    /// One attempt only, whatever the wait budget.
    Never,
    /// Sleep a fixed time.
    Fixed(Duration),
    /// Sleep `initial * 2^(n-1)`, at most `max`.
    Exponential { initial: Duration, max: Duration },
}

/// What the acquire loop does next.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Step {
    /// Give up now.
    Stop,
    /// Block on the wake-up list for at most this long.
    WaitSignal(Duration),
    /// Sleep this long.
    Sleep(Duration),
}

impl Default for RetryStrategy {
    fn default() -> Self {
        RetryStrategy::notify()
    }
}

impl RetryStrategy {
    fn with(kind: Kind) -> Self {
        RetryStrategy {
            kind,
            max_attempts: None,
            jitter: Duration::ZERO,
            fail_fast: false,
        }
    }

    /// Wait to be woken by the holder's release (or by its TTL running out). The default.
    pub fn notify() -> Self {
        Self::with(Kind::Notify)
    }

    /// Wait in strict arrival order (a fair lock, like Redisson's `FairLock`).
    ///
    /// Each waiter takes a ticket in the lock's queue when it first finds the lock busy; a
    /// release grants the lock to the head of the queue and wakes that waiter alone, and a
    /// caller that arrives while others are queued joins the end of the queue even if the
    /// lock is free at that moment. A waiter that gives up (its wait budget ran out) leaves the
    /// queue at once; one that died is dropped when its registration lapses: a queued waiter
    /// checks in at least every 2 s, and is taken for dead 1 s after a missed check-in. So a
    /// dead waiter holds up the queue for at most about 3 s.
    ///
    /// All callers of one lock should use the same mode: non-fair callers also give way to a
    /// non-empty fair queue, but fair waiters are only woken in order among themselves.
    ///
    /// Not available on a Redlock client
    /// ([`LockClient::redlock_builder`](crate::LockClient::redlock_builder)): each server would
    /// keep a queue of its own, and no single order holds across a majority, so acquiring
    /// with it fails with [`Error::InvalidInput`](crate::Error::InvalidInput). Single servers,
    /// Sentinel and Cluster support it.
    pub fn fair() -> Self {
        Self::with(Kind::Fair)
    }

    /// Make one attempt and never wait, whatever the call's wait budget.
    pub fn none() -> Self {
        Self::with(Kind::Never)
    }

    /// Poll: sleep `interval` between attempts.
    pub fn fixed(interval: Duration) -> Self {
        Self::with(Kind::Fixed(interval))
    }

    /// Poll with exponential backoff: `initial`, `2 * initial`, … capped at `max`.
    pub fn exponential(initial: Duration, max: Duration) -> Self {
        Self::with(Kind::Exponential {
            initial,
            max: max.max(initial),
        })
    }

    /// Give up after `attempts` acquisition attempts (the first one included); the acquisition
    /// then fails as when its wait budget runs out ([`Error::Timeout`](crate::Error::Timeout),
    /// `Ok(None)` from the `try_` forms). With [`notify`](Self::notify) and
    /// [`fair`](Self::fair) an attempt follows a release's wake-up or the holder's expiry, so a
    /// count can take as long as the holders keep the lock: bound it with a wait as well.
    pub fn max_attempts(mut self, attempts: u32) -> Self {
        self.max_attempts = Some(attempts.max(1));
        self
    }

    /// Add a random delay in `0..band` to every sleep, so waiters that started together do not
    /// retry in waves. No effect on [`notify`](Self::notify) and [`fair`](Self::fair).
    pub fn jitter(mut self, band: Duration) -> Self {
        self.jitter = band;
        self
    }

    /// Give up at once when the holder's remaining TTL is longer than what is left of the wait
    /// budget.
    ///
    /// This saves a pointless wait against holders with a fixed TTL. Against a holder whose
    /// watchdog keeps renewing, the remaining TTL is always about the full TTL, so a waiter
    /// with a budget shorter than the TTL gives up at its first attempt, even if the holder
    /// would have released a moment later.
    pub fn fail_fast(mut self, yes: bool) -> Self {
        self.fail_fast = yes;
        self
    }

    /// Whether waiters of this strategy register in Redis and are woken by releases (the
    /// sleeping strategies poll instead).
    pub(crate) fn notified(&self) -> bool {
        matches!(self.kind, Kind::Notify | Kind::Fair)
    }

    pub(crate) fn is_fair(&self) -> bool {
        self.kind == Kind::Fair
    }

    /// Whether a wait may follow attempt number `attempt` (1-based) with `left` of the budget:
    /// only then is it worth registering as a waiter in that attempt.
    pub(crate) fn may_wait_after(&self, attempt: u32, left: Duration) -> bool {
        !left.is_zero()
            && self.kind != Kind::Never
            && self.max_attempts.is_none_or(|max| attempt < max)
    }

    /// The next step after failed attempt number `attempt` (1-based), with `left` of the wait
    /// budget remaining, a holder whose lock expires in `holder_ttl` (`None`: no expiry), and
    /// `block`, how long Redis told a registered waiter to wait at most (`None`: not
    /// registered).
    ///
    /// `random_below(n)`: a random number below `n`, for the jitter (the caller's generator:
    /// this is a pure decision).
    pub(crate) fn next(
        &self,
        attempt: u32,
        left: Duration,
        holder_ttl: Option<Duration>,
        block: Option<Duration>,
        random_below: impl FnOnce(u64) -> u64,
    ) -> Step {
        if left.is_zero() || self.max_attempts.is_some_and(|max| attempt >= max) {
            return Step::Stop;
        }
        if self.fail_fast && holder_ttl.is_none_or(|ttl| ttl > left) {
            return Step::Stop;
        }
        let sleep = |d: Duration| {
            let band = u64::try_from(self.jitter.as_micros()).unwrap_or(u64::MAX);
            let d = d.saturating_add(Duration::from_micros(random_below(band)));
            Step::Sleep(d.min(left))
        };
        match self.kind {
            Kind::Never => Step::Stop,
            Kind::Notify | Kind::Fair => {
                // A crashed holder sends no wake-up: wake up when its TTL runs out at the latest.
                let bound = block.unwrap_or_else(|| {
                    holder_ttl.map_or(left, |ttl| ttl + Duration::from_millis(1))
                });
                Step::WaitSignal(bound.min(left))
            }
            Kind::Fixed(d) => sleep(d),
            Kind::Exponential { initial, max } => {
                let shift = attempt.saturating_sub(1).min(30);
                sleep(initial.saturating_mul(1 << shift).min(max))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: Duration = Duration::from_secs(1);
    const MS: Duration = Duration::from_millis(1);

    fn no_jitter(_: u64) -> u64 {
        0
    }

    #[test]
    fn exponential_doubles_up_to_the_cap() {
        let r = RetryStrategy::exponential(10 * MS, 35 * MS);
        assert_eq!(r.next(1, S, None, None, no_jitter), Step::Sleep(10 * MS));
        assert_eq!(r.next(2, S, None, None, no_jitter), Step::Sleep(20 * MS));
        assert_eq!(r.next(3, S, None, None, no_jitter), Step::Sleep(35 * MS));
        assert_eq!(r.next(60, S, None, None, no_jitter), Step::Sleep(35 * MS));
    }

    #[test]
    fn sleeps_never_exceed_the_budget() {
        let r = RetryStrategy::fixed(S);
        assert_eq!(
            r.next(1, 3 * MS, None, None, no_jitter),
            Step::Sleep(3 * MS)
        );
        assert_eq!(r.next(1, Duration::ZERO, None, None, no_jitter), Step::Stop);
    }

    #[test]
    fn notify_is_bounded_by_holder_ttl() {
        let r = RetryStrategy::notify();
        assert_eq!(
            r.next(1, S, Some(20 * MS), None, no_jitter),
            Step::WaitSignal(21 * MS)
        );
        assert_eq!(
            r.next(1, 5 * MS, Some(20 * MS), None, no_jitter),
            Step::WaitSignal(5 * MS)
        );
        assert_eq!(r.next(1, S, None, None, no_jitter), Step::WaitSignal(S));
    }

    #[test]
    fn a_registered_waiter_blocks_as_long_as_redis_said() {
        let r = RetryStrategy::fair();
        assert_eq!(
            r.next(1, S, Some(20 * MS), Some(7 * MS), no_jitter),
            Step::WaitSignal(7 * MS)
        );
        assert_eq!(
            r.next(1, 5 * MS, Some(20 * MS), Some(7 * MS), no_jitter),
            Step::WaitSignal(5 * MS)
        );
        assert!(r.notified() && r.is_fair());
        assert!(!RetryStrategy::fixed(MS).notified());
    }

    #[test]
    fn registration_only_when_a_wait_can_follow() {
        let r = RetryStrategy::notify().max_attempts(2);
        assert!(r.may_wait_after(1, S));
        assert!(!r.may_wait_after(2, S));
        assert!(!r.may_wait_after(1, Duration::ZERO));
        assert!(!RetryStrategy::none().may_wait_after(1, S));
    }

    #[test]
    fn max_attempts_and_none_stop() {
        assert_eq!(
            RetryStrategy::notify()
                .max_attempts(2)
                .next(2, S, None, None, no_jitter),
            Step::Stop
        );
        assert_eq!(
            RetryStrategy::none().next(1, S, None, None, no_jitter),
            Step::Stop
        );
    }

    #[test]
    fn fail_fast_gives_up_on_long_holders() {
        let r = RetryStrategy::notify().fail_fast(true);
        assert_eq!(r.next(1, 10 * MS, Some(S), None, no_jitter), Step::Stop);
        assert_eq!(r.next(1, 10 * MS, None, None, no_jitter), Step::Stop);
        assert_eq!(
            r.next(1, S, Some(10 * MS), None, no_jitter),
            Step::WaitSignal(11 * MS)
        );
    }

    #[test]
    fn jitter_is_drawn_below_its_band_and_added() {
        let r = RetryStrategy::fixed(10 * MS).jitter(5 * MS);
        let highest = |band: u64| {
            assert_eq!(band, 5_000, "the band in microseconds");
            band - 1
        };
        assert_eq!(
            r.next(1, S, None, None, highest),
            Step::Sleep(10 * MS + 4_999 * MS / 1000)
        );
        assert_eq!(r.next(1, S, None, None, no_jitter), Step::Sleep(10 * MS));
    }
}
