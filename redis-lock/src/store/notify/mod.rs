//! Loss notification for one store: the server tells this client within a round trip when
//! anybody else changes a key it holds (Redis's client-side tracking), instead of the client
//! finding out at its next renewal.
//!
//! Two connections of the client's own per store, opened when the first lock held here asks
//! to be watched:
//!
//! - the **listener**, subscribed to `__redis__:invalidate`, read by a thread of its own
//!   (`redis-lock-notify`), which hands each invalidated key to the leases watching it;
//! - the **tracked connection**, `CLIENT TRACKING ON REDIRECT <listener> NOLOOP`: the keys it
//!   reads are tracked, and the watchdogs' renewals (combined, `combine.rs`) and the leases'
//!   ownership checks go out on it, so a lock's own renewals never come back as
//!   invalidations (`NOLOOP`) and every renewal and check reads the key again, which keeps it
//!   tracked (an invalidation is sent once per read).
//!
//! A lease registers as a [`Watcher`] of its lock key and reads it once on the tracked
//! connection (the ownership check); from then on a change by anybody else (a release through
//! a shared handle, `force_release`, `DEL`, a takeover after expiry, an eviction) reaches
//! [`Watcher::changed`], and the lease checks its ownership again. A release unregisters first,
//! so the invalidation its own release causes finds nobody.
//!
//! **A full tracking table.** A server whose tracking table is full (`tracking-table-max-keys`)
//! forgets a tracked key to make room for each new one and announces it as a change. Every
//! watcher so told checks, which tracks its key again and pushes another out: the checks run
//! at the pace of the server's other commands. Worse, a key forgotten while the tracked
//! connection's own command runs is not announced at all (`NOLOOP`), so keys fall out of
//! tracking silently. A third connection, the **canary's** (tracking without `NOLOOP`,
//! redirected to the listener), therefore reads a key nobody writes
//! (the first watched key's name with `:notify-canary`) and sends nothing else: its
//! invalidation can only be an eviction, and is always announced. Then notification is
//! **evicting**: [`LossDetection::Renewal`] is reported, renewals and checks go out on pooled
//! connections, invalidations of watched keys are not passed on (the renewals find losses),
//! and after a pause (1 s, doubling up to 30 s while it lasts) the client **probes**: it reads
//! the canary again and has every watcher check on the tracked connection; if the canary is
//! not evicted for a second, notification is on again (`Notified`), else evicting again. The
//! canary's connection closing counts as the tracked connection's (the listener looks at it
//! at least every `LISTEN_SLICE`).
//!
//! When either connection breaks (a restart, a failover: on a sentinel master a connection of
//! a former epoch counts as broken), both are opened again and every watcher is told to check
//! (the keys are no longer tracked, and whatever happened meanwhile was not announced). Where
//! the server refuses tracking (an ACL without `CLIENT` or `SUBSCRIBE`, a server without
//! tracking), or the connection is not one of ours (TLS, RESP3, an application's pool),
//! notification is off for this store: the watchdog's renewals stay the only detector, and the
//! client says so once (an event, and [`LossDetection`]).

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Weak};
use std::time::Duration;

use parking_lot::{Mutex, MutexGuard};
use redis::{ConnectionLike, RedisResult, Value};

use super::connection::{Conn, Manager};
use super::plain::Closer;
use crate::wire::tracking::{self, Message};

mod eviction;

use eviction::{EVICTING_FIRST, Eviction};

/// How long the listener waits for a message before it looks whether its client is gone or
/// its master moved.
const LISTEN_SLICE: Duration = Duration::from_millis(500);

/// Waits between attempts to reconnect a broken listener (doubling up to the second).
const RECONNECT_FIRST: Duration = Duration::from_millis(20);
const RECONNECT_MAX: Duration = Duration::from_secs(1);

/// Told when the key it watches was changed by somebody else (or may have been: the
/// notification connections were reopened).
pub(crate) trait Watcher: Send + Sync {
    fn changed(&self);
}

