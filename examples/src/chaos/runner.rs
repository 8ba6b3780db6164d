//! The chaos runner: ensemble, register, contender processes, fault schedule, history.

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Write};
use std::path::PathBuf;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread;
use std::time::{Duration, Instant};

use zklock::testing::{FaultProxy, ZkEnsemble};
use zklock::{zk, RevokeOutcome};

use super::checker::{check, Report};
use super::clock::{ms_between, now_ns};
use super::contender::{ContenderConfig, SHORT_HOLD_CHAIN};
use super::curator::CuratorContender;
use super::history::{
    AcquireFailure, CloseRecord, Event, FaultKind, FaultRecord, History, Part, Section, Token, EVENT_PREFIX, LOCK,
    LOCK_B,
};
use super::operator;
use super::register::Register;

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// How to start a contender process: a program and its arguments; the configuration travels
/// in environment variables ([`ContenderConfig::to_env`]).
#[derive(Debug, Clone)]
pub struct ChildCommand {
    /// The executable.
    pub program: PathBuf,
    /// Its arguments.
    pub args: Vec<String>,
}

/// Settings of a run.
#[derive(Debug, Clone)]
pub struct RunConfig {
    /// How long to keep injecting faults (at least one round of every kind is injected).
    pub duration: Duration,
    /// Contender processes.
    pub processes: usize,
    /// Contender tasks on the main lock per process (plus one on the second lock and one
    /// multi-lock task).
    pub tasks_per_process: usize,
    /// Session timeout of every contender (the server clamps it to 2..20 ticks).
    pub session_timeout: Duration,
    /// Server tick.
    pub tick_time: Duration,
    /// Seed of the fault schedule and of the contenders' choices.
    pub seed: u64,
    /// Share of sections (percent) that ignore the loss signal and keep writing.
    pub misbehave_percent: u32,
    /// The main lock's lock-delay (zero: none).
    pub lock_delay: Duration,
    /// Sections other than the long ones the faults ask for are a claim and an end only: holds
    /// of milliseconds, handed from task to task of a process.
    pub short_holds: bool,
    /// Lock caching: the even-numbered contender processes keep an idle lock this long
    /// (`default_cache`), beside processes that do not; `None`: nobody caches.
    pub cache: Option<Duration>,
    /// A Curator contender ([`super::curator`]) takes the main lock too, between the zklock
    /// processes' holds (idle around the delete, revoke and reap faults).
    pub curator: bool,
    /// How to start a contender process.
    pub child: ChildCommand,
    /// Where to write the history as JSON lines, if anywhere.
    pub history_path: Option<PathBuf>,
    /// Print progress to stderr.
    pub verbose: bool,
}

impl RunConfig {
    /// The bound on "granted again after a fault": two session timeouts (a dead holder's
    /// session must expire; a whole ensemble restart or failover must be noticed and every
    /// session re-established), the lock-delay a vanished holder leaves behind, plus 10 s of
    /// margin for a loaded 2-core machine. With short holds, plus one whole chain of local
    /// handoffs: the fault's target may take the lock first once it is back, and others wait
    /// for its chain to end (the fairness bound `max_local_handoffs` gives).
    pub fn availability_bound(&self) -> Duration {
        let chain = if self.short_holds {
            SHORT_HOLD_CHAIN
        } else {
            Duration::ZERO
        };
        self.session_timeout * 2 + self.lock_delay + chain + Duration::from_secs(10)
    }
}

/// What a run produced.
#[derive(Debug)]
pub struct Outcome {
    /// The recorded history.
    pub history: History,
    /// The checker's verdict.
    pub report: Report,
}

/// A section granted and not yet reported ended.
#[derive(Debug, Clone)]
struct Open {
    process: usize,
    lock: String,
    second: Option<Part>,
    granted_ns: u64,
    long: bool,
}

impl Open {
    fn holds_main(&self) -> bool {
        self.lock == LOCK || self.second.as_ref().is_some_and(|p| p.lock == LOCK)
    }
}

/// What the runner knows about the contenders, fed by their stdout.
#[derive(Debug, Default)]
struct Observed {
    sections: Vec<Section>,
    open: HashMap<(String, Token), Open>,
    /// Grants of the main lock: when, to which process.
    grants: Vec<(u64, usize)>,
    attempts: u64,
    ready: Vec<usize>,
    exited: Vec<usize>,
    release_failures: u64,
    failures: Vec<AcquireFailure>,
    closes: Vec<CloseRecord>,
    /// `MultiWaiting` reports: when, process, task.
    multi_waiting: Vec<(u64, usize, String)>,
}

#[derive(Debug, Clone, Default)]
struct Shared(Arc<Mutex<Observed>>);

impl Shared {
    fn lock(&self) -> MutexGuard<'_, Observed> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// One contender process; SIGCONT + SIGKILL on drop, so none outlives the runner.
#[derive(Debug)]
struct Contender {
    index: usize,
    child: Child,
    stdin: Option<ChildStdin>,
    proxies: Vec<FaultProxy>,
    reader: Option<thread::JoinHandle<()>>,
}

impl Contender {
    fn pid(&self) -> i32 {
        self.child.id() as i32
    }

