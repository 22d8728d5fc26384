//! How a lock name becomes Redis keys, which names are accepted, and how lock keys are found
//! again by `SCAN`.

use crate::error::{Error, Result};

// The mutex's companion keys are the lock key followed by these suffixes. A script sent only
// the lock key builds the others from the same text (the mutex's release), so the two sides
// cannot drift apart. They are macros so that Lua text can `concat!` them.

/// Suffix of the fencing counter's key.
macro_rules! fence_suffix {
    () => {
        ":fence"
    };
}

/// Suffix of the semaphore's stored limit (`LockKeys::limit`); the semaphore's scripts raise
/// its TTL with its permits' from the permits key alone.
macro_rules! limit_suffix {
    () => {
        ":limit"
    };
}

/// Suffix of the shared wake-up list's key.
macro_rules! signal_suffix {
    () => {
        ":signal"
    };
}

/// Suffix of the waiter registry's key.
macro_rules! waiters_suffix {
    () => {
        ":waiters"
    };
}

/// Suffix of the fair queue's key.
macro_rules! queue_suffix {
    () => {
        ":queue"
    };
}

/// Longest accepted lock name, in bytes. Redis allows 512 MiB keys; a lock name longer than
/// this is almost certainly a bug (a serialized payload used as a key).
pub const MAX_KEY_LEN: usize = 1024;

/// Longest accepted namespace, in bytes.
pub const MAX_NAMESPACE_LEN: usize = 256;

/// The Redis keys that belong to one lock. They all start with `<namespace>{<name>}`, so the
/// first `{`…`}` pair (the Redis Cluster hash tag) is the same for all of them and they live
/// in one hash slot: the scripts may touch all of them at once on a cluster.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct LockKeys {
    /// The hash that holds owner token and holder information; its TTL is the lock's.
    pub(crate) lock: String,
    /// Fencing counter: INCR'd by every successful acquisition; expires (no earlier than a
    /// string lock, whose fence it stands for), and starts from the clock when it is gone
    /// (`next_fence!`, `lua.rs`).
    pub(crate) fence: String,
    /// Wake-up list: a release pushes one element, a waiter BLPOPs it. Fair waiters each
    /// have their own, `<signal>:<waiter id>` ([`wake`](Self::wake)).
    pub(crate) signal: String,
    /// Registered waiters: a sorted set of waiter ids scored by when each registration lapses.
    pub(crate) waiters: String,
    /// Fair mode: waiters in arrival order (a sorted set scored by ticket).
    pub(crate) queue: String,
}

impl LockKeys {
    pub(crate) fn new(namespace: &str, name: &str) -> Result<LockKeys> {
        validate_name(name)?;
        // Built by hand rather than with `format!`: five keys per acquisition, and the
        // formatting machinery was a tenth of a lock cycle's client instructions (callgrind).
        let mut lock = String::with_capacity(namespace.len() + name.len() + 2);
        lock.push_str(namespace);
        lock.push('{');
        lock.push_str(name);
        lock.push('}');
        let with = |suffix: &str| join(&lock, &[suffix]);
        Ok(LockKeys {
            fence: with(fence_suffix!()),
            signal: with(signal_suffix!()),
            waiters: with(waiters_suffix!()),
            queue: with(queue_suffix!()),
            lock,
        })
    }

    /// The wake-up list of fair waiter `id`. The release script builds the same name itself
    /// (`signal .. ':' .. id`), so the two must stay in step.
    pub(crate) fn wake(&self, id: &str) -> String {
        join(&self.signal, &[":", id])
    }

    /// The Redis Cluster hash tag of every key of this lock: the name up to its first `}`.
    /// Locks with the same tag share a slot, so one script may name all their keys.
    pub(crate) fn slot_tag(&self) -> &str {
        let name = self.name();
        name.split_once('}').map_or(name, |(tag, _)| tag)
    }

    /// The cancel list of waiter `id`: a cancelled waiter blocks on it beside its wake-up
    /// list, and the cancel pushes onto it (`wire::cancel`).
    pub(crate) fn cancel(&self, id: &str) -> String {
        join(&self.lock, &[":cancel:", id])
    }
}

impl LockKeys {
    /// The lock name, as the caller gave it: what lies between the namespace's end (which
    /// has no braces) and the closing brace of the tag.
    pub(crate) fn name(&self) -> &str {
        let start = self.lock.find('{').map_or(0, |i| i + 1);
        let end = self.lock.len().saturating_sub(1).max(start);
        &self.lock[start..end]
    }
}

impl LockKeys {
    /// A read-write lock's read shares: a sorted set, owner token → when the share expires.
    pub(crate) fn readers(&self) -> String {
        join(&self.lock, &[":readers"])
    }

