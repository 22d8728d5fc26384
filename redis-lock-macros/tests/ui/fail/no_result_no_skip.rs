use redis_lock::distributed_lock;

#[distributed_lock(key = "job", ttl = 10)]
fn job() {}

fn main() {}
