//! `zklock exec` as a process against a real ZooKeeper: commands run under a mutex never
//! overlap and see their grant in their environment, a semaphore lets N of them run at once,
//! exit codes and standard streams are the command's, `--wait` bounds the wait, signals are
//! passed on, and a lost lock stops the command. With `--leader` the same holds for the
//! leadership of an election group.
//!
//! The commands are `sh -c` scripts that leave marker files in a temporary directory; the tests
//! wait for those files and for nodes in the lock directories, never for a while. A script that
//! waits for the test waits for a `go` file, for 30 seconds at most. Every `zklock` runs in a
//! process group of its own (its command stays in it), which is killed when the test ends.

use std::io::{Read, Write};
use std::path::Path;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use rustix::process::{kill_process, kill_process_group, Pid, Signal};
use zklock_runtime::LockClient;
use zklock_testing::{FaultProxy, ZkServer};

/// Generous bound for anything that should happen promptly on a loaded machine.
const SOON: Duration = Duration::from_secs(20);
/// The longest a `zklock exec` may run.
const RUN_LIMIT: Duration = Duration::from_secs(40);

/// Every variable the command reads its options from.
const ZKLOCK_VARS: [&str; 6] = [
    "ZKLOCK_ZK",
    "ZKLOCK_DIGEST",
    "ZKLOCK_TLS_CA",
    "ZKLOCK_TLS_CERT",
    "ZKLOCK_TLS_KEY",
    "ZKLOCK_SASL",
];

/// Shell: wait (at most 30 s) until the test creates `$DIR/go`.
const WAIT_GO: &str = r#"i=0; while [ ! -e "$DIR/go" ] && [ $i -lt 600 ]; do sleep 0.05; i=$((i+1)); done"#;

/// `zklock --zk <zk> --timeout 10s <args>`, without the `ZKLOCK_*` variables of the test's
/// environment, with `DIR` set to `dir` for the command's scripts.
fn zklock(zk: &str, dir: &Path, args: &[&str]) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_zklock"));
    for var in ZKLOCK_VARS {
        cmd.env_remove(var);
    }
    cmd.env("DIR", dir).args(["--zk", zk]);
    if !args.contains(&"--timeout") {
        cmd.args(["--timeout", "10s"]);
    }
    cmd.args(args);
    cmd
}

/// `zklock ... exec <name> [options] -- sh -c <script>`.
fn exec_sh(zk: &str, dir: &Path, name: &str, options: &[&str], script: &str) -> Command {
    let mut args = vec!["exec", name];
    args.extend_from_slice(options);
    args.extend_from_slice(&["--", "sh", "-c", script]);
    zklock(zk, dir, &args)
}

/// A running `zklock`, in a process group of its own with its command. Dropped while running
/// (a failed test), the whole group is killed.
struct Running {
    child: Child,
    stdout: Option<JoinHandle<Vec<u8>>>,
    stderr: Option<JoinHandle<Vec<u8>>>,
}

/// What a finished `zklock` left.
struct Finished {
    status: ExitStatus,
    stdout: String,
    stderr: String,
    took: Duration,
}

