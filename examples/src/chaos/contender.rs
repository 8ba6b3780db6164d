//! A contender process: tasks that take the chaos locks in a loop and write to the fenced
//! register under them, reporting every grant and section as [`Event`]s on stdout.
//!
//! `tasks` tasks (`p<i>-t<n>`) take the main lock; one (`p<i>-b`) takes the second lock alone;
//! one (`p<i>-m`) takes both in a `MultiLock` and writes with both tokens. They share one
//! `LockClient`, which the `close` command closes under load and replaces with a fresh one.
//!
//! Configured through environment variables (so it can run as the example's `contender`
//! subcommand or as a re-executed test binary); controlled through stdin lines: `idle` (stop
//! acquiring), `go` (acquire again), `long` (make the next section on the main lock last about
//! two session timeouts, so a fault can cut it off midway), `long-b` (the same on the second
//! lock; the multi-lock task sits out until that section is over), `close` (close the client,
//! report it, carry on with a fresh one), `probe` / `probe-off` (report once the multi-lock task
//! holds the main lock while it waits for the second), `stop` (finish and exit; end of input
//! means the same).

use std::collections::HashMap;
use std::io::Write as _;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use tokio::sync::{mpsc, watch};
use zklock::{FencingToken, Lock, LockClient, LockError, LockGuard, MultiGuard, MultiLock};

use super::clock::now_ns;
use super::history::{AcquireFailure, CloseRecord, Event, FailureKind, Part, Section, Token, Waiter, EVENT_PREFIX};
use super::register;

/// Environment variable naming the role; `contender` makes a re-executed binary a contender.
pub const ROLE_ENV: &str = "ZKLOCK_CHAOS_ROLE";

/// Settings of one contender process.
#[derive(Debug, Clone)]
pub struct ContenderConfig {
    /// Index of this process.
    pub process: usize,
    /// Concurrent contender tasks in this process (they share one `LockClient`).
    pub tasks: usize,
    /// ZooKeeper connect string (the process's own fault proxies).
    pub connect: String,
    /// Address of the fenced register.
    pub register: String,
    /// Requested session timeout.
    pub session_timeout: Duration,
    /// Lock namespace.
    pub namespace: String,
    /// The main lock's name.
    pub lock: String,
    /// The second lock's name.
    pub lock_b: String,
    /// Bound on one acquisition.
    pub acquire_timeout: Duration,
    /// Bound on one multi-lock acquisition: long enough to outlast a session expiry and the
    /// reconnect after it, so a multi-lock that keeps a lost part could still return it.
    pub multi_timeout: Duration,
    /// Share of sections (in percent) that ignore the loss signal and keep writing.
    pub misbehave_percent: u32,
    /// The main lock's lock-delay (zero: none), for every task that takes it.
    pub lock_delay: Duration,
    /// Sections other than the long ones asked for write nothing between their claim and
    /// their end: holds of a few milliseconds, so the lock passes from task to task of a
    /// process in a chain of local handoffs.
    pub short_holds: bool,
    /// How long this process keeps an idle lock (lock caching, `default_cache`); zero: not at
    /// all.
    pub cache: Duration,
    /// Whether the client runs its sessions on this process's runtime
    /// (`LockClientBuilder::runtime`) instead of on a thread of its own.
    pub on_caller_runtime: bool,
    /// Seed of this process's pseudo-random choices.
    pub seed: u64,
}

