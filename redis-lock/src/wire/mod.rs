//! Everything Redis sees: the key layout, the Lua scripts, the commands, and one typed function
//! per script or command that takes a connection and typed arguments and returns a typed reply.
//!
//! Reply codes, the order of `KEYS` and `ARGV`, and the string formats that travel through
//! Redis (holder information, grants, waiter flags) are known here and nowhere else: the layers
//! above see only the types below. This layer imports nothing of the crate but `error`.

pub(crate) mod commands;
#[macro_use]
pub(crate) mod keys;
#[macro_use]
mod lua;

// After `lua`: these use its macros.
pub(crate) mod cancel;
pub(crate) mod multi;
pub(crate) mod mutex;
pub(crate) mod resp;
pub(crate) mod rwlock;
pub(crate) mod semaphore;
pub(crate) mod token;

use std::time::Duration;

use redis::{ConnectionLike, Script, Value};

use crate::error::Error;

pub(crate) use keys::LockKeys;
pub(crate) use lua::HANDOFF_GRACE;

/// Redis takes expiries in whole milliseconds. A duration is sent rounded *down*, and every
/// local estimate of an expiry must use the same rounded value (`whole_ms`), so the holder
/// never believes in a lock that Redis has already dropped.
pub(crate) fn ms(d: Duration) -> u64 {
    // Callers validated d against MAX_TTL, so this cannot saturate in practice.
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// `d` as Redis will apply it: rounded down to whole milliseconds.
pub(crate) fn whole_ms(d: Duration) -> Duration {
    Duration::from_millis(ms(d))
}

/// `EVALSHA` of `script` with `keys` and `args`, packed by hand (`resp::pack_array`) on a
/// connection that takes packed bytes, which costs the client about half of what building it
/// through `redis::Script` does (on the release, the hot script); where the server lacks the
/// script it is loaded and the same request sent again. On a cluster, whose connection routes
/// a `Cmd` by its keys, the `redis` crate's invocation.
pub(crate) fn evalsha(
    con: &mut dyn ConnectionLike,
    script: &Script,
    keys: &[&[u8]],
    args: &[&[u8]],
) -> redis::RedisResult<Value> {
    if con.supports_pipelining() {
        let size: usize = keys.iter().chain(args).map(|a| a.len() + 16).sum();
        let mut packed = Vec::with_capacity(size + 96);
        resp::pack_array(&mut packed, 3 + keys.len() + args.len());
        resp::pack_bulk(&mut packed, b"EVALSHA");
        resp::pack_bulk(&mut packed, script.get_hash().as_bytes());
        resp::pack_bulk(&mut packed, resp::decimal(keys.len() as u64, &mut [0; 20]));
        for part in keys.iter().chain(args) {
            resp::pack_bulk(&mut packed, part);
        }
        let reply = match con.req_packed_command(&packed)? {
            Value::ServerError(e) if e.kind() == Some(redis::ServerErrorKind::NoScript) => {
                // `SCRIPT LOAD` and neither request is counted (`PooledConn`): one request.
                script.load(con)?;
                con.req_packed_command(&packed)?
            }
            reply => reply,
        };
        return reply.extract_error();
    }
    let mut call = script.prepare_invoke();
    for key in keys {
        call.key(*key);
    }
    for arg in args {
        call.arg(*arg);
    }
    call.invoke(con)
}

/// What a holder knows of how its lock is stored, for the release: which form to read first
/// (see `mutex.rs`, "Two forms"), and whether a native compare-and-delete can release it.
/// A guess: a wrong one costs Redis one failed read (or the client one round trip), never a
/// wrong answer.
#[derive(Clone, Copy)]
pub(crate) enum Form<'a> {
    /// Most likely a hash (and always for a primitive with one form).
    Hash,
    /// Most likely a string lock whose value we do not know (a lease resumed from a handle,
    /// a multi-lock's member).
    String,
    /// Most likely the string lock we wrote, this value: where the store's server has
    /// `DELIFEQ` (`ReleaseArgs::caps`), that deletes it.
    Written(&'a str),
}

/// Without the value: it starts with the owner token.
impl std::fmt::Debug for Form<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Form::Hash => "Hash",
            Form::String => "String",
            Form::Written(_) => "Written",
        })
    }
}