impl Finished {
    /// Fails unless it exited with `code`; says what it printed.
    fn assert_exit(&self, code: i32) {
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
    fn start(cmd: &mut Command) -> Running {
        Running::start_with_stdin(cmd, Stdio::null())
    }

    fn start_with_stdin(cmd: &mut Command, stdin: Stdio) -> Running {
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

    fn pid(&self) -> Pid {
        Pid::from_raw(self.child.id() as i32).expect("a pid")
    }

    /// Waits for the process to exit; fails the test if it still runs after RUN_LIMIT.
    async fn finish(mut self) -> Finished {
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
        let read = |h: Option<JoinHandle<Vec<u8>>>| String::from_utf8_lossy(&h.unwrap().join().unwrap()).into_owned();
        Finished {
            status,
            stdout: read(self.stdout.take()),
            stderr: read(self.stderr.take()),
            took,
        }
    }

    /// Kills the process group and returns what was printed on stderr.
    fn stop_and_read_stderr(&mut self) -> String {
        self.kill_group();
        self.stderr
            .take()
            .map(|h| String::from_utf8_lossy(&h.join().unwrap()).into_owned())
            .unwrap_or_default()
    }

    fn kill_group(&mut self) {
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
fn drain(mut from: impl Read + Send + 'static) -> JoinHandle<Vec<u8>> {
    std::thread::spawn(move || {
        let mut all = Vec::new();
        let _ = from.read_to_end(&mut all);
        all
    })
}

async fn raw(connect: &str) -> zookeeper_client::Client {
    zookeeper_client::Client::connect(connect).await.expect("raw client")
}

/// Polls `check` until it gives a value; fails saying `what` after SOON.
async fn until<T>(what: &str, mut check: impl FnMut() -> Option<T>) -> T {
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
async fn file(path: &Path) -> String {
    until(&format!("a complete {}", path.display()), || {
        std::fs::read_to_string(path).ok().filter(|s| s.ends_with('\n'))
    })
    .await
}

fn lines(path: &Path) -> Vec<String> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .map(str::to_owned)
        .collect()
}

/// The children of `dir` once there are `n` of them.
async fn children(raw: &zookeeper_client::Client, dir: &str, n: usize) -> Vec<String> {
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

fn go(dir: &Path) {
    std::fs::write(dir.join("go"), b"").unwrap();
}

/// Three `zklock exec` on one mutex, started together: while the first command runs the other
/// two wait in the queue and have not started, and the commands' start and end lines strictly
/// alternate, with strictly increasing fencing tokens.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn commands_under_one_mutex_never_overlap() {
    let server = ZkServer::start().expect("ZooKeeper");
    let zk = server.connect_string();
    let raw = raw(&zk).await;
    let dir = tempfile::tempdir().unwrap();
    let script = format!(
        r#"echo "start $ZKLOCK_FENCING_TOKEN" >> "$DIR/log"; {WAIT_GO}; sleep 0.1; echo "end $ZKLOCK_FENCING_TOKEN" >> "$DIR/log""#
    );
    let runs: Vec<Running> = (0..3)
        .map(|_| Running::start(&mut exec_sh(&zk, dir.path(), "batch", &[], &script)))
        .collect();

    let log = dir.path().join("log");
    until("a command started", || (!lines(&log).is_empty()).then_some(())).await;
    children(&raw, "/zklock/batch", 3).await;
    assert_eq!(
        lines(&log).len(),
        1,
        "two others queued, none of them running: {:?}",
        lines(&log)
    );

    go(dir.path());
    for run in runs {
        run.finish().await.assert_exit(0);
    }
    assert_one_at_a_time(&lines(&log), 3);
    children(&raw, "/zklock/batch", 0).await;
}

/// Fails unless `log` holds `runs` pairs of `start TOKEN` and `end TOKEN` lines, each run's
/// end right after its start, with strictly increasing fencing tokens.
fn assert_one_at_a_time(log: &[String], runs: usize) {
    assert_eq!(log.len(), 2 * runs, "{log:?}");
    let mut last: Option<&str> = None;
    for pair in log.chunks(2) {
        let start = pair[0]
            .strip_prefix("start ")
            .unwrap_or_else(|| panic!("not a start: {log:?}"));
        let end = pair[1]
            .strip_prefix("end ")
            .unwrap_or_else(|| panic!("not an end: {log:?}"));
        assert_eq!(start, end, "a run ended that did not start last: {log:?}");
        assert_eq!(start.len(), 25, "not a fencing token: {start}");
        // Fixed-width hex: the text sorts like the token.
        if let Some(last) = last {
            assert!(start > last, "tokens do not increase: {log:?}");
        }
        last = Some(start);
    }
}

/// `zklock exec` ends with the command's exit code, 128 + N when it died of signal N, 127 for a
/// command not found and 126 for one that cannot be executed, with a message saying which.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_exit_code_is_the_commands_or_says_why_it_did_not_run() {
    let server = ZkServer::start().expect("ZooKeeper");
    let zk = server.connect_string();
    let dir = tempfile::tempdir().unwrap();
    let exits = |script: &str| Running::start(&mut exec_sh(&zk, dir.path(), "codes", &[], script)).finish();

    exits("exit 0").await.assert_exit(0);
    exits("exit 7").await.assert_exit(7);
    exits("exit 255").await.assert_exit(255);
    let killed = exits("kill -KILL $$").await;
    killed.assert_exit(137);
    exits("kill -TERM $$").await.assert_exit(143);

    let missing = Running::start(&mut zklock(
        &zk,
        dir.path(),
        &["exec", "codes", "--", "zklock-no-such-program", "arg"],
    ))
    .finish()
    .await;
    missing.assert_exit(127);
    assert!(
        missing.stderr.contains("zklock-no-such-program: command not found"),
        "{}",
        missing.stderr
    );

    let plain = dir.path().join("not-executable");
    std::fs::write(&plain, "#!/bin/sh\necho ran\n").unwrap();
    let refused = Running::start(&mut zklock(
        &zk,
        dir.path(),
        &["exec", "codes", "--", plain.to_str().unwrap()],
    ))
    .finish()
    .await;
    refused.assert_exit(126);
    assert!(refused.stderr.contains("cannot execute"), "{}", refused.stderr);
    assert!(!refused.stdout.contains("ran"), "{}", refused.stdout);
    let a_dir = Running::start(&mut zklock(
        &zk,
        dir.path(),
        &["exec", "codes", "--", dir.path().to_str().unwrap()],
    ))
    .finish()
    .await;
    a_dir.assert_exit(126);

    // The lock was released every time, also when the command did not run.
    let raw = raw(&zk).await;
    children(&raw, "/zklock/codes", 0).await;
}

/// The command reads zklock's standard input and writes to its standard output and error.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn standard_streams_are_the_commands() {
    let server = ZkServer::start().expect("ZooKeeper");
    let zk = server.connect_string();
    let dir = tempfile::tempdir().unwrap();
    let mut cat = Running::start_with_stdin(
        &mut zklock(&zk, dir.path(), &["exec", "streams", "--", "cat"]),
        Stdio::piped(),
    );
    let mut stdin = cat.child.stdin.take().unwrap();
    stdin.write_all(b"hi\n").unwrap();
    drop(stdin);
    let cat = cat.finish().await;
    cat.assert_exit(0);
    assert_eq!(cat.stdout, "hi\n");

    let both = Running::start(&mut exec_sh(
        &zk,
        dir.path(),
        "streams",
        &[],
        "echo out; echo err >&2; exit 4",
    ))
    .finish()
    .await;
    both.assert_exit(4);
    assert_eq!(both.stdout, "out\n");
    assert_eq!(both.stderr, "err\n");
}

/// The command finds the lock name, its fencing token and its node in its environment; the
/// node exists while it runs, belongs to a live session, was created with the zxid the token
/// carries, and `zklock show` names its holder `zklock-exec`; it is gone once `zklock exec` has
/// exited.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_command_sees_the_lock_its_token_and_its_node() {
    let server = ZkServer::start().expect("ZooKeeper");
    let zk = server.connect_string();
    let raw = raw(&zk).await;
    let dir = tempfile::tempdir().unwrap();
    let script = format!(
        r#"printf '%s\n%s\n%s\n' "$ZKLOCK_LOCK_NAME" "$ZKLOCK_FENCING_TOKEN" "$ZKLOCK_NODE" > "$DIR/env.tmp"; mv "$DIR/env.tmp" "$DIR/env"; {WAIT_GO}"#
    );
    let run = Running::start(&mut exec_sh(&zk, dir.path(), "reports:eu", &[], &script));
    let env = file(&dir.path().join("env")).await;
    let env: Vec<&str> = env.lines().collect();
    let [name, token, node] = env[..] else {
        panic!("three lines: {env:?}")
    };
    assert_eq!(name, "reports:eu");
    assert!(node.starts_with("/zklock/reports:eu/"), "{node}");
    let stat = raw
        .check_stat(node)
        .await
        .unwrap()
        .unwrap_or_else(|| panic!("{node} does not exist while the command runs"));
    assert_ne!(stat.ephemeral_owner, 0, "not an ephemeral node");
    assert_eq!(token, format!("{:016x}-00000000", stat.czxid));
    let shown = Running::start(&mut zklock(&zk, dir.path(), &["show", "reports:eu", "--json"]))
        .finish()
        .await;
    shown.assert_exit(0);
    let view: serde_json::Value = serde_json::from_str(&shown.stdout).unwrap();
    assert_eq!(view["holders"][0]["identity"], "zklock-exec", "{view}");
    assert_eq!(view["holders"][0]["token"], token, "{view}");

    go(dir.path());
    run.finish().await.assert_exit(0);
    assert_eq!(raw.check_stat(node).await.unwrap(), None, "{node} outlived zklock exec");
}

/// While a library client holds the lock, `--wait 1s` gives up after a second and `--wait 0`
/// at once, with exit code 124: the command never runs and no contender is left behind. Once
/// the lock is free, `--wait 0` runs the command.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wait_bounds_the_wait_for_the_lock() {
    let server = ZkServer::start().expect("ZooKeeper");
    let zk = server.connect_string();
    let raw = raw(&zk).await;
    let dir = tempfile::tempdir().unwrap();
    let holder = LockClient::connect(&zk).await.unwrap();
    let guard = holder.mutex("busy").unwrap().acquire().await.unwrap();
    let script = r#"touch "$DIR/ran""#;

