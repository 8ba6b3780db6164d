//! `if_busy = "skip"` on the return shapes that have a value for a skipped call.
use zklock::{distributed_lock, LockError};

#[distributed_lock("nightly", if_busy = "skip")]
async fn nightly() -> Result<(), LockError> {
    Ok(())
}

#[distributed_lock("refresh:{n}", if_busy = "skip", timeout = "2s")]
async fn refresh(n: u32) -> Result<Option<u32>, LockError> {
    Ok(Some(n))
}

pub fn main() {
    // The futures are made and dropped: compiling them is the test.
    drop(nightly());
    drop(refresh(1));
}