    /// Blackholes every proxy of this process for `outage`, then heals them, and records the
    /// times in `record` (unavailability is measured from the cut).
    fn cut_off_for(&self, outage: Duration, record: &mut FaultRecord) {
        record.injected_ns = now_ns();
        for proxy in &self.proxies {
            proxy.blackhole();
        }
        thread::sleep(outage);
        for proxy in &self.proxies {
            proxy.pass();
        }
        record.healed_ns = now_ns();
        record.measure_from_ns = record.injected_ns;
    }

    fn send(&mut self, line: &str) {
        if let Some(stdin) = self.stdin.as_mut() {
            let _ = writeln!(stdin, "{line}");
            let _ = stdin.flush();
        }
    }

    fn signal(&self, signal: i32) {
        // SAFETY: kill(2) on the pid of a child we spawned and have not reaped.
        unsafe {
            libc::kill(self.pid(), signal);
        }
    }
}

impl Drop for Contender {
    fn drop(&mut self) {
        if self.child.try_wait().ok().flatten().is_none() {
            self.signal(libc::SIGCONT);
            let _ = self.child.kill();
        }
        let _ = self.child.wait();
        if let Some(reader) = self.reader.take() {
            let _ = reader.join();
        }
    }
}

/// Progress output.
struct Log {
    verbose: bool,
    t0: u64,
}

impl Log {
    fn say(&self, what: impl AsRef<str>) {
        if self.verbose {
            eprintln!(
                "[chaos {:>7.1}s] {}",
                ms_between(self.t0, now_ns()) as f64 / 1000.0,
                what.as_ref()
            );
        }
    }
}

const NAMESPACE: &str = "/zklock-chaos";
/// The bound on a closed client's waiters ending (from the `close()` call) and on its holders
/// seeing the loss signal (from its return).
const CLOSE_BOUND: Duration = Duration::from_secs(3);
/// The ensemble's `syncLimit`: with the default 200 ms tick and 4 s sessions the loss-timing
/// precondition holds (4 s > 5 × 200 ms + 1 s `loss_after` + 2 s margin).
const SYNC_LIMIT_TICKS: u32 = 5;

/// Runs the whole experiment and checks its history.
pub fn run(config: &RunConfig) -> Result<Outcome, BoxError> {
    let log = Log {
        verbose: config.verbose,
        t0: now_ns(),
    };
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    let ensemble = ZkEnsemble::builder(3)
        .tick_time(config.tick_time)
        .sync_limit(SYNC_LIMIT_TICKS)
        .partitionable()
        .system_property("znode.container.checkIntervalMs", "100")
        // A whole-ensemble restart elects a leader in seconds, not after minute-long backoffs.
        .system_property("zookeeper.fastleader.maxNotificationInterval", "1000")
        .start_timeout(Duration::from_secs(90))
        .start()?;
    log.say(format!("ensemble up: {}", ensemble.connect_string()));
    let register = Register::start()?;
    let shared = Shared::default();
    let mut rng = config.seed.wrapping_mul(0x2545_F491_4F6C_DD1D) | 1;
    let mut contenders = Vec::new();
    for p in 0..config.processes {
        contenders.push(spawn_contender(config, p, &ensemble, &register, &shared)?);
    }
    let deadline = Instant::now() + Duration::from_secs(90);
    while shared.lock().ready.len() < config.processes || shared.lock().grants.is_empty() {
        if Instant::now() > deadline {
            return Err("contenders did not start and take the lock within 90 s".into());
        }
        thread::sleep(Duration::from_millis(50));
    }
    log.say(format!(
        "{} contender processes x {} tasks running",
        config.processes, config.tasks_per_process
    ));
    let curator = if config.curator {
        let shared = shared.clone();
        let contender = CuratorContender::start(
            &ensemble.connect_string(),
            &format!("{NAMESPACE}/{LOCK}"),
            register.addr(),
            config.session_timeout,
            config.processes,
            config.seed,
            move |section| shared.lock().sections.push(section),
        )?;
        log.say("a Curator contender running");
        Some(contender)
    } else {
        None
    };
    thread::sleep(Duration::from_secs(2));

    let started = Instant::now();
    let mut faults = Vec::new();
    let mut round = 0usize;
    loop {
        let mut kinds = FaultKind::ALL.to_vec();
        if round > 0 {
            // Later rounds shuffle the order (Fisher-Yates on the run's seed).
            for i in (1..kinds.len()).rev() {
                rng ^= rng << 13;
                rng ^= rng >> 7;
                rng ^= rng << 17;
                kinds.swap(i, (rng % (i as u64 + 1)) as usize);
            }
        }
        for kind in kinds {
            // These act on whoever holds the lock's first node, or need its directory empty.
            let quiet = curator.as_ref().filter(|_| {
                matches!(
                    kind,
                    FaultKind::RevokeHolder | FaultKind::DeleteHolderNode | FaultKind::ReapDir
                )
            });
            if let Some(c) = quiet {
                if !c.idle(Duration::from_secs(90)) {
                    return Err("the Curator contender did not go idle within 90 s".into());
                }
            }
            let record = inject(kind, config, &ensemble, &mut contenders, &shared, &rt, &log);
            if let Some(c) = quiet {
                c.go();
            }
            let record = record?;
            log.say(format!("{}: {}", kind.name(), record.note));
            let measure_from = record.measure_from_ns;
            let target = record.target_process;
            faults.push(record);
            wait_for_grant(&shared, measure_from, target, config.availability_bound());
            thread::sleep(Duration::from_millis(1000 + (rng % 1000)));
        }
        round += 1;
        if started.elapsed() >= config.duration {
            break;
        }
    }

    if let Some(c) = curator {
        let sections = c.stop()?;
        log.say(format!("the Curator contender stopped after {sections} sections"));
    }
    log.say("stopping contenders");
    for c in &mut contenders {
        c.send("go");
        c.send("stop");
    }
    let exit_deadline = Instant::now() + config.session_timeout * 3 + Duration::from_secs(20);
    for c in &mut contenders {
        loop {
            match c.child.try_wait() {
                Ok(Some(_)) | Err(_) => break,
                Ok(None) if Instant::now() > exit_deadline => {
                    log.say(format!("contender {} did not exit in time; killing it", c.index));
                    c.signal(libc::SIGCONT);
                    let _ = c.child.kill();
                    let _ = c.child.wait();
                    break;
                }
                Ok(None) => thread::sleep(Duration::from_millis(50)),
            }
        }
    }
    drop(contenders); // joins the stdout readers: every event is in
    let ended_ns = now_ns();

    let (leaked_names, leaked) = rt.block_on(leaked_nodes(&ensemble.connect_string(), config.session_timeout))?;
    log.say(format!("leaked nodes: {leaked}"));

    let mut observed = std::mem::take(&mut *shared.lock());
    for ((client, token), open) in observed.open.drain() {
        observed.sections.push(Section {
            client,
            process: open.process,
            lock: open.lock,
            token,
            second: open.second,
            lost_at_grant: false,
            granted_ns: open.granted_ns,
            start_ns: open.granted_ns,
            end_ns: ended_ns,
            lost: false,
            lost_ns: None,
            misbehaving: false,
            long: open.long,
            writes_attempted: 0,
            writes_rejected: 0,
            complete: false,
            revoked: false,
        });
    }
    observed.sections.sort_by_key(|s| s.granted_ns);
    let history = History {
        sections: observed.sections,
        writes: register.log(),
        faults,
        closes: observed.closes,
        acquire_failures: observed.failures,
        acquire_attempts: observed.attempts,
        leaked_nodes: leaked,
        leaked_node_names: leaked_names,
        ended_ns,
        lock_delay_ms: config.lock_delay.as_millis() as u64,
    };
    if let Some(path) = &config.history_path {
        write_history(path, &history)?;
        log.say(format!("history written to {}", path.display()));
    }
    if observed.release_failures > 0 {
        log.say(format!("{} releases returned an error", observed.release_failures));
    }
    let report = check(&history);
    Ok(Outcome { history, report })
}

fn spawn_contender(
    config: &RunConfig,
    index: usize,
    ensemble: &ZkEnsemble,
    register: &Register,
    shared: &Shared,
) -> Result<Contender, BoxError> {
    let proxies = ensemble.proxies()?;
    let contender = ContenderConfig {
        process: index,
        tasks: config.tasks_per_process,
        connect: ensemble.connect_string_via(&proxies),
        register: register.addr().to_string(),
        session_timeout: config.session_timeout,
        namespace: NAMESPACE.into(),
        lock: LOCK.into(),
        lock_b: LOCK_B.into(),
        acquire_timeout: config.session_timeout + Duration::from_secs(1),
        multi_timeout: config.session_timeout * 3 + Duration::from_secs(3),
        misbehave_percent: config.misbehave_percent,
        lock_delay: config.lock_delay,
        short_holds: config.short_holds,
        cache: config.cache.filter(|_| index.is_multiple_of(2)).unwrap_or_default(),
        // Both places a client's sessions can run, under every fault kind: a thread of its own
        // (processes 0, 3, 4, 7, …) and the process's own runtime (1, 2, 5, 6, …). Beside the
        // cache on even processes, four processes cover the four pairings.
        on_caller_runtime: (index + index / 2) % 2 == 1,
        seed: config.seed.wrapping_add(index as u64 * 7919),
    };
    let mut child = Command::new(&config.child.program)
        .args(&config.child.args)
        .envs(contender.to_env())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()?;
    let stdin = child.stdin.take();
    let stdout = child.stdout.take().ok_or("no stdout")?;
    let shared = shared.clone();
    let reader = thread::Builder::new()
        .name(format!("chaos-events-{index}"))
        .spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { return };
                // The prefix may follow other output on the same line (a test harness's
                // `test name ... ` has no newline).
                let Some(at) = line.find(EVENT_PREFIX) else { continue };
                let json = &line[at + EVENT_PREFIX.len()..];
                match serde_json::from_str::<Event>(json) {
                    Ok(event) => record(&shared, event),
                    Err(e) => eprintln!("chaos: unreadable event from contender {index}: {e}: {json}"),
                }
            }
        })?;
    Ok(Contender {
        index,
        child,
        stdin,
        proxies,
        reader: Some(reader),
    })
}