impl ContenderConfig {
    /// The environment variables that carry this configuration to a child process.
    pub fn to_env(&self) -> Vec<(String, String)> {
        vec![
            (ROLE_ENV.into(), "contender".into()),
            ("ZKLOCK_CHAOS_PROCESS".into(), self.process.to_string()),
            ("ZKLOCK_CHAOS_TASKS".into(), self.tasks.to_string()),
            ("ZKLOCK_CHAOS_CONNECT".into(), self.connect.clone()),
            ("ZKLOCK_CHAOS_REGISTER".into(), self.register.clone()),
            (
                "ZKLOCK_CHAOS_SESSION_MS".into(),
                self.session_timeout.as_millis().to_string(),
            ),
            ("ZKLOCK_CHAOS_NAMESPACE".into(), self.namespace.clone()),
            ("ZKLOCK_CHAOS_LOCK".into(), self.lock.clone()),
            ("ZKLOCK_CHAOS_LOCK_B".into(), self.lock_b.clone()),
            (
                "ZKLOCK_CHAOS_ACQUIRE_MS".into(),
                self.acquire_timeout.as_millis().to_string(),
            ),
            (
                "ZKLOCK_CHAOS_MULTI_ACQUIRE_MS".into(),
                self.multi_timeout.as_millis().to_string(),
            ),
            (
                "ZKLOCK_CHAOS_MISBEHAVE_PERCENT".into(),
                self.misbehave_percent.to_string(),
            ),
            (
                "ZKLOCK_CHAOS_LOCK_DELAY_MS".into(),
                self.lock_delay.as_millis().to_string(),
            ),
            (
                "ZKLOCK_CHAOS_SHORT_HOLDS".into(),
                u8::from(self.short_holds).to_string(),
            ),
            ("ZKLOCK_CHAOS_CACHE_MS".into(), self.cache.as_millis().to_string()),
            (
                "ZKLOCK_CHAOS_ON_CALLER_RUNTIME".into(),
                u8::from(self.on_caller_runtime).to_string(),
            ),
            ("ZKLOCK_CHAOS_SEED".into(), self.seed.to_string()),
        ]
    }

    /// Reads the configuration written by [`to_env`](Self::to_env).
    pub fn from_env() -> Result<ContenderConfig, String> {
        fn var(name: &str) -> Result<String, String> {
            std::env::var(name).map_err(|_| format!("{name} is not set"))
        }
        fn num<T: std::str::FromStr>(name: &str) -> Result<T, String> {
            var(name)?.parse().map_err(|_| format!("{name} is not a number"))
        }
        Ok(ContenderConfig {
            process: num("ZKLOCK_CHAOS_PROCESS")?,
            tasks: num("ZKLOCK_CHAOS_TASKS")?,
            connect: var("ZKLOCK_CHAOS_CONNECT")?,
            register: var("ZKLOCK_CHAOS_REGISTER")?,
            session_timeout: Duration::from_millis(num("ZKLOCK_CHAOS_SESSION_MS")?),
            namespace: var("ZKLOCK_CHAOS_NAMESPACE")?,
            lock: var("ZKLOCK_CHAOS_LOCK")?,
            lock_b: var("ZKLOCK_CHAOS_LOCK_B")?,
            acquire_timeout: Duration::from_millis(num("ZKLOCK_CHAOS_ACQUIRE_MS")?),
            multi_timeout: Duration::from_millis(num("ZKLOCK_CHAOS_MULTI_ACQUIRE_MS")?),
            misbehave_percent: num("ZKLOCK_CHAOS_MISBEHAVE_PERCENT")?,
            lock_delay: Duration::from_millis(num("ZKLOCK_CHAOS_LOCK_DELAY_MS")?),
            short_holds: num::<u8>("ZKLOCK_CHAOS_SHORT_HOLDS")? == 1,
            cache: Duration::from_millis(num("ZKLOCK_CHAOS_CACHE_MS")?),
            on_caller_runtime: num::<u8>("ZKLOCK_CHAOS_ON_CALLER_RUNTIME")? == 1,
            seed: num("ZKLOCK_CHAOS_SEED")?,
        })
    }
}

/// How many times in a row a node is handed from task to task with short holds: about 5 s of
/// holds of `SHORT_HOLD_MS`, past the checker's 3 s bound on a deleted or revoked node being
/// handed on (a chain that never hears of it shows), and within the bound on the lock being
/// granted elsewhere after a fault.
pub const SHORT_HOLD_HANDOFFS: u32 = 300;

/// How long a short hold lasts, in milliseconds: always under the 100 ms after which a node
/// is watched, and long enough that the process's other tasks are back in the local queue
/// when it ends, so the chain goes on until [`SHORT_HOLD_HANDOFFS`].
const SHORT_HOLD_MS: std::ops::Range<u64> = 5..25;

/// The longest a chain of short holds keeps the lock in one process: every hold its longest.
pub const SHORT_HOLD_CHAIN: Duration = Duration::from_millis(SHORT_HOLD_HANDOFFS as u64 * SHORT_HOLD_MS.end);

/// What the runner asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    Go,
    Idle,
    Stop,
}

