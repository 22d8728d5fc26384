//! `LockClient::list`: the locks held under the client's namespace, found with `SCAN`.

use std::collections::BTreeSet;
use std::sync::atomic::Ordering;

use crate::backend::{Backend, Store};
use crate::client::LockClient;
use crate::connection::PooledConn;
use crate::error::Result;
use crate::info::LockInfo;
use crate::keys::{LockKeys, validate_name};
use crate::ops::Inner;
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
    /// appear. On Redis Cluster only the node the client is connected to is scanned. Under
    /// Redlock every server is scanned (a majority must answer) and each lock found is
    /// inspected by quorum, as [`inspect`](LockClient::inspect) does.
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
        let store = match &inner.backend {
            Backend::Single(store) => store,
            Backend::Quorum(q) => return list_by_quorum(inner, q.stores(), &matcher),
        };
        let mut conn = inner.conn(store)?;
        let names = scan_names(inner, &mut conn, &matcher)?;
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

/// The names of the lock keys matching `matcher` on the server behind `conn`.
fn scan_names(inner: &Inner, conn: &mut PooledConn, matcher: &str) -> Result<BTreeSet<String>> {
    let namespace = &inner.config.namespace;
    let mut names = BTreeSet::new();
    let mut cursor = 0u64;
    loop {
        // `conn()` counted the first request.
        if cursor != 0 {
            inner.requests.fetch_add(1, Ordering::Relaxed);
        }
        let (next, keys): (u64, Vec<Vec<u8>>) = redis::cmd("SCAN")
            .arg(cursor)
            .arg("MATCH")
            .arg(matcher)
            .arg("COUNT")
            .arg(SCAN_COUNT)
            .query(conn.con())?;
        names.extend(keys.iter().filter_map(|key| lock_name(namespace, key)));
        if next == 0 {
            return Ok(names);
        }
        cursor = next;
    }
}

/// Redlock: a lock held by a majority is on at least one server of any majority, so the names
/// found on a majority of the servers include every held lock; each is then inspected by
/// quorum (listed when a majority agrees on its holder). Fewer than a majority scanned is the
/// error of the last server that failed.
fn list_by_quorum<'a>(
    inner: &Inner,
    stores: impl Iterator<Item = &'a Store>,
    matcher: &str,
) -> Result<Vec<LockInfo>> {
    let mut names = BTreeSet::new();
    let (mut total, mut scanned, mut failed) = (0, 0, None);
    for store in stores {
        total += 1;
        match inner
            .conn(store)
            .and_then(|mut conn| scan_names(inner, &mut conn, matcher))
        {
            Ok(found) => {
                scanned += 1;
                names.extend(found);
            }
            Err(e) => failed = Some(e),
        }
    }
    if let Some(e) = failed
        && scanned < total / 2 + 1
    {
        return Err(e);
    }
    let mut locks = Vec::with_capacity(names.len());
    for name in names {
        if let Some(info) = inner.inspect(&name)? {
            locks.push(info);
        }
    }
    Ok(locks)
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
