//! `zklock doctor` against real ZooKeeper servers: the suite's usual server passes, and each
//! check is made to warn or fail by a server setting (or a flag) that breaks what it looks at.
//!
//! Two checks are not made to fail here: `clock` (a server's clock cannot be set apart from
//! this host's without privileges) and the warning of `transport-security` (test servers
//! listen on loopback only, which the check rightly passes). Their rules are tested on numbers
//! in zklock-cli/src/doctor/tests.rs; here they pass against real servers.

use std::process::Output;
use std::time::Duration;

mod cli_support;

use serde_json::Value;
use zklock_runtime::LockClient;
use zklock_testing::{TestCa, ZkEnsemble, ZkServer};

/// Runs `zklock --zk ZK --timeout 10s ARGS…` to its end (within `cli_support::RUN_LIMIT`).
fn zklock(zk: &str, args: &[&str]) -> Output {
    cli_support::run(cli_support::bare().args(["--zk", zk, "--timeout", "10s"]).args(args))
}

/// `doctor --json` with `args` (global options too go after the subcommand): its exit code
/// and report.
fn doctor(zk: &str, args: &[&str]) -> (i32, Value) {
    let out = zklock(zk, &[&["doctor", "--json"], args].concat());
    let report = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "{e}: stdout {}\nstderr {}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    });
    (out.status.code().expect("exited"), report)
}

/// The status of check `name`, with the whole check for messages.
fn status<'a>(report: &'a Value, name: &str) -> (&'a str, &'a Value) {
    let check = report["checks"]
        .as_array()
        .expect("checks")
        .iter()
        .find(|c| c["name"] == name)
        .unwrap_or_else(|| panic!("no check {name} in {report}"));
    (check["status"].as_str().expect("status"), check)
}

fn assert_status(report: &Value, name: &str, want: &str) {
    let (got, check) = status(report, name);
    assert_eq!(got, want, "{name}: {check:#}");
}

async fn raw(connect: &str) -> zookeeper_client::Client {
    zookeeper_client::Client::connect(connect).await.expect("raw client")
}