impl<'a> Form<'a> {
    /// The form a holder expects: taken on the native fast path (`native`) or not, and what
    /// that path wrote, when the holder kept it.
    pub(crate) fn of(native: bool, value: Option<&'a str>) -> Form<'a> {
        match (native, value) {
            (false, _) => Form::Hash,
            (true, None) => Form::String,
            (true, Some(value)) => Form::Written(value),
        }
    }

    /// The lock was most likely taken on the native fast path.
    pub(crate) fn is_string(&self) -> bool {
        !matches!(self, Form::Hash)
    }
}

/// What one acquisition attempt sends, the same to every store it goes to.
#[derive(Debug, Clone, Copy)]
pub(crate) struct AttemptArgs<'a> {
    pub(crate) keys: &'a LockKeys,
    pub(crate) token: &'a str,
    pub(crate) ttl: Duration,
    /// `host \n pid \n`: the start of the holder information (see [`holder_prefix`]).
    pub(crate) holder: &'a str,
    pub(crate) meta: &'a str,
    pub(crate) min_hold: Duration,
    /// The acquisition's waiter id (names it in the registry and its fair wake-up list).
    pub(crate) waiter: &'a str,
    /// Register as a waiter that comes back within this long, if the lock is busy; zero: do
    /// not register (the caller will not wait).
    pub(crate) register: Duration,
    /// Fair mode: queue in arrival order.
    pub(crate) fair: bool,
    /// An earlier attempt of this acquisition registered already.
    pub(crate) registered: bool,
    /// This attempt takes the primitive's native fast path first, writing this value (made
    /// before the attempt, so that the holder keeps it for its release). Decided once, by the
    /// primitive's `Native` capability (`deploy::seam`), for an attempt the deployment lets
    /// take it (one store, where a pipeline of native commands is one request, and no recent
    /// sign that the lock is busy); `None`: the script.
    pub(crate) native: Option<&'a str>,
    /// The caller's clock when it made the attempt, Unix ms ([`unix_ms_now`]): the mutex
    /// stores it as the holder's `since`, and a fencing counter that is gone starts from it
    /// (× 1000), so every server of a Redlock starts the same number.
    pub(crate) since: u64,
}

/// This machine's clock, Unix milliseconds (0 before 1970).
pub(crate) fn unix_ms_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// What a waiter's claim of a grant it popped sends.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ClaimArgs<'a> {
    pub(crate) keys: &'a LockKeys,
    /// The grant token: the lock is ours under it.
    pub(crate) grant: &'a str,
    pub(crate) ttl: Duration,
    /// `host \n pid \n` (see [`holder_prefix`]).
    pub(crate) holder: &'a str,
    pub(crate) meta: &'a str,
    pub(crate) min_hold: Duration,
    /// Our own waiter registration to forget, or "".
    pub(crate) registration: &'a str,
}

/// What a release sends.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ReleaseArgs<'a> {
    pub(crate) keys: &'a LockKeys,
    pub(crate) token: &'a str,
    /// The owner token a waiter the lock is handed to gets.
    pub(crate) grant: &'a str,
    /// Our own leftover waiter registration to forget, or "".
    pub(crate) registration: &'a str,
    /// Keep the lock ownerless this long (zero: none).
    pub(crate) cooldown: Duration,
    /// Undoing an acquisition that was never held: no minimum hold or cool-down applies.
    pub(crate) undo: bool,
    pub(crate) form: Form<'a>,
    /// The capabilities of the server the release goes to, filled in by the deployment for
    /// the store it sends to (`None`: assume none).
    pub(crate) caps: Option<&'a commands::Capabilities>,
}

