use zklock::{distributed_lock, LockError};

#[distributed_lock("jobs", lock_delay = "0s")]
async fn zero() -> Result<(), LockError> {
    Ok(())
}

#[distributed_lock("jobs", lock_delay = "2h")]
async fn too_long() -> Result<(), LockError> {
    Ok(())
}

#[distributed_lock("slots", mode = "semaphore", leases = 2, lock_delay = "5s")]
async fn on_a_semaphore() -> Result<(), LockError> {
    Ok(())
}

fn main() {}
