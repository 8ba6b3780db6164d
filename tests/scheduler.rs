//! Singleton cron jobs across three scheduler instances, each with its own ZooKeeper session,
//! against a real server: every tick once (also with a skewed clock), no overlap under the skip
//! policy, and failover when the node running the job dies.
#![cfg(feature = "scheduler")]

mod support;

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use zklock::scheduler::tokio_cron_scheduler::JobScheduler;
use zklock::scheduler::{Clock, JobSchedulerExt, JobStats, OffsetClock, Policy, SingletonJob, SystemClock};
use zklock::LockClient;
use zklock::OnLost;
use zklock_testing::FaultProxy;

const EVERY_SECOND: &str = "* * * * * *";

/// The longest session the test server grants (20 ticks of 200 ms): the longer the session,
/// the longer a stall of this busy machine can be before a node reports its lock lost.
const SESSION: Duration = Duration::from_secs(4);

/// Waits until no fire of these jobs is still under way: a scheduler that was shut down lets
/// fires already started finish, and they may still count or log a run.
async fn settle(stats: &[JobStats]) {
    let settled = support::eventually(Duration::from_secs(30), || async {
        stats.iter().all(|s| s.fires_in_flight() == 0)
    })
    .await;
    assert!(settled, "fires still under way after shutdown: {stats:?}");
}

/// One run as the job itself saw it.
#[derive(Debug, Clone)]
struct Run {
    node: usize,
    /// The job name the run was given.
    job: String,
    tick: SystemTime,
    start: Instant,
    end: Option<Instant>,
    /// When the run's body was dropped before its end (aborted on loss).
    aborted: Option<Instant>,
}

/// Marks the run at `at` aborted if the body is dropped before it is disarmed.
struct AbortMark {
    log: Log,
    at: usize,
    armed: bool,
}

impl Drop for AbortMark {
    fn drop(&mut self) {
        if self.armed {
            if let Ok(mut log) = self.log.lock() {
                log[self.at].aborted = Some(Instant::now());
            }
        }
    }
}

type Log = Arc<Mutex<Vec<Run>>>;

/// One scheduler instance with its own lock client.
struct Node {
    scheduler: JobScheduler,
    stats: JobStats,
}

impl Node {
    async fn start(
        connect: &str,
        index: usize,
        job: &str,
        policy: Policy,
        clock: impl Clock,
        run_for: Duration,
        log: &Log,
    ) -> Node {
        let client = support::client_with(connect, SESSION).await;
        Node::start_with(client, index, job, policy, clock, run_for, None, log).await
    }

    #[allow(clippy::too_many_arguments)]
    async fn start_with(
        client: LockClient,
        index: usize,
        job: &str,
        policy: Policy,
        clock: impl Clock,
        run_for: Duration,
        lock_wait: Option<Duration>,
        log: &Log,
    ) -> Node {
        let log = log.clone();
        let job = SingletonJob::new_async(EVERY_SECOND, &client, job, move |run| {
            let log = log.clone();
            async move {
                let at = {
                    let mut log = log.lock().unwrap();
                    log.push(Run {
                        node: index,
                        job: run.job().to_owned(),
                        tick: run.tick(),
                        start: Instant::now(),
                        end: None,
                        aborted: None,
                    });
                    log.len() - 1
                };
                let mut mark = AbortMark {
                    log: log.clone(),
                    at,
                    armed: true,
                };
                tokio::time::sleep(run_for).await;
                mark.armed = false;
                log.lock().unwrap()[at].end = Some(Instant::now());
            }
        })
        .expect("valid job")
        .policy(policy)
        .clock(clock);
        let job = match lock_wait {
            Some(wait) => job.lock_wait(wait),
            None => job,
        };
        let scheduler = JobScheduler::new().await.expect("scheduler");
        let (_, stats) = scheduler.add_singleton(job).await.expect("add job");
        scheduler.start().await.expect("start scheduler");
        Node { scheduler, stats }
    }

