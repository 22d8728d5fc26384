//! Lease handles: a held lock as a small value that another thread or process can resume
//! (`LockGuard::handle`, `LockGuard::into_handle`, `LockClient::resume`), with a text form
//! for environment variables and, behind the `serde` feature, any serde format.

use std::str::FromStr;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::client::LockClient;
use crate::error::{Error, Result};
use crate::guard::LockGuard;
use crate::hold::Kind;
use crate::hold::primitive::Params;
use crate::hold::resume::Resumed;
use crate::options::MAX_TTL;
use crate::wire::keys::{MAX_KEY_LEN, MAX_NAMESPACE_LEN};
use crate::wire::token::is_token;

/// What starts the text form (`to_string_secret`), with its version: v2 carries the kind
/// and whether the handle is resumed once.
const TEXT_PREFIX: &str = "redis-lock-handle:v2:";

/// The text form before handles said whether they are resumed once: read as shared handles.
const TEXT_PREFIX_V1: &str = "redis-lock-handle:v1:";

/// A held lock as a value: its name and namespace, the owner token, the fencing token, the
/// TTL it is renewed to and when it expires unless renewed. Made by
/// [`LockGuard::handle`] or [`LockGuard::into_handle`]; turned back into a guard by
/// [`LockClient::resume`], in this process or another one.
///
/// **Whoever holds the handle owns the lock.** It carries the owner token, which is all it
/// takes to extend or release the lock: keep it as secret as a password. It never appears in
/// `Debug`, `Display`, errors or log events; [`to_string_secret`](Self::to_string_secret)
/// (and serialization, with the `serde` feature) is the one way to read it out, for passing
/// the handle on (an environment variable, a pipe, a job queue you trust).
///
/// # Examples
///
/// ```no_run
/// # fn main() -> redis_lock::Result<()> {
/// let locks = redis_lock::LockClient::open("redis://127.0.0.1/")?;
/// let guard = locks.lock("nightly-export")?;
/// // Give the lock to a child process: it resumes, extends and releases it.
/// let handle = guard.into_handle(); // no release, the watchdog stops
/// let status = std::process::Command::new("export-worker")
///     .env("REDIS_LOCK_HANDLE", handle.to_string_secret())
///     .status();
/// # let _ = status; Ok(()) }
/// ```
#[derive(Clone, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct LeaseHandle {
    name: String,
    namespace: String,
    token: String,
    fencing_token: u64,
    ttl_ms: u64,
    expires_unix_ms: u64,
    /// What it holds, so that it is resumed through the primitive that took it (the table in
    /// `hold/mod.rs`). Absent from handles made before handles carried their kind: those are
    /// all mutexes.
    #[cfg_attr(feature = "serde", serde(default = "Kind::unnamed"))]
    kind: Kind,
    /// Given up by `into_handle`: resumed at most once (the resume moves the lock to a new
    /// owner token). `false` for a shared handle (`handle`) and for handles made before
    /// handles said so.
    #[cfg_attr(feature = "serde", serde(default))]
    once: bool,
    /// The deployment the lock lives on (`origin_matches`): servers by address, a Sentinel
    /// master by name; no passwords. Empty in handles made before handles recorded it:
    /// resumed on any client.
    #[cfg_attr(feature = "serde", serde(default))]
    deployment: String,
}

impl std::fmt::Debug for LeaseHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // No token: whoever has it owns the lock.
        f.debug_struct("LeaseHandle")
            .field("name", &self.name)
            .field("namespace", &self.namespace)
            .field("kind", &self.kind.word())
            .field("shared", &!self.once)
            .field("deployment", &describe_origin(&self.deployment))
            .field("fencing_token", &self.fencing_token)
            .field("ttl", &self.ttl())
            .finish_non_exhaustive()
    }
}

impl std::fmt::Display for LeaseHandle {
    /// The lock it is for, without the owner token.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "lease of lock {:?} (namespace {:?}, fencing token {})",
            self.name, self.namespace, self.fencing_token
        )
    }
}