/// How this client learns that a lock it holds was changed by somebody else.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum LossDetection {
    /// Not known yet: no lock was held long enough to be watched.
    NotStarted,
    /// The server tells the client at once (client-side tracking): a lock changed by somebody
    /// else is known lost within a round trip of the change.
    Notified,
    /// The server refuses tracking (or the connection cannot receive it: TLS, RESP3,
    /// an application's pool), or for now its tracking table is full
    /// (`tracking-table-max-keys`): it forgets tracked keys to make room, and a forgotten key's
    /// change is not announced. A loss is found at the lock's next renewal (a third of its
    /// TTL) or by [`check_held`](crate::LockGuard::check_held). A full table is probed again
    /// after a pause (1 s, doubling up to 30 s while it lasts); once it has room this says
    /// [`Notified`](Self::Notified) again.
    Renewal,
    /// Notification was interrupted (a notification connection closed: a restart, a
    /// failover, a server or proxy `timeout`, an operator's `CLIENT KILL`) and is being set up
    /// again; once it is, every held lock is checked, which finds a loss that happened
    /// meanwhile. Until then a loss is found by that check, or at the next renewal.
    Reconnecting,
}

/// One watcher of a key: its id (the lease's) and itself.
type Watching = (u64, Weak<dyn Watcher>);

/// Where notification stands for one store.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    NotStarted,
    /// The thread is connecting for the first time.
    Starting,
    /// Listening, the held keys tracked.
    On,
    /// Listening, but the server's tracking table is full: the canary was evicted. Renewals
    /// and checks go out on pooled connections, invalidations are not passed on.
    Evicting,
    /// After a pause in `Evicting`: the canary and the watched keys are read again on the
    /// tracked connection; on again if the canary stays tracked for `PROBE_WINDOW`.
    Probing,
    /// A connection closed (the listener, or the tracked one): the keys are not tracked until
    /// both are open again and every watcher has read its key.
    Blind,
    Off,
}

/// The notification of one store (see the module's documentation).
pub(crate) struct Notifier {
    shared: Arc<Shared>,
}

struct Shared {
    /// What opens the three connections; `None` where they cannot be ours.
    manager: Option<Manager>,
    label: String,
    requests: Arc<AtomicU64>,
    phase: Mutex<Phase>,
    /// Lock key → its watchers (lease id, lease).
    watchers: Mutex<HashMap<String, Vec<Watching>>>,
    /// The tracked connection, while the listener it redirects to is subscribed.
    tracked: Mutex<Option<Conn>>,
    /// The tracked connection's socket as the listener watches it for a hang-up: the server
    /// drops a connection's tracking with it, and nothing would be announced until the next
    /// request on it. Replaced with the connection (`put_tracked`).
    hangup: Mutex<Option<Closer>>,
    /// The listener's id, which a reopened tracked connection redirects to (0: none).
    listener: AtomicU64,
    /// The client is gone: the listener stops.
    closed: AtomicBool,
    /// Ends the listener's blocked read when the client is dropped, so its connections do not
    /// outlive the client.
    closer: Mutex<Option<Closer>>,
    /// The canary's key (see the module's documentation), from the first watched key.
    canary: Mutex<Option<String>>,
    /// The connection that reads the canary, open while the tracked connection is.
    canary_conn: Mutex<Option<eviction::CanaryConn>>,
    /// The timing of a full tracking table's pause and probe.
    eviction: Mutex<Eviction>,
}

impl std::fmt::Debug for Notifier {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Notifier")
            .field("phase", &*self.shared.phase.lock())
            .finish_non_exhaustive()
    }
}

impl Drop for Notifier {
    fn drop(&mut self) {
        self.shared.closed.store(true, Ordering::Release);
        self.shared
            .put_tracked(&mut self.shared.tracked.lock(), None);
        if let Some(closer) = self.shared.closer.lock().take() {
            closer.close();
        }
    }
}

impl Notifier {
    /// `manager`: what opens this store's own connections, `None` where notification cannot
    /// work (see the module's documentation).
    pub(crate) fn new(manager: Option<Manager>, label: String, requests: Arc<AtomicU64>) -> Self {
        let phase = if manager.is_some() {
            Phase::NotStarted
        } else {
            Phase::Off
        };
        Notifier {
            shared: Arc::new(Shared {
                manager,
                label,
                requests,
                phase: Mutex::new(phase),
                watchers: Mutex::new(HashMap::new()),
                tracked: Mutex::new(None),
                hangup: Mutex::new(None),
                listener: AtomicU64::new(0),
                closed: AtomicBool::new(false),
                closer: Mutex::new(None),
                canary: Mutex::new(None),
                canary_conn: Mutex::new(None),
                eviction: Mutex::new(Eviction {
                    pause: EVICTING_FIRST,
                    next: None,
                    canary_read: None,
                    room_at: None,
                }),
            }),
        }
    }

