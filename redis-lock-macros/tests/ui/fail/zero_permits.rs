use redis_lock::distributed_lock;

#[distributed_lock(key = "exports", ttl = 10, permits = 0)]
fn export() -> redis_lock::Result<()> {
    Ok(())
}

#[distributed_lock(key = "exports", permits = 10001)]
fn too_many() -> redis_lock::Result<()> {
    Ok(())
}

fn main() {}
