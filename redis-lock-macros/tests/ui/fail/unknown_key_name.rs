use redis_lock::distributed_lock;

struct Invoice {
    id: u64,
}

#[distributed_lock(key = "invoice:{invoce.id}")]
fn settle(invoice: &Invoice) -> redis_lock::Result<u64> {
    Ok(invoice.id)
}

fn main() {}
