//! Smoke tests of the benchmark's zookeeper-client peer and its scale curves (issue #32), on a
//! real ZooKeeper server of their own: the bench's own code for the recipe's uncontended cycle,
//! its contended loop and its per-key loop, and the handoff, keys and sessions points with
//! their worker processes, at a tiny size. They check what the figures rest on, not the
//! figures: each cycle really releases (no lock node is left behind), no two holders overlap,
//! the sessions a point says it held were open on the server, and each section answers with
//! the fields the bench reads. (The seckill section's smoke test is in `seckill_e2e.rs`,
//! beside the instance processes it starts.)

// The bench's modules, compiled here as they are in the bench; the test uses part of them.
#[allow(dead_code)]
#[path = "../bench/chart.rs"]
mod chart;
#[allow(dead_code)]
#[path = "../bench/scale/mod.rs"]
mod scale;
#[allow(dead_code)]
#[path = "../bench/server.rs"]
mod server;
#[allow(dead_code, unused_imports)]
#[path = "../bench/stats.rs"]
mod stats;
#[allow(dead_code)]
#[path = "../bench/workers.rs"]
mod workers;
#[allow(dead_code)]
#[path = "../bench/zkclient_side.rs"]
mod zkclient_side;
#[allow(dead_code)]
#[path = "../bench/zklock_side.rs"]
mod zklock_side;

use std::process::Command;
use std::time::Duration;

use zklock::testing::ZkServer;
use zklock::zk;

/// Where a worker process (re-running this binary) finds its arguments.
const WORKER_ARGS_ENV: &str = "BENCH_SMOKE_WORKER_ARGS";

/// The smoke tests' launch of a bench worker: this test binary again, into
/// [`bench_worker_process`], with the worker's arguments in the environment.
fn relaunch(args: &[String]) -> std::io::Result<Command> {
    let mut command = zklock::testing::process::rerun_test("bench_worker_process")?;
    command.env(WORKER_ARGS_ENV, serde_json::to_string(args).expect("arguments as JSON"));
    Ok(command)
}

/// Not a test: the body of a bench worker process started by the tests below, dispatched on
/// its subcommand as the bench's own `main` does. Run by hand it finds no arguments and fails.
#[test]
#[ignore = "a bench worker process started by the smoke tests"]
fn bench_worker_process() {
    let raw = std::env::var(WORKER_ARGS_ENV)
        .unwrap_or_else(|_| panic!("a bench worker, started without {WORKER_ARGS_ENV}: run the smoke tests, not this"));
    let args: Vec<String> = serde_json::from_str(&raw).expect("worker arguments");
    let number = |i: usize| args[i].parse::<usize>().expect("a number");
    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    runtime.block_on(async {
        match args[0].as_str() {
            "keys" => {
                let phase = Duration::from_millis(number(4) as u64);
                let answer = scale::keys::worker(&args[1], number(2), number(3), phase)
                    .await
                    .expect("keys worker");
                println!("{answer}");
            }
            "sessions" => scale::sessions::worker(&args[1], number(2), &args[3])
                .await
                .expect("sessions worker"),
            other => panic!("no such worker: {other}"),
        }
    });
}

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
async fn zklock_contended_tasks_with_sessions_on_the_callers_runtime_never_overlap() {
    let zk = server().await;
    let client = zklock_side::client_with(&zk.connect_string(), zklock_side::Sessions::CallerRuntime)
        .await
        .expect("connect");
    let start = zklock_side::epoch_ms();
    let run = zklock_side::contended(&client, "bench-smoke-runtime", 4, start, start + 500)
        .await
        .expect("contended run");
    assert_eq!(run["overlaps"], 0, "two holders at once: {run}");
    assert!(run["acquisitions"].as_u64().is_some_and(|n| n > 0), "{run}");
    // The lock's directory, as a grant names it: it holds only that grant's node.
    let guard = client
        .mutex("bench-smoke-runtime")
        .expect("name")
        .acquire()
        .await
        .expect("acquire");
    let (dir, node) = guard.node_path().rsplit_once('/').expect("a node path");
    let (dir, node) = (dir.to_owned(), node.to_owned());
    let view = zkclient_side::client(&zk.connect_string()).await.expect("connect");
    assert_eq!(
        children(&view, &dir).await,
        vec![node],
        "lock nodes left behind in {dir}"
    );
    guard.release().await.expect("release");
    client.close().await;
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
    let run = scale::handoff::worker(&zk.connect_string(), "handoff-smoke", 4, start, start + 500)
        .await
        .expect("handoff worker");
    let holds: Vec<[u64; 2]> = run["holds"]
        .as_array()
        .expect("holds")
        .iter()
        .map(|h| [h[0].as_u64().expect("granted"), h[1].as_u64().expect("released")])
        .collect();
    let gaps = scale::handoff::handoffs(holds.clone()).expect("no grant before the previous release");
    assert_eq!(gaps.len(), holds.len().saturating_sub(1));
}

