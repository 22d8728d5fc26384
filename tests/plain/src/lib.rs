//! A user crate with the dependency as most users write it, `redis-lock-sync = "0.1"`: the
//! package is `redis-lock-sync` and its library `redis_lock`, the name this crate uses.
//! `#[distributed_lock]` without `crate = "..."` must reach its runtime as `::redis_lock`.

use redis_lock::{LockClient, distributed_lock};

/// What `job` saw of its lock `plain:{n}` while its body ran.
#[derive(Debug)]
pub struct Seen {
    /// The fencing token of the guard the attribute bound.
    pub token: u64,
    /// `inspect` of the lock, from inside the body.
    pub holder: Option<redis_lock::LockInfo>,
}

/// Takes the lock `plain:{n}` for the call.
#[distributed_lock(key = "plain:{n}", client = client, ttl = "2s", wait = "0s", guard = lock)]
pub fn job(client: &LockClient, n: u32) -> redis_lock::Result<Seen> {
    Ok(Seen {
        token: lock.fencing_token(),
        holder: client.inspect(&format!("plain:{n}"))?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use redis_lock::testing::RedisServer;

    #[test]
    fn the_dependency_under_its_package_name_locks_and_releases() {
        let server = RedisServer::start();
        let client = LockClient::open(&server.url()).unwrap();

        let seen = job(&client, 5).unwrap();
        let holder = seen.holder.expect("the lock is taken while the body runs");
        assert!(holder.owned, "{holder:?}");
        assert_eq!(
            holder.fencing_token, seen.token,
            "and it is this call's lock"
        );
        assert!(
            client.inspect("plain:5").unwrap().is_none(),
            "released when the call returns"
        );

        let other = LockClient::open(&server.url()).unwrap();
        let held = other.lock("plain:5").unwrap();
        let err = job(&client, 5).unwrap_err();
        assert!(err.is_busy(), "{err}");
        drop(held);
    }
}