impl AttemptArgs<'_> {
    /// The first six `ARGV` of the semaphore's and the read-write lock's acquire scripts:
    /// token, ttl_ms, holder, meta, waiter id, register_ms (`digits`: room for the numbers).
    pub(crate) fn script_args<'d>(&'d self, digits: &'d mut [[u8; 20]; 2]) -> [&'d [u8]; 6] {
        let [d_ttl, d_register] = digits;
        [
            self.token.as_bytes(),
            resp::decimal(ms(self.ttl), d_ttl),
            self.holder.as_bytes(),
            self.meta.as_bytes(),
            self.waiter.as_bytes(),
            resp::decimal(ms(self.register), d_register),
        ]
    }
}

/// The answer to one acquisition attempt on one store.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Attempt {
    Acquired {
        fence: u64,
    },
    Busy {
        /// The holder's remaining TTL (`None`: no expiry, or free but owed to a fair waiter).
        holder_ttl: Option<Duration>,
        /// Set when the attempt registered us as a waiter: how long to block at most before
        /// coming back.
        block: Option<Duration>,
        /// No grant we could pop was pending: a grant popped later was made after this reply.
        fresh: bool,
        /// Server time of the reply, Unix ms.
        server_ms: u64,
    },
}

/// Decodes the five integers every primitive's acquire script answers with, `{status, value,
/// block, fresh, now}`: `1` acquired (`value`: the fencing token); `0` busy (`value`: the
/// holder's remaining TTL, `block`: how long the registered caller may block, `fresh`: `1` when
/// no grant it could pop was pending, `now`: server ms); a negative status names the key that
/// holds another type, which `wrong_key` maps to its name (`None`: not a code of this script).
pub(crate) fn decode_attempt(
    (status, value, block, fresh, server_ms): (i64, i64, i64, i64, i64),
    wrong_key: impl FnOnce(i64) -> Option<String>,
    what: &'static str,
) -> Result<Attempt, Error> {
    match status {
        1 => Ok(Attempt::Acquired {
            fence: u64::try_from(value).unwrap_or(0),
        }),
        0 => Ok(Attempt::Busy {
            holder_ttl: millis(value),
            block: millis(block),
            fresh: fresh == 1,
            server_ms: u64::try_from(server_ms).unwrap_or(0),
        }),
        code => match wrong_key(code) {
            Some(redis_key) => Err(Error::WrongType { redis_key }),
            None => Err(unexpected(what)),
        },
    }
}

/// Decodes an acquire script's reply in either of its forms: a fast path's fencing token alone
/// (a single integer, the cheapest reply for Redis to build and for us to read), or the five
/// integers of the full path (see [`decode_attempt`]).
pub(crate) fn decode_attempt_reply(
    reply: Value,
    wrong_key: impl FnOnce(i64) -> Option<String>,
    what: &'static str,
) -> Result<Attempt, Error> {
    let five = match reply {
        Value::Int(fence) if fence > 0 => {
            return Ok(Attempt::Acquired {
                fence: fence.unsigned_abs(),
            });
        }
        Value::Array(v) => match v.as_slice() {
            [a, b, c, d, e] => match (int(a), int(b), int(c), int(d), int(e)) {
                (Some(a), Some(b), Some(c), Some(d), Some(e)) => (a, b, c, d, e),
                _ => return Err(unexpected(what)),
            },
            _ => return Err(unexpected(what)),
        },
        _ => return Err(unexpected(what)),
    };
    decode_attempt(five, wrong_key, what)
}

/// The answer to a waiter's claim of a grant it popped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Claim {
    Claimed {
        fence: u64,
    },
    /// The key is gone: the grant expired before it was claimed.
    Gone,
    /// Another token (or another type) is there now.
    NotOurs,
}

/// The answer to a renewal.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Renewal {
    Renewed,
    /// The key is gone.
    Gone,
    /// Another owner (or another type) is there.
    NotOurs,
}

