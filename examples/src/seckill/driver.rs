//! The demo driver: starts ZooKeeper (unless given one), a shared database and several
//! service instances as separate processes, fires a mixed load of concurrent single buys and
//! cart checkouts at them, and checks the outcome against the database.
//!
//! The driver does not trust the service's answers for the verdict: it reads the items and
//! their orders back and computes sold units, oversell, duplicate orders and partly sold carts
//! from what was stored.

use std::io::{BufRead, BufReader, IsTerminal, Write};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde::Serialize;
use serde_json::json;

use super::front::Route;
use super::service::{LockArgs, LockKind};
use super::store::{sqlite_url, Item, Order, Store};

/// Any error the driver reports (setup failures; request failures are counted, not raised).
pub type DemoError = Box<dyn std::error::Error + Send + Sync>;

/// The `demo` subcommand's options.
#[derive(Debug, Clone, clap::Args)]
pub struct DemoArgs {
    /// Requests to send in all, single buys and carts (including the repeated ones, see
    /// --repeat-every).
    #[arg(long, default_value_t = 2000)]
    pub requests: usize,
    /// Units of each item on sale.
    #[arg(long, default_value_t = 100)]
    pub stock: i64,
    /// Items on sale.
    #[arg(long, default_value_t = 3)]
    pub items: usize,
    /// Every Nth request is a cart checkout of 2 or 3 different items, listed in random order,
    /// one unit each (0: single buys only; needs --items 2 or more).
    #[arg(long, default_value_t = 4)]
    pub cart_every: usize,
    /// Service instances (separate processes) sharing the database.
    #[arg(long, default_value_t = 3)]
    pub instances: usize,
    /// Requests in flight at once, over all instances.
    #[arg(long, default_value_t = 64)]
    pub concurrency: usize,
    /// Run the service without the distributed lock, to show the oversell it prevents.
    #[arg(long)]
    pub unsafe_no_lock: bool,
    /// ZooKeeper to use (`host:port[,…]`); without it the demo starts a local server.
    #[arg(long)]
    pub zk: Option<String>,
    /// Database URL (`postgres://…` or `sqlite://…`); default: a fresh SQLite file in a
    /// temporary directory.
    #[arg(long, env = "DATABASE_URL")]
    pub database: Option<String>,
    /// Every Nth request reuses the previous request's id, as a double-clicked buy button would
    /// (0: never); with `--route random` it goes to another instance than the original. The
    /// service must not sell twice for it.
    #[arg(long, default_value_t = 20)]
    pub repeat_every: usize,
    /// Pause the service takes between reading and writing the stock.
    #[arg(long, default_value = "2ms", value_parser = humantime::parse_duration)]
    pub race_window: Duration,
    /// ZooKeeper session timeout of the instances.
    #[arg(long, default_value = "5s", value_parser = humantime::parse_duration)]
    pub zk_timeout: Duration,
    /// How requests reach the instances: `random`, or `by-item` (every request for an item to
    /// the same instance, as a gateway hashing the item id would; what makes `--lock-cache` pay).
    #[arg(long, value_enum, default_value_t = Route::Random)]
    pub route: Route,
    /// The lock the instances sell under.
    #[command(flatten)]
    pub lock_args: LockArgs,
}

/// Faults injected into a sale, each once a number of requests have been answered (so they
/// land at the same point of the sale whatever its speed).
#[derive(Clone, Default)]
pub struct Faults {
    /// Kill instance 0 (SIGKILL) after this many answers; its share of the requests goes to
    /// the other instances from then on.
    pub kill_instance_after: Option<usize>,
    /// Freeze instance 1 (SIGSTOP) after this many answers, for this long, then let it run
    /// (SIGCONT): a lock holder stalled by a GC pause, swapping or a stopped VM.
    pub pause_instance: Option<(usize, Duration)>,
    /// Freeze the lock server after this many answers, for this long: the function is called
    /// with `true` to pause it and with `false` to resume it.
    pub pause_lock_server: Option<(usize, Duration, Arc<PauseFn>)>,
}

/// Pauses (`true`) or resumes (`false`) a server.
pub type PauseFn = dyn Fn(bool) + Send + Sync;

