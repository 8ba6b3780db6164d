use zklock::{distributed_lock, LockError};

struct Report;

#[distributed_lock("report", if_busy = "skip")]
async fn report() -> Result<Report, LockError> {
    Ok(Report)
}

#[distributed_lock("report", if_busy = "later")]
async fn later() -> Result<(), LockError> {
    Ok(())
}

fn main() {}
