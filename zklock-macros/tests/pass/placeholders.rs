// Raw identifiers and format specs in placeholders.
#![deny(warnings)]

use zklock::{distributed_lock, LockError};

pub struct Request {
    pub r#type: String,
    pub r#match: (u8, u8),
}

#[distributed_lock("kind:{r#type}")]
async fn raw_parameter(r#type: &str) -> Result<usize, LockError> {
    Ok(r#type.len())
}

#[distributed_lock("kind:{type}")]
async fn keyword_without_prefix(r#type: u32) -> Result<u32, LockError> {
    Ok(r#type)
}

#[distributed_lock("req:{req.r#type}:{req.r#match.1}")]
async fn raw_fields(req: &Request) -> Result<u8, LockError> {
    Ok(req.r#match.0)
}

#[distributed_lock("padded:{id:>width$}:{id:08}:{id:x}:{ratio:.2}:{ratio:>w2$.p$}")]
async fn specs(id: u32, width: usize, ratio: f64, w2: usize, p: usize) -> Result<u32, LockError> {
    Ok(id)
}

pub fn main() {
    let _ = (raw_parameter, keyword_without_prefix, raw_fields, specs);
}
