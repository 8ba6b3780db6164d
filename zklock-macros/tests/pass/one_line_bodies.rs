//! One-line bodies, as users write them, under `deny(warnings)`: the expansion adds no lint of
//! its own to the user's code.
#![deny(warnings)]

use zklock::{distributed_lock, LockError};

#[distributed_lock("free")]
async fn free() -> Result<(), LockError> { Ok(()) }

#[distributed_lock("value:{n}")]
async fn value(n: u32) -> Result<u32, LockError> { Ok(n + 1) }

#[distributed_lock("nightly", if_busy = "skip")]
async fn nightly() -> Result<(), LockError> { Ok(()) }

pub fn main() {
    // The futures are made and dropped: compiling them is the test.
    drop(free());
    drop(value(1));
    drop(nightly());
}
