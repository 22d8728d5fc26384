//! `Builder`: every client setting and its default in one place.

use std::sync::Arc;
use std::sync::atomic::AtomicU64;
use std::time::Duration;

use scheduled_thread_pool::{OnPoolDropBehavior, ScheduledThreadPool};

use crate::client::LockClient;
use crate::deploy::Deployment;
use crate::deploy::quorum::Quorum;
use crate::error::{Error, Result};
use crate::hold::{Config, Inner};
use crate::options::{MAX_TTL, validate_ttl};
use crate::retry::RetryStrategy;

/// The most connections a pool may have: far above what one Redis accepts by default
/// (`maxclients` 10,000); r2d2 reserves room for all of them when the pool is built.
const MAX_POOL_SIZE: u32 = 65_536;

/// How long a connection that waiting no longer uses stays open for the next wait.
const WAITING_IDLE: Duration = Duration::from_secs(60);
use crate::store::connection::{LogErrors, Manager, Pool, Target};
use crate::store::sentinel::SentinelTarget;
use crate::store::{MAX_WAITING_CONNECTIONS, Store, Timeouts};
use crate::wire::keys::validate_namespace;

enum Source {
    Url(String),
    // Boxed: with TLS support a `redis::Client` is a few hundred bytes.
    Pool(r2d2::Pool<redis::Client>, Box<redis::Client>),
    /// Seed nodes of a Redis Cluster.
    #[cfg(feature = "cluster")]
    Cluster(Vec<String>),
    /// Independent servers, locked by majority (Redlock).
    Redlock(Vec<String>),
    /// A master found through sentinels.
    Sentinel {
        master: String,
        sentinels: Vec<String>,
    },
}

impl Source {
    fn describe(&self) -> String {
        let list = |urls: &[String]| {
            urls.iter()
                .map(|u| redact_url(u))
                .collect::<Vec<_>>()
                .join(", ")
        };
        match self {
            Source::Url(url) => redact_url(url),
            Source::Pool(..) => "<existing pool>".to_owned(),
            #[cfg(feature = "cluster")]
            Source::Cluster(urls) => format!("cluster [{}]", list(urls)),
            Source::Redlock(urls) => format!("redlock [{}]", list(urls)),
            Source::Sentinel { master, sentinels } => {
                format!("sentinel master {master:?} via [{}]", list(sentinels))
            }
        }
    }
}

/// How often a cluster client retries a command that was redirected (`MOVED`, `ASK`) or told
/// to try again (`TRYAGAIN` while a slot migrates, `CLUSTERDOWN`), waiting between 10 ms and
/// `CLUSTER_MAX_RETRY_WAIT_MS` (growing) before each retry.
#[cfg(feature = "cluster")]
pub(crate) const CLUSTER_RETRIES: u32 = 8;
#[cfg(feature = "cluster")]
const CLUSTER_MIN_RETRY_WAIT_MS: u64 = 10;
#[cfg(feature = "cluster")]
const CLUSTER_MAX_RETRY_WAIT_MS: u64 = 500;

/// The constructors of a client: each a [`Builder`] for one kind of deployment, or that
/// builder's defaults at once.
impl LockClient {
    /// A client with default settings for the Redis at `url` (`redis://[user:password@]host[:port][/db]`,
    /// or `rediss://` for TLS when the `redis` crate's TLS feature is enabled).
    ///
    /// # Errors
    ///
    /// [`Error::InvalidInput`] for a malformed URL. No connection is made here.
    ///
    /// # Examples
    ///
    /// ```
    /// let locks = redis_lock::LockClient::open("redis://127.0.0.1:6379/").unwrap();
    /// assert!(redis_lock::LockClient::open("not a url").is_err());
    /// # let _ = locks;
    /// ```
    pub fn open(url: &str) -> Result<LockClient> {
        Builder::from_url(url).build()
    }

    /// A [`Builder`] to configure a client for `url`.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn main() -> redis_lock::Result<()> {
    /// # let locks = redis_lock::LockClient::open("redis://127.0.0.1/")?;
    /// use std::time::Duration;
    /// let locks = redis_lock::LockClient::builder("redis://127.0.0.1/")
    ///     .namespace("billing:")
    ///     .default_ttl(Duration::from_secs(10))
    ///     .build()?;
    /// # let _ = locks;
    /// # Ok(()) }
    /// ```
    pub fn builder(url: &str) -> Builder {
        Builder::from_url(url)
    }

