use redis_lock::distributed_lock;

// With `impl Trait` in the return type, the missing conversion is still reported on the type.
#[distributed_lock(key = "job")]
fn job() -> Result<impl std::fmt::Display, String> {
    Ok(1)
}

fn main() {}
