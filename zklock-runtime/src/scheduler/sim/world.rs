//! One seeded run of the simulation: nodes with their own clocks, policies and catch-up, and
//! around them everything that goes wrong: operators pausing, resuming, triggering, resetting
//! and removing the job; records restored from any earlier snapshot or emptied; processes
//! paused past their session, killed and restarted; sessions expired; clocks stepped; answers
//! of writes lost. Then a quiet spell (clocks synced, every node up, nothing done to the job,
//! runs short so that backlogs drain) in which every promise must have come true. Time is tokio's paused clock: a run of minutes
//! takes milliseconds, and a seed replays exactly.

use std::fmt::Write as _;
use std::sync::Arc;
use std::time::Duration;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use tokio::time::{sleep, Instant};

use super::super::policy::{CatchUp, Policy};
use super::super::record::{RunState, TickRecord};
use super::super::ticks::Ticks;
use super::ensemble::{Ensemble, JobNode, Journal, Zk};
use super::node::{Defects, Node, Setup, Weather};

/// How long the server waits before it expires a silent session.
pub(super) const SESSION_TIMEOUT: Duration = Duration::from_secs(4);

/// ZooKeeper's default `znode.container.checkIntervalMs`.
const REAP_INTERVAL_MS: i64 = 60_000;

/// What one seed sets up.
#[derive(Debug, Clone)]
pub(super) struct Scenario {
    pub seed: u64,
    pub schedule: &'static str,
    pub nodes: Vec<Setup>,
    pub weather: Weather,
    /// How long faults go on, then how long the quiet spell lasts.
    pub stormy: Duration,
    pub quiet: Duration,
    /// The mean pause between two acts of the world.
    pub act_every_ms: u64,
    pub defects: Defects,
}

const POLICIES: [Policy; 5] = [
    Policy::OncePerTick,
    Policy::Skip,
    Policy::BufferOne,
    Policy::Replace,
    Policy::Allow,
];

impl Scenario {
    /// The scenario of `seed`.
    pub fn of(seed: u64, defects: Defects) -> Scenario {
        let mut rng = StdRng::seed_from_u64(seed);
        let count = rng.random_range(2..=4);
        let shared_policy = rng
            .random_bool(0.3)
            .then(|| POLICIES[rng.random_range(0..POLICIES.len())]);
        let nodes = (0..count)
            .map(|_| Setup {
                policy: shared_policy.unwrap_or_else(|| POLICIES[rng.random_range(0..POLICIES.len())]),
                catch_up: match rng.random_range(0..4) {
                    0 => CatchUp::Skip,
                    1 => CatchUp::RunOnce,
                    _ => CatchUp::RunAll {
                        limit: rng.random_range(1..=10),
                    },
                },
                deadline: rng
                    .random_bool(0.3)
                    .then(|| Duration::from_millis(rng.random_range(1_000..=5_000))),
                offset_ms: offset(&mut rng),
                drift_ppm: rng.random_range(-20_000..=20_000),
            })
            .collect();
        Scenario {
            seed,
            schedule: ["* * * * * *", "*/2 * * * * *", "*/5 * * * * *"][rng.random_range(0..3)],
            nodes,
            weather: Weather {
                transient: [0.0, 0.01, 0.05][rng.random_range(0..3)],
                longest_run_ms: [300, 1_500, 4_000][rng.random_range(0..3)],
            },
            stormy: Duration::from_secs(rng.random_range(45..=120)),
            quiet: Duration::from_secs(30),
            act_every_ms: rng.random_range(1_000..=4_000),
            defects,
        }
    }
}

/// A clock offset: right, a little off, minutes off or hours off, ahead or behind.
fn offset(rng: &mut StdRng) -> i64 {
    let size = match rng.random_range(0..10) {
        0..=2 => 0,
        3..=4 => rng.random_range(0..=900),
        5..=6 => rng.random_range(2_000..=60_000),
        7..=8 => rng.random_range(5..=60) * 60_000,
        _ => rng.random_range(1..=3) * 3_600_000,
    };
    if rng.random_bool(0.5) {
        size
    } else {
        -size
    }
}

/// What a run leaves for the checker.
pub(super) struct Finished {
    pub journal: Journal,
    pub job: Option<JobNode>,
    /// When the quiet spell began and when the run ended, by ZooKeeper's clock.
    pub quiet_from: i64,
    pub end: i64,
    /// Since when the oldest end still owed at the end is owed.
    pub owed: Option<i64>,
    /// Sessions alive at the end, and the nodes' own.
    pub alive_sessions: Vec<u64>,
}

/// Runs `scenario` to the end.
pub(super) fn run(scenario: &Scenario) -> Finished {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
        .expect("a current-thread runtime");
    // The world is built inside the runtime: its ensemble's clock starts on the paused clock,
    // not on the real one a loaded machine moves on while the runtime is being built.
    runtime.block_on(async { World::new(scenario).go().await })
}

struct World<'a> {
    scenario: &'a Scenario,
    ticks: Ticks,
    zk: Zk,
    nodes: Vec<Arc<Node>>,
    rng: StdRng,
    snapshots: Vec<Vec<u8>>,
    incarnation: u64,
}

