//! The leader-election workload of the chaos run (`chaos leader`): member processes, each
//! through its own fault proxies in front of a 3-member ensemble, run
//! [`Election::serve`](zklock::Election::serve) on one group. The leader's body writes to the
//! fenced register ([`super::register`]) every 50 ms with its term's fencing token, as a
//! leader guarding a resource would: a `claim` when the term starts, `write`s, a `done` when
//! it hands over. Some terms (`late_percent`) leave a writer behind that keeps writing with the
//! old token for two seconds after the term ended (`late` writes), as a leader whose worker was
//! not stopped would; the register must refuse them once a newer leader has written.
//!
//! Faults, one round of each kind and then shuffled rounds until the duration is over: the
//! leader's process killed (SIGKILL, then started again), the leader partitioned (every proxy
//! of its process blackholed until another member leads, i.e. its session expired, then
//! healed), the leader paused (SIGSTOP until another member leads, then SIGCONT), the
//! ensemble's own leader killed and restarted, and the leader shut down gracefully
//! ([`LeaderService::shutdown`](zklock::LeaderService::shutdown), after which the member joins
//! again). The leader is the member whose term the processes report open with the highest
//! token, confirmed by [`Election::leader`](zklock::Election::leader) read by the runner.
//!
//! The history ([`LeaderHistory`]) holds every term (member, token, when gained, how and when
//! it ended), every register write (accepted or refused, in the register's order) and every
//! fault. The checker ([`check_leader`]) is a pure function of it; see [`LeaderReport`] for
//! what it checks.

use std::io::{BufRead, BufReader, Write as _};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use zklock::testing::{FaultProxy, ZkEnsemble};
use zklock::{Election, FencingToken, LockClient};

use super::clock::{ms_between, now_ns};
use super::history::{Token, WriteRecord};
use super::register::Register;
use super::runner::ChildCommand;

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// The election group every member joins; also the register slot its leaders write to.
pub const GROUP: &str = "leader";
/// The namespace the members' clients use.
const NAMESPACE: &str = "/zklock-chaos-leader";
/// How a member process marks the lines the runner reads.
const LINE_PREFIX: &str = "ZKLOCK-CHAOS-LEADER ";
/// The environment variable naming a member process's index; set only for member processes.
pub const MEMBER_ENV: &str = "ZKLOCK_CHAOS_LEADER_MEMBER";
/// How often a leader writes.
const WRITE_EVERY: Duration = Duration::from_millis(50);
/// How long a term's late writer keeps writing after the term ended.
const LATE_FOR: Duration = Duration::from_secs(2);
/// The grace period of a graceful shutdown.
const HANDOVER_GRACE: Duration = Duration::from_secs(2);
/// The ensemble's `syncLimit`, as in the lock workload: with 200 ms ticks and 4 s sessions a
/// leader is told of trouble well before its session can expire.
const SYNC_LIMIT_TICKS: u32 = 5;

// ---------------------------------------------------------------------------------------------
// The history

/// How a term ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TermEnd {
    /// The member saw the loss signal; its body was stopped.
    Lost,
    /// The body returned after a graceful shutdown asked it to (`handing_over`).
    HandedOver,
    /// The body was dropped without a loss or a shutdown (the service itself was dropped).
    Dropped,
    /// The member's process was killed while the term was open (stamped by the runner at the
    /// kill).
    Killed,
    /// Never reported ended before the run stopped.
    Open,
}

/// One term of leadership, as its member reported it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Term {
    /// The member (its index; the participant id is `m<index>`).
    pub member: usize,
    /// Which life of the member's process (it starts again after a kill).
    pub life: usize,
    /// The term's number within that life, from 1.
    pub term: u64,
    /// The term's fencing token.
    pub token: Token,
    /// When the body started (the member was told it leads).
    pub gained_ns: u64,
    /// When the term ended, if it was seen ending.
    pub ended_ns: Option<u64>,
    /// How it ended.
    pub end: TermEnd,
}

/// The kinds of fault the leader workload injects.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LeaderFault {
    /// The leader shut down gracefully (`LeaderService::shutdown`); it joins again at once.
    ShutdownLeader,
    /// The leader's process killed with SIGKILL, then started again.
    KillLeader,
    /// Every proxy of the leader's process blackholed until another member leads, then healed.
    PartitionLeader,
    /// The leader's process stopped with SIGSTOP until another member leads, then continued.
    PauseLeader,
    /// The ensemble's leader killed; restarted once the others serve again.
    EnsembleLeaderKill,
}