    /// A read-write lock's waiting writers: a sorted set, waiter id → when the registration
    /// lapses.
    pub(crate) fn writers(&self) -> String {
        join(&self.lock, &[":writers"])
    }

    /// A read-write lock's wake-up list for waiting writers (readers use `signal`).
    pub(crate) fn writer_signal(&self) -> String {
        join(&self.lock, &[":wsignal"])
    }
}

/// The semaphore's companion keys (`wire/semaphore/`); the permits themselves are the
/// sorted set at [`lock`](Self::lock).
impl LockKeys {
    /// Semaphore: owner token → holder information of each permit.
    pub(crate) fn holders(&self) -> String {
        join(&self.lock, &[":holders"])
    }

    /// Semaphore: the number of permits, stored by the first acquirer or `set_permits`; it
    /// expires with the permits (its TTL is raised with theirs).
    pub(crate) fn limit(&self) -> String {
        join(&self.lock, &[limit_suffix!()])
    }

    /// Semaphore: grants on the shared wake-up list not yet claimed (grant token → expiry).
    pub(crate) fn grants(&self) -> String {
        join(&self.lock, &[":grants"])
    }
}

/// `base` followed by `parts`, without `format!` (keys are built on every acquisition).
fn join(base: &str, parts: &[&str]) -> String {
    let mut key = String::with_capacity(base.len() + parts.iter().map(|p| p.len()).sum::<usize>());
    key.push_str(base);
    for part in parts {
        key.push_str(part);
    }
    key
}

/// The Redis Cluster slot of `key`: CRC16 (XMODEM) of its hash tag (the text between the
/// first `{` and the next `}`, when not empty), else of the whole key, modulo 16384. Every key
/// of one lock has the lock's tag, so one slot.
#[cfg(any(feature = "cluster", test))]
pub(crate) fn slot_of(key: impl AsRef<[u8]>) -> u16 {
    let bytes = key.as_ref();
    let tagged = bytes.iter().position(|&b| b == b'{').and_then(|open| {
        let rest = &bytes[open + 1..];
        let close = rest.iter().position(|&b| b == b'}')?;
        (close > 0).then(|| &rest[..close])
    });
    crc16(tagged.unwrap_or(bytes)) % 16384
}

/// CRC16-CCITT (XMODEM), the checksum Redis Cluster hashes keys with.
#[cfg(any(feature = "cluster", test))]
fn crc16(bytes: &[u8]) -> u16 {
    let mut crc: u16 = 0;
    for &b in bytes {
        crc ^= u16::from(b) << 8;
        for _ in 0..8 {
            crc = if crc & 0x8000 != 0 {
                (crc << 1) ^ 0x1021
            } else {
                crc << 1
            };
        }
    }
    crc
}

pub(crate) fn validate_name(name: &str) -> Result<()> {
    if name.is_empty() {
        return Err(Error::invalid("key", "the lock name is empty"));
    }
    if name.len() > MAX_KEY_LEN {
        return Err(Error::invalid(
            "key",
            format!(
                "the lock name is {} bytes long; the limit is {MAX_KEY_LEN}",
                name.len()
            ),
        ));
    }
    // `lock:{}x}` has an empty hash tag, so Redis Cluster would hash the whole key and the
    // lock's keys would land in different slots.
    if name.starts_with('}') {
        return Err(Error::invalid(
            "key",
            "the lock name must not start with '}' (it would break the hash tag)",
        ));
    }
    Ok(())
}

pub(crate) fn validate_namespace(namespace: &str) -> Result<()> {
    if namespace.len() > MAX_NAMESPACE_LEN {
        return Err(Error::invalid(
            "namespace",
            format!(
                "it is {} bytes long; the limit is {MAX_NAMESPACE_LEN}",
                namespace.len()
            ),
        ));
    }
    // A brace in the namespace would become the hash tag and put every lock in one slot, or
    // split one lock's keys over several slots.
    if namespace.contains(['{', '}']) {
        return Err(Error::invalid(
            "namespace",
            format!("{namespace:?} contains '{{' or '}}', which would break the key layout"),
        ));
    }
    Ok(())
}

/// The `SCAN ... MATCH` pattern for the lock keys under `namespace` whose names match the
/// glob `pattern`. A lock's own key is `ns{name}`; its companions add a suffix after the `}`,
/// so a pattern ending in `}` matches lock keys only (and names ending in `}` still match).
pub(crate) fn scan_pattern(namespace: &str, pattern: &str) -> String {
    format!("{}{{{pattern}}}", escape_glob(namespace))
}