    let waited = Running::start(&mut exec_sh(&zk, dir.path(), "busy", &["--wait", "1s"], script))
        .finish()
        .await;
    waited.assert_exit(124);
    assert!(waited.took >= Duration::from_secs(1), "gave up after {:?}", waited.took);
    assert!(waited.stderr.contains("not acquired within 1s"), "{}", waited.stderr);
    assert!(!dir.path().join("ran").exists(), "the command ran without the lock");
    assert_eq!(
        children(&raw, "/zklock/busy", 1).await,
        [guard.node_path().rsplit('/').next().unwrap()]
    );

    let tried = Running::start(&mut exec_sh(&zk, dir.path(), "busy", &["--wait", "0"], script))
        .finish()
        .await;
    tried.assert_exit(124);
    assert!(!dir.path().join("ran").exists(), "the command ran without the lock");
    children(&raw, "/zklock/busy", 1).await;

    guard.release().await.unwrap();
    Running::start(&mut exec_sh(&zk, dir.path(), "busy", &["--wait", "0"], script))
        .finish()
        .await
        .assert_exit(0);
    assert!(dir.path().join("ran").exists());
}

/// `zklock exec` reaches ZooKeeper through a proxy that then drops all traffic: once its
/// session is reported lost, the command gets SIGTERM (which its trap records) and `zklock
/// exec` exits with 125, saying the lock was lost.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_lock_stops_the_command_with_sigterm() {
    let server = ZkServer::start().expect("ZooKeeper");
    let proxy = FaultProxy::start(server.addr()).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let script = format!(
        r#"trap 'echo term > "$DIR/term"; exit 0' TERM; echo "$$" > "$DIR/started"; {WAIT_GO}; touch "$DIR/finished""#
    );
    let run = Running::start(&mut exec_sh(
        &proxy.connect_string(),
        dir.path(),
        "fragile",
        &["--session-timeout", "2s", "--timeout", "3s"],
        &script,
    ));
    file(&dir.path().join("started")).await;
    proxy.blackhole();

    let stopped = run.finish().await;
    stopped.assert_exit(125);
    assert_eq!(std::fs::read_to_string(dir.path().join("term")).unwrap(), "term\n");
    assert!(!dir.path().join("finished").exists(), "the command ran to its end");
    let said = |what: &str| stopped.stderr.contains(what);
    assert!(
        said("lock `fragile` was lost")
            && said("sending the command SIGTERM")
            && said("the command was stopped because lock \"fragile\" was lost; it exited with code 0"),
        "{}",
        stopped.stderr
    );
    assert!(!stopped.stderr.contains("did not exit within"), "{}", stopped.stderr);
    go(dir.path());
}

