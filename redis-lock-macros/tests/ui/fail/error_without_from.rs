use redis_lock::distributed_lock;

#[derive(Debug)]
struct AppError;

#[distributed_lock(key = "job")]
fn job() -> Result<(), AppError> {
    Ok(())
}

fn main() {}
