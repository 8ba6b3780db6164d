use zklock::{distributed_lock, LockError};

#[distributed_lock("jobs", on_revoke = "ignore")]
async fn unknown_value() -> Result<(), LockError> {
    Ok(())
}

#[distributed_lock("jobs", on_revoke = abort)]
async fn not_a_string() -> Result<(), LockError> {
    Ok(())
}

#[distributed_lock("jobs", on_revoke = "abort", on_revoke = "continue")]
async fn given_twice() -> Result<(), LockError> {
    Ok(())
}

fn main() {}
