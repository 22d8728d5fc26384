use redis_lock::distributed_lock;

#[distributed_lock(key = "job", client = "redis://127.0.0.1/")]
fn job() -> redis_lock::Result<()> {
    Ok(())
}

fn main() {}
