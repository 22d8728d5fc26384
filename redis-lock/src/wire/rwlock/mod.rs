//! The read-write lock on the wire: one file per operation (`acquire`, `renew`, `release`,
//! `owned_ttl`, `leave`, `inspect`, `force_release`, `transfer`), each with its scripts (one
//! per side where the sides differ), the function that builds its request and what decodes
//! its reply; here, what they share: the layout (below), the Lua functions their scripts
//! define, `Side`, the wake-up lists, and [`RwLock`], one side as a primitive of the seam
//! (`wire/seam.rs`), with none of its capabilities: nothing is granted through its wake-up
//! lists (a woken waiter attempts again), it has no native fast path, and it is not available
//! under Redlock (the quorum rules were designed and tested for one owner per server).
//! Many readers or one writer; a waiting writer keeps new readers out.
//!
//! The lock is the same key as a mutex's, `ns{name}`, a hash told apart by its `mode` field
//! (a mutex's hash never has one, and a read-write lock's never has `token`, so each
//! primitive's scripts answer "wrong type" on the other's key and touch nothing):
//!
//! | field          | value                                                               |
//! |----------------|---------------------------------------------------------------------|
//! | `mode`         | `read`, `write`, or `cool` (released with a cool-down: nobody owns it) |
//! | `wtoken`       | the writer's owner token (write mode only)                          |
//! | `wfence`       | the writer's fencing token                                          |
//! | `winfo`        | the writer's `host \n pid \n since \n meta`                         |
//! | `r:<token>`    | one per read share: `fence \n host \n pid \n since \n meta`          |
//! | `cool_until`   | end of the cool-down, Unix ms (server clock; `cool` mode only)       |
//!
//! Each read share also has its own expiry, as its score in the sorted set `ns{name}:readers`
//! (owner token → Unix ms, server clock), so one reader's renewal or release never touches
//! another's share, and a share whose holder died is dropped once its score has passed, by
//! whichever script looks next. The hash and `readers` always carry the same TTL: the latest
//! share's expiry (or the writer's TTL). A share is live while both its field and its score (in
//! the future) are there.
//!
//! Waiting reuses the mutex's registry (`ns{name}:waiters`, pruned by `prune` of `lua.rs`);
//! writers that wait are also in `ns{name}:writers` (waiter id → when the registration
//! lapses). While that set is not empty, no new reader enters (no writer starvation). Readers
//! block on the shared wake-up list `ns{name}:signal`, writers on their own,
//! `ns{name}:wsignal`. Whenever the lock frees (the writer's release, the last reader's
//! release, the last waiting writer giving up) the script pushes one "look again" element (see
//! `recheck` in `lua.rs`) per live waiting writer to the writers' list, or, when no writer
//! waits, one per live registered waiter to the readers' list: writers go first, else every
//! blocked reader wakes at once and attempts again, and they enter together. Nothing is
//! granted through the lists, so no waiter ever has to claim a grant.
//!
//! Every acquisition, read or write, takes the next value of the name's fencing counter
//! `ns{name}:fence` (the mutex's), so a writer's token is above every token issued before it.

use std::time::Duration;

use super::commit::Check;
use super::request::Request;
use super::seam::Primitive;
use super::{
    Attempt, AttemptArgs, Broken, Holder, LockKeys, OwnedTtl, Release, ReleaseArgs, Renewal,
};

/// What a read-write lock looks like in `inspect`, besides its holder.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct RwState {
    /// A writer holds it (`false`: readers, or nobody during a cool-down).
    pub(crate) writer: bool,
    /// Live read shares.
    pub(crate) readers: u32,
    /// Writers registered as waiting: while there are any, no new reader enters.
    pub(crate) writers_waiting: u32,
}

// Lua functions the scripts below share, one macro each, so that a script defines only the
// functions it calls (each definition costs Redis time on every call). They use `clock()`
// (`clock!`), `rw_wake_all` uses `prune` (`prune!`), `rw_any_live` uses `drop_expired`.

