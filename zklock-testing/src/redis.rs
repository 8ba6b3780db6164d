//! A throw-away Redis server in a child process: [`RedisServer`].
//!
//! The server binary is `$REDIS_SERVER` when set, else `redis-server` from Debian's
//! `redis-server` package (`/usr/bin/redis-server`) or from `PATH`. Each server runs in a
//! temporary directory of its own, on a free loopback port, without persistence, as a child
//! process tied to this one: it is killed when the handle is dropped (also while a test unwinds
//! from a panic) and when this process dies.

use std::fs::File;
use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

use tempfile::TempDir;

use super::error::TestingError;
use super::java::{spawn_tied_to_process, tail_of_file};
use super::ports::free_port;
use super::server::KEEP_DIRS_ENV;
use super::startup::wait_ready;

/// Names the `redis-server` binary to run instead of searching for it.
const BINARY_ENV: &str = "REDIS_SERVER";
/// Where Debian's `redis-server` package puts the binary.
const DEBIAN_BINARY: &str = "/usr/bin/redis-server";
/// How long the server may take to come up.
const START_TIMEOUT: Duration = Duration::from_secs(30);
/// How long a readiness probe may take.
const PROBE_TIMEOUT: Duration = Duration::from_millis(500);
/// How many times a start is retried on a fresh port when another process took the port first.
const PORT_ATTEMPTS: usize = 3;
/// Lines of server log quoted in errors.
const LOG_LINES_IN_ERRORS: usize = 30;

/// A throw-away Redis server on a free loopback port, with no persistence (`save ""`,
/// `appendonly no`) and its working directory and log in a temporary directory.
///
/// Dropping the handle kills the server (SIGKILL; a paused server too) and removes the
/// directory. Starting takes a few milliseconds and blocks.
///
/// # Examples
///
/// ```no_run
/// let server = zklock_testing::RedisServer::start()?;
/// println!("Redis at {}", server.url()); // redis://127.0.0.1:PORT/
/// server.pause()?; // SIGSTOP: connections stay open, nothing is answered
/// server.resume()?;
/// # Ok::<(), zklock_testing::TestingError>(())
/// ```
#[derive(Debug)]
pub struct RedisServer {
    name: String,
    port: u16,
    dir: TempDir,
    process: Mutex<Option<Process>>,
}

impl RedisServer {
    /// Starts a server and waits until it answers `PING`.
    ///
    /// # Errors
    ///
    /// [`TestingError::RedisNotInstalled`] when no `redis-server` is found (run
    /// `scripts/install-deps.sh`), [`TestingError::Exited`] or [`TestingError::StartTimeout`]
    /// with the log when the server fails to come up.
    pub fn start() -> Result<RedisServer, TestingError> {
        let binary = find_binary()?;
        let dir = tempfile::Builder::new()
            .prefix("zklock-redis-")
            .disable_cleanup(std::env::var_os(KEEP_DIRS_ENV).is_some())
            .tempdir()
            .map_err(|e| TestingError::io("create a temporary Redis directory", e))?;
        let mut server = RedisServer {
            name: String::new(),
            port: 0,
            dir,
            process: Mutex::new(None),
        };
        let deadline = Instant::now() + START_TIMEOUT;
        let mut attempt = 0;
        loop {
            attempt += 1;
            server.port = free_port()?;
            server.name = format!("Redis server 127.0.0.1:{}", server.port);
            match server.run(&binary, deadline) {
                Ok(()) => return Ok(server),
                Err(e) if attempt < PORT_ATTEMPTS && server.lost_port_race() => {
                    server.kill();
                    tracing::debug!("retrying on a fresh port: {e}");
                }
                Err(e) => {
                    server.kill();
                    return Err(e);
                }
            }
        }
    }