/// The outcome of one demo run; serialized as the final JSON line.
#[derive(Debug, Clone, Serialize)]
pub struct Summary {
    /// Requests sent, single buys and carts.
    pub requests: usize,
    /// Units in stored orders, over all items.
    pub sold: i64,
    /// Units the items have left, as stored.
    pub remaining: i64,
    /// Units sold beyond an item's initial stock, summed over the items.
    pub oversold: i64,
    /// Stored orders beyond the first for one request id and item.
    pub duplicates: usize,
    /// Cart checkout requests sent (included in `requests`).
    pub cart_requests: usize,
    /// Carts sold, as stored: distinct cart request ids with orders.
    pub cart_orders: usize,
    /// Carts stored with fewer orders than they had lines (must be 0: a cart is sold whole or
    /// not at all).
    pub partial_carts: usize,
    /// Writes the database refused because they carried a stale fencing token.
    pub fenced_rejections: usize,
    /// Median buy latency, milliseconds.
    pub p50_ms: f64,
    /// 99th percentile buy latency, milliseconds.
    pub p99_ms: f64,
    /// Buy requests answered per second of the run.
    pub throughput_rps: f64,
    /// Units sold beyond those taken from stock (sold - (initial - remaining)), over all
    /// items: lost updates, which become oversell once the stock runs out.
    pub lost_updates: i64,
    /// `"locked"` (zklock), `"unsafe-no-lock"`, `"database-lock"`, `"redis-lock"` or
    /// `"conditional-update"`.
    pub mode: String,
    /// How requests reached the instances: `"random"` or `"by-item"`.
    pub route: String,
    /// How long an instance kept an idle item lock cached, in ms (0: not cached).
    pub lock_cache_ms: u64,
    #[serde(skip)]
    /// Details for the readable summary.
    pub details: Details,
}

/// Counts shown in the readable summary but not in the JSON line.
#[derive(Debug, Clone, Default)]
pub struct Details {
    /// The items the demo sold.
    pub item_ids: Vec<i64>,
    /// The initial stock of each.
    pub initial_stock: i64,
    /// Stored orders.
    pub orders: usize,
    /// Requests that reused an earlier request id.
    pub repeated_requests: usize,
    /// 201 answers (single buys and carts).
    pub placed: usize,
    /// 201 answers to cart checkouts.
    pub carts_placed: usize,
    /// 200 answers (a repeated request got its earlier order back).
    pub already_placed: usize,
    /// 409 sold_out answers.
    pub sold_out: usize,
    /// 503 answers (lock timeout, ZooKeeper or database unavailable).
    pub unavailable: usize,
    /// Other answers and transport errors.
    pub errors: usize,
    /// The first few unexpected answers, for diagnosis.
    pub error_samples: Vec<String>,
    /// Each instance's lock wait times (p50, p99, in ms) for the item locks, as its
    /// `GET /metrics` reported them after the load; `None` where it reported none.
    pub lock_waits: Vec<(Option<f64>, Option<f64>)>,
    /// Grants of the item locks over all instances (`zklock_acquired_total`), and of those the
    /// ones the instances' lock caches served (`zklock_granted_from_cache_total`).
    pub lock_grants: u64,
    pub lock_grants_from_cache: u64,
    /// Wall time of the request phase.
    pub elapsed: Duration,
    /// Instances started.
    pub instances: usize,
    /// Where ZooKeeper ran.
    pub zookeeper: String,
    /// The database (URL without credentials for PostgreSQL).
    pub database: String,
    /// The faults injected, with the number of answers at which each fired.
    pub faults: Vec<String>,
}

impl Summary {
    /// True when the run kept its promises: nothing oversold, no order written twice, no cart
    /// sold in part.
    pub fn is_safe(&self) -> bool {
        self.oversold == 0 && self.duplicates == 0 && self.partial_carts == 0
    }

    /// The final line: one JSON object.
    pub fn json_line(&self) -> String {
        serde_json::to_string(self).unwrap_or_else(|e| format!("{{\"error\":\"{e}\"}}"))
    }

    /// The human-readable report.
    pub fn report(&self) -> String {
        let d = &self.details;
        let initial = d.initial_stock * d.item_ids.len() as i64;
        let accounted = initial - self.remaining;
        let mut out = String::new();
        let mut line = |s: String| {
            out.push_str(&s);
            out.push('\n');
        };
        line(format!("== seckill summary ({}) ==", self.mode));
        line(format!(
            "setup: items {:?} with {} units each, {} instances (requests routed {}), ZooKeeper {}, database {}{}",
            d.item_ids,
            d.initial_stock,
            d.instances,
            self.route,
            d.zookeeper,
            d.database,
            if self.lock_cache_ms > 0 {
                format!(", item locks cached for {} ms after a sale", self.lock_cache_ms)
            } else {
                String::new()
            }
        ));
        line(format!(
            "requests: {} ({} carts; {} reused an earlier request id)",
            self.requests, self.cart_requests, d.repeated_requests
        ));
        line(format!(
            "answers: {} placed, {} already placed, {} sold out, {} fenced, {} unavailable, {} other errors",
            d.placed, d.already_placed, d.sold_out, self.fenced_rejections, d.unavailable, d.errors
        ));
        line(format!("sold: {} units in {} orders", self.sold, d.orders));
        line(format!("remaining: {}", self.remaining));
        line(format!("oversold: {}", self.oversold));
        line(format!("duplicates: {}", self.duplicates));
        line(format!(
            "carts: {} sold ({} placed answers), {} sold in part",
            self.cart_orders, d.carts_placed, self.partial_carts
        ));
        line(format!("fenced rejections: {}", self.fenced_rejections));
        line(format!(
            "stock accounting: initial {} - remaining {} = {} taken from stock, {} sold{}",
            initial,
            self.remaining,
            accounted,
            self.sold,
            if accounted == self.sold {
                " (consistent)"
            } else {
                " (LOST UPDATES)"
            }
        ));
        line(format!("latency: p50 {:.1} ms, p99 {:.1} ms", self.p50_ms, self.p99_ms));
        if !d.lock_waits.is_empty() {
            let ms = |q: Option<f64>| q.map_or_else(|| "-".to_owned(), |v| format!("{v:.1} ms"));
            let per_instance: Vec<String> = d
                .lock_waits
                .iter()
                .enumerate()
                .map(|(i, (p50, p99))| format!("instance {i} p50 {} p99 {}", ms(*p50), ms(*p99)))
                .collect();
            line(format!("lock wait (from /metrics): {}", per_instance.join("; ")));
            line(format!(
                "lock grants (from /metrics): {}, {} of them from the instances' lock caches",
                d.lock_grants, d.lock_grants_from_cache
            ));
        }
        line(format!(
            "throughput: {:.0} requests/s over {:.2} s{}",
            self.throughput_rps,
            d.elapsed.as_secs_f64(),
            if d.elapsed < Duration::from_secs(10) {
                " (a smoke figure from one short run; scripts/bench.sh --seckill measures it)"
            } else {
                ""
            }
        ));
        for fault in &d.faults {
            line(format!("fault: {fault}"));
        }
        for sample in &d.error_samples {
            line(format!("unexpected answer: {sample}"));
        }
        line(if self.is_safe() {
            "verdict: SAFE: no unit sold twice, no request charged twice, no cart sold in part".to_string()
        } else {
            "verdict: UNSAFE: more was sold than there was, a request was charged twice, or a cart was sold in part"
                .to_string()
        });
        out
    }
}

