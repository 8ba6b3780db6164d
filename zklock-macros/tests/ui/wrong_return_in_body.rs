// A `return` of the wrong type in the body is one error at the user's token, as without the
// attribute: the future's output type is fixed before the body is checked.
use zklock::{distributed_lock, LockError};

#[derive(Debug)]
pub enum AppError {
    Lock(LockError),
}

impl From<LockError> for AppError {
    fn from(err: LockError) -> Self {
        AppError::Lock(err)
    }
}

#[distributed_lock("count:{n}")]
async fn wrong_ok_type(n: u64) -> Result<u64, AppError> {
    if n == 0 {
        return Ok("zero");
    }
    Ok(n)
}

#[distributed_lock("bare:{n}")]
async fn bare_return(n: u64) -> Result<u64, AppError> {
    if n == 0 {
        return;
    }
    Ok(n)
}

#[distributed_lock("read:{path}")]
async fn unconverted_error(path: &str) -> Result<String, AppError> {
    let text = match std::fs::read_to_string(path) {
        Ok(text) => text,
        Err(other) => return Err(other),
    };
    Ok(text)
}

#[distributed_lock("tail:{n}")]
async fn wrong_tail(n: u64) -> Result<u64, AppError> {
    Ok(n.to_string())
}

fn main() {}