    /// What this store's notification is, for [`LossDetection`].
    pub(crate) fn detection(&self) -> LossDetection {
        match *self.shared.phase.lock() {
            Phase::NotStarted | Phase::Starting if self.shared.manager.is_some() => {
                LossDetection::NotStarted
            }
            Phase::On => LossDetection::Notified,
            Phase::Blind => LossDetection::Reconnecting,
            // A full tracking table: the renewals find losses (`Renewal`'s documentation).
            Phase::Evicting | Phase::Probing => LossDetection::Renewal,
            _ => LossDetection::Renewal,
        }
    }

    /// Registers `watcher` (id `id`) for `key`, starting the listener on first use. `None`
    /// when notification is off for this store (nothing registered); `Some(false)` while the
    /// listener is still connecting: the watcher is told to check once it listens (its key
    /// could not be tracked before), so a check now would be one request for nothing.
    pub(crate) fn watch(&self, key: &str, id: u64, watcher: Weak<dyn Watcher>) -> Option<bool> {
        {
            // Before the listener starts: the tracked connection reads the canary when it opens.
            let mut canary = self.shared.canary.lock();
            if canary.is_none() {
                *canary = Some(tracking::canary(key));
            }
        }
        // Under the phase's lock: a listener that starts listening meanwhile tells every
        // watcher registered before it did, this one among them.
        let phase = self.start()?;
        let mut watchers = self.shared.watchers.lock();
        let list = watchers.entry(key.to_owned()).or_default();
        if !list.iter().any(|(i, _)| *i == id) {
            list.push((id, watcher));
        }
        Some(*phase != Phase::Starting)
    }

    /// Watchers registered now (every key's).
    #[cfg(feature = "testing")]
    pub(crate) fn watching(&self) -> usize {
        self.shared.watchers.lock().values().map(Vec::len).sum()
    }

    /// Forgets watcher `id` of `key` (a release, before it is sent; a loss).
    pub(crate) fn unwatch(&self, key: &str, id: u64) {
        let mut watchers = self.shared.watchers.lock();
        if let Some(list) = watchers.get_mut(key) {
            list.retain(|(i, _)| *i != id);
            if list.is_empty() {
                watchers.remove(key);
            }
        }
    }

    /// Whether the server notifies (or did until a connection closed, and will again once
    /// it is open; or is being probed after its tracking table was full): a lock's own
    /// renewals go out on the tracked connection. Not while the table is full (`Evicting`):
    /// each key read there would push another out.
    pub(crate) fn notifies(&self) -> bool {
        matches!(
            *self.shared.phase.lock(),
            Phase::On | Phase::Blind | Phase::Probing
        )
    }

    /// The tracked connection, if notification is on and it is open (opened again here after
    /// a break, when the listener is up); `None` sends on a pooled connection instead.
    pub(crate) fn tracked(&self) -> Option<MutexGuard<'_, Option<Conn>>> {
        if !self.notifies() {
            return None;
        }
        let mut tracked = self.shared.tracked.lock();
        if tracked.as_ref().is_some_and(|c| !c.is_open()) {
            self.shared.put_tracked(&mut tracked, None);
        }
        if tracked.is_none() {
            drop(tracked);
            self.shared.reopen_tracked();
            tracked = self.shared.tracked.lock();
            tracked.as_ref()?;
        }
        Some(tracked)
    }

    /// Runs `f` with the tracked connection (see [`tracked`](Self::tracked)), counting `n`
    /// requests; a connection that broke meanwhile is dropped. `None` when there is none.
    pub(crate) fn on_tracked<T>(
        &self,
        n: usize,
        f: impl FnOnce(&mut dyn ConnectionLike) -> T,
    ) -> Option<T> {
        let mut tracked = self.tracked()?;
        let conn = tracked.as_mut()?;
        self.count(n);
        let answer = f(conn);
        if !conn.is_open() {
            self.shared.put_tracked(&mut tracked, None);
        }
        Some(answer)
    }

    /// Counts a request sent on the tracked connection.
    pub(crate) fn count(&self, n: usize) {
        self.shared
            .requests
            .fetch_add(u64::try_from(n).unwrap_or(u64::MAX), Ordering::Relaxed);
    }

    /// Starts the listener's thread on first use; `None` when notification is off, else the
    /// phase, locked. The thread connects: nobody waits for it (a server that does not answer
    /// would hold the watchdog that asked for its connect timeout), and the watchers
    /// registered meanwhile are told to check once it listens.
    fn start(&self) -> Option<MutexGuard<'_, Phase>> {
        let mut phase = self.shared.phase.lock();
        match *phase {
            Phase::On | Phase::Blind | Phase::Starting | Phase::Evicting | Phase::Probing => {
                return Some(phase);
            }
            Phase::Off => return None,
            Phase::NotStarted => {}
        }
        let shared = Arc::clone(&self.shared);
        let spawned = std::thread::Builder::new()
            .name("redis-lock-notify".into())
            .stack_size(128 * 1024)
            .spawn(move || shared.listen());
        match spawned {
            Ok(_) => {
                *phase = Phase::Starting;
                Some(phase)
            }
            Err(error) => {
                tracing::warn!(target: "redis_lock", %error, "starting the notification thread failed");
                None
            }
        }
    }
}

