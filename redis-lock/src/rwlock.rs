//! The read-write lock's public calls: `read_lock` / `write_lock` and their `try_` family on
//! `LockClient`, returning the same `LockGuard` as the mutex (a guard is a lease, whatever
//! the primitive). Each is an acquisition with a `LockMode`, which picks the side from the
//! table of primitives (`Kind::of_mode`).

use std::time::{Duration, Instant};

use crate::client::LockClient;
use crate::error::Result;
use crate::guard::LockGuard;
use crate::options::{LockMode, LockOptions};

impl LockClient {
    /// Takes a read share of the read-write lock `key`, waiting until no writer holds it or
    /// waits for it (or up to the client's [`default_wait`](crate::Builder::default_wait)).
    ///
    /// Many readers hold the lock at once; a writer ([`write_lock`](Self::write_lock)) holds
    /// it alone. Each share has its own owner token, TTL and watchdog: a reader's renewal or
    /// release never touches another's share, and a crashed reader's share frees within its
    /// TTL. The guard is a [`LockGuard`] with everything it offers (watchdog, loss, `extend`,
    /// `release` outcomes); its fencing token comes from the name's one counter, so a later
    /// writer's token is greater.
    ///
    /// Rules:
    /// - **Writers first**: while a writer waits, new readers wait too (readers already in
    ///   keep their shares), so a stream of readers cannot starve a writer. When the lock
    ///   frees, the release wakes every waiter at once (no polling): the readers enter
    ///   together unless a writer waits.
    /// - **Downgrade**: a thread that holds the write lock of `key` (through this client) may
    ///   take its read lock; the share is granted at once beside the write lock, which stays
    ///   exclusive until it is released, and the share then holds the lock for reading.
    /// - **No upgrade**: a thread that holds a read share asking for the write lock fails at
    ///   once with [`Error::UpgradeRefused`](crate::Error::UpgradeRefused) (it would wait for
    ///   itself).
    /// - A second read lock on the same thread is [`Error::AlreadyHeld`](crate::Error::AlreadyHeld)
    ///   unless asked for with [`LockOptions::reentrant`], which joins the share held.
    /// - A name is one primitive: a read-write lock on a mutex's name (or the reverse) fails
    ///   with [`Error::WrongType`](crate::Error::WrongType) and changes nothing.
    /// - Not available under Redlock ([`Error::InvalidInput`](crate::Error::InvalidInput));
    ///   single server, Sentinel and Cluster only. No fair waiting and no
    ///   [`hold_at_least`](LockOptions::hold_at_least) (also `InvalidInput`).
    ///
    /// # Errors
    ///
    /// [`Error::Timeout`](crate::Error::Timeout) when a writer still holds or waits for the
    /// lock at the end of the client's default wait; otherwise as
    /// [`lock`](Self::lock).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn main() -> redis_lock::Result<()> {
    /// let locks = redis_lock::LockClient::open("redis://127.0.0.1/")?;
    /// let a = locks.read_lock("catalog")?;
    /// let b = std::thread::spawn({
    ///     let locks = locks.clone();
    ///     move || locks.read_lock("catalog").map(|g| g.fencing_token())
    /// });
    /// assert!(b.join().unwrap().is_ok()); // readers share the lock
    /// drop(a);
    /// # Ok(()) }
    /// ```
    pub fn read_lock(&self, key: &str) -> Result<LockGuard> {
        self.acquire_with(key, &LockOptions::new().mode(LockMode::Read))
    }

    /// Makes one attempt to take a read share of `key`. `Ok(None)` when a writer holds or
    /// waits for it. See [`read_lock`](Self::read_lock) for the rules.
    ///
    /// # Errors
    ///
    /// As [`try_lock`](Self::try_lock), plus [`Error::UpgradeRefused`](crate::Error::UpgradeRefused).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn main() -> redis_lock::Result<()> {
    /// # let locks = redis_lock::LockClient::open("redis://127.0.0.1/")?;
    /// if let Some(share) = locks.try_read_lock("catalog")? {
    ///     println!("reading under fencing token {}", share.fencing_token());
    /// }
    /// # Ok(()) }
    /// ```
    pub fn try_read_lock(&self, key: &str) -> Result<Option<LockGuard>> {
        self.try_acquire_rw(key, LockMode::Read, Duration::ZERO)
    }

    /// Tries to take a read share of `key`, waiting up to `timeout`.
    ///
    /// # Errors
    ///
    /// As [`try_read_lock`](Self::try_read_lock), plus
    /// [`Error::InvalidInput`](crate::Error::InvalidInput) for a `timeout` that overflows the clock.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn main() -> redis_lock::Result<()> {
    /// # let locks = redis_lock::LockClient::open("redis://127.0.0.1/")?;
    /// use std::time::Duration;
    /// let share = locks.try_read_lock_for("catalog", Duration::from_secs(2))?;
    /// # let _ = share; Ok(()) }
    /// ```
    pub fn try_read_lock_for(&self, key: &str, timeout: Duration) -> Result<Option<LockGuard>> {
        self.try_acquire_rw(key, LockMode::Read, timeout)
    }

