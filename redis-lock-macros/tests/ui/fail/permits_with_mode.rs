use redis_lock::distributed_lock;

// A semaphore has no read or write side: the error points at the mode.
#[distributed_lock(key = "exports", ttl = 10, permits = 3, mode = "read")]
fn export() -> redis_lock::Result<()> {
    Ok(())
}

fn main() {}
