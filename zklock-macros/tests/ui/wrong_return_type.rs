use zklock::{distributed_lock, LockError};

#[distributed_lock("jobs")]
async fn unit() {}

#[distributed_lock("jobs")]
async fn option() -> Option<u32> {
    Some(1)
}

#[distributed_lock("jobs")]
async fn tuple() -> (u32, LockError) {
    todo!()
}

fn main() {
    let _ = LockError::SessionExpired;
}