/// Read shares whose expiry has passed: their field and their score go.
macro_rules! rw_drop_expired {
    () => {
        concat!(
            "local function drop_expired(lock, readers)\n\
               local dead = redis.call('ZRANGEBYSCORE', readers, '-inf', clock(), 'LIMIT', 0, 100)\n\
               for _, t in ipairs(dead) do\n\
                 redis.call('ZREM', readers, t)\n\
                 redis.call('HDEL', lock, 'r:' .. t)\n\
               end\n\
             end\n",
        )
    };
}

/// Whether a live share is left (dropping expired ones first when the earliest is).
macro_rules! rw_any_live {
    () => {
        concat!(
            "local function any_live(lock, readers)\n\
               local first = redis.call('ZRANGE', readers, 0, 0, 'WITHSCORES')\n\
               if not first[2] then return false end\n\
               if tonumber(first[2]) > clock() then return true end\n\
               drop_expired(lock, readers)\n\
               return redis.call('ZRANGE', readers, 0, 0)[1] ~= nil\n\
             end\n",
        )
    };
}

/// Whether any writer waits (after forgetting lapsed registrations).
macro_rules! rw_writers_wait {
    () => {
        concat!(
            "local function writers_wait(writers)\n\
               if redis.call('EXISTS', writers) == 0 then return false end\n\
               local dead = redis.call('ZRANGEBYSCORE', writers, '-inf', clock(), 'LIMIT', 0, 100)\n\
               if #dead > 0 then redis.call('ZREM', writers, unpack(dead)) end\n\
               return redis.call('ZRANGE', writers, 0, 0)[1] ~= nil\n\
             end\n",
        )
    };
}

/// `0` when both wake-up lists are lists (or absent), else `-4` (the shared one) or
/// `-6` (the writers'): checked before any write.
macro_rules! rw_lists_ok {
    () => {
        concat!(
            "local function lists_ok(a, b)\n\
               local ta = redis.call('TYPE', a)['ok']\n\
               if ta ~= 'none' and ta ~= 'list' then return -4 end\n\
               local tb = redis.call('TYPE', b)['ok']\n\
               if tb ~= 'none' and tb ~= 'list' then return -6 end\n\
               return 0\n\
             end\n",
        )
    };
}

/// The lock freed: one "look again" per live waiting writer on the writers' list
/// (writers go first), or, with no writer waiting, one per live registered waiter on
/// the shared list (at most 1000). Two lists, so that a reader that wakes, finds a
/// writer waiting and blocks again never takes the writer's wake-up.
macro_rules! rw_wake_all {
    () => {
        concat!(
            "local function wake_all(signal, wsignal, waiters, writers)\n\
               if redis.call('EXISTS', waiters) == 0 then return end\n\
               prune(waiters, writers)\n\
               local list, n = wsignal, #redis.call('ZRANGE', writers, 0, 999)\n\
               if n == 0 then list, n = signal, #redis.call('ZRANGE', waiters, 0, 999) end\n\
               if n == 0 then return end\n\
               local elems = {}\n\
               for i = 1, n do elems[i] = ",
            recheck!(),
            " end\n\
               redis.call('DEL', list)\n\
               redis.call('RPUSH', list, unpack(elems))\n\
               redis.call('PEXPIRE', list, ",
            handoff_grace_ms!(),
            ")\n\
             end\n",
        )
    };
}

/// The lock and its shares live at least `ttl` ms more.
macro_rules! rw_stretch {
    () => {
        concat!(
            "local function stretch(lock, readers, ttl)\n\
               if redis.call('PTTL', lock) < ttl then redis.call('PEXPIRE', lock, ttl) end\n\
               if redis.call('EXISTS', readers) == 1 and redis.call('PTTL', readers) < ttl then\n\
                 redis.call('PEXPIRE', readers, ttl)\n\
               end\n\
             end\n",
        )
    };
}

/// The lock and its shares live until the latest share expires (or at least `floor` ms).
macro_rules! rw_fit {
    () => {
        concat!(
            "local function fit(lock, readers, floor)\n\
               local last = redis.call('ZRANGE', readers, -1, -1, 'WITHSCORES')\n\
               local left = floor\n\
               if last[2] then left = math.max(left, tonumber(last[2]) - clock()) end\n\
               if left > 0 then\n\
                 redis.call('PEXPIRE', lock, left)\n\
                 if last[2] then redis.call('PEXPIRE', readers, left) end\n\
               end\n\
             end\n",
        )
    };
}

