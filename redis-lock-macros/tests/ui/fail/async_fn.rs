use redis_lock::distributed_lock;

#[distributed_lock(key = "job")]
async fn job() -> redis_lock::Result<()> {
    Ok(())
}

fn main() {}
