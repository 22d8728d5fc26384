//! The semaphore on the wire: one file per operation (`acquire`, `claim`, `renew`, `release`,
//! `leave`, `owned_ttl`, `inspect`, `set_limit`, `force_release`, `transfer`), each with its
//! script, the function that builds its request and what decodes its reply; here, what they
//! share: the layout (below), the Lua its scripts define (`permits_lua`), what `inspect`
//! tells, and [`Semaphore`], the semaphore as a primitive of the seam (`wire/seam.rs`), with
//! grants (a release grants a freed permit to a waiter) but not Redlock (each server would
//! count its own permits).
//! A semaphore of `limit` permits, each permit with its own owner token and expiry, like
//! Redisson's `RPermitExpirableSemaphore`.
//!
//! Keys of semaphore `name` (all with the hash tag `{name}`, see `keys.rs`):
//!
//! | key                | type               | holds                                               |
//! |--------------------|--------------------|-----------------------------------------------------|
//! | `ns{name}`         | sorted set, TTL    | the permits: owner token → expiry (server Unix ms)  |
//! | `ns{name}:holders` | hash, TTL          | owner token → `fence \n host \n pid \n since \n meta` |
//! | `ns{name}:limit`   | string, TTL        | the number of permits, stored by the first acquirer or `set_permits`; its TTL is raised with the permits' |
//! | `ns{name}:fence`, `:waiters`, `:queue`, `:signal`, `:signal:<id>` | | as for the mutex (`mutex/mod.rs`) |
//!
//! A permit whose expiry has passed is no longer held: a script that must know how many are
//! free drops expired ones (`expire_permits`, at most 100 per call) whenever the set looks
//! full (an acquisition: when the earliest expiry has passed; a release granting to a
//! waiter: when no room is left without it). Counting an expired entry can only make a
//! script admit fewer, never more, so pruning is skipped when the count already admits.
//! The two keys' TTL is only raised (to the latest expiry), and always together (every
//! permit has its entry in both), so a key never disappears before a permit in it has
//! expired.
//!
//! A release that frees a permit while waiters are registered does not free it: it *grants*
//! it (a new permit under the grant token with the handoff grace as its expiry, empty holder
//! fields) and pushes `grant fence now` to one wake-up list, as the mutex's `hand_over` does;
//! the popper owns that permit. Several grants can be pending on the shared list at once (one
//! per freed permit), so a push never deletes the list first.

use std::time::Duration;

use super::commit::Check;
use super::request::Request;
use super::seam::{Grants, Primitive};
use super::{
    Attempt, AttemptArgs, Broken, Claim, ClaimArgs, Holder, LockKeys, OwnedTtl, Release,
    ReleaseArgs, Renewal,
};

/// The largest number of permits a semaphore may have. Every permit is an entry in a sorted
/// set that each acquisition scans for expired ones; ten thousand keeps every script short.
pub const MAX_PERMITS: u32 = 10_000;

