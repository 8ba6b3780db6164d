use zklock::{distributed_lock, LockError};

#[distributed_lock("jobs", timeout = "1s", timeout = "2s")]
async fn run() -> Result<(), LockError> {
    Ok(())
}

fn main() {}
