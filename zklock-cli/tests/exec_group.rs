//! `zklock exec` runs its command in a process group of its own: nothing the command starts runs
//! outside the lock. What the command leaves running when it exits is stopped before the lock
//! is released; a pipeline and a background job die with the command on a loss; the group dies
//! with a SIGKILLed `zklock exec`; an interactive command gets the terminal. Also the limit
//! nothing on the client side can close (a `zklock exec` stopped past its session timeout) and
//! the `--status-file` that tells the command's exit code from zklock's.
//!
//! The commands are `sh -c` scripts that write their pids and log lines into a temporary
//! directory; the tests wait for those files, for nodes and for processes to be gone, each wait
//! bounded.

mod exec_support;

use std::path::Path;
use std::process::Command;

use exec_support::*;
use rustix::process::{kill_process, Pid, Signal};
use serde_json::Value;
use zklock_testing::ZkServer;

/// Shell: a loop that appends `$1` to `$DIR/log` every 10 ms, in the background, with its pid in
/// `$DIR/$1.pid`; its output goes nowhere (so it keeps no pipe of the test open).
fn writer(tag: &str) -> String {
    format!(
        r#"sh -c 'echo $$ > "$DIR/{tag}.pid"; while :; do echo {tag} >> "$DIR/log"; sleep 0.01; done' >/dev/null 2>&1 &"#
    )
}

/// Kills the processes whose pids it holds when the test ends, passed or failed.
#[derive(Default)]
struct Reap(Vec<i32>);

impl Reap {
    fn add(&mut self, pid: i32) -> i32 {
        self.0.push(pid);
        pid
    }
}

impl Drop for Reap {
    fn drop(&mut self) {
        for &pid in &self.0 {
            if alive(pid) {
                let _ = kill_process(Pid::from_raw(pid).unwrap(), Signal::KILL);
            }
        }
    }
}

/// The pid written into `dir/name` by a script.
async fn pid_in(dir: &Path, name: &str, reap: &mut Reap) -> i32 {
    let pid = file(&dir.join(name)).await.trim().parse().expect("a pid");
    reap.add(pid)
}

/// The lines of `dir/log` after the first line equal to `mark`.
fn lines_after(dir: &Path, mark: &str) -> Vec<String> {
    let log = lines(&dir.join("log"));
    match log.iter().position(|l| l == mark) {
        Some(at) => log[at + 1..].to_vec(),
        None => panic!("no {mark:?} in the log: {log:?}"),
    }
}

/// The command starts a background writer and exits at once. `zklock exec` stops the writer
/// before it releases the lock: the next `zklock exec` on the lock, queued meanwhile, starts
/// only after the writer's last line, and the writer is gone when the first one exits.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn what_the_command_leaves_running_is_stopped_before_the_lock_is_released() {
    let server = ZkServer::start().expect("ZooKeeper");
    let zk = server.connect_string();
    let raw = raw(&zk).await;
    let dir = tempfile::tempdir().unwrap();
    let mut reap = Reap::default();
    let first = format!(r#"{} {WAIT_GO}; exit 0"#, writer("a"));
    let a = Running::start(&mut exec_sh(&zk, dir.path(), "leftovers", &[], &first));
    let writer_pid = pid_in(dir.path(), "a.pid", &mut reap).await;
    let b = Running::start(&mut exec_sh(
        &zk,
        dir.path(),
        "leftovers",
        &[],
        r#"echo b >> "$DIR/log""#,
    ));
    children(&raw, "/zklock/leftovers", 2).await;
    go(dir.path());

    let first = a.finish().await;
    first.assert_exit(0);
    assert!(!alive(writer_pid), "the background writer outlived zklock exec");
    assert!(
        first
            .stderr
            .contains("the command exited and left processes running in its process group"),
        "{}",
        first.stderr
    );
    b.finish().await.assert_exit(0);
    assert_eq!(
        lines_after(dir.path(), "b"),
        Vec::<String>::new(),
        "the writer ran beside the next holder"
    );
    children(&raw, "/zklock/leftovers", 0).await;
}

