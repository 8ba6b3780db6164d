use zklock::{distributed_lock, LockError};

#[distributed_lock("orders/{id}")]
async fn run(id: u64) -> Result<u64, LockError> {
    Ok(id)
}

fn main() {}
