//! The `zklock` command against a real ZooKeeper, with zklock and Curator contenders.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

mod cli_support;

use cli_support::{json_of, raw, run, wait_for_children, zklock, SOON};
use serde_json::Value;
use zklock_runtime::{LockClient, LockKind};
use zklock_testing::curator::CuratorPeer;
use zklock_testing::{TestCa, ZkServer};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn show_and_locks_describe_a_queue_of_zklock_and_curator_contenders() {
    let server = ZkServer::start().expect("ZooKeeper");
    let zk = server.connect_string();
    let raw = raw(&zk).await;
    let holder = LockClient::builder(zk.clone())
        .identity("orders-api@pod-7")
        .connect()
        .await
        .unwrap();
    let guard = holder
        .mutex("inventory:42")
        .unwrap()
        .with_template("inventory:{sku}")
        .acquire()
        .await
        .unwrap();
    let peer = CuratorPeer::start(&zk).await.expect("Curator peer");
    peer.mutex("c", "/zklock/inventory:42").await.unwrap();
    peer.acquire("c", None).unwrap();
    wait_for_children(&raw, "/zklock/inventory:42", 2).await;
    let waiter = LockClient::builder(zk.clone())
        .identity("orders-api@pod-8")
        .connect()
        .await
        .unwrap();
    let waiting = tokio::spawn({
        let lock = waiter.mutex("inventory:42").unwrap();
        async move { lock.acquire().await.map(drop) }
    });
    wait_for_children(&raw, "/zklock/inventory:42", 3).await;

    let view = json_of(&zklock(&zk, &["show", "inventory:42", "--json"]));
    assert_eq!(view["name"], "inventory:42");
    assert_eq!(view["recipe"], "mutex");
    let holders = view["holders"].as_array().unwrap();
    let waiters = view["waiters"].as_array().unwrap();
    assert_eq!((holders.len(), waiters.len()), (1, 2), "{view}");
    let h = &holders[0];
    assert_eq!(h["client"], "zklock");
    assert_eq!(h["identity"], "orders-api@pod-7");
    assert_eq!(h["template"], "inventory:{sku}");
    assert_eq!(h["token"], guard.fencing_token().to_string());
    assert!(h["age_ms"].as_u64().is_some(), "{h}");
    // In queue order: Curator waits for the holder, the second zklock client for Curator.
    assert_eq!(waiters[0]["client"], "curator");
    assert_eq!(waiters[0]["waits_for"], h["node"]);
    assert_eq!(waiters[1]["client"], "zklock");
    assert_eq!(waiters[1]["identity"], "orders-api@pod-8");
    assert_eq!(waiters[1]["waits_for"], waiters[0]["node"]);
    for entry in holders.iter().chain(waiters) {
        for key in ["node", "client", "identity", "age_ms", "token"] {
            assert!(entry.get(key).is_some(), "{key} missing in {entry}");
        }
    }

    let text = zklock(&zk, &["show", "inventory:42"]);
    let text = String::from_utf8_lossy(&text.stdout);
    eprintln!("{text}");
    assert!(text.contains("1 holding, 2 waiting"), "{text}");
    assert!(text.contains("HOLDS") && text.contains("orders-api@pod-7"), "{text}");
    assert!(text.contains("curator"), "{text}");

    let other = holder.read_lock("catalog").unwrap().acquire().await.unwrap();
    let listed = json_of(&zklock(&zk, &["locks", "--json"]));
    let rows = listed.as_array().unwrap();
    let names: Vec<&str> = rows.iter().map(|r| r["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["catalog", "inventory:42"]);
    assert_eq!(rows[1]["holders"], 1);
    assert_eq!(rows[1]["waiters"], 2);
    assert!(rows[1]["oldest_wait_ms"].as_u64().is_some());
    assert_eq!(rows[0]["recipe"], "read_write");
    let filtered = json_of(&zklock(&zk, &["locks", "--prefix", "inv", "--json"]));
    assert_eq!(filtered.as_array().unwrap().len(), 1);

    drop(other);
    guard.release().await.unwrap();
    peer.wait_acquired("c", SOON).await.unwrap();
    peer.release("c").await.unwrap();
    waiting.await.unwrap().unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readers_writers_and_leases_are_shown_as_such() {
    let server = ZkServer::start().expect("ZooKeeper");
    let zk = server.connect_string();
    let raw = raw(&zk).await;
    let a = LockClient::connect(&zk).await.unwrap();
    let b = LockClient::connect(&zk).await.unwrap();
    let reader = a.read_lock("report").unwrap().acquire().await.unwrap();
    let writer = tokio::spawn({
        let lock = b.write_lock("report").unwrap();
        async move { lock.acquire().await.map(drop) }
    });
    wait_for_children(&raw, "/zklock/report", 2).await;
    let view = json_of(&zklock(&zk, &["show", "report", "--json"]));
    assert_eq!(view["recipe"], "read_write");
    assert_eq!(view["holders"][0]["side"], "read");
    assert_eq!(view["waiters"][0]["side"], "write");
    assert_eq!(view["waiters"][0]["waits_for"], view["holders"][0]["node"]);
    drop(reader);
    writer.await.unwrap().unwrap();

    let slots = a.lock("exports", LockKind::Semaphore { leases: 2 }).unwrap();
    let one = slots.acquire().await.unwrap();
    let two = slots.acquire().await.unwrap();
    let view = json_of(&zklock(&zk, &["show", "exports", "--json"]));
    assert_eq!(view["recipe"], "semaphore");
    let sides: Vec<&str> = view["holders"]
        .as_array()
        .unwrap()
        .iter()
        .map(|h| h["side"].as_str().unwrap())
        .collect();
    assert_eq!(sides, ["lease", "lease"], "{view}");
    drop((one, two));
}

fn holders(view: &Value) -> usize {
    view["holders"].as_array().map_or(0, Vec::len)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watch_redraws_as_contenders_come_and_go() {
    let server = ZkServer::start().expect("ZooKeeper");
    let zk = server.connect_string();
    let client = LockClient::connect(&zk).await.unwrap();
    let mut child = KillOnDrop(
        Command::new(env!("CARGO_BIN_EXE_zklock"))
            .args(["--zk", &zk, "watch", "live", "--json", "--count", "50"])
            .stdout(Stdio::piped())
            .spawn()
            .expect("start zklock watch"),
    );
    let (tx, mut lines) = tokio::sync::mpsc::unbounded_channel();
    let stdout = child.0.stdout.take().unwrap();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            let _ = tx.send(line);
        }
    });
    // Each view is printed when ZooKeeper reports a change; none is printed on a timer.
    let first = next_until(&mut lines, "a first view", |_| true).await;
    assert_eq!(first["exists"], false, "{first}");
    let guard = client.mutex("live").unwrap().acquire().await.unwrap();
    let held = next_until(&mut lines, "one holder", |v| holders(v) == 1).await;
    assert_eq!(held["holders"][0]["client"], "zklock");
    guard.release().await.unwrap();
    next_until(&mut lines, "no holder", |v| holders(v) == 0).await;
}

/// A child process killed when the test ends, also when it panics.
struct KillOnDrop(std::process::Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The next view `zklock watch` printed that `want`s, within SOON in all (however many other
/// views come first); fails naming `what` and the views it saw meanwhile.
async fn next_until(
    lines: &mut tokio::sync::mpsc::UnboundedReceiver<String>,
    what: &str,
    want: fn(&Value) -> bool,
) -> Value {
    let deadline = tokio::time::Instant::now() + SOON;
    let mut seen = Vec::new();
    loop {
        let line = match tokio::time::timeout_at(deadline, lines.recv()).await {
            Ok(Some(line)) => line,
            Ok(None) => panic!("zklock watch ended before {what}; it printed {seen:?}"),
            Err(_) => panic!("zklock watch printed no view with {what} within {SOON:?}; it printed {seen:?}"),
        };
        let view: Value = serde_json::from_str(&line).unwrap_or_else(|e| panic!("{e}: {line}"));
        if want(&view) {
            return view;
        }
        seen.push(line);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn jobs_lists_the_tick_records_a_singleton_job_wrote() {
    use zklock_runtime::scheduler::tokio_cron_scheduler::JobScheduler;
    use zklock_runtime::scheduler::{JobSchedulerExt, SingletonJob};

    let server = ZkServer::start().expect("ZooKeeper");
    let zk = server.connect_string();
    let empty = zklock(&zk, &["jobs", "--json"]);
    assert_eq!(json_of(&empty), serde_json::json!([]));

    let client = LockClient::connect(&zk).await.unwrap();
    let job = SingletonJob::new_async("* * * * * *", &client, "nightly-report", |_run| async {}).unwrap();
    let mut scheduler = JobScheduler::new().await.unwrap();
    let (_, stats) = scheduler.add_singleton(job).await.unwrap();
    scheduler.start().await.unwrap();
    let deadline = Instant::now() + SOON;
    while stats.runs() == 0 || stats.fires_in_flight() > 0 {
        assert!(Instant::now() < deadline, "the job never ran: {:?}", stats.snapshot());
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    scheduler.shutdown().await.unwrap();
    let deadline = Instant::now() + SOON;
    while stats.fires_in_flight() > 0 {
        assert!(Instant::now() < deadline, "a fire never ended: {:?}", stats.snapshot());
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    let records = json_of(&zklock(&zk, &["jobs", "--json"]));
    let record = &records[0];
    assert_eq!(record["job"], "nightly-report");
    let recorded = stats.last_recorded_tick().expect("a recorded tick");
    let recorded_ms = recorded.duration_since(std::time::UNIX_EPOCH).unwrap().as_millis() as i64;
    // Later ticks may have been taken after the one seen above, never earlier ones.
    assert!(record["tick_ms"].as_i64().unwrap() >= recorded_ms, "{record}");
    assert!(
        ["done", "running"].contains(&record["state"].as_str().unwrap()),
        "{record}"
    );
    assert_eq!(record["session"], format!("{:#x}", client.session_id().unwrap()));
    assert!(record["written_ms"].as_i64().unwrap() > 0);
    let text = zklock(&zk, &["jobs"]);
    assert!(String::from_utf8_lossy(&text.stdout).contains("nightly-report"));
}

#[tokio::test]
async fn errors_have_their_exit_codes() {
    let server = ZkServer::start().expect("ZooKeeper");
    let zk = server.connect_string();
    let missing = zklock(&zk, &["show", "nobody-uses-this"]);
    assert_eq!(missing.status.code(), Some(4));
    assert!(String::from_utf8_lossy(&missing.stderr).contains("no lock"));

    let bad_name = zklock(&zk, &["show", "a/b"]);
    assert_eq!(
        bad_name.status.code(),
        Some(2),
        "{}",
        String::from_utf8_lossy(&bad_name.stderr)
    );
    assert!(String::from_utf8_lossy(&bad_name.stderr).contains("invalid lock name"));

    let bad_args = zklock(&zk, &["show"]);
    assert_eq!(bad_args.status.code(), Some(2));
    let bad_digest = zklock(&zk, &["--digest", "nocolon", "locks"]);
    assert_eq!(bad_digest.status.code(), Some(2));

    let closed = zklock_testing::process::closed_address().to_string();
    let started = Instant::now();
    let unreachable =
        run(Command::new(env!("CARGO_BIN_EXE_zklock")).args(["--zk", &closed, "--timeout", "1s", "locks"]));
    assert_eq!(
        unreachable.status.code(),
        Some(3),
        "{}",
        String::from_utf8_lossy(&unreachable.stderr)
    );
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "took {:?}",
        started.elapsed()
    );
    assert!(String::from_utf8_lossy(&unreachable.stderr).contains("ZooKeeper"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_secured_ensemble_is_read_over_tls_with_sasl() {
    let ca = TestCa::new("zklock test CA").unwrap();
    let server = ZkServer::builder()
        .tls(&ca)
        .sasl_user("ops", "ops-secret")
        .start()
        .expect("ZooKeeper");
    let secure = server.secure_connect_string().unwrap();
    let holder = LockClient::builder(secure.clone())
        .tls(zklock_runtime::TlsConfig::ca_file(ca.cert_file()).unwrap())
        .sasl_digest("ops", "ops-secret")
        .identity("payroll@pod-1")
        .connect()
        .await
        .unwrap();
    let guard = holder.mutex("payroll").unwrap().acquire_timeout(SOON).await.unwrap();

    let ca_file = ca.cert_file().display().to_string();
    let secured = ["--tls-ca", ca_file.as_str(), "--sasl", "ops:ops-secret"];
    let shown = zklock(&secure, &[&secured[..], &["--json", "show", "payroll"]].concat());
    let view = json_of(&shown);
    assert_eq!(view["holders"][0]["identity"], "payroll@pod-1", "{view}");

    // Without TLS on the TLS port, and with a wrong password: each says what is wrong.
    let plain = zklock(&secure, &["locks"]);
    assert_eq!(plain.status.code(), Some(3));
    assert!(String::from_utf8_lossy(&plain.stderr).contains("speaks TLS"));
    let wrong = zklock(&secure, &["--tls-ca", &ca_file, "--sasl", "ops:guess", "locks"]);
    assert_eq!(wrong.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&wrong.stderr).contains("authentication failed"));
    let missing = zklock(&secure, &["--tls-ca", "/nonexistent/ca.pem", "locks"]);
    assert_eq!(missing.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&missing.stderr).contains("/nonexistent/ca.pem"));
    guard.release().await.unwrap();
}

/// Polls `zklock jobs history NAME --json` until its newest entry satisfies `want`.
async fn history_until(zk: &str, name: &str, what: &str, want: impl Fn(&Value) -> bool) -> Vec<Value> {
    history_with(zk, name, what, |entries| entries.first().is_some_and(&want)).await
}

/// Polls `zklock jobs history NAME --json` until its entries satisfy `want`.
async fn history_with(zk: &str, name: &str, what: &str, want: impl Fn(&[Value]) -> bool) -> Vec<Value> {
    let deadline = Instant::now() + SOON;
    loop {
        let history = json_of(&zklock(zk, &["jobs", "history", name, "--json"]));
        let entries = history.as_array().cloned().unwrap_or_default();
        if want(&entries) {
            return entries;
        }
        assert!(Instant::now() < deadline, "never {what}: {history}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Pause, trigger, resume, history, reset and remove from the command line, against a job a
/// real scheduler runs every second.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn jobs_actions_reach_the_nodes_running_the_job() {
    use zklock_runtime::scheduler::tokio_cron_scheduler::JobScheduler;
    use zklock_runtime::scheduler::{JobSchedulerExt, SingletonJob};

    let server = ZkServer::start().expect("ZooKeeper");
    let zk = server.connect_string();
    let client = LockClient::builder(&zk).identity("worker-1").connect().await.unwrap();
    let job = SingletonJob::new_async("* * * * * *", &client, "sweep", |_run| async {}).unwrap();
    let mut scheduler = JobScheduler::new().await.unwrap();
    scheduler.add_singleton(job).await.unwrap();
    scheduler.start().await.unwrap();
    let ran = |e: &Value| e["outcome"] == "ok" && e["tick"].is_i64();
    history_until(&zk, "sweep", "ran on schedule", ran).await;

    let paused = json_of(&zklock(&zk, &["jobs", "pause", "sweep", "--json"]));
    assert_eq!(
        paused,
        serde_json::json!({"job": "sweep", "paused": true, "changed": true})
    );
    history_until(&zk, "sweep", "skipped a paused tick", |e| e["outcome"] == "skipped").await;
    let listed = json_of(&zklock(&zk, &["jobs", "--json"]));
    assert_eq!(listed[0]["paused"], true);
    assert_eq!(listed[0]["spec"]["schedule"], "* * * * * *");

    let request = json_of(&zklock(&zk, &["jobs", "trigger", "sweep", "--json"]));
    assert!(
        request["request"].as_str().unwrap().starts_with("trigger-"),
        "{request}"
    );
    // While paused, each paused beat widens or starts the paused stretch's entry: the
    // request's entry is not the newest for long.
    let triggered = |e: &Value| e["tick"].is_null();
    let history = history_with(&zk, "sweep", "ran the request", |entries| entries.iter().any(triggered)).await;
    let entry = history.iter().find(|e| triggered(e)).expect("found above");
    assert_eq!(
        (&entry["outcome"], &entry["node"], &entry["error"]),
        (&Value::from("ok"), &Value::from("worker-1"), &Value::Null)
    );
    assert!(
        entry["started"].as_i64().unwrap() > 0 && entry["duration_ms"].is_u64(),
        "{entry}"
    );

    json_of(&zklock(&zk, &["jobs", "resume", "sweep", "--json"]));
    history_until(&zk, "sweep", "ran on schedule after the resume", ran).await;
    let text = String::from_utf8_lossy(&zklock(&zk, &["jobs", "history", "sweep"]).stdout).into_owned();
    assert!(
        text.contains("(triggered)") && text.contains("skipped") && text.contains("paused"),
        "{text}"
    );

    let unconfirmed = zklock(&zk, &["jobs", "reset", "sweep"]);
    assert_eq!(unconfirmed.status.code(), Some(2), "reset needs --yes");
    assert!(String::from_utf8_lossy(&unconfirmed.stderr).contains("--yes"));
    scheduler.shutdown().await.unwrap();
    // With nothing running, the history stands still: --limit N is its newest N entries.
    let full = json_of(&zklock(&zk, &["jobs", "history", "sweep", "--json"]));
    let limited = json_of(&zklock(&zk, &["jobs", "history", "sweep", "--limit", "2", "--json"]));
    let full = full.as_array().expect("a list");
    assert!(full.len() > 2, "{full:?}");
    assert_eq!(limited.as_array().expect("a list")[..], full[..2]);
    assert!(json_of(&zklock(&zk, &["jobs", "reset", "sweep", "--yes", "--json"]))["reset"] == true);
    assert_eq!(
        json_of(&zklock(&zk, &["jobs", "history", "sweep", "--json"])),
        serde_json::json!([])
    );
    let unconfirmed = zklock(&zk, &["jobs", "remove", "sweep"]);
    assert_eq!(unconfirmed.status.code(), Some(2), "remove needs --yes");
    assert!(String::from_utf8_lossy(&unconfirmed.stderr).contains("--yes"));
    assert_eq!(
        json_of(&zklock(&zk, &["jobs", "--json"]))[0]["job"],
        "sweep",
        "removed without --yes"
    );
    assert!(json_of(&zklock(&zk, &["jobs", "remove", "sweep", "--yes", "--json"]))["removed"] == true);
    assert_eq!(json_of(&zklock(&zk, &["jobs", "--json"])), serde_json::json!([]));
    let gone = zklock(&zk, &["jobs", "remove", "sweep", "--yes"]);
    assert_eq!(gone.status.code(), Some(4), "{}", String::from_utf8_lossy(&gone.stderr));
    client.close().await;
}

/// `jobs trigger` and `jobs pause` of a name no node runs (a typo) fail with "no such job"
/// (exit 4) and leave nothing behind; with `--create` they make the job, for a job about to be
/// deployed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn jobs_trigger_and_pause_of_an_unknown_job_fail_unless_created() {
    let server = ZkServer::start().expect("ZooKeeper");
    let zk = server.connect_string();
    for action in ["trigger", "pause"] {
        let out = zklock(&zk, &["jobs", action, "swepe"]);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(4), "jobs {action} of an unknown job: {stderr}");
        assert!(
            stderr.contains("no job \"swepe\"") && stderr.contains("--create"),
            "jobs {action} says why and how: {stderr}"
        );
        assert_eq!(
            json_of(&zklock(&zk, &["jobs", "--json"])),
            serde_json::json!([]),
            "jobs {action} of an unknown job left no phantom job"
        );
    }
    let paused = json_of(&zklock(&zk, &["jobs", "pause", "nightly", "--create", "--json"]));
    assert_eq!(paused["paused"], true);
    let request = json_of(&zklock(&zk, &["jobs", "trigger", "nightly", "--create", "--json"]));
    assert!(
        request["request"].as_str().unwrap().starts_with("trigger-"),
        "{request}"
    );
    let listed = json_of(&zklock(&zk, &["jobs", "--json"]));
    assert_eq!(
        (&listed[0]["job"], &listed[0]["paused"], &listed[0]["triggers_pending"]),
        (&Value::from("nightly"), &Value::from(true), &Value::from(1))
    );
    // Known now: no --create needed.
    json_of(&zklock(&zk, &["jobs", "trigger", "nightly", "--json"]));
}

/// `jobs remove` that cannot delete the job (a node of someone else's under one of its
/// children keeps failing the delete) reports the failure and does not say "removed".
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn jobs_remove_that_cannot_delete_the_job_reports_failure() {
    let server = ZkServer::start().expect("ZooKeeper");
    let zk = server.connect_string();
    let raw = raw(&zk).await;
    let open = zookeeper_client::CreateMode::Persistent.with_acls(zookeeper_client::Acls::anyone_all());
    for path in [
        "/zklock.jobs",
        "/zklock.jobs/stuck",
        "/zklock.jobs/stuck/history",
        "/zklock.jobs/stuck/history/stray",
    ] {
        raw.create(path, b"", &open).await.unwrap();
    }
    let out = zklock(&zk, &["jobs", "remove", "stuck", "--yes"]);
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert!(!out.status.success(), "remove reported success: {stdout}");
    assert!(!stdout.contains("removed"), "{stdout}");
    assert!(stderr.contains("remove job"), "the failure is named: {stderr}");
    let listed = json_of(&zklock(&zk, &["jobs", "--json"]));
    assert_eq!(listed[0]["job"], "stuck", "the job is still there");
}

/// `jobs reset` and `jobs remove` of a job whose lock stays held (a run going on) past `--wait`
/// end with exit code 6, not the "unreachable" 3 (ZooKeeper answered all along), and change
/// nothing; once the lock is free they go through.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn jobs_reset_and_remove_of_a_job_still_running_past_wait_exit_6() {
    let server = ZkServer::start().expect("ZooKeeper");
    let zk = server.connect_string();
    let client = LockClient::connect(&zk).await.unwrap();
    zklock_runtime::scheduler::create_job(&client, "busy").await.unwrap();
    // A run going on holds the job's lock, whose name is the job's.
    let run_going_on = client.mutex("busy").unwrap().acquire_timeout(SOON).await.unwrap();
    for action in ["reset", "remove"] {
        let started = Instant::now();
        let out = zklock(&zk, &["jobs", action, "busy", "--yes", "--wait", "1s"]);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(6), "jobs {action} past --wait: {stderr}");
        assert!(
            stderr.contains("--wait 1s") && stderr.contains("nothing was changed"),
            "jobs {action} says why: {stderr}"
        );
        assert!(started.elapsed() >= Duration::from_secs(1), "jobs {action} waited");
    }
    let listed = json_of(&zklock(&zk, &["jobs", "--json"]));
    assert_eq!(listed[0]["job"], "busy", "the job is still there: {listed}");

    run_going_on.release().await.unwrap();
    assert!(
        json_of(&zklock(
            &zk,
            &["jobs", "reset", "busy", "--yes", "--wait", "1s", "--json"]
        ))["reset"]
            == true
    );
    assert!(
        json_of(&zklock(
            &zk,
            &["jobs", "remove", "busy", "--yes", "--wait", "1s", "--json"]
        ))["removed"]
            == true
    );
    client.close().await;
}

/// Records `zklock jobs` cannot show as usual still list: a tick past year 9999, a record
/// whose ACL this client does not pass; the other jobs are listed beside them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn jobs_lists_records_it_cannot_read_or_date() {
    let server = ZkServer::start().expect("ZooKeeper");
    let zk = server.connect_string();
    let raw = raw(&zk).await;
    let open = zookeeper_client::CreateMode::Persistent.with_acls(zookeeper_client::Acls::anyone_all());
    raw.create("/zklock.jobs", b"", &open).await.unwrap();
    raw.create("/zklock.jobs/far", b"tick=300000000000000 state=done", &open)
        .await
        .unwrap();
    raw.create("/zklock.jobs/plain", b"tick=1700000000000 state=done", &open)
        .await
        .unwrap();
    raw.auth("digest", b"ops:secret").await.unwrap();
    let mine = zookeeper_client::CreateMode::Persistent.with_acls(zookeeper_client::Acls::creator_all());
    raw.create("/zklock.jobs/private", b"tick=1700000000000 state=done", &mine)
        .await
        .unwrap();

    let listed = json_of(&zklock(&zk, &["jobs", "--json"]));
    let state = |i: usize| {
        (
            listed[i]["job"].as_str().unwrap().to_owned(),
            listed[i]["state"].as_str().unwrap().to_owned(),
        )
    };
    assert_eq!(
        [state(0), state(1), state(2)],
        [
            ("far".to_owned(), "done".to_owned()),
            ("plain".to_owned(), "done".to_owned()),
            ("private".to_owned(), "forbidden".to_owned())
        ]
    );
    let text = zklock(&zk, &["jobs"]);
    assert!(text.status.success(), "{}", String::from_utf8_lossy(&text.stderr));
    let text = String::from_utf8_lossy(&text.stdout);
    assert!(
        text.contains("300000000000000ms since 1970") && text.contains("forbidden"),
        "{text}"
    );
}

/// `zklock show` tells a node kept idle in its process's lock cache from a held one, in text
/// and JSON.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn show_tells_a_cached_idle_node_from_a_held_one() {
    let server = ZkServer::start().expect("ZooKeeper");
    let zk = server.connect_string();
    let holder = LockClient::builder(&zk)
        .default_cache(Duration::from_secs(3600))
        .connect()
        .await
        .unwrap();
    let lock = holder.mutex("reports").unwrap();
    let guard = lock.acquire().await.unwrap();
    let shown = |args: &[&str]| String::from_utf8_lossy(&zklock(&zk, args).stdout).into_owned();
    let text = shown(&["show", "reports"]);
    assert!(text.contains("HOLDS") && !text.contains("cached"), "{text}");
    guard.release().await.unwrap();

    let deadline = Instant::now() + SOON;
    let view = loop {
        let view = json_of(&zklock(&zk, &["show", "reports", "--json"]));
        if view["holders"][0]["cached_since_ms"].is_u64() {
            break view;
        }
        assert!(
            Instant::now() < deadline,
            "the idle node was never shown cached: {view}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert_eq!(view["holders"][0]["client"], "zklock", "{view}");
    let text = shown(&["show", "reports"]);
    assert!(text.contains("cached (idle) for"), "{text}");
    // Held again, it is shown held.
    let again = lock.acquire().await.unwrap();
    let text = shown(&["show", "reports"]);
    assert!(!text.contains("cached"), "{text}");
    again.release().await.unwrap();
}

/// `zklock revoke NAME` writes the request into the holder's node (the holder sees it), in
/// text and JSON; a lock nobody holds, or that does not exist, exits 4 and says so.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn revoke_asks_the_holder_and_says_when_nobody_holds() {
    let server = ZkServer::start().expect("ZooKeeper");
    let zk = server.connect_string();
    let raw = raw(&zk).await;
    let holder = LockClient::connect(&zk).await.unwrap();
    let guard = holder.mutex("exports").unwrap().acquire().await.unwrap();

    let out = zklock(&zk, &["revoke", "exports"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains(&format!("asked the holder of {} to release exports", guard.node_path())),
        "{text}"
    );
    tokio::time::timeout(SOON, guard.revoked())
        .await
        .expect("the holder was asked");
    let (data, _) = raw.get_data(guard.node_path()).await.unwrap();
    assert_eq!(data, b"__REVOKE__");

    let answer = json_of(&zklock(&zk, &["revoke", "exports", "--json"]));
    assert_eq!(answer["outcome"], "requested");
    assert_eq!(answer["nodes"][0], guard.node_path());
    // `show` tells of the request, and names no holder from the overwritten data.
    let view = json_of(&zklock(&zk, &["show", "exports", "--json"]));
    let shown = &view["holders"][0];
    assert_eq!(shown["revocation_requested"], true, "{view}");
    assert_eq!(shown["identity"], Value::Null, "{view}");
    assert_eq!(shown["client"], "unknown", "{view}");
    let text = zklock(&zk, &["show", "exports"]);
    assert!(String::from_utf8_lossy(&text.stdout).contains("revocation requested"));
    guard.release().await.unwrap();

    // A directory that stays (persistent, never reaped) with nobody in it.
    raw.mkdir(
        "/zklock/idle",
        &zookeeper_client::CreateMode::Persistent.with_acls(zookeeper_client::Acls::anyone_all()),
    )
    .await
    .unwrap();
    let out = zklock(&zk, &["revoke", "idle"]);
    assert_eq!(out.status.code(), Some(4));
    assert!(String::from_utf8_lossy(&out.stderr).contains("nobody holds \"idle\""));
    let out = zklock(&zk, &["revoke", "idle", "--json"]);
    assert_eq!(out.status.code(), Some(4));
    let answer: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(answer["outcome"], "no_holder");

    let out = zklock(&zk, &["revoke", "never-used"]);
    assert_eq!(out.status.code(), Some(4));
    assert!(String::from_utf8_lossy(&out.stderr).contains("no lock \"never-used\""));
}
