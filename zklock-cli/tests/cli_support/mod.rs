//! What the `zklock` command's tests share: the command without any `ZKLOCK_*` variable of the
//! environment, a bounded run of it, its JSON, and a raw ZooKeeper view of lock directories.
#![allow(dead_code)]

use std::process::{Command, Output};
use std::time::{Duration, Instant};

use serde_json::Value;

/// The longest a test waits for something that should happen promptly on a loaded machine.
pub const SOON: Duration = Duration::from_secs(20);

/// How long one `zklock` run may take: its own `--timeout` and a connect, with room for a loaded
/// machine. A run still going then is killed and the test fails, quoting its output.
pub const RUN_LIMIT: Duration = Duration::from_secs(60);

/// Every variable the command reads its options from.
pub const ZKLOCK_VARS: [&str; 6] = [
    "ZKLOCK_ZK",
    "ZKLOCK_DIGEST",
    "ZKLOCK_TLS_CA",
    "ZKLOCK_TLS_CERT",
    "ZKLOCK_TLS_KEY",
    "ZKLOCK_SASL",
];

/// The `zklock` command with no `ZKLOCK_*` variable of the test's environment.
pub fn bare() -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_zklock"));
    for var in ZKLOCK_VARS {
        cmd.env_remove(var);
    }
    cmd
}

/// Runs `cmd` to its end within [`RUN_LIMIT`], or fails the test saying what it waited for.
pub fn run(cmd: &mut Command) -> Output {
    zklock_testing::process::output_within(cmd, RUN_LIMIT).unwrap_or_else(|e| panic!("zklock did not finish: {e}"))
}

/// Runs `zklock --zk ZK --timeout 5s ARGS…` to its end.
pub fn zklock(zk: &str, args: &[&str]) -> Output {
    run(bare().args(["--zk", zk, "--timeout", "5s"]).args(args))
}

pub fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

pub fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// The JSON `zklock` printed, whatever its exit code.
pub fn printed(out: &Output) -> Value {
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}: {}; stderr: {}", stdout(out), stderr(out)))
}

/// The JSON of a run that succeeded.
pub fn json_of(out: &Output) -> Value {
    assert!(out.status.success(), "zklock failed: {}", stderr(out));
    printed(out)
}

pub async fn raw(connect: &str) -> zookeeper_client::Client {
    zookeeper_client::Client::connect(connect).await.expect("raw client")
}

/// The children of `dir`; none when it does not exist.
pub async fn children(raw: &zookeeper_client::Client, dir: &str) -> Vec<String> {
    match raw.list_children(dir).await {
        Ok(children) => children,
        Err(zookeeper_client::Error::NoNode) => Vec::new(),
        Err(err) => panic!("list {dir}: {err}"),
    }
}

/// Waits, within [`SOON`], until `dir` has `n` children.
pub async fn wait_for_children(raw: &zookeeper_client::Client, dir: &str, n: usize) {
    let deadline = Instant::now() + SOON;
    loop {
        let now = children(raw, dir).await.len();
        if now == n {
            return;
        }
        assert!(Instant::now() < deadline, "{dir} never had {n} children ({now})");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}
