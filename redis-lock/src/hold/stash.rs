//! A test-only primitive that proves the seam: a lock whose holder stores a value (its
//! metadata) that anyone can read while it is held, written in this one file and registered
//! by one row of the table of primitives (`hold/mod.rs`). Nothing else in the library knows
//! it, yet the tests below take it through the acquire loop, the watchdog, waiting (woken by
//! a release), lease handles and a Redlock quorum.
//!
//! A real primitive splits this file in three (ARCHITECTURE.md, "Adding a primitive"): its
//! scripts, requests and the seam in `wire/<primitive>/` (protocol facts live there only),
//! `Lock` here in `hold/<primitive>.rs`, a guard and client calls in the public surface.
//! Being test code, it keeps them together (`scripts/check-layers` treats a file gated by an
//! inner `cfg(test)` as test code).
//!
//! On the wire: the lock `ns{name}` is a hash (`token`, `fence`, `info`: `host \n pid \n
//! since`, `value`), the fencing counter `ns{name}:fence`, waiters in `ns{name}:waiters` (waiter
//! id → when the registration lapses), wake-ups on `ns{name}:signal`. A release that finds a
//! waiter pushes "look again" (`-`, not a grant: the waiter attempts again), so it has no
//! `Grants`; it has `Redlock` (its fencing counter is raised like the mutex's).

#![cfg(all(test, feature = "testing"))]

use std::sync::{Arc, LazyLock};
use std::time::Duration;

use redis::{Script, Value};

use super::Kind;
use super::primitive::{Lock, Params};
use crate::error::{Error, Result};
use crate::options::LockOptions;
use crate::wire::commit::{self, Check};
use crate::wire::request::Request;
use crate::wire::resp::Decimal;
use crate::wire::seam::{Primitive, Redlock};
use crate::wire::{
    Attempt, AttemptArgs, Broken, Holder, LockKeys, OwnedTtl, Release, ReleaseArgs, Renewal,
    decode_attempt_reply, decode_broken, decode_inspect, decode_owned_ttl, decode_release,
    decode_renew, ms,
};

/// KEYS: lock, fence, waiters. ARGV: token, ttl_ms, info, value, waiter id, register_ms.
/// `{1, fence, 0, 0, 0}` taken (or ours already: a resent request); `{0, pttl, block, 0, now}`
/// busy (`block` `-1`: not registered); `{-2, ..}` the lock key, `{-3, ..}` the fence key holds
/// another type.
static ACQUIRE: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r"
local h = redis.pcall('HMGET', KEYS[1], 'token', 'fence')
if h['err'] then return {-2, 0, 0, 0, 0} end
if h[1] == ARGV[1] then return {1, tonumber(h[2]) or 0, 0, 0, 0} end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
if h[1] == false then
  if redis.call('EXISTS', KEYS[1]) == 1 then return {-2, 0, 0, 0, 0} end
  local fence = redis.pcall('INCR', KEYS[2])
  if type(fence) == 'table' then return {-3, 0, 0, 0, 0} end
  redis.call('HSET', KEYS[1], 'token', ARGV[1], 'fence', fence, 'info', ARGV[3], 'value', ARGV[4])
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  redis.call('ZREM', KEYS[3], ARGV[5])
  return {1, fence, 0, 0, 0}
end
local pttl = redis.call('PTTL', KEYS[1])
local cap = tonumber(ARGV[6])
if cap <= 0 then return {0, pttl, -1, 0, now} end
local block = cap
if pttl >= 0 then block = math.max(1, math.min(cap, pttl + 1)) end
redis.call('ZADD', KEYS[3], now + block + 1000, ARGV[5])
if redis.call('PTTL', KEYS[3]) < block + 1000 then redis.call('PEXPIRE', KEYS[3], block + 1000) end
return {0, pttl, block, 0, now}
",
    )
});

/// KEYS: lock. ARGV: token, ttl_ms. `1` renewed, `0` gone, `-1` not ours.
static RENEW: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r"
local t = redis.pcall('HGET', KEYS[1], 'token')
if type(t) == 'table' then return -1 end
if t == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return 1
end
if t == false and redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
return -1
",
    )
});

/// KEYS: lock, waiters, signal. ARGV: token, own registration to forget (or ""). `1`
/// released (a waiter, if any, told to look again), `0` gone, `-1` not ours.
static RELEASE: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r"
local t = redis.pcall('HGET', KEYS[1], 'token')
if type(t) == 'table' then return -1 end
if t ~= ARGV[1] then
  if t == false and redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
  return -1
