use zklock::{distributed_lock, LockError};

#[distributed_lock("jobs", retries = 3)]
async fn run() -> Result<(), LockError> {
    Ok(())
}

fn main() {}