/// Another process asks for the lock (`zklock revoke`) while the command runs: the command
/// gets SIGTERM as on a loss, and `zklock exec` exits with 123, saying the lock was revoked;
/// the lock is released, and `revoke` then finds nobody to ask.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_revocation_stops_the_command_with_sigterm() {
    let server = ZkServer::start().expect("ZooKeeper");
    let zk = server.connect_string();
    let raw = raw(&zk).await;
    let dir = tempfile::tempdir().unwrap();
    let script = format!(
        r#"trap 'echo term > "$DIR/term"; exit 0' TERM; echo "$$" > "$DIR/started"; {WAIT_GO}; touch "$DIR/finished""#
    );
    let run = Running::start(&mut exec_sh(&zk, dir.path(), "revocable", &[], &script));
    file(&dir.path().join("started")).await;

    let revoked = zklock(&zk, dir.path(), &["revoke", "revocable"]).output().unwrap();
    assert_eq!(
        revoked.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&revoked.stderr)
    );
    let stopped = run.finish().await;
    stopped.assert_exit(123);
    assert_eq!(std::fs::read_to_string(dir.path().join("term")).unwrap(), "term\n");
    assert!(!dir.path().join("finished").exists(), "the command ran to its end");
    assert!(
        stopped
            .stderr
            .contains("the command was stopped because lock \"revocable\" was revoked; it exited with code 0"),
        "{}",
        stopped.stderr
    );
    assert!(children(&raw, "/zklock/revocable", 0).await.is_empty());
    go(dir.path());
}

/// A command that ignores SIGTERM is killed once `--grace` has passed after the loss; `zklock
/// exec` still exits with 125.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_command_that_ignores_sigterm_is_killed_after_the_grace() {
    let server = ZkServer::start().expect("ZooKeeper");
    let proxy = FaultProxy::start(server.addr()).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let script = format!(r#"trap '' TERM; echo "$$" > "$DIR/started"; {WAIT_GO}; touch "$DIR/finished""#);
    let run = Running::start(&mut exec_sh(
        &proxy.connect_string(),
        dir.path(),
        "stubborn",
        &["--session-timeout", "2s", "--timeout", "3s", "--grace", "1s"],
        &script,
    ));
    let pid: i32 = file(&dir.path().join("started")).await.trim().parse().unwrap();
    proxy.blackhole();

    let stopped = run.finish().await;
    stopped.assert_exit(125);
    assert!(
        stopped
            .stderr
            .contains("did not exit within 1s of SIGTERM; sending it SIGKILL")
            && stopped.stderr.contains("it was killed"),
        "{}",
        stopped.stderr
    );
    assert!(!dir.path().join("finished").exists(), "the command ran to its end");
    // Reaped by zklock exec: no such process any more.
    assert!(
        kill_process(Pid::from_raw(pid).unwrap(), Signal::CONT).is_err(),
        "the command {pid} still runs"
    );
    go(dir.path());
}

