use zklock::{distributed_lock, LockError};

#[distributed_lock("jobs", timeout = "10 parsecs")]
async fn run() -> Result<(), LockError> {
    Ok(())
}

#[distributed_lock("jobs", timeout = "10")]
async fn no_unit() -> Result<(), LockError> {
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
