//! What the client shares between its clones: pools, settings, the registry of held locks;
//! and the Redis operations, one script call each.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU8, AtomicU64, Ordering};
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use parking_lot::Mutex;

use crate::backend::{Backend, Store};
use crate::connection::PooledConn;
use crate::error::{Error, Result};
use crate::info::LockInfo;
use crate::keys::LockKeys;
use crate::lease::{Lease, LeaseState, ReleaseOutcome};
use crate::options::{LockOptions, MAX_TTL, ReplicaAck};
use crate::retry::RetryStrategy;
use crate::{reentrant, scripts, token, watchdog};

/// Settings resolved by the builder.
#[derive(Debug, Clone)]
pub(crate) struct Config {
    pub(crate) namespace: String,
    pub(crate) default_ttl: Duration,
    pub(crate) default_wait: Duration,
    pub(crate) default_retry: RetryStrategy,
    pub(crate) watchdog: bool,
    pub(crate) connect_timeout: Duration,
    pub(crate) pool_timeout: Duration,
    /// `host` stored with every lock.
    pub(crate) host: String,
    /// Redis URL with the password replaced, for `Debug` and logs.
    pub(crate) redacted_url: String,
}

pub(crate) struct Inner {
    /// Where locks live: one store, or a quorum of independent ones (Redlock).
    pub(crate) backend: Backend,
    pub(crate) config: Config,
    /// Locks held through this client, for `release_all`.
    held: Mutex<HashMap<u64, Weak<Lease>>>,
    next_lease: AtomicU64,
    /// Redis requests sent by this client (all clones), for benchmarks and diagnostics.
    pub(crate) requests: AtomicU64,
    /// `host \n pid \n`, the start of the holder information stored with each lock.
    pub(crate) holder: String,
    /// Whether the server has `WAITAOF` (Redis 7.2+): `WAITAOF_UNKNOWN` until the first
    /// fsynced replica acknowledgement finds out.
    waitaof: AtomicU8,
}

const WAITAOF_UNKNOWN: u8 = 0;
const WAITAOF_YES: u8 = 1;
const WAITAOF_NO: u8 = 2;

fn is_unknown_command(e: &redis::RedisError) -> bool {
    e.to_string()
        .to_ascii_lowercase()
        .contains("unknown command")
}

/// How a lease starts.
pub(crate) struct Start {
    pub(crate) token: String,
    pub(crate) fence: u64,
    pub(crate) acquired_at: Instant,
    /// Conservative: measured from before the request that set the TTL was sent.
    pub(crate) expires_at: Instant,
    pub(crate) next_renew: Instant,
    pub(crate) unclaimed: Option<String>,
    pub(crate) registration: String,
    pub(crate) grant: String,
}

/// What one store says about the remaining TTL of a lock we hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum OwnedTtl {
    Left(Duration),
    NoExpiry,
    Gone,
    NotOurs,
}

/// Result of one renewal.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Renewal {
    Renewed,
    Gone,
    Taken,
}

/// What the acquire loop needs to know beyond the options.
pub(crate) struct Deadline {
    pub(crate) at: Instant,
    pub(crate) started: Instant,
}

