use redis_lock::distributed_lock;

struct Report;

#[distributed_lock(key = "job")]
fn job() -> Report {
    Report
}

fn main() {}
