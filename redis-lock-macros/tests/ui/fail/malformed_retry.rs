use redis_lock::distributed_lock;

#[distributed_lock(key = "job", retry = "fixed")]
fn job() -> redis_lock::Result<()> {
    Ok(())
}

fn main() {}
