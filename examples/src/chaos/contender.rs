//! A contender process: tasks that take the chaos mutex in a loop and write to the fenced
//! register under it, reporting every grant and section as [`Event`]s on stdout.
//!
//! Configured through environment variables (so it can run as the example's `contender`
//! subcommand or as a re-executed test binary); controlled through stdin lines: `idle` (stop
//! acquiring), `go` (acquire again), `long` (make the next section last about two session
//! timeouts, so a fault can cut it off midway), `stop` (finish and exit; end of input means the
//! same).

use std::io::Write as _;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;
use tokio::sync::watch;
use zklock::{LockClient, LockError, LockGuard};

use super::clock::now_ns;
use super::history::{Event, Section, Token, EVENT_PREFIX};

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
    /// Lock name.
    pub lock: String,
    /// Bound on one acquisition.
    pub acquire_timeout: Duration,
    /// Share of sections (in percent) that ignore the loss signal and keep writing.
    pub misbehave_percent: u32,
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
            (
                "ZKLOCK_CHAOS_ACQUIRE_MS".into(),
                self.acquire_timeout.as_millis().to_string(),
            ),
            (
                "ZKLOCK_CHAOS_MISBEHAVE_PERCENT".into(),
                self.misbehave_percent.to_string(),
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
            acquire_timeout: Duration::from_millis(num("ZKLOCK_CHAOS_ACQUIRE_MS")?),
            misbehave_percent: num("ZKLOCK_CHAOS_MISBEHAVE_PERCENT")?,
            seed: num("ZKLOCK_CHAOS_SEED")?,
        })
    }
}

/// Records the first time the guard reports loss; true once it has.
fn note_loss(guard: &LockGuard, lost_ns: &mut Option<u64>) -> bool {
    if lost_ns.is_none() && guard.is_lost() {
        *lost_ns = Some(now_ns());
    }
    lost_ns.is_some()
}

/// What the runner asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    Go,
    Idle,
    Stop,
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

async fn run(config: ContenderConfig) -> Result<(), String> {
    let (mode_tx, mode_rx) = watch::channel(Mode::Go);
    let long_next = Arc::new(AtomicBool::new(false));
    let long_flag = long_next.clone();
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
                    "long" => {
                        long_flag.store(true, Ordering::SeqCst);
                        continue;
                    }
                    _ => continue,
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
    let attempts = Arc::new(AtomicU64::new(0));
    let mut tasks = Vec::new();
    for t in 0..config.tasks {
        let task = Task {
            client: client.clone(),
            config: config.clone(),
            name: format!("p{}-t{t}", config.process),
            rng: Rng::new(config.seed ^ ((config.process as u64) << 32) ^ (t as u64 + 1)),
            mode: mode_rx.clone(),
            register: None,
            attempts: attempts.clone(),
            long_next: long_next.clone(),
        };
        tasks.push(tokio::spawn(task.run()));
    }
    for t in tasks {
        let _ = t.await;
    }
    client.flush().await;
    let m = client.metrics();
    emit(&Event::Exit {
        process: config.process,
        acquired: m.acquired,
        lost: m.lost,
        released: m.released,
    });
    Ok(())
}

