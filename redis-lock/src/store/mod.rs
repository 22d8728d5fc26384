//! Connections to one deployment (a server, a sentinel-managed master, or a Redis Cluster):
//! the r2d2 manager, sentinel discovery, the request counter, replica acknowledgement,
//! blocking waits on wake-up lists (`waiting.rs`: one connection per lock name waited on) and
//! loss notification (`notify.rs`, which tells watchers of a key, not what they hold). Knows
//! nothing of quorums or held locks.

pub(crate) mod combine;
pub(crate) mod connection;
pub(crate) mod direct;
pub(crate) mod notify;
pub(crate) mod plain;
pub(crate) mod sentinel;
pub(crate) mod timer;
pub(crate) mod waiting;

use std::sync::Arc;
use std::sync::atomic::AtomicU64;
use std::time::{Duration, Instant};

use crate::error::{Error, Result};
use crate::wire::{self, Grant, commands};
use connection::{CheckoutError, Manager, Pool, PooledConn};
use sentinel::{MoveJob, SentinelTarget};

/// How long a waiter whose wait failed (the store could not be asked) pauses before it
/// attempts again, so that it does not spin against a Redis that fails at once.
pub(crate) const FAILED_WAIT_PAUSE: Duration = Duration::from_millis(10);

/// Most connections one store opens for waiting: one per lock name waited on at once by this
/// client (`waiting.rs`).
pub(crate) const MAX_WAITING_CONNECTIONS: u32 = 4096;

/// When, after a blocking wait should have ended, its wake-up `PING`s go out: the server
/// starts the wait's clock when it reads the command (a little after we sent it) and counts
/// whole milliseconds, so the first may come a hair early; the second is then on time.
const WAKE_AFTER: [Duration; 2] = [Duration::from_millis(2), Duration::from_millis(12)];

/// How long the wake-up may wait for a pooled connection before it gives up.
const WAKE_CHECKOUT: Duration = Duration::from_millis(20);

/// Replica acknowledgement asked of an acquisition: `count` replicas within `timeout`,
/// fsynced to their append-only files when `fsync` is set.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Ack {
    pub(crate) count: u32,
    pub(crate) timeout: Duration,
    pub(crate) fsync: bool,
}

/// Timeouts a store applies to checkouts.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Timeouts {
    pub(crate) connect: Duration,
    pub(crate) pool: Duration,
}

/// One Redis deployment: the pool lock operations use, and the pool waiters block on.
pub(crate) struct Store {
    pub(crate) pool: Arc<Pool>,
    /// Waiters block in `BLPOP` on connections of their own, so that a crowd of waiters can
    /// never take the connections holders need to renew and release: one per lock name
    /// waited on (`waiting.rs`).
    pub(crate) waiters: r2d2::Pool<Manager>,
    /// The groups of threads waiting on one lock name each (`waiting.rs`).
    waiting: waiting::Hub,
    /// The store's address without credentials, for errors and logs.
    pub(crate) label: String,
    pub(crate) timeouts: Timeouts,
    /// Requests sent through this client (shared by all its stores and clones).
    pub(crate) requests: Arc<AtomicU64>,
    /// Which commands that not every supported server has this one has (`WAITAOF`,
    /// `DELIFEQ`), each learnt by its first use.
    pub(crate) caps: wire::commands::Capabilities,
    /// A Redis Cluster: one script may only name keys of one slot.
    pub(crate) cluster: bool,
    /// A sentinel-managed master, and how often the sentinels are asked where it is.
    sentinel: Option<(Arc<SentinelTarget>, Duration)>,
    /// The client's housekeeping thread, which also wakes the server when a blocking wait
    /// should end (see `wake_at`).
    timer: timer::Timer,
    /// The watchdogs' renewals, sent together (see `combine.rs`).
    combiner: combine::Combiner,
    /// Loss notification (see `notify.rs`); the combiner sends on its tracked connection.
    /// Not used on a Cluster, whose masters each have their own (`nodes`).
    pub(crate) notify: Arc<notify::Notifier>,
    /// A Cluster's loss notification, one per master.
    /// (Boxed: the settings it keeps are large, and most stores are not a Cluster.)
    #[cfg(feature = "cluster")]
    nodes: Option<Box<notify::Nodes>>,
}

impl std::fmt::Debug for Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Store")
            .field("at", &self.label)
            .field("pool", &self.pool)
            .finish_non_exhaustive()
    }
}

