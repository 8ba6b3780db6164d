use zklock::{distributed_lock, LockError};

// The same name twice is a slip, not two locks.
#[distributed_lock("accounts:{from}", "accounts:{from}")]
async fn same_name_twice(from: u64) -> Result<(), LockError> {
    let _ = from;
    Ok(())
}

// One binding cannot carry the tokens of two locks.
#[distributed_lock("accounts:{from}", "accounts:{to}", token = fence)]
async fn token_with_two_names(from: u64, to: u64) -> Result<(), LockError> {
    let _ = (from, to, fence);
    Ok(())
}

#[distributed_lock("accounts:{from}", "accounts:{too}")]
async fn unknown_placeholder_in_the_second_name(from: u64, to: u64) -> Result<(), LockError> {
    let _ = (from, to);
    Ok(())
}

fn main() {}
