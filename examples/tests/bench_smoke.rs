//! Smoke tests of the benchmark's zookeeper-client peer and its handoff scale curve (issue #32),
//! on a real ZooKeeper server of their own: the bench's own code for the recipe's uncontended
//! cycle, its contended loop and its per-key loop, and the handoff worker, at a tiny size. They check what the figures rest on, not the figures: each
//! cycle really releases (no lock node is left behind), no two holders overlap, and each
//! section answers with the fields the bench reads. (The seckill section's smoke test is in
//! `seckill_e2e.rs`, beside the instance processes it starts.)

// The bench's modules, compiled here as they are in the bench; the test uses part of them.
#[allow(dead_code)]
#[path = "../bench/scale.rs"]
mod scale;
#[allow(dead_code)]
#[path = "../bench/server.rs"]
mod server;
#[allow(dead_code)]
#[path = "../bench/zkclient_side.rs"]
mod zkclient_side;
#[allow(dead_code)]
#[path = "../bench/zklock_side.rs"]
mod zklock_side;

use std::time::Duration;

use zklock::testing::ZkServer;
use zklock::zk;

async fn server() -> ZkServer {
    tokio::task::spawn_blocking(ZkServer::start)
        .await
        .expect("join")
        .expect("ZooKeeper starts")
}

/// The children of `dir`, or none when it does not exist (a reaped container).
async fn children(view: &zk::Client, dir: &str) -> Vec<String> {
    match view.list_children(dir).await {
        Ok(children) => children,
        Err(zk::Error::NoNode) => Vec::new(),
        Err(e) => panic!("list {dir}: {e}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn zkclient_uncontended_cycles_release_every_node() {
    let zk = server().await;
    let bench = zkclient_side::Uncontended::new(&zk.connect_string())
        .await
        .expect("connect");
    let (latencies, _) = bench.run(50).await.expect("50 cycles");
    assert_eq!(latencies.len(), 50);
    let view = zkclient_side::client(&zk.connect_string()).await.expect("connect");
    let left = children(&view, "/bench-uncontended-zkclient").await;
    assert!(left.is_empty(), "lock nodes left behind: {left:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn zkclient_contended_tasks_never_overlap() {
    let zk = server().await;
    let client = zkclient_side::client(&zk.connect_string()).await.expect("connect");
    let start = zklock_side::epoch_ms();
    let run = zkclient_side::contended(&client, "/bench-zkclient/smoke", 4, start, start + 500)
        .await
        .expect("contended run");
    assert_eq!(run["overlaps"], 0, "two holders at once: {run}");
    assert!(run["acquisitions"].is_u64() && run["window_ms"] == 500, "{run}");
    let left = children(&client, "/bench-zkclient/smoke").await;
    assert!(left.is_empty(), "lock nodes left behind: {left:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn zkclient_per_key_run_reports_both_phases() {
    let zk = server().await;
    let phases = zklock_side::Phases::after(Duration::ZERO, Duration::from_millis(300));
    let run = zkclient_side::distinct_keys(&zk.connect_string(), 1, 4, 50, phases)
        .await
        .expect("per-key run");
    for phase in ["cold", "warm"] {
        assert!(run["acquisitions"][phase].is_u64(), "{phase}: {run}");
    }
    assert_eq!((run["threads"].as_u64(), run["keys"].as_u64()), (Some(4), Some(50)));
    let view = zkclient_side::client(&zk.connect_string()).await.expect("connect");
    for dir in children(&view, "/zkclient-distinct-1").await {
        let left = children(&view, &format!("/zkclient-distinct-1/{dir}")).await;
        assert!(left.is_empty(), "lock nodes left in {dir}: {left:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn handoff_worker_stamps_holds_that_never_overlap() {
    let zk = server().await;
    let start = zklock_side::epoch_ms();
    let run = scale::worker(&zk.connect_string(), "handoff-smoke", 4, start, start + 500)
        .await
        .expect("handoff worker");
    let holds: Vec<[u64; 2]> = run["holds"]
        .as_array()
        .expect("holds")
        .iter()
        .map(|h| [h[0].as_u64().expect("granted"), h[1].as_u64().expect("released")])
        .collect();
    let gaps = scale::handoffs(holds.clone()).expect("no grant before the previous release");
    assert_eq!(gaps.len(), holds.len().saturating_sub(1));
}

#[test]
fn handoffs_refuse_overlapping_holds_and_growth_names_the_trend() {
    assert!(
        scale::handoffs(vec![[10, 20], [15, 30]]).is_err(),
        "a grant inside another hold"
    );
    assert_eq!(scale::handoffs(vec![[30, 31], [10, 20]]), Ok(vec![0.01]));
    let point = |procs: u64, contenders: u64, p50: f64| serde_json::json!({"processes": procs, "contenders": contenders, "handoff_p50_us": p50, "handoff_p99_us": p50 * 2.0});
    let growth = scale::growth(&[
        point(1, 1, 100.0),
        point(1, 1000, 150.0),
        point(2, 10, 100.0),
        point(2, 1000, 5000.0),
    ]);
    assert_eq!(growth["1 processes"]["p50_grows"], "flat", "{growth}");
    assert_eq!(growth["2 processes"]["p50_grows"], "linear or steeper", "{growth}");
}
