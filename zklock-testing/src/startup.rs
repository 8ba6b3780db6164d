//! Waiting for a server process to come up.

use std::thread;
use std::time::{Duration, Instant};

use super::error::TestingError;

/// Polls every `poll` until `ready()` says the server `what` serves, failing with the server's
/// `log_tail()` when `exited()` reports that its process ended (with how) or `deadline` passes.
pub(crate) fn wait_ready(
    what: &str,
    deadline: Instant,
    poll: Duration,
    mut exited: impl FnMut() -> Option<String>,
    mut ready: impl FnMut() -> bool,
    log_tail: impl Fn() -> String,
) -> Result<(), TestingError> {
    let started = Instant::now();
    loop {
        if let Some(status) = exited() {
            return Err(TestingError::Exited {
                what: what.to_owned(),
                status,
                log_tail: log_tail(),
            });
        }
        if ready() {
            return Ok(());
        }
        if Instant::now() >= deadline {
            return Err(TestingError::StartTimeout {
                what: what.to_owned(),
                waited: started.elapsed(),
                log_tail: log_tail(),
            });
        }
        thread::sleep(poll);
    }
}