/// SIGTERM, SIGINT and SIGHUP sent to `zklock exec` reach the command, whose trap records the
/// signal and exits with 3: `zklock exec` exits with 3 too, and the lock node is gone by then.
/// A signal that comes while `zklock exec` still waits for the lock ends the wait (exit code
/// 128 + N): the command does not run and no contender is left behind.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn signals_sent_to_zklock_reach_the_command() {
    let server = ZkServer::start().expect("ZooKeeper");
    let zk = server.connect_string();
    let raw = raw(&zk).await;

    let holder = LockClient::connect(&zk).await.unwrap();
    let guard = holder.mutex("signalled").unwrap().acquire().await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let waiting = Running::start(&mut exec_sh(&zk, dir.path(), "signalled", &[], r#"touch "$DIR/ran""#));
    children(&raw, "/zklock/signalled", 2).await;
    kill_process(waiting.pid(), Signal::INT).unwrap();
    let interrupted = waiting.finish().await;
    interrupted.assert_exit(130);
    assert!(
        interrupted
            .stderr
            .contains("SIGINT while waiting for lock \"signalled\""),
        "{}",
        interrupted.stderr
    );
    assert!(!dir.path().join("ran").exists(), "the command ran without the lock");
    children(&raw, "/zklock/signalled", 1).await;
    guard.release().await.unwrap();
    for (signal, name) in [(Signal::TERM, "TERM"), (Signal::INT, "INT"), (Signal::HUP, "HUP")] {
        let dir = tempfile::tempdir().unwrap();
        let script =
            format!(r#"trap 'echo {name} > "$DIR/got"; exit 3' {name}; echo "$ZKLOCK_NODE" > "$DIR/node"; {WAIT_GO}"#);
        let run = Running::start(&mut exec_sh(&zk, dir.path(), "signalled", &[], &script));
        let node = file(&dir.path().join("node")).await;
        let node = node.trim();
        assert!(raw.check_stat(node).await.unwrap().is_some(), "{node}");
        kill_process(run.pid(), signal).unwrap();

        let ended = run.finish().await;
        ended.assert_exit(3);
        assert_eq!(
            std::fs::read_to_string(dir.path().join("got")).unwrap(),
            format!("{name}\n")
        );
        assert_eq!(raw.check_stat(node).await.unwrap(), None, "{node} outlived zklock exec");
    }
}

/// With `--semaphore 2`, two of three commands run at once and the third waits for a lease;
/// all three run in the end, never more than two at a time.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_semaphore_lets_n_commands_run_at_once() {
    let server = ZkServer::start().expect("ZooKeeper");
    let zk = server.connect_string();
    let raw = raw(&zk).await;
    let dir = tempfile::tempdir().unwrap();
    let script = format!(
        r#"echo "start $ZKLOCK_NODE" >> "$DIR/log"; {WAIT_GO}; sleep 0.1; echo "end $ZKLOCK_NODE" >> "$DIR/log""#
    );
    let runs: Vec<Running> = (0..3)
        .map(|_| Running::start(&mut exec_sh(&zk, dir.path(), "slots", &["--semaphore", "2"], &script)))
        .collect();

    let log = dir.path().join("log");
    until("two commands started", || (lines(&log).len() >= 2).then_some(())).await;
    // The third has made its lease node and waits for the count to drop to two.
    children(&raw, "/zklock/slots/leases", 3).await;
    assert_eq!(lines(&log).len(), 2, "a third command runs: {:?}", lines(&log));

    go(dir.path());
    for run in runs {
        run.finish().await.assert_exit(0);
    }
    let log = lines(&log);
    assert_eq!(log.len(), 6, "{log:?}");
    let (mut running, mut most) = (Vec::new(), 0);
    for line in &log {
        match line.split_once(' ') {
            Some(("start", node)) => {
                assert!(node.starts_with("/zklock/slots/leases/"), "{line}");
                running.push(node);
                most = most.max(running.len());
            }
            Some(("end", node)) => running.retain(|n| *n != node),
            _ => panic!("{line}"),
        }
    }
    assert_eq!(most, 2, "{log:?}");
    assert!(running.is_empty(), "{log:?}");
    children(&raw, "/zklock/slots/leases", 0).await;
}

/// Two `zklock exec --leader` in one group, started together: while the first command runs
/// the other member waits in the group and its command has not started; once the leader's
/// command exits and leadership is relinquished, the other leads. The start and end lines
/// alternate, with increasing fencing tokens.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leaders_of_one_group_never_run_at_once() {
    let server = ZkServer::start().expect("ZooKeeper");
    let zk = server.connect_string();
    let raw = raw(&zk).await;
    let dir = tempfile::tempdir().unwrap();
    let script = format!(
        r#"echo "start $ZKLOCK_FENCING_TOKEN" >> "$DIR/log"; {WAIT_GO}; sleep 0.1; echo "end $ZKLOCK_FENCING_TOKEN" >> "$DIR/log""#
    );
    let runs: Vec<Running> = (0..2)
        .map(|_| Running::start(&mut exec_sh(&zk, dir.path(), "elected", &["--leader"], &script)))
        .collect();

    let log = dir.path().join("log");
    until("a leader's command started", || (!lines(&log).is_empty()).then_some(())).await;
    let members = children(&raw, "/zklock/elected", 2).await;
    assert!(members.iter().all(|m| m.contains("-latch-")), "{members:?}");
    assert_eq!(lines(&log).len(), 1, "two leaders at once: {:?}", lines(&log));

    go(dir.path());
    for run in runs {
        run.finish().await.assert_exit(0);
    }
    assert_one_at_a_time(&lines(&log), 2);
    children(&raw, "/zklock/elected", 0).await;
}

