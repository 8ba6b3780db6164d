//! A downstream crate with a locked function, as a service writes one; its test suite
//! (`tests/shared_client.rs`) shares one client across many `#[tokio::test]`s.

use zklock::{distributed_lock, LockError};

/// Counts `n` under the lock `downstream:{n}`, through the default client.
///
/// ```no_run
/// # async fn demo() -> Result<(), zklock::LockError> {
/// assert_eq!(zklock_downstream::locked_echo(7).await?, 7);
/// # Ok(()) }
/// ```
#[distributed_lock("downstream:{n}", timeout = "10s")]
pub async fn locked_echo(n: u32) -> Result<u32, LockError> {
    Ok(n)
}