#[test]
fn handoffs_refuse_overlapping_holds_and_growth_names_the_trend() {
    assert!(
        scale::handoff::handoffs(vec![[10, 20], [15, 30]]).is_err(),
        "a grant inside another hold"
    );
    assert_eq!(scale::handoff::handoffs(vec![[30, 31], [10, 20]]), Ok(vec![0.01]));
    let point = |procs: u64, contenders: u64, p50: f64| serde_json::json!({"processes": procs, "contenders": contenders, "handoff_p50_us": p50, "handoff_p99_us": p50 * 2.0});
    let growth = scale::handoff::growth(&[
        point(1, 1, 100.0),
        point(1, 1000, 150.0),
        point(2, 10, 100.0),
        point(2, 1000, 5000.0),
    ]);
    assert_eq!(growth["1 processes"]["p50_grows"], "flat", "{growth}");
    assert_eq!(growth["2 processes"]["p50_grows"], "linear or steeper", "{growth}");
}

#[test]
fn shape_tells_flat_logarithmic_and_linear_apart() {
    let curve =
        |f: &dyn Fn(f64) -> f64| -> Vec<(f64, f64)> { [1.0, 10.0, 100.0, 1000.0].iter().map(|&x| (x, f(x))).collect() };
    assert_eq!(scale::shape(&curve(&|x| 100.0 + x / 100.0)), "flat");
    let hump = [(1.0, 10.0), (10.0, 25.0), (100.0, 12.0)];
    assert_eq!(scale::shape(&hump), "flat", "bounded: back under 2 x at the end");
    assert_eq!(scale::shape(&curve(&|x| 10.0 + 5.0 * x.ln())), "logarithmic");
    assert_eq!(scale::shape(&curve(&|x| 10.0 + 2.0 * x)), "linear");
    assert_eq!(scale::shape(&curve(&|x| 1000.0 / x)), "falls");
    assert_eq!(
        scale::shape(&[(1.0, 0.0), (10.0, 5.0)]),
        "unknown",
        "no base to grow from"
    );
    assert_eq!(
        scale::shape(&[(1.0, 1.0), (1000.0, 900.0)]),
        "linear or steeper",
        "two points"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keys_point_counts_both_phases_and_leaves_no_lock_node() {
    let zk = server().await;
    // A phase counts the cycles completed inside it; on a machine so loaded that a phase of
    // 300 ms completes none, the point is taken again with longer phases (in the same
    // namespace: what is checked here is the counting, not that the directories are new).
    let mut point = serde_json::Value::Null;
    for ms in [300, 1_200, 4_800] {
        point = scale::keys::point(&relaunch, &zk.connect_string(), 40, 4, Duration::from_millis(ms))
            .await
            .expect("keys point");
        if ["cold", "warm"]
            .iter()
            .all(|p| point["acquisitions"][*p].as_u64() > Some(0))
        {
            break;
        }
    }
    for phase in ["cold", "warm"] {
        assert!(
            point[format!("{phase}_acquisitions_per_sec")].as_f64() > Some(0.0),
            "{phase}: {point}"
        );
    }
    let touched = point["keys_touched"].as_u64().expect("keys touched");
    assert!((1..=40).contains(&touched), "{point}");
    for key in ["rss_before_mb", "rss_after_mb", "rss_peak_mb", "rss_growth_mb"] {
        assert!(point[key].is_number(), "{key}: {point}");
    }
    // Too few keys to divide the growth by.
    assert!(point["rss_growth_bytes_per_key_touched"].is_null(), "{point}");
    let view = zkclient_side::client(&zk.connect_string()).await.expect("connect");
    for dir in children(&view, "/zklock-keys-40").await {
        let left = children(&view, &format!("/zklock-keys-40/{dir}")).await;
        assert!(left.is_empty(), "lock nodes left in {dir}: {left:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sessions_point_holds_its_sessions_open_while_it_measures_then_closes_them() {
    let settings = server::Settings {
        tick_time_ms: 200,
        force_sync: false,
    };
    let bench_server = tokio::task::spawn_blocking(move || server::Server::start(&settings))
        .await
        .expect("join")
        .expect("the bench's server starts");
    let point = scale::sessions::point(&relaunch, &bench_server, 12, 3, Duration::from_millis(300), 20)
        .await
        .expect("sessions point");
    assert_eq!(point["processes"], 3, "{point}");
    // The 12 sessions and the probe's were open when the server was asked; each of the 12
    // held its lock (an ephemeral node).
    assert!(point["server_connections"].as_f64() >= Some(13.0), "{point}");
    assert!(point["server_ephemerals"].as_f64() >= Some(12.0), "{point}");
    for key in [
        "probe_p50_us",
        "probe_p99_us",
        "server_heap_used_mb",
        "server_rss_mb",
        "server_idle_requests_per_sec",
    ] {
        assert!(point[key].as_f64() > Some(0.0), "{key}: {point}");
    }
    // Once the point is done its workers have closed their sessions: their nodes are gone (the
    // emptied directories may stay until the server reaps them).
    let view = zkclient_side::client(&bench_server.connect).await.expect("connect");
    let dirs: Vec<String> = children(&view, "/zklock")
        .await
        .into_iter()
        .filter(|dir| dir.starts_with("bench-sessions"))
        .collect();
    for dir in dirs {
        let left = children(&view, &format!("/zklock/{dir}")).await;
        assert!(left.is_empty(), "a held lock outlived its worker in {dir}: {left:?}");
    }
    let growth = scale::sessions::growth(&[point.clone(), point]);
    assert_eq!(
        growth["server_heap_kib_per_session"],
        serde_json::Value::Null,
        "no sessions added"
    );
}