/// A leader's command finds the group, its fencing token, its member node and its participant
/// id in its environment. The node is a `-latch-` member of the group, exists while the command
/// runs, and the library lists that participant as the leader, with that node and token; it is
/// gone once `zklock exec` has exited. Without `--participant-id` the participant is
/// `zklock-exec`; a command run under a lock sees no participant id, even one zklock inherited.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_sees_its_participant_id_and_its_member_node() {
    let server = ZkServer::start().expect("ZooKeeper");
    let zk = server.connect_string();
    let raw = raw(&zk).await;
    let dir = tempfile::tempdir().unwrap();
    let script = format!(
        r#"printf '%s\n%s\n%s\n%s\n' "$ZKLOCK_LOCK_NAME" "$ZKLOCK_FENCING_TOKEN" "$ZKLOCK_NODE" "$ZKLOCK_PARTICIPANT_ID" > "$DIR/env.tmp"; mv "$DIR/env.tmp" "$DIR/env"; {WAIT_GO}"#
    );
    let run = Running::start(&mut exec_sh(
        &zk,
        dir.path(),
        "compactor",
        &["--leader", "--participant-id", "node-a"],
        &script,
    ));
    let env = file(&dir.path().join("env")).await;
    let env: Vec<&str> = env.lines().collect();
    let [group, token, node, participant] = env[..] else {
        panic!("four lines: {env:?}")
    };
    assert_eq!((group, participant), ("compactor", "node-a"));
    let (dir_of_node, node_name) = node.rsplit_once('/').unwrap();
    assert_eq!(dir_of_node, "/zklock/compactor");
    assert!(node_name.contains("-latch-"), "not a member node: {node}");
    let stat = raw
        .check_stat(node)
        .await
        .unwrap()
        .unwrap_or_else(|| panic!("{node} does not exist while the command runs"));
    assert_ne!(stat.ephemeral_owner, 0, "not an ephemeral node");
    assert_eq!(token, format!("{:016x}-00000000", stat.czxid));

    let observer = LockClient::connect(&zk).await.unwrap();
    let members = observer.election("compactor").unwrap().members().await.unwrap();
    let [leader] = &members[..] else {
        panic!("one member: {members:?}")
    };
    assert_eq!(
        (leader.participant.as_str(), leader.is_leader, leader.node.as_str()),
        ("node-a", true, node_name),
        "{members:?}"
    );
    assert_eq!(leader.token.to_string(), token);

    go(dir.path());
    run.finish().await.assert_exit(0);
    assert_eq!(raw.check_stat(node).await.unwrap(), None, "{node} outlived zklock exec");

    let said = |options: &[&str], inherited: Option<&str>| {
        let mut cmd = exec_sh(
            &zk,
            dir.path(),
            "compactor",
            options,
            r#"printf '%s\n' "${ZKLOCK_PARTICIPANT_ID-unset}""#,
        );
        if let Some(inherited) = inherited {
            cmd.env("ZKLOCK_PARTICIPANT_ID", inherited);
        }
        Running::start(&mut cmd).finish()
    };
    let default = said(&["--leader"], None).await;
    default.assert_exit(0);
    assert_eq!(default.stdout, "zklock-exec\n");
    let locked = said(&[], Some("outer")).await;
    locked.assert_exit(0);
    assert_eq!(locked.stdout, "unset\n");
    observer.close().await;
}

