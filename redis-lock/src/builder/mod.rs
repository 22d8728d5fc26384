//! `Builder`: every client setting and its default in one place.
//!
//! `build` is `validate` (every setting checked before anything starts, `validate.rs`), then
//! `build_unchecked` (`assemble.rs`): the targets the settings name (`target.rs`), one store
//! per target, the deployment over them. `source.rs` is where the client was told to connect
//! and who it is, `redact.rs` keeps passwords out of what is shown.

use std::sync::Arc;
use std::time::Duration;

use crate::client::LockClient;
// Named by the documentation's links (`Error::InvalidInput`, ...); the code here returns the
// errors its parts make.
#[cfg(doc)]
use crate::error::Error;
use crate::error::Result;
use crate::retry::RetryStrategy;

mod assemble;
mod redact;
mod source;
mod target;
mod validate;

use source::Source;

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
}