/// Why the connections could not be set up.
enum Refusal {
    /// The server answered with an error: it will not track for us.
    Refused(redis::RedisError),
    /// It could not be reached (or the connection broke): try again later.
    Down(redis::RedisError),
}

impl Shared {
    /// Opens the listener (subscribed) and the tracked connection redirecting to it. Their
    /// setup (`CLIENT ID`, `SUBSCRIBE`, `CLIENT TRACKING`) is part of opening them, as a
    /// connection's handshake is, and is not counted as requests.
    fn connect(&self) -> Result<Conn, Refusal> {
        let manager = self
            .manager
            .as_ref()
            .ok_or_else(|| Refusal::Refused(unsupported()))?;
        let mut listener = Conn::open_now(manager).map_err(Refusal::Down)?;
        if !listener.is_plain() {
            return Err(Refusal::Refused(unsupported()));
        }
        let id: u64 = server_answer(tracking::client_id().query(&mut listener))?;
        let confirmed: Value = server_answer(listener.req_command(&tracking::subscribe()))?;
        if tracking::decode(&confirmed) != Message::Other {
            return Err(Refusal::Down(failed("an unexpected answer to SUBSCRIBE")));
        }
        *self.closer.lock() = listener.closer();
        if self.closed.load(Ordering::Acquire) {
            // Dropped while connecting: nobody will close it.
            return Err(Refusal::Down(failed("the client was dropped")));
        }
        self.listener.store(id, Ordering::Release);
        let tracked = self.open_tracked(id)?;
        self.put_tracked(&mut self.tracked.lock(), Some(tracked));
        Ok(listener)
    }

    /// Sets (or clears) the tracked connection and the socket the listener watches for its
    /// hang-up; cleared, the keys are no longer tracked: blind until it is open again.
    fn put_tracked(&self, slot: &mut Option<Conn>, conn: Option<Conn>) {
        *self.hangup.lock() = conn.as_ref().and_then(Conn::closer);
        if conn.is_none() {
            *self.canary_conn.lock() = None;
        }
        if conn.is_none() && slot.is_some() {
            let mut phase = self.phase.lock();
            if matches!(*phase, Phase::On | Phase::Evicting | Phase::Probing) {
                *phase = Phase::Blind;
            }
        }
        *slot = conn;
    }

    /// Opens the tracked connection again (it closed), if the listener is up and it is not
    /// open yet; then every watcher reads its key again, which tracks it again and finds a
    /// change made meanwhile. Notified again from then on.
    fn reopen_tracked(&self) {
        let listener = self.listener.load(Ordering::Acquire);
        if listener == 0 || self.closed.load(Ordering::Acquire) {
            return;
        }
        {
            let mut tracked = self.tracked.lock();
            if tracked.is_some() {
                return;
            }
            match self.open_tracked(listener) {
                Ok(conn) => self.put_tracked(&mut tracked, Some(conn)),
                Err(_) => return,
            }
            let mut phase = self.phase.lock();
            if *phase == Phase::Blind {
                *phase = Phase::On;
            }
        }
        // Not under `tracked`: the watchers send on it.
        self.tell_all();
    }

    /// The listener saw a tracked connection hung up: if it is the current one (the poll may
    /// have watched one replaced meanwhile), it is dropped and opened again at once.
    fn tracked_hung_up(&self) {
        {
            let mut tracked = self.tracked.lock();
            let gone = self.hangup.lock().as_ref().is_some_and(Closer::peer_closed);
            if !gone {
                return;
            }
            tracing::debug!(target: "redis_lock", server = %self.label, "the tracked connection was closed; opening it again");
            self.put_tracked(&mut tracked, None);
        }
        self.reopen_tracked();
    }

