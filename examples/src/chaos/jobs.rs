//! The scheduler workload of the chaos run (`chaos jobs`): node processes run one singleton job
//! every second under once-per-tick, each through its own fault proxies in front of a 3-member
//! ensemble, while the node running the job is killed or partitioned past its session and the
//! ensemble's leader is killed. Every run reports its tick as it starts.
//!
//! The check: no tick ran twice, and every tick between the first run and the last either ran
//! or was given up and said so (a `missed` history entry, a node's missed count); the job's
//! history in ZooKeeper must agree with the runs seen.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant, UNIX_EPOCH};

use serde::{Deserialize, Serialize};
use zklock::scheduler::tokio_cron_scheduler::JobScheduler;
use zklock::scheduler::{job_history, JobSchedulerExt, Outcome, SingletonJob};
use zklock::testing::{FaultProxy, ZkEnsemble};
use zklock::LockClient;

use super::runner::ChildCommand;

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// The job every node runs.
pub const JOB: &str = "chaos-job";
/// How a node process marks the lines the runner reads.
const LINE_PREFIX: &str = "ZKLOCK-CHAOS-JOB ";

/// Settings of a scheduler chaos run.
#[derive(Debug, Clone)]
pub struct JobsConfig {
    /// How long to keep injecting faults (at least one round of every kind).
    pub duration: Duration,
    /// Node processes.
    pub nodes: usize,
    /// Session timeout of every node.
    pub session_timeout: Duration,
    /// Server tick.
    pub tick_time: Duration,
    /// How to start a node process (it runs [`node_main_from_env`]).
    pub child: ChildCommand,
    /// Print progress to stderr.
    pub verbose: bool,
}

/// What a node process says.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "event", rename_all = "snake_case")]
enum Said {
    /// The node's scheduler is running.
    Ready { node: usize },
    /// A run started.
    Run { node: usize, tick: i64, token: String },
    /// How many ticks the node gave up, and how many runs it lost (sent every few seconds and
    /// at exit).
    Counts { node: usize, missed: u64, lost: u64 },
}

/// The verdict of a run.
#[derive(Debug, Default, Serialize)]
pub struct JobsReport {
    /// Runs seen.
    pub runs: usize,
    /// Distinct ticks run.
    pub ticks: usize,
    /// Faults injected, by kind.
    pub faults: BTreeMap<String, usize>,
    /// Ticks that ran more than once.
    pub duplicates: Vec<i64>,
    /// Ticks between the first and the last run that ran nowhere.
    pub gaps: usize,
    /// Ticks the nodes said they gave up, and runs they said they lost (a tick taken whose run
    /// could not start or end under the lock), summed over node lives.
    pub missed_reported: u64,
    /// See `missed_reported`.
    pub lost_reported: u64,
    /// Ticks of the history (its latest runs) whose outcome disagrees with the runs seen: a
    /// run in the history that was never seen, or a tick seen twice.
    pub history_disagreements: Vec<String>,
}

impl JobsReport {
    /// No tick ran twice, every gap is a tick a node gave up, and the history agrees.
    pub fn passed(&self) -> bool {
        self.duplicates.is_empty()
            && self.gaps as u64 <= self.missed_reported + self.lost_reported
            && self.history_disagreements.is_empty()
    }

    /// The verdict as one JSON line.
    pub fn json_line(&self) -> String {
        serde_json::to_string(self).unwrap_or_default()
    }
}

struct Node {
    child: Child,
    stdin: Option<ChildStdin>,
    proxies: Vec<FaultProxy>,
}