impl LeaseHandle {
    /// The lock name (without namespace).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn main() -> redis_lock::Result<()> {
    /// # let locks = redis_lock::LockClient::open("redis://127.0.0.1/")?;
    /// let handle = locks.lock("report")?.into_handle();
    /// assert_eq!(handle.name(), "report");
    /// # Ok(()) }
    /// ```
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The namespace of the client that made it; only a client with the same namespace
    /// resumes it.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn main() -> redis_lock::Result<()> {
    /// # let locks = redis_lock::LockClient::open("redis://127.0.0.1/")?;
    /// let handle = locks.lock("report")?.into_handle();
    /// assert_eq!(handle.namespace(), "lock:");
    /// # Ok(()) }
    /// ```
    pub fn namespace(&self) -> &str {
        &self.namespace
    }

    /// The fencing token of the acquisition (see
    /// [`LockGuard::fencing_token`]); a resumed guard has the same.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn main() -> redis_lock::Result<()> {
    /// # let locks = redis_lock::LockClient::open("redis://127.0.0.1/")?;
    /// let guard = locks.lock("report")?;
    /// assert_eq!(guard.handle().fencing_token(), guard.fencing_token());
    /// # Ok(()) }
    /// ```
    pub fn fencing_token(&self) -> u64 {
        self.fencing_token
    }

    /// The TTL the lock is renewed to (a resumed guard's watchdog renews to it).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn main() -> redis_lock::Result<()> {
    /// # let locks = redis_lock::LockClient::open("redis://127.0.0.1/")?;
    /// let guard = locks.options("report").ttl(std::time::Duration::from_secs(10)).acquire()?;
    /// assert_eq!(guard.handle().ttl(), std::time::Duration::from_secs(10));
    /// # Ok(()) }
    /// ```
    pub fn ttl(&self) -> Duration {
        Duration::from_millis(self.ttl_ms)
    }

    /// When the lock expires unless renewed, by the wall clock of the process that made the
    /// handle (a conservative estimate, at the time the handle was made).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn main() -> redis_lock::Result<()> {
    /// # let locks = redis_lock::LockClient::open("redis://127.0.0.1/")?;
    /// let handle = locks.lock("report")?.into_handle();
    /// assert!(handle.expires_at() > std::time::SystemTime::now());
    /// # Ok(()) }
    /// ```
    pub fn expires_at(&self) -> SystemTime {
        UNIX_EPOCH + Duration::from_millis(self.expires_unix_ms)
    }