/// Builds the command that starts one service instance with the given `serve` options.
pub type Launcher = dyn Fn(&[String]) -> Command + Send + Sync;

/// What an instance prints on stdout, followed by its address, once it accepts connections.
pub const LISTENING: &str = "SECKILL_LISTENING ";

/// One running service instance; killed when dropped.
pub struct Instance {
    child: Child,
    /// `http://host:port`.
    pub base_url: String,
    log: PathBuf,
}

impl Instance {
    /// Starts an instance and waits (at most `within`) until it reports its address.
    pub fn start(launcher: &Launcher, args: &[String], log: PathBuf, within: Duration) -> Result<Instance, DemoError> {
        let log_file = std::fs::File::create(&log)?;
        let mut child = launcher(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::from(log_file))
            .spawn()?;
        let stdout = child.stdout.take().ok_or("instance has no stdout")?;
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                // Anywhere in the line: a test harness may print before it on the same line.
                if let Some(at) = line.find(LISTENING) {
                    let _ = tx.send(line[at + LISTENING.len()..].trim().to_string());
                }
            }
        });
        let mut instance = Instance {
            child,
            base_url: String::new(),
            log,
        };
        match rx.recv_timeout(within) {
            Ok(addr) => {
                instance.base_url = format!("http://{addr}");
                Ok(instance)
            }
            Err(_) => {
                let what = match instance.child.try_wait() {
                    Ok(Some(status)) => format!("instance exited ({status}) before it listened"),
                    _ => format!("instance did not start within {within:?}"),
                };
                Err(format!(
                    "{what}; its log ({}):\n{}",
                    instance.log.display(),
                    instance.log_tail(20)
                )
                .into())
            }
        }
    }

    /// The last `lines` lines the instance wrote to stderr.
    pub fn log_tail(&self, lines: usize) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let all: Vec<&str> = text.lines().collect();
        all[all.len().saturating_sub(lines)..].join("\n")
    }
}

impl Instance {
    /// The instance's process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }
}