impl Node {
    fn stop(&mut self) {
        self.stdin.take(); // EOF: the node shuts down
        let deadline = Instant::now() + Duration::from_secs(15);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            thread::sleep(Duration::from_millis(50));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[derive(Default)]
struct Seen {
    ready: usize,
    runs: Vec<(usize, i64)>,
    /// The latest missed and lost counts of each node life, by (node, life).
    counts: BTreeMap<(usize, usize), (u64, u64)>,
}

fn spawn(
    config: &JobsConfig,
    index: usize,
    life: usize,
    ensemble: &ZkEnsemble,
    seen: &Arc<Mutex<Seen>>,
) -> Result<Node, BoxError> {
    let proxies = ensemble.proxies()?;
    let mut child = Command::new(&config.child.program)
        .args(&config.child.args)
        .env("ZKLOCK_CHAOS_CONNECT", ensemble.connect_string_via(&proxies))
        .env("ZKLOCK_CHAOS_NODE", index.to_string())
        .env(
            "ZKLOCK_CHAOS_SESSION_MS",
            config.session_timeout.as_millis().to_string(),
        )
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()?;
    let stdin = child.stdin.take();
    let stdout = child.stdout.take().ok_or("no stdout")?;
    let seen = seen.clone();
    thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { return };
            let Some(at) = line.find(LINE_PREFIX) else { continue };
            let mut seen = seen.lock().unwrap_or_else(|e| e.into_inner());
            match serde_json::from_str::<Said>(&line[at + LINE_PREFIX.len()..]) {
                Ok(Said::Ready { .. }) => seen.ready += 1,
                Ok(Said::Run { node, tick, .. }) => seen.runs.push((node, tick)),
                Ok(Said::Counts { node, missed, lost }) => {
                    seen.counts.insert((node, life), (missed, lost));
                }
                Err(e) => eprintln!("chaos jobs: unreadable line from node {index}: {e}: {line}"),
            }
        }
    });
    Ok(Node { child, stdin, proxies })
}

/// Runs the workload and checks what it saw.
pub fn run_jobs(config: &JobsConfig) -> Result<JobsReport, BoxError> {
    let t0 = Instant::now();
    let say = |what: String| {
        if config.verbose {
            eprintln!("[{:>7.1}s] {what}", t0.elapsed().as_secs_f64());
        }
    };
    let ensemble = ZkEnsemble::builder(3)
        .tick_time(config.tick_time)
        .partitionable()
        .system_property("zookeeper.fastleader.maxNotificationInterval", "1000")
        .start_timeout(Duration::from_secs(90))
        .start()?;
    say(format!("ensemble up: {}", ensemble.connect_string()));
    let seen = Arc::new(Mutex::new(Seen::default()));
    let seen_now = || seen.lock().unwrap_or_else(|e| e.into_inner());
    let mut lives = vec![0usize; config.nodes];
    let mut nodes = Vec::new();
    for index in 0..config.nodes {
        nodes.push(spawn(config, index, 0, &ensemble, &seen)?);
    }
    let deadline = Instant::now() + Duration::from_secs(90);
    while seen_now().ready < config.nodes || seen_now().runs.is_empty() {
        if Instant::now() > deadline {
            return Err("the nodes did not start and run the job within 90 s".into());
        }
        thread::sleep(Duration::from_millis(50));
    }
    let mut report = JobsReport::default();
    let runner = |seen: &Seen| seen.runs.last().map(|(node, _)| *node).unwrap_or(0);
    let started = Instant::now();
    let settle = Duration::from_secs(6);
    let mut round = 0;
    while round == 0 || started.elapsed() < config.duration {
        round += 1;
        // The node that ran the latest tick, killed; a new life of it starts at once.
        let victim = runner(&seen_now());
        nodes[victim].child.kill()?;
        let _ = nodes[victim].child.wait();
        lives[victim] += 1;
        nodes[victim] = spawn(config, victim, lives[victim], &ensemble, &seen)?;
        *report.faults.entry("kill_runner".into()).or_default() += 1;
        say(format!(
            "killed node {victim} (it ran the latest tick) and started it again"
        ));
        thread::sleep(settle);

        // The runner, partitioned until its session has expired.
        let victim = runner(&seen_now());
        for proxy in &nodes[victim].proxies {
            proxy.blackhole();
        }
        thread::sleep(config.session_timeout + Duration::from_secs(2));
        for proxy in &nodes[victim].proxies {
            proxy.pass();
        }
        *report.faults.entry("partition_runner".into()).or_default() += 1;
        say(format!("partitioned node {victim} past its session, then healed it"));
        thread::sleep(settle);

        // The ensemble's leader, killed and restarted.
        let leader = ensemble.wait_for_quorum(Duration::from_secs(60))?;
        ensemble.kill(leader)?;
        ensemble.wait_for_quorum(Duration::from_secs(60))?;
        ensemble.restart(leader)?;
        *report.faults.entry("leader_kill".into()).or_default() += 1;
        say(format!("killed leader {leader}; it rejoined"));
        thread::sleep(settle);
    }
    for node in &mut nodes {
        node.stop();
    }
    // The history, read after the nodes stopped: its entries must match the runs seen.
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    let history = rt.block_on(async {
        let client = LockClient::builder(ensemble.connect_string()).connect().await?;
        let history = job_history(&client, JOB).await;
        client.close().await;
        history
    })?;

    let seen = seen_now();
    let mut counts: BTreeMap<i64, usize> = BTreeMap::new();
    for (_, tick) in &seen.runs {
        *counts.entry(*tick).or_default() += 1;
    }
    report.runs = seen.runs.len();
    report.ticks = counts.len();
    report.duplicates = counts.iter().filter(|(_, n)| **n > 1).map(|(tick, _)| *tick).collect();
    if let (Some(first), Some(last)) = (counts.keys().next(), counts.keys().last()) {
        report.gaps = ((last - first) / 1000 + 1) as usize - counts.len();
    }
    report.missed_reported = seen.counts.values().map(|(missed, _)| missed).sum();
    report.lost_reported = seen.counts.values().map(|(_, lost)| lost).sum();
    // A run the history records ended was seen starting, once; a tick recorded lost may have
    // died before it said so.
    for entry in &history {
        let times = |tick: i64| counts.get(&tick).copied().unwrap_or(0);
        let agrees = match (entry.tick, &entry.outcome) {
            (Some(tick), Outcome::Ok | Outcome::Failed | Outcome::Replaced | Outcome::TimedOut) => times(tick) == 1,
            (Some(tick), Outcome::Lost) => {
                // A run that never said it started is a gap the history explains.
                if times(tick) == 0 {
                    report.lost_reported += 1;
                }
                times(tick) <= 1
            }
            _ => true,
        };
        if let Some(tick) = entry.tick.filter(|_| !agrees) {
            report.history_disagreements.push(format!(
                "the history has tick {tick} as {:?}, seen starting {} times",
                entry.outcome,
                counts.get(&tick).copied().unwrap_or(0)
            ));
        }
    }
    say(format!(
        "{} runs of {} ticks, {} gaps; {} missed and {} lost reported",
        report.runs, report.ticks, report.gaps, report.missed_reported, report.lost_reported
    ));
    Ok(report)
}

