//! Tests of the test support itself (`zklock_testing`): real servers and ensembles start,
//! fail and recover as asked, the fault proxy really cuts a client off, and no JVM outlives its
//! handle or the test process.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::Stdio;
use std::thread;
use std::time::{Duration, Instant};

use zklock_runtime::zk;
use zklock_testing::{FaultProxy, ProxyMode, TestingError, ZkEnsemble, ZkServer};

/// Runs a blocking call (starting, killing, restarting servers) from an async test.
fn blocking<T>(f: impl FnOnce() -> T) -> T {
    tokio::task::block_in_place(f)
}

async fn connect(connect_string: &str, session_timeout: Duration) -> zk::Client {
    zk::Client::connector()
        .with_session_timeout(session_timeout)
        .connect(connect_string)
        .await
        .unwrap_or_else(|e| panic!("connect to {connect_string}: {e}"))
}

fn persistent() -> zk::CreateOptions<'static> {
    zk::CreateMode::Persistent.with_acls(zk::Acls::anyone_all())
}

fn ephemeral() -> zk::CreateOptions<'static> {
    zk::CreateMode::Ephemeral.with_acls(zk::Acls::anyone_all())
}

/// Whether a process with this pid exists and runs a server of ours from `dir`.
fn jvm_alive(pid: u32, dir: &Path) -> bool {
    match std::fs::read(format!("/proc/{pid}/cmdline")) {
        Ok(cmdline) => String::from_utf8_lossy(&cmdline).contains(&*dir.to_string_lossy()),
        Err(_) => false,
    }
}

