use zklock::{distributed_lock, LockError};

#[distributed_lock("jobs", mode = "exclusive")]
async fn run() -> Result<(), LockError> {
    Ok(())
}

#[distributed_lock("jobs", mode = "semaphore")]
async fn no_leases() -> Result<(), LockError> {
    Ok(())
}

#[distributed_lock("jobs", leases = 3)]
async fn leases_without_semaphore() -> Result<(), LockError> {
    Ok(())
}

#[distributed_lock("jobs", on_lost = "ignore")]
async fn bad_on_lost() -> Result<(), LockError> {
    Ok(())
}

fn main() {}