impl Drop for Instance {
    fn drop(&mut self) {
        // Let a paused instance run again, or it could not act on the SIGTERM.
        signal(self.child.id(), libc::SIGCONT);
        // A clean stop first: on SIGTERM the instance finishes its requests and closes its lock
        // client, so its ZooKeeper session ends at once. Killed if it does not stop in time.
        if let Ok(pid) = libc::pid_t::try_from(self.child.id()) {
            // SAFETY: sending a signal to our own child process has no memory effects here.
            unsafe { libc::kill(pid, libc::SIGTERM) };
            let deadline = Instant::now() + Duration::from_secs(10);
            while Instant::now() < deadline {
                match self.child.try_wait() {
                    Ok(Some(_)) => return,
                    Ok(None) => std::thread::sleep(Duration::from_millis(20)),
                    Err(_) => break,
                }
            }
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The answer to one buy request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Outcome {
    Placed,
    AlreadyPlaced,
    SoldOut,
    Fenced,
    Unavailable,
    Error,
}

/// Classifies an HTTP answer by status and error code.
fn classify(status: u16, body: &serde_json::Value) -> Outcome {
    let code = body.get("error").and_then(|c| c.as_str()).unwrap_or("");
    match (status, code) {
        (201, _) => Outcome::Placed,
        (200, _) => Outcome::AlreadyPlaced,
        (409, "sold_out") => Outcome::SoldOut,
        (409, "fenced") => Outcome::Fenced,
        (503, _) => Outcome::Unavailable,
        _ => Outcome::Error,
    }
}

fn percentile(sorted: &[Duration], pct: usize) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let index = (sorted.len() * pct / 100).min(sorted.len() - 1);
    sorted[index].as_secs_f64() * 1000.0
}

fn redact(url: &str) -> String {
    match (url.find("://"), url.rfind('@')) {
        (Some(scheme), Some(at)) if at > scheme => format!("{}://…{}", &url[..scheme], &url[at..]),
        _ => url.to_string(),
    }
}

/// One progress line on stderr.
fn progress(msg: &str) {
    eprintln!("[seckill] {msg}");
}

/// Sends `signal` to process `pid`.
fn signal(pid: u32, signal: libc::c_int) {
    if let Ok(pid) = libc::pid_t::try_from(pid) {
        // SAFETY: a plain syscall on a child process of ours; no memory is involved.
        unsafe { libc::kill(pid, signal) };
    }
}

/// The summary's mode name for a run with these options.
fn mode_name(args: &DemoArgs) -> &'static str {
    if args.unsafe_no_lock {
        return "unsafe-no-lock";
    }
    match args.lock_args.lock {
        LockKind::Zklock => "locked",
        LockKind::Database => "database-lock",
        LockKind::Redis => "redis-lock",
        LockKind::None => "conditional-update",
    }
}

/// Runs the whole scenario and returns its summary. Every process it started is stopped
/// before it returns (also on error).
pub async fn run_demo(args: &DemoArgs, launcher: &Launcher) -> Result<Summary, DemoError> {
    run_sale(args, launcher, &Faults::default()).await
}

/// [`run_demo`] with `faults` injected during the sale. Every process it started is stopped,
/// and every process it paused resumed, before it returns (also on error).
pub async fn run_sale(args: &DemoArgs, launcher: &Launcher, faults: &Faults) -> Result<Summary, DemoError> {
    if args.instances == 0 || args.concurrency == 0 {
        return Err("--instances and --concurrency must be at least 1".into());
    }
    if args.stock < 0 {
        return Err("--stock must not be negative".into());
    }
    if args.items == 0 {
        return Err("--items must be at least 1".into());
    }
    let other_lock = !args.unsafe_no_lock && args.lock_args.lock != LockKind::Zklock;
    if other_lock && args.cart_every > 0 && args.items >= 2 {
        return Err(format!(
            "carts are sold under --lock zklock only: give --cart-every 0 with --lock {}",
            args.lock_args.lock.name()
        )
        .into());
    }
    let work = tempfile::Builder::new().prefix("seckill-demo-").tempdir()?;

    // ZooKeeper: the given ensemble, or a local server for the duration of the run.
    let mut _server = None;
    let zk = match &args.zk {
        Some(zk) => zk.clone(),
        None => {
            progress("starting a local ZooKeeper server…");
            let server = tokio::task::spawn_blocking(zklock::testing::ZkServer::start).await??;
            let connect = server.connect_string();
            _server = Some(server);
            connect
        }
    };

    // The database: a fresh SQLite file, or the given URL (then new item ids per run); for the
    // database's own lock, a local PostgreSQL server unless a URL is given.
    let mut _postgres = None;
    let (database, first_item) = match &args.database {
        Some(url) => (url.clone(), fresh_item_id()),
        None if other_lock && args.lock_args.lock == LockKind::Database => {
            progress("starting a local PostgreSQL server…");
            let server = tokio::task::spawn_blocking(zklock::testing::PgServer::start).await??;
            let url = server.url();
            _postgres = Some(server);
            (url, 1)
        }
        None => (sqlite_url(&work.path().join("seckill.db")), 1),
    };
    // Redis, for the Redis lock: the given server, or a local one for the duration of the run.
    let mut _redis = None;
    let redis = match &args.lock_args.redis {
        Some(url) => Some(url.clone()),
        None if other_lock && args.lock_args.lock == LockKind::Redis => {
            progress("starting a local Redis server…");
            let server = tokio::task::spawn_blocking(zklock::testing::RedisServer::start).await??;
            let url = server.url();
            _redis = Some(server);
            Some(url)
        }
        None => None,
    };
    let item_ids: Vec<i64> = (0..args.items as i64).map(|k| first_item + k).collect();
    let store = Store::open(&database).await?;
    progress(&format!(
        "database {} ({:?}), items {item_ids:?} with {} units each",
        redact(&database),
        store.backend(),
        args.stock
    ));

    // The instances, each its own process.
    progress(&format!(
        "starting {} service instances ({})…",
        args.instances,
        if args.unsafe_no_lock {
            "WITHOUT the lock".to_string()
        } else {
            format!("lock: {}", args.lock_args.lock.name())
        }
    ));
    let mut serve_args = vec![
        "--listen".to_string(),
        "127.0.0.1:0".to_string(),
        "--zk".to_string(),
        zk.clone(),
        "--database".to_string(),
        database.clone(),
        "--zk-timeout".to_string(),
        humantime::format_duration(args.zk_timeout).to_string(),
        "--race-window".to_string(),
        humantime::format_duration(args.race_window).to_string(),
        "--exit-with-stdin".to_string(),
    ];
    if args.unsafe_no_lock {
        serve_args.push("--unsafe-no-lock".to_string());
    }
    serve_args.extend(["--lock".to_string(), args.lock_args.lock.name().to_string()]);
    if !args.lock_args.lock_cache.is_zero() {
        serve_args.extend([
            "--lock-cache".to_string(),
            humantime::format_duration(args.lock_args.lock_cache).to_string(),
        ]);
    }
    if let Some(url) = &redis {
        serve_args.extend([
            "--redis".to_string(),
            url.clone(),
            "--redis-ttl".to_string(),
            humantime::format_duration(args.lock_args.redis_ttl).to_string(),
        ]);
    }
    let mut instances = Vec::new();
    for i in 0..args.instances {
        let log = work.path().join(format!("instance-{i}.log"));
        let instance = Instance::start(launcher, &serve_args, log, Duration::from_secs(60))?;
        progress(&format!("instance {i} at {}", instance.base_url));
        instances.push(instance);
    }

    let http = reqwest::Client::builder()
        .timeout(Duration::from_secs(60))
        .pool_max_idle_per_host(args.concurrency)
        .build()?;
    for &item_id in &item_ids {
        let created = http
            .post(format!("{}/items", instances[0].base_url))
            .json(&json!({ "id": item_id, "stock": args.stock }))
            .send()
            .await?;
        if !created.status().is_success() {
            let status = created.status();
            let body = created.text().await.unwrap_or_default();
            return Err(format!("creating item {item_id} failed: {status} {body}").into());
        }
    }

    // The sale.
    let plan = plan_requests(args, &item_ids);
    let cart_requests = plan.iter().filter(|r| r.is_cart()).count();
    progress(&format!(
        "firing {} requests ({cart_requests} of them carts), {} at a time, across {} instances…",
        args.requests, args.concurrency, args.instances
    ));
    let bases: Arc<Vec<String>> = Arc::new(instances.iter().map(|i| i.base_url.clone()).collect());
    let alive: Arc<Vec<AtomicBool>> = Arc::new(instances.iter().map(|_| AtomicBool::new(true)).collect());
    let done = Arc::new(AtomicUsize::new(0));
    let sold_seen = Arc::new(AtomicUsize::new(0));
    let gate = Arc::new(tokio::sync::Semaphore::new(args.concurrency));
    let mut tasks = tokio::task::JoinSet::new();
    let pids: Vec<u32> = instances.iter().map(Instance::pid).collect();
    let injector = tokio::spawn(inject(faults.clone(), pids, alive.clone(), done.clone(), args.requests));
    let started = Instant::now();
    let ticker = {
        let done = done.clone();
        let sold_seen = sold_seen.clone();
        let total = args.requests;
        let tty = std::io::stderr().is_terminal();
        tokio::spawn(async move {
            let mut last_line = Instant::now();
            loop {
                tokio::time::sleep(Duration::from_millis(250)).await;
                let n = done.load(Ordering::Relaxed);
                let msg = format!(
                    "[seckill] {n}/{total} requests answered, {} orders placed, {:.1} s",
                    sold_seen.load(Ordering::Relaxed),
                    started.elapsed().as_secs_f64()
                );
                if tty {
                    eprint!("\r{msg}   ");
                    let _ = std::io::stderr().flush();
                } else if last_line.elapsed() >= Duration::from_secs(2) {
                    eprintln!("{msg}");
                    last_line = Instant::now();
                }
                if n >= total {
                    if tty {
                        eprintln!();
                    }
                    break;
                }
            }
        })
    };
    for request in plan.iter().cloned() {
        let live: Vec<bool> = alive.iter().map(|a| a.load(Ordering::Relaxed)).collect();
        let instance = args.route.pick(request.item(), request.spread, &live);
        let base = bases[instance.unwrap_or(request.spread % bases.len())].clone();
        let permit = gate.clone().acquire_owned().await?;
        let http = http.clone();
        let done = done.clone();
        let sold_seen = sold_seen.clone();
        tasks.spawn(async move {
            let t0 = Instant::now();
            let answer = http
                .post(format!("{base}{}", request.path()))
                .json(&request.body())
                .send()
                .await;
            let (outcome, sample) = match answer {
                Ok(resp) => {
                    let status = resp.status().as_u16();
                    let body: serde_json::Value = resp.json().await.unwrap_or(serde_json::Value::Null);
                    let outcome = classify(status, &body);
                    (outcome, format!("{status} {body}"))
                }
                Err(err) => (Outcome::Error, format!("transport error: {err}")),
            };
            let latency = t0.elapsed();
            drop(permit);
            if outcome == Outcome::Placed {
                sold_seen.fetch_add(1, Ordering::Relaxed);
            }
            done.fetch_add(1, Ordering::Relaxed);
            (outcome, request.is_cart(), latency, sample)
        });
    }
    let mut details = Details {
        item_ids: item_ids.clone(),
        initial_stock: args.stock,
        repeated_requests: plan.iter().filter(|r| r.repeat).count(),
        instances: args.instances,
        zookeeper: zk.clone(),
        database: redact(&database),
        ..Details::default()
    };
    let mut latencies = Vec::with_capacity(args.requests);
    let mut fenced = 0;
    while let Some(joined) = tasks.join_next().await {
        let (outcome, is_cart, latency, sample) = joined?;
        latencies.push(latency);
        match outcome {
            Outcome::Placed => {
                details.placed += 1;
                details.carts_placed += usize::from(is_cart);
            }
            Outcome::AlreadyPlaced => details.already_placed += 1,
            Outcome::SoldOut => details.sold_out += 1,
            Outcome::Fenced => fenced += 1,
            Outcome::Unavailable => details.unavailable += 1,
            Outcome::Error => details.errors += 1,
        }
        if matches!(outcome, Outcome::Unavailable | Outcome::Error) && details.error_samples.len() < 3 {
            details.error_samples.push(sample);
        }
    }
    details.elapsed = started.elapsed();
    let _ = ticker.await;
    details.faults = injector.await?;

    // What each instance's lock metrics say about waiting for the item locks (zklock's only).
    let zklock_waits = if other_lock { &instances[..0] } else { &instances[..] };
    for instance in zklock_waits {
        let text = http
            .get(format!("{}/metrics", instance.base_url))
            .send()
            .await
            .and_then(|r| r.error_for_status());
        let text = match text {
            Ok(resp) => resp.text().await.unwrap_or_default(),
            Err(_) => String::new(),
        };
        details.lock_waits.push(lock_wait_quantiles(&text));
        details.lock_grants += item_lock_counter(&text, "zklock_acquired_total");
        details.lock_grants_from_cache += item_lock_counter(&text, "zklock_granted_from_cache_total");
    }

    // The verdict, from the database itself.
    let mut remaining = 0;
    let mut oversold = 0;
    let mut orders: Vec<Order> = Vec::new();
    for &item_id in &item_ids {
        let item: Item = store.item(item_id).await?.ok_or("an item vanished")?;
        let item_orders = store.orders(item_id).await?;
        let sold: i64 = item_orders.iter().map(|o| o.qty).sum();
        oversold += (sold - args.stock).max(0);
        remaining += item.stock;
        orders.extend(item_orders);
    }
    drop(instances);
    progress("stopped the service instances");

    let sold: i64 = orders.iter().map(|o| o.qty).sum();
    let mut per_request = std::collections::HashMap::<(i64, &str), usize>::new();
    let mut lines_per_cart = std::collections::HashMap::<&str, usize>::new();
    for order in &orders {
        *per_request
            .entry((order.item_id, order.request_id.as_str()))
            .or_default() += 1;
        if order.request_id.starts_with(CART_PREFIX) {
            *lines_per_cart.entry(order.request_id.as_str()).or_default() += 1;
        }
    }
    let duplicates = per_request.values().map(|n| n - 1).sum();
    let planned_lines: std::collections::HashMap<&str, usize> = plan
        .iter()
        .filter_map(|r| match &r.kind {
            Kind::Cart(lines) => Some((r.request_id.as_str(), lines.len())),
            Kind::Buy(_) => None,
        })
        .collect();
    let partial_carts = lines_per_cart
        .iter()
        .filter(|(id, stored)| planned_lines.get(**id).is_some_and(|planned| *stored < planned))
        .count();
    details.orders = orders.len();
    let initial = args.stock * item_ids.len() as i64;
    latencies.sort();
    let secs = details.elapsed.as_secs_f64().max(1e-9);
    Ok(Summary {
        requests: args.requests,
        sold,
        remaining,
        oversold,
        duplicates,
        cart_requests,
        cart_orders: lines_per_cart.len(),
        partial_carts,
        fenced_rejections: fenced,
        lost_updates: sold - (initial - remaining),
        p50_ms: round1(percentile(&latencies, 50)),
        p99_ms: round1(percentile(&latencies, 99)),
        throughput_rps: round1(args.requests as f64 / secs),
        mode: mode_name(args).to_string(),
        route: args.route.name().to_string(),
        lock_cache_ms: u64::try_from(args.lock_args.lock_cache.as_millis()).unwrap_or(u64::MAX),
        details,
    })
}

/// Fires `faults` as the answers counted by `done` pass their thresholds, and returns what it
/// did. Ends once every fault has fired and been undone, or when all `total` requests are
/// answered (a fault whose threshold was not reached by then is reported as not fired). A
/// paused process or server is always resumed before it returns.
async fn inject(
    faults: Faults,
    pids: Vec<u32>,
    alive: Arc<Vec<AtomicBool>>,
    done: Arc<AtomicUsize>,
    total: usize,
) -> Vec<String> {
    let mut report = Vec::new();
    let mut kill = faults.kill_instance_after;
    let mut pause_instance = faults.pause_instance;
    let mut pause_server = faults.pause_lock_server;
    let mut pauses = tokio::task::JoinSet::new();
    while kill.is_some() || pause_instance.is_some() || pause_server.is_some() {
        let answered = done.load(Ordering::Relaxed);
        if kill.is_some_and(|at| answered >= at) && !pids.is_empty() {
            kill = None;
            alive[0].store(false, Ordering::Relaxed);
            signal(pids[0], libc::SIGKILL);
            report.push(format!("instance 0 killed (SIGKILL) after {answered} answers"));
        }
        if let Some((_, length)) = pause_instance.filter(|(at, _)| answered >= *at) {
            pause_instance = None;
            if let Some(&pid) = pids.get(1) {
                signal(pid, libc::SIGSTOP);
                report.push(format!(
                    "instance 1 paused (SIGSTOP) for {length:?} after {answered} answers"
                ));
                pauses.spawn(async move {
                    let _resume = Resume(Box::new(move || signal(pid, libc::SIGCONT)));
                    tokio::time::sleep(length).await;
                });
            }
        }
        if let Some((_, length, pause)) = pause_server.take_if(|(at, _, _)| answered >= *at) {
            pause(true);
            report.push(format!("lock server paused for {length:?} after {answered} answers"));
            pauses.spawn(async move {
                let _resume = Resume(Box::new(move || pause(false)));
                tokio::time::sleep(length).await;
            });
        }
        if answered >= total {
            break;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    for (what, left) in [
        ("kill", kill.is_some()),
        ("instance pause", pause_instance.is_some()),
        ("lock server pause", pause_server.is_some()),
    ] {
        if left {
            report.push(format!("{what} not fired: the sale ended first"));
        }
    }
    while pauses.join_next().await.is_some() {}
    report
}

/// Runs its function when dropped: resumes what a fault paused, also when the pause is
/// cancelled.
struct Resume(Box<dyn FnMut() + Send>);

impl Drop for Resume {
    fn drop(&mut self) {
        (self.0)();
    }
}

/// The series of `metric` labelled with the item locks' template, from a Prometheus text page:
/// each one's labels and value (series whose value does not parse are left out).
fn item_lock_series<'a>(metrics: &'a str, metric: &'a str) -> impl Iterator<Item = (&'a str, f64)> + 'a {
    metrics.lines().filter_map(move |line| {
        let (labels, value) = line.strip_prefix(metric)?.strip_prefix('{')?.split_once("} ")?;
        if !labels.contains(r#"lock="seckill:{item_id}""#) {
            return None;
        }
        Some((labels, value.trim().parse().ok()?))
    })
}

/// A counter of the item locks (`zklock_acquired_total`, `zklock_granted_from_cache_total`, …)
/// from a Prometheus text page: the sum of its series labelled with the item locks' template
/// (0 where there is none).
pub fn item_lock_counter(metrics: &str, name: &str) -> u64 {
    item_lock_series(metrics, name).map(|(_, value)| value as u64).sum()
}

/// The p50 and p99 of `zklock_wait_seconds` for the item locks, in milliseconds, from a
/// Prometheus text page: estimated from the histogram's buckets as Prometheus's
/// `histogram_quantile` does (linearly within the bucket the rank falls in).
pub fn lock_wait_quantiles(metrics: &str) -> (Option<f64>, Option<f64>) {
    let mut buckets: Vec<(f64, f64)> = item_lock_series(metrics, "zklock_wait_seconds_bucket")
        .filter_map(|(labels, count)| {
            let le = labels.split("le=\"").nth(1)?.split('"').next()?;
            let le = if le == "+Inf" { f64::INFINITY } else { le.parse().ok()? };
            Some((le, count))
        })
        .collect();
    buckets.sort_by(|a, b| a.0.total_cmp(&b.0));
    let quantile = |q: f64| {
        let total = buckets.last()?.1;
        if total <= 0.0 {
            return None;
        }
        let rank = q * total;
        let (mut lower, mut below) = (0.0, 0.0);
        for &(le, count) in &buckets {
            if count >= rank {
                // Past the last finite bound, the last finite bound is the estimate.
                let upper = if le.is_finite() { le } else { lower };
                let share = if count > below {
                    (rank - below) / (count - below)
                } else {
                    1.0
                };
                return Some(round1((lower + (upper - lower) * share) * 1000.0));
            }
            (lower, below) = (le, count);
        }
        None
    };
    (quantile(0.5), quantile(0.99))
}

/// Request ids of cart checkouts start with this; those of single buys with `req-`.
const CART_PREFIX: &str = "cart-";

/// One request of the demo's load.
#[derive(Debug, Clone)]
struct Request {
    request_id: String,
    kind: Kind,
    /// Whether this repeats the previous request (same id, same body).
    repeat: bool,
    /// The instance a random route sends it to.
    spread: usize,
}

#[derive(Debug, Clone)]
enum Kind {
    /// One unit of this item.
    Buy(i64),
    /// One unit of each of these items, in this order.
    Cart(Vec<i64>),
}

impl Request {
    /// The item a route by item hashes: a cart's first.
    fn item(&self) -> i64 {
        match &self.kind {
            Kind::Buy(item_id) => *item_id,
            Kind::Cart(items) => items[0],
        }
    }