    /// A [`Builder`] for a client on a Redis Cluster, given some of its nodes (the client
    /// discovers the rest with `CLUSTER SLOTS`). Feature `cluster`.
    ///
    /// Each pooled connection holds a connection to every master and sends each script to the
    /// master that serves the lock's hash slot; all keys of one lock share that slot (see
    /// [`namespace`](Builder::namespace)). Redirections while slots move (`MOVED`, `ASK`,
    /// `TRYAGAIN`) are followed and retried up to 8 times with a short growing pause
    /// (10–500 ms); a migration that keeps a lock's keys split for longer than that fails the
    /// call with [`Error::Redis`] (`TRYAGAIN`), which the caller can retry.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn main() -> redis_lock::Result<()> {
    /// let locks = redis_lock::LockClient::cluster_builder([
    ///     "redis://10.0.0.1:7000/",
    ///     "redis://10.0.0.2:7000/",
    /// ])
    /// .build()?;
    /// let guard = locks.lock("report")?;
    /// # drop(guard); Ok(()) }
    /// ```
    #[cfg(feature = "cluster")]
    #[cfg_attr(docsrs, doc(cfg(feature = "cluster")))]
    pub fn cluster_builder<I, S>(nodes: I) -> Builder
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        Builder::from_cluster(nodes.into_iter().map(|s| s.as_ref().to_owned()).collect())
    }

    /// A [`Builder`] for a client on the master that Redis Sentinel knows as `master_name`,
    /// asking the `sentinels` (URLs, tried in order) where it is.
    ///
    /// New connections ask the sentinels and check with `ROLE` that the named server is a
    /// master. The pool's housekeeping thread asks again every
    /// [`sentinel_check_interval`](Builder::sentinel_check_interval); after a failover,
    /// pooled connections to the old master are dropped, so new acquisitions go to the new
    /// master. A failover can lose locks that were not replicated yet; acquire with
    /// [`replicas`](crate::LockOptions::replicas) to prevent that (SAFETY.md in the repository
    /// compares the deployments).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn main() -> redis_lock::Result<()> {
    /// let locks = redis_lock::LockClient::sentinel_builder(
    ///     "mymaster",
    ///     ["redis://10.0.0.1:26379/", "redis://10.0.0.2:26379/", "redis://10.0.0.3:26379/"],
    /// )
    /// .master_auth(None, "secret")
    /// .build()?;
    /// let guard = locks.options("report").replicas(1, std::time::Duration::from_millis(50)).acquire()?;
    /// # drop(guard); Ok(()) }
    /// ```
    pub fn sentinel_builder<I, S>(master_name: &str, sentinels: I) -> Builder
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        Builder::from_sentinels(
            master_name.to_owned(),
            sentinels
                .into_iter()
                .map(|s| s.as_ref().to_owned())
                .collect(),
        )
    }

    /// A [`Builder`] for a Redlock client: one lock over independent Redis `servers` (not
    /// replicas of each other; use 3 or 5), held while a majority of them holds it. One
    /// server listed twice would vote twice: [`build`](Builder::build) refuses two URLs whose
    /// host names resolve to a common address and port (`localhost` and `127.0.0.1`), or that
    /// name the same Unix socket, whatever their databases; it connects to nothing, so one
    /// server reached under two addresses that resolve differently (two interfaces, a proxy)
    /// is not caught.
    ///
    /// An acquisition counts when a majority took the lock within its validity time (the TTL
    /// minus the time the acquisition took minus a clock drift allowance of 1 % + 2 ms); otherwise
    /// it is undone on all servers. Release goes to all servers; the watchdog renews on a
    /// majority and reports the lock lost when it no longer can. When fewer than a majority
    /// answer at all, calls fail with [`Error::NoQuorum`]. Fencing tokens stay strictly
    /// increasing as long as no server loses its data (SAFETY.md in the repository says more).
    /// A waiter registers on every server and is woken by the release on the server where it
    /// saw the holder; fair waiting ([`RetryStrategy::fair`](crate::RetryStrategy::fair)) is
    /// refused with [`Error::InvalidInput`], since each server would keep its own queue.
    /// The servers are asked at once, each with the client's `connect_timeout` and
    /// `io_timeout`: keep them well below the TTL. A call returns once a majority decided;
    /// what a slower server still owes (say, releasing a lock whose attempt reached it late)
    /// is finished in the background, and dropping the last handle of the client waits for it,
    /// at most twice (`pool_timeout` + `connect_timeout` + `io_timeout`).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// use std::time::Duration;
    /// # fn main() -> redis_lock::Result<()> {
    /// let locks = redis_lock::LockClient::redlock_builder([
    ///     "redis://10.0.0.1:6379/",
    ///     "redis://10.0.0.2:6379/",
    ///     "redis://10.0.0.3:6379/",
    /// ])
    /// .connect_timeout(Duration::from_millis(100))
    /// .io_timeout(Duration::from_millis(100))
    /// .build()?;
    /// let guard = locks.lock("report")?;
    /// # drop(guard); Ok(()) }
    /// ```
    pub fn redlock_builder<I, S>(servers: I) -> Builder
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        Builder::from_redlock(servers.into_iter().map(|s| s.as_ref().to_owned()).collect())
    }

    /// A [`Builder`] for a client on an r2d2 pool the application already has. Lock
    /// operations use that pool as configured (turn its `test_on_check_out` off to save a round
    /// trip per operation). Waiters block on connections of their own, made from `client`
    /// (the client the pool was built from), so they never take the pool's connections.
    pub fn builder_with_pool(pool: r2d2::Pool<redis::Client>, client: redis::Client) -> Builder {
        Builder::from_pool(pool, client)
    }

    /// A client with default settings on an existing r2d2 pool (see
    /// [`builder_with_pool`](Self::builder_with_pool)).
    ///
    /// # Errors
    ///
    /// Never fails with the default settings; the `Result` is there for symmetry with
    /// [`open`](Self::open).
    ///
    /// # Examples
    ///
    /// ```
    /// // The crates re-exported by this one: no second dependency to keep in step.
    /// use redis_lock::{r2d2, redis};
    ///
    /// let client = redis::Client::open("redis://127.0.0.1/").unwrap();
    /// let pool = r2d2::Pool::builder()
    ///     .test_on_check_out(false)
    ///     .build_unchecked(client.clone());
    /// let locks = redis_lock::LockClient::from_pool(pool, client).unwrap();
    /// # let _ = locks;
    /// ```
    pub fn from_pool(pool: r2d2::Pool<redis::Client>, client: redis::Client) -> Result<LockClient> {
        Builder::from_pool(pool, client).build()
    }
}

