use redis_lock::{LockClient, distributed_lock};

// A path that names no crate: reported once, at the path, not at every expression the
// expansion builds on it (the key, the client, the options).
#[distributed_lock(key = "job:{n}", client = client, crate = "::not_redis_lock")]
fn job(client: &LockClient, n: u32) -> redis_lock::Result<u32> {
    Ok(n)
}

fn main() {}
