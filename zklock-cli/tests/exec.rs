//! `zklock exec` as a process against a real ZooKeeper: commands run under a mutex never
//! overlap and see their grant in their environment, a semaphore lets N of them run at once,
//! exit codes and standard streams are the command's, `--wait` bounds the wait, signals are
//! passed on, and a lost lock stops the command. With `--leader` the same holds for the
//! leadership of an election group.
//!
//! The commands are `sh -c` scripts that leave marker files in a temporary directory; the tests
//! wait for those files and for nodes in the lock directories, never for a while. A script that
//! waits for the test waits for a `go` file, for 30 seconds at most, and fails loudly past that.
//! Every `zklock` runs in a process group of its own, killed when the test ends; its command's
//! group dies with it (`exec_group.rs` shows that).

mod exec_support;

use std::io::Write;
use std::process::Stdio;
use std::time::{Duration, Instant};

use exec_support::*;
use rustix::process::{kill_process, Pid, Signal};
use zklock_runtime::LockClient;
use zklock_testing::{FaultProxy, ZkServer};

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
            && said("sending the command (its whole process group) SIGTERM")
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

    output(&mut zklock(&zk, dir.path(), &["revoke", "revocable"]))
        .await
        .assert_exit(0);
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

/// A command that ignores SIGTERM is killed once `--grace` has passed after a revocation (the
/// lock is sound until it is released, so the whole grace is given); `zklock exec` still exits
/// with 123.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_command_that_ignores_sigterm_is_killed_after_the_grace() {
    let server = ZkServer::start().expect("ZooKeeper");
    let zk = server.connect_string();
    let dir = tempfile::tempdir().unwrap();
    let script = format!(r#"trap '' TERM; echo "$$" > "$DIR/started"; {WAIT_GO}; touch "$DIR/finished""#);
    let run = Running::start(&mut exec_sh(&zk, dir.path(), "stubborn", &["--grace", "1s"], &script));
    let pid: i32 = file(&dir.path().join("started")).await.trim().parse().unwrap();
    output(&mut zklock(&zk, dir.path(), &["revoke", "stubborn"]))
        .await
        .assert_exit(0);

    let stopped = run.finish().await;
    stopped.assert_exit(123);
    assert!(
        stopped
            .stderr
            .contains("did not exit within 1s of SIGTERM; sending its process group SIGKILL")
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

/// What `zklock exec` says of a stopped command is what happened to it: a command that answers
/// the SIGTERM of a revocation by sending itself SIGKILL "died of signal 9"; zklock did not
/// kill it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_command_that_kills_itself_when_stopped_is_said_to_have_died_of_its_signal() {
    let server = ZkServer::start().expect("ZooKeeper");
    let zk = server.connect_string();
    let dir = tempfile::tempdir().unwrap();
    let script = format!(r#"trap 'kill -KILL $$' TERM; echo "$$" > "$DIR/started"; {WAIT_GO}; touch "$DIR/finished""#);
    let run = Running::start(&mut exec_sh(
        &zk,
        dir.path(),
        "self-killing",
        &["--grace", "1m"],
        &script,
    ));
    file(&dir.path().join("started")).await;
    output(&mut zklock(&zk, dir.path(), &["revoke", "self-killing"]))
        .await
        .assert_exit(0);

    let stopped = run.finish().await;
    stopped.assert_exit(123);
    assert!(
        stopped
            .stderr
            .contains("the command was stopped because lock \"self-killing\" was revoked; it died of signal 9")
            && !stopped.stderr.contains("it was killed")
            && !stopped.stderr.contains("sending its process group SIGKILL"),
        "{}",
        stopped.stderr
    );
    assert!(!dir.path().join("finished").exists(), "the command ran to its end");
    go(dir.path());
}

/// The server stops answering (its process is stopped) just as the command exits: the release
/// cannot be confirmed within the `--timeout` (shorter than the session timeout, so the session
/// is not yet taken for ended), and `zklock exec` says so instead of exiting as if the lock had
/// been given back; the exit code stays the command's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_the_server_never_answers_is_said() {
    let server = ZkServer::start().expect("ZooKeeper");
    let zk = server.connect_string();
    let pid = server.pid().expect("the server's pid");
    let dir = tempfile::tempdir().unwrap();
    // Continued when the test ends, passed or failed, so the server can be stopped.
    struct Continue(i32);
    impl Drop for Continue {
        fn drop(&mut self) {
            let _ = kill_process(Pid::from_raw(self.0).unwrap(), Signal::CONT);
        }
    }
    let _continue = Continue(pid as i32);
    let script = format!(r#"kill -STOP {pid}; exit 7"#);
    let stopped = output(&mut exec_sh(
        &zk,
        dir.path(),
        "unconfirmed",
        &["--session-timeout", "4s", "--timeout", "2s"],
        &script,
    ))
    .await;
    stopped.assert_exit(7);
    assert!(
        stopped.stderr.contains(
            "the release of lock \"unconfirmed\" was not confirmed within 2s; ZooKeeper deletes its node when the session ends"
        ),
        "{}",
        stopped.stderr
    );
}

/// Cut off from ZooKeeper, a holder is told of the loss while the server may still keep its
/// session for a while: a command that ignores SIGTERM gets SIGKILL once that while is over
/// (3/5 of the 2 s session timeout less the 500 ms `loss_after`: 700 ms), not after the whole
/// `--grace` of a minute.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_a_loss_the_grace_is_capped_by_what_is_left_of_the_session() {
    let server = ZkServer::start().expect("ZooKeeper");
    let proxy = FaultProxy::start(server.addr()).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let script = format!(r#"trap '' TERM; echo "$$" > "$DIR/started"; {WAIT_GO}; touch "$DIR/finished""#);
    let run = Running::start(&mut exec_sh(
        &proxy.connect_string(),
        dir.path(),
        "stubborn",
        &["--session-timeout", "2s", "--timeout", "3s", "--grace", "1m"],
        &script,
    ));
    let pid: i32 = file(&dir.path().join("started")).await.trim().parse().unwrap();
    proxy.blackhole();

    let stopped = run.finish().await;
    stopped.assert_exit(125);
    assert!(
        stopped.stderr.contains("SIGKILL in 700ms if it has not exited")
            && stopped
                .stderr
                .contains("did not exit within 700ms of SIGTERM; sending its process group SIGKILL")
            && stopped.stderr.contains("it was killed"),
        "{}",
        stopped.stderr
    );
    assert!(stopped.took < Duration::from_secs(60), "waited the whole grace");
    assert!(!dir.path().join("finished").exists(), "the command ran to its end");
    assert!(!alive(pid), "the command {pid} still runs");
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

    leadership.release().await.unwrap();
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
        said("sending the command (its whole process group) SIGTERM")
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
