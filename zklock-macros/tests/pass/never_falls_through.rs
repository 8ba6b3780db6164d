// Bodies that never reach their end compile without warnings (`unreachable expression` broke
// `#![deny(warnings)]` builds).
#![deny(warnings)]

use std::time::Duration;

use zklock::{distributed_lock, LockError};

#[distributed_lock("todo:{id}")]
async fn not_written_yet(id: u32) -> Result<u32, LockError> {
    todo!()
}

#[distributed_lock("worker:{shard}", timeout = "forever")]
async fn worker(shard: u32) -> Result<(), LockError> {
    loop {
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

#[distributed_lock("trailing:{x}")]
async fn trailing_return(x: u32) -> Result<u32, LockError> {
    let doubled = x * 2;
    return Ok(doubled);
}

#[distributed_lock("panics")]
async fn always_panics() -> Result<(), LockError> {
    panic!("not in this process")
}

#[distributed_lock("unreachable:{flag}")]
async fn match_that_diverges(flag: bool) -> Result<u8, LockError> {
    match flag {
        true => return Ok(1),
        false => unreachable!("checked by the caller"),
    }
}

pub fn main() {
    let _ = (not_written_yet, worker, trailing_return, always_panics, match_that_diverges);
}