/// A connect's failure as an I/O error, its kind kept (refused, timed out), said once: a
/// `RedisError` that wraps an I/O error shows it twice in an error chain, as itself and as its
/// source.
fn io_cause(e: &redis::RedisError) -> std::io::Error {
    std::io::Error::new(io_kind(e), e.to_string())
}

/// The kind of the first I/O error in `e`'s source chain, `Other` when there is none. The
/// `redis` crate keeps a wrapped error as an `Arc<dyn Error + Send + Sync>` and gives that
/// `Arc` as the source, so a downcast of the source alone to `io::Error` never matches: the
/// `Arc`'s content is looked at too.
fn io_kind(e: &redis::RedisError) -> std::io::ErrorKind {
    type Shared = std::sync::Arc<dyn std::error::Error + Send + Sync>;
    let mut next = std::error::Error::source(e);
    while let Some(cause) = next {
        if let Some(io) = cause.downcast_ref::<std::io::Error>() {
            return io.kind();
        }
        if let Some(io) = cause
            .downcast_ref::<Shared>()
            .and_then(|shared| shared.downcast_ref::<std::io::Error>())
        {
            return io.kind();
        }
        next = cause.source();
    }
    std::io::ErrorKind::Other
}

/// How a wait on a wake-up list ended.
#[derive(Debug)]
pub(crate) enum Wake {
    /// We popped a grant: the lock is ours under its token.
    Grant(Grant),
    /// Woken without taking anything (a peek), or the wait timed out.
    Nothing,
    /// The store could not be asked.
    Failed,
}

impl Store {
    pub(crate) fn new(
        pool: Pool,
        waiters: r2d2::Pool<Manager>,
        label: String,
        timeouts: Timeouts,
        requests: Arc<AtomicU64>,
        timer: timer::Timer,
    ) -> Store {
        Store {
            cluster: false,
            sentinel: None,
            pool: Arc::new(pool),
            waiters,
            waiting: waiting::Hub::default(),
            label,
            timeouts,
            caps: wire::commands::Capabilities::default(),
            notify: Arc::new(notify::Notifier::new(
                None,
                String::new(),
                Arc::clone(&requests),
            )),
            #[cfg(feature = "cluster")]
            nodes: None,
            requests,
            timer,
            combiner: combine::Combiner::default(),
        }
    }

    /// A pooled connection: an idle one, else a new one this thread opens (a refusal fails at
    /// once, a server that does not answer within the connect timeout), else, with every
    /// connection in use, the first to come back within the pool timeout.
    pub(crate) fn conn(&self) -> Result<PooledConn> {
        let timeout = match &*self.pool {
            // An application's pool connects on r2d2's thread, and its `get_timeout` waits
            // out the whole timeout whatever happens there: with nothing open, the question
            // is whether Redis is reachable, and the connect timeout bounds it.
            Pool::External(_) if self.pool.state().connections == 0 => self.timeouts.connect,
            _ => self.timeouts.pool,
        };
        self.pool
            .get_timeout(timeout, &self.requests)
            .map_err(|e| self.checkout_error(e))
    }

    /// A failed checkout as the caller sees it. A server that refused the handshake (a wrong
    /// password) answered: that is its error, and retrying will not help.
    fn checkout_error(&self, e: CheckoutError) -> Error {
        match e {
            CheckoutError::Pool(e) => Error::Pool(e),
            CheckoutError::Connect(e) if connection::is_refused_by_server(&e) => Error::Redis(e),
            CheckoutError::Connect(e) => Error::Connect {
                server: self.label.clone(),
                source: io_cause(&e),
            },
        }
    }

    /// `WAIT` (or `WAITAOF`) on the connection that wrote the lock: it counts the replicas
    /// that have processed (or fsynced) everything this connection wrote. The reply may take
    /// the whole `timeout`, so the connection's reply timeout is raised for it. Returns how
    /// many replicas acknowledged.
    pub(crate) fn await_replicas(&self, conn: &mut PooledConn, ack: Ack) -> Result<u32> {
        if ack.fsync && self.caps.waitaof.may_try() {
            let cmd = commands::wait_replicas_fsynced(ack.count, ack.timeout);
            match conn.blocking_query::<(i64, i64)>(&cmd, ack.timeout) {
                Ok((_local, replicas)) => {
                    self.caps.waitaof.has();
                    return Ok(u32::try_from(replicas).unwrap_or(0));
                }
                Err(e) if commands::is_unknown_command(&e) => {
                    if self.caps.waitaof.lacks() {
                        tracing::warn!(
                            target: "redis_lock",
                            "the redis server has no WAITAOF (it needs redis 7.2); replica acknowledgement falls back to WAIT: replicas hold the lock in memory, not necessarily on disk"
                        );
                    }
                }
                Err(e) => return Err(e.into()),
            }
        }
        let cmd = commands::wait_replicas(ack.count, ack.timeout);
        let acked: i64 = conn.blocking_query(&cmd, ack.timeout)?;
        Ok(u32::try_from(acked).unwrap_or(0))
    }

