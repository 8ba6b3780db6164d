use zklock::{distributed_lock, LockError};

trait Jobs {
    #[distributed_lock("jobs")]
    async fn run(&self) -> Result<(), LockError>;
}

fn main() {}
