// Inner attributes at the top of the body apply to the whole function, as without the
// attribute (they were a hard error, E0658, when the body became a `let` initializer).
#![deny(warnings)]

use zklock::{distributed_lock, LockError};

#[distributed_lock("inner:{id}")]
async fn allows_unused(id: u32) -> Result<u32, LockError> {
    #![allow(unused_variables)]
    let unused = 1;
    Ok(id)
}

#[distributed_lock("inner-lints")]
async fn several(flag: bool) -> Result<u32, LockError> {
    #![allow(unused_mut)]
    #![allow(clippy::needless_return)]
    let mut n = 2;
    if flag {
        return Ok(n);
    }
    return Ok(n + 1);
}

pub fn main() {
    let _ = (allows_unused, several);
}