    /// Makes sure the server serves the end of a blocking wait on time: Redis times out a
    /// blocked `BLPOP` at its event loop's next turn, which on an idle server comes up to
    /// 1/`hz` late (100 ms by default), so a waiter would take an expired lock that late. Any
    /// request wakes the loop: a `PING` sent at `at`, the wait's end (from the housekeeping thread,
    /// on a connection of the lock pool) ends it within a round trip. Cancelled when the wait
    /// ends earlier (a release woke it), so a handoff costs nothing extra.
    fn wake_at(&self, at: Duration) -> timer::TimerHandle {
        // Weak: a job not run yet must not keep a dropped client's connections open.
        let pool = Arc::downgrade(&self.pool);
        let requests = Arc::clone(&self.requests);
        self.timer.after(at, move || {
            // A busy pool means traffic, and traffic keeps the server's loop turning.
            if let Some(pool) = pool.upgrade()
                && let Ok(mut conn) = pool.get_timeout(WAKE_CHECKOUT, &requests)
            {
                let _ = commands::ping(&mut conn);
            }
        })
    }

    /// Lets this store notify losses through connections `manager` opens (our own plain
    /// connections; not for a Cluster or an application's pool, whose connections are not).
    pub(crate) fn notifying(mut self, manager: Manager) -> Store {
        self.notify = Arc::new(notify::Notifier::new(
            Some(manager),
            self.label.clone(),
            Arc::clone(&self.requests),
        ));
        self
    }

    /// Lets a Cluster store notify losses through connections of its own to each master,
    /// made like `base` (a node's URL) with the master's address.
    #[cfg(feature = "cluster")]
    pub(crate) fn notifying_nodes(
        mut self,
        base: redis::ConnectionInfo,
        io_timeout: Duration,
    ) -> Store {
        self.nodes = Some(Box::new(notify::Nodes::new(
            base,
            self.timeouts.connect,
            io_timeout,
            Arc::clone(&self.requests),
        )));
        self
    }

    /// The loss notification that serves `key`: the store's, or on a Cluster its master's.
    pub(crate) fn notifier(&self, key: &str) -> Option<Arc<notify::Notifier>> {
        if !self.cluster {
            return Some(Arc::clone(&self.notify));
        }
        #[cfg(feature = "cluster")]
        if let Some(nodes) = &self.nodes {
            return nodes.notifier(wire::keys::slot_of(key), || {
                let mut conn = self.conn().ok()?;
                commands::cluster_slot_map(&mut conn).ok()
            });
        }
        #[cfg(not(feature = "cluster"))]
        let _ = key;
        None
    }

    /// Every loss notification of this store (on a Cluster, each master's opened so far).
    pub(crate) fn notifiers(&self) -> Vec<Arc<notify::Notifier>> {
        #[cfg(feature = "cluster")]
        if let Some(nodes) = &self.nodes {
            return nodes.all();
        }
        vec![Arc::clone(&self.notify)]
    }

    /// `(watchers, waiting groups, waiting threads, pooled connections)` of this store now.
    #[cfg(feature = "testing")]
    pub(crate) fn registrations(&self) -> (usize, usize, usize, usize) {
        let watchers = self.notifiers().iter().map(|n| n.watching()).sum();
        let (groups, members) = self.waiting.waiting();
        let connections = self.pool.connections()
            + usize::try_from(self.waiters.state().connections).unwrap_or(usize::MAX);
        (watchers, groups, members, connections)
    }

    /// A request on a Cluster master's tracked connection failed: the slot may have moved.
    pub(crate) fn slots_moved(&self) {
        #[cfg(feature = "cluster")]
        if let Some(nodes) = &self.nodes {
            nodes.forget_map();
        }
    }

    /// Marks the store a sentinel-managed master, whose sentinels are asked every `every`.
    pub(crate) fn sentinel(mut self, target: Arc<SentinelTarget>, every: Duration) -> Store {
        self.sentinel = Some((target, every));
        self
    }

    /// On a sentinel master, how often the sentinels are asked, and the current epoch.
    fn sentinel_every(&self) -> Option<(Duration, u64)> {
        self.sentinel
            .as_ref()
            .map(|(target, every)| (*every, target.epoch()))
    }