impl LeaderFault {
    /// Every kind, in the order of the first round.
    pub const ALL: [LeaderFault; 5] = [
        LeaderFault::ShutdownLeader,
        LeaderFault::KillLeader,
        LeaderFault::PartitionLeader,
        LeaderFault::PauseLeader,
        LeaderFault::EnsembleLeaderKill,
    ];

    /// The snake_case name used in reports.
    pub fn name(self) -> &'static str {
        match self {
            LeaderFault::ShutdownLeader => "shutdown_leader",
            LeaderFault::KillLeader => "kill_leader",
            LeaderFault::PartitionLeader => "partition_leader",
            LeaderFault::PauseLeader => "pause_leader",
            LeaderFault::EnsembleLeaderKill => "ensemble_leader_kill",
        }
    }

    /// Whether the fault is aimed at the election's leader (and so must move leadership).
    pub fn targets_leader(self) -> bool {
        self != LeaderFault::EnsembleLeaderKill
    }
}

/// One injected fault.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LeaderFaultRecord {
    /// What was done.
    pub kind: LeaderFault,
    /// When it began.
    pub injected_ns: u64,
    /// When it was healed (proxies passing, process continued, member restarted, shutdown
    /// returned); the injection for a kill.
    pub healed_ns: u64,
    /// The bound on the time from the injection to the next accepted write of a leader other
    /// than the target, in milliseconds.
    pub bound_ms: u64,
    /// The member the fault was aimed at (the leader), if any.
    pub target: Option<usize>,
    /// The token of the leader's term at the injection, as the runner found it.
    pub leader_token: Option<Token>,
    /// Whether the runner could carry the fault out (a leader was found, the ensemble served
    /// again); whether it had its effect is the checker's to say.
    pub carried_out: bool,
    /// What the runner did, for the summary.
    pub note: String,
}

/// Everything a leader run recorded.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct LeaderHistory {
    /// The members' session timeout: how late a paused member may hear of its loss after it
    /// continues.
    pub session_timeout_ms: u64,
    /// Every term, in the order reported.
    pub terms: Vec<Term>,
    /// Every attempt to write to the register, in its log order.
    pub writes: Vec<WriteRecord>,
    /// Faults, in injection order.
    pub faults: Vec<LeaderFaultRecord>,
    /// When recording ended.
    pub ended_ns: u64,
}

impl LeaderHistory {
    fn end_of(&self, t: &Term) -> u64 {
        t.ended_ns.unwrap_or(self.ended_ns)
    }
}

/// The member index a register client name (`m<index>`) stands for.
fn member_of(client: &str) -> Option<usize> {
    client.strip_prefix('m')?.parse().ok()
}

fn participant(member: usize) -> String {
    format!("m{member}")
}

fn token_of(t: FencingToken) -> Token {
    Token {
        zxid: t.zxid(),
        generation: t.generation(),
    }
}

mod checker;
mod member;

pub use checker::{check_leader, LeaderReport, Recovery};
pub use member::member_main_from_env;

// ---------------------------------------------------------------------------------------------
// The runner

/// Settings of a leader run.
#[derive(Debug, Clone)]
pub struct LeaderConfig {
    /// How long to keep injecting faults (at least one round of every kind).
    pub duration: Duration,
    /// Member processes.
    pub members: usize,
    /// Session timeout of every member (at most 20 ticks).
    pub session_timeout: Duration,
    /// Server tick.
    pub tick_time: Duration,
    /// Seed of the fault order of later rounds and of the members' late writers.
    pub seed: u64,
    /// Share of terms (percent) that leave a late writer behind.
    pub late_percent: u32,
    /// How to start a member process (it runs [`member_main_from_env`]).
    pub child: ChildCommand,
    /// Where to write the history (one JSON document), if anywhere.
    pub history_path: Option<PathBuf>,
    /// Print progress to stderr.
    pub verbose: bool,
}

impl LeaderConfig {
    /// The bound on "another leader writes" after a fault: two session timeouts (a dead
    /// leader's session must expire; an ensemble failover must be noticed) plus 10 s of margin
    /// for a loaded 2-core machine, as in the lock workload.
    pub fn leader_bound(&self) -> Duration {
        self.session_timeout * 2 + Duration::from_secs(10)
    }
}

/// What a leader run produced.
#[derive(Debug)]
pub struct LeaderOutcome {
    /// The recorded history.
    pub history: LeaderHistory,
    /// The checker's verdict.
    pub report: LeaderReport,
}

