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

use std::io::Read;
use std::process::{Command, Output, Stdio};
use std::sync::{mpsc, Arc, Mutex};
use std::time::{Duration, Instant};

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

/// Runs `command` to its end, as [`Command::output`] does, but for at most `limit`: a command
/// still running then (or whose output pipes stay open, held by a process it left behind) is
/// killed, and the answer is an error of kind [`std::io::ErrorKind::TimedOut`] that names the
/// command and quotes what it had printed so far. Its stdin is closed.
///
/// ```no_run
/// use std::process::Command;
/// use std::time::Duration;
///
/// let output = zklock_testing::process::output_within(
///     Command::new("sh").args(["-c", "echo hello"]),
///     Duration::from_secs(10),
/// )
/// .unwrap_or_else(|e| panic!("{e}"));
/// assert_eq!(output.stdout, b"hello\n");
/// ```
pub fn output_within(command: &mut Command, limit: Duration) -> std::io::Result<Output> {
    type Pipe = Box<dyn Read + Send>;
    type Shared = Arc<Mutex<Vec<u8>>>;
    let deadline = Instant::now() + limit;
    let mut child = command
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()?;
    let stdout = Arc::new(Mutex::new(Vec::new()));
    let stderr = Arc::new(Mutex::new(Vec::new()));
    let (done, closed) = mpsc::channel();
    let pipes: [(Option<Pipe>, &Shared); 2] = [
        (child.stdout.take().map(|p| Box::new(p) as Pipe), &stdout),
        (child.stderr.take().map(|p| Box::new(p) as Pipe), &stderr),
    ];
    for (pipe, into) in pipes {
        let (into, done) = (into.clone(), done.clone());
        std::thread::spawn(move || {
            if let Some(mut pipe) = pipe {
                let mut buf = [0u8; 8192];
                while let Ok(n @ 1..) = pipe.read(&mut buf) {
                    into.lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .extend_from_slice(&buf[..n]);
                }
            }
            let _ = done.send(());
        });
    }
    drop(done);
    let timed_out = |what: &str, child: &mut std::process::Child| {
        let _ = child.kill();
        let _ = child.wait();
        let text = |buf: &Arc<Mutex<Vec<u8>>>| {
            String::from_utf8_lossy(&buf.lock().unwrap_or_else(|e| e.into_inner())).into_owned()
        };
        std::io::Error::new(
            std::io::ErrorKind::TimedOut,
            format!(
                "{command:?} {what} within {limit:?}; it printed:\n--- stdout\n{}\n--- stderr\n{}",
                text(&stdout),
                text(&stderr)
            ),
        )
    };
    let status = loop {
        if let Some(status) = child.try_wait()? {
            break status;
        }
        if Instant::now() >= deadline {
            return Err(timed_out("did not exit", &mut child));
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    for _ in 0..2 {
        let left = deadline.saturating_duration_since(Instant::now());
        if closed.recv_timeout(left).is_err() {
            return Err(timed_out("exited, but its output stayed open", &mut child));
        }
    }
    let take = |buf: Arc<Mutex<Vec<u8>>>| std::mem::take(&mut *buf.lock().unwrap_or_else(|e| e.into_inner()));
    Ok(Output {
        status,
        stdout: take(stdout),
        stderr: take(stderr),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_command_that_ends_in_time_gives_its_output() {
        let out = output_within(
            Command::new("sh").args(["-c", "echo out; echo err >&2; exit 3"]),
            Duration::from_secs(20),
        )
        .unwrap();
        assert_eq!(out.status.code(), Some(3));
        assert_eq!(out.stdout, b"out\n");
        assert_eq!(out.stderr, b"err\n");
    }

    #[test]
    fn a_command_still_running_at_the_bound_is_killed_and_quoted() {
        let started = Instant::now();
        let err = output_within(
            Command::new("sh").args(["-c", "echo started; exec sleep 30"]),
            Duration::from_millis(500),
        )
        .unwrap_err();
        assert!(started.elapsed() < Duration::from_secs(10), "{:?}", started.elapsed());
        assert_eq!(err.kind(), std::io::ErrorKind::TimedOut);
        let text = err.to_string();
        assert!(text.contains("did not exit within 500ms"), "{text}");
        assert!(text.contains("started"), "{text}");
    }

    #[test]
    fn output_held_open_by_a_process_left_behind_is_bounded_too() {
        let err = output_within(
            Command::new("sh").args(["-c", "sleep 3 & echo parent done"]),
            Duration::from_millis(500),
        )
        .unwrap_err();
        let text = err.to_string();
        assert!(text.contains("exited, but its output stayed open"), "{text}");
        assert!(text.contains("parent done"), "{text}");
    }
}
