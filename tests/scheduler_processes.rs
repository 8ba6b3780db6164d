//! A singleton job in separate processes: three copies of this test binary act as cluster
//! nodes (the `node_process` entry point below), each printing the ticks it runs. Killing the
//! node that runs the job moves the job to another one, and no tick ever runs twice.
#![cfg(feature = "scheduler")]

mod support;

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use zklock::scheduler::tokio_cron_scheduler::JobScheduler;
use zklock::scheduler::{JobSchedulerExt, SingletonJob};
use zklock::LockClient;

const CONNECT_VAR: &str = "ZKLOCK_SCHEDULER_NODE_CONNECT";
const NODE_VAR: &str = "ZKLOCK_SCHEDULER_NODE_ID";

/// The child side: one cluster node running the job until killed, or until its parent goes
/// away (stdin closes). Not a test on its own, hence ignored; the parent runs it explicitly.
#[test]
#[ignore = "entry point of the child processes of `killing_the_running_process_moves_the_job`"]
fn node_process() {
    let (Ok(connect), Ok(node)) = (std::env::var(CONNECT_VAR), std::env::var(NODE_VAR)) else {
        panic!("run by killing_the_running_process_moves_the_job with {CONNECT_VAR} and {NODE_VAR} set");
    };
    std::thread::spawn(|| {
        let _ = std::io::copy(&mut std::io::stdin(), &mut std::io::sink());
        std::process::exit(0);
    });
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async move {
        let client = LockClient::builder(connect)
            .session_timeout(Duration::from_secs(2))
            .connect()
            .await
            .expect("connect");
        let job = SingletonJob::new_async("* * * * * *", &client, "processes", move |run| {
            let node = node.clone();
            async move {
                let tick = run.tick().duration_since(std::time::UNIX_EPOCH).unwrap().as_millis();
                {
                    let mut out = std::io::stdout().lock();
                    let _ = writeln!(out, "RUN {tick} {node}");
                    let _ = out.flush();
                }
                tokio::time::sleep(Duration::from_millis(300)).await;
            }
        })
        .expect("job");
        let scheduler = JobScheduler::new().await.expect("scheduler");
        scheduler.add_singleton(job).await.expect("add");
        scheduler.start().await.expect("start");
        std::future::pending::<()>().await;
    });
}

/// A child process that is killed when dropped. Dropping it also waits until every line the
/// child printed before it died has been read, so whatever is seen afterwards came later.
struct NodeProcess {
    child: Child,
    reader: Option<std::thread::JoinHandle<()>>,
}

impl Drop for NodeProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        if let Some(reader) = self.reader.take() {
            let _ = reader.join();
        }
    }
}

#[derive(Debug, Clone)]
struct Seen {
    node: usize,
    tick: u128,
    at: Instant,
}

fn spawn_node(connect: &str, node: usize, seen: &Arc<Mutex<Vec<Seen>>>) -> NodeProcess {
    let mut child = zklock_testing::process::rerun_test("node_process")
        .expect("the test binary's path")
        .env(CONNECT_VAR, connect)
        .env(NODE_VAR, node.to_string())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn node process");
    let stdout = child.stdout.take().unwrap();
    let seen = seen.clone();
    let reader = std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            // The child's first report shares its line with the test harness's own
            // `test node_process ... ` prefix (printed without a newline), so look for the
            // report anywhere in the line.
            let Some(at) = line.find("RUN ") else {
                continue;
            };
            let mut words = line[at..].split_whitespace();
            words.next();
            let tick = words.next().and_then(|t| t.parse().ok());
            let from = words.next().and_then(|n| n.parse().ok());
            if let (Some(tick), Some(node)) = (tick, from) {
                seen.lock().unwrap().push(Seen {
                    node,
                    tick,
                    at: Instant::now(),
                });
            }
        }
    });
    NodeProcess {
        child,
        reader: Some(reader),
    }
}

fn wait_until(within: Duration, mut cond: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + within;
    while Instant::now() < deadline {
        if cond() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    cond()
}

#[test]
fn killing_the_running_process_moves_the_job() {
    let server = support::server();
    let seen: Arc<Mutex<Vec<Seen>>> = Arc::default();
    let mut nodes: Vec<Option<NodeProcess>> = (0..3)
        .map(|i| Some(spawn_node(&server.connect_string(), i, &seen)))
        .collect();

    assert!(
        wait_until(Duration::from_secs(60), || seen.lock().unwrap().len() >= 5),
        "the processes ran too few ticks: {:?}",
        seen.lock().unwrap()
    );
    let before = seen.lock().unwrap().clone();
    let mut ticks: Vec<u128> = before.iter().map(|s| s.tick).collect();
    ticks.sort_unstable();
    for pair in ticks.windows(2) {
        assert_eq!(pair[1] - pair[0], 1000, "each tick ran exactly once: {before:?}");
    }

    let victim = before.iter().max_by_key(|s| s.at).unwrap().node;
    drop(nodes[victim].take()); // SIGKILL, then read what it printed before dying
    let killed_at = Instant::now();

    let moved = wait_until(Duration::from_secs(40), || {
        seen.lock()
            .unwrap()
            .iter()
            .filter(|s| s.at > killed_at && s.node != victim)
            .count()
            >= 2
    });
    let all = seen.lock().unwrap().clone();
    assert!(moved, "the job moved to a surviving process: {all:?}");
    drop(nodes);

    let mut ticks: Vec<u128> = all.iter().map(|s| s.tick).collect();
    ticks.sort_unstable();
    let count = ticks.len();
    ticks.dedup();
    assert_eq!(ticks.len(), count, "no tick ran twice: {all:?}");
    assert!(
        all.iter().all(|s| s.node != victim || s.at <= killed_at),
        "the killed process ran nothing more"
    );
}