/// The suite's usual server (200 ms tick, sessions of 0.4–4 s, every four-letter word) with a
/// 4 s session: every check passes but the namespace's, which does not exist yet. Then the
/// namespace as a lock client without credentials leaves it (open to anyone: a warning), and
/// restricted (a pass); a lock-delay too short for a deleted node's holder to hear of it fails.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_test_server_passes_and_the_namespace_acl_is_judged() {
    let server = ZkServer::start().expect("ZooKeeper");
    let zk = server.connect_string();

    let (code, report) = doctor(&zk, &["--session-timeout", "4s"]);
    assert_eq!(code, 0, "{report:#}");
    assert_eq!(report["status"], "warn", "{report:#}");
    for name in [
        "connection",
        "session-timeout",
        "sync-limit",
        "lock-delay",
        "clock",
        "server-version",
        "four-letter-words",
        "transport-security",
    ] {
        assert_status(&report, name, "pass");
    }
    let (acl, check) = status(&report, "namespace-acl");
    assert_eq!(acl, "warn");
    assert!(check["found"].as_str().unwrap().contains("not created yet"), "{check}");
    assert!(check["advice"].is_string(), "{check}");
    assert_eq!(status(&report, "connection").1["advice"], Value::Null);
    // The clock's node is gone, and the namespace was not made.
    let raw = raw(&zk).await;
    let left: Vec<String> = raw.list_children("/").await.unwrap();
    assert!(!left.iter().any(|n| n.starts_with("zklock")), "{left:?}");

    // A lock client without credentials makes the namespace open to anyone.
    let client = LockClient::builder(zk.clone()).connect().await.unwrap();
    client
        .mutex("orders")
        .unwrap()
        .acquire()
        .await
        .unwrap()
        .release()
        .await
        .unwrap();
    let (code, report) = doctor(&zk, &["--session-timeout", "4s", "--lock-delay", "5s"]);
    assert_eq!(code, 0, "{report:#}");
    let (acl, check) = status(&report, "namespace-acl");
    assert_eq!(acl, "warn");
    assert!(
        check["found"].as_str().unwrap().contains("world:anyone:cdrwa"),
        "{check}"
    );
    assert_status(&report, "lock-delay", "pass");

    // Restricted: only this host may change it, anyone may read.
    let acls = [
        zookeeper_client::Acl::new(
            zookeeper_client::Permission::ALL,
            zookeeper_client::AuthId::new("ip", "127.0.0.1"),
        ),
        zookeeper_client::Acl::new(zookeeper_client::Permission::READ, zookeeper_client::AuthId::anyone()),
    ];
    raw.set_acl("/zklock", &acls, None).await.unwrap();
    let (code, report) = doctor(&zk, &["--session-timeout", "4s"]);
    assert_eq!(code, 0, "{report:#}");
    assert_eq!(report["status"], "pass", "{report:#}");
    let (_, check) = status(&report, "namespace-acl");
    assert!(
        check["found"]
            .as_str()
            .unwrap()
            .contains("ip:127.0.0.1:cdrwa, world:anyone:r"),
        "{check}"
    );

    // 50 ms: the holder of a deleted node hears of it only after 100 ms and a round trip.
    let (code, report) = doctor(&zk, &["--session-timeout", "4s", "--lock-delay", "50ms"]);
    assert_eq!(code, 5, "{report:#}");
    assert_eq!(report["status"], "fail");
    assert_status(&report, "lock-delay", "fail");

    // The text form: a line per check, what to change under a warning, and the summary. The
    // default 30 s asked is capped at the server's 4 s: a warning.
    let out = zklock(&zk, &["doctor"]);
    assert_eq!(out.status.code(), Some(0));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.lines().any(|l| l.starts_with("pass  connection ")), "{text}");
    assert!(
        text.lines()
            .any(|l| l.starts_with("warn  session-timeout ") && l.contains("asked 30s")),
        "{text}"
    );
    assert!(text.contains("change: the servers capped the timeout"), "{text}");
    assert!(
        text.lines()
            .last()
            .unwrap()
            .starts_with("warn: 8 passed, 1 warned, 0 failed"),
        "{text}"
    );
    client.close().await;
}

/// A server whose sessions are capped (maxSessionTimeout 2 s) warns; one whose sessions last a
/// single tick (minSessionTimeout = maxSessionTimeout = tickTime) fails.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_capped_session_timeout_warns_and_one_under_two_ticks_fails() {
    let capped = ZkServer::builder()
        .config("maxSessionTimeout", "2000")
        .start()
        .expect("ZooKeeper");
    let (code, report) = doctor(&capped.connect_string(), &["--session-timeout", "4s"]);
    assert_eq!(code, 0, "{report:#}");
    let (got, check) = status(&report, "session-timeout");
    assert_eq!(got, "warn", "{check:#}");
    assert!(
        check["found"].as_str().unwrap().contains("granted 2s (asked 4s)"),
        "{check}"
    );
    drop(capped);

    let short = ZkServer::builder()
        .tick_time(Duration::from_secs(1))
        .config("minSessionTimeout", "1000")
        .config("maxSessionTimeout", "1000")
        .start()
        .expect("ZooKeeper");
    let (code, report) = doctor(&short.connect_string(), &["--session-timeout", "4s"]);
    assert_eq!(code, 5, "{report:#}");
    let (got, check) = status(&report, "session-timeout");
    assert_eq!(got, "fail", "{check:#}");
    assert!(
        check["advice"].as_str().unwrap().contains("minSessionTimeout"),
        "{check}"
    );
}

