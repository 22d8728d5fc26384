//! The mutex on the wire: one file per operation (`acquire`, `claim`, `leave`, `renew`,
//! `release`, `owned_ttl`, `inspect`, `force_release`, `raise_fence`, `transfer`,
//! `proclaim`), each with its script, the function that builds its request and what decodes
//! its reply; here, what they share: the lock's two forms and its keys (below), the wake-up
//! lists waiters block on, and [`Mutex`], the mutex as a primitive of the seam
//! (`wire/seam.rs`) with every capability: grants, the native fast path, Redlock, and several
//! locks at once (the multi-lock).
//! Every state change of a lock is one of these scripts, run atomically by Redis, but for the
//! native fast path's acquisition (`SET NX PX` + `INCR`, see "Two forms").
//!
//! Keys travel in `KEYS`, values in `ARGV`; nothing user-supplied is spliced into script text,
//! so the SHA1 of each script is fixed and `EVALSHA` hits the script cache. All keys of one
//! script share one hash tag (see `keys.rs`), so the scripts run unchanged on Redis Cluster.
//!
//! # Two forms
//!
//! A lock taken on the native fast path (`acquire_native`: a caller that is not fair, has
//! not registered, asks for no minimum hold, on one store) is a **string** with a TTL:
//! `token \n host \n pid \n since \n meta`, written by `SET NX PX` with the fencing `INCR`
//! in the same pipeline. Every other state is a **hash** (below). Every script reads both:
//! `owner_of` (`lua.rs`) for renew and owned TTL; acquire, release, inspect, force release and
//! the multi-lock read the string themselves.
//!
//! - A string lock does not store its fencing token (the `SET` is sent before the `INCR`
//!   answers). Where a fence is read back from Redis (`inspect`, a resent acquisition that
//!   finds its own lock), the counter's value stands for it: at least the holder's (its
//!   `INCR` came first) and below any later holder's (theirs comes after this read). It is
//!   the holder's exactly unless a busy native attempt's `INCR` could not be given back (two
//!   of them racing). Resuming a lease handle accepts a fence up to it (`hold/resume.rs`).
//! - A waiter that registers on a string lock turns it into a hash (same owner, holder
//!   information and TTL, no `fence` field): the string's release (`GET`, compare, `DEL`)
//!   does not look at the registry, so a lock somebody waits for must not stay a string.
//!   Every other state owed to a waiter (a grant, a lock kept for a minimum hold or a
//!   cool-down) is a hash in the lock key, so the native `SET NX` cannot take it.
//! - Fair waiters queued behind a holder whose lock *expired* are the one state not kept in
//!   the lock key: a non-fair caller's `SET NX` can take such a lock before the queue's head,
//!   which is woken at the expiry, comes back (SAFETY.md, fair mode).
//!
//! The hash form, with a TTL:
//!
//! | field        | value                                                              |
//! |--------------|--------------------------------------------------------------------|
//! | `token`      | owner token (128 random bits, hex); `""` once released but kept    |
//! | `info`       | `host \n pid \n since \n meta`: where the holder runs, when it       |
//! |              | acquired (Redis server clock, Unix ms), its metadata               |
//! | `fence`      | the fencing token of this acquisition                              |
//! | `hold_until` | only with a minimum hold: Unix ms (server clock) before which a     |
//! |              | release keeps the lock                                             |
//! | `handoff`    | only in a lock a release granted to a waiter: whom it is for (the  |
//! |              | fair waiter's id, or `""`: whoever pops the shared wake-up)        |
//!
//! Holder information is one field rather than one field each because every argument and
//! every field costs Redis time on the acquire path, which is most of an uncontended cycle.
//!
//! A lock a release granted to a waiter holds just `token` (the grant), `fence` and `handoff`,
//! with the handoff grace as its TTL, until its new holder claims it (writes its holder
//! information and TTL). Waiters register in `<lock>:waiters` (sorted set: waiter id →
//! Unix ms when the registration lapses); fair waiters also queue in `<lock>:queue` (sorted
//! set: waiter id → ticket, in arrival order). Wake-ups go to `<lock>:signal` (non-fair: any
//! waiter) or `<lock>:signal:<waiter id>` (fair: that waiter), one element at most each.
//! Every one of these keys expires, the fencing counter `<lock>:fence` too (no earlier than a
//! string lock; a name taken after it is gone starts a new one from the clock: `next_fence!`,
//! `lua.rs`).

mod acquire;
mod claim;
mod force_release;
mod inspect;
mod leave;
mod owned_ttl;
mod proclaim;
mod raise_fence;
mod release;
mod renew;
mod transfer;