end
redis.call('DEL', KEYS[1])
if ARGV[2] ~= '' then redis.call('ZREM', KEYS[2], ARGV[2]) end
local c = redis.call('TIME')
redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', tonumber(c[1]) * 1000)
if redis.call('ZCARD', KEYS[2]) > 0 then
  redis.call('RPUSH', KEYS[3], '-')
  redis.call('PEXPIRE', KEYS[3], 1000)
end
return 1
",
    )
});

/// KEYS: lock. ARGV: token. The ms left, `-1` no expiry, `-2` gone, `-3` not ours.
const OWNED_TTL_LUA: &str = r"
local t = redis.pcall('HGET', KEYS[1], 'token')
if type(t) == 'table' then return -3 end
if t == ARGV[1] then return redis.call('PTTL', KEYS[1]) end
if t == false and redis.call('EXISTS', KEYS[1]) == 0 then return -2 end
return -3
";

static OWNED_TTL: LazyLock<Script> = LazyLock::new(|| Script::new(OWNED_TTL_LUA));

/// A commit's commands, after the same check (`wire/commit.rs`).
static COMMIT: LazyLock<Script> = LazyLock::new(|| commit::script(OWNED_TTL_LUA));

/// KEYS: lock. ARGV: token, fresh token. Moves the lock to the fresh token: the ms left, `-1`
/// no expiry, `-2` gone, `-3` not ours.
static TRANSFER: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r"
local t = redis.pcall('HGET', KEYS[1], 'token')
if type(t) == 'table' then return -3 end
if t == ARGV[1] then
  redis.call('HSET', KEYS[1], 'token', ARGV[2])
  return redis.call('PTTL', KEYS[1])
end
if t == false and redis.call('EXISTS', KEYS[1]) == 0 then return -2 end
return -3
",
    )
});

/// KEYS: lock. ARGV: token, value. The PTTL, `-2` gone, `-3` not ours.
static PROCLAIM: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r"
local t = redis.pcall('HGET', KEYS[1], 'token')
if type(t) == 'table' then return -3 end
if t == false then return -2 end
if t ~= ARGV[1] then return -3 end
redis.call('HSET', KEYS[1], 'value', ARGV[2])
return redis.call('PTTL', KEYS[1])
",
    )
});

/// KEYS: waiters. ARGV: waiter id. `1`.
static LEAVE: LazyLock<Script> =
    LazyLock::new(|| Script::new("redis.call('ZREM', KEYS[1], ARGV[1]) return 1"));

/// KEYS: lock, waiters. `{}` free, `{-2}` another type, else `{pttl, info, fence, value,
/// waiters}`.
static INSPECT: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r"
local h = redis.pcall('HMGET', KEYS[1], 'token', 'fence', 'info', 'value')
if h['err'] then return {-2} end
if h[1] == false then
  if redis.call('EXISTS', KEYS[1]) == 1 then return {-2} end
  return {}
end
local t = redis.call('TIME')
local w = redis.call('ZCOUNT', KEYS[2], '(' .. (tonumber(t[1]) * 1000), '+inf')
return {redis.call('PTTL', KEYS[1]), h[3], h[2], h[4], w}
",
    )
});

/// KEYS: lock, waiters, signal. `{}` free, `{host, pid}` who held it, `{'-2'}` another type.
static FORCE_RELEASE: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r"
local info = redis.pcall('HGET', KEYS[1], 'info')
if type(info) == 'table' then return {'-2'} end
if not info then return {} end
redis.call('DEL', KEYS[1])
if redis.call('ZCARD', KEYS[2]) > 0 then
  redis.call('RPUSH', KEYS[3], '-')
  redis.call('PEXPIRE', KEYS[3], 1000)
end
local host, pid = string.match(info, '^([^\n]*)\n([^\n]*)')
return {host or '', pid or ''}
",
    )
});

/// KEYS: lock, fence. ARGV: token, fence. `1` raised (or already there), `0` not ours.
static RAISE_FENCE: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r"
if redis.pcall('HGET', KEYS[1], 'token') ~= ARGV[1] then return 0 end
if (tonumber(redis.call('GET', KEYS[2])) or 0) < tonumber(ARGV[2]) then
  redis.call('SET', KEYS[2], ARGV[2])
end
redis.call('HSET', KEYS[1], 'fence', ARGV[2])
return 1
",
    )
});

/// The lock with a value.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Stash;

impl Stash {
    /// The table's constructor.
    pub(crate) fn make(_: Params) -> Arc<dyn Lock> {
        Arc::new(Stash)
    }
}

