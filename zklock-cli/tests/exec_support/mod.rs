//! What the `zklock exec` process tests share: starting `zklock` in a process group of its own
//! (killed when the test ends), reading what it printed, and waiting for files, nodes and
//! processes, each wait bounded and failing loudly.
#![allow(dead_code)] // each test crate uses its own part

use std::io::Read;
use std::path::Path;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use rustix::process::{kill_process_group, Pid, Signal};

/// Generous bound for anything that should happen promptly on a loaded machine.
pub const SOON: Duration = Duration::from_secs(20);
/// The longest a `zklock exec` may run.
pub const RUN_LIMIT: Duration = Duration::from_secs(40);

// The command without the test's `ZKLOCK_*` variables, as every test of the command runs it.
#[path = "../cli_support/mod.rs"]
mod cli_support;
#[allow(unused_imports)] // each test crate uses its own part
pub use cli_support::{bare, ZKLOCK_VARS};

/// Shell: wait (at most 30 s) until the test creates `$DIR/go`; past that, exit with 97 and
/// say so, so that a test whose `go` never came fails loudly instead of running on.
pub const WAIT_GO: &str = r#"i=0; while [ ! -e "$DIR/go" ] && [ $i -lt 600 ]; do sleep 0.05; i=$((i+1)); done; [ -e "$DIR/go" ] || { echo "no go file within 30 s" >&2; exit 97; }"#;

/// `zklock --zk <zk> --timeout 10s <args>`, without the `ZKLOCK_*` variables of the test's
/// environment, with `DIR` set to `dir` for the command's scripts.
pub fn zklock(zk: &str, dir: &Path, args: &[&str]) -> Command {
    let mut cmd = bare();
    cmd.env("DIR", dir).args(["--zk", zk]);
    if !args.contains(&"--timeout") {
        cmd.args(["--timeout", "10s"]);
    }
    cmd.args(args);
    cmd
}

/// `zklock ... exec <name> [options] -- sh -c <script>`.
pub fn exec_sh(zk: &str, dir: &Path, name: &str, options: &[&str], script: &str) -> Command {
    let mut args = vec!["exec", name];
    args.extend_from_slice(options);
    args.extend_from_slice(&["--", "sh", "-c", script]);
    zklock(zk, dir, &args)
}

/// A running `zklock`, in a process group of its own with its command. Dropped while running
/// (a failed test), the whole group is killed.
pub struct Running {
    pub child: Child,
    stdout: Option<JoinHandle<Vec<u8>>>,
    stderr: Option<JoinHandle<Vec<u8>>>,
}

/// What a finished `zklock` left.
pub struct Finished {
    pub status: ExitStatus,
    pub stdout: String,
    pub stderr: String,
    pub took: Duration,
}

impl Finished {
    /// Fails unless it exited with `code`; says what it printed.
    pub fn assert_exit(&self, code: i32) {
        assert_eq!(
            self.status.code(),
            Some(code),
            "stdout: {}\nstderr: {}",
            self.stdout,
            self.stderr
        );
    }
}

impl Running {
    pub fn start(cmd: &mut Command) -> Running {
        Running::start_with_stdin(cmd, Stdio::null())
    }

    pub fn start_with_stdin(cmd: &mut Command, stdin: Stdio) -> Running {
        use std::os::unix::process::CommandExt;
        let mut child = cmd
            .process_group(0)
            .stdin(stdin)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start zklock");
        let stdout = Some(drain(child.stdout.take().unwrap()));
        let stderr = Some(drain(child.stderr.take().unwrap()));
        Running { child, stdout, stderr }
    }

    pub fn pid(&self) -> Pid {
        Pid::from_raw(self.child.id() as i32).expect("a pid")
    }

