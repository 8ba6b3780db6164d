//! `zklock leader` (who leads an election group, and following it) and `zklock unlock` (taking
//! a lock away from its holders) against a real ZooKeeper.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

mod cli_support;

use cli_support::{children, json_of, printed, raw, stderr, stdout, wait_for_children, zklock, SOON};
use serde_json::Value;
use zklock_runtime::{Leadership, LockClient, LockError};
use zklock_testing::ZkServer;

/// Two clients in election `group`: `node-a` leading, `node-b` waiting behind it (seen in the
/// group's directory) on a task that returns its leadership once granted.
async fn two_candidates(
    zk: &str,
    raw: &zookeeper_client::Client,
    group: &str,
) -> (
    LockClient,
    LockClient,
    Leadership,
    tokio::task::JoinHandle<Result<Leadership, LockError>>,
) {
    let a = LockClient::connect(zk).await.unwrap();
    let b = LockClient::connect(zk).await.unwrap();
    let leading = a
        .election(group)
        .unwrap()
        .with_participant_id("node-a")
        .unwrap()
        .lead()
        .await
        .unwrap();
    let waiting = tokio::spawn({
        let election = b.election(group).unwrap().with_participant_id("node-b").unwrap();
        async move { election.lead_timeout(SOON).await }
    });
    wait_for_children(raw, &format!("/zklock/{group}"), 2).await;
    (a, b, leading, waiting)
}

/// The last segment of a node path.
fn node_name(path: &str) -> &str {
    path.rsplit('/').next().unwrap_or(path)
}

async fn client_named(zk: &str, identity: &str) -> LockClient {
    LockClient::builder(zk).identity(identity).connect().await.unwrap()
}

/// A child process killed when the test ends, also when it panics.
struct KillOnDrop(std::process::Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The next line a running `zklock` printed, as JSON, within SOON.
async fn next_view(lines: &mut tokio::sync::mpsc::UnboundedReceiver<String>, what: &str) -> Value {
    match tokio::time::timeout(SOON, lines.recv()).await {
        Ok(Some(line)) => serde_json::from_str(&line).unwrap_or_else(|e| panic!("{e}: {line}")),
        Ok(None) => panic!("zklock ended before printing {what}"),
        Err(_) => panic!("zklock printed no view with {what} within {SOON:?}"),
    }
}

/// `leader GROUP` names the participant that leads, with its node, token, session and when it
/// joined; a group nobody leads exits 4 (JSON: `"leader": null`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leader_names_the_member_that_leads() {
    let server = ZkServer::start().expect("ZooKeeper");
    let zk = server.connect_string();
    let raw = raw(&zk).await;

    let nobody = zklock(&zk, &["leader", "compactor"]);
    assert_eq!(nobody.status.code(), Some(4), "{}", stderr(&nobody));
    assert!(
        stderr(&nobody).contains("nobody leads \"compactor\""),
        "{}",
        stderr(&nobody)
    );
    let nobody = zklock(&zk, &["leader", "compactor", "--json"]);
    assert_eq!(nobody.status.code(), Some(4));
    assert_eq!(
        printed(&nobody),
        serde_json::json!({"group": "compactor", "path": "/zklock/compactor", "leader": null})
    );

    let (a, b, leading, waiting) = two_candidates(&zk, &raw, "compactor").await;

    let shown = json_of(&zklock(&zk, &["leader", "compactor", "--json"]));
    assert_eq!(shown["group"], "compactor");
    assert_eq!(shown["path"], "/zklock/compactor");
    let leader = &shown["leader"];
    assert_eq!(leader["participant"], "node-a", "{shown}");
    assert_eq!(leader["node"], node_name(leading.node_path()));
    assert_eq!(leader["token"], leading.fencing_token().to_string());
    assert_eq!(leader["session"], format!("{:#x}", a.session_id().unwrap()));
    assert!(leader["joined_ms"].as_i64().unwrap() > 1_700_000_000_000, "{leader}");
    assert!(leader["joined"].as_str().unwrap().ends_with('Z'), "{leader}");

    let text = zklock(&zk, &["leader", "compactor"]);
    assert!(text.status.success(), "{}", stderr(&text));
    let text = stdout(&text);
    assert!(
        text.contains("led by node-a") && text.contains(&leading.fencing_token().to_string()),
        "{text}"
    );

    leading.release().await.unwrap();
    let next = waiting.await.unwrap().unwrap();
    let shown = json_of(&zklock(&zk, &["leader", "compactor", "--json"]));
    assert_eq!(shown["leader"]["participant"], "node-b", "{shown}");
    next.release().await.unwrap();
    a.close().await;
    b.close().await;
}

