use redis_lock::distributed_lock;

// `500ms` is an integer literal with a suffix: refused, not read as 500 seconds.
#[distributed_lock(key = "job", ttl = 500ms)]
fn job() -> redis_lock::Result<()> {
    Ok(())
}

fn main() {}
