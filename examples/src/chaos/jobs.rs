//! The scheduler workload of the chaos run (`chaos jobs`): node processes run one singleton job
//! every second under once-per-tick, each through its own fault proxies in front of a 3-member
//! ensemble, while the node running the job is killed or partitioned past its session and the
//! ensemble's leader is killed. Every run reports its tick as it starts.
//!
//! The check: no tick ran twice, and every tick between the first run and the last either ran
//! or was given up and said so, tick by tick: inside a span of ticks a node said it gave up
//! (the scheduler's `missed` warning, which each node passes on), a tick a node said it took
//! and did not run, or a tick the job's history records as `lost` or `missed`. The job's
//! history in ZooKeeper must agree with the runs seen.

use std::collections::{BTreeMap, BTreeSet};
use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant, UNIX_EPOCH};

use serde::{Deserialize, Serialize};
use zklock::scheduler::tokio_cron_scheduler::JobScheduler;
use zklock::scheduler::{job_history, JobSchedulerExt, OffsetClock, Outcome, Policy, SingletonJob};
use zklock::testing::{FaultProxy, ZkEnsemble};
use zklock::{zk, LockClient};

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
    /// Start the nodes with clocks off ZooKeeper's by minutes to hours, ahead and behind
    /// ([`clock_offset_ms`]), through the scheduler's clock seam.
    pub skew: bool,
    /// Give the nodes different overlap policies for the one job ([`policy_of`]).
    pub mixed: bool,
}

/// How far node `index`'s clock is off, in ms (positive: ahead), when the run skews clocks.
pub fn clock_offset_ms(index: usize) -> i64 {
    const MINUTE: i64 = 60_000;
    [0, 37 * MINUTE, -23 * MINUTE, 2 * 60 * MINUTE, -3 * MINUTE][index % 5]
}

/// The overlap policy of node `index` when the run mixes policies.
pub fn policy_of(index: usize) -> Policy {
    [Policy::OncePerTick, Policy::Skip, Policy::BufferOne][index % 3]
}

fn policy_name(policy: Policy) -> &'static str {
    match policy {
        Policy::Skip => "skip",
        Policy::BufferOne => "buffer-one",
        _ => "once-per-tick",
    }
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
    /// The node gave up the ticks from `first` to `last` (ms since the epoch), as the
    /// scheduler warned.
    GaveUp { node: usize, first: i64, last: i64 },
    /// The node took `tick` and did not run it (its lock was lost, or the claim's answer was),
    /// as the scheduler warned.
    NotRun { node: usize, tick: i64 },
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
    /// Of those, the ticks nothing accounts for: no node said it gave them up or took them
    /// without running them, and the history does not record them lost or missed.
    pub unexplained_gaps: Vec<i64>,
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
    /// No tick ran twice, every gap is a tick said to be given up or lost, and the history
    /// agrees.
    pub fn passed(&self) -> bool {
        self.duplicates.is_empty() && self.unexplained_gaps.is_empty() && self.history_disagreements.is_empty()
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
    /// Spans of ticks the nodes said they gave up, first to last.
    gave_up: Vec<(i64, i64)>,
    /// Ticks the nodes said they took and did not run.
    not_run: BTreeSet<i64>,
    /// Ticks the job's history recorded as lost or missed, from every read of it.
    recorded_not_run: BTreeSet<i64>,
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
        .env(
            "ZKLOCK_CHAOS_OFFSET_MS",
            if config.skew { clock_offset_ms(index) } else { 0 }.to_string(),
        )
        .env(
            "ZKLOCK_CHAOS_POLICY",
            policy_name(if config.mixed {
                policy_of(index)
            } else {
                Policy::OncePerTick
            }),
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
                Ok(Said::GaveUp { first, last, .. }) => seen.gave_up.push((first, last)),
                Ok(Said::NotRun { tick, .. }) => {
                    seen.not_run.insert(tick);
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
        // A copy of the tick record as a backup would take it; restored later in the round.
        let backup = read_record(&ensemble)?;
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
        note_history(&ensemble, &mut seen_now())?;

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
        note_history(&ensemble, &mut seen_now())?;

        // The record restored from the round's backup, as an operator restoring ZooKeeper's
        // data would: it says an earlier tick was the last taken.
        restore_record(&ensemble, &backup)?;
        *report.faults.entry("restore_record".into()).or_default() += 1;
        say("restored the tick record from the round's backup".to_string());
        thread::sleep(settle);
        note_history(&ensemble, &mut seen_now())?;

        // The ensemble's leader, killed and restarted.
        let leader = ensemble.wait_for_quorum(Duration::from_secs(60))?;
        ensemble.kill(leader)?;
        ensemble.wait_for_quorum(Duration::from_secs(60))?;
        ensemble.restart(leader)?;
        *report.faults.entry("leader_kill".into()).or_default() += 1;
        say(format!("killed leader {leader}; it rejoined"));
        thread::sleep(settle);
        note_history(&ensemble, &mut seen_now())?;
    }
    for node in &mut nodes {
        node.stop();
    }
    // The history, read after the nodes stopped: its entries must match the runs seen.
    let history = note_history(&ensemble, &mut seen_now())?;

    let seen = seen_now();
    let mut counts: BTreeMap<i64, usize> = BTreeMap::new();
    for (_, tick) in &seen.runs {
        *counts.entry(*tick).or_default() += 1;
    }
    report.runs = seen.runs.len();
    report.ticks = counts.len();
    report.duplicates = counts.iter().filter(|(_, n)| **n > 1).map(|(tick, _)| *tick).collect();
    if let (Some(&first), Some(&last)) = (counts.keys().next(), counts.keys().last()) {
        report.gaps = ((last - first) / 1000 + 1) as usize - counts.len();
        report.unexplained_gaps = unexplained_gaps(first, last, &counts, &seen);
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
        "{} runs of {} ticks, {} gaps ({} unexplained); {} missed and {} lost reported",
        report.runs,
        report.ticks,
        report.gaps,
        report.unexplained_gaps.len(),
        report.missed_reported,
        report.lost_reported
    ));
    Ok(report)
}