/// The answer to a release.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Release {
    /// Given up: deleted, or handed over to a waiter.
    Released,
    /// Given up, but kept ownerless until the minimum hold has passed.
    Kept,
    /// The key was already gone.
    Late,
    /// Another owner (or another type) is there now; left untouched.
    Lost,
}

/// What one store says about the remaining TTL of a lock we hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum OwnedTtl {
    Left(Duration),
    NoExpiry,
    Gone,
    NotOurs,
}

/// A grant popped from a wake-up list: the lock is ours under `token`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Grant {
    pub(crate) token: String,
    pub(crate) fence: u64,
    /// Server time of the release that made it, Unix ms.
    pub(crate) server_ms: u64,
}

/// A wake-up list element: `token fence server_ms`, as `hand_over` (`lua.rs`) pushes it.
pub(crate) fn parse_grant(grant: &str) -> Option<Grant> {
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

/// Who holds a lock, as stored with it (the decoded `INSPECT` reply).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Holder {
    pub(crate) remaining_ttl: Option<Duration>,
    pub(crate) host: String,
    pub(crate) pid: u32,
    /// Server clock, Unix ms.
    pub(crate) since_ms: u64,
    pub(crate) fence: u64,
    pub(crate) meta: Option<String>,
    /// End of the minimum hold, Unix ms (server clock), if one was asked for.
    pub(crate) hold_until_ms: Option<u64>,
    /// `false` during a minimum hold or cool-down after release.
    pub(crate) owned: bool,
    /// End of the cool-down a release asked for, Unix ms (server clock).
    pub(crate) cool_until_ms: Option<u64>,
    /// Live waiter registrations.
    pub(crate) waiters: u32,
    /// Fair waiters queued.
    pub(crate) queued: u32,
    /// The waiter id at the head of the fair queue.
    pub(crate) queue_head: Option<String>,
    /// Readers and waiting writers, for a read-write lock (`None`: a mutex).
    pub(crate) rw: Option<rwlock::RwState>,
    /// The lock was taken by the native fast path, which does not store its fencing token:
    /// `fence` is the counter's value, at least the holder's and below any later holder's.
    pub(crate) fence_is_counter: bool,
}

/// The holder of a lock broken by `force_release`.
pub(crate) type Broken = Option<(String, u32)>;

/// The start of the holder information stored with every lock this process takes: `host \n
/// pid \n`; the scripts append the acquisition time and the metadata.
pub(crate) fn holder_prefix(host: &str, pid: u32) -> String {
    format!("{host}\n{pid}\n")
}

/// A reply of a shape the scripts never send: a bug or a foreign script of the same name.
fn unexpected(what: &'static str) -> Error {
    Error::Redis(redis::RedisError::from((
        redis::ErrorKind::UnexpectedReturnType,
        what,
    )))
}

/// An integer in a reply (Lua numbers arrive as integers, fields as bulk strings).
fn int(v: &Value) -> Option<i64> {
    match v {
        Value::Int(i) => Some(*i),
        Value::BulkString(b) => std::str::from_utf8(b).ok()?.parse().ok(),
        Value::SimpleString(s) => s.parse().ok(),
        _ => None,
    }
}

/// A count in a reply: a non-negative integer, 0 for anything else.
fn count(v: &Value) -> u32 {
    int(v).and_then(|c| u32::try_from(c).ok()).unwrap_or(0)
}

fn text(v: &Value) -> String {
    match v {
        Value::BulkString(b) => String::from_utf8_lossy(b).into_owned(),
        Value::SimpleString(s) => s.clone(),
        Value::Int(i) => i.to_string(),
        _ => String::new(),
    }
}

/// A non-negative reply value as milliseconds; negative codes mean "none".
fn millis(v: i64) -> Option<Duration> {
    u64::try_from(v).ok().map(Duration::from_millis)
}
