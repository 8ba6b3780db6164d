use zklock::{distributed_lock, LockError};

#[distributed_lock("stock", cache = "2h")]
async fn too_long() -> Result<(), LockError> {
    Ok(())
}

#[distributed_lock("catalog", mode = "read", cache = "5s")]
async fn on_a_read_lock() -> Result<(), LockError> {
    Ok(())
}

#[distributed_lock("stock", cache = "a while")]
async fn not_a_duration() -> Result<(), LockError> {
    Ok(())
}

fn main() {}
