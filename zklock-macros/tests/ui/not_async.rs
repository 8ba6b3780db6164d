use zklock::{distributed_lock, LockError};

#[distributed_lock("jobs")]
fn run() -> Result<(), LockError> {
    Ok(())
}

fn main() {}