/// What a member process says.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "event", rename_all = "snake_case")]
enum Said {
    /// Connected; the service runs.
    Ready { member: usize, life: usize },
    /// The body started: this member leads.
    Gained {
        member: usize,
        life: usize,
        term: u64,
        token: Token,
        at_ns: u64,
    },
    /// The term ended.
    Ended {
        member: usize,
        life: usize,
        term: u64,
        at_ns: u64,
        end: TermEnd,
    },
    /// A graceful shutdown returned; the member joins again.
    HandedOver {
        member: usize,
        life: usize,
        called_ns: u64,
        returned_ns: u64,
    },
}

/// What the runner knows of the members, fed by their stdout.
#[derive(Debug, Default)]
struct Observed {
    ready: Vec<(usize, usize)>,
    terms: Vec<Term>,
    /// Graceful shutdowns: member, when it returned.
    handovers: Vec<(usize, u64)>,
}

impl Observed {
    fn record(&mut self, said: Said) {
        match said {
            Said::Ready { member, life } => self.ready.push((member, life)),
            Said::Gained {
                member,
                life,
                term,
                token,
                at_ns,
            } => self.terms.push(Term {
                member,
                life,
                term,
                token,
                gained_ns: at_ns,
                ended_ns: None,
                end: TermEnd::Open,
            }),
            Said::Ended {
                member,
                life,
                term,
                at_ns,
                end,
            } => {
                if let Some(t) = self
                    .terms
                    .iter_mut()
                    .find(|t| t.member == member && t.life == life && t.term == term)
                {
                    t.ended_ns = Some(at_ns);
                    t.end = end;
                }
            }
            Said::HandedOver {
                member, returned_ns, ..
            } => self.handovers.push((member, returned_ns)),
        }
    }

    /// Ends the open terms of one life of a member, as the runner saw it end.
    fn end_open(&mut self, member: usize, life: usize, at_ns: u64, end: TermEnd) {
        for t in self
            .terms
            .iter_mut()
            .filter(|t| t.member == member && t.life == life && t.ended_ns.is_none())
        {
            t.ended_ns = Some(at_ns);
            t.end = end;
        }
    }

    /// Whether some member was told it leads at or after `from`.
    fn gained_since(&self, from: u64) -> bool {
        self.terms.iter().any(|t| t.gained_ns >= from)
    }

    fn term_ended(&self, token: Token) -> bool {
        self.terms.iter().any(|t| t.token == token && t.ended_ns.is_some())
    }
}

#[derive(Debug, Clone, Default)]
struct Shared(Arc<Mutex<Observed>>);

impl Shared {
    fn lock(&self) -> MutexGuard<'_, Observed> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// One member process; SIGCONT + SIGKILL on drop, so none outlives the runner.
struct Member {
    life: usize,
    child: Child,
    stdin: Option<ChildStdin>,
    proxies: Vec<FaultProxy>,
    reader: Option<JoinHandle<()>>,
}

impl Member {
    fn signal(&self, signal: i32) {
        // SAFETY: kill(2) on the pid of a child we spawned and have not reaped.
        unsafe {
            libc::kill(self.child.id() as i32, signal);
        }
    }

    fn send(&mut self, line: &str) {
        if let Some(stdin) = self.stdin.as_mut() {
            let _ = writeln!(stdin, "{line}");
            let _ = stdin.flush();
        }
    }