use std::time::Duration;

use super::commit::Check;
use super::multi::{self, AllArgs, AllAttempt};
use super::request::Request;
use super::seam::{AllAtOnce, Grants, Native, Primitive, Redlock};
use super::{
    Attempt, AttemptArgs, Broken, Claim, ClaimArgs, Holder, LockKeys, NativeTry, OwnedTtl, Release,
    ReleaseArgs, Renewal,
};

pub(crate) use acquire::{acquire, native_attempt, native_value};
pub(crate) use claim::claim;
pub(crate) use force_release::force_release;
pub(crate) use inspect::inspect;
pub(crate) use leave::leave;
pub(crate) use owned_ttl::{commit_check, owned_ttl};
pub(crate) use proclaim::proclaim;
pub(crate) use raise_fence::raise_fence;
pub(crate) use release::{native_release, release};
pub(crate) use renew::renew;
pub(crate) use transfer::transfer;

/// The `flags` argument of an acquire script that waits the mutex's way (the mutex's and the
/// semaphore's): `f` fair, `w` registered before in this acquisition.
pub(crate) fn waiter_flags(fair: bool, registered: bool) -> &'static str {
    match (fair, registered) {
        (false, false) => "",
        (false, true) => "w",
        (true, false) => "f",
        (true, true) => "fw",
    }
}

/// The wake-up list an acquisition blocks on: fair waiters are woken one by one on their own
/// list, the others share one, from which Redis serves the longest-blocked first.
pub(crate) fn wake_list(keys: &LockKeys, waiter: &str, fair: bool) -> String {
    if fair {
        keys.wake(waiter)
    } else {
        keys.signal.clone()
    }
}

/// One owner at a time.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Mutex;

impl Primitive for Mutex {
    fn attempt(&self, args: &AttemptArgs<'_>) -> Request<Attempt> {
        acquire(args)
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

    fn inspect(&self, keys: &LockKeys) -> Request<Option<Holder>> {
        inspect(keys)
    }

    fn force_release(&self, keys: &LockKeys, grant: &str) -> Request<Broken> {
        force_release(keys, grant)
    }

    fn wake_list(&self, keys: &LockKeys, waiter: &str, fair: bool) -> String {
        wake_list(keys, waiter, fair)
    }

    fn grants(&self) -> Option<&dyn Grants> {
        Some(self)
    }

    fn native(&self) -> Option<&dyn Native> {
        Some(self)
    }

    fn redlock(&self) -> Option<&dyn Redlock> {
        Some(self)
    }

    fn all_at_once(&self) -> Option<&dyn AllAtOnce> {
        Some(self)
    }
}

impl Grants for Mutex {
    fn claim(&self, args: &ClaimArgs<'_>) -> Request<Claim> {
        claim(args)
    }
}

impl Native for Mutex {
    fn value(&self, args: &AttemptArgs<'_>) -> Option<String> {
        native_value(args)
    }

    fn attempt_native(
        &self,
        args: &AttemptArgs<'_>,
        value: &str,
        pipelined: bool,
    ) -> Request<NativeTry> {
        native_attempt(args, value, pipelined)
    }

    fn release_native(&self, args: &ReleaseArgs<'_>) -> Option<Request<Option<bool>>> {
        native_release(args)
    }
}

impl Redlock for Mutex {
    fn raise_fence(&self, keys: &LockKeys, token: &str, fence: u64) -> Request<bool> {
        raise_fence(keys, token, fence)
    }
}

impl AllAtOnce for Mutex {
    fn attempt_all(&self, args: &AllArgs<'_>) -> Request<AllAttempt> {
        multi::acquire_all(args)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flags_and_wake_lists() {
        assert_eq!(waiter_flags(false, false), "");
        assert_eq!(waiter_flags(true, true), "fw");
        assert_eq!(waiter_flags(true, false), "f");
        assert_eq!(waiter_flags(false, true), "w");
        let k = LockKeys::new("lock:", "k").unwrap();
        assert_eq!(wake_list(&k, "w1", true), "lock:{k}:signal:w1");
        assert_eq!(wake_list(&k, "w1", false), "lock:{k}:signal");
    }
}

/// The scripts together against a real server, through their requests on a plain
/// connection (each operation's own are beside it), and what those share.
#[cfg(all(test, feature = "testing"))]
mod server_tests {
    use std::time::Duration;

    use super::*;
    use crate::testing::RedisServer;
    use crate::wire::token::{Ids, new_ids};
    use crate::wire::{Attempt, AttemptArgs, Con, Form, Release, ReleaseArgs};

