use redis_lock::distributed_lock;

#[distributed_lock(keys = [], ttl = 10)]
fn none() -> redis_lock::Result<()> {
    Ok(())
}

#[distributed_lock(key = "a", keys = ["b"])]
fn both() -> redis_lock::Result<()> {
    Ok(())
}

#[distributed_lock(keys = ["a:{id}", "a:{id}", "b:{nope}"])]
fn twice(id: u32) -> redis_lock::Result<()> {
    let _ = id;
    Ok(())
}

#[distributed_lock(keys = ["a", "b"], hold_at_least = "1m")]
fn held_long() -> redis_lock::Result<()> {
    Ok(())
}

fn main() {}
