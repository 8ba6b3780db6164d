use zklock::{distributed_lock, LockError};

#[distributed_lock("orders:{id}", token = id)]
async fn shadowing(id: u64) -> Result<u64, LockError> {
    Ok(id)
}

fn main() {}