impl Primitive for Stash {
    fn attempt(&self, a: &AttemptArgs<'_>) -> Request<Attempt> {
        let k = a.keys;
        let info = format!("{}{}", a.holder, a.since);
        let [ttl, register] = [a.ttl, a.register].map(|d| Decimal::new(ms(d)));
        let (lock, fence) = (k.lock.clone(), k.fence.clone());
        Request::script(
            &ACQUIRE,
            &[k.lock.as_bytes(), k.fence.as_bytes(), k.waiters.as_bytes()],
            &[
                a.token.as_bytes(),
                ttl.as_bytes(),
                info.as_bytes(),
                a.meta.as_bytes(),
                a.waiter.as_bytes(),
                register.as_bytes(),
            ],
            move |reply: Value| {
                let wrong = |code| match code {
                    -2 => Some(lock.clone()),
                    -3 => Some(fence.clone()),
                    _ => None,
                };
                decode_attempt_reply(reply, wrong, "unexpected stash acquire reply")
            },
        )
    }

    fn renew(&self, k: &LockKeys, token: &str, ttl: Duration) -> Request<Renewal> {
        let ttl = Decimal::new(ms(ttl));
        Request::script(
            &RENEW,
            &[k.lock.as_bytes()],
            &[token.as_bytes(), ttl.as_bytes()],
            |r: i64| Ok(decode_renew(r)),
        )
    }

    fn release(&self, r: &ReleaseArgs<'_>) -> Request<Release> {
        let k = r.keys;
        Request::script(
            &RELEASE,
            &[k.lock.as_bytes(), k.waiters.as_bytes(), k.signal.as_bytes()],
            &[r.token.as_bytes(), r.registration.as_bytes()],
            |code: i64| decode_release(code, |_| None),
        )
    }

    fn owned_ttl(&self, k: &LockKeys, token: &str) -> Request<OwnedTtl> {
        Request::script(
            &OWNED_TTL,
            &[k.lock.as_bytes()],
            &[token.as_bytes()],
            |r: i64| Ok(decode_owned_ttl(r)),
        )
    }

    fn commit_check(&self, k: &LockKeys) -> Check {
        Check {
            script: &COMMIT,
            keys: vec![k.lock.clone()],
            members: false,
        }
    }

    fn transfer(&self, k: &LockKeys, token: &str, fresh: &str) -> Request<OwnedTtl> {
        let argv = [token.as_bytes(), fresh.as_bytes()];
        Request::script(&TRANSFER, &[k.lock.as_bytes()], &argv, |r: i64| {
            Ok(decode_owned_ttl(r))
        })
    }

    /// The value is the metadata.
    fn proclaim(&self, k: &LockKeys, token: &str, meta: &str, _holder: &str) -> Request<OwnedTtl> {
        Request::script(
            &PROCLAIM,
            &[k.lock.as_bytes()],
            &[token.as_bytes(), meta.as_bytes()],
            |r: i64| Ok(decode_owned_ttl(r)),
        )
    }

    fn leave(&self, k: &LockKeys, waiter: &str, _grant: &str) -> Request<()> {
        Request::script(
            &LEAVE,
            &[k.waiters.as_bytes()],
            &[waiter.as_bytes()],
            |_: i64| Ok(()),
        )
    }

    /// The holder and the value it stores (as `Holder::meta`).
    fn inspect(&self, k: &LockKeys) -> Request<Option<Holder>> {
        let keys = k.clone();
        Request::script(
            &INSPECT,
            &[k.lock.as_bytes(), k.waiters.as_bytes()],
            &[],
            move |v: Vec<Value>| decode_stash(&keys, &v),
        )
    }

    fn force_release(&self, k: &LockKeys, _grant: &str) -> Request<Broken> {
        let keys = [k.lock.as_bytes(), k.waiters.as_bytes(), k.signal.as_bytes()];
        let owned = k.clone();
        Request::script(&FORCE_RELEASE, &keys, &[], move |v: Vec<String>| {
            decode_broken(&owned, &v, |_| None)
        })
    }

    fn wake_list(&self, keys: &LockKeys, _waiter: &str, _fair: bool) -> String {
        keys.signal.clone()
    }

    fn redlock(&self) -> Option<&dyn Redlock> {
        Some(self)
    }
}

