use redis_lock::distributed_lock;

#[distributed_lock(key = "job", crate = "not a path")]
fn job() -> redis_lock::Result<()> {
    Ok(())
}

fn main() {}