    fn running(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    /// SIGKILL, reaped, and every line it wrote read.
    fn kill(&mut self) {
        if self.running() {
            self.signal(libc::SIGCONT);
            let _ = self.child.kill();
        }
        let _ = self.child.wait();
        if let Some(reader) = self.reader.take() {
            let _ = reader.join();
        }
    }
}

impl Drop for Member {
    fn drop(&mut self) {
        self.kill();
    }
}

fn spawn_member(
    config: &LeaderConfig,
    index: usize,
    life: usize,
    ensemble: &ZkEnsemble,
    register: &Register,
    shared: &Shared,
) -> Result<Member, BoxError> {
    let proxies = ensemble.proxies()?;
    let mut child = Command::new(&config.child.program)
        .args(&config.child.args)
        .env(MEMBER_ENV, index.to_string())
        .env("ZKLOCK_CHAOS_LEADER_LIFE", life.to_string())
        .env("ZKLOCK_CHAOS_LEADER_CONNECT", ensemble.connect_string_via(&proxies))
        .env("ZKLOCK_CHAOS_LEADER_REGISTER", register.addr().to_string())
        .env(
            "ZKLOCK_CHAOS_LEADER_SESSION_MS",
            config.session_timeout.as_millis().to_string(),
        )
        .env("ZKLOCK_CHAOS_LEADER_LATE_PERCENT", config.late_percent.to_string())
        .env(
            "ZKLOCK_CHAOS_LEADER_SEED",
            config
                .seed
                .wrapping_add((index as u64) << 32)
                .wrapping_add(life as u64)
                .to_string(),
        )
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()?;
    let stdin = child.stdin.take();
    let stdout = child.stdout.take().ok_or("no stdout")?;
    let shared = shared.clone();
    let reader = thread::Builder::new()
        .name(format!("chaos-leader-{index}"))
        .spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { return };
                // The prefix may follow other output on the line (a test harness's `test …`).
                let Some(at) = line.find(LINE_PREFIX) else { continue };
                match serde_json::from_str::<Said>(&line[at + LINE_PREFIX.len()..]) {
                    Ok(said) => shared.lock().record(said),
                    Err(e) => eprintln!("chaos leader: unreadable line from member {index}: {e}: {line}"),
                }
            }
        })?;
    Ok(Member {
        life,
        child,
        stdin,
        proxies,
        reader: Some(reader),
    })
}

/// One run: the ensemble, the register, the members and what they said.
/// Fields drop in order: the members are killed before the ensemble and the register go.
struct Run<'a> {
    members: Vec<Member>,
    election: Election,
    observer: LockClient,
    rt: tokio::runtime::Runtime,
    register: Register,
    ensemble: ZkEnsemble,
    shared: Shared,
    config: &'a LeaderConfig,
    t0: u64,
}