fn record(shared: &Shared, event: Event) {
    let mut o = shared.lock();
    match event {
        Event::Ready { process } => o.ready.push(process),
        Event::Granted {
            client,
            process,
            lock,
            token,
            second,
            granted_ns,
            long,
        } => {
            o.attempts += 1;
            let open = Open {
                process,
                lock,
                second,
                granted_ns,
                long,
            };
            if open.holds_main() {
                o.grants.push((granted_ns, process));
            }
            o.open.insert((client, token), open);
        }
        Event::Section(section) => {
            o.open.remove(&(section.client.clone(), section.token));
            o.sections.push(section);
        }
        Event::AcquireFailed(failure) => {
            o.attempts += 1;
            o.failures.push(failure);
        }
        Event::Closed(close) => o.closes.push(close),
        Event::MultiWaiting {
            process, client, at_ns, ..
        } => o.multi_waiting.push((at_ns, process, client)),
        Event::ReleaseFailed { .. } => o.release_failures += 1,
        Event::Exit { process, .. } => o.exited.push(process),
    }
}

/// Waits until someone outside `target` is granted the main lock at or after `from`, bounded.
fn wait_for_grant(shared: &Shared, from: u64, target: Option<usize>, bound: Duration) -> bool {
    let deadline = Instant::now() + bound;
    loop {
        if shared
            .lock()
            .grants
            .iter()
            .any(|&(at, p)| at >= from && Some(p) != target)
        {
            return true;
        }
        if Instant::now() > deadline {
            return false;
        }
        thread::sleep(Duration::from_millis(20));
    }
}