    /// A tracked connection redirecting to listener `id`, and the canary's connection beside
    /// it (`open_canary`).
    fn open_tracked(&self, id: u64) -> Result<Conn, Refusal> {
        let manager = self
            .manager
            .as_ref()
            .ok_or_else(|| Refusal::Refused(unsupported()))?;
        let mut conn = Conn::open_now(manager).map_err(Refusal::Down)?;
        server_answer::<()>(tracking::track(id).query(&mut conn))?;
        self.open_canary(manager, id)?;
        Ok(conn)
    }

    /// The listener's thread: connects (again after a break, then every watcher checks, since
    /// changes meanwhile went unannounced), hands invalidations to the watchers, stops when
    /// the client is gone or the server refuses.
    fn listen(self: Arc<Self>) {
        let mut backoff = RECONNECT_FIRST;
        loop {
            let mut listener = loop {
                if self.closed.load(Ordering::Acquire) {
                    return;
                }
                match self.connect() {
                    Ok(listener) => break listener,
                    Err(Refusal::Refused(error)) => {
                        *self.phase.lock() = Phase::Off;
                        self.watchers.lock().clear();
                        tracing::warn!(target: "redis_lock", server = %self.label, %error,
                            "the server refuses client-side tracking: a lock changed by \
                             somebody else is noticed at its next renewal, not at once");
                        return;
                    }
                    Err(Refusal::Down(error)) => {
                        tracing::debug!(target: "redis_lock", server = %self.label, %error, "loss notification connecting");
                        std::thread::sleep(backoff);
                        backoff = (backoff * 2).min(RECONNECT_MAX);
                    }
                }
            };
            backoff = RECONNECT_FIRST;
            *self.phase.lock() = Phase::On;
            tracing::debug!(target: "redis_lock", server = %self.label, "loss notification listening");
            self.tell_all();
            while !self.closed.load(Ordering::Acquire) {
                let slice = self
                    .eviction_timer()
                    .map_or(LISTEN_SLICE, |d| d.min(LISTEN_SLICE));
                let seen = {
                    let hangup = self.hangup.lock();
                    // The watched socket stays open while `hangup` holds it; a replaced one
                    // is looked at again (`tracked_hung_up`) before anything is dropped.
                    let other = hangup.as_ref().map(Closer::try_clone_for_poll);
                    drop(hangup);
                    listener.wait(other.as_ref().and_then(|o| o.as_ref()), slice)
                };
                let seen = match seen {
                    Ok(seen) => seen,
                    Err(_) => break,
                };
                if seen.hung_up {
                    self.tracked_hung_up();
                }
                self.canary_hung_up();
                if seen.message {
                    match listener.receive(LISTEN_SLICE) {
                        Ok(Some(message)) => self.dispatch(&tracking::decode(&message)),
                        Ok(None) if listener.is_open() => {}
                        Ok(None) | Err(_) => break,
                    }
                } else if !listener.is_open() {
                    // A master that moved (a former epoch) counts as a break.
                    break;
                }
            }
            self.listener.store(0, Ordering::Release);
            {
                let mut phase = self.phase.lock();
                if matches!(*phase, Phase::On | Phase::Evicting | Phase::Probing) {
                    *phase = Phase::Blind;
                }
            }
            self.put_tracked(&mut self.tracked.lock(), None);
            *self.closer.lock() = None;
        }
    }

    /// Tells the watchers of the keys in `message`. A watcher whose lease is gone is dropped
    /// from the map here (a lease unregisters itself on every path; this keeps a missed one
    /// from pinning its memory).
    fn dispatch(&self, message: &Message) {
        if let Message::Keys(keys) = message {
            let canary = self.canary.lock().clone();
            if canary.is_some_and(|c| keys.contains(&c)) {
                self.canary_evicted();
            }
        }
        let phase = *self.phase.lock();
        if phase == Phase::Evicting && message != &Message::All {
            // The table is full: an invalidation is most likely an eviction, and the check it
            // would cause would push another key out. The renewals find losses.
            return;
        }
        let mut told: Vec<Arc<dyn Watcher>> = Vec::new();
        {
            let mut watchers = self.watchers.lock();
            let mut collect = |list: &mut Vec<Watching>| {
                list.retain(|(_, w)| match w.upgrade() {
                    Some(watcher) => {
                        told.push(watcher);
                        true
                    }
                    None => false,
                });
            };
            match message {
                Message::Keys(keys) => {
                    for key in keys {
                        if let Some(list) = watchers.get_mut(key) {
                            collect(list);
                            if list.is_empty() {
                                watchers.remove(key);
                            }
                        }
                    }
                }
                Message::All => {
                    watchers.values_mut().for_each(&mut collect);
                    watchers.retain(|_, list| !list.is_empty());
                }
                Message::Other => {}
            }
        }
        for watcher in told {
            watcher.changed();
        }
    }

