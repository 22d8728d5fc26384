use redis_lock::distributed_lock;

#[distributed_lock(key = "job", timeout = 5)]
fn job() -> redis_lock::Result<()> {
    Ok(())
}

fn main() {
    // No second error here: the function is kept as written.
    job().unwrap();
}