/// `INSPECT`'s reply: the holder, with the value it stores as its metadata.
fn decode_stash(k: &LockKeys, v: &[Value]) -> Result<Option<Holder>> {
    decode_inspect(k, v, "unexpected stash inspect reply", |v| {
        let [Value::Int(pttl), info, fence, value, Value::Int(waiters)] = v else {
            return None;
        };
        let text = |v: &Value| redis::from_redis_value::<String>(v.clone()).unwrap_or_default();
        let info = text(info);
        let mut info = info.splitn(3, '\n');
        let mut next = || info.next().unwrap_or("").to_owned();
        let (host, pid, since) = (next(), next(), next());
        let value = text(value);
        Some(Holder {
            remaining_ttl: u64::try_from(*pttl).ok().map(Duration::from_millis),
            host,
            pid: pid.parse().unwrap_or(0),
            since_ms: since.parse().unwrap_or(0),
            fence: text(fence).parse().unwrap_or(0),
            meta: (!value.is_empty()).then_some(value),
            hold_until_ms: None,
            owned: true,
            cool_until_ms: None,
            waiters: u32::try_from(*waiters).unwrap_or(0),
            queued: 0,
            queue_head: None,
            rw: None,
            fence_is_counter: false,
        })
    })
}

impl Redlock for Stash {
    fn raise_fence(&self, k: &LockKeys, token: &str, fence: u64) -> Request<bool> {
        let fence = Decimal::new(fence);
        let keys = [k.lock.as_bytes(), k.fence.as_bytes()];
        Request::script(
            &RAISE_FENCE,
            &keys,
            &[token.as_bytes(), fence.as_bytes()],
            |r: i64| Ok(r == 1),
        )
    }
}

impl Lock for Stash {
    fn kind(&self) -> Kind {
        Kind::Stash
    }

    /// Nothing but the plain acquisition: no fair queue, no minimum hold, no cool-down.
    fn check(&self, opts: &LockOptions, fair: bool) -> Result<()> {
        let refused = |what| Err(Error::invalid(what, "not available for the stash"));
        if fair {
            return refused("retry");
        }
        if !opts.hold_at_least.is_zero() {
            return refused("hold_at_least");
        }
        if opts.cooldown.is_some_and(|c| !c.is_zero()) {
            return refused("cooldown");
        }
        if opts.mode.is_some() {
            return refused("mode");
        }
        Ok(())
    }

    fn holder_fence(&self) -> bool {
        true
    }
}

mod tests {
    use std::time::Instant;

    use super::*;
    use crate::guard::LockGuard;
    use crate::hold::acquire::Deadline;
    use crate::testing::RedisServer;
    use crate::{LeaseHandle, LockClient, ReleaseOutcome};

    /// A stash lock of `name` taken through the client's acquisition (the acquire loop).
    fn take(client: &LockClient, name: &str, opts: &LockOptions) -> Option<LockGuard> {
        let deadline = Deadline::after(opts.wait).unwrap();
        let stash = Kind::Stash.make(Params::DEFAULT);
        client
            .take(stash, name, opts, &deadline)
            .unwrap()
            .acquired()
    }

    /// The value anyone reads from the stash `name` (`inspect` through the deployment).
    fn value(client: &LockClient, name: &str) -> Option<String> {
        let keys = client.inner.keys(name).unwrap();
        let holder = client.inner.deployment.inspect(&Stash, &keys).unwrap();
        holder.and_then(|h| h.meta)
    }

    fn zcard(server: &RedisServer, key: &str) -> usize {
        redis::cmd("ZCARD")
            .arg(key)
            .query(&mut server.connection())
            .unwrap()
    }

    /// A waiter on `name` (its own client), woken by the release of `holder`: the instant it
    /// got the lock, after which it hands it over as a handle.
    fn wait_for_release(
        waiter: &LockClient,
        name: &str,
        registered: impl Fn() -> bool,
        holder: LockGuard,
    ) -> (Duration, LeaseHandle) {
        let (waiter, key) = (waiter.clone(), name.to_owned());
        let thread = std::thread::spawn(move || {
            let opts = LockOptions::new()
                .ttl(Duration::from_secs(10))
                .wait(Duration::from_secs(8))
                .metadata("second");
            let guard = take(&waiter, &key, &opts).expect("woken by the release");
            (Instant::now(), guard.into_handle())
        });
        let deadline = Instant::now() + Duration::from_secs(5);
        while !registered() {
            assert!(Instant::now() < deadline, "the waiter never registered");
            std::thread::sleep(Duration::from_millis(5));
        }
        let released = Instant::now();
        assert_eq!(holder.release().unwrap(), ReleaseOutcome::Released);
        let (got, handle) = thread.join().unwrap();
        (got.duration_since(released), handle)
    }