    /// What the handle holds: `"mutex"`, `"read"` (a read share), `"write"` (a write lock)
    /// or `"semaphore"` (a semaphore's permit), as metrics and spans name the primitives.
    /// [`LockClient::resume`] resumes it as that.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn main() -> redis_lock::Result<()> {
    /// # let locks = redis_lock::LockClient::open("redis://127.0.0.1/")?;
    /// let handle = locks.read_lock("report")?.into_handle();
    /// assert_eq!(handle.kind(), "read");
    /// # Ok(()) }
    /// ```
    pub fn kind(&self) -> &'static str {
        self.kind.word()
    }

    /// Whether this handle shares its lease with the guard that made it
    /// ([`LockGuard::handle`]): resumed any number of times, each resumed guard and the
    /// guard that made it hold the lock under one owner token. `false` for a handle given up
    /// by [`LockGuard::into_handle`], which is resumed at most once.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn main() -> redis_lock::Result<()> {
    /// # let locks = redis_lock::LockClient::open("redis://127.0.0.1/")?;
    /// let guard = locks.lock("report")?;
    /// assert!(guard.handle().is_shared());
    /// assert!(!guard.into_handle().is_shared());
    /// # Ok(()) }
    /// ```
    pub fn is_shared(&self) -> bool {
        !self.once
    }

    /// The handle as one line of text, owner token included, for an environment variable or
    /// a pipe: `redis-lock-handle:v2:` then hex-encoded namespace and name, token, fencing
    /// token, TTL, expiry, its [`kind`](Self::kind), `once` or `shared`
    /// ([`is_shared`](Self::is_shared)) and the hex-encoded deployment it was made on
    /// (server addresses, or a Sentinel master's name; no passwords). [`FromStr`] reads it back, and reads the `v1:` form of
    /// earlier versions too (as a shared handle: those versions resumed every handle that
    /// way). **A secret**: whoever has it owns the lock.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn main() -> redis_lock::Result<()> {
    /// # let locks = redis_lock::LockClient::open("redis://127.0.0.1/")?;
    /// let handle = locks.lock("report")?.into_handle();
    /// let text = handle.to_string_secret();
    /// let back: redis_lock::LeaseHandle = text.parse()?;
    /// assert_eq!(back, handle);
    /// # Ok(()) }
    /// ```
    #[must_use]
    pub fn to_string_secret(&self) -> String {
        format!(
            "{TEXT_PREFIX}{}:{}:{}:{}:{}:{}:{}:{}:{}",
            hex(self.namespace.as_bytes()),
            hex(self.name.as_bytes()),
            self.token,
            self.fencing_token,
            self.ttl_ms,
            self.expires_unix_ms,
            self.kind.word(),
            if self.once { "once" } else { "shared" },
            hex(self.deployment.as_bytes()),
        )
    }

    pub(crate) fn token(&self) -> &str {
        &self.token
    }

    /// Everything a resume relies on, checked before anything is sent.
    fn validate(&self) -> Result<()> {
        let bad = |reason: &str| Err(Error::invalid("handle", reason));
        if !is_token(&self.token) {
            return bad("its owner token is malformed (not 32 lowercase hex characters)");
        }
        if self.name.is_empty() || self.name.len() > MAX_KEY_LEN {
            return bad("its lock name is empty or too long");
        }
        if self.namespace.len() > MAX_NAMESPACE_LEN {
            return bad("its namespace is too long");
        }
        if self.ttl_ms == 0 || Duration::from_millis(self.ttl_ms) > MAX_TTL {
            return bad("its ttl is zero or longer than the limit");
        }
        Ok(())
    }
}

impl FromStr for LeaseHandle {
    type Err = Error;

    /// Reads the text form made by [`LeaseHandle::to_string_secret`] (and the `v1:` form of
    /// earlier versions, as a shared handle).
    ///
    /// # Errors
    ///
    /// [`Error::InvalidInput`] (`what`: `"handle"`) for text that is not a well-formed
    /// handle; the message never repeats the text.
    fn from_str(s: &str) -> Result<LeaseHandle> {
        let malformed = || Error::invalid("handle", "not a lease handle of this version");
        let s = s.trim();
        let (rest, v1) = match s.strip_prefix(TEXT_PREFIX) {
            Some(rest) => (rest, false),
            None => (s.strip_prefix(TEXT_PREFIX_V1).ok_or_else(malformed)?, true),
        };
        let parts: Vec<&str> = rest.split(':').collect();
        let (deployment, parts) = match parts[..] {
            [.., deployment] if !v1 && parts.len() == 9 => (Some(deployment), &parts[..8]),
            _ if v1 => (Some(""), &parts[..]),
            _ => (None, &parts[..]),
        };
        let deployment = deployment
            .and_then(|d| unhex(d).and_then(|b| String::from_utf8(b).ok()))
            .ok_or_else(malformed)?;
        let (kind, once, parts) = match parts[..] {
            // v1: a mutex's handle had no kind; nothing said "once".
            [.., kind] if v1 && parts.len() == 7 => {
                (Kind::from_word(kind), Some(false), &parts[..6])
            }
            _ if v1 => (Some(Kind::unnamed()), Some(false), parts),
            [.., kind, once] if parts.len() == 8 => (
                Kind::from_word(kind),
                match once {
                    "once" => Some(true),
                    "shared" => Some(false),
                    _ => None,
                },
                &parts[..6],
            ),
            _ => (None, None, parts),
        };
        let (Some(kind), Some(once), &[namespace, name, token, fence, ttl, expires]) =
            (kind, once, parts)
        else {
            return Err(malformed());
        };
        let text = |h: &str| unhex(h).and_then(|b| String::from_utf8(b).ok());
        let handle = LeaseHandle {
            namespace: text(namespace).ok_or_else(malformed)?,
            name: text(name).ok_or_else(malformed)?,
            token: token.to_owned(),
            fencing_token: fence.parse().map_err(|_| malformed())?,
            ttl_ms: ttl.parse().map_err(|_| malformed())?,
            expires_unix_ms: expires.parse().map_err(|_| malformed())?,
            kind,
            once,
            deployment,
        };
        handle.validate()?;
        Ok(handle)
    }
}

