//! What the client shares between its clones: pools, settings, the registry of held locks;
//! and the Redis operations, one script call each.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU8, AtomicU64, Ordering};
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use parking_lot::Mutex;

use crate::connection::{Manager, Pool, PooledConn};
use crate::error::{Error, Result};
use crate::info::LockInfo;
use crate::keys::LockKeys;
use crate::lease::{Lease, LeaseState, ReleaseOutcome};
use crate::options::{LockOptions, MAX_METADATA_LEN, MAX_TTL, ReplicaAck};
use crate::retry::{RetryStrategy, Step};
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
    pub(crate) pool: Pool,
    /// Waiters block in `BLPOP` on connections of their own, so that a crowd of waiters can
    /// never take the connections holders need to renew and release.
    pub(crate) waiters: r2d2::Pool<Manager>,
    pub(crate) config: Config,
    /// Locks held through this client, for `release_all`.
    held: Mutex<HashMap<u64, Weak<Lease>>>,
    next_lease: AtomicU64,
    /// Redis requests sent by this client (all clones), for benchmarks and diagnostics.
    pub(crate) requests: AtomicU64,
    /// `host \n pid \n`, the start of the holder information stored with each lock.
    holder: String,
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

/// How long a waiter's registration outlives the wait it announced: time to come back after
/// its `BLPOP` ends before it is taken for dead. The scripts carry the value as a literal; a
/// unit test keeps the two equal.
#[allow(dead_code)]
pub(crate) const WAITER_MARGIN: Duration = Duration::from_millis(1000);

/// How long a release's grant to a waiter lives unless the waiter claims it or renews. Carried
/// by the scripts as a literal, like `WAITER_MARGIN`.
pub(crate) const HANDOFF_GRACE: Duration = Duration::from_millis(1000);

/// Longest single wait of a fair waiter: it checks in at least this often, so a dead one is
/// noticed within `FAIR_CHECK_IN + WAITER_MARGIN`.
pub(crate) const FAIR_CHECK_IN: Duration = Duration::from_secs(2);

/// How a waiter that is woken by notification polls when no waiter connection is free.
const NO_CONNECTION_POLL: Duration = Duration::from_millis(10);

/// Result of one acquisition attempt.
enum Attempt {
    Acquired {
        fence: u64,
    },
    Busy {
        /// The holder's remaining TTL (`None`: no expiry or no holder).
        holder_ttl: Option<Duration>,
        /// Set when the attempt registered us as a waiter: how long to wait at most before
        /// coming back (Redis bounds it by the holder's TTL and, behind a fair queue's head,
        /// by when the head's registration lapses).
        block: Option<Duration>,
        /// No grant we could pop was pending: a grant popped later was made after this attempt.
        fresh: bool,
        /// Server time of the reply, Unix ms.
        server_ms: u64,
    },
}

/// A grant popped from a wake-up list: `token fence server_ms`.
struct Grant {
    token: String,
    fence: u64,
    server_ms: u64,
}

/// What a registered waiter remembers of its latest registration, to judge a grant it pops.
#[derive(Clone, Copy)]
struct Registration {
    /// When the registering attempt was sent: any grant made later expires no earlier than
    /// this plus the handoff grace.
    sent: Instant,
    fresh: bool,
    /// Server time of the registration, Unix ms: a grant stamped at or after it was made
    /// after the registration.
    server_ms: u64,
}

/// How a lease starts.
struct Start {
    token: String,
    fence: u64,
    acquired_at: Instant,
    /// Conservative: measured from before the request that set the TTL was sent.
    expires_at: Instant,
    next_renew: Instant,
    unclaimed: Option<String>,
    registration: String,
    grant: String,
}

/// One acquisition's identity as a waiter.
struct Waiter {
    /// Names the acquisition in the registry and its fair wake-up list.
    id: String,
    fair: bool,
    /// Registered by an earlier attempt of this acquisition.
    registered: bool,
}

impl Waiter {
    fn flags(&self) -> &'static str {
        match (self.fair, self.registered) {
            (false, false) => "",
            (false, true) => "w",
            (true, false) => "f",
            (true, true) => "fw",
        }
    }
}

/// Result of one renewal.
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

