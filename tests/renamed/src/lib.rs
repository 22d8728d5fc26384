//! A user crate that renames the dependency (`locks = { package = "redis-lock-sync" }`):
//! `#[distributed_lock]` must reach its runtime through `crate = "locks"`, since no
//! `redis_lock` is in scope here.

use locks::{LockClient, distributed_lock};

/// Counts its runs under the lock `renamed:{n}`.
#[distributed_lock(crate = "locks", key = "renamed:{n}", client = client, ttl = "2s", wait = "0s")]
pub fn locked_job(
    client: &LockClient,
    n: u32,
    runs: &std::sync::atomic::AtomicU32,
) -> locks::Result<u32> {
    Ok(runs.fetch_add(1, std::sync::atomic::Ordering::SeqCst) + 1)
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
}
