use zklock::{distributed_lock, LockError};

#[distributed_lock("order:{id:zz}")]
async fn unknown_type(id: u64) -> Result<u64, LockError> {
    Ok(id)
}

#[distributed_lock("order:{id:.*}")]
async fn star_precision(id: f64) -> Result<f64, LockError> {
    Ok(id)
}

#[distributed_lock("order:{id:>width$}")]
async fn width_not_a_parameter(id: u64) -> Result<u64, LockError> {
    Ok(id)
}

fn main() {}