/// Configures and builds a [`LockClient`].
///
/// # Examples
///
/// ```no_run
/// use std::time::Duration;
/// # fn main() -> redis_lock::Result<()> {
/// let locks = redis_lock::LockClient::builder("redis://127.0.0.1/")
///     .namespace("app:")
///     .pool_size(16)
///     .default_ttl(Duration::from_secs(10))
///     .build()?;
/// # let _ = locks; Ok(()) }
/// ```
#[must_use = "a builder does nothing until `build` is called"]
pub struct Builder {
    source: Source,
    namespace: String,
    pool_size: u32,
    waiter_pool_size: u32,
    connect_timeout: Duration,
    pool_timeout: Duration,
    io_timeout: Duration,
    default_ttl: Duration,
    default_wait: Option<Duration>,
    on_lost: Option<crate::options::LostCallback>,
    default_retry: RetryStrategy,
    watchdog: bool,
    loss_notification: bool,
    sentinel_check_interval: Option<Duration>,
    master_auth: Option<(Option<String>, String)>,
}

impl std::fmt::Debug for Builder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Builder")
            .field("source", &self.source.describe())
            .field("namespace", &self.namespace)
            .field("pool_size", &self.pool_size)
            .field("waiter_pool_size", &self.waiter_pool_size)
            .field("connect_timeout", &self.connect_timeout)
            .field("pool_timeout", &self.pool_timeout)
            .field("io_timeout", &self.io_timeout)
            .field("default_ttl", &self.default_ttl)
            .field("default_wait", &self.default_wait)
            .field("on_lost", &self.on_lost.as_ref().map(|_| "Fn(&LostEvent)"))
            .field("default_retry", &self.default_retry)
            .field("watchdog", &self.watchdog)
            .field("loss_notification", &self.loss_notification)
            .field("sentinel_check_interval", &self.sentinel_check_interval)
            .field("master_auth", &self.master_auth.as_ref().map(|_| "***"))
            .finish()
    }
}

impl Builder {
    fn with(source: Source) -> Builder {
        Builder {
            source,
            namespace: "lock:".to_owned(),
            pool_size: 16,
            waiter_pool_size: 64,
            connect_timeout: Duration::from_secs(2),
            pool_timeout: Duration::from_secs(5),
            io_timeout: Duration::from_secs(2),
            default_ttl: Duration::from_secs(30),
            default_wait: None,
            on_lost: None,
            default_retry: RetryStrategy::notify(),
            watchdog: true,
            loss_notification: true,
            sentinel_check_interval: None,
            master_auth: None,
        }
    }

    #[cfg(feature = "cluster")]
    pub(crate) fn from_cluster(urls: Vec<String>) -> Builder {
        Builder::with(Source::Cluster(urls))
    }

    pub(crate) fn from_redlock(urls: Vec<String>) -> Builder {
        Builder::with(Source::Redlock(urls))
    }

    pub(crate) fn from_sentinels(master: String, sentinels: Vec<String>) -> Builder {
        Builder::with(Source::Sentinel { master, sentinels })
    }

    pub(crate) fn from_url(url: &str) -> Builder {
        Builder::with(Source::Url(url.to_owned()))
    }

    pub(crate) fn from_pool(pool: r2d2::Pool<redis::Client>, client: redis::Client) -> Builder {
        Builder::with(Source::Pool(pool, Box::new(client)))
    }

    /// Prefix of every Redis key the client writes. Must not contain `{` or `}` (they would
    /// break the hash tag that keeps one lock's keys in one cluster slot). Defaults to `"lock:"`.
    pub fn namespace(mut self, namespace: impl Into<String>) -> Builder {
        self.namespace = namespace.into();
        self
    }

    /// Most connections the lock operations (acquire, renew, release) keep open. Defaults to 16.
    pub fn pool_size(mut self, size: u32) -> Builder {
        self.pool_size = size;
        self
    }