/// Asks contender process `process` for a long section and waits (up to 20 s) until it holds
/// the main lock in one; falls back to whoever holds the main lock then, or within 10 s more.
/// Returns the holder's process and task name.
fn pick_holder(shared: &Shared, contenders: &mut [Contender], process: usize) -> Option<(usize, String)> {
    send_to(contenders, process, "long");
    let deadline = Instant::now() + Duration::from_secs(20);
    // Past the deadline (the process asked may not get the lock for a while on a loaded
    // machine: its waits time out behind other processes' chains), whoever holds the main lock
    // will do; between two holds nobody does, so look for a while more.
    let given_up = deadline + Duration::from_secs(10);
    loop {
        {
            let o = shared.lock();
            let long = o
                .open
                .iter()
                .find(|(_, open)| open.process == process && open.long && open.holds_main());
            if let Some(((client, _), open)) = long {
                let holder = (open.process, client.clone());
                drop(o);
                // Let it get going: claimed the register, writing.
                thread::sleep(Duration::from_millis(300));
                return Some(holder);
            }
            if Instant::now() > deadline {
                let mut open: Vec<_> = o.open.iter().filter(|(_, open)| open.holds_main()).collect();
                open.sort_by_key(|(_, open)| std::cmp::Reverse(open.granted_ns));
                let holder = open.first().map(|((client, _), open)| (open.process, client.clone()));
                if holder.is_some() || Instant::now() > given_up {
                    return holder;
                }
            }
        }
        thread::sleep(Duration::from_millis(5));
    }
}

/// The holder an operator fault acts on: a long section asked for ([`pick_holder`]), or with
/// short holds whoever holds the main lock now early in a chain of local handoffs (a node
/// handed over at most [`YOUNG_CHAIN`] times), so that most of the chain's
/// [`SHORT_HOLD_HANDOFFS`](super::contender::SHORT_HOLD_HANDOFFS) are still ahead: a chain that never hears of the fault would go on
/// for seconds past it, where the checker sees it.
fn pick_target(config: &RunConfig, shared: &Shared, contenders: &mut [Contender]) -> Option<(usize, String)> {
    if !config.short_holds {
        return pick_holder(shared, contenders, next_target(contenders.len()));
    }
    wait_for(shared, Duration::from_secs(30), |o| {
        o.open
            .iter()
            .filter(|((_, token), open)| open.lock == LOCK && (1..=YOUNG_CHAIN).contains(&token.generation))
            .max_by_key(|(_, open)| open.granted_ns)
            .map(|((client, _), open)| (open.process, client.clone()))
    })
}

/// The most handoffs a node may have had when a short-holds fault picks its holder: a small
/// part of [`SHORT_HOLD_HANDOFFS`](super::contender::SHORT_HOLD_HANDOFFS).
const YOUNG_CHAIN: u32 = 20;

/// The process and client whose open section holds the main lock's node created at `zxid`.
fn holder_of(shared: &Shared, zxid: i64) -> Option<(usize, String)> {
    let observed = shared.lock();
    observed.open.iter().find_map(|((client, token), open)| {
        let main = if open.lock == LOCK {
            Some(*token)
        } else {
            open.second
                .as_ref()
                .filter(|part| part.lock == LOCK)
                .map(|part| part.token)
        };
        main.filter(|t| t.zxid == zxid).map(|_| (open.process, client.clone()))
    })
}

fn send_to(contenders: &mut [Contender], process: usize, line: &str) {
    if let Some(c) = contenders.iter_mut().find(|c| c.index == process) {
        c.send(line);
    }
}

/// Polls `find` on what the contenders reported every 5 ms until it answers, for up to `bound`.
fn wait_for<T>(shared: &Shared, bound: Duration, find: impl Fn(&Observed) -> Option<T>) -> Option<T> {
    let deadline = Instant::now() + bound;
    loop {
        if let Some(found) = find(&shared.lock()) {
            return Some(found);
        }
        if Instant::now() > deadline {
            return None;
        }
        thread::sleep(Duration::from_millis(5));
    }
}