    /// Waits for the process to exit; fails the test if it still runs after RUN_LIMIT.
    pub async fn finish(mut self) -> Finished {
        let started = Instant::now();
        let status = loop {
            if let Some(status) = self.child.try_wait().expect("poll zklock") {
                break status;
            }
            if started.elapsed() > RUN_LIMIT {
                let stderr = self.stop_and_read_stderr();
                panic!("zklock still running after {RUN_LIMIT:?}; stderr: {stderr}");
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        };
        let took = started.elapsed();
        // zklock has exited; its output ends once nothing else holds it open. Something that
        // still does after SOON (a process the command left running) fails the test.
        let ended = Instant::now();
        while ![&self.stdout, &self.stderr]
            .iter()
            .all(|h| h.as_ref().is_none_or(JoinHandle::is_finished))
        {
            assert!(
                ended.elapsed() < SOON,
                "zklock exited ({status}), but its output was still open {SOON:?} later: a process it started outlived it"
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        let read = |h: Option<JoinHandle<Vec<u8>>>| String::from_utf8_lossy(&h.unwrap().join().unwrap()).into_owned();
        Finished {
            status,
            stdout: read(self.stdout.take()),
            stderr: read(self.stderr.take()),
            took,
        }
    }

    /// Kills the process group and returns what was printed on stderr.
    pub fn stop_and_read_stderr(&mut self) -> String {
        self.kill_group();
        self.stderr
            .take()
            .map(|h| String::from_utf8_lossy(&h.join().unwrap()).into_owned())
            .unwrap_or_default()
    }

    pub fn kill_group(&mut self) {
        // Only while the process is not reaped: its pid, which names the group, is still its.
        if let Ok(None) = self.child.try_wait() {
            let _ = kill_process_group(self.pid(), Signal::KILL);
            let _ = self.child.wait();
        }
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        self.kill_group();
    }
}

/// Reads all of `from` on a thread of its own.
pub fn drain(mut from: impl Read + Send + 'static) -> JoinHandle<Vec<u8>> {
    std::thread::spawn(move || {
        let mut all = Vec::new();
        let _ = from.read_to_end(&mut all);
        all
    })
}

pub async fn raw(connect: &str) -> zookeeper_client::Client {
    zookeeper_client::Client::connect(connect).await.expect("raw client")
}

/// Polls `check` until it gives a value; fails saying `what` after SOON.
pub async fn until<T>(what: &str, mut check: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + SOON;
    loop {
        if let Some(value) = check() {
            return value;
        }
        assert!(Instant::now() < deadline, "never {what} within {SOON:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The contents of `path` once it exists and ends with a newline (written whole).
pub async fn file(path: &Path) -> String {
    until(&format!("a complete {}", path.display()), || {
        std::fs::read_to_string(path).ok().filter(|s| s.ends_with('\n'))
    })
    .await
}

pub fn lines(path: &Path) -> Vec<String> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .map(str::to_owned)
        .collect()
}

/// The children of `dir` once there are `n` of them.
pub async fn children(raw: &zookeeper_client::Client, dir: &str, n: usize) -> Vec<String> {
    let deadline = Instant::now() + SOON;
    loop {
        let now = raw.list_children(dir).await.unwrap_or_default();
        if now.len() == n {
            return now;
        }
        assert!(Instant::now() < deadline, "{dir} never had {n} children: {now:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

pub fn go(dir: &Path) {
    std::fs::write(dir.join("go"), b"").unwrap();
}

/// Runs `cmd` to its end (within RUN_LIMIT, or the test fails) and returns what it left.
pub async fn output(cmd: &mut Command) -> Finished {
    Running::start(cmd).finish().await
}

/// Whether process `pid` is alive: it exists and is not a zombie (a zombie runs nothing; an
/// orphan's is reaped by whoever adopted it, which may take a while).
pub fn alive(pid: i32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => {
            let state = stat.rsplit_once(')').map(|(_, rest)| rest.trim_start()).unwrap_or("");
            !(state.starts_with('Z') || state.starts_with('X'))
        }
        Err(_) => false,
    }
}

/// Waits until process `pid` is no longer alive; fails saying `what` after SOON.
pub async fn dead(pid: i32, what: &str) {
    until(&format!("{what} ({pid}) gone"), || (!alive(pid)).then_some(())).await
}