    #[test]
    fn a_primitive_in_one_file_is_acquired_renewed_waited_for_and_handed_over() {
        let server = RedisServer::start();
        let locks = LockClient::open(&server.url()).unwrap();
        let reader = LockClient::open(&server.url()).unwrap();
        // The acquire loop, and the value others read.
        // A TTL a loaded machine's stall between two renewals (a third of it apart) does not
        // outlast.
        let opts = LockOptions::new()
            .ttl(Duration::from_millis(1000))
            .metadata("first");
        let guard = take(&locks, "box", &opts).expect("free");
        assert!(guard.fencing_token() > 0);
        assert_eq!(value(&reader, "box").as_deref(), Some("first"));
        // The watchdog: renewed past two TTLs.
        std::thread::sleep(Duration::from_millis(2200));
        assert!(!guard.is_lost());
        assert!(guard.remaining_ttl().unwrap().is_some_and(|t| !t.is_zero()));
        assert!(guard.extend(Duration::from_secs(10)).is_ok());
        // Waiting: a waiter blocked on the wake-up list takes it once the holder (TTL 10 s)
        // releases it, at once and not at the holder's expiry.
        let registered = || zcard(&server, "lock:{box}:waiters") == 1;
        let (after, handle) = wait_for_release(&reader, "box", registered, guard);
        assert!(
            after < Duration::from_secs(2),
            "woken {after:?} after the release"
        );
        // Lease handles: its kind from the table, resumed through the primitive of that kind.
        assert_eq!(handle.kind(), "stash");
        let handle: LeaseHandle = handle.to_string_secret().parse().unwrap();
        assert_eq!(value(&locks, "box").as_deref(), Some("second"));
        let resumed = locks.resume(&handle).unwrap();
        assert_eq!(resumed.fencing_token(), handle.fencing_token());
        // Given up by `into_handle`: resumed once (the seam's transfer moved it).
        assert!(matches!(
            reader.resume(&handle),
            Err(Error::HandleSpent { .. })
        ));
        assert!(resumed.extend(Duration::from_secs(5)).is_ok());
        assert_eq!(resumed.release().unwrap(), ReleaseOutcome::Released);
        assert_eq!(value(&locks, "box"), None);
        // What it cannot honour is refused before anything is sent.
        let fair = LockOptions::new().retry(crate::RetryStrategy::fair());
        let deadline = Deadline::after(None).unwrap();
        let stash = Kind::Stash.make(Params::DEFAULT);
        assert!(matches!(
            locks.take(stash, "box", &fair, &deadline),
            Err(Error::InvalidInput { what: "retry", .. })
        ));
    }

    #[test]
    fn a_primitive_in_one_file_holds_on_a_redlock_quorum() {
        let servers = [
            RedisServer::start(),
            RedisServer::start(),
            RedisServer::start(),
        ];
        let quorum = || {
            LockClient::redlock_builder(servers.iter().map(RedisServer::url))
                .connect_timeout(Duration::from_millis(300))
                .io_timeout(Duration::from_millis(300))
                .build()
                .unwrap()
        };
        let (locks, other) = (quorum(), quorum());
        let opts = LockOptions::new()
            .ttl(Duration::from_secs(10))
            .metadata("quorum");
        let guard = take(&locks, "qbox", &opts).expect("free");
        let holding = |key: &str| {
            servers
                .iter()
                .filter(|s| {
                    redis::cmd("EXISTS")
                        .arg(key)
                        .query::<i64>(&mut s.connection())
                        .unwrap()
                        == 1
                })
                .count()
        };
        assert!(holding("lock:{qbox}") >= 2, "held on a majority");
        assert_eq!(value(&other, "qbox").as_deref(), Some("quorum"));
        let registered = || {
            servers
                .iter()
                .filter(|s| zcard(s, "lock:{qbox}:waiters") == 1)
                .count()
                >= 2
        };
        let (after, handle) = wait_for_release(&other, "qbox", registered, guard);
        assert!(
            after < Duration::from_secs(2),
            "woken {after:?} after the release"
        );
        let resumed = other.resume(&handle).unwrap();
        // Moved to the resumed guard's token on a majority: a second resume finds it spent.
        assert!(matches!(
            locks.resume(&handle),
            Err(Error::HandleSpent { .. })
        ));
        assert!(resumed.extend(Duration::from_secs(5)).is_ok());
        assert_eq!(resumed.release().unwrap(), ReleaseOutcome::Released);
        // The release returns once a majority has answered; the last server's answer may come
        // a moment later.
        let until = Instant::now() + Duration::from_secs(2);
        while holding("lock:{qbox}") > 0 && Instant::now() < until {
            std::thread::sleep(Duration::from_millis(5));
        }
        assert_eq!(holding("lock:{qbox}"), 0, "released on every server");
    }
}
