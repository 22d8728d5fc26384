//! Waiting for a lock: the acquire loop and the handoff protocol on the client side.
//!
//! One mechanism, in one place (the Redis side is `scripts.rs`: `ACQUIRE`, `CLAIM`, `LEAVE`
//! and the `hand_over` part of `RELEASE`; ARCHITECTURE.md explains the design):
//!
//! 1. An attempt that finds the lock busy registers the caller as a waiter, if it will wait,
//!    and says how long it may block (`block`) and whether its registration can vouch for a
//!    later grant (`fresh`, server time).
//! 2. The waiter blocks in `BLPOP` on a wake-up list (the shared one, or its own in fair mode)
//!    on a connection of the waiter pool, for at most `block` and its remaining budget.
//! 3. A release that sees live waiters grants the lock through that list to exactly one
//!    waiter: the one that pops it. The popper adopts the grant (no round trip; its watchdog
//!    claims it later) or claims it at once (`take_grant`).
//! 4. A waiter whose budget runs out leaves (`leave`), passing on a grant made for it.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use crate::backend::{Backend, Store};
use crate::connection::PooledConn;
use crate::error::{Error, Result};
use crate::keys::LockKeys;
use crate::lease::Lease;
use crate::ops::{Deadline, Inner, Renewal, Start, ms, validate_ttl};
use crate::options::{LockOptions, MAX_METADATA_LEN, MAX_TTL};
use crate::retry::Step;
use crate::{reentrant, scripts, token};

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
pub(crate) enum Attempt {
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
pub(crate) struct Grant {
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

/// One acquisition's identity as a waiter.
pub(crate) struct Waiter {
    /// Names the acquisition in the registry and its fair wake-up list.
    pub(crate) id: String,
    fair: bool,
    /// Registered by an earlier attempt of this acquisition.
    registered: bool,
}

/// How a wait on a wake-up list ended.
pub(crate) enum Wake {
    /// We popped a grant: the lock is ours under its token.
    Grant(Grant),
    /// Woken without taking anything (Redlock peeks), or the wait timed out.
    Nothing,
    /// The store could not be asked (the caller may try another one).
    Failed,
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

/// What one acquisition attempt sends, the same to every store it goes to. If the lock is
/// busy and `register` is not zero, the script registers us as a waiter that comes back within
/// `register` (see `scripts::ACQUIRE`); `wake` is the list we block on.
#[derive(Clone, Copy)]
pub(crate) struct AttemptArgs<'a> {
    pub(crate) name: &'a str,
    pub(crate) keys: &'a LockKeys,
    pub(crate) token: &'a str,
    pub(crate) ttl: Duration,
    pub(crate) opts: &'a LockOptions,
    pub(crate) waiter: &'a Waiter,
    pub(crate) wake: &'a str,
    pub(crate) register: Duration,
}

impl Inner {
    /// One attempt, on the single store or on every server of a quorum.
    fn attempt(&self, args: &AttemptArgs<'_>) -> Result<Attempt> {
        match &self.backend {
            Backend::Single(store) => self.attempt_on(store, args),
            Backend::Quorum(q) => q.attempt(self, args),
        }
    }

