//! The heap-counting soak: every primitive on one shared client, under a global allocator that
//! counts live heap bytes, measured when the client is quiet (every operation returned, every
//! registration gone, the heap no longer shrinking). Used by `tests/soak.rs` (a short run that
//! fails on growth) and by the `soak` binary (the benchmark's minutes-long rows).
//!
//! A binary that uses it installs the allocator itself:
//!
//! ```ignore
//! #[global_allocator]
//! static ALLOC: redis_lock_tests::soak::Counting = redis_lock_tests::soak::Counting;
//! ```

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use redis_lock::testing::Registrations;
use redis_lock::{CancelToken, Error, LockClient, LockGuard, LossDetection, Semaphore};

static LIVE: AtomicI64 = AtomicI64::new(0);
static ALLOCATIONS: AtomicU64 = AtomicU64::new(0);

/// Where live allocations were made, while [`trace`] runs (a diagnosis: slow).
static TRACING: AtomicBool = AtomicBool::new(false);
type Sites = std::collections::HashMap<usize, (usize, std::backtrace::Backtrace)>;
static SITES: std::sync::Mutex<Option<Sites>> = std::sync::Mutex::new(None);

thread_local! {
    /// Set while this thread records a site: what recording allocates is not recorded.
    static RECORDING: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

fn record(ptr: *mut u8, size: Option<usize>) {
    if !TRACING.load(Ordering::Relaxed) || RECORDING.with(|r| r.replace(true)) {
        return;
    }
    if let Ok(mut sites) = SITES.lock()
        && let Some(sites) = sites.as_mut()
    {
        match size {
            Some(size) => {
                sites.insert(
                    ptr as usize,
                    (size, std::backtrace::Backtrace::force_capture()),
                );
            }
            None => {
                sites.remove(&(ptr as usize));
            }
        }
    }
    RECORDING.with(|r| r.set(false));
}

/// Runs `f` recording where every allocation it makes is made, then returns those still live
/// after `settle`, grouped by where they were made: (bytes, allocations, backtrace), most bytes
/// first. What a leak leaves behind, after a round that should leave nothing.
pub fn trace(f: impl FnOnce(), settle: impl FnOnce()) -> Vec<(usize, usize, String)> {
    *SITES.lock().unwrap() = Some(Sites::new());
    TRACING.store(true, Ordering::SeqCst);
    f();
    // Frees during the settling count too.
    settle();
    TRACING.store(false, Ordering::SeqCst);
    let sites = SITES.lock().unwrap().take().unwrap_or_default();
    let mut grouped: std::collections::HashMap<String, (usize, usize)> = Default::default();
    for (_, (size, trace)) in sites {
        let text = trace.to_string();
        let e = grouped.entry(text).or_default();
        e.0 += size;
        e.1 += 1;
    }
    let mut out: Vec<_> = grouped.into_iter().map(|(t, (b, n))| (b, n, t)).collect();
    out.sort_by_key(|site| std::cmp::Reverse(site.0));
    out
}

/// The system allocator, counting live bytes and allocations.
#[derive(Debug)]
pub struct Counting;

// SAFETY: every call is forwarded to `System` unchanged; the counters are only added to.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: forwarded as given.
        let p = unsafe { System.alloc(layout) };
        if !p.is_null() {
            LIVE.fetch_add(layout.size() as i64, Ordering::Relaxed);
            ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
            record(p, Some(layout.size()));
        }
        p
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: forwarded as given.
        let p = unsafe { System.alloc_zeroed(layout) };
        if !p.is_null() {
            LIVE.fetch_add(layout.size() as i64, Ordering::Relaxed);
            ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
            record(p, Some(layout.size()));
        }
        p
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: forwarded as given.
        unsafe { System.dealloc(ptr, layout) };
        LIVE.fetch_sub(layout.size() as i64, Ordering::Relaxed);
        record(ptr, None);
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: forwarded as given.
        let p = unsafe { System.realloc(ptr, layout, new_size) };
        if !p.is_null() {
            LIVE.fetch_add(new_size as i64 - layout.size() as i64, Ordering::Relaxed);
            ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
            record(ptr, None);
            record(p, Some(new_size));
        }
        p
    }
}