    /// No longer has any effect (the size is still checked: at least 1, at most 65,536).
    ///
    /// The threads of a client that wait on one lock name share one blocking connection, so
    /// waiting takes one connection per lock name waited on at once (per server), however
    /// many threads wait (at most 4,096 per server); those connections are separate from
    /// [`pool_size`](Self::pool_size), so waiters never take the connections holders need.
    #[deprecated(
        note = "waiting takes one connection per lock name waited on, whatever the number of waiting threads; this setting does nothing"
    )]
    pub fn waiter_pool_size(mut self, size: u32) -> Builder {
        self.waiter_pool_size = size;
        self
    }

    /// Longest time a new connection to Redis may take to open: the TCP connect (shared in turn
    /// by the addresses a host name resolves to; for `rediss://` the TLS handshake too) and
    /// the handshake's replies, together. The handshake is `AUTH` and `SELECT` where the URL
    /// asks for them (under RESP3 a `HELLO` carrying the credentials, then `SELECT`), else one
    /// `PING`, so a server that accepts connections but never answers is found here, before
    /// anything was sent. Defaults to 2 s.
    ///
    /// An operation that finds no idle pooled connection opens one on its own thread (the
    /// pool makes none in the background, and retries none): a refused connection fails it at
    /// once, and a server that does not answer fails it within this timeout, either with
    /// [`Error::Connect`] (nothing was sent, so nothing is asked again: an acquisition fails
    /// after one connect timeout, not one per attempt). That is all of it for one server;
    /// for the other deployments:
    ///
    /// - **Redlock**: every server is asked at once, so the call fails within this timeout too
    ///   (with [`Error::NoQuorum`]).
    /// - **Sentinel**: a new connection asks the sentinels in turn until one names the master
    ///   (each connect within this timeout, its answer within
    ///   [`io_timeout`](Self::io_timeout)), then connects to the master within this timeout
    ///   and asks it `ROLE` within `io_timeout`: a sentinel that does not answer costs this
    ///   timeout before the next one is asked; refusing ones cost nothing.
    /// - **Cluster**: the `redis` crate connects, to the seed nodes in turn, then to every
    ///   node. Its handshake reads each of its replies (`AUTH` when the URLs carry a password,
    ///   two `CLIENT SETINFO`) with what was left of this timeout when it began, so a node that
    ///   accepts and never answers may cost up to three times this timeout.
    /// - **A client on an application's pool** ([`LockClient::from_pool`]): lock operations
    ///   use that pool, which connects as it was configured; while it has no connection open
    ///   they wait this long for one.
    pub fn connect_timeout(mut self, timeout: Duration) -> Builder {
        self.connect_timeout = timeout;
        self
    }

    /// Longest wait for a free pooled connection when all are in use. Defaults to 5 s.
    pub fn pool_timeout(mut self, timeout: Duration) -> Builder {
        self.pool_timeout = timeout;
        self
    }

    /// Longest wait for each Redis reply. A connection whose reply is late is discarded. Keep
    /// it below the TTLs you use, so a stalled Redis is noticed before locks expire. Defaults
    /// to 2 s.
    pub fn io_timeout(mut self, timeout: Duration) -> Builder {
        self.io_timeout = timeout;
        self
    }

    /// TTL of locks taken without an explicit one. Defaults to 30 s.
    pub fn default_ttl(mut self, ttl: Duration) -> Builder {
        self.default_ttl = ttl;
        self
    }

    /// How long [`LockClient::lock`] (and any acquisition without its own `wait`) waits for
    /// a busy lock before [`Error::Timeout`]. `None`, the default, waits until the lock is
    /// free, like `Mutex::lock`; a crashed holder's lock frees within its TTL.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// let locks = redis_lock::LockClient::builder("redis://127.0.0.1/")
    ///     .default_wait(Duration::from_secs(5)) // `lock` gives up after 5 s
    ///     .build()
    ///     .unwrap();
    /// # let _ = locks;
    /// ```
    pub fn default_wait(mut self, wait: impl Into<Option<Duration>>) -> Builder {
        self.default_wait = wait.into();
        self
    }

    /// Called when a lock taken through this client is lost while held (it expired, was
    /// taken over or deleted, or renewal failed until it ran out), for acquisitions that do
    /// not set their own [`LockOptions::on_lost`](crate::LockOptions::on_lost): `lock`,
    /// `try_lock`, the attribute macro. Runs on the renewal thread: keep it short.
    ///
    /// # Examples
    ///
    /// ```
    /// let locks = redis_lock::LockClient::builder("redis://127.0.0.1/")
    ///     .on_lost(|event| eprintln!("lost {}: {}", event.key, event.reason))
    ///     .build()
    ///     .unwrap();
    /// # let _ = locks;
    /// ```
    pub fn on_lost(
        mut self,
        callback: impl Fn(&crate::LostEvent) + Send + Sync + 'static,
    ) -> Builder {
        self.on_lost = Some(Arc::new(callback));
        self
    }

    /// How waiters wait between attempts. Defaults to [`RetryStrategy::notify`].
    pub fn default_retry(mut self, retry: RetryStrategy) -> Builder {
        self.default_retry = retry;
        self
    }

    /// Whether locks get a renewing watchdog thread unless the call says otherwise. Defaults
    /// to `true`.
    pub fn watchdog(mut self, on: bool) -> Builder {
        self.watchdog = on;
        self
    }

    /// Whether the client asks each server to tell it when a lock it holds is changed by
    /// somebody else (loss notification: see [`LockClient::loss_detection`]). Defaults to
    /// `true`. Off, the client opens no notification connections and no thread for them, sends
    /// no check, and a lock changed by somebody else is found at its next renewal (a third of
    /// its TTL) or by [`check_held`](crate::LockGuard::check_held).
    ///
    /// [`LockClient::loss_detection`]: crate::LockClient::loss_detection
    pub fn loss_notification(mut self, on: bool) -> Builder {
        self.loss_notification = on;
        self
    }

    /// Sentinel clients only: how often the pool's housekeeping thread asks the sentinels
    /// where the master is. When it has moved, pooled connections to the old master are
    /// dropped at their next checkout (the old master may keep accepting writes for a few
    /// seconds after a failover), releases the old master missed (or took without the
    /// replicas' acknowledgement, for a lock taken with
    /// [`replicas`](crate::LockOptions::replicas)) are sent again to the new one, and waiters
    /// blocked on the old master attempt again: a waiter blocks in slices of this interval.
    /// New connections always ask. Defaults to 1 s.
    ///
    /// ```no_run
    /// use std::time::Duration;
    ///
    /// let client = redis_lock::LockClient::sentinel_builder(
    ///     "mymaster",
    ///     ["redis://10.0.0.1:26379/", "redis://10.0.0.2:26379/"],
    /// )
    /// .sentinel_check_interval(Duration::from_millis(250))
    /// .build()?;
    /// # let _ = client;
    /// # Ok::<(), redis_lock::Error>(())
    /// ```
    pub fn sentinel_check_interval(mut self, interval: Duration) -> Builder {
        self.sentinel_check_interval = Some(interval);
        self
    }

    /// Sentinel clients only: the username (`None` for the default user) and password of the
    /// master the sentinels name. Credentials for the sentinels themselves go in their URLs.
    /// Defaults to none.
    pub fn master_auth(mut self, username: Option<&str>, password: &str) -> Builder {
        self.master_auth = Some((username.map(str::to_owned), password.to_owned()));
        self
    }

    /// Where connections go (one target per store), and a description for logs and `Debug`
    /// (no passwords).
    fn targets(&self) -> Result<(Vec<(Target, String)>, String)> {
        let Source::Redlock(urls) = &self.source else {
            return self.target().map(|(t, d)| (vec![(t, d.clone())], d));
        };
        self.sentinel_only()?;
        if urls.is_empty() {
            return Err(Error::invalid("urls", "no redis server given"));
        }
        let mut targets: Vec<(Target, String)> = Vec::with_capacity(urls.len());
        // Where each server listed so far is reached, and its URL.
        let mut seen: Vec<(String, &str)> = Vec::new();
        for url in urls {
            let client = redis::Client::open(url.as_str())
                .map_err(|e| Error::invalid("urls", format!("{} ({e})", redact_url(url))))?;
            // The same server twice would count its vote twice: one server down (or one
            // holder's) would be two votes of the majority.
            let places = server_places(client.get_connection_info().addr());
            if let Some((place, first)) = seen.iter().find(|(place, _)| places.contains(place)) {
                return Err(Error::invalid(
                    "urls",
                    format!(
                        "{} and {} are the same server ({place}; another database of a \
                         server is not another server): Redlock would count its vote twice",
                        redact_url(first),
                        redact_url(url)
                    ),
                ));
            }
            seen.extend(places.into_iter().map(|place| (place, url.as_str())));
            targets.push((Target::Server(client), redact_url(url)));
        }
        Ok((targets, self.source.describe()))
    }

    /// `InvalidInput` for the Sentinel-only settings on any other client (Redlock included).
    fn sentinel_only(&self) -> Result<()> {
        let not_sentinel = |what: &'static str| {
            Err(Error::invalid(
                what,
                "only applies to a client built with `sentinel_builder`",
            ))
        };
        if !matches!(self.source, Source::Sentinel { .. }) {
            if self.sentinel_check_interval.is_some() {
                return not_sentinel("sentinel_check_interval");
            }
            if self.master_auth.is_some() {
                return not_sentinel("master_auth");
            }
        }
        Ok(())
    }

    /// Where connections go, and a description of it for logs and `Debug` (no passwords).
    fn target(&self) -> Result<(Target, String)> {
        let description = self.source.describe();
        let url_error = |what: &'static str, url: &str, e: redis::RedisError| {
            Error::invalid(what, format!("{} ({e})", redact_url(url)))
        };
        self.sentinel_only()?;
        let target = match &self.source {
            Source::Redlock(_) => unreachable_redlock()?,
            Source::Url(url) => Target::Server(
                redis::Client::open(url.as_str()).map_err(|e| url_error("url", url, e))?,
            ),
            Source::Pool(_, client) => Target::Server((**client).clone()),
            #[cfg(feature = "cluster")]
            Source::Cluster(urls) => {
                if urls.is_empty() {
                    return Err(Error::invalid("urls", "no cluster node given"));
                }
                let mut nodes = Vec::with_capacity(urls.len());
                for url in urls {
                    nodes.push(
                        redis::IntoConnectionInfo::into_connection_info(url.as_str())
                            .map_err(|e| url_error("urls", url, e))?,
                    );
                }
                let client = redis::cluster::ClusterClientBuilder::new(nodes)
                    .connection_timeout(self.connect_timeout)
                    .response_timeout(self.io_timeout)
                    .retries(CLUSTER_RETRIES)
                    .min_retry_wait(CLUSTER_MIN_RETRY_WAIT_MS)
                    .max_retry_wait(CLUSTER_MAX_RETRY_WAIT_MS)
                    .build()
                    .map_err(|e| Error::invalid("urls", format!("{description} ({e})")))?;
                Target::Cluster(client)
            }
            Source::Sentinel { master, sentinels } => {
                if master.is_empty() {
                    return Err(Error::invalid("master_name", "it is empty"));
                }
                if sentinels.is_empty() {
                    return Err(Error::invalid("sentinels", "no sentinel given"));
                }
                if self.sentinel_check_interval.is_some_and(|i| i.is_zero()) {
                    return Err(Error::invalid(
                        "sentinel_check_interval",
                        "must be longer than zero",
                    ));
                }
                // The check is scheduled on the clock: a period past it would panic there.
                if self.sentinel_check_interval.is_some_and(|i| i > MAX_TTL) {
                    return Err(Error::invalid(
                        "sentinel_check_interval",
                        format!("longer than {MAX_TTL:?}"),
                    ));
                }
                let mut infos = Vec::with_capacity(sentinels.len());
                for url in sentinels {
                    infos.push(
                        redis::IntoConnectionInfo::into_connection_info(url.as_str())
                            .map_err(|e| url_error("sentinels", url, e))?,
                    );
                }
                let mut settings = redis::RedisConnectionInfo::default();
                if let Some((user, password)) = &self.master_auth {
                    if let Some(user) = user {
                        settings = settings.set_username(user);
                    }
                    settings = settings.set_password(password);
                }
                let template =
                    redis::IntoConnectionInfo::into_connection_info("redis://127.0.0.1/")
                        .map_err(Error::Redis)?
                        .set_redis_settings(settings);
                Target::Sentinel(Arc::new(SentinelTarget::new(
                    master.clone(),
                    infos,
                    template,
                    self.connect_timeout,
                    self.io_timeout,
                )))
            }
        };
        Ok((target, description))
    }

    /// Builds the client. No connection is made yet: the first lock operation connects, and an
    /// unreachable Redis shows up there, as [`connect_timeout`](Self::connect_timeout) says.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidInput`] for a malformed URL, a bad namespace, zero sizes or timeouts,
    /// pool sizes above 65,536 or timeouts (and a Sentinel check interval) above
    /// [`MAX_TTL`](crate::MAX_TTL), a default wait past the clock's range, a Sentinel-only
    /// setting on another client, or a bad default TTL (under Redlock also one no longer than
    /// the clock-drift allowance, 1 % + 2 ms). Under Redlock also one server listed twice
    /// (see [`LockClient::redlock_builder`]).
    pub fn build(self) -> Result<LockClient> {
        self.validate()?;
        self.build_unchecked()
    }

    /// Every setting checked before anything is started or sent (`build`'s errors).
    fn validate(&self) -> Result<()> {
        validate_namespace(&self.namespace)?;
        validate_ttl(self.default_ttl)?;
        for (what, size) in [
            ("pool_size", self.pool_size),
            ("waiter_pool_size", self.waiter_pool_size),
        ] {
            if size == 0 {
                return Err(Error::invalid(what, "must be at least 1"));
            }
            // r2d2 reserves room for the whole pool up front: an absurd size aborts the
            // process on the allocation instead of failing.
            if size > MAX_POOL_SIZE {
                return Err(Error::invalid(
                    what,
                    format!("{size} connections; the limit is {MAX_POOL_SIZE}"),
                ));
            }
        }
        for (what, t) in [
            ("connect_timeout", self.connect_timeout),
            ("pool_timeout", self.pool_timeout),
            ("io_timeout", self.io_timeout),
        ] {
            if t.is_zero() {
                return Err(Error::invalid(what, "must be longer than zero"));
            }
            // Added together and to the clock when connecting and waiting.
            if t > MAX_TTL {
                return Err(Error::invalid(what, format!("longer than {MAX_TTL:?}")));
            }
        }
        // A wait is added to the clock by every acquisition that uses it.
        if let Some(wait) = self.default_wait
            && std::time::Instant::now().checked_add(wait).is_none()
        {
            return Err(Error::invalid(
                "default_wait",
                format!("{wait:?} overflows the clock; `None` waits until the lock is free"),
            ));
        }
        if matches!(self.source, Source::Redlock(_)) {
            crate::deploy::quorum::check_ttl(self.default_ttl, "default_ttl")?;
        }
        Ok(())
    }

    /// The client of validated settings: its threads, pools and stores, then the deployment
    /// over them.
    fn build_unchecked(self) -> Result<LockClient> {
        let (targets, redacted_url) = self.targets()?;
        let origin = origin(&self.source);
        let parts = Parts {
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
            cluster_base: match &self.source {
                Source::Cluster(urls) => urls
                    .first()
                    .and_then(|u| redis::IntoConnectionInfo::into_connection_info(u.as_str()).ok()),
                _ => None,
            },
        };
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
        let deployment = if quorum {
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
        };
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

    /// The store of one target: its lock pool (an application's `external` one, or ours),
    /// its waiting connections, loss notification, and the Sentinel check.
    fn store(
        &self,
        target: Target,
        label: String,
        external: Option<r2d2::Pool<redis::Client>>,
        parts: &Parts,
    ) -> Store {
        let pool_builder = |size: u32| {
            r2d2::Pool::builder()
                .max_size(size)
                // No connections made ahead, so none fails out of sight.
                .min_idle(Some(0))
                // Free: `Manager::is_valid` sends nothing (see connection.rs).
                .test_on_check_out(true)
                .connection_timeout(self.pool_timeout)
                .thread_pool(Arc::clone(&parts.maker))
                .error_handler(Box::new(LogErrors))
        };
        let every = self
            .sentinel_check_interval
            .unwrap_or(Duration::from_secs(1));
        let sentinel = match &target {
            Target::Sentinel(sentinel) => Some(Arc::clone(sentinel)),
            _ => None,
        };
        if let Some(sentinel) = &sentinel {
            let sentinel = Arc::downgrade(sentinel);
            // The job ends with the housekeeping thread, which ends with the client.
            parts.timer.every(every, move || {
                if let Some(sentinel) = sentinel.upgrade() {
                    sentinel.check();
                }
            });
        }
        let cluster = target.is_cluster();
        let manager = Manager {
            target,
            connect_timeout: self.connect_timeout,
            io_timeout: self.io_timeout,
        };
        // One connection per lock name waited on (`store/waiting.rs`); one idle for
        // WAITING_IDLE is closed.
        let waiters = pool_builder(MAX_WAITING_CONNECTIONS)
            .idle_timeout(Some(WAITING_IDLE))
            .build_unchecked(manager.clone());
        // Loss notification needs connections of our own to the servers the locks are on,
        // not an application's pool's (a Cluster's are made per master, below).
        let notifying =
            (self.loss_notification && external.is_none() && !cluster).then(|| manager.clone());
        let pool = match external {
            Some(pool) => Pool::External(pool),
            None => Pool::Managed(pool_builder(self.pool_size).build_unchecked(manager)),
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
}

/// What every store of a client shares, made once by `build_unchecked`.
struct Parts {
    timer: crate::store::timer::Timer,
    maker: Arc<ScheduledThreadPool>,
    requests: Arc<AtomicU64>,
    #[cfg(feature = "cluster")]
    cluster_base: Option<redis::ConnectionInfo>,
}

/// Where a Redlock server listed at `addr` is reached, for telling one listed twice: a TCP
/// server's host name and port as written, and every address the name resolves to now (so
/// `localhost` and `127.0.0.1` meet at `127.0.0.1:6379`; IPv4-mapped IPv6 addresses count as
/// IPv4); a Unix socket's path, resolved if it exists. The database is left out: another
/// database of one server is the same server.
///
/// Address resolution only, at build, which connects to nothing: a Redlock must build (and
/// work) while a minority of its servers is down, and a server down at build could not tell
/// its identity anyway. So one server reached under two addresses that do not resolve alike
/// (two interfaces, a proxy, NAT) is not caught; a name that does not resolve at build is
/// compared as written. Asking each server for its `run_id` would catch those too, but only
/// for the servers up at build, at the cost of a connection to each.
fn server_places(addr: &redis::ConnectionAddr) -> Vec<String> {
    use std::net::ToSocketAddrs;
    let (host, port) = match addr {
        redis::ConnectionAddr::Tcp(host, port) => (host, *port),
        redis::ConnectionAddr::TcpTls { host, port, .. } => (host, *port),
        redis::ConnectionAddr::Unix(path) => {
            let path = std::fs::canonicalize(path).unwrap_or_else(|_| path.clone());
            return vec![format!("unix socket {}", path.display())];
        }
        // A kind of address added to the `redis` crate later: as written.
        other => return vec![other.to_string()],
    };
    let host = host.trim_start_matches('[').trim_end_matches(']');
    let mut places = vec![format!("{}:{port}", host.to_ascii_lowercase())];
    if let Ok(resolved) = (host, port).to_socket_addrs() {
        places
            .extend(resolved.map(|at| {
                std::net::SocketAddr::new(at.ip().to_canonical(), at.port()).to_string()
            }));
    }
    places
}

/// Which deployment the client locks on, as lease handles record it
/// (`handle::origin_matches`): `kind;db;server;...`, each server the places it is reached at
/// (`server_places`: as written and resolved, sorted) joined by `,`. A Sentinel master is
/// known by its name, a Cluster only as one (its seeds differ from client to client). No
/// passwords: addresses and names only.
fn origin(source: &Source) -> String {
    let server = |client: &redis::Client| {
        let info = client.get_connection_info();
        let mut places = server_places(info.addr());
        places.sort();
        places.dedup();
        (info.redis_settings().db(), places.join(","))
    };
    let servers = |kind: &str, clients: Vec<redis::Client>| {
        let found: Vec<(i64, String)> = clients.iter().map(server).collect();
        let db = found.first().map_or(0, |(db, _)| *db);
        let mut text = format!("{kind};{db}");
        for (_, places) in found {
            text.push(';');
            text.push_str(&places);
        }
        text
    };
    let open = |url: &String| redis::Client::open(url.as_str()).ok();
    match source {
        Source::Url(url) => servers("server", open(url).into_iter().collect()),
        Source::Pool(_, client) => servers("server", vec![(**client).clone()]),
        Source::Redlock(urls) => servers("redlock", urls.iter().filter_map(open).collect()),
        #[cfg(feature = "cluster")]
        Source::Cluster(_) => "cluster;0".to_owned(),
        Source::Sentinel { master, .. } => format!("sentinel;0;{master}"),
    }
}

/// `target` is only asked for sources with one store.
fn unreachable_redlock() -> Result<Target> {
    Err(Error::invalid(
        "urls",
        "a redlock client has one target per server",
    ))
}

/// The URL with its password replaced by `***`, for logs, `Debug` and errors: the password of
/// the user information (`redis://user:secret@host/`), also when it holds a `/`, `?` or `#`
/// that ends the authority early (such a URL does not parse, and its error shows it), and
/// the `pass` query parameter that redis-rs reads for Unix sockets
/// (`redis+unix:///path?pass=secret`).
pub(crate) fn redact_url(url: &str) -> String {
    redact_query(&redact_userinfo(url))
}

fn redact_userinfo(url: &str) -> String {
    // After the scheme and its slashes, however many were typed (`redis:/:pw@h/` does not
    // parse, and its error quotes it).
    let Some(colon) = url.find(':') else {
        return url.to_owned();
    };
    let slashes = url[colon + 1..].len() - url[colon + 1..].trim_start_matches('/').len();
    let start = colon + 1 + slashes;
    let rest = &url[start..];
    let authority_end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let at = match rest[..authority_end].rfind('@') {
        Some(at) => at,
        // No `@` in the authority, but one later after a `user:` part: a password with a
        // character that ended the authority early. Everything up to the last `@` is hidden.
        None => match rest.rfind('@') {
            Some(at) if rest[..at].contains(':') => at,
            _ => return url.to_owned(),
        },
    };
    let userinfo = &rest[..at];
    let user = match userinfo.split_once(':') {
        Some((user, _)) if !user.contains(['/', '?', '#']) => user,
        _ => "",
    };
    format!("{}{user}:***{}", &url[..start], &rest[at..])
}

fn redact_query(url: &str) -> String {
    let Some(q) = url.find('?') else {
        return url.to_owned();
    };
    let end = url[q..].find('#').map_or(url.len(), |i| q + i);
    let pairs: Vec<String> = url[q + 1..end]
        .split('&')
        .map(|pair| match pair.split_once('=') {
            Some((k, _))
                if k.eq_ignore_ascii_case("pass") || k.eq_ignore_ascii_case("password") =>
            {
                format!("{k}=***")
            }
            _ => pair.to_owned(),
        })
        .collect();
    format!("{}?{}{}", &url[..q], pairs.join("&"), &url[end..])
}

#[cfg(test)]
mod tests {
    use super::redact_url;

    #[test]
    fn passwords_are_redacted() {
        assert_eq!(
            redact_url("redis://127.0.0.1:6379/0"),
            "redis://127.0.0.1:6379/0"
        );
        assert_eq!(redact_url("redis://:hunter2@h:1/"), "redis://:***@h:1/");
        assert_eq!(redact_url("rediss://bob:hunter2@h/"), "rediss://bob:***@h/");
        assert_eq!(redact_url("redis://hunter2@h/"), "redis://:***@h/");
        assert!(!redact_url("redis://u:p@ss@h/").contains("p@ss"));
    }

    #[test]
    fn passwords_that_end_the_authority_early_or_sit_in_the_query_are_redacted() {
        for (url, secret) in [
            ("redis://:pa/ss@127.0.0.1:6379/", "pa/ss"),
            ("redis://:p#ss@127.0.0.1:6379/", "p#ss"),
            ("redis://bob:p?ss@h:notaport/", "p?ss"),
            ("redis+unix:///tmp/x.sock?pass=hunter2pw", "hunter2pw"),
            (
                "unix:///tmp/x.sock?db=1&pass=hunter2pw&user=bob",
                "hunter2pw",
            ),
            (
                "redis+unix:///tmp/x.sock?PASSWORD=hunter2pw#frag",
                "hunter2pw",
            ),
            ("redis:/:hunter2pw@127.0.0.1:notaport/", "hunter2pw"),
            ("redis::hunter2pw@127.0.0.1/", "hunter2pw"),
        ] {
            let shown = redact_url(url);
            assert!(!shown.contains(secret), "{url} -> {shown}");
            assert!(shown.contains("***"), "{url} -> {shown}");
        }
        assert_eq!(
            redact_url("redis://bob:p?ss@h:notaport/"),
            "redis://bob:***@h:notaport/"
        );
        assert_eq!(
            redact_url("unix:///tmp/x.sock?db=1&pass=s3&user=bob"),
            "unix:///tmp/x.sock?db=1&pass=***&user=bob"
        );
        // Nothing secret: unchanged.
        for url in [
            "redis+unix:///tmp/x.sock?db=2",
            "redis://h:1/?protocol=resp3",
            "redis+unix:///tmp/x.sock?user=a@b",
        ] {
            assert_eq!(redact_url(url), url);
        }
    }
}
