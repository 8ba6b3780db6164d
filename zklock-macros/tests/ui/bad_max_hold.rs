use zklock::{distributed_lock, LockError};

#[distributed_lock("jobs", max_hold = "0s")]
async fn zero() -> Result<(), LockError> {
    Ok(())
}

#[distributed_lock("jobs", max_hold = "forever")]
async fn unbounded() -> Result<(), LockError> {
    Ok(())
}

#[distributed_lock("jobs", max_hold = 30)]
async fn not_a_string() -> Result<(), LockError> {
    Ok(())
}

fn main() {}
