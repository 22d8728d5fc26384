use redis_lock::distributed_lock;

#[distributed_lock(key = "job", cooldown = "0s")]
fn job() -> redis_lock::Result<()> {
    Ok(())
}

#[distributed_lock(key = "job", cooldown = "9000h")]
fn job2() -> redis_lock::Result<()> {
    Ok(())
}

fn main() {}
