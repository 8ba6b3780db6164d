use zklock::{distributed_lock, LockError};

#[distributed_lock(timeout = "1s")]
async fn run() -> Result<(), LockError> {
    Ok(())
}

#[distributed_lock]
async fn bare() -> Result<(), LockError> {
    Ok(())
}

fn main() {}