/// Live heap bytes now (0 unless [`Counting`] is the global allocator).
pub fn live_bytes() -> i64 {
    LIVE.load(Ordering::Relaxed)
}

/// Allocations so far.
pub fn allocations() -> u64 {
    ALLOCATIONS.load(Ordering::Relaxed)
}

/// This process's resident set, in bytes (`/proc/self/statm`).
pub fn rss_bytes() -> u64 {
    let statm = std::fs::read_to_string("/proc/self/statm").unwrap_or_default();
    let pages: u64 = statm
        .split_whitespace()
        .nth(1)
        .and_then(|p| p.parse().ok())
        .unwrap_or(0);
    // SAFETY: sysconf has no preconditions.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    pages * u64::try_from(page).unwrap_or(4096)
}

/// The names of this process's threads (`/proc/self/task/*/comm`).
pub fn thread_names() -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir("/proc/self/task")
        .map(|dir| {
            dir.filter_map(|t| t.ok())
                .filter_map(|t| std::fs::read_to_string(t.path().join("comm")).ok())
                .map(|n| n.trim().to_owned())
                .collect()
        })
        .unwrap_or_default();
    names.sort();
    names
}

/// What one operation of the soak does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// `try_lock_for` a name of the pool, hold, drop.
    Mutex,
    /// `try_read_lock_for`.
    Read,
    /// `try_write_lock_for`.
    Write,
    /// A permit of a semaphore of 3.
    Semaphore,
    /// `try_lock_all_for` two names.
    Multi,
    /// A wait on a lock held for the whole run, cancelled after 5 ms.
    Cancel,
    /// A lock turned into a handle, resumed, released.
    Handoff,
    /// A lock broken by `force_release` while held (a loss), then dropped.
    Loss,
    /// Each of the above in turn.
    Mix,
}

impl Kind {
    /// Every kind, the mix last.
    pub const ALL: [Kind; 9] = [
        Kind::Mutex,
        Kind::Read,
        Kind::Write,
        Kind::Semaphore,
        Kind::Multi,
        Kind::Cancel,
        Kind::Handoff,
        Kind::Loss,
        Kind::Mix,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Kind::Mutex => "try_lock_for",
            Kind::Read => "try_read_lock_for",
            Kind::Write => "try_write_lock_for",
            Kind::Semaphore => "semaphore try_acquire_for",
            Kind::Multi => "try_lock_all_for (two names)",
            Kind::Cancel => "a wait cancelled after 5 ms",
            Kind::Handoff => "into_handle + resume",
            Kind::Loss => "force_release while held",
            Kind::Mix => "the mix",
        }
    }
}

/// The shared state of a soak: one client, a semaphore, a lock held throughout (what the
/// cancelled waits wait for), the pool of names.
pub struct World {
    pub client: LockClient,
    semaphore: Semaphore,
    /// Held for the whole run by the thread that made the world.
    _blocker: LockGuard,
    prefix: String,
    names: usize,
    /// How long each acquisition holds.
    pub hold: Duration,
    /// The blocker's watches (loss notification): 1 where the server notifies, else 0.
    watches: usize,
}

impl std::fmt::Debug for World {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("World")
            .field("prefix", &self.prefix)
            .finish()
    }
}

/// How long an acquisition may wait in the soak.
const WAIT: Duration = Duration::from_millis(200);