/// The ticks from `first` to `last` (a second apart) that ran nowhere and that nobody said were
/// not run: tick by tick, so a tick given up does not account for another that vanished.
fn unexplained_gaps(first: i64, last: i64, ran: &BTreeMap<i64, usize>, seen: &Seen) -> Vec<i64> {
    let said_given_up = |tick: i64| seen.gave_up.iter().any(|&(from, to)| from <= tick && tick <= to);
    (first..=last)
        .step_by(1000)
        .filter(|tick| !ran.contains_key(tick))
        .filter(|&tick| !(said_given_up(tick) || seen.not_run.contains(&tick) || seen.recorded_not_run.contains(&tick)))
        .collect()
}

/// The path of the chaos job's znode (its data is the tick record).
fn record_path() -> String {
    format!("/zklock.jobs/{JOB}")
}

/// A raw ZooKeeper session to the ensemble, for what an operator does by hand.
async fn raw(ensemble: &ZkEnsemble) -> Result<zk::Client, BoxError> {
    Ok(zk::Client::connector()
        .with_session_timeout(Duration::from_secs(10))
        .connect(&ensemble.connect_string())
        .await?)
}

/// The job's tick record as it is now (empty when there is none yet).
fn read_record(ensemble: &ZkEnsemble) -> Result<Vec<u8>, BoxError> {
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    rt.block_on(async {
        let zk = raw(ensemble).await?;
        match zk.get_data(&record_path()).await {
            Ok((data, _)) => Ok(data),
            Err(zk::Error::NoNode) => Ok(Vec::new()),
            Err(err) => Err(err.into()),
        }
    })
}

/// Writes `backup` over the job's tick record, whatever it holds now.
fn restore_record(ensemble: &ZkEnsemble, backup: &[u8]) -> Result<(), BoxError> {
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    rt.block_on(async {
        let zk = raw(ensemble).await?;
        match zk.set_data(&record_path(), backup, None).await {
            Ok(_) | Err(zk::Error::NoNode) => Ok(()),
            Err(err) => Err(err.into()),
        }
    })
}

