//! A client from validated settings (`build_unchecked`): the threads its stores share, one
//! store per target with its pools, waiting connections, loss notification and Sentinel
//! check, then the deployment over the stores and the lock configuration.

use std::sync::Arc;
use std::sync::atomic::AtomicU64;
use std::time::Duration;

use scheduled_thread_pool::{OnPoolDropBehavior, ScheduledThreadPool};

use crate::client::LockClient;
use crate::deploy::Deployment;
use crate::deploy::quorum::Quorum;
use crate::error::{Error, Result};
use crate::hold::{Config, Inner};
use crate::store::connection::{LogErrors, Manager, Pool, Target};
use crate::store::sentinel::SentinelTarget;
use crate::store::{MAX_WAITING_CONNECTIONS, Store, Timeouts};

use super::Builder;
use super::source::{Source, origin};

/// How long a connection that waiting no longer uses stays open for the next wait.
const WAITING_IDLE: Duration = Duration::from_secs(60);

/// What every store of a client shares, made once by `build_unchecked`.
struct Parts {
    timer: crate::store::timer::Timer,
    maker: Arc<ScheduledThreadPool>,
    requests: Arc<AtomicU64>,
    #[cfg(feature = "cluster")]
    cluster_base: Option<redis::ConnectionInfo>,
}

impl Parts {
    /// The client's two threads and its request counter (`source` names a Cluster's first
    /// node, with feature `cluster`).
    #[cfg_attr(not(feature = "cluster"), allow(unused_variables))]
    fn start(source: &Source) -> Result<Parts> {
        Ok(Parts {
            // One housekeeping thread (sentinel checks, wake-ups, expiry alarms) for the whole
            // client, running jobs that can be taken back (`store/timer.rs`).
            timer: crate::store::timer::Timer::start().map_err(Error::System)?,
            // And one for every r2d2 pool of the client instead of r2d2's three per pool, apart
            // from the housekeeping, which talks to Redis: its jobs only make unopened
            // connections, at once (the caller opens them), so a checkout with room in its
            // pool never waits behind a sentinel check or a wake-up stuck on a slow server.
            maker: Arc::new(
                ScheduledThreadPool::builder()
                    .num_threads(1)
                    .thread_name_pattern("redis-lock-conns")
                    .on_drop_behavior(OnPoolDropBehavior::DiscardPendingScheduled)
                    .build(),
            ),
            requests: Arc::new(AtomicU64::new(0)),
            // A Cluster's loss notification connects to each master like this first node.
            #[cfg(feature = "cluster")]
            cluster_base: match source {
                Source::Cluster(urls) => urls
                    .first()
                    .and_then(|u| redis::IntoConnectionInfo::into_connection_info(u.as_str()).ok()),
                _ => None,
            },
        })
    }
}

impl Builder {
    /// The client of validated settings: its threads, pools and stores, then the deployment
    /// over them.
    pub(super) fn build_unchecked(self) -> Result<LockClient> {
        let (targets, redacted_url) = self.targets()?;
        let origin = origin(&self.source);
        let parts = Parts::start(&self.source)?;
        let mut external = match &self.source {
            Source::Pool(pool, _) => Some(pool.clone()),
            _ => None,
        };
        let stores: Vec<Store> = targets
            .into_iter()
            .map(|(target, label)| self.store(target, label, external.take(), &parts))
            .collect();
        let quorum = matches!(self.source, Source::Redlock(_));
        // One server's worst case: a pooled connection, opened if it is new, then the reply.
        let per_server = self.pool_timeout + self.connect_timeout + self.io_timeout;
        let deployment = self.deployment(stores, quorum, per_server)?;
        let host = gethostname::gethostname().to_string_lossy().into_owned();
        let config = Config {
            namespace: self.namespace,
            default_ttl: self.default_ttl,
            default_wait: self.default_wait,
            default_on_lost: self.on_lost,
            default_retry: self.default_retry,
            watchdog: self.watchdog,
            redacted_url,
            origin,
            // A quorum asks its servers at once, in at most two steps (an attempt, then an
            // undo or a fencing-counter raise; a renewal is one).
            call_bound: if quorum { per_server * 2 } else { per_server },
        };
        // Units and descriptions for the recorder installed now (nothing without `metrics`).
        crate::hold::observe::describe();
        Ok(LockClient::from_inner(Inner::new(
            deployment,
            config,
            parts.requests,
            &host,
            parts.timer,
        )))
    }