/// A member (a one-member quorum, so `conf` states its syncLimit) whose followers would keep
/// serving for 2 s: a warning against 4 s sessions, a failure against 2.4 s ones, where 2 s
/// plus loss_after (0.6 s) reaches the expiry.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sync_limit_near_the_session_timeout_warns_and_past_it_fails() {
    let ensemble = ZkEnsemble::builder(1)
        .config("standaloneEnabled", "false")
        .sync_limit(10)
        .start()
        .expect("ZooKeeper");
    let zk = ensemble.connect_string();
    let (code, report) = doctor(&zk, &["--session-timeout", "4s"]);
    assert_eq!(code, 0, "{report:#}");
    let (got, check) = status(&report, "sync-limit");
    assert_eq!(got, "warn", "{check:#}");
    assert!(
        check["found"].as_str().unwrap().contains("syncLimit × tickTime = 2s"),
        "{check}"
    );

    let (code, report) = doctor(&zk, &["--session-timeout", "2400ms"]);
    assert_eq!(code, 5, "{report:#}");
    assert_status(&report, "sync-limit", "fail");
    assert_status(&report, "session-timeout", "pass");
}

/// A server that answers only `ruok` and `srvr`: the four-letter-word check warns, and the
/// session timeout, which needs `conf`'s tickTime, is a warning that says it could not read it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn words_outside_the_whitelist_warn() {
    // The harness needs ruok and srvr to see the server up; conf is left out.
    let server = ZkServer::builder()
        .config("4lw.commands.whitelist", "ruok,srvr")
        .start()
        .expect("ZooKeeper");
    let (code, report) = doctor(&server.connect_string(), &["--session-timeout", "4s"]);
    assert_eq!(code, 0, "{report:#}");
    let (got, check) = status(&report, "four-letter-words");
    assert_eq!(got, "warn", "{check:#}");
    assert!(
        check["found"]
            .as_str()
            .unwrap()
            .contains("conf: not in 4lw.commands.whitelist"),
        "{check}"
    );
    let (got, check) = status(&report, "session-timeout");
    assert_eq!(got, "warn", "{check:#}");
    assert!(check["found"].as_str().unwrap().contains("could not read"), "{check}");
    assert_status(&report, "server-version", "pass");
    assert_status(&report, "sync-limit", "pass");
}

/// Over TLS the transport check passes; the words, sent in plain TCP to the TLS port, go
/// unanswered (a warning), and nothing fails. The same server's plain port (Netty's, as TLS
/// needs) answers them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_passes_the_transport_check() {
    let ca = TestCa::new("doctor CA").unwrap();
    let server = ZkServer::builder().tls(&ca).start().expect("ZooKeeper");
    let secure = server.secure_connect_string().unwrap();
    let ca_file = ca.cert_file().to_str().unwrap();
    let (code, report) = doctor(&secure, &["--tls-ca", ca_file, "--session-timeout", "4s"]);
    assert_eq!(code, 0, "{report:#}");
    let (got, check) = status(&report, "transport-security");
    assert_eq!(got, "pass", "{check:#}");
    assert!(check["found"].as_str().unwrap().contains("TLS"), "{check}");
    assert_status(&report, "four-letter-words", "warn");
    assert_status(&report, "connection", "pass");
    assert_status(&report, "clock", "pass");

    let (code, report) = doctor(&server.connect_string(), &["--session-timeout", "4s"]);
    assert_eq!(code, 0, "{report:#}");
    assert_status(&report, "four-letter-words", "pass");
    assert_status(&report, "server-version", "pass");
}

/// Nothing listens: the unreachable exit code, and the report of what could be checked.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreachable_ensemble_exits_with_the_unreachable_code() {
    let zk = zklock_testing::process::closed_address().to_string();
    let (code, report) = doctor(&zk, &[]);
    assert_eq!(code, 3, "{report:#}");
    assert_eq!(report["status"], "fail");
    assert_status(&report, "connection", "fail");
    assert_status(&report, "four-letter-words", "warn");
    assert_status(&report, "transport-security", "pass");
}
