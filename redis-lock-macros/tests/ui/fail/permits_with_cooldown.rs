use redis_lock::distributed_lock;

#[distributed_lock(key = "exports", permits = 3, cooldown = "30s", hold_at_least = 5)]
fn export() -> redis_lock::Result<()> {
    Ok(())
}

fn main() {}