/// A shell that traps SIGTERM and exits on it, with a background job that does not: on a
/// revocation the job gets the signal too (it is in the group), so nothing of the command runs
/// once the lock is released.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shell_trapping_term_does_not_leave_its_job_running() {
    let server = ZkServer::start().expect("ZooKeeper");
    let zk = server.connect_string();
    let raw = raw(&zk).await;
    let dir = tempfile::tempdir().unwrap();
    let mut reap = Reap::default();
    let script = format!(
        r#"trap 'echo term > "$DIR/term"; exit 0' TERM; {} echo "$$" > "$DIR/sh"; {WAIT_GO}"#,
        writer("a")
    );
    let run = Running::start(&mut exec_sh(&zk, dir.path(), "trapping", &[], &script));
    let writer_pid = pid_in(dir.path(), "a.pid", &mut reap).await;
    pid_in(dir.path(), "sh", &mut reap).await;
    output(&mut zklock(&zk, dir.path(), &["revoke", "trapping"]))
        .await
        .assert_exit(0);

    let stopped = run.finish().await;
    stopped.assert_exit(123);
    assert_eq!(file(&dir.path().join("term")).await, "term\n");
    assert!(!alive(writer_pid), "the shell's background job outlived the lock");
    children(&raw, "/zklock/trapping", 0).await;
    go(dir.path());
}

/// A command that stopped itself (SIGSTOP, as a shell's job control or a debugger does) is
/// continued with the SIGTERM of a revocation, so it can act on it within the grace instead of
/// lying stopped until the SIGKILL.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stopped_command_is_continued_to_hear_its_sigterm() {
    let server = ZkServer::start().expect("ZooKeeper");
    let zk = server.connect_string();
    let dir = tempfile::tempdir().unwrap();
    let mut reap = Reap::default();
    let script = r#"trap 'echo term > "$DIR/term"; exit 0' TERM; echo "$$" > "$DIR/sh"; kill -STOP $$; sleep 60"#;
    // A grace longer than the test's waits: only a SIGCONT lets the trap run in time.
    let run = Running::start(&mut exec_sh(&zk, dir.path(), "stopped", &["--grace", "5m"], script));
    let sh = pid_in(dir.path(), "sh", &mut reap).await;
    until("the command stopped itself", || {
        let stat = std::fs::read_to_string(format!("/proc/{sh}/stat")).ok()?;
        let state = stat.rsplit_once(')')?.1.trim_start().chars().next()?;
        (state == 'T').then_some(())
    })
    .await;
    output(&mut zklock(&zk, dir.path(), &["revoke", "stopped"]))
        .await
        .assert_exit(0);
    assert_eq!(
        file(&dir.path().join("term")).await,
        "term\n",
        "the stopped command never ran its trap"
    );
    run.finish().await.assert_exit(123);
}

/// The lock's node is deleted by an operator: another holder may be in at once, so the whole
/// group (both stages of a pipeline, whose first stage ignores SIGTERM) is killed at once, not
/// after the minute of `--grace`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deleted_node_kills_the_whole_pipeline_at_once() {
    let server = ZkServer::start().expect("ZooKeeper");
    let zk = server.connect_string();
    let raw = raw(&zk).await;
    let dir = tempfile::tempdir().unwrap();
    let mut reap = Reap::default();
    let script = r#"echo "$ZKLOCK_NODE" > "$DIR/node";
        sh -c 'trap "" TERM; echo $$ > "$DIR/p1"; while :; do echo a; sleep 0.01; done' |
        sh -c 'echo $$ > "$DIR/p2"; while read l; do echo "$l" >> "$DIR/log"; done'"#;
    let run = Running::start(&mut exec_sh(&zk, dir.path(), "piped", &["--grace", "1m"], script));
    let first = pid_in(dir.path(), "p1", &mut reap).await;
    let second = pid_in(dir.path(), "p2", &mut reap).await;
    let node = file(&dir.path().join("node")).await;
    raw.delete(node.trim(), None).await.expect("delete the holder's node");

    let stopped = run.finish().await;
    stopped.assert_exit(125);
    assert!(
        stopped.stderr.contains("SIGKILL at once")
            && stopped.stderr.contains("was lost; it was killed")
            && !stopped.stderr.contains("died of signal"),
        "{}",
        stopped.stderr
    );
    // The loss is said once: not again while the group is being stopped, nor by the release.
    assert_eq!(
        stopped.stderr.matches("was deleted by someone else").count(),
        1,
        "{}",
        stopped.stderr
    );
    assert!(
        !stopped.stderr.contains("at the latest") && !stopped.stderr.contains("releasing"),
        "{}",
        stopped.stderr
    );
    assert!(stopped.took < std::time::Duration::from_secs(60), "waited the grace");
    assert!(
        !alive(first) && !alive(second),
        "a stage of the pipeline outlived the loss"
    );
}

