use zklock::{distributed_lock, LockError};

#[distributed_lock("jobs", crate = "not a path")]
async fn not_a_path() -> Result<(), LockError> {
    Ok(())
}

#[distributed_lock("jobs", crate = not_there)]
async fn unresolved() -> Result<(), LockError> {
    Ok(())
}

#[distributed_lock("jobs", crate = 7)]
async fn number() -> Result<(), LockError> {
    Ok(())
}

fn main() {}