impl World {
    /// A world on `client` over `names` lock names starting with `prefix`.
    pub fn new(client: LockClient, prefix: &str, names: usize, hold: Duration) -> World {
        let semaphore = client
            .semaphore(&format!("{prefix}sem"), 3)
            .expect("a semaphore");
        // Its own long TTL: a renewal thread starved for most of a short TTL on a loaded
        // machine must not let the cancelled waits in.
        let blocker = client
            .options(&format!("{prefix}blocked"))
            .ttl(Duration::from_secs(30))
            .acquire()
            .expect("the lock the cancelled waits wait for");
        // The blocker is watched 2 ms after it was taken, once the listener is up.
        let deadline = Instant::now() + Duration::from_secs(5);
        while client.loss_detection() == LossDetection::NotStarted
            || (client.loss_detection() == LossDetection::Notified
                && client.registrations().watchers == 0)
        {
            assert!(Instant::now() < deadline, "loss notification did not start");
            std::thread::sleep(Duration::from_millis(5));
        }
        let watches = client.registrations().watchers;
        World {
            client,
            semaphore,
            _blocker: blocker,
            prefix: prefix.to_owned(),
            names,
            hold,
            watches,
        }
    }

    fn name(&self, n: u64) -> String {
        format!("{}n{}", self.prefix, n % self.names as u64)
    }

    /// Read-write locks are another type of key: a pool of names of their own.
    fn rw_name(&self, n: u64) -> String {
        format!("{}rw{}", self.prefix, n % self.names as u64)
    }

    fn held(&self, guard: Option<LockGuard>) -> Result<(), Error> {
        if let Some(guard) = guard {
            std::thread::sleep(self.hold);
            drop(guard);
        }
        Ok(())
    }

    /// One operation of `kind`; `seed` picks the names (and the mix's kind).
    pub fn op(&self, kind: Kind, seed: u64) -> Result<(), Error> {
        let c = &self.client;
        match kind {
            Kind::Mutex => self.held(c.try_lock_for(&self.name(seed), WAIT)?),
            Kind::Read => self.held(c.try_read_lock_for(&self.rw_name(seed), WAIT)?),
            Kind::Write => self.held(c.try_write_lock_for(&self.rw_name(seed), WAIT)?),
            Kind::Semaphore => self.held(self.semaphore.try_acquire_for(WAIT)?),
            Kind::Multi => {
                // Two distinct names of the pool, in either order.
                let a = seed % self.names as u64;
                let b = (a + 1 + seed / 7 % (self.names as u64 - 1)) % self.names as u64;
                let keys = [self.name(a), self.name(b)];
                if let Some(guard) = c.try_lock_all_for(&keys, WAIT)? {
                    std::thread::sleep(self.hold);
                    drop(guard);
                }
                Ok(())
            }
            Kind::Cancel => {
                let cancel = CancelToken::new();
                let canceller = {
                    let cancel = cancel.clone();
                    std::thread::spawn(move || {
                        std::thread::sleep(Duration::from_millis(5));
                        cancel.cancel();
                    })
                };
                let result = c
                    .options(&format!("{}blocked", self.prefix))
                    .wait(Duration::from_secs(5))
                    .cancel(cancel)
                    .acquire();
                canceller.join().expect("the canceller");
                match result {
                    Err(Error::Cancelled { .. }) => Ok(()),
                    Err(e) => Err(e),
                    Ok(_) => panic!("the blocked lock was acquired"),
                }
            }
            Kind::Handoff => {
                if let Some(guard) = c.try_lock_for(&self.name(seed), WAIT)? {
                    let handle = guard.into_handle();
                    match c.resume(&handle) {
                        Ok(resumed) => {
                            std::thread::sleep(self.hold);
                            drop(resumed);
                        }
                        // Expired meanwhile (a thread starved for a whole TTL on a loaded
                        // machine) and maybe taken by another: what the soak measures is memory.
                        Err(e) if !e.is_connection_error() => {}
                        Err(e) => return Err(e),
                    }
                }
                Ok(())
            }
            Kind::Loss => {
                let name = self.name(seed);
                if let Some(guard) = c.try_lock_for(&name, WAIT)? {
                    // Long enough to be watched (loss notification), then broken.
                    std::thread::sleep(self.hold + Duration::from_millis(1));
                    c.force_release(&name)?;
                    std::thread::sleep(self.hold);
                    drop(guard);
                }
                Ok(())
            }
            Kind::Mix => {
                let kinds = &Kind::ALL[..Kind::ALL.len() - 1];
                self.op(kinds[(seed % kinds.len() as u64) as usize], seed / 8)
            }
        }
    }
}