    /// The deployment over the stores: a Redlock quorum, else the one store.
    fn deployment(
        &self,
        stores: Vec<Store>,
        quorum: bool,
        per_server: Duration,
    ) -> Result<Deployment> {
        Ok(if quorum {
            // As many threads per server as connections: more could only wait for one.
            let threads = usize::try_from(self.pool_size).unwrap_or(usize::MAX);
            Deployment::Quorum(Quorum::new(stores, per_server, threads))
        } else {
            let mut stores = stores;
            Deployment::Single(
                stores
                    .pop()
                    .ok_or_else(|| Error::invalid("url", "no store"))?,
            )
        })
    }

    /// The store of one target: its lock pool (an application's `external` one, or ours),
    /// its waiting connections, loss notification, and the Sentinel check.
    fn store(
        &self,
        target: Target,
        label: String,
        external: Option<r2d2::Pool<redis::Client>>,
        parts: &Parts,
    ) -> Store {
        let every = self
            .sentinel_check_interval
            .unwrap_or(Duration::from_secs(1));
        let sentinel = match &target {
            Target::Sentinel(sentinel) => Some(Arc::clone(sentinel)),
            _ => None,
        };
        if let Some(sentinel) = &sentinel {
            check_sentinel_every(sentinel, every, parts);
        }
        let cluster = target.is_cluster();
        let manager = Manager {
            target,
            connect_timeout: self.connect_timeout,
            io_timeout: self.io_timeout,
        };
        // One connection per lock name waited on (`store/waiting.rs`); one idle for
        // WAITING_IDLE is closed.
        let waiters = self
            .pool_builder(MAX_WAITING_CONNECTIONS, parts)
            .idle_timeout(Some(WAITING_IDLE))
            .build_unchecked(manager.clone());
        // Loss notification needs connections of our own to the servers the locks are on,
        // not an application's pool's (a Cluster's are made per master, below).
        let notifying =
            (self.loss_notification && external.is_none() && !cluster).then(|| manager.clone());
        let pool = match external {
            Some(pool) => Pool::External(pool),
            None => Pool::Managed(
                self.pool_builder(self.pool_size, parts)
                    .build_unchecked(manager),
            ),
        };
        let store = Store::new(
            pool,
            waiters,
            label,
            Timeouts {
                connect: self.connect_timeout,
                pool: self.pool_timeout,
            },
            Arc::clone(&parts.requests),
            parts.timer.clone(),
        )
        .cluster(cluster);
        let store = match notifying {
            Some(manager) => store.notifying(manager),
            None => store,
        };
        #[cfg(feature = "cluster")]
        let store = match (&parts.cluster_base, cluster) {
            (Some(base), true) if self.loss_notification => {
                store.notifying_nodes(base.clone(), self.io_timeout)
            }
            _ => store,
        };
        match sentinel {
            Some(sentinel) => store.sentinel(sentinel, every),
            None => store,
        }
    }

    /// An r2d2 pool of at most `size` of our connections, made on the client's one
    /// connection thread.
    fn pool_builder(&self, size: u32, parts: &Parts) -> r2d2::Builder<Manager> {
        r2d2::Pool::builder()
            .max_size(size)
            // No connections made ahead, so none fails out of sight.
            .min_idle(Some(0))
            // Free: `Manager::is_valid` sends nothing (see `store/connection/mod.rs`).
            .test_on_check_out(true)
            .connection_timeout(self.pool_timeout)
            .thread_pool(Arc::clone(&parts.maker))
            .error_handler(Box::new(LogErrors))
    }
}

/// Asks the sentinels where the master is every `every`, on the client's housekeeping thread.
fn check_sentinel_every(sentinel: &Arc<SentinelTarget>, every: Duration, parts: &Parts) {
    let sentinel = Arc::downgrade(sentinel);
    // The job ends with the housekeeping thread, which ends with the client.
    parts.timer.every(every, move || {
        if let Some(sentinel) = sentinel.upgrade() {
            sentinel.check();
        }
    });
}