    /// `redis://127.0.0.1:PORT/`.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/", self.port)
    }

    /// The loopback port the server listens on.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The client address.
    pub fn addr(&self) -> SocketAddr {
        SocketAddr::V4(SocketAddrV4::new(Ipv4Addr::LOCALHOST, self.port))
    }

    /// The server's pid, while it runs (also while paused).
    pub fn pid(&self) -> Option<u32> {
        let mut process = self.process();
        let p = process.as_mut()?;
        matches!(p.child.try_wait(), Ok(None)).then(|| p.child.id())
    }

    /// Whether the server process is alive (it may be paused).
    pub fn is_running(&self) -> bool {
        self.pid().is_some()
    }

    /// Freezes the server with SIGSTOP: connections stay open, nothing is answered. Keys keep
    /// their wall-clock expiry times, so a key whose TTL passes during the pause is gone when
    /// the server runs again.
    ///
    /// # Errors
    ///
    /// [`TestingError::NotRunning`] when the server is not running.
    pub fn pause(&self) -> Result<(), TestingError> {
        self.signal(libc::SIGSTOP, true)
    }

    /// Lets a [`pause`](Self::pause)d server run again (SIGCONT).
    ///
    /// # Errors
    ///
    /// [`TestingError::NotRunning`] when the server is not running.
    pub fn resume(&self) -> Result<(), TestingError> {
        self.signal(libc::SIGCONT, false)
    }

    /// Kills the server (SIGKILL). Killing a stopped server does nothing. The directory stays
    /// until the handle is dropped.
    pub fn kill(&self) {
        if let Some(mut p) = self.process().take() {
            p.kill();
        }
    }

    /// The directory holding the server's log (`server.log`).
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// The last `lines` lines of the server's log.
    pub fn log_tail(&self, lines: usize) -> String {
        tail_of_file(&self.log_path(), lines)
    }

    fn log_path(&self) -> PathBuf {
        self.dir.path().join("server.log")
    }

    fn process(&self) -> MutexGuard<'_, Option<Process>> {
        self.process.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn signal(&self, signal: libc::c_int, pausing: bool) -> Result<(), TestingError> {
        let mut process = self.process();
        let Some(p) = process.as_mut() else {
            return Err(TestingError::NotRunning {
                what: self.name.clone(),
            });
        };
        if !matches!(p.child.try_wait(), Ok(None)) {
            return Err(TestingError::NotRunning {
                what: self.name.clone(),
            });
        };
        // SAFETY: a plain syscall on a child we own and have not reaped.
        if unsafe { libc::kill(p.child.id() as libc::pid_t, signal) } != 0 {
            return Err(TestingError::io(
                format!("signal {}", self.name),
                std::io::Error::last_os_error(),
            ));
        }
        p.paused = pausing;
        Ok(())
    }

    /// Starts `redis-server` on `self.port` and waits until it answers `PING`.
    fn run(&self, binary: &Path, deadline: Instant) -> Result<(), TestingError> {
        let log = self.log_path();
        let log_file = File::create(&log).map_err(|e| TestingError::io(format!("create {}", log.display()), e))?;
        let stderr = log_file
            .try_clone()
            .map_err(|e| TestingError::io("duplicate the log file handle", e))?;
        let mut command = Command::new(binary);
        command
            .args(["--port", &self.port.to_string()])
            .args(["--bind", "127.0.0.1"])
            .args(["--save", ""])
            .args(["--appendonly", "no"])
            .args(["--daemonize", "no"])
            .args(["--protected-mode", "no"])
            .args(["--maxclients", "4000"])
            .arg("--dir")
            .arg(self.dir.path())
            .current_dir(self.dir.path())
            .stdin(Stdio::null())
            .stdout(Stdio::from(log_file))
            .stderr(Stdio::from(stderr));
        let child =
            spawn_tied_to_process(command).map_err(|e| TestingError::io(format!("spawn {}", binary.display()), e))?;
        *self.process() = Some(Process { child, paused: false });
        wait_ready(
            &self.name,
            deadline,
            Duration::from_millis(10),
            || {
                let mut process = self.process();
                let status = process.as_mut()?.child.try_wait().ok().flatten()?;
                Some(status.to_string())
            },
            || ping(self.addr()),
            || self.log_tail(LOG_LINES_IN_ERRORS),
        )
    }

    fn lost_port_race(&self) -> bool {
        self.log_tail(LOG_LINES_IN_ERRORS).contains("Address already in use")
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        // Killed before the directory is removed.
        self.kill();
    }
}

/// The server process; killed on drop.
#[derive(Debug)]
struct Process {
    child: Child,
    paused: bool,
}

impl Process {
    fn kill(&mut self) {
        // SIGKILL ends a stopped process too; SIGCONT first anyway, so nothing lingers stopped.
        if self.paused {
            // SAFETY: a plain syscall on a child we own and have not reaped.
            unsafe { libc::kill(self.child.id() as libc::pid_t, libc::SIGCONT) };
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Process {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Whether a Redis server at `addr` answers `PING` with `+PONG`.
fn ping(addr: SocketAddr) -> bool {
    let Ok(mut stream) = TcpStream::connect_timeout(&addr, PROBE_TIMEOUT) else {
        return false;
    };
    let _ = stream.set_read_timeout(Some(PROBE_TIMEOUT));
    let _ = stream.set_write_timeout(Some(PROBE_TIMEOUT));
    if stream.write_all(b"PING\r\n").is_err() {
        return false;
    }
    let mut answer = [0u8; 7];
    stream.read_exact(&mut answer).is_ok() && &answer == b"+PONG\r\n"
}

/// `$REDIS_SERVER`, Debian's binary, or `redis-server` on `PATH`.
fn find_binary() -> Result<PathBuf, TestingError> {
    super::binaries::find_binary(BINARY_ENV, DEBIAN_BINARY, "redis-server")
        .map_err(|searched| TestingError::RedisNotInstalled { searched })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_server_answers_pause_and_resume_and_dies_with_its_handle() {
        let server = RedisServer::start().unwrap_or_else(|e| panic!("{e}"));
        assert!(ping(server.addr()));
        let pid = server.pid().expect("running");
        server.pause().expect("pause");
        assert!(!ping(server.addr()), "a paused server answered");
        server.resume().expect("resume");
        assert!(ping(server.addr()));
        let dir = server.dir().to_owned();
        drop(server);
        // SAFETY: signal 0 only checks that the pid exists.
        let alive = unsafe { libc::kill(pid as libc::pid_t, 0) } == 0;
        assert!(!alive, "the server outlived its handle");
        assert!(!dir.exists() || std::env::var_os(KEEP_DIRS_ENV).is_some());
    }
}