fn ms(d: Duration) -> u64 {
    // Callers validated d <= MAX_TTL, so this cannot truncate.
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
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
    pub(crate) fn new(pool: Pool, waiters: r2d2::Pool<Manager>, config: Config) -> Inner {
        Inner {
            pool,
            waiters,
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
    pub(crate) fn conn(&self) -> Result<PooledConn> {
        let timeout = if self.pool.state().connections == 0 {
            self.config.connect_timeout
        } else {
            self.config.pool_timeout
        };
        let conn = self.pool.get_timeout(timeout)?;
        self.requests.fetch_add(1, Ordering::Relaxed);
        Ok(conn)
    }

    /// One attempt. If the lock is busy and `register` is not zero, the same script registers
    /// us as a waiter that comes back within `register` (see `scripts::ACQUIRE`). `wake` is the
    /// list we block on.
    #[allow(clippy::too_many_arguments)]
    fn attempt(
        &self,
        name: &str,
        keys: &LockKeys,
        token: &str,
        ttl: Duration,
        opts: &LockOptions,
        waiter: &Waiter,
        wake: &str,
        register: Duration,
    ) -> Result<Attempt> {
        let mut conn = self.conn()?;
        let (status, value, block, fresh, server_ms): (i64, i64, i64, i64, i64) = scripts::ACQUIRE
            .key(&keys.lock)
            .key(&keys.fence)
            .key(&keys.waiters)
            .key(&keys.queue)
            .key(&keys.signal)
            .key(wake)
            .arg(token)
            .arg(ms(ttl))
            .arg(&self.holder)
            .arg(opts.metadata.as_deref().unwrap_or(""))
            .arg(ms(opts.hold_at_least))
            .arg(&waiter.id)
            .arg(ms(register))
            .arg(waiter.flags())
            .invoke(conn.con())?;
        match status {
            1 => {
                let fence = u64::try_from(value).unwrap_or(0);
                if let Some(ack) = opts.replicas
                    && let Err(e) = self.await_replicas(&mut conn, name, ack)
                {
                    self.undo_acquire(conn, name, keys, token);
                    return Err(e);
                }
                Ok(Attempt::Acquired { fence })
            }
            -2 => Err(Error::WrongType {
                redis_key: keys.lock.clone(),
            }),
            -3 => Err(Error::WrongType {
                redis_key: keys.fence.clone(),
            }),
            -4 => Err(Error::WrongType {
                redis_key: keys.signal.clone(),
            }),
            _ => Ok(Attempt::Busy {
                holder_ttl: u64::try_from(value).ok().map(Duration::from_millis),
                block: u64::try_from(block).ok().map(Duration::from_millis),
                fresh: fresh == 1,
                server_ms: u64::try_from(server_ms).unwrap_or(0),
            }),
        }
    }

    /// `WAIT` (or `WAITAOF`) on the connection that wrote the lock: it counts the replicas
    /// that have processed (or fsynced) everything this connection wrote. The reply may take
    /// the whole `timeout`, so the connection's reply timeout is raised for it.
    fn await_replicas(&self, conn: &mut PooledConn, name: &str, ack: ReplicaAck) -> Result<()> {
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
    fn undo_acquire(&self, mut conn: PooledConn, name: &str, keys: &LockKeys, token: &str) {
        let run = |conn: &mut PooledConn| -> Result<i64> {
            Ok(scripts::RELEASE
                .key(&keys.lock)
                .key(&keys.fence)
                .key(&keys.signal)
                .key(&keys.waiters)
                .key(&keys.queue)
                .arg(token)
                .arg(1)
                .arg(token::new_token()?)
                .arg("")
                .invoke(conn.con())?)
        };
        let result = if conn.con().is_open() {
            self.requests.fetch_add(1, Ordering::Relaxed);
            run(&mut conn)
        } else {
            // The connection broke (the WAIT timed out or was cut): it goes back to be dropped.
            drop(conn);
            self.conn().and_then(|mut fresh| run(&mut fresh))
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

    /// Unregisters a waiter that gives up, passing on a grant a release made for it.
    fn leave(&self, keys: &LockKeys, waiter: &Waiter) {
        let r = self.conn().and_then(|mut conn| {
            scripts::LEAVE
                .key(&keys.lock)
                .key(&keys.fence)
                .key(&keys.signal)
                .key(&keys.waiters)
                .key(&keys.queue)
                .key(keys.wake(&waiter.id))
                .arg(&waiter.id)
                .arg(token::new_token()?)
                .invoke::<i64>(conn.con())
                .map_err(Error::from)
        });
        if let Err(error) = r {
            // The registration lapses by itself within the waiter margin.
            tracing::debug!(target: "redis_lock", %error, "leaving the waiter registry failed");
        }
    }

    pub(crate) fn renew(&self, keys: &LockKeys, token: &str, ttl: Duration) -> Result<Renewal> {
        let mut conn = self.conn()?;
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

    /// Makes a popped grant ours: holder information, minimum hold, full TTL; forgets the
    /// waiter registration `registration` (if not empty). The fencing token, or why the grant
    /// is not ours any more.
    #[allow(clippy::too_many_arguments)]
    fn claim(
        &self,
        conn: &mut PooledConn,
        keys: &LockKeys,
        grant: &str,
        ttl: Duration,
        meta: &str,
        hold_at_least: Duration,
        registration: &str,
    ) -> Result<std::result::Result<u64, Renewal>> {
        let r: i64 = scripts::CLAIM
            .key(&keys.lock)
            .key(&keys.waiters)
            .arg(grant)
            .arg(ms(ttl))
            .arg(&self.holder)
            .arg(meta)
            .arg(ms(hold_at_least))
            .arg(registration)
            .invoke(conn.con())?;
        Ok(match r {
            -2 => Err(Renewal::Gone),
            r if r < 0 => Err(Renewal::Taken),
            fence => Ok(u64::try_from(fence).unwrap_or(0)),
        })
    }

    /// The watchdog's renewal: a plain renewal, or the claim of a lock taken by popping a
    /// grant (see `Start::unclaimed`).
    pub(crate) fn renew_lease(&self, lease: &Lease, ttl: Duration) -> Result<Renewal> {
        let unclaimed = lease.state.lock().unclaimed.clone();
        let Some(meta) = unclaimed else {
            return self.renew(&lease.keys, &lease.token, ttl);
        };
        let mut conn = self.conn()?;
        let r = self.claim(
            &mut conn,
            &lease.keys,
            &lease.token,
            ttl,
            &meta,
            Duration::ZERO,
            &lease.registration,
        )?;
        Ok(match r {
            Ok(_) => {
                lease.state.lock().unclaimed = None;
                Renewal::Renewed
            }
            Err(lost) => lost,
        })
    }

    pub(crate) fn release(
        &self,
        keys: &LockKeys,
        token: &str,
        grant: &str,
        registration: &str,
    ) -> Result<ReleaseOutcome> {
        let mut conn = self.conn()?;
        let r: i64 = scripts::RELEASE
            .key(&keys.lock)
            .key(&keys.fence)
            .key(&keys.signal)
            .key(&keys.waiters)
            .key(&keys.queue)
            .arg(token)
            .arg(0)
            .arg(grant)
            .arg(registration)
            .invoke(conn.con())?;
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

    /// Remaining TTL of a lock we hold: `Ok(None)` when it has no expiry, `Err(Lost)` when it
    /// is not ours any more.
    pub(crate) fn owned_ttl(&self, lease: &Lease) -> Result<Option<Duration>> {
        let mut conn = self.conn()?;
        let r: i64 = scripts::OWNED_TTL
            .key(&lease.keys.lock)
            .arg(&lease.token)
            .invoke(conn.con())?;
        match r {
            -1 => Ok(None),
            -2 | -3 => {
                let reason = if r == -2 {
                    crate::LostReason::Expired
                } else {
                    crate::LostReason::TakenOver
                };
                lease.mark_lost(reason);
                Err(Error::Lost {
                    key: lease.name.clone(),
                    reason,
                })
            }
            ms => Ok(Some(Duration::from_millis(u64::try_from(ms).unwrap_or(0)))),
        }
    }

    pub(crate) fn inspect(&self, name: &str) -> Result<Option<LockInfo>> {
        let keys = LockKeys::new(&self.config.namespace, name)?;
        let mut conn = self.conn()?;
        let v: Vec<redis::Value> = scripts::INSPECT.key(&keys.lock).invoke(conn.con())?;
        if v.is_empty() {
            return Ok(None);
        }
        if v.len() == 1 {
            return Err(Error::WrongType {
                redis_key: keys.lock,
            });
        }
        LockInfo::from_reply(name, &v).map(Some)
    }

    pub(crate) fn force_release(&self, name: &str) -> Result<Option<(String, u32)>> {
        let keys = LockKeys::new(&self.config.namespace, name)?;
        let mut conn = self.conn()?;
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
                redis_key: keys.signal,
            }),
            _ => Err(Error::WrongType {
                redis_key: keys.lock,
            }),
        }
    }

    /// Blocks until a release pushes a grant to the wake-up list `list`, or `timeout` passes,
    /// and returns the grant. Waiters use their own pool; when it is exhausted they fall back
    /// to polling every 10 ms (they stay registered, and an attempt of theirs takes a grant
    /// nobody popped).
    fn wait_for_release(&self, list: &str, timeout: Duration) -> Option<Grant> {
        let conn = match self.waiters.try_get() {
            Some(c) => Some(c),
            None if self.waiters.state().connections < self.waiters.max_size() => self
                .waiters
                .get_timeout(self.config.connect_timeout.min(timeout))
                .ok(),
            None => None,
        };
        let Some(mut conn) = conn else {
            std::thread::sleep(timeout.min(NO_CONNECTION_POLL));
            return None;
        };
        self.requests.fetch_add(1, Ordering::Relaxed);
        // BLPOP takes seconds as a decimal; 0 would mean "forever".
        let secs = timeout.as_secs_f64().max(0.001);
        let r: redis::RedisResult<Option<(String, String)>> =
            conn.blocking_query(redis::cmd("BLPOP").arg(list).arg(secs), timeout);
        match r {
            Ok(Some((_, grant))) => {
                let mut parts = grant.split(' ');
                let token = parts.next()?.to_owned();
                let fence = parts.next()?.parse().ok()?;
                let server_ms = parts.next()?.parse().ok()?;
                Some(Grant {
                    token,
                    fence,
                    server_ms,
                })
            }
            Ok(None) => None,
            Err(error) => {
                tracing::debug!(target: "redis_lock", %error, "waiting for a release failed");
                // Do not spin against a Redis that fails at once.
                std::thread::sleep(timeout.min(NO_CONNECTION_POLL));
                None
            }
        }
    }

    /// The acquire loop: attempt, then wait as the retry strategy says, until acquired, the
    /// wait budget is spent, or the strategy gives up. `Ok(None)`: busy until the end.
    pub(crate) fn acquire(
        self: &Arc<Self>,
        name: &str,
        opts: &LockOptions,
        deadline: &Deadline,
    ) -> Result<Option<Arc<Lease>>> {
        let keys = LockKeys::new(&self.config.namespace, name)?;
        let ttl = opts.ttl.unwrap_or(self.config.default_ttl);
        validate_ttl(ttl)?;
        if opts.hold_at_least > MAX_TTL {
            return Err(Error::invalid(
                "hold_at_least",
                format!("longer than {MAX_TTL:?}"),
            ));
        }
        if let Some(ack) = opts.replicas
            && ack.timeout > MAX_TTL
        {
            return Err(Error::invalid(
                "replicas",
                format!("the acknowledgement timeout is longer than {MAX_TTL:?}"),
            ));
        }
        if opts
            .metadata
            .as_ref()
            .is_some_and(|m| m.len() > MAX_METADATA_LEN)
        {
            return Err(Error::invalid(
                "metadata",
                format!("longer than {MAX_METADATA_LEN} bytes"),
            ));
        }
        if opts.reentrant
            && let Some(lease) = reentrant::find(self, name)
        {
            lease.add_hold();
            tracing::debug!(target: "redis_lock", key = name, "lock re-entered");
            return Ok(Some(lease));
        }
        let retry = opts.retry.as_ref().unwrap_or(&self.config.default_retry);
        let ids = token::new_ids()?;
        let token = ids.token;
        let mut waiter = Waiter {
            id: ids.waiter,
            fair: retry.is_fair(),
            registered: false,
        };
        let watchdog = opts.watchdog.unwrap_or(self.config.watchdog);
        // The wake-up list this acquisition blocks on: fair waiters are woken one by one, in
        // order; the others share one list, from which Redis serves the longest-blocked first.
        let wake = if waiter.fair {
            keys.wake(&waiter.id)
        } else {
            keys.signal.clone()
        };
        let mut registration: Option<Registration> = None;
        let mut attempt = 0u32;
        loop {
            attempt += 1;
            let left = deadline.at.saturating_duration_since(Instant::now());
            let register = if retry.notified() && retry.may_wait_after(attempt, left) {
                if waiter.fair {
                    left.min(FAIR_CHECK_IN)
                } else {
                    left
                }
            } else {
                Duration::ZERO
            };
            let sent = Instant::now();
            let result = self.attempt(name, &keys, &token, ttl, opts, &waiter, &wake, register);
            let (holder_ttl, block) = match result {
                Err(e) => {
                    if waiter.registered {
                        self.leave(&keys, &waiter);
                    }
                    return Err(e);
                }
                Ok(Attempt::Acquired { fence }) => {
                    let start = Start {
                        token,
                        fence,
                        acquired_at: sent,
                        expires_at: sent + ttl,
                        next_renew: sent + ttl / 3,
                        unclaimed: None,
                        registration: String::new(),
                        grant: ids.grant,
                    };
                    let lease = self.hold(name, keys, start, ttl, opts, watchdog)?;
                    tracing::debug!(
                        target: "redis_lock",
                        key = name,
                        fence,
                        attempts = attempt,
                        waited = ?deadline.started.elapsed(),
                        "lock acquired"
                    );
                    return Ok(Some(lease));
                }
                Ok(Attempt::Busy {
                    holder_ttl,
                    block,
                    fresh,
                    server_ms,
                }) => {
                    if block.is_some() {
                        waiter.registered = true;
                        registration = Some(Registration {
                            sent,
                            fresh,
                            server_ms,
                        });
                    }
                    (holder_ttl, block)
                }
            };
            let left = deadline.at.saturating_duration_since(Instant::now());
            let popped = match retry.next(attempt, left, holder_ttl, block) {
                Step::Stop => {
                    if waiter.registered {
                        self.leave(&keys, &waiter);
                    }
                    return Ok(None);
                }
                Step::Sleep(d) => {
                    std::thread::sleep(d);
                    None
                }
                Step::WaitSignal(d) => self.wait_for_release(&wake, d),
            };
            let Some(grant) = popped else {
                continue;
            };
            if let Some(lease) = self.take_grant(
                name,
                &keys,
                grant,
                &waiter,
                registration,
                ttl,
                opts,
                watchdog,
                &ids.grant,
                deadline,
            )? {
                return Ok(Some(lease));
            }
        }
    }

    /// A release granted us the lock through the wake-up list: adopt the grant, or claim it.
    /// `Ok(None)` when somebody took the grant first (it had lapsed): keep waiting.
    #[allow(clippy::too_many_arguments)]
    fn take_grant(
        self: &Arc<Self>,
        name: &str,
        keys: &LockKeys,
        grant: Grant,
        waiter: &Waiter,
        registration: Option<Registration>,
        ttl: Duration,
        opts: &LockOptions,
        watchdog: bool,
        next_grant: &str,
        deadline: &Deadline,
    ) -> Result<Option<Arc<Lease>>> {
        // Fair waiters left the registry with the grant; a non-fair registration is removed by
        // the claim or the release.
        let leftover = if waiter.fair {
            String::new()
        } else {
            waiter.id.clone()
        };
        let now = Instant::now();
        // Made after our registration (Redis's clock says so, and nothing that could be
        // popped was pending then), so it lives at least until `r.sent` plus the grace.
        let vouched = registration.filter(|r| {
            r.fresh
                && grant.server_ms >= r.server_ms
                && now.duration_since(r.sent) < HANDOFF_GRACE / 2
        });
        if let Some(r) = vouched
            && watchdog
            && opts.hold_at_least.is_zero()
            && opts.replicas.is_none()
        {
            // Ours without another round trip. The watchdog claims it (holder information,
            // full TTL) at its first renewal.
            let start = Start {
                token: grant.token,
                fence: grant.fence,
                acquired_at: now,
                expires_at: r.sent + HANDOFF_GRACE,
                next_renew: r.sent + HANDOFF_GRACE / 3,
                unclaimed: Some(opts.metadata.clone().unwrap_or_default()),
                registration: leftover,
                grant: next_grant.to_owned(),
            };
            let lease = self.hold(name, keys.clone(), start, ttl, opts, watchdog)?;
            tracing::debug!(target: "redis_lock", key = name, fence = grant.fence, waited = ?deadline.started.elapsed(), "lock handed over");
            return Ok(Some(lease));
        }
        // A grant we cannot vouch for (it may predate our registration), or one that needs our
        // information, minimum hold or replica acknowledgement in place now: claim it.
        let sent = Instant::now();
        let mut conn = self.conn()?;
        let meta = opts.metadata.as_deref().unwrap_or("");
        let claimed = self.claim(
            &mut conn,
            keys,
            &grant.token,
            ttl,
            meta,
            opts.hold_at_least,
            &leftover,
        )?;
        let Ok(fence) = claimed else {
            return Ok(None);
        };
        if let Some(ack) = opts.replicas
            && let Err(e) = self.await_replicas(&mut conn, name, ack)
        {
            self.undo_acquire(conn, name, keys, &grant.token);
            return Err(e);
        }
        drop(conn);
        let start = Start {
            token: grant.token,
            fence,
            acquired_at: sent,
            expires_at: sent + ttl,
            next_renew: sent + ttl / 3,
            unclaimed: None,
            registration: String::new(),
            grant: next_grant.to_owned(),
        };
        let lease = self.hold(name, keys.clone(), start, ttl, opts, watchdog)?;
        tracing::debug!(target: "redis_lock", key = name, fence, waited = ?deadline.started.elapsed(), "lock handed over and claimed");
        Ok(Some(lease))
    }

    fn hold(
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
            return Err(Error::Redis(redis::RedisError::from(e)));
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