/// Whether a handle made on deployment `made` is for a client of deployment `here` (both as
/// `builder/source.rs`'s `origin` writes them: `kind;db;server;...`, each server the places it is
/// reached at, joined by `,`). The kind and database must be the same; a server, or each
/// server of a Redlock, must share a place (an address as written or resolved) with one of
/// the client's; a Sentinel master's name must be the same. A handle that recorded nothing
/// (made before handles did) matches every client.
pub(crate) fn origin_matches(made: &str, here: &str) -> bool {
    if made.is_empty() {
        return true;
    }
    fn split(o: &str) -> ((Option<&str>, Option<&str>), Vec<&str>) {
        let mut parts = o.split(';');
        let head = (parts.next(), parts.next());
        (head, parts.collect())
    }
    let ((kind, db), made) = split(made);
    let ((kind_here, db_here), here) = split(here);
    if kind != kind_here || db != db_here || made.len() != here.len() {
        return false;
    }
    let shares_a_place = |a: &str, b: &str| {
        a.split(',')
            .any(|place| b.split(',').any(|other| other == place))
    };
    match kind {
        Some("server" | "redlock") => made
            .iter()
            .all(|a| here.iter().any(|b| shares_a_place(a, b))),
        _ => made == here,
    }
}

/// A deployment as `origin_matches` reads it, in words, for errors and `Debug`.
fn describe_origin(origin: &str) -> String {
    let mut parts = origin.split(';');
    let (kind, db) = (parts.next().unwrap_or(""), parts.next().unwrap_or("0"));
    let servers: Vec<String> = parts
        .map(|s| s.split(',').next().unwrap_or("").to_owned())
        .collect();
    let db = if db == "0" {
        String::new()
    } else {
        format!(" (database {db})")
    };
    match kind {
        "server" => format!("the server at {}{db}", servers.join("")),
        "redlock" => format!(
            "a Redlock of {} servers ({}){db}",
            servers.len(),
            servers.join(", ")
        ),
        "sentinel" => format!("the Sentinel master {:?}", servers.join(";")),
        "cluster" => "a Redis Cluster".to_owned(),
        "" => "not recorded".to_owned(),
        _ => "an unknown deployment".to_owned(),
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn unhex(s: &str) -> Option<Vec<u8>> {
    if !s.len().is_multiple_of(2) {
        return None;
    }
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(s.get(i..i + 2)?, 16).ok())
        .collect()
}

impl LockGuard {
    /// This lock as a shared [`LeaseHandle`], to pass to another thread or process
    /// ([`LockClient::resume`]). A shared handle shares this guard's lease by design: the
    /// guard stays the owner, and every guard resumed from the handle (it may be resumed any
    /// number of times) holds the lock under the same owner token, so each can extend and
    /// release it. Whichever releases first frees the lock for everyone; the others find it
    /// lost within about a round trip where loss notification is on
    /// ([`LockClient::loss_detection`](crate::LockClient::loss_detection)), else at their
    /// next renewal (within a third of the TTL), through `on_lost`, or at their `extend`,
    /// `remaining_ttl` or release (`Late`, or `Lost` once somebody else took it), and
    /// [`ensure_held`](Self::ensure_held) says so from then on. To hand the lock over to
    /// exactly one new owner instead, use [`into_handle`](Self::into_handle). The handle
    /// carries the owner token: whoever has it owns the lock.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn main() -> redis_lock::Result<()> {
    /// # let locks = redis_lock::LockClient::open("redis://127.0.0.1/")?;
    /// let guard = locks.lock("report")?;
    /// let handle = guard.handle();
    /// assert_eq!(handle.name(), "report");
    /// # Ok(()) }
    /// ```
    #[must_use]
    pub fn handle(&self) -> LeaseHandle {
        let lease = &self.lease;
        let (ttl, expires_at) = lease.ttl_and_expiry();
        let left = expires_at.saturating_duration_since(std::time::Instant::now());
        let expires = SystemTime::now() + left;
        LeaseHandle {
            name: lease.name.clone(),
            namespace: lease.inner.config.namespace.clone(),
            token: lease.token.clone(),
            fencing_token: lease.fence,
            ttl_ms: u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX),
            expires_unix_ms: expires
                .duration_since(UNIX_EPOCH)
                .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX)),
            kind: lease.kind(),
            once: false,
            deployment: lease.inner.config.origin.clone(),
        }
    }

    /// Gives the lock up to a [`LeaseHandle`] without releasing it: the watchdog stops,
    /// nothing is sent to Redis, and the lock stays held until whoever has the handle
    /// resumes it ([`LockClient::resume`]) and releases it, or it expires with its TTL (as
    /// of [`LeaseHandle::expires_at`]). Reentrant guards of the same acquisition still alive
    /// report [`ReleaseOutcome::HandedOff`](crate::ReleaseOutcome::HandedOff) when released.
    ///
    /// The handle is **resumed at most once**, in any process: [`LockClient::resume`] moves
    /// the lock to a new owner token in Redis (one atomic script: compare the handle's token,
    /// replace it; the fencing token, TTL and holder information stay), so a second resume of
    /// the same handle fails with [`Error::HandleSpent`] and two resumed guards never both
    /// count as holding it. Under Redlock the move needs a majority of the servers.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn main() -> redis_lock::Result<()> {
    /// # let locks = redis_lock::LockClient::open("redis://127.0.0.1/")?;
    /// let handle = locks.lock("report")?.into_handle();
    /// // still held in Redis; the handle owns it now
    /// let guard = locks.resume(&handle)?;
    /// guard.release()?;
    /// # Ok(()) }
    /// ```
    #[must_use = "the handle is the only way left to release the lock before it expires"]
    pub fn into_handle(mut self) -> LeaseHandle {
        let handle = LeaseHandle {
            once: true,
            ..self.handle()
        };
        self.live = false;
        // This guard's hold goes with it; the lease is handed off for every sibling too.
        self.lease.drop_hold();
        self.lease.hand_off();
        handle
    }
}