pub(crate) fn ms(d: Duration) -> u64 {
    // Callers validated d <= MAX_TTL, so this cannot truncate.
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// The RELEASE script (see `scripts::RELEASE` for its replies). `ignore_min_hold` deletes the
/// lock even inside a minimum hold: an acquisition being undone was never held.
fn run_release(
    conn: &mut PooledConn,
    keys: &LockKeys,
    token: &str,
    ignore_min_hold: bool,
    grant: &str,
    registration: &str,
) -> Result<i64> {
    Ok(scripts::RELEASE
        .key(&keys.lock)
        .key(&keys.fence)
        .key(&keys.signal)
        .key(&keys.waiters)
        .key(&keys.queue)
        .arg(token)
        .arg(i32::from(ignore_min_hold))
        .arg(grant)
        .arg(registration)
        .invoke(conn.con())?)
}

pub(crate) fn validate_ttl(ttl: Duration) -> Result<()> {
    if ttl < Duration::from_millis(1) {
        return Err(Error::invalid(
            "ttl",
            format!("{ttl:?} is shorter than 1 ms (Redis expiry has millisecond resolution)"),
        ));
    }
    if ttl > MAX_TTL {
        return Err(Error::invalid(
            "ttl",
            format!("{ttl:?} is longer than the limit of {MAX_TTL:?}"),
        ));
    }
    Ok(())
}

impl Inner {
    pub(crate) fn new(backend: Backend, config: Config) -> Inner {
        Inner {
            backend,
            held: Mutex::new(HashMap::new()),
            next_lease: AtomicU64::new(0),
            requests: AtomicU64::new(0),
            holder: format!("{}\n{}\n", config.host, std::process::id()),
            waitaof: AtomicU8::new(WAITAOF_UNKNOWN),
            config,
        }
    }

    /// A pooled connection. With no connection open at all the question is whether Redis is
    /// reachable, and that is bounded by the connect timeout; otherwise the pool is busy and
    /// we wait up to the pool timeout for a connection to come back.
    pub(crate) fn conn(&self, store: &Store) -> Result<PooledConn> {
        let timeout = if store.pool.state().connections == 0 {
            self.config.connect_timeout
        } else {
            self.config.pool_timeout
        };
        let conn = store.pool.get_timeout(timeout).map_err(|pool_error| {
            match store.connect_error.lock().take() {
                Some(e) if crate::connection::is_refused_by_server(&e) => Error::Redis(e),
                _ => Error::Pool(pool_error),
            }
        })?;
        self.requests.fetch_add(1, Ordering::Relaxed);
        Ok(conn)
    }

    /// `WAIT` (or `WAITAOF`) on the connection that wrote the lock: it counts the replicas
    /// that have processed (or fsynced) everything this connection wrote. The reply may take
    /// the whole `timeout`, so the connection's reply timeout is raised for it.
    pub(crate) fn await_replicas(
        &self,
        conn: &mut PooledConn,
        name: &str,
        ack: ReplicaAck,
    ) -> Result<()> {
        let timeout_ms = ms(ack.timeout).max(1);
        let mut acked = None;
        if ack.fsync && self.waitaof.load(Ordering::Relaxed) != WAITAOF_NO {
            self.requests.fetch_add(1, Ordering::Relaxed);
            let cmd = redis::cmd("WAITAOF")
                .arg(0)
                .arg(ack.count)
                .arg(timeout_ms)
                .to_owned();
            match conn.blocking_query::<(i64, i64)>(&cmd, ack.timeout) {
                Ok((_local, replicas)) => {
                    self.waitaof.store(WAITAOF_YES, Ordering::Relaxed);
                    acked = Some(replicas);
                }
                Err(e) if is_unknown_command(&e) => {
                    if self.waitaof.swap(WAITAOF_NO, Ordering::Relaxed) != WAITAOF_NO {
                        tracing::warn!(
                            target: "redis_lock",
                            "the redis server has no WAITAOF (it needs redis 7.2); replica acknowledgement falls back to WAIT: replicas hold the lock in memory, not necessarily on disk"
                        );
                    }
                }
                Err(e) => return Err(e.into()),
            }
        }
        let acked = match acked {
            Some(n) => n,
            None => {
                self.requests.fetch_add(1, Ordering::Relaxed);
                let cmd = redis::cmd("WAIT").arg(ack.count).arg(timeout_ms).to_owned();
                conn.blocking_query::<i64>(&cmd, ack.timeout)?
            }
        };
        let acked = u32::try_from(acked).unwrap_or(0);
        if acked >= ack.count {
            return Ok(());
        }
        Err(Error::ReplicaAck {
            key: name.to_owned(),
            required: ack.count,
            acked,
        })
    }

    /// Deletes a lock this call wrote but cannot hand out (replicas did not acknowledge it),
    /// ignoring any minimum hold (and handing it to a waiter if one is registered). Uses the
    /// same connection when it still works, so a pool of one does not wait for a second
    /// connection.
    pub(crate) fn undo_acquire(
        &self,
        store: &Store,
        mut conn: PooledConn,
        name: &str,
        keys: &LockKeys,
        token: &str,
    ) {
        let run = |conn: &mut PooledConn| -> Result<i64> {
            run_release(conn, keys, token, true, &token::new_token()?, "")
        };
        let result = if conn.con().is_open() {
            self.requests.fetch_add(1, Ordering::Relaxed);
            run(&mut conn)
        } else {
            // The connection broke (the WAIT timed out or was cut): it goes back to be dropped.
            drop(conn);
            self.conn(store).and_then(|mut fresh| run(&mut fresh))
        };
        match result {
            Ok(_) => {
                tracing::debug!(target: "redis_lock", key = name, "acquisition undone: replicas did not acknowledge it")
            }
            Err(error) => {
                tracing::warn!(target: "redis_lock", key = name, %error, "undoing an unacknowledged acquisition failed; the lock expires with its ttl")
            }
        }
    }

    pub(crate) fn renew_on(
        &self,
        store: &Store,
        keys: &LockKeys,
        token: &str,
        ttl: Duration,
    ) -> Result<Renewal> {
        let mut conn = self.conn(store)?;
        let r: i64 = scripts::RENEW
            .key(&keys.lock)
            .arg(token)
            .arg(ms(ttl))
            .invoke(conn.con())?;
        Ok(match r {
            1 => Renewal::Renewed,
            0 => Renewal::Gone,
            _ => Renewal::Taken,
        })
    }

    pub(crate) fn release_on(
        &self,
        store: &Store,
        keys: &LockKeys,
        token: &str,
        grant: &str,
        registration: &str,
    ) -> Result<ReleaseOutcome> {
        let mut conn = self.conn(store)?;
        let r = run_release(&mut conn, keys, token, false, grant, registration)?;
        Ok(match r {
            1 | 2 => ReleaseOutcome::Released,
            0 => ReleaseOutcome::Late,
            -4 => {
                return Err(Error::WrongType {
                    redis_key: keys.signal.clone(),
                });
            }
            _ => ReleaseOutcome::Lost,
        })
    }

    /// Remaining TTL of a lock we hold, as one store sees it.
    pub(crate) fn owned_ttl_on(
        &self,
        store: &Store,
        keys: &LockKeys,
        token: &str,
    ) -> Result<OwnedTtl> {
        let mut conn = self.conn(store)?;
        let r: i64 = scripts::OWNED_TTL
            .key(&keys.lock)
            .arg(token)
            .invoke(conn.con())?;
        Ok(match r {
            -1 => OwnedTtl::NoExpiry,
            -2 => OwnedTtl::Gone,
            -3 => OwnedTtl::NotOurs,
            ms => OwnedTtl::Left(Duration::from_millis(u64::try_from(ms).unwrap_or(0))),
        })
    }

    pub(crate) fn inspect_on(
        &self,
        store: &Store,
        name: &str,
        keys: &LockKeys,
    ) -> Result<Option<LockInfo>> {
        let mut conn = self.conn(store)?;
        let v: Vec<redis::Value> = scripts::INSPECT.key(&keys.lock).invoke(conn.con())?;
        if v.is_empty() {
            return Ok(None);
        }
        if v.len() == 1 {
            return Err(Error::WrongType {
                redis_key: keys.lock.clone(),
            });
        }
        LockInfo::from_reply(name, &v).map(Some)
    }

    pub(crate) fn force_release_on(
        &self,
        store: &Store,
        keys: &LockKeys,
    ) -> Result<Option<(String, u32)>> {
        let mut conn = self.conn(store)?;
        let v: Vec<String> = scripts::FORCE_RELEASE
            .key(&keys.lock)
            .key(&keys.fence)
            .key(&keys.signal)
            .key(&keys.waiters)
            .key(&keys.queue)
            .arg(token::new_token()?)
            .invoke(conn.con())?;
        match v.as_slice() {
            [] => Ok(None),
            [host, pid] => Ok(Some((host.clone(), pid.parse().unwrap_or(0)))),
            [code] if code == "-4" => Err(Error::WrongType {
                redis_key: keys.signal.clone(),
            }),
            _ => Err(Error::WrongType {
                redis_key: keys.lock.clone(),
            }),
        }
    }

    pub(crate) fn hold(
        self: &Arc<Self>,
        name: &str,
        keys: LockKeys,
        start: Start,
        ttl: Duration,
        opts: &LockOptions,
        watchdog: bool,
    ) -> Result<Arc<Lease>> {
        let id = self.next_lease.fetch_add(1, Ordering::Relaxed);
        let at = start.acquired_at;
        let lease = Arc::new(Lease {
            id,
            inner: Arc::clone(self),
            name: name.to_owned(),
            keys,
            token: start.token,
            fence: start.fence,
            grant: start.grant,
            registration: start.registration,
            acquired_at: at,
            holds: 1.into(),
            state: Mutex::new(LeaseState {
                ttl,
                expires_at: start.expires_at,
                next_renew: start.next_renew,
                lost: None,
                stop: false,
                released: None,
                renew_until: opts.max_hold.and_then(|m| at.checked_add(m)),
                unclaimed: start.unclaimed,
            }),
            watchdog: Mutex::new(None),
            on_lost: opts.on_lost.clone(),
        });
        if watchdog && let Err(e) = watchdog::start(&lease) {
            let _ = lease.release();
            return Err(Error::System(e));
        }
        self.held.lock().insert(id, Arc::downgrade(&lease));
        reentrant::remember(self, &lease);
        Ok(lease)
    }

    pub(crate) fn forget(&self, lease: &Lease) {
        self.held.lock().remove(&lease.id);
    }

    pub(crate) fn held_leases(&self) -> Vec<Arc<Lease>> {
        self.held
            .lock()
            .values()
            .filter_map(Weak::upgrade)
            .collect()
    }
}

pub(crate) fn unix_ms(t: u64) -> SystemTime {
    UNIX_EPOCH + Duration::from_millis(t)
}