fn inject(
    kind: FaultKind,
    config: &RunConfig,
    ensemble: &ZkEnsemble,
    contenders: &mut [Contender],
    shared: &Shared,
    rt: &tokio::runtime::Runtime,
    log: &Log,
) -> Result<FaultRecord, BoxError> {
    let bound_ms = config.availability_bound().as_millis() as u64;
    let st = config.session_timeout;
    let outage = st + st / 2 + Duration::from_secs(1);
    let mut record = FaultRecord {
        kind,
        injected_ns: 0,
        healed_ns: 0,
        measure_from_ns: 0,
        bound_ms,
        target_process: None,
        target_client: None,
        effective: true,
        successor_zxid: None,
        node_zxid: None,
        note: String::new(),
    };
    match kind {
        FaultKind::LeaderKill => {
            let leader = ensemble.wait_for_quorum(Duration::from_secs(60))?;
            record.injected_ns = now_ns();
            ensemble.kill(leader)?;
            let new_leader = ensemble.wait_for_quorum(Duration::from_secs(60))?;
            let quorum_ns = now_ns();
            ensemble.restart(leader)?;
            record.healed_ns = now_ns();
            record.measure_from_ns = record.injected_ns;
            record.note = format!(
                "killed leader {leader}; member {new_leader} led after {} ms; old leader rejoined after {} ms",
                ms_between(record.injected_ns, quorum_ns),
                ms_between(record.injected_ns, record.healed_ns)
            );
        }
        FaultKind::PartitionHolder => {
            let Some((p, client)) = pick_holder(shared, contenders, next_target(contenders.len())) else {
                return Ok(record.not_taken("no holder to partition"));
            };
            let c = contenders
                .iter()
                .find(|c| c.index == p)
                .ok_or("holder is not a contender")?;
            c.cut_off_for(outage, &mut record);
            record.target_process = Some(p);
            record.note = format!(
                "blackholed process {p} (holder {client}) for {} ms (session timeout {} ms)",
                ms_between(record.injected_ns, record.healed_ns),
                st.as_millis()
            );
        }
        FaultKind::IsolateHolderMember => {
            let Some((p, client)) = pick_holder(shared, contenders, next_target(contenders.len())) else {
                return Ok(record.not_taken("no holder whose member to isolate"));
            };
            let c = contenders
                .iter()
                .find(|c| c.index == p)
                .ok_or("holder is not a contender")?;
            // The contender reaches member i through its proxy i: the one with a live
            // connection is the member its session is on.
            let Some(member) = c.proxies.iter().position(|proxy| proxy.connection_count() > 0) else {
                return Ok(record.not_taken(format!("process {p} has no open connection to any member")));
            };
            let role = if ensemble.leader() == Some(member) {
                "leader"
            } else {
                "follower"
            };
            // The holder can reach only that member, as a client in the member's network
            // segment would: it cannot save its session by moving to the quorum's side.
            let others: Vec<&FaultProxy> = c
                .proxies
                .iter()
                .enumerate()
                .filter(|(i, _)| *i != member)
                .map(|(_, p)| p)
                .collect();
            record.injected_ns = now_ns();
            for proxy in &others {
                proxy.blackhole();
            }
            ensemble.isolate(member)?;
            thread::sleep(outage);
            ensemble.heal(member)?;
            for proxy in &others {
                proxy.pass();
            }
            ensemble.wait_for_quorum(Duration::from_secs(60))?;
            record.healed_ns = now_ns();
            record.measure_from_ns = record.injected_ns;
            record.target_process = Some(p);
            record.note = format!(
                "isolated member {member} ({role}) with process {p} (holder {client}) from the other members for {} ms \
                 (session timeout {} ms, syncLimit x tickTime {} ms)",
                ms_between(record.injected_ns, record.healed_ns),
                st.as_millis(),
                (config.tick_time * SYNC_LIMIT_TICKS).as_millis()
            );
        }
        FaultKind::PauseHolder => {
            let Some((p, client)) = pick_holder(shared, contenders, next_target(contenders.len())) else {
                return Ok(record.not_taken("no holder to pause"));
            };
            let c = contenders
                .iter()
                .find(|c| c.index == p)
                .ok_or("holder is not a contender")?;
            record.injected_ns = now_ns();
            c.signal(libc::SIGSTOP);
            thread::sleep(outage);
            c.signal(libc::SIGCONT);
            record.healed_ns = now_ns();
            record.measure_from_ns = record.injected_ns;
            record.target_process = Some(p);
            record.note = format!(
                "SIGSTOPped process {p} (holder {client}) for {} ms (session timeout {} ms)",
                ms_between(record.injected_ns, record.healed_ns),
                st.as_millis()
            );
        }
        FaultKind::EnsembleRestart => {
            ensemble.wait_for_quorum(Duration::from_secs(60))?;
            record.injected_ns = now_ns();
            for i in 0..ensemble.len() {
                ensemble.stop(i)?;
            }
            let stopped_ns = now_ns();
            let results: Vec<_> = thread::scope(|s| {
                let handles: Vec<_> = (0..ensemble.len())
                    .map(|i| s.spawn(move || ensemble.restart(i)))
                    .collect();
                handles.into_iter().map(|h| h.join().expect("restart thread")).collect()
            });
            for r in results {
                r?;
            }
            ensemble.wait_for_quorum(Duration::from_secs(60))?;
            record.healed_ns = now_ns();
            record.measure_from_ns = record.healed_ns;
            record.note = format!(
                "stopped all {} members in {} ms; serving again after {} ms",
                ensemble.len(),
                ms_between(record.injected_ns, stopped_ns),
                ms_between(record.injected_ns, record.healed_ns)
            );
        }
        FaultKind::CloseUnderLoad => {
            let Some((p, holder)) = pick_holder(shared, contenders, next_target(contenders.len())) else {
                return Ok(record.not_taken("no holder whose client to close"));
            };
            let asked_ns = now_ns();
            send_to(contenders, p, "close");
            let closed = wait_for(shared, Duration::from_secs(60), |o| {
                o.closes
                    .iter()
                    .find(|c| c.process == p && c.called_ns >= asked_ns)
                    .cloned()
            });
            let Some(close) = closed else {
                return Ok(record.not_taken(format!("process {p} did not report close() returning within 60 s")));
            };
            let leftover = match close.session {
                Some(session) => rt.block_on(session_nodes(&ensemble.connect_string(), session))?,
                None => Vec::new(),
            };
            if let Some(c) = shared
                .lock()
                .closes
                .iter_mut()
                .find(|c| c.process == p && c.called_ns == close.called_ns)
            {
                c.leftover_nodes = leftover.clone();
                c.bound_ms = CLOSE_BOUND.as_millis() as u64;
            }
            record.injected_ns = close.called_ns;
            record.healed_ns = close.returned_ns;
            record.measure_from_ns = close.called_ns;
            record.target_process = Some(p);
            record.effective = !close.holders.is_empty() || !close.waiters.is_empty();
            record.note = format!(
                "closed the client of process {p} (holder {holder}) with {} holder(s) and {} waiter(s); close() took {} ms; \
                 {} node(s) of its session left",
                close.holders.len(),
                close.waiters.len(),
                ms_between(close.called_ns, close.returned_ns),
                leftover.len()
            );
        }
        FaultKind::MultiWaitExpiry => {
            // One process holds the second lock for a long section; the multi-lock task that
            // then takes the main lock waits for the second with the main one held.
            let q = next_target(contenders.len());
            send_to(contenders, q, "long-b");
            let b_holder = wait_for(shared, Duration::from_secs(20), |o| {
                o.open
                    .iter()
                    .find(|(_, open)| open.process == q && open.long && open.lock == LOCK_B)
                    .map(|((client, _), _)| client.clone())
            });
            let Some(b_holder) = b_holder else {
                return Ok(record.not_taken(format!("process {q} did not hold {LOCK_B} in a long section")));
            };
            let asked_ns = now_ns();
            for c in contenders.iter_mut() {
                c.send("probe");
            }
            let waiting = wait_for(shared, Duration::from_secs(20), |o| {
                o.multi_waiting
                    .iter()
                    .find(|(at, _, _)| *at >= asked_ns)
                    .map(|(_, p, client)| (*p, client.clone()))
            });
            for c in contenders.iter_mut() {
                c.send("probe-off");
            }
            let Some((p, multi)) = waiting else {
                return Ok(record.not_taken(format!(
                    "no multi-lock task was seen holding {LOCK} while {b_holder} held {LOCK_B}"
                )));
            };
            let c = contenders
                .iter()
                .find(|c| c.index == p)
                .ok_or("the multi-lock waiter is not a contender")?;
            c.cut_off_for(outage, &mut record);
            record.target_process = Some(p);
            record.target_client = Some(multi.clone());
            record.note = format!(
                "blackholed process {p}, whose multi-lock task {multi} held {LOCK} waiting for {LOCK_B} (held by \
                 {b_holder}), for {} ms (session timeout {} ms)",
                ms_between(record.injected_ns, record.healed_ns),
                st.as_millis()
            );
        }
        FaultKind::RevokeHolder => {
            // A live holder, able to honour the request: the section picked may be one of a
            // process just paused or cut off, still open as far as the runner heard while its
            // node is gone and another holds the lock; such a section ends as soon as its
            // process sees the loss, and the next pick finds a live one. The raw client is
            // connected after each pick: nothing drives its session while a pick waits.
            let mut picked = None;
            for _ in 0..3 {
                let Some((p, client)) = pick_target(config, shared, contenders) else {
                    break;
                };
                let raw = rt.block_on(raw_client(&ensemble.connect_string()))?;
                let live = rt
                    .block_on(operator::holder_node(&raw, &format!("{NAMESPACE}/{LOCK}")))?
                    .and_then(|(_, zxid)| holder_of(shared, zxid))
                    .is_some_and(|(_, holder)| holder == client);
                picked = Some((p, client, raw));
                if live {
                    break;
                }
                thread::sleep(Duration::from_millis(500));
            }
            let Some((mut p, mut client, raw)) = picked else {
                return Ok(record.not_taken("no holder to revoke"));
            };
            let (mut holder, mut outcome) = (None, RevokeOutcome::NoHolder);
            // Between two holds nobody may hold the lock: ask again (a few times).
            for _ in 0..10 {
                holder = rt.block_on(operator::holder_node(&raw, &format!("{NAMESPACE}/{LOCK}")))?;
                // The holder asked is whoever's section holds that node. The one picked may be
                // a section of a process just paused or cut off, still open as far as the runner
                // heard while its node is gone and another holds the lock.
                if let Some((_, zxid)) = &holder {
                    if let Some((process, holder_client)) = holder_of(shared, *zxid) {
                        (p, client) = (process, holder_client);
                    }
                }
                record.injected_ns = now_ns();
                outcome = rt.block_on(operator::revoke(&ensemble.connect_string(), NAMESPACE, LOCK))?;
                if matches!(&outcome, RevokeOutcome::Requested { nodes } if !nodes.is_empty()) {
                    break;
                }
                thread::sleep(Duration::from_millis(20));
            }
            record.healed_ns = now_ns();
            record.measure_from_ns = record.injected_ns;
            record.target_process = Some(p);
            record.target_client = Some(client.clone());
            record.effective = matches!(&outcome, RevokeOutcome::Requested { nodes } if !nodes.is_empty());
            if let (RevokeOutcome::Requested { nodes }, Some((path, zxid))) = (&outcome, holder) {
                // The mutex has one holder: the node asked is the one seen holding just before.
                if nodes.as_slice() == [path] {
                    record.node_zxid = Some(zxid);
                }
            }
            record.note = format!("asked holder {client} (process {p}) to release: {outcome:?}");
        }
        FaultKind::DeleteHolderNode => {
            let Some((p, client)) = pick_target(config, shared, contenders) else {
                return Ok(record.not_taken("no holder whose node to delete"));
            };
            let raw = rt.block_on(raw_client(&ensemble.connect_string()))?;
            let Some(deleted) = rt.block_on(operator::delete_holder(&raw, &format!("{NAMESPACE}/{LOCK}")))? else {
                return Ok(record.not_taken("the lock had no holder node when it came to deleting it"));
            };
            (record.injected_ns, record.healed_ns) = (deleted.sent_ns, now_ns());
            record.measure_from_ns = record.injected_ns;
            record.target_process = Some(p);
            record.target_client = Some(client.clone());
            record.successor_zxid = deleted.successor_zxid;
            record.node_zxid = deleted.zxid;
            record.note = format!(
                "deleted {} (holder {client}, process {p}); next in line: {:?}; lock-delay {} ms",
                deleted.node,
                deleted.successor_zxid.map(|z| format!("{z:#x}")),
                config.lock_delay.as_millis()
            );
        }
        FaultKind::ReapDir => {
            let dir = format!("{NAMESPACE}/{LOCK}");
            let connect = ensemble.connect_string();
            let raw = rt.block_on(raw_client(&connect))?;
            let before = rt.block_on(dir_czxid(&raw, &dir))?;
            record.injected_ns = now_ns();
            for c in contenders.iter_mut() {
                c.send("idle");
            }
            let deadline = Instant::now() + st * 3 + Duration::from_secs(20);
            let mut reaped = false;
            while Instant::now() < deadline {
                if rt.block_on(dir_czxid(&raw, &dir))?.is_none() {
                    reaped = true;
                    break;
                }
                thread::sleep(Duration::from_millis(50));
            }
            let reaped_ns = now_ns();
            for c in contenders.iter_mut() {
                c.send("go");
            }
            record.healed_ns = now_ns();
            record.measure_from_ns = record.healed_ns;
            record.effective = reaped;
            // Wait for the new dir to tell how it was recreated.
            wait_for_grant(shared, record.healed_ns, None, config.availability_bound());
            let after = rt.block_on(dir_czxid(&raw, &dir))?;
            record.note = match (reaped, before, after) {
                (true, Some(b), Some(a)) => format!(
                    "contenders idle; dir (czxid {b:#x}) reaped after {} ms; recreated with czxid {a:#x}",
                    ms_between(record.injected_ns, reaped_ns)
                ),
                (true, b, a) => format!("dir reaped; czxid before {b:?}, after {a:?}"),
                (false, _, _) => format!("dir NOT reaped within {} ms", ms_between(record.injected_ns, reaped_ns)),
            };
        }
    }
    log.say(format!("{} injected", kind.name()));
    Ok(record)
}