impl LockClient {
    /// A guard for the lock `handle` stands for, made by another guard of this or another
    /// process ([`LockGuard::handle`], [`LockGuard::into_handle`]). A watchdog renews it to
    /// the handle's TTL while the guard lives (see [`resume_with`](Self::resume_with) to
    /// turn that off); dropping it releases the lock. Checks with Redis first that the
    /// handle's owner token still owns the lock and its fencing token is the lock's (two
    /// reads). A shared handle ([`LockGuard::handle`]) writes nothing: the resumed guard holds
    /// the lock under the handle's owner token, beside the guard that made it. A handle given
    /// up by [`LockGuard::into_handle`] is resumed at most once: the lock then moves to a new
    /// owner token (one more round trip, one atomic script), which only the resumed guard
    /// has.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidInput`] (`what`: `"handle"`) for a handle made under another namespace,
    /// a malformed or altered one (owner token, fencing token); for a handle given up by
    /// `into_handle`, [`Error::HandleSpent`] when its token holds the lock no longer (it was
    /// resumed already, or the lock expired or was released); for a shared handle,
    /// [`Error::Lost`] when the lock expired or has another owner now; Redis and pool errors.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn main() -> redis_lock::Result<()> {
    /// # let locks = redis_lock::LockClient::open("redis://127.0.0.1/")?;
    /// // In the process that was handed the lock:
    /// let handle: redis_lock::LeaseHandle = std::env::var("REDIS_LOCK_HANDLE")
    ///     .expect("started with a lock")
    ///     .parse()?;
    /// let guard = locks.resume(&handle)?;
    /// guard.extend(std::time::Duration::from_secs(60))?;
    /// // ... work ...
    /// guard.release()?;
    /// # Ok(()) }
    /// ```
    pub fn resume(&self, handle: &LeaseHandle) -> Result<LockGuard> {
        self.resume_with(handle, true)
    }