fn wait_until(within: Duration, mut cond: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + within;
    loop {
        if cond() {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Waits until the client reports `wanted`, or fails after `within`; returns the states seen.
async fn wait_for_state(
    watcher: &mut zk::StateWatcher,
    wanted: zk::SessionState,
    within: Duration,
) -> Vec<zk::SessionState> {
    let mut seen = vec![watcher.peek_state()];
    let deadline = tokio::time::Instant::now() + within;
    while *seen.last().unwrap() != wanted {
        match tokio::time::timeout_at(deadline, watcher.changed()).await {
            Ok(state) => seen.push(state),
            Err(_) => panic!("no {wanted:?} within {within:?}; states seen: {seen:?}"),
        }
        if seen.last().unwrap().is_terminated() && *seen.last().unwrap() != wanted {
            panic!(
                "session ended as {:?} while waiting for {wanted:?}",
                seen.last().unwrap()
            );
        }
    }
    seen
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn standalone_server_serves_survives_kill_restart_and_pause() {
    let server = blocking(ZkServer::start).expect("start a standalone server");
    assert_eq!(server.connect_string(), format!("127.0.0.1:{}", server.port()));
    assert_eq!(server.addr().port(), server.port());
    assert_eq!(server.four_letter_word("ruok").unwrap(), "imok");
    assert!(server.four_letter_word("srvr").unwrap().contains("Mode: standalone"));
    assert!(server
        .four_letter_word("mntr")
        .unwrap()
        .contains("zk_server_state\tstandalone"));
    assert_eq!(server.mode().as_deref(), Some("standalone"));
    assert!(matches!(
        server.four_letter_word("ruok!"),
        Err(TestingError::InvalidArgument(_))
    ));

    let client = connect(&server.connect_string(), Duration::from_secs(4)).await;
    client.create("/kept", b"across restarts", &persistent()).await.unwrap();
    drop(client);

    // A crash: the JVM is gone and the port answers nothing.
    let pid = server.pid().expect("running server has a pid");
    blocking(|| server.kill()).unwrap();
    assert!(!server.is_running());
    assert!(!jvm_alive(pid, server.dir()), "killed JVM {pid} still exists");
    assert!(server.four_letter_word("ruok").is_err());

    // Restart: same port, same data.
    let port = server.port();
    blocking(|| server.restart()).expect("restart");
    assert_eq!(server.port(), port);
    assert_ne!(server.pid(), Some(pid));
    let client = connect(&server.connect_string(), Duration::from_secs(4)).await;
    let (data, _) = client.get_data("/kept").await.unwrap();
    assert_eq!(data, b"across restarts");
    drop(client);

    // Paused: alive but silent; resumed: answers again.
    blocking(|| server.pause()).unwrap();
    assert!(server.is_running());
    assert!(server.four_letter_word("ruok").is_err(), "a SIGSTOPped server answered");
    blocking(|| server.resume()).unwrap();
    assert_eq!(server.four_letter_word("ruok").unwrap(), "imok");

    // Graceful stop.
    let pid = server.pid().unwrap();
    blocking(|| server.stop()).unwrap();
    assert!(!server.is_running());
    assert!(!jvm_alive(pid, server.dir()));
    assert!(matches!(server.pause(), Err(TestingError::NotRunning { .. })));
    assert!(
        server.log_tail(200).contains("ZooKeeperServer"),
        "log: {}",
        server.log_tail(20)
    );
}

#[test]
fn builder_settings_reach_the_server() {
    let server = ZkServer::builder()
        .tick_time(Duration::from_millis(100))
        .force_sync(false)
        .system_property("znode.container.checkIntervalMs", "100")
        .max_heap_mb(128)
        .start()
        .expect("start");
    let conf = server.four_letter_word("conf").unwrap();
    assert!(conf.contains("tickTime=100"), "conf: {conf}");
    // Session timeouts are clamped to 2..20 ticks.
    assert!(conf.contains("minSessionTimeout=200"), "conf: {conf}");
    assert!(conf.contains("maxSessionTimeout=2000"), "conf: {conf}");
    let cmdline = std::fs::read(format!("/proc/{}/cmdline", server.pid().unwrap())).unwrap();
    let args: Vec<String> = cmdline
        .split(|b| *b == 0)
        .map(|a| String::from_utf8_lossy(a).into_owned())
        .collect();
    for expected in [
        "-Dznode.container.checkIntervalMs=100",
        "-Dzookeeper.forceSync=no",
        "-Xmx128m",
    ] {
        assert!(args.iter().any(|a| a == expected), "{expected} missing from {args:?}");
    }
    // The configured check interval is what the server uses.
    assert!(
        wait_until(Duration::from_secs(10), || server
            .log_tail(500)
            .contains("Using checkIntervalMs=100 ")),
        "log: {}",
        server.log_tail(30)
    );
}

#[test]
fn a_server_that_cannot_start_reports_its_log() {
    let started = Instant::now();
    let error = ZkServer::builder()
        .config("tickTime", "not-a-number")
        .start()
        .expect_err("a broken config must fail");
    match &error {
        TestingError::Exited { log_tail, .. } => {
            assert!(
                log_tail.contains("not-a-number"),
                "log tail does not explain the failure: {log_tail}"
            )
        }
        other => panic!("expected Exited with the log tail, got {other:?}"),
    }
    assert!(
        started.elapsed() < Duration::from_secs(60),
        "the failure was only noticed at the timeout"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ensemble_elects_a_leader_survives_its_loss_and_a_restarted_member_rejoins() {
    let ensemble = blocking(|| ZkEnsemble::start(3)).expect("start a 3-node ensemble");
    assert_eq!(ensemble.len(), 3);
    assert_eq!(ensemble.connect_string().split(',').count(), 3);
    // Each mode query is one `srvr` with a short timeout; right after three JVMs started on a
    // small machine a member may answer late, so ask until every member has answered.
    let roles_settled = |modes: &[Option<String>]| {
        let count = |role: &str| modes.iter().filter(|m| m.as_deref() == Some(role)).count();
        count("leader") == 1 && count("follower") == 2
    };
    let settled = blocking(|| wait_until(Duration::from_secs(30), || roles_settled(&ensemble.modes())));
    assert!(settled, "modes: {:?}", ensemble.modes());
    let old_leader = blocking(|| ensemble.wait_for_quorum(Duration::from_secs(60))).expect("a leader");
    assert!(matches!(ensemble.member(3), Err(TestingError::InvalidArgument(_))));

    let client = connect(&ensemble.connect_string(), Duration::from_secs(4)).await;
    client.create("/before-failover", b"1", &persistent()).await.unwrap();
    drop(client);

    blocking(|| ensemble.kill(old_leader)).unwrap();
    let new_leader = blocking(|| ensemble.wait_for_quorum(Duration::from_secs(60))).expect("a new quorum");
    assert_ne!(new_leader, old_leader);

    // The two survivors still take writes and kept the old data.
    let client = connect(&ensemble.connect_string(), Duration::from_secs(4)).await;
    client
        .get_data("/before-failover")
        .await
        .expect("data written before the failover");
    client
        .create("/after-failover", b"2", &persistent())
        .await
        .expect("a write after the failover");
    drop(client);

    // The old leader comes back as a follower, syncs, and has the write it missed.
    blocking(|| ensemble.restart(old_leader)).expect("restart the old leader");
    let rejoined = blocking(|| {
        wait_until(Duration::from_secs(30), || {
            ensemble.member(old_leader).unwrap().mode().as_deref() == Some("follower")
        })
    });
    assert!(
        rejoined,
        "old leader's mode: {:?}",
        ensemble.member(old_leader).unwrap().mode()
    );
    let leader = blocking(|| ensemble.wait_for_quorum(Duration::from_secs(60))).expect("still a leader");
    let synced = blocking(|| {
        wait_until(Duration::from_secs(30), || {
            ensemble
                .member(leader)
                .unwrap()
                .four_letter_word("mntr")
                .is_ok_and(|m| m.contains("zk_synced_followers\t2"))
        })
    });
    assert!(
        synced,
        "mntr: {:?}",
        ensemble.member(leader).unwrap().four_letter_word("mntr")
    );
    let direct = connect(
        &ensemble.member(old_leader).unwrap().connect_string(),
        Duration::from_secs(4),
    )
    .await;
    direct.sync("/").await.unwrap();
    let (data, _) = direct
        .get_data("/after-failover")
        .await
        .expect("rejoined member has the missed write");
    assert_eq!(data, b"2");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn blackholed_client_session_expires() {
    let server = blocking(ZkServer::start).expect("start");
    let proxy = FaultProxy::start(server.addr()).expect("proxy");
    let client = connect(&proxy.connect_string(), Duration::from_secs(2)).await;
    client
        .create("/owned-by-partitioned-session", b"", &ephemeral())
        .await
        .unwrap();
    let observer = connect(&server.connect_string(), Duration::from_secs(4)).await;
    let mut states = client.state_watcher();
    assert_eq!(states.peek_state(), zk::SessionState::SyncConnected);

    proxy.blackhole();
    assert_eq!(proxy.mode(), ProxyMode::Blackhole);
    let seen = wait_for_state(&mut states, zk::SessionState::Expired, Duration::from_secs(30)).await;
    assert!(seen.contains(&zk::SessionState::Disconnected), "states: {seen:?}");

    // The server really ended the session: its ephemeral node is gone.
    let gone = async {
        loop {
            if observer
                .check_stat("/owned-by-partitioned-session")
                .await
                .unwrap()
                .is_none()
            {
                return;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    };
    tokio::time::timeout(Duration::from_secs(30), gone)
        .await
        .expect("server expired the session");
    assert!(client.get_data("/").await.is_err(), "an expired client still works");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_reconnects_to_its_session_when_the_partition_heals_in_time() {
    // A 500 ms tick allows sessions up to 10 s: room to heal long before expiry.
    let server = blocking(|| ZkServer::builder().tick_time(Duration::from_millis(500)).start()).expect("start");
    let proxy = FaultProxy::start(server.addr()).expect("proxy");
    let client = connect(&proxy.connect_string(), Duration::from_secs(10)).await;
    let session_id = client.session_id();
    client.create("/still-mine", b"", &ephemeral()).await.unwrap();
    let mut states = client.state_watcher();
    let accepted_before = proxy.accepted_count();

    proxy.blackhole();
    wait_for_state(&mut states, zk::SessionState::Disconnected, Duration::from_secs(30)).await;
    proxy.pass();
    wait_for_state(&mut states, zk::SessionState::SyncConnected, Duration::from_secs(30)).await;
    assert_eq!(client.session_id(), session_id, "reconnected with a different session");
    assert!(
        proxy.accepted_count() > accepted_before,
        "the client did not open a new connection"
    );
    client
        .check_stat("/still-mine")
        .await
        .unwrap()
        .expect("ephemeral node of the same session");

    // reset_all: the connection dies with a reset, the client reconnects to the same session.
    // The state watcher keeps only the latest state, and the reconnect takes one loopback round
    // trip, so `Disconnected` may never be seen; a new connection accepted by the proxy is the
    // observable proof that the old one died, and `SyncConnected` after it is the reconnect.
    let accepted_before_reset = proxy.accepted_count();
    blocking(|| proxy.reset_all());
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    while !(proxy.accepted_count() > accepted_before_reset && client.state() == zk::SessionState::SyncConnected) {
        assert!(
            tokio::time::Instant::now() < deadline,
            "no reconnect after reset_all: {} connections accepted (before: {accepted_before_reset}), state {:?}",
            proxy.accepted_count(),
            client.state()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(client.session_id(), session_id);
    client
        .check_stat("/still-mine")
        .await
        .unwrap()
        .expect("ephemeral node survives a reset");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn proxy_latency_delays_every_round_trip() {
    let server = blocking(ZkServer::start).expect("start");
    let proxy = FaultProxy::start(server.addr()).expect("proxy");
    let client = connect(&proxy.connect_string(), Duration::from_secs(4)).await;
    let latency = Duration::from_millis(300);
    proxy.set_latency(latency);
    assert_eq!(proxy.latency(), latency);
    for _ in 0..3 {
        let started = Instant::now();
        client.check_stat("/").await.unwrap();
        // The request and the response are each held back by the latency.
        assert!(
            started.elapsed() >= 2 * latency,
            "round trip took only {:?}",
            started.elapsed()
        );
    }
    proxy.set_latency(Duration::ZERO);
    client.check_stat("/").await.unwrap();
    assert_eq!(proxy.connection_count(), 1);
    drop(proxy);
    // Dropping the proxy closed the client's connection.
    let mut states = client.state_watcher();
    wait_for_state(&mut states, zk::SessionState::Disconnected, Duration::from_secs(30)).await;
}

#[test]
fn dropped_servers_leave_no_jvm_behind_even_on_panic() {
    let server = ZkServer::start().expect("start");
    let ensemble = ZkEnsemble::start(3).expect("start ensemble");
    // An ensemble built without `partitionable()` cannot isolate a member, and says why.
    assert!(matches!(ensemble.isolate(0), Err(TestingError::InvalidArgument(_))));
    let mut jvms = vec![(server.pid().unwrap(), server.dir().to_path_buf())];
    for member in ensemble.members() {
        jvms.push((member.pid().unwrap(), member.dir().to_path_buf()));
    }
    drop(server);
    drop(ensemble);
    for (pid, dir) in &jvms {
        assert!(!jvm_alive(*pid, dir), "JVM {pid} survived its handle");
        assert!(!dir.exists(), "{} was not removed", dir.display());
    }

    // A test that panics while holding a server.
    let (tx, rx) = std::sync::mpsc::channel();
    let panicked = std::thread::spawn(move || {
        let server = ZkServer::start().expect("start");
        tx.send((server.pid().unwrap(), server.dir().to_path_buf())).unwrap();
        panic!("test failure while a server runs");
    })
    .join();
    assert!(panicked.is_err());
    let (pid, dir) = rx.recv().unwrap();
    assert!(!jvm_alive(pid, &dir), "JVM {pid} survived a panicking test");
}

const CHILD_ENV: &str = "ZKLOCK_TESTING_CHILD";

/// Not a test on its own: the child process of `server_dies_with_a_killed_test_process`.
#[test]
#[ignore = "helper process for server_dies_with_a_killed_test_process"]
fn child_process_holding_a_server() {
    // Run alone (`--include-ignored`), it fails instead of passing without doing anything.
    assert!(
        std::env::var_os(CHILD_ENV).is_some(),
        "the helper process of server_dies_with_a_killed_test_process: run that test, not this"
    );
    let server = ZkServer::start().expect("start");
    // libtest may have printed "test ... " without a newline: start on a fresh line.
    println!("\nSERVER {} {}", server.pid().unwrap(), server.dir().display());
    std::thread::sleep(Duration::from_secs(120));
}

/// Kills the child test process if the parent test fails early.
struct KillOnDrop(std::process::Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn server_dies_with_a_killed_test_process() {
    let mut child = KillOnDrop(
        zklock_testing::process::rerun_test("child_process_holding_a_server")
            .expect("the test binary's path")
            .env(CHILD_ENV, "1")
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn the child test process"),
    );
    let stdout = BufReader::new(child.0.stdout.take().unwrap());
    let line = stdout
        .lines()
        .map_while(Result::ok)
        .find(|l| l.starts_with("SERVER "))
        .expect("child reports its server");
    let mut parts = line.split_whitespace().skip(1);
    let pid: u32 = parts.next().unwrap().parse().unwrap();
    let dir = parts.next().unwrap().to_string();
    assert!(jvm_alive(pid, Path::new(&dir)));

    // SIGKILL: no destructor runs in the child.
    child.0.kill().unwrap();
    child.0.wait().unwrap();
    let died = wait_until(Duration::from_secs(20), || !jvm_alive(pid, Path::new(&dir)));
    // Its data directory is left behind (no destructor ran); clean it up.
    let _ = std::fs::remove_dir_all(&dir);
    assert!(died, "JVM {pid} outlived its SIGKILLed test process");
}

/// `isolate` is a real partition between members: the isolated member stops serving (it loses
/// its leader), the others keep a quorum and serve writes, and after `heal` it rejoins.
#[test]
fn isolated_member_leaves_the_quorum_and_rejoins_after_heal() {
    let ensemble = ZkEnsemble::builder(3).partitionable().start().expect("start ensemble");
    let leader = ensemble.wait_for_quorum(Duration::from_secs(60)).unwrap();
    for victim in [leader, (leader + 1) % 3] {
        ensemble.isolate(victim).unwrap();
        assert!(ensemble.is_isolated(victim));
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let modes = ensemble.modes();
            let leader_now = modes.iter().position(|m| m.as_deref() == Some("leader"));
            let serving = modes
                .iter()
                .flatten()
                .filter(|m| *m == "leader" || *m == "follower")
                .count();
            if modes[victim].is_none() && serving == 2 && leader_now.is_some_and(|l| l != victim) {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "member {victim} still serving or no quorum without it: {modes:?}; logs in {:?}",
                ensemble
                    .members()
                    .iter()
                    .map(|m| m.dir().to_path_buf())
                    .collect::<Vec<_>>()
            );
            thread::sleep(Duration::from_millis(100));
        }
        ensemble.heal(victim).unwrap();
        assert!(!ensemble.is_isolated(victim));
        let deadline = Instant::now() + Duration::from_secs(60);
        while ensemble.modes().iter().flatten().count() < 3 {
            assert!(
                Instant::now() < deadline,
                "member {victim} did not rejoin: {:?}",
                ensemble.modes()
            );
            thread::sleep(Duration::from_millis(100));
        }
    }
}