/// `leader GROUP --watch` prints the leader, then each change: a new leader when the leader
/// relinquishes and the next candidate takes over, and no leader once the last one leaves; it
/// stops after `--count` views.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leader_watch_follows_each_change_of_leader() {
    let server = ZkServer::start().expect("ZooKeeper");
    let zk = server.connect_string();
    let raw = raw(&zk).await;
    let (a, b, leading, waiting) = two_candidates(&zk, &raw, "scheduler").await;

    let mut child = KillOnDrop(
        Command::new(env!("CARGO_BIN_EXE_zklock"))
            .args([
                "--zk",
                &zk,
                "--timeout",
                "5s",
                "leader",
                "scheduler",
                "--watch",
                "--count",
                "3",
                "--json",
            ])
            .stdout(Stdio::piped())
            .spawn()
            .expect("start zklock leader --watch"),
    );
    let (tx, mut lines) = tokio::sync::mpsc::unbounded_channel();
    let out = child.0.stdout.take().unwrap();
    std::thread::spawn(move || {
        for line in BufReader::new(out).lines().map_while(Result::ok) {
            let _ = tx.send(line);
        }
    });

    let first = next_view(&mut lines, "the first leader").await;
    assert_eq!(first["leader"]["participant"], "node-a", "{first}");
    leading.release().await.unwrap();
    let second = next_view(&mut lines, "the second leader").await;
    assert_eq!(second["leader"]["participant"], "node-b", "{second}");
    let next = waiting.await.unwrap().unwrap();
    assert_eq!(second["leader"]["token"], next.fencing_token().to_string());
    next.release().await.unwrap();
    let third = next_view(&mut lines, "no leader").await;
    assert_eq!(third["leader"], Value::Null, "{third}");

    // Three views printed: it ends by itself, with 0.
    let deadline = Instant::now() + SOON;
    let status = loop {
        if let Some(status) = child.0.try_wait().unwrap() {
            break status;
        }
        assert!(Instant::now() < deadline, "zklock leader --watch --count 3 did not end");
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert!(status.success(), "{status}");
    assert!(lines.recv().await.is_none(), "nothing printed after the third view");
    a.close().await;
    b.close().await;
}

