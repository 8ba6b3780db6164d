use zklock::{distributed_lock, LockError};

struct Service {
    locks: String,
}

impl Service {
    #[distributed_lock("jobs", client = self.locks)]
    async fn run(&self) -> Result<(), LockError> {
        Ok(())
    }
}

fn main() {}
