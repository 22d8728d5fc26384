use redis_lock::distributed_lock;

#[distributed_lock(key = "", ttl = 10)]
fn job() -> redis_lock::Result<()> {
    Ok(())
}

fn main() {}
