use redis_lock::distributed_lock;

#[distributed_lock(key = "job", on_busy = "skip")]
fn job() -> redis_lock::Result<u32> {
    Ok(1)
}

fn main() {}