/// The lock name in `key` if it is a lock key (`ns{name}`) under `namespace`.
pub(crate) fn lock_name(namespace: &str, key: &[u8]) -> Option<String> {
    let key = std::str::from_utf8(key).ok()?;
    let name = key
        .strip_prefix(namespace)?
        .strip_prefix('{')?
        .strip_suffix('}')?;
    validate_name(name).ok()?;
    Some(name.to_owned())
}

/// `text` with the characters that are special in a Redis glob escaped.
fn escape_glob(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        if matches!(c, '*' | '?' | '[' | ']' | '\\') {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

#[cfg(test)]
mod tests {

    #[test]
    fn slots_are_those_redis_cluster_computes() {
        // Values from `CLUSTER KEYSLOT` (and the CRC16 check value of "123456789", 0x31C3).
        assert_eq!(crc16(b"123456789"), 0x31C3);
        assert_eq!(slot_of("foo"), 12182);
        assert_eq!(slot_of("{user1000}.following"), slot_of("user1000"));
        assert_eq!(slot_of("lock:{report}"), slot_of("lock:{report}:fence"));
        assert_eq!(slot_of("{}empty"), slot_of("{}empty"));
        assert_ne!(
            slot_of("{}empty"),
            slot_of("x{}empty"),
            "an empty tag hashes the key"
        );
    }

    use super::*;

    #[test]
    fn keys_share_the_hash_tag() {
        let k = LockKeys::new("lock:", "report").unwrap();
        assert_eq!(k.lock, "lock:{report}");
        assert_eq!(k.fence, "lock:{report}:fence");
        assert_eq!(k.signal, "lock:{report}:signal");
        assert_eq!(k.queue, "lock:{report}:queue");
        assert_eq!(k.waiters, "lock:{report}:waiters");
        assert_eq!(k.wake("ab12"), "lock:{report}:signal:ab12");
        assert_eq!(k.name(), "report");
        assert_eq!(k.holders(), "lock:{report}:holders");
        assert_eq!(k.limit(), "lock:{report}:limit");
        assert_eq!(k.grants(), "lock:{report}:grants");
        assert_eq!(LockKeys::new("", "a}b{c}").unwrap().name(), "a}b{c}");
    }

    #[test]
    fn names_with_braces_keep_one_tag() {
        // The tag is cut at the first '}', which is inside the shared prefix of every key.
        let k = LockKeys::new("lock:", "a}b{c").unwrap();
        assert!(k.fence.starts_with("lock:{a}b{c}"));
        assert!(k.cancel("ab12").starts_with("lock:{a}"));
        // The slot tag: the name up to its first '}'.
        assert_eq!(k.slot_tag(), "a");
        assert_eq!(LockKeys::new("lock:", "a}x").unwrap().slot_tag(), "a");
        assert_eq!(
            LockKeys::new("lock:", "report").unwrap().slot_tag(),
            "report"
        );
        assert_eq!(LockKeys::new("lock:", "a:{x}").unwrap().slot_tag(), "a:{x");
    }

    #[test]
    fn bad_names_are_rejected() {
        assert!(LockKeys::new("lock:", "").is_err());
        assert!(LockKeys::new("lock:", &"x".repeat(MAX_KEY_LEN + 1)).is_err());
        assert!(LockKeys::new("lock:", &"x".repeat(MAX_KEY_LEN)).is_ok());
        assert!(LockKeys::new("lock:", "}x").is_err());
        assert!(validate_namespace("a{b:").is_err());
        assert!(validate_namespace("").is_ok());
    }

    #[test]
    fn lock_keys_are_told_from_their_companions() {
        assert_eq!(lock_name("lock:", b"lock:{report}"), Some("report".into()));
        assert_eq!(lock_name("lock:", b"lock:{report}:fence"), None);
        assert_eq!(lock_name("lock:", b"lock:{report}:signal"), None);
        assert_eq!(lock_name("lock:", b"lock:{a}b}"), Some("a}b".into()));
        assert_eq!(lock_name("lock:", b"other:{report}"), None);
        assert_eq!(lock_name("lock:", b"lock:{}"), None);
        assert_eq!(lock_name("lock:", b"lock:{}x}"), None);
        assert_eq!(lock_name("", b"{x}"), Some("x".into()));
    }

    #[test]
    fn namespaces_are_escaped_for_match() {
        assert_eq!(escape_glob("lock:"), "lock:");
        assert_eq!(escape_glob("a*b?[c]\\"), "a\\*b\\?\\[c\\]\\\\");
        assert_eq!(scan_pattern("ns*", "r-*"), "ns\\*{r-*}");
    }
}