    fn is_cart(&self) -> bool {
        matches!(self.kind, Kind::Cart(_))
    }

    fn path(&self) -> String {
        match &self.kind {
            Kind::Buy(item_id) => format!("/items/{item_id}/buy"),
            Kind::Cart(_) => "/orders".to_string(),
        }
    }

    fn body(&self) -> serde_json::Value {
        match &self.kind {
            Kind::Buy(_) => json!({ "request_id": self.request_id, "qty": 1 }),
            Kind::Cart(items) => json!({
                "request_id": self.request_id,
                "lines": items.iter().map(|id| json!({ "item_id": id, "qty": 1 })).collect::<Vec<_>>(),
            }),
        }
    }
}

/// The demo's load, the same on every run: every `cart_every`-th request a cart of 2 or 3
/// different items in shuffled order, the others single buys of one item, and every
/// `repeat_every`-th request a repeat of the one before (a double-clicked button).
fn plan_requests(args: &DemoArgs, item_ids: &[i64]) -> Vec<Request> {
    let carts = args.cart_every > 0 && item_ids.len() >= 2;
    let mut rng = SplitMix(0x5eed_cafe);
    let mut plan: Vec<Request> = Vec::with_capacity(args.requests);
    for i in 0..args.requests {
        let repeat = args.repeat_every > 0 && i > 0 && (i + 1) % args.repeat_every == 0;
        if let (true, Some(previous)) = (repeat, plan.last()) {
            // Another instance than the original's (when there is another).
            let others = args.instances.max(2) as u64 - 1;
            let again = Request {
                repeat: true,
                spread: (previous.spread + 1 + rng.below(others) as usize) % args.instances.max(1),
                ..previous.clone()
            };
            plan.push(again);
            continue;
        }
        let spread = rng.below(args.instances.max(1) as u64) as usize;
        let request = if carts && (i + 1) % args.cart_every == 0 {
            let mut items = item_ids.to_vec();
            // A partial Fisher-Yates shuffle: the first `len` items are a random pick in a
            // random order.
            let len = (2 + rng.below(2) as usize).min(items.len());
            for k in 0..len {
                let pick = k + rng.below((items.len() - k) as u64) as usize;
                items.swap(k, pick);
            }
            items.truncate(len);
            Request {
                request_id: format!("{CART_PREFIX}{i}"),
                kind: Kind::Cart(items),
                repeat: false,
                spread,
            }
        } else {
            Request {
                request_id: format!("req-{i}"),
                kind: Kind::Buy(item_ids[rng.below(item_ids.len() as u64) as usize]),
                repeat: false,
                spread,
            }
        };
        plan.push(request);
    }
    plan
}

/// A small deterministic generator (SplitMix64), so the demo's load is the same on every run.
struct SplitMix(u64);

impl SplitMix {
    fn below(&mut self, n: u64) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        (z ^ (z >> 31)) % n
    }
}

