use redis_lock::distributed_lock;

#[distributed_lock(key = "job", ttl = 0)]
fn job() -> redis_lock::Result<()> {
    Ok(())
}

fn main() {}