/// Lua shared by the semaphore's scripts: dropping expired permits, raising the keys' TTL,
/// and granting a freed permit to a waiter. Needs `clock!()` and `prune!()` before it.
///
/// `hand_permit` is called only with waiters registered (the caller has checked). Every
/// `redis.call` costs about a microsecond in these scripts beyond the command's own time
/// (ARCHITECTURE.md, "The semaphore's fast path and handoff"), and a release's grant is on the path from one holder to the next, so it counts its calls: the
/// registered waiters are a `ZCARD` when the prune left only live ones (fewer than its 100),
/// the outstanding grants one `ZRANGE … WITHSCORES` that also finds the lapsed ones, and the
/// grants key's TTL is set outright (every grant lives for the same grace, so the newest
/// one's is the longest). A release passes what it found out as `known`: whether the fair
/// queue exists (its head is read only then).
macro_rules! permits_lua {
    () => {
        concat!(
            "local function expire_permits(permits, holders)\n\
               local dead = redis.call('ZRANGEBYSCORE', permits, '-inf', clock(), 'LIMIT', 0, 100)\n\
               if #dead > 0 then\n\
                 redis.call('ZREM', permits, unpack(dead))\n\
                 redis.call('HDEL', holders, unpack(dead))\n\
               end\n\
             end\n\
             local function live(permits, token)\n\
               local s = redis.call('ZSCORE', permits, token)\n\
               return s and tonumber(s) > clock()\n\
             end\n\
             local function raise_ttl(permits, holders, ttl)\n\
               if redis.call('PTTL', permits) < ttl then\n\
                 redis.call('PEXPIRE', permits, ttl)\n\
                 redis.call('PEXPIRE', holders, ttl)\n\
                 redis.pcall('PEXPIRE', permits .. '",
            limit_suffix!(),
            "', ttl, 'GT')\n\
               end\n\
             end\n\
             local function fence_of(holders, token)\n\
               local info = redis.call('HGET', holders, token) or ''\n\
               return tonumber(string.match(info, '^(%d+)')) or 0\n\
             end\n\
             local function wrong(key, want)\n\
               local t = redis.call('TYPE', key)['ok']\n\
               return t ~= 'none' and t ~= want\n\
             end\n\
             local function hand_permit(permits, holders, fence, signal, waiters, queue, grants, grant, known)\n\
               local forgot = prune(waiters, queue)\n\
               local now = clock()\n\
               local head = nil\n\
               if not known or known.queue then head = redis.call('ZRANGE', queue, 0, 0)[1] end\n\
               local wake = signal\n\
               if head then\n\
                 wake = signal .. ':' .. head\n\
                 if type(redis.pcall('EXISTS', wake)) == 'table' then error(",
            not_local!(),
            ") end\n\
               else\n\
                 local waiting = 0\n\
                 if forgot < 100 then waiting = redis.call('ZCARD', waiters)\n\
                 else waiting = #redis.call('ZRANGEBYSCORE', waiters, '(' .. now, '+inf') end\n\
                 local all = redis.call('ZRANGE', grants, 0, -1, 'WITHSCORES')\n\
                 local old, granted = {}, 0\n\
                 for i = 1, #all, 2 do\n\
                   if tonumber(all[i + 1]) > now then granted = granted + 1 else old[#old + 1] = all[i] end\n\
                 end\n\
                 if #old > 0 then redis.call('ZREM', grants, unpack(old)) end\n\
                 if waiting <= granted then return false end\n\
               end\n\
             ",
            next_fence!("f", "fence", handoff_grace_ms!(), "return false"),
            "\
               if head then\n\
                 redis.call('ZREM', queue, head)\n\
                 redis.call('ZREM', waiters, head)\n\
                 redis.call('DEL', wake)\n\
               else\n\
                 redis.call('ZADD', grants, now + ",
            handoff_grace_ms!(),
            ", grant)\n\
                 redis.call('PEXPIRE', grants, ",
            handoff_grace_ms!(),
            ")\n\
               end\n\
               redis.call('ZADD', permits, now + ",
            handoff_grace_ms!(),
            ", grant)\n\
               redis.call('HSET', holders, grant, ",
            fence_text!("f"),
            " .. '\\n\\n\\n0\\n')\n\
               raise_ttl(permits, holders, ",
            handoff_grace_ms!(),
            ")\n\
               redis.call('RPUSH', wake, grant .. ' ' .. ",
            fence_text!("f"),
            " .. ' ' .. now)\n\
               redis.call('PEXPIRE', wake, ",
            handoff_grace_ms!(),
            ")\n\
               return true\n\
             end\n"
        )
    };
}

// After the macro: the scripts use it.
mod acquire;
mod claim;
mod force_release;
mod inspect;
mod leave;
mod owned_ttl;
mod proclaim;
mod release;
mod renew;
mod set_limit;
mod transfer;