/// The watchdog is no command: its hidden argument without its variable is refused as any
/// unknown subcommand is, and the variable without the argument changes nothing (a watchdog
/// started by mistake would kill the process group it runs in).
#[tokio::test]
async fn only_zklock_exec_starts_a_watchdog() {
    let alone = output(bare().arg("__exec-watchdog")).await;
    alone.assert_exit(2);
    assert!(
        alone.stderr.contains("unrecognized subcommand '__exec-watchdog'"),
        "{}",
        alone.stderr
    );
    let variable_only = output(bare().env("ZKLOCK_EXEC_WATCHDOG", "1").arg("--version")).await;
    variable_only.assert_exit(0);
    assert!(variable_only.stdout.starts_with("zklock "), "{}", variable_only.stdout);
}

/// `zklock exec` is SIGKILLed (no unwinding, like the OOM killer): its command and the command's
/// background job die with it, since the group's watchdog sees its pipe close.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_command_and_its_children_die_with_a_sigkilled_zklock() {
    let server = ZkServer::start().expect("ZooKeeper");
    let zk = server.connect_string();
    let dir = tempfile::tempdir().unwrap();
    let mut reap = Reap::default();
    let script = format!(r#"{} echo "$$" > "$DIR/sh"; wait"#, writer("a"));
    let run = Running::start(&mut exec_sh(&zk, dir.path(), "killed", &[], &script));
    let writer_pid = pid_in(dir.path(), "a.pid", &mut reap).await;
    let shell = pid_in(dir.path(), "sh", &mut reap).await;
    kill_process(run.pid(), Signal::KILL).unwrap();

    dead(shell, "the command").await;
    dead(writer_pid, "the command's background job").await;
}

/// The limit nothing on the client side closes: a `zklock exec` stopped (SIGSTOP) past its
/// session timeout cannot stop its command, and the next holder runs beside it. Its fencing
/// token is larger, so a resource that checks tokens refuses the stale holder's writes. Once
/// continued, the stale `zklock exec` learns of the loss and kills its command at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_zklock_stopped_past_its_session_is_overtaken_by_a_larger_token() {
    let server = ZkServer::start().expect("ZooKeeper");
    let zk = server.connect_string();
    let raw = raw(&zk).await;
    let dir = tempfile::tempdir().unwrap();
    let mut reap = Reap::default();
    let script = format!(r#"echo "$ZKLOCK_FENCING_TOKEN" > "$DIR/token-a"; echo "$$" > "$DIR/sh"; {WAIT_GO}"#);
    let stale = Running::start(&mut exec_sh(
        &zk,
        dir.path(),
        "paused",
        &["--session-timeout", "1s"],
        &script,
    ));
    let shell = pid_in(dir.path(), "sh", &mut reap).await;
    let token_a = file(&dir.path().join("token-a")).await;
    kill_process(stale.pid(), Signal::STOP).unwrap();
    // The server expires the stopped process's session and deletes its node.
    children(&raw, "/zklock/paused", 0).await;

    let next = output(&mut exec_sh(
        &zk,
        dir.path(),
        "paused",
        &["--wait", "10s"],
        r#"echo "$ZKLOCK_FENCING_TOKEN" > "$DIR/token-b""#,
    ))
    .await;
    next.assert_exit(0);
    let token_b = file(&dir.path().join("token-b")).await;
    assert!(alive(shell), "the documented limit: the stale command still runs");
    assert!(token_b > token_a, "tokens {token_a:?} then {token_b:?}");

    kill_process(stale.pid(), Signal::CONT).unwrap();
    let stopped = stale.finish().await;
    stopped.assert_exit(125);
    assert!(!alive(shell), "the stale command outlived its zklock exec");
    go(dir.path());
}

