//! `LockClient::list`: the locks held under the client's namespace, found with `SCAN`.

use std::collections::BTreeSet;
use std::sync::atomic::Ordering;

use crate::client::LockClient;
use crate::error::Result;
use crate::info::LockInfo;
use crate::keys::{LockKeys, validate_name};
use crate::scripts;

/// Keys asked for per `SCAN` call: a hint to Redis, which may return more or fewer.
const SCAN_COUNT: u32 = 1000;

impl LockClient {
    /// The locks currently held under this client's namespace whose names match `pattern`,
    /// sorted by name.
    ///
    /// `pattern` is a Redis glob on lock names (without namespace): `*` lists every lock,
    /// `report-*` those starting with `report-`; `?`, `[abc]` and `\` escapes work as in
    /// Redis `SCAN ... MATCH`. The keys are found with `SCAN`, never `KEYS`, so Redis keeps
    /// serving other clients meanwhile; the cost is one `SCAN` per thousand keys in the
    /// database plus one round trip per matching lock. The fencing counters and wake-up lists
    /// that belong to locks are not listed, and neither are keys of other types that happen to
    /// match.
    ///
    /// A listing is not a snapshot: a lock taken or released while it runs may or may not
    /// appear. On Redis Cluster only the node the client is connected to is scanned.
    ///
    /// # Errors
    ///
    /// Redis and pool errors.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # fn main() -> redis_lock::Result<()> {
    /// let locks = redis_lock::LockClient::open("redis://127.0.0.1/")?;
    /// for info in locks.list("report-*")? {
    ///     println!("{} held by {} (pid {})", info.key, info.host, info.pid);
    /// }
    /// # Ok(()) }
    /// ```
    pub fn list(&self, pattern: &str) -> Result<Vec<LockInfo>> {
        let inner = &self.inner;
        let namespace = &inner.config.namespace;
        // A lock's own key is `ns{name}`; its fencing counter and wake-up list add a suffix
        // after the `}`, so a pattern ending in `}` matches lock keys only (and lock names
        // ending in `}` still match, as they should).
        let matcher = format!("{}{{{pattern}}}", escape_glob(namespace));
        let mut names = BTreeSet::new();
        let mut conn = inner.conn(inner.list_store())?;
        let mut cursor = 0u64;
        loop {
            // `conn()` counted the first request.
            if cursor != 0 {
                inner.requests.fetch_add(1, Ordering::Relaxed);
            }
            let (next, keys): (u64, Vec<Vec<u8>>) = redis::cmd("SCAN")
                .arg(cursor)
                .arg("MATCH")
                .arg(&matcher)
                .arg("COUNT")
                .arg(SCAN_COUNT)
                .query(conn.con())?;
            names.extend(keys.iter().filter_map(|key| lock_name(namespace, key)));
            if next == 0 {
                break;
            }
            cursor = next;
        }
        let mut locks = Vec::with_capacity(names.len());
        for name in names {
            let keys = LockKeys::new(namespace, &name)?;
            let reply: Vec<redis::Value> = scripts::INSPECT.key(&keys.lock).invoke(conn.con())?;
            inner.requests.fetch_add(1, Ordering::Relaxed);
            // Empty: released since the scan. One element: a key of another type.
            if reply.len() > 1 {
                locks.push(LockInfo::from_reply(&name, &reply)?);
            }
        }
        Ok(locks)
    }
}

/// The lock name in `key` if it is a lock key (`ns{name}`) under `namespace`.
fn lock_name(namespace: &str, key: &[u8]) -> Option<String> {
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
    use super::*;

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
    }
}
