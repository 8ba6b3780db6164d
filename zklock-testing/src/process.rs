//! Parts of a test that must run in other processes: a lock holder that is killed, several
//! service instances, contenders behind their own fault proxies.
//!
//! The simplest child program is the test binary itself: [`rerun_test`] builds the command
//! that runs it again with exactly one `#[ignore]`d test selected, which serves as the child's
//! entry point (tell it what to do through environment variables).
//!
//! ```no_run
//! use std::process::Stdio;
//!
//! let child = zklock_testing::process::rerun_test("holder_process")
//!     .expect("the test binary's path")
//!     .env("HOLDER_CONNECT", "127.0.0.1:2181")
//!     .stdout(Stdio::piped())
//!     .spawn();
//! # let _ = child;
//!
//! #[test]
//! #[ignore = "entry point of the child processes of another test"]
//! fn holder_process() {
//!     // Run alone, fail rather than pass without doing anything.
//!     let connect = std::env::var("HOLDER_CONNECT").expect("run by another test, not alone");
//!     // ... take a lock, print a line the parent waits for, hold until killed ...
//! # let _ = connect;
//! }
//! ```

use std::process::Command;

/// The arguments that make a test binary run only the ignored test `entry`, with its output
/// shown and no other test beside it.
pub fn rerun_args(entry: &str) -> [String; 5] {
    [
        entry.to_owned(),
        "--exact".into(),
        "--ignored".into(),
        "--nocapture".into(),
        "--test-threads=1".into(),
    ]
}

/// A command that runs the current test binary again with only the ignored test `entry`
/// selected (see [`rerun_args`]). Errors only when the binary's own path cannot be found.
pub fn rerun_test(entry: &str) -> std::io::Result<Command> {
    let mut command = Command::new(std::env::current_exe()?);
    command.args(rerun_args(entry));
    Ok(command)
}

/// The address of a loopback TCP port that nothing listens on right now (bound, then
/// released), for tests of an unreachable server: connecting to it is refused at once.
pub fn closed_address() -> std::net::SocketAddr {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind a loopback port");
    listener.local_addr().expect("the bound port's address")
}