fn round1(x: f64) -> f64 {
    (x * 10.0).round() / 10.0
}

/// An item id no earlier run used (for a database that outlives the run).
fn fresh_item_id() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(1)
}

#[cfg(test)]
mod tests {
    use super::lock_wait_quantiles;

    #[test]
    fn wait_quantiles_are_read_from_the_item_locks_buckets() {
        let page = r#"
zklock_wait_seconds_bucket{kind="mutex",lock="seckill:{item_id}",le="0.01"} 50
zklock_wait_seconds_bucket{kind="mutex",lock="seckill:{item_id}",le="0.1"} 90
zklock_wait_seconds_bucket{kind="mutex",lock="seckill:{item_id}",le="+Inf"} 100
zklock_wait_seconds_bucket{kind="mutex",lock="other",le="0.01"} 0
zklock_wait_seconds_bucket{kind="mutex",lock="other",le="+Inf"} 7
"#;
        // The median is the top of the first bucket; the 99th falls past the last finite
        // bound, which is then the estimate.
        assert_eq!(lock_wait_quantiles(page), (Some(10.0), Some(100.0)));
        // With 20 of 100 in the first bucket, the median is 30/70 of the way through the second
        // (10 to 100 ms).
        let (p50, _) = lock_wait_quantiles(&page.replace(r#"le="0.01"} 50"#, r#"le="0.01"} 20"#));
        assert_eq!(p50, Some(48.6));
        assert_eq!(lock_wait_quantiles(""), (None, None));
    }
}