    pub(super) fn args<'a>(
        keys: &'a LockKeys,
        ids: &'a Ids,
        ttl: Duration,
        register: Duration,
    ) -> AttemptArgs<'a> {
        AttemptArgs {
            keys,
            token: &ids.token,
            ttl,
            holder: "host\n1\n",
            meta: "",
            min_hold: Duration::ZERO,
            waiter: &ids.waiter,
            register,
            fair: false,
            registered: false,
            native: None,
            since: crate::wire::unix_ms_now(),
            burned: None,
        }
    }

    /// A release of a lock taken through the script (a hash) under `token`.
    pub(super) fn release_hash(
        con: &mut Con<'_>,
        keys: &LockKeys,
        token: &str,
        grant: &str,
        registration: &str,
    ) -> Release {
        release(&ReleaseArgs {
            keys,
            token,
            grant,
            registration,
            cooldown: Duration::ZERO,
            undo: false,
            form: Form::Hash,
            routed: false,
        })
        .on(con)
        .unwrap()
    }

    /// Every command Redis has run (`INFO commandstats`, commands inside scripts included),
    /// but `INFO` itself, `LPOP` (the waiter's pop, standing in for `BLPOP` here) and what a
    /// new connection sends (`CLIENT SETINFO` on Valkey).
    fn commands(probe: &mut redis::Connection) -> u64 {
        let text: String = redis::cmd("INFO").arg("commandstats").query(probe).unwrap();
        text.lines()
            .filter_map(|l| l.strip_prefix("cmdstat_")?.split_once(':'))
            .filter(|(name, _)| !matches!(*name, "info" | "lpop") && !name.starts_with("client"))
            .filter_map(|(_, stats)| stats.split(',').find_map(|f| f.strip_prefix("calls=")))
            .map(|n| n.parse::<u64>().unwrap())
            .sum()
    }

    /// What one contended acquisition costs Redis, in commands, on the path the benchmark's
    /// contended rows take: a waiter's attempt that finds the lock busy and
    /// registers, and the release that grants the lock to a waiter by a holder that took it
    /// from a grant (its registration left to forget). 7 and 11 (with `BLPOP`, the waiter's
    /// wait: 19), against 8 and 15 before the counts of `EXISTS` were used and the registry was
    /// only pruned when its first registration had lapsed.
    #[test]
    fn a_contended_acquisition_costs_redis_nineteen_commands() {
        let server = RedisServer::start();
        let mut con = server.connection();
        let keys = LockKeys::new("lock:", "costly").unwrap();
        let ttl = Duration::from_secs(30);
        let (a, b, c) = (new_ids().unwrap(), new_ids().unwrap(), new_ids().unwrap());
        // `b` registers for longer than `c`, so `c`'s registration never raises the TTL of
        // the waiters key (one `PEXPIRE` more): with equal caps whether it does depends on
        // whether the two attempts fall in the same millisecond, as in a steady stream of
        // waiters (the benchmark's 19.1 commands per acquisition).
        let mut probe = server.connection();
        let pop = |probe: &mut redis::Connection| -> String {
            redis::cmd("LPOP").arg(&keys.signal).query(probe).unwrap()
        };
        // Scripts loaded, and a lock held with `b` waiting.
        assert!(matches!(
            acquire(&args(&keys, &a, ttl, ttl)).on(&mut con).unwrap(),
            Attempt::Acquired { .. }
        ));
        assert!(matches!(
            acquire(&args(&keys, &b, ttl, ttl)).on(&mut con).unwrap(),
            Attempt::Busy { block: Some(_), .. }
        ));

        let before = commands(&mut probe);
        assert!(matches!(
            acquire(&args(&keys, &c, ttl, ttl / 3))
                .on(&mut con)
                .unwrap(),
            Attempt::Busy { block: Some(_), .. }
        ));
        let registering = commands(&mut probe) - before;
        // `a` grants the lock to whoever pops: `b`.
        assert_eq!(
            release_hash(&mut con, &keys, &a.token, &a.grant, ""),
            Release::Released
        );
        assert!(pop(&mut probe).starts_with(&format!("{} ", a.grant)));
        let before = commands(&mut probe);
        // `b` holds it under `a`'s grant, and grants it on to `c`.
        assert_eq!(
            release_hash(&mut con, &keys, &a.grant, &b.grant, &b.waiter),
            Release::Released
        );
        let granting = commands(&mut probe) - before;
        assert!(
            pop(&mut probe).starts_with(&format!("{} ", b.grant)),
            "c's turn"
        );
        assert_eq!(
            (registering, granting),
            (7, 11),
            "commands of the registering attempt and of the granting release"
        );
    }
}
