//! `LockClient::list`: the locks held under the client's namespace, found with `SCAN`.

use crate::client::LockClient;
use crate::error::{Error, Result};
use crate::info::LockInfo;
use crate::wire::keys::scan_pattern;

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
    /// match (semaphores among them: [`list_semaphores`](LockClient::list_semaphores) lists
    /// those).
    ///
    /// A listing is not a snapshot: a lock taken or released while it runs may or may not
    /// appear. On Redis Cluster every master is scanned (the masters come from `CLUSTER
    /// SLOTS`, the scan of each is routed to it). Under
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
    ///     let host = info.host.as_deref().unwrap_or("(no holder stored)");
    ///     println!("{} held by {host}", info.key);
    /// }
    /// # Ok(()) }
    /// ```
    pub fn list(&self, pattern: &str) -> Result<Vec<LockInfo>> {
        let inner = &self.inner;
        let namespace = &inner.config.namespace;
        let names = inner
            .deployment
            .scan(namespace, &scan_pattern(namespace, pattern))?;
        let mut locks = Vec::with_capacity(names.len());
        for name in names {
            // Released since the scan: not listed. A key of another type that matched:
            // skipped, as promised above.
            match self.inspect(&name) {
                Ok(Some(info)) => locks.push(info),
                Ok(None) | Err(Error::WrongType { .. }) => {}
                Err(e) => return Err(e),
            }
        }
        Ok(locks)
    }
}
