use zklock::{distributed_lock, LockError};

#[distributed_lock("accounts:{from}", "accounts:{to}")]
async fn transfer(from: u64, to: u64) -> Result<(), LockError> {
    let _ = (from, to);
    Ok(())
}

fn main() {}