/// Without both `--force` and `--yes`, `unlock` deletes nothing, lists the holder node and
/// whose it is, and exits 2. With both, it deletes the holder's node only: the holder is told
/// it lost the lock, the first waiter is granted, the second waiter still waits.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unlock_takes_the_lock_from_its_holder_and_the_next_waiter_gets_it() {
    let server = ZkServer::start().expect("ZooKeeper");
    let zk = server.connect_string();
    let raw = raw(&zk).await;
    let holder = client_named(&zk, "stuck-worker@pod-1").await;
    let first_waiter = client_named(&zk, "worker@pod-2").await;
    let second_waiter = client_named(&zk, "worker@pod-3").await;
    let guard = holder.mutex("stuck").unwrap().acquire_timeout(SOON).await.unwrap();
    let first = tokio::spawn({
        let lock = first_waiter.mutex("stuck").unwrap();
        async move { lock.acquire_timeout(SOON).await }
    });
    wait_for_children(&raw, "/zklock/stuck", 2).await;
    let second = tokio::spawn({
        let lock = second_waiter.mutex("stuck").unwrap();
        async move { lock.acquire_timeout(Duration::from_secs(120)).await }
    });
    wait_for_children(&raw, "/zklock/stuck", 3).await;

    for flags in [&[][..], &["--force"][..], &["--yes"][..]] {
        let out = zklock(&zk, &[&["unlock", "stuck"][..], flags].concat());
        let said = stderr(&out);
        assert_eq!(out.status.code(), Some(2), "unlock {flags:?}: {said}");
        assert!(
            said.contains(guard.node_path()) && said.contains("stuck-worker@pod-1"),
            "unlock {flags:?} lists what it would delete and whose it is: {said}"
        );
        assert!(said.contains("--yes") || said.contains("--force"), "{said}");
    }
    let refused = zklock(&zk, &["unlock", "stuck", "--force", "--json"]);
    assert_eq!(refused.status.code(), Some(2));
    let refused = printed(&refused);
    assert_eq!(refused["outcome"], "not_confirmed", "{refused}");
    assert_eq!(refused["would_delete"][0]["path"], guard.node_path());
    assert_eq!(
        refused["would_delete"].as_array().unwrap().len(),
        1,
        "waiters are not listed"
    );
    assert_eq!(children(&raw, "/zklock/stuck").await.len(), 3, "nothing was deleted");
    assert!(!guard.is_lost());

    let done = json_of(&zklock(&zk, &["unlock", "stuck", "--force", "--yes", "--json"]));
    assert_eq!(done["outcome"], "deleted", "{done}");
    let deleted = done["deleted"].as_array().unwrap();
    assert_eq!(deleted.len(), 1, "only the holder's node: {done}");
    assert_eq!(deleted[0]["path"], guard.node_path());
    assert_eq!(deleted[0]["identity"], "stuck-worker@pod-1");
    assert_eq!(deleted[0]["token"], guard.fencing_token().to_string());
    match tokio::time::timeout(SOON, guard.lost()).await {
        Ok(LockError::Lost { .. }) => {}
        Ok(other) => panic!("the holder was told {other:?}"),
        Err(_) => panic!("the holder was not told it lost the lock within {SOON:?}"),
    }
    let granted = tokio::time::timeout(SOON, first)
        .await
        .expect("the first waiter was granted in time")
        .unwrap()
        .expect("the first waiter was granted");
    assert!(!second.is_finished(), "the second waiter still waits");
    assert_eq!(
        children(&raw, "/zklock/stuck").await.len(),
        2,
        "the waiter's node was left alone"
    );

    // In text: what was deleted, and whose it was.
    let out = zklock(&zk, &["unlock", "stuck", "--force", "--yes"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let text = stdout(&out);
    assert!(
        text.contains(&format!("deleted {}", granted.node_path())) && text.contains("worker@pod-2"),
        "{text}"
    );
    tokio::time::timeout(SOON, granted.lost())
        .await
        .expect("the second holder was told it lost the lock");
    let last = tokio::time::timeout(SOON, second)
        .await
        .expect("the second waiter was granted in time")
        .unwrap()
        .expect("the second waiter was granted");
    drop((guard, granted));
    last.release().await.unwrap();
    for c in [holder, first_waiter, second_waiter] {
        c.close().await;
    }
}

/// Every reader holds a read/write lock together: `unlock` deletes each reader's node, and the
/// writer waiting behind them is granted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unlock_deletes_every_reader_and_the_waiting_writer_gets_it() {
    let server = ZkServer::start().expect("ZooKeeper");
    let zk = server.connect_string();
    let raw = raw(&zk).await;
    let readers = client_named(&zk, "reader").await;
    let writers = client_named(&zk, "writer").await;
    let one = readers
        .read_lock("catalog")
        .unwrap()
        .acquire_timeout(SOON)
        .await
        .unwrap();
    let two = readers
        .read_lock("catalog")
        .unwrap()
        .acquire_timeout(SOON)
        .await
        .unwrap();
    let writer = tokio::spawn({
        let lock = writers.write_lock("catalog").unwrap();
        async move { lock.acquire_timeout(SOON).await }
    });
    wait_for_children(&raw, "/zklock/catalog", 3).await;

    let done = json_of(&zklock(&zk, &["unlock", "catalog", "--force", "--yes", "--json"]));
    let mut paths: Vec<&str> = done["deleted"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["path"].as_str().unwrap())
        .collect();
    paths.sort();
    let mut expected = [one.node_path(), two.node_path()];
    expected.sort();
    assert_eq!(paths, expected, "{done}");
    for reader in [&one, &two] {
        tokio::time::timeout(SOON, reader.lost())
            .await
            .expect("each reader was told it lost the lock");
    }
    let granted = tokio::time::timeout(SOON, writer)
        .await
        .expect("the writer was granted in time")
        .unwrap()
        .expect("the writer was granted");
    granted.release().await.unwrap();
    drop((one, two));
    readers.close().await;
    writers.close().await;
}

/// A lock nobody holds, and one that does not exist: nothing to delete, exit 4.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unlock_of_a_free_lock_says_so_and_exits_4() {
    let server = ZkServer::start().expect("ZooKeeper");
    let zk = server.connect_string();
    let raw = raw(&zk).await;
    // A directory that stays (persistent, never reaped) with nobody in it.
    raw.mkdir(
        "/zklock/idle",
        &zookeeper_client::CreateMode::Persistent.with_acls(zookeeper_client::Acls::anyone_all()),
    )
    .await
    .unwrap();
    let out = zklock(&zk, &["unlock", "idle", "--force", "--yes"]);
    assert_eq!(out.status.code(), Some(4), "{}", stderr(&out));
    assert!(stderr(&out).contains("nobody holds \"idle\""), "{}", stderr(&out));
    let out = zklock(&zk, &["unlock", "idle", "--force", "--yes", "--json"]);
    assert_eq!(out.status.code(), Some(4));
    assert_eq!(printed(&out)["outcome"], "no_holder");
    // Unconfirmed, a free lock is still "nothing to delete".
    let out = zklock(&zk, &["unlock", "idle"]);
    assert_eq!(out.status.code(), Some(4), "{}", stderr(&out));

    let out = zklock(&zk, &["unlock", "never-used", "--force", "--yes"]);
    assert_eq!(out.status.code(), Some(4));
    assert!(stderr(&out).contains("no lock \"never-used\""), "{}", stderr(&out));
    assert_eq!(children(&raw, "/zklock").await, ["idle"], "unlock created nothing");
}