/// Commands the controller task carries out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Control {
    Close,
    Probe,
    ProbeOff,
}

/// Requests for long sections, set from stdin.
#[derive(Debug, Default)]
struct Flags {
    /// The next section on the main lock is long.
    long: AtomicBool,
    /// The next section on the second lock is long.
    long_b: AtomicBool,
    /// A long section on the second lock is under way.
    long_b_held: AtomicBool,
}

/// A small xorshift generator: deterministic per seed, no dependency.
#[derive(Debug, Clone)]
struct Rng(u64);

impl Rng {
    fn new(seed: u64) -> Rng {
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }

    fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.0 = x;
        x
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
}

fn emit(event: &Event) {
    let line = serde_json::to_string(event).expect("events serialize");
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{EVENT_PREFIX}{line}");
    let _ = out.flush();
}

/// Runs a contender process until told to stop; returns the process exit code.
pub fn main_from_env() -> i32 {
    let config = match ContenderConfig::from_env() {
        Ok(c) => c,
        Err(e) => {
            eprintln!("chaos contender: {e}");
            return 2;
        }
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a tokio runtime");
    match runtime.block_on(run(config)) {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("chaos contender: {e}");
            1
        }
    }
}

/// What a task does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Role {
    /// Takes the main lock.
    Main,
    /// Takes the second lock.
    Second,
    /// Takes both in one multi-lock.
    Multi,
}

/// Who is in `acquire` and who holds, per client epoch.
#[derive(Debug, Default)]
struct Activity {
    waiting: HashMap<String, (u64, Role, Waiter)>,
    holding: HashMap<String, (u64, Role)>,
    /// Grants of the main lock to `Main` tasks so far.
    main_grants: u64,
}

/// What the tasks of a process share.
struct Ctx {
    config: ContenderConfig,
    flags: Arc<Flags>,
    /// The client in use and its epoch (bumped by every close).
    client: watch::Sender<(u64, LockClient)>,
    /// Clients closed so far, for the exit counters.
    retired: Mutex<Vec<LockClient>>,
    activity: Mutex<Activity>,
    attempts: AtomicU64,
}

impl Ctx {
    fn activity(&self) -> MutexGuard<'_, Activity> {
        self.activity.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn current(&self) -> (u64, LockClient) {
        self.client.borrow().clone()
    }
}

async fn run(config: ContenderConfig) -> Result<(), String> {
    let (mode_tx, mode_rx) = watch::channel(Mode::Go);
    let (control_tx, control_rx) = mpsc::unbounded_channel();
    let flags = Arc::new(Flags::default());
    let stdin_flags = flags.clone();
    // Control from stdin, read on a plain thread (stdin is blocking).
    std::thread::spawn(move || {
        let mut line = String::new();
        loop {
            line.clear();
            let mode = match std::io::stdin().read_line(&mut line) {
                Ok(0) | Err(_) => Mode::Stop,
                Ok(_) => match line.trim() {
                    "idle" => Mode::Idle,
                    "go" => Mode::Go,
                    "stop" => Mode::Stop,
                    other => {
                        let control = match other {
                            "close" => Control::Close,
                            "probe" => Control::Probe,
                            "probe-off" => Control::ProbeOff,
                            "long" => {
                                stdin_flags.long.store(true, Ordering::SeqCst);
                                continue;
                            }
                            "long-b" => {
                                stdin_flags.long_b.store(true, Ordering::SeqCst);
                                continue;
                            }
                            _ => continue,
                        };
                        let _ = control_tx.send(control);
                        continue;
                    }
                },
            };
            let _ = mode_tx.send(mode);
            if mode == Mode::Stop {
                return;
            }
        }
    });

    let client = connect(&config, mode_rx.clone()).await?;
    emit(&Event::Ready {
        process: config.process,
    });
    let ctx = Arc::new(Ctx {
        config: config.clone(),
        flags,
        client: watch::Sender::new((0, client)),
        retired: Mutex::new(Vec::new()),
        activity: Mutex::new(Activity::default()),
        attempts: AtomicU64::new(0),
    });
    let controller = tokio::spawn(control(ctx.clone(), control_rx, mode_rx.clone()));
    let roles = (0..config.tasks)
        .map(|t| (format!("p{}-t{t}", config.process), Role::Main))
        .chain([
            (format!("p{}-b", config.process), Role::Second),
            (format!("p{}-m", config.process), Role::Multi),
        ]);
    let mut tasks = Vec::new();
    for (t, (name, role)) in roles.enumerate() {
        let task = Task {
            ctx: ctx.clone(),
            name,
            role,
            rng: Rng::new(config.seed ^ ((config.process as u64) << 32) ^ (t as u64 + 1)),
            mode: mode_rx.clone(),
            register: register::Writer::new(config.register.clone()),
            locks: None,
        };
        tasks.push(tokio::spawn(task.run()));
    }
    for t in tasks {
        let _ = t.await;
    }
    controller.abort();
    let (_, client) = ctx.current();
    client.flush().await;
    let retired = ctx.retired.lock().unwrap_or_else(|p| p.into_inner()).clone();
    let (mut acquired, mut lost, mut released) = (0, 0, 0);
    for c in retired.iter().chain([&client]) {
        let m = c.metrics();
        (acquired, lost, released) = (acquired + m.acquired, lost + m.lost, released + m.released);
    }
    emit(&Event::Exit {
        process: config.process,
        acquired,
        lost,
        released,
    });
    Ok(())
}

