use zklock::{distributed_lock, LockError};

#[distributed_lock("jobs", timeout = "10 parsecs")]
async fn run() -> Result<(), LockError> {
    Ok(())
}

#[distributed_lock("jobs", timeout = "1.5s")]
async fn fractional() -> Result<(), LockError> {
    Ok(())
}

#[distributed_lock("jobs", timeout = 10)]
async fn not_a_string() -> Result<(), LockError> {
    Ok(())
}

#[distributed_lock("jobs", timeout = "never")]
async fn a_word() -> Result<(), LockError> {
    Ok(())
}

fn main() {}