async fn connect(config: &ContenderConfig, mode: watch::Receiver<Mode>) -> Result<LockClient, String> {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    loop {
        let attempt = LockClient::builder(config.connect.clone())
            .session_timeout(config.session_timeout)
            .namespace(config.namespace.clone())
            .connect()
            .await;
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

struct Task {
    client: LockClient,
    config: ContenderConfig,
    name: String,
    rng: Rng,
    mode: watch::Receiver<Mode>,
    register: Option<BufReader<TcpStream>>,
    attempts: Arc<AtomicU64>,
    long_next: Arc<AtomicBool>,
}

impl Task {
    async fn run(mut self) {
        let lock = match self.client.mutex(&self.config.lock) {
            Ok(lock) => lock,
            Err(e) => {
                eprintln!("chaos contender {}: {e}", self.name);
                return;
            }
        };
        loop {
            let mode = *self.mode.borrow();
            match mode {
                Mode::Stop => return,
                Mode::Idle => {
                    let _ = tokio::time::timeout(Duration::from_millis(200), self.mode.changed()).await;
                    continue;
                }
                Mode::Go => {}
            }
            self.attempts.fetch_add(1, Ordering::Relaxed);
            match lock.acquire_timeout(self.config.acquire_timeout).await {
                Ok(guard) => self.section(guard).await,
                Err(e) => {
                    let timeout = matches!(e, LockError::Timeout { .. });
                    emit(&Event::AcquireFailed {
                        client: self.name.clone(),
                        process: self.config.process,
                        at_ns: now_ns(),
                        timeout,
                        error: e.to_string(),
                    });
                    if !timeout {
                        tokio::time::sleep(Duration::from_millis(100 + self.rng.below(200))).await;
                    }
                }
            }
            tokio::time::sleep(Duration::from_millis(self.rng.below(30))).await;
        }
    }

    async fn section(&mut self, guard: LockGuard) {
        let granted_ns = now_ns();
        let fencing = guard.fencing_token();
        let token = Token {
            zxid: fencing.zxid(),
            generation: fencing.generation(),
        };
        let long = self.long_next.swap(false, Ordering::SeqCst);
        emit(&Event::Granted {
            client: self.name.clone(),
            process: self.config.process,
            token,
            granted_ns,
            long,
        });
        let misbehaving = if long {
            self.rng.below(2) == 0
        } else {
            self.rng.below(100) < u64::from(self.config.misbehave_percent)
        };
        let mut lost_ns = None;
        let mut attempted = 0u32;
        let mut rejected = 0u32;

        let claimed = self.write("claim", token).await;
        attempted += 1;
        let start_ns = now_ns();
        if !claimed {
            rejected += 1;
        }
        let writes = if long {
            (self.config.session_timeout * 2).as_millis() as u64 / 100
        } else {
            1 + self.rng.below(3)
        };
        for _ in 0..writes {
            let pause = if long { 100 } else { 20 + self.rng.below(100) };
            tokio::time::sleep(Duration::from_millis(pause)).await;
            let lost = note_loss(&guard, &mut lost_ns);
            if (lost || rejected > 0) && !misbehaving {
                break;
            }
            attempted += 1;
            if !self.write("write", token).await {
                rejected += 1;
            }
        }
        note_loss(&guard, &mut lost_ns);
        let end_ns = now_ns();
        attempted += 1;
        if !self.write("done", token).await {
            rejected += 1;
        }
        if rejected > 0 && !note_loss(&guard, &mut lost_ns) {
            // The register knows of a newer holder: the lock must tell us we lost it.
            let wait = self.config.session_timeout * 2 + Duration::from_secs(2);
            if tokio::time::timeout(wait, guard.lost()).await.is_ok() {
                lost_ns = Some(now_ns());
            }
        }
        note_loss(&guard, &mut lost_ns);
        emit(&Event::Section(Section {
            client: self.name.clone(),
            process: self.config.process,
            token,
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
        }));
        if let Err(e) = guard.release().await {
            emit(&Event::ReleaseFailed {
                client: self.name.clone(),
                process: self.config.process,
                at_ns: now_ns(),
                error: e.to_string(),
            });
        }
    }

    /// One fenced write; true when accepted. Reconnects to the register as needed.
    async fn write(&mut self, kind: &str, token: Token) -> bool {
        let line = format!("{kind} {} {} {}\n", self.name, token.zxid, token.generation);
        for _ in 0..50 {
            if self.register.is_none() {
                match TcpStream::connect(&self.config.register).await {
                    Ok(s) => self.register = Some(BufReader::new(s)),
                    Err(_) => {
                        tokio::time::sleep(Duration::from_millis(100)).await;
                        continue;
                    }
                }
            }
            let conn = self.register.as_mut().expect("connected above");
            let mut answer = String::new();
            let ok = conn.get_mut().write_all(line.as_bytes()).await.is_ok()
                && conn.read_line(&mut answer).await.map(|n| n > 0).unwrap_or(false);
            if ok {
                return answer.trim() == "ok";
            }
            self.register = None;
        }
        panic!("chaos contender {}: the register is unreachable", self.name);
    }
}