pub(crate) use acquire::acquire;
pub(crate) use claim::claim;
pub(crate) use force_release::force_release;
pub(crate) use inspect::inspect;
pub(crate) use leave::leave;
pub(crate) use owned_ttl::{commit_check, owned_ttl};
pub(crate) use proclaim::proclaim;
pub(crate) use release::release;
pub(crate) use renew::renew;
pub(crate) use set_limit::set_limit;
pub(crate) use transfer::transfer;

/// One held permit, as `INSPECT` reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct PermitHolder {
    pub(crate) remaining_ttl: Duration,
    pub(crate) fence: u64,
    /// Empty for a permit a release granted to a waiter that has not claimed it yet.
    pub(crate) host: String,
    pub(crate) pid: u32,
    /// Server clock, Unix ms (0 while unclaimed).
    pub(crate) since_ms: u64,
    pub(crate) meta: Option<String>,
}

/// What `INSPECT` says about a semaphore.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Permits {
    /// The stored limit.
    pub(crate) limit: u32,
    /// Live permits, earliest expiry first.
    pub(crate) holders: Vec<PermitHolder>,
    pub(crate) waiters: u32,
    pub(crate) queued: u32,
}

/// Permits of one name; `permits`: the limit stored if the name has none yet.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Semaphore {
    pub(crate) permits: u32,
}

impl Primitive for Semaphore {
    fn attempt(&self, args: &AttemptArgs<'_>) -> Request<Attempt> {
        acquire(args, self.permits)
    }

    fn renew(&self, keys: &LockKeys, token: &str, ttl: Duration) -> Request<Renewal> {
        renew(keys, token, ttl)
    }

    fn release(&self, args: &ReleaseArgs<'_>) -> Request<Release> {
        release(args)
    }

    fn owned_ttl(&self, keys: &LockKeys, token: &str) -> Request<OwnedTtl> {
        owned_ttl(keys, token)
    }

    fn commit_check(&self, keys: &LockKeys) -> Check {
        commit_check(keys)
    }

    fn transfer(&self, keys: &LockKeys, token: &str, fresh: &str) -> Request<OwnedTtl> {
        transfer(keys, token, fresh)
    }

    fn proclaim(
        &self,
        keys: &LockKeys,
        token: &str,
        meta: &str,
        holder: &str,
    ) -> Request<OwnedTtl> {
        proclaim(keys, token, meta, holder)
    }

    fn leave(&self, keys: &LockKeys, waiter: &str, grant: &str) -> Request<()> {
        leave(keys, waiter, grant)
    }

    /// One of the permits' holders, as a lock's holder (`inspect_permits` has them all).
    fn inspect(&self, keys: &LockKeys) -> Request<Option<Holder>> {
        inspect(keys).map(|permits| {
            permits.and_then(|p| {
                let (waiters, queued) = (p.waiters, p.queued);
                p.holders.into_iter().next().map(|h| Holder {
                    remaining_ttl: Some(h.remaining_ttl),
                    owned: !h.host.is_empty(),
                    host: h.host,
                    pid: h.pid,
                    since_ms: h.since_ms,
                    fence: h.fence,
                    meta: h.meta,
                    hold_until_ms: None,
                    cool_until_ms: None,
                    waiters,
                    queued,
                    queue_head: None,
                    rw: None,
                    fence_is_counter: false,
                })
            })
        })
    }

    fn force_release(&self, keys: &LockKeys, _grant: &str) -> Request<Broken> {
        force_release(keys)
    }

    fn wake_list(&self, keys: &LockKeys, waiter: &str, fair: bool) -> String {
        super::mutex::wake_list(keys, waiter, fair)
    }

    fn grants(&self) -> Option<&dyn Grants> {
        Some(self)
    }
}

impl Grants for Semaphore {
    fn claim(&self, args: &ClaimArgs<'_>) -> Request<Claim> {
        claim(args)
    }
}