/// Reads the job's history (its latest runs only, so the runner reads it after every fault)
/// and notes the ticks it records as lost, missed or skipped (each tick an entry stands for);
/// returns it.
fn note_history(ensemble: &ZkEnsemble, seen: &mut Seen) -> Result<Vec<zklock::scheduler::HistoryEntry>, BoxError> {
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    let history = rt.block_on(async {
        let client = LockClient::builder(ensemble.connect_string()).connect().await?;
        let history = job_history(&client, JOB).await;
        client.close().await;
        history
    })?;
    for entry in &history {
        if let (Some(tick), Outcome::Lost | Outcome::Missed | Outcome::Skipped) = (entry.tick, &entry.outcome) {
            let first = entry.first_tick.unwrap_or(tick);
            seen.recorded_not_run.extend((first..=tick).step_by(1000));
        }
    }
    Ok(history)
}

/// What a node says, as one line the runner reads on its stdout.
fn say_line(said: &Said) {
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{LINE_PREFIX}{}", serde_json::to_string(said).unwrap_or_default());
    let _ = out.flush();
}

/// The node's tracing subscriber: passes on, as lines the runner reads, the scheduler's
/// warnings that name ticks given up or taken and not run. Everything else is dropped.
struct TickWarnings {
    node: usize,
    /// Where the lines go: [`say_line`] in a node.
    say: fn(&Said),
}

/// The fields of one event, as text.
#[derive(Default)]
struct Fields(BTreeMap<&'static str, String>);

impl tracing::field::Visit for Fields {
    fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn std::fmt::Debug) {
        self.0.insert(field.name(), format!("{value:?}"));
    }

    fn record_str(&mut self, field: &tracing::field::Field, value: &str) {
        self.0.insert(field.name(), value.to_owned());
    }
}

/// A tick as the scheduler logs it (RFC 3339, ms), in ms since the epoch.
fn tick_of(text: &str) -> Option<i64> {
    let at = humantime::parse_rfc3339(text).ok()?;
    at.duration_since(UNIX_EPOCH).ok().map(|d| d.as_millis() as i64)
}

impl tracing::Subscriber for TickWarnings {
    fn enabled(&self, meta: &tracing::Metadata<'_>) -> bool {
        meta.target() == "zklock::scheduler" && *meta.level() <= tracing::Level::WARN
    }

    fn new_span(&self, _: &tracing::span::Attributes<'_>) -> tracing::span::Id {
        tracing::span::Id::from_u64(1)
    }

    fn record(&self, _: &tracing::span::Id, _: &tracing::span::Record<'_>) {}

    fn record_follows_from(&self, _: &tracing::span::Id, _: &tracing::span::Id) {}

    fn event(&self, event: &tracing::Event<'_>) {
        let mut fields = Fields::default();
        event.record(&mut fields);
        let field = |name: &str| fields.0.get(name).and_then(|text| tick_of(text));
        let message = fields.0.get("message").map(String::as_str).unwrap_or("");
        let node = self.node;
        if let (Some(first), Some(last)) = (field("first"), field("last")) {
            (self.say)(&Said::GaveUp { node, first, last });
        } else if let Some(tick) = field("tick").filter(|_| {
            message.contains("not running it") || message.contains("could not learn whether the tick was taken")
        }) {
            (self.say)(&Said::NotRun { node, tick });
        }
    }

    fn enter(&self, _: &tracing::span::Id) {}

    fn exit(&self, _: &tracing::span::Id) {}
}

/// A node process: runs the job until its stdin closes, saying every run's tick as it starts.
pub fn node_main_from_env() -> i32 {
    let env = |name: &str| std::env::var(name).unwrap_or_default();
    let connect = env("ZKLOCK_CHAOS_CONNECT");
    let node: usize = env("ZKLOCK_CHAOS_NODE").parse().unwrap_or(0);
    let session = Duration::from_millis(env("ZKLOCK_CHAOS_SESSION_MS").parse().unwrap_or(4000));
    let offset_ms: i64 = env("ZKLOCK_CHAOS_OFFSET_MS").parse().unwrap_or(0);
    let clock = if offset_ms >= 0 {
        OffsetClock::ahead(Duration::from_millis(offset_ms.unsigned_abs()))
    } else {
        OffsetClock::behind(Duration::from_millis(offset_ms.unsigned_abs()))
    };
    let policy = match env("ZKLOCK_CHAOS_POLICY").as_str() {
        "skip" => Policy::Skip,
        "buffer-one" => Policy::BufferOne,
        _ => Policy::OncePerTick,
    };
    let say = say_line;
    if let Err(e) = tracing::subscriber::set_global_default(TickWarnings { node, say: say_line }) {
        // The runner would then take every tick given up here for one that vanished.
        eprintln!("chaos job node {node}: cannot pass on the scheduler's warnings: {e}");
    }
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
        })?
        .policy(policy)
        .clock(clock);
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