    /// The sentinel epoch (how many times the master was seen to move), `None` when this
    /// store is not a sentinel-managed master.
    pub(crate) fn epoch(&self) -> Option<u64> {
        self.sentinel.as_ref().map(|(target, _)| target.epoch())
    }

    /// After a command failed in a way a failover explains: asks the sentinels where the
    /// master is now (connections to a former one are then dropped at checkout). `true` when
    /// the master moved since `epoch`; always `false` on a store without sentinels.
    pub(crate) fn relocate(&self, epoch: Option<u64>) -> bool {
        match (&self.sentinel, epoch) {
            (Some((target, _)), Some(epoch)) => target.check() != epoch,
            _ => false,
        }
    }

    /// Runs `job` once the sentinels name another master than in `epoch`, unless `until` has
    /// passed (see `SentinelTarget::after_move`). `false` (and nothing kept) on a store
    /// without sentinels.
    pub(crate) fn after_move(&self, epoch: Option<u64>, until: Instant, job: MoveJob) -> bool {
        match (&self.sentinel, epoch) {
            (Some((target, _)), Some(epoch)) => {
                target.after_move(epoch, until, job);
                true
            }
            _ => false,
        }
    }

    /// Marks the store a Redis Cluster (see [`one_script`](Self::one_script)).
    pub(crate) fn cluster(mut self, cluster: bool) -> Store {
        self.cluster = cluster;
        self
    }

    /// Whether one script may name every key of these locks: on one server always, on a
    /// Redis Cluster when they share a hash tag (so a slot).
    pub(crate) fn one_script(&self, keys: &[&wire::LockKeys]) -> bool {
        !self.cluster
            || keys
                .windows(2)
                .all(|pair| pair[0].slot_tag() == pair[1].slot_tag())
    }

    /// Ends the wait of waiter `id` on `keys` (a cancel): a local wake-up, and a push onto its
    /// group's poke list when the group's blocking call must end for it (`waiting.rs`).
    pub(crate) fn wake(&self, keys: &wire::LockKeys, id: &str) -> Result<()> {
        match self.waiting.cancel(&keys.lock, id) {
            Some(group) => {
                let mut conn = self.conn()?;
                wire::cancel::wake(keys, &group).on(&mut conn)
            }
            None => Ok(()),
        }
    }

    /// `PING`.
    pub(crate) fn ping(&self) -> Result<()> {
        let mut conn = self.conn()?;
        commands::ping(&mut conn)?;
        Ok(())
    }

    /// The names of the lock keys matching `pattern` (a `SCAN` pattern from
    /// `wire::keys::scan_pattern`) under `namespace`.
    pub(crate) fn scan(
        &self,
        namespace: &str,
        pattern: &str,
    ) -> Result<std::collections::BTreeSet<String>> {
        let mut conn = self.conn()?;
        let mut names = std::collections::BTreeSet::new();
        // On a cluster, every master in turn: each holds the keys of its own slots.
        conn.for_each_master(|node| {
            commands::scan(node, pattern, |keys| {
                names.extend(
                    keys.iter()
                        .filter_map(|key| wire::keys::lock_name(namespace, key)),
                );
            })
        })?;
        Ok(names)
    }
}

#[cfg(all(test, feature = "testing"))]
mod server_tests {
    use crate::deploy::Deployment;
    use crate::testing::RedisServer;

    /// Whether the server has `DELIFEQ` is learnt by the first release of a lock taken on the
    /// native fast path, and kept by the store (not asked per call).
    #[test]
    fn the_first_native_release_learns_whether_the_server_has_delifeq() {
        let server = RedisServer::start();
        // Without loss notification: its check of a lock held over 2 ms (a loaded machine)
        // would be one more request than the cycle's two.
        let client = crate::LockClient::builder(&server.url())
            .loss_notification(false)
            .build()
            .unwrap();
        let Deployment::Single(store) = &client.inner.deployment else {
            panic!("one server is a single store");
        };
        assert_eq!(store.caps.delifeq.known(), None);
        drop(client.lock("learn").unwrap());
        let info: Vec<redis::Value> = redis::cmd("COMMAND")
            .arg("INFO")
            .arg("DELIFEQ")
            .query(&mut server.connection())
            .unwrap();
        let has = !matches!(info.first(), None | Some(redis::Value::Nil));
        assert_eq!(store.caps.delifeq.known(), Some(has));
        // Learnt once: a release on a server without it sends the script alone from then on.
        let before = client.request_count();
        drop(client.lock("learn").unwrap());
        assert_eq!(client.request_count() - before, 2);
    }
}