impl FaultRecord {
    /// The fault found nothing to act on (no holder, no connection): it did not take effect,
    /// and it ends where it began.
    fn not_taken(mut self, note: impl Into<String>) -> FaultRecord {
        let now = now_ns();
        (self.injected_ns, self.healed_ns, self.measure_from_ns) = (now, now, now);
        self.effective = false;
        self.note = note.into();
        self
    }
}

/// Targets of holder faults rotate over the processes.
fn next_target(processes: usize) -> usize {
    use std::sync::atomic::{AtomicUsize, Ordering};
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    NEXT.fetch_add(1, Ordering::Relaxed) % processes.max(1)
}

async fn raw_client(connect: &str) -> Result<zk::Client, BoxError> {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let attempt = zk::Client::connector()
            .with_session_timeout(Duration::from_secs(4))
            .with_connection_timeout(Duration::from_secs(2))
            .connect(connect)
            .await;
        match attempt {
            Ok(c) => return Ok(c),
            Err(e) if Instant::now() > deadline => return Err(format!("cannot connect to {connect}: {e}").into()),
            Err(_) => tokio::time::sleep(Duration::from_millis(200)).await,
        }
    }
}

async fn dir_czxid(client: &zk::Client, dir: &str) -> Result<Option<i64>, BoxError> {
    Ok(client.check_stat(dir).await?.map(|s| s.czxid))
}