/// A node process: runs the job until its stdin closes, saying every run's tick as it starts.
pub fn node_main_from_env() -> i32 {
    let env = |name: &str| std::env::var(name).unwrap_or_default();
    let connect = env("ZKLOCK_CHAOS_CONNECT");
    let node: usize = env("ZKLOCK_CHAOS_NODE").parse().unwrap_or(0);
    let session = Duration::from_millis(env("ZKLOCK_CHAOS_SESSION_MS").parse().unwrap_or(4000));
    let say = |said: &Said| {
        let mut out = std::io::stdout().lock();
        let _ = writeln!(out, "{LINE_PREFIX}{}", serde_json::to_string(said).unwrap_or_default());
        let _ = out.flush();
    };
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("chaos job node: {e}");
            return 2;
        }
    };
    let outcome: Result<(), BoxError> = rt.block_on(async {
        let client = LockClient::builder(&connect)
            .session_timeout(session)
            .identity(format!("node-{node}"))
            .connect()
            .await?;
        let job = SingletonJob::new_async("* * * * * *", &client, JOB, move |run| async move {
            let tick = run.tick().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_millis() as i64);
            say(&Said::Run {
                node,
                tick,
                token: run.fencing_token().to_string(),
            });
            tokio::time::sleep(Duration::from_millis(200)).await;
        })?;
        let mut scheduler = JobScheduler::new().await?;
        let (_, stats) = scheduler.add_singleton(job).await?;
        scheduler.start().await?;
        say(&Said::Ready { node });
        let stdin_closed = tokio::task::spawn_blocking(|| {
            let mut sink = String::new();
            while std::io::stdin().read_line(&mut sink).map(|n| n > 0).unwrap_or(false) {}
        });
        tokio::pin!(stdin_closed);
        loop {
            tokio::select! {
                _ = &mut stdin_closed => break,
                () = tokio::time::sleep(Duration::from_secs(2)) => say(&Said::Counts { node, missed: stats.missed(), lost: stats.lost() }),
            }
        }
        scheduler.shutdown().await?;
        while stats.fires_in_flight() > 0 {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        say(&Said::Counts {
            node,
            missed: stats.missed(),
            lost: stats.lost(),
        });
        client.close().await;
        Ok(())
    });
    match outcome {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("chaos job node {node}: {e}");
            2
        }
    }
}