async fn connect(config: &ContenderConfig, mode: watch::Receiver<Mode>) -> Result<LockClient, String> {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    loop {
        let mut builder = LockClient::builder(config.connect.clone())
            .session_timeout(config.session_timeout)
            .namespace(config.namespace.clone());
        if config.short_holds {
            // Long chains: the node stays in the process from task to task for thousands of
            // holds, as a client tuned for throughput keeps it.
            builder = builder.max_local_handoffs(SHORT_HOLD_HANDOFFS);
        }
        if !config.cache.is_zero() {
            // Idle locks stay with this process until another one asks (lock caching).
            builder = builder.default_cache(config.cache);
        }
        if config.on_caller_runtime {
            // This process's runtime runs until it exits: no driver thread, no hop to one.
            builder = builder.runtime(tokio::runtime::Handle::current());
        }
        let attempt = builder.connect().await;
        match attempt {
            Ok(client) => return Ok(client),
            Err(e) if tokio::time::Instant::now() < deadline && *mode.borrow() != Mode::Stop => {
                eprintln!("chaos contender {}: connect failed, retrying: {e}", config.process);
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
            Err(e) => return Err(format!("cannot connect: {e}")),
        }
    }
}

/// Carries out `close` and `probe` commands.
async fn control(ctx: Arc<Ctx>, mut commands: mpsc::UnboundedReceiver<Control>, mode: watch::Receiver<Mode>) {
    let probing = Arc::new(AtomicBool::new(false));
    while let Some(command) = commands.recv().await {
        match command {
            Control::Close => close_and_reopen(&ctx, mode.clone()).await,
            Control::Probe => {
                if !probing.swap(true, Ordering::SeqCst) {
                    tokio::spawn(probe(ctx.clone(), probing.clone()));
                }
            }
            Control::ProbeOff => probing.store(false, Ordering::SeqCst),
        }
    }
}

/// Closes the client while its tasks hold and wait, reports who was holding and waiting, and
/// hands the tasks a fresh client.
async fn close_and_reopen(ctx: &Ctx, mode: watch::Receiver<Mode>) {
    let (epoch, client) = ctx.current();
    let session = client.session_id();
    let called_ns = now_ns();
    let (waiters, holders) = {
        let a = ctx.activity();
        let waiters: Vec<Waiter> = a
            .waiting
            .values()
            .filter(|(e, _, _)| *e == epoch)
            .map(|(_, _, w)| w.clone())
            .collect();
        let holders: Vec<String> = a
            .holding
            .iter()
            .filter(|(_, (e, _))| *e == epoch)
            .map(|(name, _)| name.clone())
            .collect();
        (waiters, holders)
    };
    client.close().await;
    let returned_ns = now_ns();
    ctx.retired.lock().unwrap_or_else(|p| p.into_inner()).push(client);
    emit(&Event::Closed(CloseRecord {
        process: ctx.config.process,
        session,
        called_ns,
        returned_ns,
        waiters,
        holders,
        leftover_nodes: Vec::new(),
        bound_ms: 0,
    }));
    match connect(&ctx.config, mode).await {
        Ok(fresh) => {
            ctx.client.send_replace((epoch + 1, fresh));
        }
        Err(e) => eprintln!(
            "chaos contender {}: no fresh client after close: {e}",
            ctx.config.process
        ),
    }
}

/// Polls (up to 20 s, until `on` is cleared) until the multi-lock task is seen holding the main
/// lock while it waits in `acquire`, three polls in a row within one acquisition, and reports
/// it. Holding is read from the server (the first node of the main lock is this session's);
/// the multi-lock task is the holder when no main-lock task holds nor was granted meanwhile.
async fn probe(ctx: Arc<Ctx>, on: Arc<AtomicBool>) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    let mut seen: Option<(String, u64, u64)> = None;
    let mut streak = 0;
    while on.load(Ordering::SeqCst) && tokio::time::Instant::now() < deadline {
        let (epoch, client) = ctx.current();
        let candidate = {
            let a = ctx.activity();
            let main_held = a.holding.values().any(|(e, r)| *e == epoch && *r == Role::Main);
            let multi = a
                .waiting
                .values()
                .find(|(e, r, _)| *e == epoch && *r == Role::Multi)
                .map(|(_, _, w)| (w.client.clone(), w.since_ns, a.main_grants));
            multi.filter(|_| !main_held)
        };
        let ours = match (&candidate, client.session_id()) {
            (Some(_), Some(session)) => matches!(
                client.inspect(&ctx.config.lock).await,
                Ok(Some(view)) if view.holders.first().is_some_and(|h| h.session == session)
            ),
            _ => false,
        };
        match candidate.filter(|_| ours) {
            Some(c) if Some(&c) == seen.as_ref() => streak += 1,
            other => {
                streak = usize::from(other.is_some());
                seen = other;
            }
        }
        if streak >= 3 {
            let (client, since_ns, _) = seen.take().expect("seen three times");
            emit(&Event::MultiWaiting {
                process: ctx.config.process,
                client,
                since_ns,
                at_ns: now_ns(),
            });
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    on.store(false, Ordering::SeqCst);
}

/// The locks a task takes, made on one client.
enum Locks {
    One(Lock),
    Multi(MultiLock),
}

/// What a task holds.
enum Held {
    One(LockGuard),
    Multi(MultiGuard),
}

impl Held {
    fn is_lost(&self) -> bool {
        match self {
            Held::One(g) => g.is_lost(),
            Held::Multi(g) => g.is_lost(),
        }
    }

    fn is_revoked(&self) -> bool {
        match self {
            Held::One(g) => g.is_revoked(),
            Held::Multi(g) => g.is_revoked(),
        }
    }

    async fn lost(&self) -> LockError {
        match self {
            Held::One(g) => g.lost().await,
            Held::Multi(g) => g.lost().await,
        }
    }

    async fn release(self) -> Result<(), LockError> {
        match self {
            Held::One(g) => g.release().await,
            Held::Multi(g) => g.release().await,
        }
    }
}

fn token(fencing: FencingToken) -> Token {
    Token {
        zxid: fencing.zxid(),
        generation: fencing.generation(),
    }
}

/// Records the first time the guard reports loss; true once it has.
fn note_loss(held: &Held, lost_ns: &mut Option<u64>) -> bool {
    if lost_ns.is_none() && held.is_lost() {
        *lost_ns = Some(now_ns());
    }
    lost_ns.is_some()
}

struct Task {
    ctx: Arc<Ctx>,
    name: String,
    role: Role,
    rng: Rng,
    mode: watch::Receiver<Mode>,
    register: register::Writer,
    /// The locks, and the epoch of the client they were made on.
    locks: Option<(u64, Locks)>,
}

impl Task {
    async fn run(mut self) {
        loop {
            let mode = *self.mode.borrow();
            match mode {
                Mode::Stop => return,
                Mode::Idle => {
                    // Idle means holding nothing: a lock kept idle (cached) is given up too.
                    let (_, client) = self.ctx.current();
                    let _ = tokio::time::timeout(Duration::from_millis(200), client.flush()).await;
                    let _ = tokio::time::timeout(Duration::from_millis(200), self.mode.changed()).await;
                    continue;
                }
                Mode::Go => {}
            }
            let flags = &self.ctx.flags;
            if self.role == Role::Multi
                && (flags.long_b.load(Ordering::SeqCst) || flags.long_b_held.load(Ordering::SeqCst))
            {
                // Leave the second lock's long holder to other processes' multi-locks.
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
            let (epoch, client) = self.ctx.current();
            if self.locks.as_ref().map(|(e, _)| *e) != Some(epoch) {
                match self.make_locks(&client) {
                    Ok(locks) => self.locks = Some((epoch, locks)),
                    Err(e) => {
                        eprintln!("chaos contender {}: {e}", self.name);
                        return;
                    }
                }
            }
            let timeout = match self.role {
                Role::Multi => self.ctx.config.multi_timeout,
                _ => self.ctx.config.acquire_timeout,
            };
            self.ctx.attempts.fetch_add(1, Ordering::Relaxed);
            let since_ns = now_ns();
            let waiter = Waiter {
                client: self.name.clone(),
                since_ns,
                deadline_ns: since_ns + timeout.as_nanos() as u64,
            };
            self.ctx
                .activity()
                .waiting
                .insert(self.name.clone(), (epoch, self.role, waiter));
            let result = match &self.locks.as_ref().expect("made above").1 {
                Locks::One(lock) => lock.acquire_timeout(timeout).await.map(Held::One),
                Locks::Multi(multi) => multi.acquire_timeout(timeout).await.map(Held::Multi),
            };
            {
                // Waiting turns into holding at once: a probe never sees the task in neither.
                let mut a = self.ctx.activity();
                a.waiting.remove(&self.name);
                if result.is_ok() {
                    a.holding.insert(self.name.clone(), (epoch, self.role));
                    if self.role == Role::Main {
                        a.main_grants += 1;
                    }
                }
            }
            match result {
                Ok(held) => self.section(held).await,
                Err(e) => {
                    let kind = match e {
                        LockError::Timeout { .. } => FailureKind::Timeout,
                        LockError::Closed { .. } => FailureKind::Closed,
                        _ => FailureKind::Other,
                    };
                    emit(&Event::AcquireFailed(AcquireFailure {
                        client: self.name.clone(),
                        process: self.ctx.config.process,
                        at_ns: now_ns(),
                        kind,
                        error: e.to_string(),
                    }));
                    match kind {
                        FailureKind::Timeout => {}
                        FailureKind::Closed => {
                            // Wait (a bounded time) for the fresh client.
                            let mut clients = self.ctx.client.subscribe();
                            let fresh = clients.wait_for(|(e, _)| *e != epoch);
                            let _ = tokio::time::timeout(Duration::from_secs(2), fresh).await;
                        }
                        FailureKind::Other => {
                            tokio::time::sleep(Duration::from_millis(100 + self.rng.below(200))).await;
                        }
                    }
                }
            }
            if self.ctx.config.short_holds {
                // Back into the queue after a millisecond: another task of the process is
                // nearly always waiting, so the node goes from task to task, and no task spins
                // (a spinning process starves the client's driver thread on a 2-core machine).
                tokio::time::sleep(Duration::from_millis(1)).await;
            } else {
                tokio::time::sleep(Duration::from_millis(self.rng.below(30))).await;
            }
        }
    }

    fn make_locks(&self, client: &LockClient) -> Result<Locks, LockError> {
        let config = &self.ctx.config;
        let main = || client.mutex(&config.lock)?.with_lock_delay(config.lock_delay);
        Ok(match self.role {
            Role::Main => Locks::One(main()?),
            Role::Second => Locks::One(client.mutex(&config.lock_b)?),
            Role::Multi => Locks::Multi(MultiLock::new([main()?, client.mutex(&config.lock_b)?])?),
        })
    }

    /// The lock(s) held and their tokens: the first part, and the second of a multi-lock.
    fn parts(&self, held: &Held) -> (Part, Option<Part>) {
        let config = &self.ctx.config;
        match held {
            Held::One(guard) => {
                let lock = match self.role {
                    Role::Second => config.lock_b.clone(),
                    _ => config.lock.clone(),
                };
                (
                    Part {
                        lock,
                        token: token(guard.fencing_token()),
                    },
                    None,
                )
            }
            Held::Multi(guard) => {
                let part = |lock: &str| Part {
                    lock: lock.to_string(),
                    token: token(
                        guard
                            .fencing_token_of(lock)
                            .expect("a multi-lock guard has a token per name"),
                    ),
                };
                (part(&config.lock), Some(part(&config.lock_b)))
            }
        }
    }

    async fn section(&mut self, held: Held) {
        let granted_ns = now_ns();
        let lost_at_grant = held.is_lost();
        let (first, second) = self.parts(&held);
        let flags = &self.ctx.flags;
        let long = match self.role {
            Role::Main => flags.long.swap(false, Ordering::SeqCst),
            Role::Second => {
                let long = flags.long_b.swap(false, Ordering::SeqCst);
                flags.long_b_held.store(long, Ordering::SeqCst);
                long
            }
            Role::Multi => false,
        };
        emit(&Event::Granted {
            client: self.name.clone(),
            process: self.ctx.config.process,
            lock: first.lock.clone(),
            token: first.token,
            second: second.clone(),
            granted_ns,
            long,
        });
        let misbehaving = if long {
            self.rng.below(2) == 0
        } else {
            self.rng.below(100) < u64::from(self.ctx.config.misbehave_percent)
        };
        let mut lost_ns = None;
        note_loss(&held, &mut lost_ns);
        let mut attempted = 0u32;
        let mut rejected = 0u32;

        let claimed = self.write("claim", &first, second.as_ref()).await;
        attempted += 1;
        let start_ns = now_ns();
        if !claimed {
            rejected += 1;
        }
        if self.ctx.config.short_holds && !long {
            let span = SHORT_HOLD_MS.end - SHORT_HOLD_MS.start;
            tokio::time::sleep(Duration::from_millis(SHORT_HOLD_MS.start + self.rng.below(span))).await;
        }
        let writes = if long {
            (self.ctx.config.session_timeout * 2).as_millis() as u64 / 100
        } else if self.ctx.config.short_holds {
            0
        } else {
            1 + self.rng.below(3)
        };
        let mut revoked = false;
        for _ in 0..writes {
            let pause = if long { 100 } else { 20 + self.rng.below(100) };
            tokio::time::sleep(Duration::from_millis(pause)).await;
            // Another process asked for the lock: every section honours it and ends now.
            if held.is_revoked() {
                revoked = true;
                break;
            }
            let lost = note_loss(&held, &mut lost_ns);
            if (lost || rejected > 0) && !misbehaving {
                break;
            }
            attempted += 1;
            if !self.write("write", &first, second.as_ref()).await {
                rejected += 1;
            }
        }
        note_loss(&held, &mut lost_ns);
        let end_ns = now_ns();
        attempted += 1;
        if !self.write("done", &first, second.as_ref()).await {
            rejected += 1;
        }
        if rejected > 0 && !note_loss(&held, &mut lost_ns) {
            // The register knows of a newer holder: the lock must tell us we lost it.
            let wait = self.ctx.config.session_timeout * 2 + Duration::from_secs(2);
            if tokio::time::timeout(wait, held.lost()).await.is_ok() {
                lost_ns = Some(now_ns());
            }
        }
        note_loss(&held, &mut lost_ns);
        emit(&Event::Section(Section {
            client: self.name.clone(),
            process: self.ctx.config.process,
            lock: first.lock,
            token: first.token,
            second,
            lost_at_grant,
            granted_ns,
            start_ns,
            end_ns,
            lost: lost_ns.is_some(),
            lost_ns,
            misbehaving,
            long,
            writes_attempted: attempted,
            writes_rejected: rejected,
            complete: true,
            revoked,
        }));
        if let Err(e) = held.release().await {
            emit(&Event::ReleaseFailed {
                client: self.name.clone(),
                process: self.ctx.config.process,
                at_ns: now_ns(),
                error: e.to_string(),
            });
        }
        self.ctx.activity().holding.remove(&self.name);
        if long && self.role == Role::Second {
            self.ctx.flags.long_b_held.store(false, Ordering::SeqCst);
        }
    }

    /// One fenced write; true when accepted. Reconnects to the register as needed.
    async fn write(&mut self, kind: &str, first: &Part, second: Option<&Part>) -> bool {
        self.register.write(kind, &self.name, first, second).await
    }
}