/// `holder(lock, readers, mode)`: who holds the lock, for a busy answer (read on that branch
/// only), as `INSPECT` reports it: the writer's information, or that of the live share that
/// expires first (expired shares dropped before), and the lock's remaining TTL; nothing when
/// there is no lock (a waiting writer keeps readers out). A cooling lock has no holder stored:
/// empty information.
macro_rules! rw_holder {
    () => {
        concat!(
            "local function holder(lock, readers, mode)\n\
               if not mode then return nil, nil end\n\
               local info = ''\n\
               if mode ~= 'read' then\n\
                 info = redis.call('HGET', lock, 'winfo') or ''\n\
               else\n\
                 local first = redis.call('ZRANGE', readers, 0, 0)[1]\n\
                 local r = first and redis.call('HGET', lock, 'r:' .. first) or ''\n\
                 info = string.match(r, '^%d*\\n(.*)$') or ''\n\
               end\n\
               return info, redis.call('PTTL', lock)\n\
             end\n"
        )
    };
}

// After the macros: the scripts use them.
mod acquire;
mod force_release;
mod inspect;
mod leave;
mod owned_ttl;
mod proclaim;
mod release;
mod renew;
mod transfer;

pub(crate) use acquire::acquire;
pub(crate) use force_release::force_release;
pub(crate) use inspect::inspect;
pub(crate) use leave::leave;
pub(crate) use owned_ttl::{commit_check, owned_ttl};
pub(crate) use proclaim::proclaim;
pub(crate) use release::release;
pub(crate) use renew::renew;
pub(crate) use transfer::transfer;

/// Read or write: which scripts a call uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Side {
    Read,
    Write,
}

/// The wake-up list a waiter of `side` blocks on: writers have their own, so that readers
/// that wake and block again never take a writer's wake-up.
pub(crate) fn wake_list(keys: &LockKeys, side: Side) -> String {
    match side {
        Side::Read => keys.signal.clone(),
        Side::Write => keys.writer_signal(),
    }
}

/// One side of a read-write lock; `under`: the write lock's owner token a read share is
/// taken under by the thread that holds it (a downgrade), or empty.
#[derive(Clone)]
pub(crate) struct RwLock {
    pub(crate) side: Side,
    pub(crate) under: String,
}

impl std::fmt::Debug for RwLock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The writer's token is left out: it is what allows renewing and releasing.
        f.debug_struct("RwLock")
            .field("side", &self.side)
            .field("downgrade", &!self.under.is_empty())
            .finish()
    }
}

impl Primitive for RwLock {
    fn attempt(&self, args: &AttemptArgs<'_>) -> Request<Attempt> {
        acquire(self.side, args, &self.under)
    }

    fn renew(&self, keys: &LockKeys, token: &str, ttl: Duration) -> Request<Renewal> {
        renew(self.side, keys, token, ttl)
    }

    fn release(&self, args: &ReleaseArgs<'_>) -> Request<Release> {
        release(self.side, args)
    }

    fn owned_ttl(&self, keys: &LockKeys, token: &str) -> Request<OwnedTtl> {
        owned_ttl(self.side, keys, token)
    }

    fn commit_check(&self, keys: &LockKeys) -> Check {
        commit_check(self.side, keys)
    }

    fn transfer(&self, keys: &LockKeys, token: &str, fresh: &str) -> Request<OwnedTtl> {
        transfer(self.side, keys, token, fresh)
    }

    fn proclaim(
        &self,
        keys: &LockKeys,
        token: &str,
        meta: &str,
        _holder: &str,
    ) -> Request<OwnedTtl> {
        proclaim(self.side, keys, token, meta)
    }

    fn leave(&self, keys: &LockKeys, waiter: &str, _grant: &str) -> Request<()> {
        leave(keys, waiter)
    }

    fn inspect(&self, keys: &LockKeys) -> Request<Option<Holder>> {
        inspect(keys)
    }

    fn force_release(&self, keys: &LockKeys, _grant: &str) -> Request<Broken> {
        force_release(keys)
    }

    fn wake_list(&self, keys: &LockKeys, _waiter: &str, _fair: bool) -> String {
        wake_list(keys, self.side)
    }
}