    /// [`resume`](Self::resume), with a watchdog or without one (`watchdog: false`: the lock
    /// expires as of the handle's expiry unless extended).
    ///
    /// # Errors
    ///
    /// As [`resume`](Self::resume).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn main() -> redis_lock::Result<()> {
    /// # let locks = redis_lock::LockClient::open("redis://127.0.0.1/")?;
    /// # let handle = locks.lock("report")?.into_handle();
    /// // Just finish it early: no renewal thread needed.
    /// locks.resume_with(&handle, false)?.release()?;
    /// # Ok(()) }
    /// ```
    pub fn resume_with(&self, handle: &LeaseHandle, watchdog: bool) -> Result<LockGuard> {
        handle.validate()?;
        if handle.namespace != self.inner.config.namespace {
            return Err(Error::invalid(
                "handle",
                format!(
                    "it is for namespace {:?}; this client uses {:?}",
                    handle.namespace, self.inner.config.namespace
                ),
            ));
        }
        if !origin_matches(&handle.deployment, &self.inner.config.origin) {
            return Err(Error::invalid(
                "handle",
                format!(
                    "it was made on {}; this client locks on {}",
                    describe_origin(&handle.deployment),
                    describe_origin(&self.inner.config.origin)
                ),
            ));
        }
        // Resumed through the primitive that took it (the table in `hold/mod.rs`).
        let primitive = handle.kind.make(Params::DEFAULT);
        let lease = self.inner.resume(
            &primitive,
            &Resumed {
                name: &handle.name,
                token: handle.token(),
                fence: handle.fencing_token,
                ttl: handle.ttl(),
                watchdog,
                once: handle.once,
            },
        )?;
        Ok(LockGuard::new(lease))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn handle() -> LeaseHandle {
        LeaseHandle {
            name: "a:b {c} d".to_owned(),
            namespace: "app:".to_owned(),
            token: "0123456789abcdef0123456789abcdef".to_owned(),
            fencing_token: 42,
            ttl_ms: 30_000,
            expires_unix_ms: 1_700_000_000_000,
            kind: Kind::Mutex,
            once: true,
            deployment: "server;0;127.0.0.1:6379,localhost:6379".to_owned(),
        }
    }

    #[test]
    fn every_kind_reads_back_and_v1_handles_read_as_shared() {
        for once in [true, false] {
            for &kind in Kind::ALL {
                let h = LeaseHandle {
                    kind,
                    once,
                    ..handle()
                };
                let text = h.to_string_secret();
                assert_eq!(
                    text.strip_prefix(TEXT_PREFIX).unwrap().split(':').count(),
                    9
                );
                let back: LeaseHandle = text.parse().unwrap();
                assert_eq!(back, h);
                assert_eq!(back.kind(), kind.word());
                assert_eq!(back.is_shared(), !once);
                assert!(format!("{h:?}").contains(kind.word()));
            }
        }
        // The v1 form: six fields for a mutex, a seventh with any other kind; shared.
        let v1 = format!(
            "{TEXT_PREFIX_V1}{}:{}:{}:42:30000:1700000000000",
            hex(b"app:"),
            hex(b"a:b {c} d"),
            handle().token
        );
        let back: LeaseHandle = v1.parse().unwrap();
        assert_eq!(
            back,
            LeaseHandle {
                once: false,
                deployment: String::new(),
                ..handle()
            }
        );
        assert!(format!("{back:?}").contains("not recorded"));
        let read: LeaseHandle = format!("{v1}:read").parse().unwrap();
        assert_eq!((read.kind(), read.is_shared()), ("read", true));
        for bad in ["upgrade", "", "once"] {
            let text = format!("{v1}:{bad}");
            assert!(text.parse::<LeaseHandle>().is_err(), "{text}");
        }
        let good = handle().to_string_secret();
        for bad in [
            good.replace(":once:", ":twice:"),
            good.replace(":once:", ":"),
            good.replace(":mutex:", ":upgrade:"),
            good.rsplit_once(':').unwrap().0.to_owned(),
            format!("{good}zz"),
        ] {
            assert!(bad.parse::<LeaseHandle>().is_err(), "{bad}");
        }
    }

    #[test]
    fn a_handle_matches_the_deployment_it_was_made_on() {
        let one = "server;0;127.0.0.1:6379,localhost:6379";
        assert!(origin_matches(one, one));
        assert!(
            origin_matches(one, "server;0;127.0.0.1:6379"),
            "resolved alike"
        );
        assert!(origin_matches("", one), "made before handles recorded it");
        assert!(
            !origin_matches(one, "server;1;127.0.0.1:6379"),
            "another database"
        );
        assert!(!origin_matches(one, "server;0;127.0.0.1:6380"));
        let three = "redlock;0;h1:1,10.0.0.1:1;h2:2;h3:3";
        assert!(
            origin_matches(three, "redlock;0;h3:3;10.0.0.1:1;h2:2"),
            "any order"
        );
        assert!(
            !origin_matches(three, "redlock;0;h1:1;h2:2"),
            "two of three"
        );
        assert!(!origin_matches(three, "redlock;0;h1:1;h2:2;h4:4"));
        assert!(
            !origin_matches(one, "redlock;0;127.0.0.1:6379"),
            "another kind"
        );
        assert!(!origin_matches("redlock;0;127.0.0.1:6379", one));
        assert!(origin_matches("sentinel;0;m", "sentinel;0;m"));
        assert!(!origin_matches("sentinel;0;m", "sentinel;0;other"));
        assert!(origin_matches("cluster;0", "cluster;0"));
        assert_eq!(describe_origin(one), "the server at 127.0.0.1:6379");
        assert_eq!(
            describe_origin(three),
            "a Redlock of 3 servers (h1:1, h2:2, h3:3)"
        );
    }

    #[test]
    fn the_text_form_reads_back_and_debug_and_display_hide_the_token() {
        let h = handle();
        let text = h.to_string_secret();
        assert!(text.starts_with(TEXT_PREFIX));
        assert!(!text.contains(' '), "one word, for environment variables");
        assert_eq!(text.parse::<LeaseHandle>().unwrap(), h);
        for shown in [format!("{h:?}"), h.to_string()] {
            assert!(!shown.contains(&h.token), "{shown}");
            assert!(shown.contains("a:b {c} d"), "{shown}");
        }
    }

    #[test]
    fn malformed_or_altered_text_is_refused_without_repeating_it() {
        let good = handle().to_string_secret();
        let cases = [
            String::new(),
            "garbage".to_owned(),
            good.replacen("v2", "v3", 1),
            good.replace(&handle().token, "0123456789ABCDEF0123456789ABCDEF"),
            good.replace(&handle().token, "0123"),
            format!("{good}:1"),
            good.replace(":42:", ":-1:"),
            good.replace(":30000:", ":0:"),
            good.replacen(&hex(b"app:"), "zz", 1),
        ];
        for case in cases {
            let err = case.parse::<LeaseHandle>().unwrap_err();
            assert!(
                matches!(err, Error::InvalidInput { what: "handle", .. }),
                "{case}: {err:?}"
            );
            assert!(!err.to_string().contains(&handle().token), "{err}");
        }
    }
}