/// One round: `threads` threads run `kind` for `length`; the operations done.
pub fn round(world: &Arc<World>, kind: Kind, threads: usize, length: Duration) -> u64 {
    let stop = Arc::new(AtomicBool::new(false));
    let done = Arc::new(AtomicU64::new(0));
    let workers: Vec<_> = (0..threads)
        .map(|t| {
            let (world, stop, done) = (Arc::clone(world), Arc::clone(&stop), Arc::clone(&done));
            std::thread::spawn(move || {
                let mut seed = (t as u64) * 1_000_003;
                while !stop.load(Ordering::Relaxed) {
                    seed = seed
                        .wrapping_mul(6_364_136_223_846_793_005)
                        .wrapping_add(1_442_695_040_888_963_407);
                    if let Err(e) = world.op(kind, seed >> 17) {
                        panic!("{}: {e}", kind.name());
                    }
                    done.fetch_add(1, Ordering::Relaxed);
                }
            })
        })
        .collect();
    std::thread::sleep(length);
    stop.store(true, Ordering::Relaxed);
    for w in workers {
        w.join().expect("a soak thread panicked");
    }
    done.load(Ordering::Relaxed)
}

impl World {
    /// The blocker's watches: 1 where the server notifies, else 0.
    pub fn watches(&self) -> usize {
        self.watches
    }

    /// Whether `r` is a quiet client's: nothing registered but the hold of the lock the
    /// cancelled waits wait for (and its watch, where the server notifies).
    pub fn quiet(&self, r: Registrations) -> bool {
        r.held == 1 && r.watchers == self.watches && r.waiting_groups == 0 && r.waiting_threads == 0
    }
}

/// Waits until the client is quiet ([`World::quiet`]) and the live heap no longer shrinks (a renewal
/// thread lets go of a released lease when it next looks, up to a third of the TTL later),
/// for at most `within`. The live heap then, and what was registered.
pub fn settle(world: &World, within: Duration) -> (i64, Registrations) {
    let client = &world.client;
    let deadline = Instant::now() + within;
    while !world.quiet(client.registrations()) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(10));
    }
    // Shrinking stops: no new low for 400 ms.
    let mut low = live_bytes();
    let mut since = Instant::now();
    while since.elapsed() < Duration::from_millis(400) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
        let now = live_bytes();
        if now < low {
            low = now;
            since = Instant::now();
        }
    }
    (live_bytes().min(low), client.registrations())
}

/// What a soak of one kind measured.
#[derive(Debug, Clone)]
pub struct Measured {
    pub kind: Kind,
    /// The settled live heap after the warm-up.
    pub base: i64,
    /// What was registered after the warm-up.
    pub base_registrations: Registrations,
    /// Per round after the warm-up: operations, the settled live heap after it, the process's
    /// threads then, and what the client had registered.
    pub rounds: Vec<(u64, i64, usize, Registrations)>,
    /// Allocations per operation after the warm-up.
    pub allocs_per_op: f64,
}

impl Measured {
    /// Operations after the warm-up.
    pub fn ops(&self) -> u64 {
        self.rounds.iter().map(|r| r.0).sum()
    }

    /// Whether the client of `world` was quiet after the warm-up and after every round.
    pub fn always_quiet(&self, world: &World) -> bool {
        world.quiet(self.base_registrations) && self.rounds.iter().all(|r| world.quiet(r.3))
    }

    /// What the client still had registered at the end.
    pub fn left(&self) -> Registrations {
        self.rounds.last().map_or(self.base_registrations, |r| r.3)
    }