    /// Tries to take a read share of `key`, waiting until `deadline`.
    ///
    /// # Errors
    ///
    /// As [`try_read_lock`](Self::try_read_lock).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn main() -> redis_lock::Result<()> {
    /// # let locks = redis_lock::LockClient::open("redis://127.0.0.1/")?;
    /// use std::time::{Duration, Instant};
    /// let share = locks.try_read_lock_until("catalog", Instant::now() + Duration::from_secs(2))?;
    /// # let _ = share; Ok(()) }
    /// ```
    pub fn try_read_lock_until(&self, key: &str, deadline: Instant) -> Result<Option<LockGuard>> {
        let left = deadline.saturating_duration_since(Instant::now());
        self.try_acquire_rw(key, LockMode::Read, left)
    }

    /// Takes the write lock of the read-write lock `key`: exclusive, no reader and no other
    /// writer. Waits until the readers in have left (new readers wait behind it) and any
    /// writer has released, or up to the client's
    /// [`default_wait`](crate::Builder::default_wait). See [`read_lock`](Self::read_lock) for
    /// the rules.
    ///
    /// The fencing token is greater than every token issued for `key` before (reads and
    /// writes): pass it to the store you write to.
    ///
    /// # Errors
    ///
    /// [`Error::UpgradeRefused`](crate::Error::UpgradeRefused) when this thread holds a read
    /// share of `key`; otherwise as [`lock`](Self::lock).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn main() -> redis_lock::Result<()> {
    /// # let locks = redis_lock::LockClient::open("redis://127.0.0.1/")?;
    /// let writer = locks.write_lock("catalog")?;
    /// // ... rebuild the catalog, passing writer.fencing_token() to the store ...
    /// let share = locks.read_lock("catalog")?; // downgrade: granted at once
    /// writer.release()?;                       // now only read
    /// # drop(share); Ok(()) }
    /// ```
    pub fn write_lock(&self, key: &str) -> Result<LockGuard> {
        self.acquire_with(key, &LockOptions::new().mode(LockMode::Write))
    }

    /// Makes one attempt to take the write lock of `key`. `Ok(None)` when readers or a writer
    /// hold it.
    ///
    /// # Errors
    ///
    /// As [`write_lock`](Self::write_lock).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn main() -> redis_lock::Result<()> {
    /// # let locks = redis_lock::LockClient::open("redis://127.0.0.1/")?;
    /// match locks.try_write_lock("catalog")? {
    ///     Some(_writer) => println!("rebuilding"),
    ///     None => println!("in use"),
    /// }
    /// # Ok(()) }
    /// ```
    pub fn try_write_lock(&self, key: &str) -> Result<Option<LockGuard>> {
        self.try_acquire_rw(key, LockMode::Write, Duration::ZERO)
    }

    /// Tries to take the write lock of `key`, waiting up to `timeout`. While it waits, new
    /// readers wait too.
    ///
    /// # Errors
    ///
    /// As [`write_lock`](Self::write_lock), plus
    /// [`Error::InvalidInput`](crate::Error::InvalidInput) for a `timeout` that overflows the clock.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn main() -> redis_lock::Result<()> {
    /// # let locks = redis_lock::LockClient::open("redis://127.0.0.1/")?;
    /// use std::time::Duration;
    /// let writer = locks.try_write_lock_for("catalog", Duration::from_secs(5))?;
    /// # let _ = writer; Ok(()) }
    /// ```
    pub fn try_write_lock_for(&self, key: &str, timeout: Duration) -> Result<Option<LockGuard>> {
        self.try_acquire_rw(key, LockMode::Write, timeout)
    }

    /// Tries to take the write lock of `key`, waiting until `deadline`.
    ///
    /// # Errors
    ///
    /// As [`write_lock`](Self::write_lock).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn main() -> redis_lock::Result<()> {
    /// # let locks = redis_lock::LockClient::open("redis://127.0.0.1/")?;
    /// use std::time::{Duration, Instant};
    /// let writer = locks.try_write_lock_until("catalog", Instant::now() + Duration::from_secs(5))?;
    /// # let _ = writer; Ok(()) }
    /// ```
    pub fn try_write_lock_until(&self, key: &str, deadline: Instant) -> Result<Option<LockGuard>> {
        let left = deadline.saturating_duration_since(Instant::now());
        self.try_acquire_rw(key, LockMode::Write, left)
    }

    fn try_acquire_rw(
        &self,
        key: &str,
        mode: LockMode,
        wait: Duration,
    ) -> Result<Option<LockGuard>> {
        self.try_acquire_with(key, &LockOptions::new().mode(mode).wait(wait))
    }
}