impl<'a> World<'a> {
    fn new(scenario: &'a Scenario) -> World<'a> {
        World {
            scenario,
            ticks: Ticks::parse(scenario.schedule).expect("a valid schedule"),
            zk: Ensemble::new(),
            nodes: Vec::new(),
            rng: StdRng::seed_from_u64(scenario.seed ^ 0x5eed),
            snapshots: vec![Vec::new()],
            incarnation: 0,
        }
    }

    fn note(&self, what: String) {
        let mut zk = self.zk.lock().unwrap();
        let now = zk.now();
        zk.journal.acts.push((now, what));
    }

    fn start_node(&mut self, id: usize, setup: Setup) -> Arc<Node> {
        self.incarnation += 1;
        let seed = self
            .scenario
            .seed
            .wrapping_mul(1_000_003)
            .wrapping_add(self.incarnation);
        let node = Node::start(
            id,
            setup,
            self.ticks.clone(),
            self.zk.clone(),
            self.scenario.defects,
            self.scenario.weather,
            seed,
        );
        let phase = Duration::from_millis(self.rng.random_range(0..1_000));
        let beating = node.clone();
        node.spawn(async move {
            sleep(phase).await;
            loop {
                let beat = beating.clone();
                beating.spawn(async move { beat.beat().await });
                sleep(Duration::from_secs(1)).await;
            }
        });
        node
    }

    async fn go(mut self) -> Finished {
        for (id, setup) in self.scenario.nodes.clone().into_iter().enumerate() {
            let node = self.start_node(id, setup);
            self.nodes.push(node);
        }
        let start = Instant::now();
        let mut dead_until: Vec<Option<Instant>> = vec![None; self.nodes.len()];
        while start.elapsed() < self.scenario.stormy {
            let pause = self.rng.random_range(0..=2 * self.scenario.act_every_ms);
            sleep(Duration::from_millis(pause)).await;
            self.snapshot();
            self.reap();
            for (id, until) in dead_until.iter_mut().enumerate() {
                if until.is_some_and(|until| until <= Instant::now()) {
                    *until = None;
                    let setup = self.nodes[id].setup;
                    self.note(format!("node {id} restarts"));
                    self.nodes[id] = self.start_node(id, setup);
                }
            }
            self.act(&mut dead_until).await;
        }
        // The quiet spell: every node up, clocks right, the job resumed, nothing done to it.
        for (id, until) in dead_until.iter_mut().enumerate() {
            if until.take().is_some() {
                let setup = self.nodes[id].setup;
                self.nodes[id] = self.start_node(id, setup);
            }
        }
        for node in &self.nodes {
            *node.frozen_until.lock().unwrap() = None;
            let drift = node.local_ms() - self.zk.lock().unwrap().now() - *node.offset_ms.lock().unwrap();
            *node.offset_ms.lock().unwrap() = -drift;
        }
        self.resume().await;
        self.zk.lock().unwrap().quiet = true;
        self.note("quiet from here".into());
        let quiet_from = self.zk.lock().unwrap().now();
        let quiet_start = Instant::now();
        while quiet_start.elapsed() < self.scenario.quiet {
            sleep(Duration::from_secs(1)).await;
            // Clocks drift on; keep them right.
            for node in &self.nodes {
                let drift = node.local_ms() - self.zk.lock().unwrap().now() - *node.offset_ms.lock().unwrap();
                *node.offset_ms.lock().unwrap() = -drift;
            }
        }
        let owed = self.nodes.iter().filter_map(|node| node.owes_since()).min();
        let alive_sessions = self.nodes.iter().map(|node| node.session_id()).collect();
        for node in &self.nodes {
            node.kill();
        }
        let mut zk = self.zk.lock().unwrap();
        let end = zk.now();
        Finished {
            journal: std::mem::take(&mut zk.journal),
            job: zk.job.clone(),
            quiet_from,
            end,
            owed,
            alive_sessions,
        }
    }

    fn snapshot(&mut self) {
        let data = self.zk.lock().unwrap().job.as_ref().map(|job| job.data.clone());
        if let Some(data) = data {
            if self.snapshots.last() != Some(&data) {
                self.snapshots.push(data);
            }
        }
    }

    fn reap(&mut self) {
        self.zk.lock().unwrap().reap(REAP_INTERVAL_MS);
    }

    async fn resume(&mut self) {
        let mut zk = self.zk.lock().unwrap();
        let now = zk.now();
        if let Some(job) = zk.job.as_mut() {
            if job.paused {
                job.paused = false;
                if let Some((_, resumed)) = zk.journal.pauses.last_mut() {
                    *resumed = Some(now);
                }
                zk.journal.acts.push((now, "job resumed".into()));
            }
        }
    }

    /// One act of the world.
    async fn act(&mut self, dead_until: &mut [Option<Instant>]) {
        let id = self.rng.random_range(0..self.nodes.len());
        match self.rng.random_range(0..20) {
            0..=1 => {
                let mut zk = self.zk.lock().unwrap();
                let now = zk.now();
                if zk.job_exists() {
                    let job = zk.job.as_mut().expect("exists");
                    if !job.paused {
                        job.paused = true;
                        job.had_children = true;
                        zk.journal.pauses.push((now, None));
                        zk.journal.acts.push((now, "job paused".into()));
                    }
                }
            }
            2..=3 => self.resume().await,
            4..=5 => {
                let mut zk = self.zk.lock().unwrap();
                if zk.job_exists() {
                    let now = zk.now();
                    let name = format!("trigger-{:010}", zk.next_seq());
                    let job = zk.job.as_mut().expect("exists");
                    job.triggers.insert(name.clone());
                    job.had_children = true;
                    zk.journal.acts.push((now, format!("{name} requested")));
                    zk.journal.triggers.push((name, now));
                }
            }
            6 => self.reset_or_remove(false).await,
            7 => self.reset_or_remove(true).await,
            8..=9 => {
                let at = self.rng.random_range(0..self.snapshots.len());
                let data = self.snapshots[at].clone();
                let mut zk = self.zk.lock().unwrap();
                let now = zk.now();
                if let Some(job) = zk.job.as_mut() {
                    job.data = data.clone();
                    job.version += 1;
                    job.mtime = now;
                    let shown = String::from_utf8_lossy(&data).into_owned();
                    drop(zk);
                    self.note(format!("record restored to snapshot {at}: `{shown}`"));
                }
            }
            10..=11 if dead_until[id].is_none() => {
                let session = self.nodes[id].kill();
                let back = Duration::from_millis(self.rng.random_range(500..=8_000));
                dead_until[id] = Some(Instant::now() + back);
                self.note(format!("node {id} killed, back in {back:?}"));
                self.expire_later(session, SESSION_TIMEOUT);
            }
            12..=13 if dead_until[id].is_none() => {
                let frozen = Duration::from_millis(self.rng.random_range(200..=2 * SESSION_TIMEOUT.as_millis() as u64));
                *self.nodes[id].frozen_until.lock().unwrap() = Some(Instant::now() + frozen);
                self.note(format!("node {id} paused for {frozen:?}"));
                if frozen > SESSION_TIMEOUT {
                    self.expire_later(self.nodes[id].session_id(), SESSION_TIMEOUT);
                }
            }
            14 if dead_until[id].is_none() => {
                let session = self.nodes[id].session_id();
                self.note(format!("node {id}'s session expires"));
                self.zk.lock().unwrap().expire(session);
            }
            15 => {
                let step = offset(&mut self.rng);
                *self.nodes[id].offset_ms.lock().unwrap() += step;
                self.note(format!("node {id}'s clock steps by {step} ms"));
            }
            _ => {}
        }
    }

    fn expire_later(&self, session: u64, after: Duration) {
        let zk = self.zk.clone();
        tokio::spawn(async move {
            sleep(after).await;
            zk.lock().unwrap().expire(session);
        });
    }

    /// `zklock jobs reset` or `jobs remove`, under the job's lock, as control.rs does them.
    async fn reset_or_remove(&mut self, remove: bool) {
        let session = {
            let mut zk = self.zk.lock().unwrap();
            if !zk.job_exists() {
                return;
            }
            zk.open_session()
        };
        let ticket = self.zk.lock().unwrap().enqueue(session).expect("a live session");
        let deadline = Instant::now() + Duration::from_secs(5);
        let mut changes = self.zk.lock().unwrap().changes();
        loop {
            if self.zk.lock().unwrap().granted(ticket) {
                break;
            }
            tokio::select! {
                biased;
                _ = changes.changed() => {}
                () = tokio::time::sleep_until(deadline) => {
                    let mut zk = self.zk.lock().unwrap();
                    zk.release(ticket);
                    zk.expire(session);
                    return;
                }
            }
        }
        let tombstones = !self.scenario.defects.no_tombstones;
        let mut zk = self.zk.lock().unwrap();
        let now = zk.now();
        let before = zk
            .job
            .as_ref()
            .and_then(|job| job.record().ok().flatten())
            .map(|r| r.tick);
        if let Some(job) = zk.job.as_mut() {
            let state = if remove { RunState::Removed } else { RunState::Reset };
            let mut tombstone = TickRecord::next(None, now, state, Some(session as i64), job.version);
            tombstone.version = None;
            if remove && !tombstones {
                zk.job = None;
            } else {
                job.data = if tombstones { tombstone.encode() } else { Vec::new() };
                job.version += 1;
                job.mtime = now;
                job.history.clear();
                if remove {
                    job.has_history = false;
                    job.paused = false;
                    job.triggers.clear();
                    job.runs.clear();
                    job.replace.clear();
                }
            }
            zk.journal.cleared.push((now, before, remove));
            if let Some((_, resumed)) = zk
                .journal
                .pauses
                .last_mut()
                .filter(|(_, resumed)| remove && resumed.is_none())
            {
                *resumed = Some(now);
            }
        }
        zk.release(ticket);
        zk.expire(session);
        let mut what = String::new();
        let _ = write!(what, "job {}", if remove { "removed" } else { "reset" });
        zk.journal.acts.push((now, what));
    }
}
