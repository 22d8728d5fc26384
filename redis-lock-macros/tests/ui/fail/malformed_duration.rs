use redis_lock::distributed_lock;

#[distributed_lock(key = "job", wait = "5 seconds")]
fn job() -> redis_lock::Result<()> {
    Ok(())
}

fn main() {}