/// The contender nodes in the lock dirs, as `dir/node` paths (after a sync, so the member
/// answering is up to date).
async fn lock_nodes(client: &zk::Client) -> Result<Vec<String>, BoxError> {
    let mut nodes = Vec::new();
    for lock in [LOCK, LOCK_B] {
        let dir = format!("{NAMESPACE}/{lock}");
        match client.sync(&dir).await {
            Ok(()) | Err(zk::Error::NoNode) => {}
            Err(e) => return Err(e.into()),
        }
        match client.list_children(&dir).await {
            Ok(children) => nodes.extend(children.into_iter().map(|c| format!("{dir}/{c}"))),
            Err(zk::Error::NoNode) => {}
            Err(e) => return Err(e.into()),
        }
    }
    Ok(nodes)
}

/// Contender nodes left in the lock dirs, after waiting (bounded) for dead sessions to expire.
async fn leaked_nodes(connect: &str, session_timeout: Duration) -> Result<(Vec<String>, usize), BoxError> {
    let client = raw_client(connect).await?;
    let deadline = Instant::now() + session_timeout * 2 + Duration::from_secs(5);
    loop {
        let nodes = lock_nodes(&client).await?;
        if nodes.is_empty() || Instant::now() > deadline {
            let n = nodes.len();
            return Ok((nodes, n));
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// The contender nodes owned by `session`.
async fn session_nodes(connect: &str, session: i64) -> Result<Vec<String>, BoxError> {
    let client = raw_client(connect).await?;
    let mut owned = Vec::new();
    for node in lock_nodes(&client).await? {
        if let Some(stat) = client.check_stat(&node).await? {
            if stat.ephemeral_owner == session {
                owned.push(node);
            }
        }
    }
    Ok(owned)
}

fn write_history(path: &std::path::Path, history: &History) -> Result<(), BoxError> {
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent)?;
    }
    let mut out = std::io::BufWriter::new(std::fs::File::create(path)?);
    for s in &history.sections {
        writeln!(out, "{}", serde_json::json!({ "type": "section", "section": s }))?;
    }
    for w in &history.writes {
        writeln!(out, "{}", serde_json::json!({ "type": "write", "write": w }))?;
    }
    for f in &history.faults {
        writeln!(out, "{}", serde_json::json!({ "type": "fault", "fault": f }))?;
    }
    for c in &history.closes {
        writeln!(out, "{}", serde_json::json!({ "type": "close", "close": c }))?;
    }
    for f in &history.acquire_failures {
        writeln!(out, "{}", serde_json::json!({ "type": "failure", "failure": f }))?;
    }
    writeln!(
        out,
        "{}",
        serde_json::json!({
            "type": "end",
            "acquire_attempts": history.acquire_attempts,
            "leaked_nodes": history.leaked_nodes,
            "leaked_node_names": history.leaked_node_names,
            "ended_ns": history.ended_ns,
            "lock_delay_ms": history.lock_delay_ms,
        })
    )?;
    Ok(())
}

/// Reads a history written by a run (the `--history` file), for re-checking it later.
pub fn read_history(path: &std::path::Path) -> Result<History, BoxError> {
    let text = std::fs::read_to_string(path)?;
    let mut history = History::default();
    for (n, line) in text.lines().enumerate().filter(|(_, l)| !l.trim().is_empty()) {
        let value: serde_json::Value = serde_json::from_str(line).map_err(|e| format!("line {}: {e}", n + 1))?;
        let field = |name: &str| {
            value
                .get(name)
                .cloned()
                .ok_or_else(|| format!("line {}: no `{name}`", n + 1))
        };
        match value.get("type").and_then(|t| t.as_str()) {
            Some("section") => history.sections.push(serde_json::from_value(field("section")?)?),
            Some("write") => history.writes.push(serde_json::from_value(field("write")?)?),
            Some("fault") => history.faults.push(serde_json::from_value(field("fault")?)?),
            Some("close") => history.closes.push(serde_json::from_value(field("close")?)?),
            Some("failure") => history
                .acquire_failures
                .push(serde_json::from_value(field("failure")?)?),
            Some("end") => {
                history.acquire_attempts = serde_json::from_value(field("acquire_attempts")?)?;
                history.leaked_nodes = serde_json::from_value(field("leaked_nodes")?)?;
                history.leaked_node_names = serde_json::from_value(field("leaked_node_names")?)?;
                history.ended_ns = serde_json::from_value(field("ended_ns")?)?;
                // Histories written before lock-delays were recorded had none.
                history.lock_delay_ms = value.get("lock_delay_ms").and_then(|v| v.as_u64()).unwrap_or(0);
            }
            other => return Err(format!("line {}: unknown record type {other:?}", n + 1).into()),
        }
    }
    Ok(history)
}
