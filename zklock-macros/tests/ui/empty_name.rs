use zklock::{distributed_lock, LockError};

#[distributed_lock("")]
async fn run() -> Result<(), LockError> {
    Ok(())
}

fn main() {}
