//! A user crate that renames the dependency (`locks = { package = "redis-lock-sync" }`), so
//! no `redis_lock` is in scope here. `#[distributed_lock]` finds `locks` in this package's
//! Cargo.toml by itself (`found_job`), and `crate = "locks"` still names it explicitly
//! (`locked_job`).

use locks::{LockClient, distributed_lock};

/// Counts its runs under the lock `renamed:{n}`, naming the runtime with `crate = "locks"`.
#[distributed_lock(crate = "locks", key = "renamed:{n}", client = client, ttl = "2s", wait = "0s")]
pub fn locked_job(
    client: &LockClient,
    n: u32,
    runs: &std::sync::atomic::AtomicU32,
) -> locks::Result<u32> {
    Ok(runs.fetch_add(1, std::sync::atomic::Ordering::SeqCst) + 1)
}

/// What `found_job` saw of its lock `found:{n}` while its body ran.
#[derive(Debug)]
pub struct Seen {
    /// The fencing token of the guard the attribute bound.
    pub token: u64,
    /// `inspect` of the lock, from inside the body.
    pub holder: Option<locks::LockInfo>,
    /// Whether another client's `try_lock` of the same name, from inside the body, found it
    /// taken.
    pub busy_for_others: bool,
}

/// The same lock without `crate = "..."`: the attribute reads this package's Cargo.toml and
/// finds the dependency under the name `locks`.
#[distributed_lock(key = "found:{n}", client = client, ttl = "2s", wait = "0s", guard = lock)]
pub fn found_job(client: &LockClient, other: &LockClient, n: u32) -> locks::Result<Seen> {
    let name = format!("found:{n}");
    Ok(Seen {
        token: lock.fencing_token(),
        holder: client.inspect(&name)?,
        busy_for_others: other.try_lock(&name)?.is_none(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use locks::testing::RedisServer;

    #[test]
    fn the_renamed_dependency_locks_and_releases() {
        let server = RedisServer::start();
        let client = LockClient::open(&server.url()).unwrap();
        let runs = std::sync::atomic::AtomicU32::new(0);
        assert_eq!(locked_job(&client, 7, &runs).unwrap(), 1);
        assert_eq!(locked_job(&client, 7, &runs).unwrap(), 2);
        assert!(
            client.inspect("renamed:7").unwrap().is_none(),
            "released after each call"
        );
        // While someone else holds it, the call fails with the library's own error.
        let held = client.lock("renamed:7").unwrap();
        let other = LockClient::open(&server.url()).unwrap();
        let err = locked_job(&other, 7, &runs).unwrap_err();
        assert!(err.is_busy(), "{err}");
        drop(held);
    }

    #[test]
    fn the_renamed_dependency_is_found_without_crate() {
        let server = RedisServer::start();
        let client = LockClient::open(&server.url()).unwrap();
        let other = LockClient::open(&server.url()).unwrap();

        let seen = found_job(&client, &other, 3).unwrap();
        let holder = seen.holder.expect("the lock is taken while the body runs");
        assert!(holder.owned, "{holder:?}");
        assert_eq!(
            holder.fencing_token, seen.token,
            "and it is this call's lock"
        );
        assert!(
            seen.busy_for_others,
            "another client cannot take it meanwhile"
        );
        assert!(
            client.inspect("found:3").unwrap().is_none(),
            "released when the call returns"
        );

        // While someone else holds it, the call fails with the library's own error.
        let held = other.lock("found:3").unwrap();
        let err = found_job(&client, &other, 3).unwrap_err();
        assert!(err.is_busy(), "{err}");
        drop(held);
        assert!(found_job(&client, &other, 3).is_ok(), "free again");
    }
}
