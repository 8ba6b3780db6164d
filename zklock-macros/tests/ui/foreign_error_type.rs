// Error types from other crates cannot get `From<LockError>`; the note says what to do instead.
use zklock::distributed_lock;

#[distributed_lock("jobs")]
async fn string_error() -> Result<(), String> {
    Ok(())
}

#[distributed_lock("jobs")]
async fn io_error() -> Result<(), std::io::Error> {
    Ok(())
}

fn main() {}
