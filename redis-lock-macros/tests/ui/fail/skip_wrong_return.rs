use redis_lock::distributed_lock;

#[distributed_lock(key = "job", on_busy = "skip")]
fn job() -> u32 {
    1
}

fn main() {}