    /// One attempt on one store (see `attempt`).
    pub(crate) fn attempt_on(&self, store: &Store, args: &AttemptArgs<'_>) -> Result<Attempt> {
        let AttemptArgs {
            name,
            keys,
            token,
            ttl,
            opts,
            waiter,
            wake,
            register,
        } = *args;
        let mut conn = self.conn(store)?;
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
                    self.undo_acquire(store, conn, name, keys, token);
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

    /// Unregisters a waiter that gives up, passing on a grant a release made for it.
    fn leave(&self, keys: &LockKeys, waiter: &Waiter) {
        match &self.backend {
            Backend::Single(store) => self.leave_on(store, keys, waiter),
            Backend::Quorum(q) => {
                for store in q.stores() {
                    self.leave_on(store, keys, waiter);
                }
            }
        }
    }

    /// `leave` on one store.
    pub(crate) fn leave_on(&self, store: &Store, keys: &LockKeys, waiter: &Waiter) {
        let r = self.conn(store).and_then(|mut conn| {
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
        // Only a single store hands a lock over by grant (under Redlock a woken waiter attempts
        // again instead), so an unclaimed lease lives on a single store.
        let (Some(meta), Backend::Single(store)) = (unclaimed, &self.backend) else {
            return self.renew(&lease.keys, &lease.token, ttl);
        };
        let mut conn = self.conn(store)?;
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

    /// Blocks until a release pushes a grant to the wake-up list `list`, or `timeout` passes,
    /// and returns the grant. Under Redlock the waiter only peeks (see `Quorum::wait`): the
    /// grant is taken by attempting again on every server.
    fn wait_for_release(&self, list: &str, timeout: Duration) -> Option<Grant> {
        let wake = match &self.backend {
            Backend::Single(store) => self.wait_on(store, list, timeout, true),
            Backend::Quorum(q) => q.wait(self, list, timeout),
        };
        match wake {
            Wake::Grant(grant) => Some(grant),
            Wake::Nothing => None,
            Wake::Failed => {
                // Do not spin against a Redis that fails at once.
                std::thread::sleep(timeout.min(NO_CONNECTION_POLL));
                None
            }
        }
    }

    /// Waits on one store's wake-up list `list` for at most `timeout`. Waiters use their own
    /// pool; when it is exhausted they fall back to polling every 10 ms (they stay
    /// registered, and an attempt of theirs takes a grant nobody popped). `pop`: take the
    /// grant (`BLPOP`); otherwise only be woken by it and leave it in place (`BLMOVE` of the
    /// list onto itself).
    pub(crate) fn wait_on(&self, store: &Store, list: &str, timeout: Duration, pop: bool) -> Wake {
        let waiters = &store.waiters;
        let conn = match waiters.try_get() {
            Some(c) => Some(c),
            None if waiters.state().connections < waiters.max_size() => waiters
                .get_timeout(self.config.connect_timeout.min(timeout))
                .ok(),
            None => None,
        };
        let Some(mut conn) = conn else {
            if waiters.state().connections == 0 {
                // Nothing open and nothing could be opened: this store is unreachable.
                return Wake::Failed;
            }
            std::thread::sleep(timeout.min(NO_CONNECTION_POLL));
            return Wake::Nothing;
        };
        self.requests.fetch_add(1, Ordering::Relaxed);
        // Both take seconds as a decimal; 0 would mean "forever".
        let secs = timeout.as_secs_f64().max(0.001);
        if !pop {
            let cmd = redis::cmd("BLMOVE")
                .arg(list)
                .arg(list)
                .arg("LEFT")
                .arg("RIGHT")
                .arg(secs)
                .to_owned();
            let r: redis::RedisResult<Option<String>> = conn.blocking_query(&cmd, timeout);
            return match r {
                Ok(_) => Wake::Nothing,
                Err(error) => {
                    tracing::debug!(target: "redis_lock", %error, "waiting for a release failed");
                    Wake::Failed
                }
            };
        }
        let r: redis::RedisResult<Option<(String, String)>> =
            conn.blocking_query(redis::cmd("BLPOP").arg(list).arg(secs), timeout);
        match r {
            Ok(Some((_, grant))) => parse_grant(&grant).map_or(Wake::Nothing, Wake::Grant),
            Ok(None) => Wake::Nothing,
            Err(error) => {
                tracing::debug!(target: "redis_lock", %error, "waiting for a release failed");
                Wake::Failed
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
        if retry.is_fair() && matches!(self.backend, Backend::Quorum(_)) {
            return Err(Error::invalid(
                "retry",
                "fair waiting is not available under Redlock: each server would keep its own \
                 queue, and no one order holds across a majority; use a non-fair strategy",
            ));
        }
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
            let result = self.attempt(&AttemptArgs {
                name,
                keys: &keys,
                token: &token,
                ttl,
                opts,
                waiter: &waiter,
                wake: &wake,
                register,
            });
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
                        expires_at: sent + self.validity(ttl),
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
        let Backend::Single(store) = &self.backend else {
            // Grants are only popped from a single store (see `wait_for_release`).
            return Ok(None);
        };
        let sent = Instant::now();
        let mut conn = self.conn(store)?;
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
            self.undo_acquire(store, conn, name, keys, &grant.token);
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
}

/// `token fence server_ms`, as `hand_over` pushes it.
fn parse_grant(grant: &str) -> Option<Grant> {
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

#[cfg(all(test, feature = "testing"))]
mod tests {
    use super::*;
    use crate::testing::RedisServer;

    /// The cluster client resends a script after a reply timeout; when the first copy took the
    /// lock, the second must answer "acquired" with the same fencing token, not "busy".
    #[test]
    fn a_resent_acquire_finds_its_own_lock_acquired() {
        let server = RedisServer::start();
        let client = crate::LockClient::open(&server.url()).unwrap();
        let inner = &client.inner;
        let Backend::Single(store) = &inner.backend else {
            panic!("one server is a single store");
        };
        let keys = LockKeys::new(&inner.config.namespace, "resent").unwrap();
        let ids = token::new_ids().unwrap();
        let waiter = Waiter {
            id: ids.waiter,
            fair: false,
            registered: false,
        };
        let opts = LockOptions::default();
        let ttl = Duration::from_secs(10);
        let attempt = |token: &str| {
            let args = AttemptArgs {
                name: "resent",
                keys: &keys,
                token,
                ttl,
                opts: &opts,
                waiter: &waiter,
                wake: &keys.signal,
                register: ttl,
            };
            inner.attempt_on(store, &args).unwrap()
        };
        let Attempt::Acquired { fence } = attempt(&ids.token) else {
            panic!("the lock is free");
        };
        let Attempt::Acquired { fence: again } = attempt(&ids.token) else {
            panic!("a resent acquire was answered busy");
        };
        assert_eq!(again, fence, "the stored fencing token, not a new one");
        let counter: u64 = redis::cmd("GET")
            .arg(&keys.fence)
            .query(&mut server.connection())
            .unwrap();
        assert_eq!(counter, fence, "the counter did not move");
        // Anyone else is still refused.
        let other = token::new_ids().unwrap().token;
        assert!(matches!(attempt(&other), Attempt::Busy { .. }));
    }
}