/// `--status-file` says whether the exit code is the command's: a command's own 125 reads
/// `exited` with its code, a loss `lost`, a busy lock under `--wait 0` `not_acquired` with no
/// command.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_status_file_tells_the_commands_exit_code_from_zklocks() {
    let server = ZkServer::start().expect("ZooKeeper");
    let zk = server.connect_string();
    let raw = raw(&zk).await;
    let dir = tempfile::tempdir().unwrap();
    let status_file = dir.path().join("status.json");
    let status = || -> Value { serde_json::from_str(&std::fs::read_to_string(&status_file).unwrap()).unwrap() };
    let with_status = ["--status-file", status_file.to_str().unwrap()];

    output(&mut exec_sh(&zk, dir.path(), "statused", &with_status, "exit 125"))
        .await
        .assert_exit(125);
    let own = status();
    assert_eq!(
        (&own["outcome"], &own["exit_code"], &own["command"]["exit_code"]),
        (&Value::from("exited"), &Value::from(125), &Value::from(125)),
        "{own}"
    );
    assert!(own["message"].is_null() && own["fencing_token"].is_string(), "{own}");

    let script = format!(r#"echo "$ZKLOCK_NODE" > "$DIR/node"; {WAIT_GO}"#);
    let run = Running::start(&mut exec_sh(&zk, dir.path(), "statused", &with_status, &script));
    let node = file(&dir.path().join("node")).await;
    let busy = output(&mut exec_sh(
        &zk,
        dir.path(),
        "statused",
        &[
            "--wait",
            "0",
            "--status-file",
            dir.path().join("busy.json").to_str().unwrap(),
        ],
        "true",
    ))
    .await;
    busy.assert_exit(124);
    let busy: Value = serde_json::from_str(&std::fs::read_to_string(dir.path().join("busy.json")).unwrap()).unwrap();
    assert_eq!(busy["outcome"], "not_acquired", "{busy}");
    assert!(busy["command"].is_null(), "{busy}");

    raw.delete(node.trim(), None).await.unwrap();
    run.finish().await.assert_exit(125);
    let lost = status();
    assert_eq!(
        (&lost["outcome"], &lost["exit_code"]),
        (&Value::from("lost"), &Value::from(125)),
        "{lost}"
    );
    assert_eq!(lost["command"]["signal"], 9, "{lost}");
    assert!(lost["message"].as_str().unwrap().contains("was lost"), "{lost}");
    go(dir.path());
}

/// Run from a terminal (a pseudo-terminal made by `script`), the command's group is the
/// terminal's foreground group while it runs, and the terminal is given back to the shell
/// that started `zklock exec` after.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_interactive_command_gets_the_terminal_and_gives_it_back() {
    let server = ZkServer::start().expect("ZooKeeper");
    let zk = server.connect_string();
    let dir = tempfile::tempdir().unwrap();
    let zklock_line = format!(
        r#"{} --zk {zk} --timeout 10s exec tty -- sh -c 'cat /proc/$$/stat > "$DIR/during"'"#,
        env!("CARGO_BIN_EXE_zklock")
    );
    let shell_line = format!(r#"{zklock_line}; cat /proc/$$/stat > "$DIR/after""#);
    let mut script = Command::new("script");
    script
        .args(["-q", "-e", "-c", &shell_line, "/dev/null"])
        .env("DIR", dir.path());
    for var in ZKLOCK_VARS {
        script.env_remove(var);
    }
    output(&mut script).await.assert_exit(0);

    // "pid (comm) state ppid pgrp session tty_nr tpgid ..."
    let fields = |name: &str| -> (i64, i64) {
        let stat = std::fs::read_to_string(dir.path().join(name)).unwrap();
        let rest: Vec<i64> = stat
            .rsplit_once(')')
            .unwrap()
            .1
            .split_whitespace()
            .skip(1)
            .take(6)
            .map(|f| f.parse().unwrap())
            .collect();
        (rest[1], rest[4])
    };
    let (during_group, during_foreground) = fields("during");
    assert_eq!(
        during_group, during_foreground,
        "the command's group did not have the terminal"
    );
    let (shell_group, after_foreground) = fields("after");
    assert_ne!(during_group, shell_group, "the command ran in the shell's group");
    assert_eq!(after_foreground, shell_group, "the terminal was not given back");
}