impl Run<'_> {
    fn say(&self, what: impl AsRef<str>) {
        if self.config.verbose {
            eprintln!(
                "[leader {:>7.1}s] {}",
                ms_between(self.t0, now_ns()) as f64 / 1000.0,
                what.as_ref()
            );
        }
    }

    /// Polls `done` every 50 ms for up to `within`; whether it came true.
    fn wait_until(&self, within: Duration, done: impl Fn(&Observed) -> bool) -> bool {
        let deadline = Instant::now() + within;
        loop {
            if done(&self.shared.lock()) {
                return true;
            }
            if Instant::now() > deadline {
                return false;
            }
            thread::sleep(Duration::from_millis(50));
        }
    }

    /// The leader: the open term with the highest token among the members' current lives,
    /// confirmed by the group's leader node in ZooKeeper. `None` if none is found, other than
    /// the term `not`, within `within`.
    fn find_leader(&self, not: Option<Token>, within: Duration) -> Option<(usize, Token)> {
        let deadline = Instant::now() + within;
        loop {
            let reported = {
                let o = self.shared.lock();
                o.terms
                    .iter()
                    .filter(|t| t.ended_ns.is_none() && self.members[t.member].life == t.life)
                    .max_by_key(|t| t.token)
                    .map(|t| (t.member, t.token))
            };
            if let Some((member, token)) = reported.filter(|(_, t)| Some(*t) != not) {
                let node = self
                    .rt
                    .block_on(async { tokio::time::timeout(Duration::from_secs(2), self.election.leader()).await });
                if let Ok(Ok(Some(node))) = node {
                    if token_of(node.token) == token && node.participant == participant(member) {
                        return Some((member, token));
                    }
                }
            }
            if Instant::now() > deadline {
                return None;
            }
            thread::sleep(Duration::from_millis(100));
        }
    }

    fn respawn(&mut self, member: usize) -> Result<(), BoxError> {
        let life = self.members[member].life + 1;
        let fresh = spawn_member(self.config, member, life, &self.ensemble, &self.register, &self.shared)?;
        self.members[member] = fresh; // the old one was killed and reaped
        Ok(())
    }

    fn inject(&mut self, kind: LeaderFault) -> Result<LeaderFaultRecord, BoxError> {
        let st = self.config.session_timeout;
        let bound = self.config.leader_bound();
        let mut record = LeaderFaultRecord {
            kind,
            injected_ns: now_ns(),
            healed_ns: now_ns(),
            bound_ms: bound.as_millis() as u64,
            target: None,
            leader_token: None,
            carried_out: true,
            note: String::new(),
        };
        let leader = self.find_leader(None, bound);
        if kind.targets_leader() {
            let Some((m, token)) = leader else {
                record.carried_out = false;
                record.note = "no leader found".into();
                return Ok(record);
            };
            record.target = Some(m);
            record.leader_token = Some(token);
        } else {
            record.leader_token = leader.map(|(_, t)| t);
        }
        let expiry = st * 3 + Duration::from_secs(10);
        match kind {
            LeaderFault::ShutdownLeader => {
                let m = record.target.unwrap_or_default();
                record.injected_ns = now_ns();
                self.members[m].send("shutdown");
                let from = record.injected_ns;
                let done = self.wait_until(bound, |o| {
                    o.handovers.iter().any(|&(who, at)| who == m && at >= from) && o.gained_since(from)
                });
                record.healed_ns = self
                    .shared
                    .lock()
                    .handovers
                    .iter()
                    .filter(|&&(who, at)| who == m && at >= from)
                    .map(|&(_, at)| at)
                    .next()
                    .unwrap_or_else(now_ns);
                record.note = format!(
                    "asked m{m} to shut down; {}",
                    if done { "it handed over" } else { "NO hand-over seen" }
                );
            }
            LeaderFault::KillLeader => {
                let m = record.target.unwrap_or_default();
                record.injected_ns = now_ns();
                self.members[m].kill();
                let life = self.members[m].life;
                self.shared
                    .lock()
                    .end_open(m, life, record.injected_ns, TermEnd::Killed);
                record.healed_ns = record.injected_ns;
                self.respawn(m)?;
                record.note = format!("SIGKILLed m{m} (life {life}); started it again");
            }
            LeaderFault::PartitionLeader => {
                let m = record.target.unwrap_or_default();
                let token = record.leader_token.unwrap_or(Token { zxid: 0, generation: 0 });
                record.injected_ns = now_ns();
                for proxy in &self.members[m].proxies {
                    proxy.blackhole();
                }
                let from = record.injected_ns;
                // Healed once another member leads (its session expired) and it saw its loss.
                let expired = self.wait_until(expiry, |o| o.gained_since(from) && o.term_ended(token));
                for proxy in &self.members[m].proxies {
                    proxy.pass();
                }
                record.healed_ns = now_ns();
                record.note = format!(
                    "blackholed m{m} for {} ms{}",
                    ms_between(from, record.healed_ns),
                    if expired {
                        ""
                    } else {
                        " (NO new leader or NO loss seen in time)"
                    }
                );
            }
            LeaderFault::PauseLeader => {
                let m = record.target.unwrap_or_default();
                let token = record.leader_token.unwrap_or(Token { zxid: 0, generation: 0 });
                record.injected_ns = now_ns();
                self.members[m].signal(libc::SIGSTOP);
                let from = record.injected_ns;
                let expired = self.wait_until(expiry, |o| o.gained_since(from));
                // Past the session timeout in any case.
                let past = Duration::from_millis(ms_between(from, now_ns()));
                if past < st {
                    thread::sleep(st - past);
                }
                self.members[m].signal(libc::SIGCONT);
                record.healed_ns = now_ns();
                let told = self.wait_until(st + Duration::from_secs(5), |o| o.term_ended(token));
                record.note = format!(
                    "SIGSTOPped m{m} for {} ms{}{}",
                    ms_between(from, record.healed_ns),
                    if expired { "" } else { " (NO new leader meanwhile)" },
                    if told { "" } else { " (NO loss seen after SIGCONT)" }
                );
            }
            LeaderFault::EnsembleLeaderKill => {
                let zk = self.ensemble.wait_for_quorum(Duration::from_secs(60))?;
                record.injected_ns = now_ns();
                self.ensemble.kill(zk)?;
                let next = self.ensemble.wait_for_quorum(Duration::from_secs(60))?;
                let serving_ns = now_ns();
                self.ensemble.restart(zk)?;
                record.healed_ns = now_ns();
                record.note = format!(
                    "killed ensemble leader {zk}; {next} led the ensemble after {} ms; {zk} rejoined after {} ms",
                    ms_between(record.injected_ns, serving_ns),
                    ms_between(record.injected_ns, record.healed_ns)
                );
            }
        }
        Ok(record)
    }

    /// Ends every member: stdin closed (a graceful shutdown), SIGKILL after a bound.
    fn stop_members(&mut self) {
        for m in &mut self.members {
            m.stdin.take();
        }
        let deadline = Instant::now() + self.config.session_timeout * 2 + Duration::from_secs(10);
        for i in 0..self.members.len() {
            while self.members[i].running() && Instant::now() < deadline {
                thread::sleep(Duration::from_millis(50));
            }
            if self.members[i].running() {
                self.say(format!("m{i} did not exit in time; killing it"));
                let at = now_ns();
                self.members[i].kill();
                let life = self.members[i].life;
                self.shared.lock().end_open(i, life, at, TermEnd::Killed);
            }
            self.members[i].kill(); // reaps it and joins its reader: every line is in
        }
    }
}