/// While a library client leads the group, `zklock exec --leader` with `--wait 1s` gives up
/// after a second and with `--wait 0` at once, exit code 124: the command never runs and no
/// member is left behind. Once the leader relinquishes, `--wait 0` leads and runs the command.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wait_bounds_the_wait_for_leadership() {
    let server = ZkServer::start().expect("ZooKeeper");
    let zk = server.connect_string();
    let raw = raw(&zk).await;
    let dir = tempfile::tempdir().unwrap();
    let library = LockClient::connect(&zk).await.unwrap();
    let leadership = library.election("contested").unwrap().lead().await.unwrap();
    let leader_node = leadership.node_path().rsplit('/').next().unwrap().to_owned();
    let script = r#"touch "$DIR/ran""#;

    let waited = Running::start(&mut exec_sh(
        &zk,
        dir.path(),
        "contested",
        &["--wait", "1s", "--leader"],
        script,
    ))
    .finish()
    .await;
    waited.assert_exit(124);
    assert!(waited.took >= Duration::from_secs(1), "gave up after {:?}", waited.took);
    assert!(
        waited
            .stderr
            .contains(r#"leadership of group "contested" was not acquired within 1s"#),
        "{}",
        waited.stderr
    );
    assert!(!dir.path().join("ran").exists(), "the command ran without leading");
    assert_eq!(children(&raw, "/zklock/contested", 1).await, [leader_node.as_str()]);

    let tried = Running::start(&mut exec_sh(
        &zk,
        dir.path(),
        "contested",
        &["--wait", "0", "--leader"],
        script,
    ))
    .finish()
    .await;
    tried.assert_exit(124);
    assert!(!dir.path().join("ran").exists(), "the command ran without leading");
    assert_eq!(children(&raw, "/zklock/contested", 1).await, [leader_node.as_str()]);

    leadership.relinquish().await.unwrap();
    Running::start(&mut exec_sh(
        &zk,
        dir.path(),
        "contested",
        &["--wait", "0", "--leader"],
        script,
    ))
    .finish()
    .await
    .assert_exit(0);
    assert!(dir.path().join("ran").exists());
    library.close().await;
}

/// A leader's `zklock exec` reaches ZooKeeper through a proxy that then drops all traffic:
/// once its leadership is reported lost, the command gets SIGTERM and `zklock exec` exits with
/// 125, saying leadership was lost.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lost_leadership_stops_the_command_with_sigterm() {
    let server = ZkServer::start().expect("ZooKeeper");
    let proxy = FaultProxy::start(server.addr()).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let script = format!(
        r#"trap 'echo term > "$DIR/term"; exit 0' TERM; echo "$$" > "$DIR/started"; {WAIT_GO}; touch "$DIR/finished""#
    );
    let run = Running::start(&mut exec_sh(
        &proxy.connect_string(),
        dir.path(),
        "fragile-leader",
        &["--leader", "--session-timeout", "2s", "--timeout", "3s"],
        &script,
    ));
    file(&dir.path().join("started")).await;
    proxy.blackhole();

    let stopped = run.finish().await;
    stopped.assert_exit(125);
    assert_eq!(std::fs::read_to_string(dir.path().join("term")).unwrap(), "term\n");
    assert!(!dir.path().join("finished").exists(), "the command ran to its end");
    let said = |what: &str| stopped.stderr.contains(what);
    assert!(
        said("sending the command SIGTERM")
            && said(
                r#"the command was stopped because leadership of group "fragile-leader" was lost; it exited with code 0"#
            ),
        "{}",
        stopped.stderr
    );
    go(dir.path());
}