    async fn stop(mut self) -> JobStats {
        self.scheduler.shutdown().await.expect("shutdown");
        self.stats
    }
}

/// Waits until the log holds `count` runs, or panics after `within`.
async fn wait_for_runs(log: &Log, count: usize, within: Duration) {
    let reached = support::eventually(within, || async { log.lock().unwrap().len() >= count }).await;
    assert!(reached, "only {} runs within {within:?}", log.lock().unwrap().len());
}

fn millis(t: SystemTime) -> u128 {
    t.duration_since(SystemTime::UNIX_EPOCH).unwrap().as_millis()
}

/// Every tick between the first and the last run ran exactly once.
fn assert_each_tick_once(runs: &[Run]) {
    let mut ticks: Vec<u128> = runs.iter().map(|r| millis(r.tick)).collect();
    ticks.sort_unstable();
    for pair in ticks.windows(2) {
        assert_ne!(pair[0], pair[1], "tick {} ran twice: {runs:?}", pair[0]);
        assert_eq!(
            pair[1] - pair[0],
            1000,
            "ticks between {} and {} never ran: {runs:?}",
            pair[0],
            pair[1]
        );
    }
}

async fn once_per_tick_with(skewed: impl Clock, label: &str) {
    let server = support::server();
    let log: Log = Arc::default();
    let job = format!("report-{label}");
    let short = Duration::from_millis(50);
    // The skewed node starts first, so its scheduler tends to fire first in each second: with
    // its clock ahead it leads and runs ticks early; with its clock behind it fires first for a
    // tick the others ran a second ago.
    let c = Node::start(
        &server.connect_string(),
        2,
        &job,
        Policy::OncePerTick,
        skewed,
        short,
        &log,
    )
    .await;
    let a = Node::start(
        &server.connect_string(),
        0,
        &job,
        Policy::OncePerTick,
        SystemClock,
        short,
        &log,
    )
    .await;
    let b = Node::start(
        &server.connect_string(),
        1,
        &job,
        Policy::OncePerTick,
        SystemClock,
        short,
        &log,
    )
    .await;
    wait_for_runs(&log, 8, Duration::from_secs(40)).await;
    let stats = [a.stop().await, b.stop().await, c.stop().await];
    settle(&stats).await;
    let runs = log.lock().unwrap().clone();
    assert!(runs.len() >= 8);
    assert_each_tick_once(&runs);
    let total: u64 = stats.iter().map(|s| s.runs()).sum();
    assert_eq!(total as usize, runs.len(), "the counters agree with the runs seen");
    let skewed = &stats[2];
    assert!(
        skewed.runs() + skewed.skips() >= 4,
        "the skewed node took part: {:?}",
        skewed.snapshot()
    );
    assert!(stats.iter().all(|s| s.failures() == 0 && s.lost() == 0), "{stats:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn once_per_tick_runs_every_tick_exactly_once_across_three_nodes() {
    once_per_tick_with(SystemClock, "plain").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn once_per_tick_holds_with_one_clock_ahead_by_most_of_the_period() {
    once_per_tick_with(OffsetClock::ahead(Duration::from_millis(900)), "ahead").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn once_per_tick_holds_with_one_clock_behind_by_most_of_the_period() {
    once_per_tick_with(OffsetClock::behind(Duration::from_millis(900)), "behind").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_node_clock_far_ahead_of_zookeeper_is_measured_against_the_commit_time() {
    let server = support::server();
    let log: Log = Arc::default();
    let ahead = Duration::from_secs(3);
    let node = Node::start(
        &server.connect_string(),
        0,
        "skewed-alone",
        Policy::OncePerTick,
        OffsetClock::ahead(ahead),
        Duration::from_millis(10),
        &log,
    )
    .await;
    wait_for_runs(&log, 1, Duration::from_secs(40)).await;
    let stats = node.stop().await;
    settle(std::slice::from_ref(&stats)).await;
    // The clock is read after the claim's commit, so the skew seen is at least the offset.
    let skew = stats.clock_skew_ms().expect("a claimed tick measures the skew");
    assert!(
        skew >= ahead.as_millis() as i64,
        "skew {skew} ms for a clock {ahead:?} ahead"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn ticks_whose_fires_found_the_lock_busy_run_late_once_it_frees() {
    let server = support::server();
    let log: Log = Arc::default();
    let job = "held";
    // Fires give up on the lock quickly, so every fire during the hold below times out.
    let wait = Some(Duration::from_millis(200));
    let mut nodes = Vec::new();
    for i in 0..2 {
        let client = support::client_with(&server.connect_string(), SESSION).await;
        let node = Node::start_with(
            client,
            i,
            job,
            Policy::OncePerTick,
            SystemClock,
            Duration::from_millis(50),
            wait,
            &log,
        )
        .await;
        nodes.push(node);
    }
    wait_for_runs(&log, 2, Duration::from_secs(40)).await;

    // Someone else (a Curator peer, an operator's tool) holds the job's lock for a few ticks.
    let holder = support::client(&server.connect_string()).await;
    let guard = holder.mutex(job).unwrap().acquire().await.expect("hold the job's lock");
    let held_from = log.lock().unwrap().len();
    // Held until fires on the nodes have found it busy and given up twice.
    let skipped = || nodes.iter().map(|n| n.stats.skips()).sum::<u64>();
    let skips_before = skipped();
    let busy_seen = support::eventually(Duration::from_secs(40), || {
        let now = skipped();
        async move { now >= skips_before + 2 }
    })
    .await;
    assert!(busy_seen, "no fire found the lock busy");
    let during = log.lock().unwrap().len() - held_from;
    guard.release().await.expect("release");
    let released_at = Instant::now();

    // The ticks of the hold run late, then the schedule goes on.
    wait_for_runs(&log, held_from + 6, Duration::from_secs(40)).await;
    let mut stats = Vec::new();
    for node in nodes {
        stats.push(node.stop().await);
    }
    settle(&stats).await;
    let runs = log.lock().unwrap().clone();
    assert_eq!(during, 0, "nothing ran while the lock was held elsewhere: {runs:?}");
    let skips: u64 = stats.iter().map(|s| s.skips()).sum();
    assert!(skips >= 2, "fires during the hold timed out on the lock: {stats:?}");
    assert!(
        runs[held_from..].iter().any(|r| r.start >= released_at),
        "runs resumed after the release: {runs:?}"
    );
    assert_each_tick_once(&runs);
    assert!(stats.iter().all(|s| s.failures() == 0), "{stats:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn skip_policy_never_overlaps_runs_and_skips_busy_fires() {
    let server = support::server();
    let log: Log = Arc::default();
    // Runs longer than the period, so fires on other nodes land while the job runs.
    let long = Duration::from_millis(1500);
    let mut nodes = Vec::new();
    for i in 0..3 {
        nodes.push(
            Node::start(
                &server.connect_string(),
                i,
                "sweep",
                Policy::Skip,
                SystemClock,
                long,
                &log,
            )
            .await,
        );
    }
    wait_for_runs(&log, 4, Duration::from_secs(40)).await;
    let mut stats = Vec::new();
    for node in nodes {
        stats.push(node.stop().await);
    }
    // Let the last run finish so its end is known.
    settle(&stats).await;
    let mut runs = log.lock().unwrap().clone();
    runs.sort_by_key(|r| r.start);
    for pair in runs.windows(2) {
        let end = pair[0].end.expect("run finished");
        assert!(pair[1].start >= end, "runs overlap: {:?} and {:?}", pair[0], pair[1]);
    }
    let skips: u64 = stats.iter().map(|s| s.skips()).sum();
    assert!(skips >= 2, "fires during a run were skipped: {stats:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn killing_the_running_node_moves_the_job_to_another() {
    let server = support::server();
    let log: Log = Arc::default();
    // Long enough that the cut-off node is told of the loss (about 0.4 × 4 s + 1 s after the
    // cut) well before its run would end by itself.
    let run_for = Duration::from_millis(6000);
    let mut proxies = Vec::new();
    let mut nodes = Vec::new();
    for i in 0..3 {
        let proxy = FaultProxy::start(server.addr()).expect("proxy");
        let node = Node::start(
            &proxy.connect_string(),
            i,
            "failover",
            Policy::OncePerTick,
            SystemClock,
            run_for,
            &log,
        )
        .await;
        proxies.push(proxy);
        nodes.push(node);
    }
    // Wait for a run to start (one that started before we looked may be about to end), then
    // cut its node off for good.
    let seen_before = log.lock().unwrap().len();
    let victim = {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let started = log.lock().unwrap()[seen_before..]
                .iter()
                .find(|r| r.end.is_none())
                .map(|r| r.node);
            if let Some(node) = started {
                break node;
            }
            assert!(Instant::now() < deadline, "no node started a run");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    };
    proxies[victim].blackhole();
    let killed_at = Instant::now();
    let victim_stats = nodes[victim].stats.clone();

    // The victim's run is stopped (OnLost::Abort, the default) when its lock is reported
    // lost, well before its body would have ended by itself.
    let lost = support::eventually(Duration::from_secs(15), || async { victim_stats.lost() == 1 }).await;
    assert!(
        lost,
        "the cut-off node reported its run lost: {:?}",
        victim_stats.snapshot()
    );
    let stopped = support::eventually(Duration::from_secs(15), || async {
        log.lock().unwrap()[seen_before..]
            .iter()
            .any(|r| r.node == victim && r.aborted.is_some())
    })
    .await;
    {
        let log = log.lock().unwrap();
        assert!(
            stopped,
            "the lost run's body was not stopped: {:?}",
            &log[seen_before..]
        );
        let run = log[seen_before..]
            .iter()
            .find(|r| r.node == victim && r.aborted.is_some())
            .expect("the stopped run");
        assert!(run.end.is_none() && run.start <= killed_at, "{run:?}");
        assert!(
            run.aborted.unwrap() < run.start + run_for,
            "the body was stopped only after it would have ended anyway: {run:?}"
        );
    }

    // Two later ticks run on the other nodes.
    let moved = support::eventually(Duration::from_secs(40), || async {
        let log = log.lock().unwrap();
        log.iter().filter(|r| r.node != victim && r.start > killed_at).count() >= 2
    })
    .await;
    let runs = log.lock().unwrap().clone();
    assert!(moved, "the job moved to another node: {runs:?}");
    assert!(
        runs.iter().all(|r| r.job == "failover"),
        "each run names its job: {runs:?}"
    );
    for node in nodes {
        node.stop().await;
    }
    let mut ticks: Vec<u128> = runs.iter().map(|r| millis(r.tick)).collect();
    ticks.sort_unstable();
    ticks.dedup();
    assert_eq!(ticks.len(), runs.len(), "no tick ran twice: {runs:?}");
    assert!(
        runs.iter().all(|r| r.node != victim || r.start <= killed_at),
        "the cut-off node ran nothing afterwards"
    );
}

#[tokio::test]
async fn bad_job_names_and_schedules_are_rejected_up_front() {
    let server = support::server();
    let client = support::client(&server.connect_string()).await;
    let err = SingletonJob::new_async(EVERY_SECOND, &client, "a/b", |_run| async {}).unwrap_err();
    assert!(err.to_string().contains("invalid job name"), "{err}");
    let err = SingletonJob::new_async("every minute", &client, "ok", |_run| async {}).unwrap_err();
    assert!(err.to_string().contains("invalid schedule"), "{err}");
    let err = SingletonJob::new_async("", &client, "ok", |_run| async {}).unwrap_err();
    assert!(err.to_string().contains("invalid schedule"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_failed_run_is_counted_recorded_and_not_rerun_elsewhere() {
    let server = support::server();
    let ticks: Arc<Mutex<Vec<SystemTime>>> = Arc::default();
    let mut schedulers = Vec::new();
    let mut all_stats = Vec::new();
    for _ in 0..2 {
        let client = support::client_with(&server.connect_string(), SESSION).await;
        let ticks = ticks.clone();
        let job = SingletonJob::new_async(EVERY_SECOND, &client, "flaky", move |run| {
            let ticks = ticks.clone();
            async move {
                ticks.lock().unwrap().push(run.tick());
                Err::<(), _>(format!("tick {:?} failed on purpose", run.tick()))
            }
        })
        .unwrap();
        let scheduler = JobScheduler::new().await.unwrap();
        let (_, stats) = scheduler.add_singleton(job).await.unwrap();
        scheduler.start().await.unwrap();
        schedulers.push(scheduler);
        all_stats.push(stats);
    }
    let enough = support::eventually(Duration::from_secs(30), || async { ticks.lock().unwrap().len() >= 4 }).await;
    assert!(enough, "runs: {:?}", ticks.lock().unwrap());
    for mut scheduler in schedulers {
        scheduler.shutdown().await.unwrap();
    }
    settle(&all_stats).await;

    let runs: Vec<Run> = ticks
        .lock()
        .unwrap()
        .iter()
        .map(|&tick| Run {
            node: 0,
            job: "flaky".to_owned(),
            tick,
            start: Instant::now(),
            end: None,
            aborted: None,
        })
        .collect();
    assert_each_tick_once(&runs);
    let failures: u64 = all_stats.iter().map(|s| s.failures()).sum();
    assert_eq!(
        failures as usize,
        runs.len(),
        "every failed run is counted: {all_stats:?}"
    );

    let raw = support::raw(&server.connect_string()).await;
    let (data, _) = raw.get_data("/zklock.jobs/flaky").await.expect("tick record");
    let record = String::from_utf8(data).unwrap();
    assert!(record.contains("state=failed"), "{record}");
}

/// A claim whose answer is lost while the node's hold is reported lost, and which the record
/// then shows was applied: the tick is taken (the record says so, and no node runs it again)
/// but this node does not run it either, because it would run without the lock. It is counted
/// as lost.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_tick_claimed_while_the_hold_was_lost_is_not_run() {
    // A 500 ms tick allows a 10 s session: the connection stays down for loss_after (1 s) plus
    // a reconnect attempt (at most 4 s), well inside the session.
    let server = zklock_testing::ZkServer::builder()
        .tick_time(Duration::from_millis(500))
        .start()
        .unwrap();
    let proxy = FaultProxy::start(server.addr()).unwrap();
    let client = LockClient::builder(proxy.connect_string())
        .session_timeout(Duration::from_secs(10))
        .loss_after(Duration::from_secs(1))
        .connect()
        .await
        .unwrap();
    let session = client.session_id().unwrap();
    let log: Log = Arc::default();
    // `OnLost::Continue` lets a run that has started finish, so only the check made after the
    // claim, before the run starts, keeps this tick from running.
    let job = SingletonJob::new_async(EVERY_SECOND, &client, "claim-while-lost", {
        let log = log.clone();
        move |run| {
            log.lock().unwrap().push(Run {
                node: 0,
                job: run.job().to_owned(),
                tick: run.tick(),
                start: Instant::now(),
                end: None,
                aborted: None,
            });
            async { Ok::<(), String>(()) }
        }
    })
    .unwrap()
    .on_lost(OnLost::Continue);
    let mut scheduler = JobScheduler::new().await.unwrap();
    let (_, stats) = scheduler.add_singleton(job).await.unwrap();
    scheduler.start().await.unwrap();
    let raw = support::raw(&server.connect_string()).await;
    let record_path = "/zklock.jobs/claim-while-lost";
    let claimed_tick = || async {
        let (data, _) = raw.get_data(record_path).await.ok()?;
        let record = String::from_utf8(data).ok()?;
        let field = |key: &str| {
            record
                .split_whitespace()
                .find_map(|f| f.strip_prefix(key).map(str::to_owned))
        };
        let ours = field("session=")? == format!("{session:#x}");
        (ours && field("state=")? == "running").then(|| field("tick=")?.parse::<u128>().ok())?
    };
    wait_for_runs(&log, 1, Duration::from_secs(30)).await;
    // Every answer now spends 300 ms in the proxy: a claim shows up in the record well before
    // the node hears that it was applied.
    proxy.set_latency(Duration::from_millis(300));
    let deadline = Instant::now() + Duration::from_secs(30);
    let tick = loop {
        if let Some(tick) = claimed_tick().await {
            if !log.lock().unwrap().iter().any(|r| millis(r.tick) == tick) {
                break tick;
            }
        }
        assert!(Instant::now() < deadline, "no claim showed up in the record");
        tokio::time::sleep(Duration::from_millis(10)).await;
    };
    // The claim's answer is still in the proxy: drop it, and keep the node away until its hold
    // is reported lost.
    proxy.blackhole();
    proxy.reset_all();
    let mut status = client.watch_status();
    tokio::time::timeout(
        Duration::from_secs(10),
        status.wait_for(|s| *s == zklock::SessionStatus::Lost),
    )
    .await
    .expect("loss reported")
    .unwrap();
    proxy.set_latency(Duration::ZERO);
    proxy.pass();
    let counted = support::eventually(Duration::from_secs(20), || async { stats.lost() >= 1 }).await;
    assert!(counted, "the tick was not given up as lost: {stats:?}");
    assert_eq!(
        client.session_id(),
        Some(session),
        "the session had to survive for this test"
    );
    scheduler.shutdown().await.unwrap();
    settle(std::slice::from_ref(&stats)).await;
    let runs = log.lock().unwrap().clone();
    assert!(
        !runs.iter().any(|r| millis(r.tick) == tick),
        "tick {tick} ran although its hold was lost when it was claimed: {runs:?}"
    );
    let (data, _) = raw.get_data(record_path).await.unwrap();
    let record = String::from_utf8(data).unwrap();
    let recorded: u128 = record
        .split_whitespace()
        .find_map(|f| f.strip_prefix("tick="))
        .and_then(|t| t.parse().ok())
        .unwrap();
    assert!(recorded >= tick, "the tick was not recorded as taken: {record}");
}

/// A run that panics is a failed run: counted, recorded as failed, and kept in the history as
/// `panicked` with the panic's text.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_panicking_run_is_recorded_as_panicked() {
    use zklock::scheduler::{job_history, Outcome};
    let server = support::server();
    let client = support::client_with(&server.connect_string(), SESSION).await;
    let job = SingletonJob::new_async(EVERY_SECOND, &client, "brittle", |_run| async {
        if ledger_is_gone() {
            panic!("the ledger is gone");
        }
    })
    .unwrap();
    let mut scheduler = JobScheduler::new().await.unwrap();
    let (_, stats) = scheduler.add_singleton(job).await.unwrap();
    scheduler.start().await.unwrap();
    let recorded = support::eventually(Duration::from_secs(30), || async {
        job_history(&client, "brittle").await.is_ok_and(|h| !h.is_empty())
    })
    .await;
    scheduler.shutdown().await.unwrap();
    settle(std::slice::from_ref(&stats)).await;
    assert!(recorded, "no run recorded: {:?}", stats.snapshot());
    let history = job_history(&client, "brittle").await.unwrap();
    let last = history.last().unwrap();
    assert_eq!(last.outcome, Outcome::Panicked);
    assert_eq!(last.error.as_deref(), Some("panicked: the ledger is gone"));
    assert!(
        stats.failures() >= 1 && stats.failures() == stats.runs(),
        "{:?}",
        stats.snapshot()
    );
}

/// What the brittle job above checks before it panics: always true, so that its body has the
/// type `()` rather than never returning.
fn ledger_is_gone() -> bool {
    true
}
