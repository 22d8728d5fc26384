use redis_lock::distributed_lock;

#[distributed_lock(key = "job")]
const fn job() -> redis_lock::Result<()> {
    Ok(())
}

fn main() {}
