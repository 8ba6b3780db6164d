use zklock::distributed_lock;

#[derive(Debug)]
struct AppError;

#[distributed_lock("jobs")]
async fn run() -> Result<(), AppError> {
    Ok(())
}

type AppResult<T> = Result<T, AppError>;

#[distributed_lock("jobs")]
async fn aliased() -> AppResult<()> {
    Ok(())
}

fn main() {}