/// Runs the leader workload and checks its history.
pub fn run_leader(config: &LeaderConfig) -> Result<LeaderOutcome, BoxError> {
    let t0 = now_ns();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()?;
    let ensemble = ZkEnsemble::builder(3)
        .tick_time(config.tick_time)
        .sync_limit(SYNC_LIMIT_TICKS)
        .system_property("zookeeper.fastleader.maxNotificationInterval", "1000")
        .start_timeout(Duration::from_secs(90))
        .start()?;
    let register = Register::start()?;
    let shared = Shared::default();
    let observer = rt.block_on(
        LockClient::builder(ensemble.connect_string())
            .namespace(NAMESPACE)
            .session_timeout(Duration::from_secs(10))
            .identity("chaos-runner")
            .connect(),
    )?;
    let election = observer.election(GROUP)?;
    let mut run = Run {
        config,
        ensemble,
        register,
        shared,
        members: Vec::new(),
        rt,
        observer,
        election,
        t0,
    };
    run.say(format!("ensemble up: {}", run.ensemble.connect_string()));
    for index in 0..config.members {
        let member = spawn_member(config, index, 0, &run.ensemble, &run.register, &run.shared)?;
        run.members.push(member);
    }
    let members = config.members;
    if !run.wait_until(Duration::from_secs(90), |o| o.ready.len() >= members) {
        return Err("the members did not start within 90 s".into());
    }
    let Some((first, token)) = run.find_leader(None, Duration::from_secs(60)) else {
        return Err("no leader within 60 s of the members' start".into());
    };
    run.say(format!("{members} members running; m{first} leads with token {token}"));
    thread::sleep(Duration::from_secs(1));

    let mut rng = config.seed.wrapping_mul(0x2545_F491_4F6C_DD1D) | 1;
    let mut next = || {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        rng
    };
    let started = Instant::now();
    let mut faults = Vec::new();
    let mut round = 0;
    loop {
        let mut kinds = LeaderFault::ALL.to_vec();
        if round > 0 {
            for i in (1..kinds.len()).rev() {
                kinds.swap(i, (next() % (i as u64 + 1)) as usize);
            }
        }
        for kind in kinds {
            let record = run.inject(kind)?;
            run.say(format!("{}: {}", kind.name(), record.note));
            let hit = record.leader_token.filter(|_| kind.targets_leader());
            faults.push(record);
            match run.find_leader(hit, config.leader_bound()) {
                Some((m, token)) => run.say(format!("m{m} leads with token {token}")),
                None => run.say("NO leader within the bound"),
            }
            thread::sleep(Duration::from_millis(1000 + next() % 500));
        }
        round += 1;
        if started.elapsed() >= config.duration {
            break;
        }
    }

    run.say("stopping the members");
    run.stop_members();
    let ended_ns = now_ns();
    run.rt.block_on(run.observer.close());
    let mut history = LeaderHistory {
        session_timeout_ms: config.session_timeout.as_millis() as u64,
        terms: std::mem::take(&mut run.shared.lock().terms),
        writes: run.register.log(),
        faults,
        ended_ns,
    };
    history.terms.sort_by_key(|t| t.gained_ns);
    if let Some(path) = &config.history_path {
        write_leader_history(path, &history)?;
        run.say(format!("history written to {}", path.display()));
    }
    let report = check_leader(&history);
    Ok(LeaderOutcome { history, report })
}

/// Writes a history as one JSON document.
pub fn write_leader_history(path: &Path, history: &LeaderHistory) -> Result<(), BoxError> {
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent)?;
    }
    let out = std::io::BufWriter::new(std::fs::File::create(path)?);
    serde_json::to_writer(out, history)?;
    Ok(())
}

/// Reads a history written by [`write_leader_history`], to check it again.
pub fn read_leader_history(path: &Path) -> Result<LeaderHistory, BoxError> {
    Ok(serde_json::from_str(&std::fs::read_to_string(path)?)?)
}