/// `--leader` does not go with `--semaphore`, `--participant-id` needs `--leader`, and a
/// participant id must not be empty: usage errors (exit code 2) found before ZooKeeper is
/// asked (the server named here does not exist).
#[tokio::test]
async fn leader_options_that_make_no_sense_are_refused() {
    let closed = zklock_testing::process::closed_address().to_string();
    let dir = tempfile::tempdir().unwrap();
    let marker = format!("touch {}", dir.path().join("ran").display());
    let refused = |options: &[&str]| {
        let mut args = vec!["exec", "n"];
        args.extend_from_slice(options);
        args.extend_from_slice(&["--", "sh", "-c", &marker]);
        Running::start(&mut zklock(&closed, dir.path(), &args)).finish()
    };

    let both = refused(&["--leader", "--semaphore", "2"]).await;
    both.assert_exit(2);
    assert!(
        both.stderr.contains("--semaphore") && both.stderr.contains("--leader"),
        "{}",
        both.stderr
    );
    let alone = refused(&["--participant-id", "x"]).await;
    alone.assert_exit(2);
    assert!(alone.stderr.contains("--leader"), "{}", alone.stderr);
    let with_semaphore = refused(&["--semaphore", "2", "--participant-id", "x"]).await;
    with_semaphore.assert_exit(2);
    let empty = refused(&["--leader", "--participant-id", ""]).await;
    empty.assert_exit(2);
    assert!(empty.stderr.contains("--participant-id"), "{}", empty.stderr);
    assert!(!dir.path().join("ran").exists(), "a command ran");
}

/// Bad arguments are usage errors (exit code 2) with a message, found before ZooKeeper is
/// asked: the server named here does not exist. A good command line against it gives up
/// within `--timeout` with exit code 3.
#[tokio::test]
async fn bad_arguments_are_refused_and_an_unreachable_server_is_said() {
    let closed = zklock_testing::process::closed_address().to_string();
    let dir = tempfile::tempdir().unwrap();
    let marker = format!("touch {}", dir.path().join("ran").display());
    let refused = |args: &[&str]| Running::start(&mut zklock(&closed, dir.path(), args)).finish();

    let zero = refused(&["exec", "n", "--semaphore", "0", "--", "sh", "-c", &marker]).await;
    zero.assert_exit(2);
    assert!(zero.stderr.contains("--semaphore"), "{}", zero.stderr);
    let nothing = refused(&["exec", "n", "--"]).await;
    nothing.assert_exit(2);
    assert!(nothing.stderr.contains("<CMD>"), "{}", nothing.stderr);
    let no_dashes = refused(&["exec", "n", "sh", "-c", &marker]).await;
    no_dashes.assert_exit(2);
    let bad_name = refused(&["exec", "a/b", "--", "sh", "-c", &marker]).await;
    bad_name.assert_exit(2);
    assert!(bad_name.stderr.contains("invalid lock name"), "{}", bad_name.stderr);
    let bad_wait = refused(&["exec", "n", "--wait", "soon", "--", "sh", "-c", &marker]).await;
    bad_wait.assert_exit(2);
    assert!(bad_wait.stderr.contains("--wait"), "{}", bad_wait.stderr);

    let unreachable = refused(&["--timeout", "1s", "exec", "n", "--", "sh", "-c", &marker]).await;
    unreachable.assert_exit(3);
    assert!(
        unreachable.took < Duration::from_secs(10),
        "took {:?}",
        unreachable.took
    );
    assert!(unreachable.stderr.contains("ZooKeeper"), "{}", unreachable.stderr);
    assert!(!dir.path().join("ran").exists(), "a command ran");
}

/// `--lock-delay`: the holder ahead vanishes without releasing (its node deleted, as when its
/// process dies), and the command starts only the delay after that.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lock_delay_holds_the_command_back_after_a_holder_vanished() {
    let server = ZkServer::start().expect("ZooKeeper");
    let dir = tempfile::tempdir().unwrap();
    let view = raw(&server.connect_string()).await;
    // A holder that never releases: a plain contender node of another session.
    let persistent = zookeeper_client::CreateMode::Persistent.with_acls(zookeeper_client::Acls::anyone_all());
    view.mkdir("/zklock/delayed", &persistent).await.unwrap();
    let ephemeral = zookeeper_client::CreateMode::EphemeralSequential.with_acls(zookeeper_client::Acls::anyone_all());
    let (_, seq) = view
        .create("/zklock/delayed/_c_0-lock-", b"", &ephemeral)
        .await
        .unwrap();
    let holder = format!("/zklock/delayed/_c_0-lock-{seq}");
    let run = Running::start(&mut exec_sh(
        &server.connect_string(),
        dir.path(),
        "delayed",
        &["--lock-delay", "2s"],
        r#"touch "$DIR/started""#,
    ));
    // The command's zklock waits, watching the holder's node (nobody else watches it).
    until("zklock exec watching the holder", || {
        let watches = server.four_letter_word("wchp").unwrap_or_default();
        watches.contains(&holder).then_some(())
    })
    .await;

    let deleted_at = Instant::now();
    view.delete(&holder, None).await.unwrap();
    until("the command started", || {
        dir.path().join("started").exists().then_some(())
    })
    .await;
    let waited = deleted_at.elapsed();
    assert!(
        waited >= Duration::from_secs(2),
        "the command started {waited:?} after the holder vanished"
    );
    run.finish().await.assert_exit(0);
}