    /// Every watcher checks (the keys may have changed unannounced).
    fn tell_all(&self) {
        self.dispatch(&Message::All);
    }
}

fn server_answer<T>(r: RedisResult<T>) -> Result<T, Refusal> {
    r.map_err(|e| {
        if crate::error::is_network_error(&e) {
            Refusal::Down(e)
        } else {
            Refusal::Refused(e)
        }
    })
}

fn unsupported() -> redis::RedisError {
    redis::RedisError::from((
        redis::ErrorKind::Client,
        "loss notification needs a plain (TCP or Unix, RESP2) connection of the client's own",
    ))
}

fn failed(what: &'static str) -> redis::RedisError {
    redis::RedisError::from((redis::ErrorKind::Client, what))
}

fn failed_with(what: &'static str, error: &redis::RedisError) -> redis::RedisError {
    redis::RedisError::from((redis::ErrorKind::Client, what, error.to_string()))
}

/// Loss notification on a Redis Cluster: a [`Notifier`] per master (the listener and the
/// tracked connection must be on the server that holds the key), opened when the first lock
/// on it is watched; a key's master from the slot map (`CLUSTER SLOTS`), read again when a
/// request on a tracked connection fails (a slot that moved answers `MOVED`).
#[cfg(feature = "cluster")]
pub(crate) struct Nodes {
    /// A node's address, credentials and database: each master's connections are this with
    /// the master's address.
    base: redis::ConnectionInfo,
    connect_timeout: Duration,
    io_timeout: Duration,
    requests: Arc<AtomicU64>,
    /// `(first slot, last slot, host, port)` per range; empty until first needed.
    map: Mutex<Vec<(u16, u16, String, u16)>>,
    by_node: Mutex<HashMap<(String, u16), Arc<Notifier>>>,
}

#[cfg(feature = "cluster")]
impl std::fmt::Debug for Nodes {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Nodes")
            .field("masters", &self.by_node.lock().len())
            .finish_non_exhaustive()
    }
}

#[cfg(feature = "cluster")]
impl Nodes {
    pub(crate) fn new(
        base: redis::ConnectionInfo,
        connect_timeout: Duration,
        io_timeout: Duration,
        requests: Arc<AtomicU64>,
    ) -> Nodes {
        Nodes {
            base,
            connect_timeout,
            io_timeout,
            requests,
            map: Mutex::new(Vec::new()),
            by_node: Mutex::new(HashMap::new()),
        }
    }

    /// The notifier of the master serving `slot`; `read_map` reads the slot map when it is not
    /// known yet. `None` when no master is known for the slot.
    pub(crate) fn notifier(
        &self,
        slot: u16,
        read_map: impl FnOnce() -> Option<Vec<(u16, u16, String, u16)>>,
    ) -> Option<Arc<Notifier>> {
        let node = {
            let mut map = self.map.lock();
            if map.is_empty() {
                *map = read_map()?;
            }
            map.iter()
                .find(|(first, last, _, _)| (*first..=*last).contains(&slot))
                .map(|(_, _, host, port)| (host.clone(), *port))?
        };
        let mut by_node = self.by_node.lock();
        let notifier = by_node.entry(node.clone()).or_insert_with(|| {
            let (host, port) = node;
            let manager = match self.base.addr() {
                redis::ConnectionAddr::Tcp(..) => {
                    let info = self
                        .base
                        .clone()
                        .set_addr(redis::ConnectionAddr::Tcp(host.clone(), port));
                    redis::Client::open(info).ok().map(|client| Manager {
                        target: super::connection::Target::Server(client),
                        connect_timeout: self.connect_timeout,
                        io_timeout: self.io_timeout,
                    })
                }
                // TLS: not a connection of ours (see the module's documentation).
                _ => None,
            };
            Arc::new(Notifier::new(
                manager,
                format!("{host}:{port}"),
                Arc::clone(&self.requests),
            ))
        });
        Some(Arc::clone(notifier))
    }

    /// The slot map is read again at the next use (a slot moved).
    pub(crate) fn forget_map(&self) {
        self.map.lock().clear();
    }

    /// Every master's notifier opened so far.
    pub(crate) fn all(&self) -> Vec<Arc<Notifier>> {
        self.by_node.lock().values().cloned().collect()
    }
}