    /// Live heap growth after the warm-up, per 1,000 operations.
    pub fn growth_per_1000(&self) -> f64 {
        let last = self.rounds.last().map_or(self.base, |r| r.1);
        (last - self.base) as f64 * 1000.0 / self.ops().max(1) as f64
    }

    /// Live heap growth per 1,000 operations from the lowest settled heap of the first half
    /// (the warm-up's included) to the lowest of the second: a leak raises every settled heap
    /// in proportion to the operations, while what a loaded machine leaves in flight at a
    /// settling (a connection's larger buffer, a renewal out) moves single readings either way.
    pub fn low_growth_per_1000(&self) -> f64 {
        let heaps: Vec<i64> = std::iter::once(self.base)
            .chain(self.rounds.iter().map(|r| r.1))
            .collect();
        let half = heaps.len() / 2;
        let first = heaps[..half].iter().min().copied().unwrap_or(self.base);
        let last = heaps[half..].iter().min().copied().unwrap_or(self.base);
        (last - first) as f64 * 1000.0 / self.ops().max(1) as f64
    }

    /// Live heap growth per 1,000 operations over the rounds that opened no connection and
    /// started no thread, and how many such rounds there were. A leak grows in every round, in
    /// proportion to its operations; a pooled connection more, or a renewal thread more for a
    /// new peak of locks held at once, is bounded by the pools and the threads sharing the
    /// client, and is what a short warm-up still adds.
    pub fn steady_growth_per_1000(&self) -> (f64, usize) {
        let (mut before, mut grown, mut ops, mut rounds) = (self.base, 0, 0, 0);
        let (mut threads, mut conns) = (usize::MAX, usize::MAX);
        if let Some(first) = self.rounds.first() {
            (threads, conns) = (first.2, first.3.pooled_connections);
        }
        for &(n, heap, t, r) in &self.rounds {
            if t <= threads && r.pooled_connections <= conns {
                grown += heap - before;
                ops += n;
                rounds += 1;
            }
            (before, threads, conns) = (heap, t.max(threads), r.pooled_connections.max(conns));
        }
        (grown as f64 * 1000.0 / ops.max(1) as f64, rounds)
    }
}

/// `warmups` rounds, then `rounds` rounds, each of `length`, the client settled after each.
///
/// The warm-up rounds run twice as many threads as the measured ones. What a client keeps for
/// its peak load is bounded by the threads sharing it, not by the operations: a renewal thread
/// per lock held at once, a pooled connection per request in flight, the capacity of its maps
/// of waiters, watches and timers. Twice the threads take each of those past any peak the
/// measured rounds reach (by chance, late, with a short warm-up of the same load), so what
/// grows after the warm-up grows with the operations: a leak.
pub fn measure(
    world: &Arc<World>,
    kind: Kind,
    threads: usize,
    (warmups, rounds): (usize, usize),
    length: Duration,
) -> Measured {
    /// How long a client may take to become quiet after a round (a cancelled wait's leave, a
    /// release in flight): far more than it needs, far less than a stale entry's lifetime.
    const SETTLE: Duration = Duration::from_secs(5);
    for _ in 0..warmups {
        round(world, kind, threads * 2, length);
    }
    // Allocated before the first reading: the measurement's own memory is not measured.
    let readings = Vec::with_capacity(rounds);
    let (base, base_registrations) = settle(world, SETTLE);
    let allocs = allocations();
    let mut measured = Measured {
        kind,
        base,
        base_registrations,
        rounds: readings,
        allocs_per_op: 0.0,
    };
    for _ in 0..rounds {
        let ops = round(world, kind, threads, length);
        let (heap, registrations) = settle(world, SETTLE);
        measured
            .rounds
            .push((ops, heap, thread_names().len(), registrations));
    }
    measured.allocs_per_op = (allocations() - allocs) as f64 / measured.ops().max(1) as f64;
    measured
}