#[cfg(test)]
mod tests {
    use super::*;

    fn ran(ticks: &[i64]) -> BTreeMap<i64, usize> {
        ticks.iter().map(|&t| (t * 1000, 1)).collect()
    }

    #[test]
    fn ticks_are_read_as_the_scheduler_logs_them() {
        assert_eq!(tick_of("1970-01-01T00:00:05.000Z"), Some(5000));
        assert_eq!(tick_of("2026-11-26T19:35:01.000Z"), Some(1_795_721_701_000));
        assert_eq!(tick_of("5000"), None);
    }

    thread_local! {
        static SAID: std::cell::RefCell<Vec<String>> = const { std::cell::RefCell::new(Vec::new()) };
    }

    fn collect(said: &Said) {
        SAID.with(|s| s.borrow_mut().push(serde_json::to_string(said).unwrap()));
    }

    /// The warnings as the scheduler writes them (fields shown with `%`, ticks in RFC 3339)
    /// become the lines the runner reads; other targets and messages are not passed on.
    #[test]
    fn the_schedulers_tick_warnings_are_passed_on() {
        tracing::subscriber::with_default(TickWarnings { node: 2, say: collect }, || {
            tracing::warn!(target: "zklock::scheduler", job = %"j", tick = %"1970-01-01T00:00:09.000Z",
                first = %"1970-01-01T00:00:05.000Z", last = %"1970-01-01T00:00:07.000Z", count = 3u64,
                "missed: giving up ticks from first to last (catch-up policy or starting deadline)");
            tracing::warn!(target: "zklock::scheduler", job = %"j", tick = %"1970-01-01T00:00:08.000Z",
                "the job's lock was lost right after the tick was taken; not running it");
            tracing::warn!(target: "zklock::scheduler", job = %"j", tick = %"1970-01-01T00:00:04.000Z",
                "could not learn whether the tick was taken; the next beat looks again");
            tracing::warn!(target: "zklock::scheduler", job = %"j", error = %"boom", "could not take a run-now request");
            tracing::warn!(target: "elsewhere", tick = %"1970-01-01T00:00:01.000Z", "not running it");
        });
        let said = SAID.with(|s| s.borrow().clone());
        assert_eq!(
            said,
            [
                r#"{"event":"gave_up","node":2,"first":5000,"last":7000}"#,
                r#"{"event":"not_run","node":2,"tick":8000}"#,
                r#"{"event":"not_run","node":2,"tick":4000}"#,
            ]
        );
    }

    #[test]
    fn every_gap_must_be_the_tick_somebody_said_was_not_run() {
        // Ticks 0..=9 ran but 3, 4 and 7.
        let ran = ran(&[0, 1, 2, 5, 6, 8, 9]);
        let mut seen = Seen::default();
        assert_eq!(unexplained_gaps(0, 9000, &ran, &seen), vec![3000, 4000, 7000]);
        // Three ticks said given up, but 5 and 6, which ran, and 7: the counts balance (three
        // gaps, three given up) while 3 and 4 are unaccounted for.
        seen.gave_up.push((5000, 7000));
        assert_eq!(unexplained_gaps(0, 9000, &ran, &seen), vec![3000, 4000]);
        seen.not_run.insert(3000);
        seen.recorded_not_run.insert(4000);
        assert!(unexplained_gaps(0, 9000, &ran, &seen).is_empty());
    }
}
