use redis_lock::distributed_lock;

#[distributed_lock(key = "report", ttl = 10, mode = "shared")]
fn report() -> redis_lock::Result<()> {
    Ok(())
}

#[distributed_lock(key = "report", mode = "read", hold_at_least = "1h")]
fn report2() -> redis_lock::Result<()> {
    Ok(())
}

fn main() {}
