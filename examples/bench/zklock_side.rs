//! The zklock measurements, and the raw floor: a bare ZooKeeper client doing
//! create(ephemeral sequential) + delete and nothing else.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde_json::{json, Value};
use tokio::sync::{mpsc, oneshot};
use zklock::{zk, Lock, LockClient, LockClientBuilder};

use crate::server::{notifications_sent, watch_summary, watchers_of};

type BoxError = Box<dyn std::error::Error + Send + Sync>;

pub async fn client(connect: &str) -> Result<LockClient, BoxError> {
    client_with(connect, Sessions::OwnThread).await
}

/// A bench client whose sessions run where `sessions` says.
pub async fn client_with(connect: &str, sessions: Sessions) -> Result<LockClient, BoxError> {
    let builder = LockClient::builder(connect).session_timeout(Duration::from_secs(10));
    Ok(sessions.apply(builder).connect().await?)
}

/// Back-to-back acquire + release of one uncontended zklock mutex.
pub struct Uncontended {
    _client: LockClient,
    lock: Lock,
}

impl Uncontended {
    pub async fn new(connect: &str) -> Result<Uncontended, BoxError> {
        let client = client(connect).await?;
        let lock = client.mutex("bench-uncontended-zklock")?;
        Ok(Uncontended { _client: client, lock })
    }

    /// Runs `cycles` cycles; returns each one's latency in nanoseconds and the total time.
    pub async fn run(&self, cycles: usize) -> Result<(Vec<u64>, Duration), BoxError> {
        let mut ns = Vec::with_capacity(cycles);
        let start = Instant::now();
        for _ in 0..cycles {
            let t = Instant::now();
            let guard = self.lock.acquire().await?;
            guard.release().await?;
            ns.push(t.elapsed().as_nanos() as u64);
        }
        Ok((ns, start.elapsed()))
    }
}

/// The floor: create an ephemeral sequential node and delete it, one request after the other.
pub struct Floor {
    raw: zk::Client,
    /// Also list the directory, pipelined behind the create (a diagnostic, not the floor).
    pub with_list: bool,
}

impl Floor {
    pub async fn new(connect: &str) -> Result<Floor, BoxError> {
        let raw = zk::Client::connector()
            .with_session_timeout(Duration::from_secs(10))
            .connect(connect)
            .await?;
        let persistent = zk::CreateMode::Persistent.with_acls(zk::Acls::anyone_all());
        match raw.create("/bench-floor", b"", &persistent).await {
            Ok(_) | Err(zk::Error::NodeExists) => {}
            Err(e) => return Err(e.into()),
        }
        Ok(Floor { raw, with_list: false })
    }

    /// Runs `cycles` cycles; returns each one's latency in nanoseconds and the total time.
    pub async fn run(&self, cycles: usize) -> Result<(Vec<u64>, Duration), BoxError> {
        let sequential = zk::CreateMode::EphemeralSequential.with_acls(zk::Acls::anyone_all());
        let mut ns = Vec::with_capacity(cycles);
        let start = Instant::now();
        for _ in 0..cycles {
            let t = Instant::now();
            let seq = if self.with_list {
                // The recipe's minimum: the listing pipelined behind the create.
                let (created, listed) = tokio::join!(
                    self.raw.create("/bench-floor/lock-", b"", &sequential),
                    self.raw.list_children("/bench-floor")
                );
                listed?;
                created?.1
            } else {
                self.raw.create("/bench-floor/lock-", b"", &sequential).await?.1
            };
            self.raw.delete(&format!("/bench-floor/lock-{seq}"), None).await?;
            ns.push(t.elapsed().as_nanos() as u64);
        }
        Ok((ns, start.elapsed()))
    }
}

pub fn epoch_ms() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_millis() as u64
}

/// A per-key run's wall-clock plan: two back-to-back phases of equal length. In the `cold`
/// phase [`begin_ms`, `middle_ms`) each key's directory is made and first seen by the client;
/// the `warm` phase [`middle_ms`, `end_ms`] takes the same keys again, as a service that has
/// been up a while does (the directories exist and the client has seen them). Every contender
/// runs both.
#[derive(Clone, Copy, Debug)]
pub struct Phases {
    pub begin_ms: u64,
    pub middle_ms: u64,
    pub end_ms: u64,
}

impl Phases {
    /// Begins `lead` from now; each phase lasts `length`.
    pub fn after(lead: Duration, length: Duration) -> Phases {
        let begin_ms = epoch_ms() + lead.as_millis() as u64;
        let middle_ms = begin_ms + length.as_millis() as u64;
        Phases {
            begin_ms,
            middle_ms,
            end_ms: middle_ms + length.as_millis() as u64,
        }
    }

    /// The phase a cycle completed at `now_ms` counts in: 0 cold, 1 warm.
    fn of(&self, now_ms: u64) -> Option<usize> {
        match now_ms {
            t if t < self.begin_ms || t > self.end_ms => None,
            t if t < self.middle_ms => Some(0),
            _ => Some(1),
        }
    }

    /// A run's answer: the cycles of each phase, and the plan.
    pub fn report(&self, counts: [u64; 2], tasks: usize, keys: usize) -> Value {
        json!({
            "acquisitions": { "cold": counts[0], "warm": counts[1] },
            "phase_ms": self.middle_ms - self.begin_ms,
            "threads": tasks,
            "keys": keys,
        })
    }
}

/// The wall-clock window of a contended run and what its tasks share: acquisitions completed
/// inside [start_ms, end_ms] are counted, and the tiny critical section (an increment) counts
/// an overlap whenever it finds another holder inside.
pub struct Window {
    start_ms: u64,
    end_ms: u64,
    counted: AtomicU64,
    inside: AtomicUsize,
    overlaps: AtomicU64,
    shared: AtomicU64,
}

impl Window {
    pub fn new(start_ms: u64, end_ms: u64) -> Arc<Window> {
        Arc::new(Window {
            start_ms,
            end_ms,
            counted: AtomicU64::new(0),
            inside: AtomicUsize::new(0),
            overlaps: AtomicU64::new(0),
            shared: AtomicU64::new(0),
        })
    }

    /// Sleeps until the window opens.
    pub async fn opening(&self) {
        let now = epoch_ms();
        if self.start_ms > now {
            tokio::time::sleep(Duration::from_millis(self.start_ms - now)).await;
        }
    }

    /// Whether the window has not closed yet.
    pub fn is_open(&self) -> bool {
        epoch_ms() < self.end_ms
    }

    /// The critical section, run while holding the lock.
    pub fn critical_section(&self) {
        if self.inside.fetch_add(1, Ordering::SeqCst) != 0 {
            self.overlaps.fetch_add(1, Ordering::SeqCst);
        }
        self.shared.fetch_add(1, Ordering::Relaxed);
        self.inside.fetch_sub(1, Ordering::SeqCst);
    }

    /// Counts an acquisition just released, if it completed inside the window.
    pub fn released(&self) {
        let now = epoch_ms();
        if now >= self.start_ms && now <= self.end_ms {
            self.counted.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// A run's answer.
    pub fn report(&self, tasks: usize) -> Value {
        json!({
            "acquisitions": self.counted.load(Ordering::Relaxed),
            "window_ms": self.end_ms - self.start_ms,
            "overlaps": self.overlaps.load(Ordering::Relaxed),
            "threads": tasks,
        })
    }
}

/// `tasks` tasks of one client loop acquire / tiny critical section / release on one lock
/// through the window [start_ms, end_ms] (see [`Window`]).
pub async fn contended(
    client: &LockClient,
    name: &str,
    tasks: usize,
    start_ms: u64,
    end_ms: u64,
) -> Result<Value, BoxError> {
    let window = Window::new(start_ms, end_ms);
    let mut handles = Vec::new();
    for _ in 0..tasks {
        let lock = client.mutex(name)?;
        let window = window.clone();
        handles.push(tokio::spawn(async move {
            window.opening().await;
            while window.is_open() {
                let guard = lock.acquire().await?;
                window.critical_section();
                guard.release().await?;
                window.released();
            }
            Ok::<_, zklock::LockError>(())
        }));
    }
    for h in handles {
        h.await??;
    }
    Ok(window.report(tasks))
}

/// Re-acquiring a mutex inside the scope of a hold of it (what a locked function calling
/// another one on the same name does).
pub async fn reentrant(connect: &str, warmup: usize, cycles: usize) -> Result<f64, BoxError> {
    let client = client(connect).await?;
    let lock = client.mutex("bench-reentrant-zklock")?;
    let outer = lock.acquire().await?;
    let ns = outer
        .scope(async {
            for _ in 0..warmup {
                lock.acquire().await?.release().await?;
            }
            let start = Instant::now();
            for _ in 0..cycles {
                let inner = lock.acquire().await?;
                debug_assert!(inner.hold_count() >= 2);
                inner.release().await?;
            }
            Ok::<_, zklock::LockError>(start.elapsed().as_nanos() as f64 / cycles as f64)
        })
        .await?;
    outer.release().await?;
    Ok(ns)
}

/// The fairness side of local handoff: `tasks` tasks of one client loop on one lock while a
/// contender with a session of its own (another process, as far as ZooKeeper is concerned)
/// loops on the same lock. Reports the local throughput and how long the remote contender
/// waited for each grant, with the client's handoff bound set to `bound`.
pub async fn handoff_fairness(
    connect: &str,
    bound: u32,
    tasks: usize,
    start_ms: u64,
    end_ms: u64,
) -> Result<Value, BoxError> {
    let local = LockClient::builder(connect)
        .session_timeout(Duration::from_secs(10))
        .max_local_handoffs(bound)
        .connect()
        .await?;
    let remote = client(connect).await?;
    let name = format!("bench-fairness-{bound}");
    let local_run = contended(&local, &name, tasks, start_ms, end_ms);
    let lock = remote.mutex(&name)?;
    let remote_run = async move {
        let now = epoch_ms();
        if start_ms > now {
            tokio::time::sleep(Duration::from_millis(start_ms - now)).await;
        }
        let mut waits_us = Vec::new();
        while epoch_ms() < end_ms {
            let asked = Instant::now();
            let guard = lock.acquire().await?;
            waits_us.push(asked.elapsed().as_micros() as u64);
            guard.release().await?;
        }
        Ok::<_, zklock::LockError>(waits_us)
    };
    let (local_result, waits) = tokio::join!(local_run, remote_run);
    let local_result = local_result?;
    let mut waits = waits?;
    waits.sort_unstable();
    let window_s = (end_ms - start_ms) as f64 / 1000.0;
    let at = |q: f64| {
        waits
            .get(((waits.len() as f64 - 1.0) * q).round() as usize)
            .map(|us| *us as f64 / 1000.0)
    };
    Ok(json!({
        "max_local_handoffs": bound,
        "local_tasks": tasks,
        "local_acquisitions_per_sec": local_result["acquisitions"].as_f64().unwrap_or(0.0) / window_s,
        "local_overlaps": local_result["overlaps"],
        "remote_grants": waits.len(),
        "remote_wait_p50_ms": at(0.5),
        "remote_wait_max_ms": waits.last().map(|us| *us as f64 / 1000.0),
    }))
}

/// Herd check: `waiters` contenders queue behind a holder (spread over `sessions` clients;
/// contenders sharing a client share its contender node, so pass `waiters + 1` for W nodes);
/// then `releases` times the holder releases and the server's count of watch notifications
/// sent is compared before and after each hand-over. Each release's count is also split by
/// session: the releasing holder's own session watches its node once its hold has lasted
/// 100 ms (to learn of a deletion or a revocation), so of a release's notifications one goes
/// back to the releasing session and the rest wake others; the split is read from the
/// server's watch table (`wchp`) right before the release.
pub async fn herd(connect: &str, waiters: usize, sessions: usize, releases: usize) -> Result<Value, BoxError> {
    let mut clients = Vec::new();
    for _ in 0..sessions.max(1) {
        clients.push(client(connect).await?);
    }
    let name = "bench-herd-zklock";
    let (granted_tx, mut granted) = mpsc::unbounded_channel::<(usize, String)>();
    let mut release_txs: Vec<Option<oneshot::Sender<()>>> = Vec::new();
    let mut tasks = Vec::new();
    let mut holder = None;
    for i in 0..=waiters {
        let lock = clients[i % clients.len()].mutex(name)?;
        let (tx, rx) = oneshot::channel::<()>();
        release_txs.push(Some(tx));
        let granted_tx = granted_tx.clone();
        tasks.push(tokio::spawn(async move {
            let guard = lock.acquire().await?;
            let _ = granted_tx.send((i, guard.node_path().to_owned()));
            let _ = rx.await;
            guard.release().await
        }));
        if i == 0 {
            // The holder first, so every other contender queues behind it.
            let first = granted.recv().await.ok_or("holder task ended")?;
            assert_eq!(first.0, 0);
            holder = Some(first);
        }
    }
    let (mut holder, mut holder_node) = holder.ok_or("no holder")?;
    let view = clients[0].zookeeper().await?;
    let dir = clients[0].mutex(name)?.path().to_owned();
    let deadline = Instant::now() + Duration::from_secs(60);
    let nodes = (waiters + 1).min(clients.len());
    while view.list_children(&dir).await?.len() < nodes {
        if Instant::now() > deadline {
            return Err("waiters did not all queue within 60 s".into());
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    let (_, paths_before, watches_before) = watch_summary(connect)?;
    let mut per_release = Vec::new();
    let mut to_others = Vec::new();
    let mut to_releaser = Vec::new();
    for _ in 0..releases.min(waiters) {
        let session = clients[holder % clients.len()]
            .session_id()
            .map(|id| format!("{id:#x}"));
        let own = own_node_watches(connect, &holder_node, session.as_deref()).await?;
        let before = notifications_sent(connect)?;
        release_txs[holder].take().ok_or("released twice")?.send(()).ok();
        (holder, holder_node) = tokio::time::timeout(Duration::from_secs(30), granted.recv())
            .await?
            .ok_or("waiter tasks ended")?;
        // Let any stray notifications of this hand-over reach the counters.
        tokio::time::sleep(Duration::from_millis(100)).await;
        let sent = notifications_sent(connect)? - before;
        per_release.push(sent);
        to_releaser.push(own);
        to_others.push(sent.saturating_sub(own));
    }
    for tx in release_txs.iter_mut().filter_map(Option::take) {
        let _ = tx.send(());
    }
    drop(granted);
    for t in tasks {
        let _ = tokio::time::timeout(Duration::from_secs(60), t).await;
    }
    Ok(json!({
        "waiters": waiters,
        "sessions": clients.len(),
        "contender_nodes": nodes,
        "watches_before_first_release": watches_before,
        "paths_watched_before_first_release": paths_before,
        "notifications_per_release": per_release,
        "max_notifications_per_release": per_release.iter().max(),
        "notifications_to_the_releasing_session_per_release": to_releaser,
        "notifications_to_other_sessions_per_release": to_others,
    }))
}

/// How many watches the holder's `session` has on its own `node`: waits (up to 2 s) for the
/// own-node watch a hold arms after 100 ms, so the release that follows is counted with it.
async fn own_node_watches(connect: &str, node: &str, session: Option<&str>) -> Result<u64, BoxError> {
    let Some(session) = session else {
        return Err("the holder's client has no session".into());
    };
    let deadline = Instant::now() + Duration::from_secs(2);
    loop {
        let own = watchers_of(connect, node)?.iter().filter(|s| *s == session).count() as u64;
        if own > 0 || Instant::now() > deadline {
            return Ok(own);
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Per-key locking, the seckill shape: `tasks` tasks of one client each pick a random key out
/// of `keys` and acquire + release that key's mutex, through both `phases`. Each `round` has
/// a namespace of its own, so its cold phase starts without directories.
pub async fn distinct_keys(
    connect: &str,
    round: usize,
    tasks: usize,
    keys: usize,
    phases: Phases,
    sessions: Sessions,
) -> Result<Value, BoxError> {
    let builder = LockClient::builder(connect).session_timeout(Duration::from_secs(10));
    // A namespace of each kind's own, so that each one's cold phase is cold.
    let namespace = match sessions {
        Sessions::OwnThread => format!("/zklock-distinct-{round}"),
        Sessions::CallerRuntime => format!("/zklock-distinct-rt-{round}"),
    };
    let client = sessions.apply(builder.namespace(namespace)).connect().await?;
    let counts = per_key_cycles(tasks, keys, phases, move |key| {
        let client = client.clone();
        async move { client.mutex(&format!("key-{key}"))?.acquire().await?.release().await }
    })
    .await?;
    Ok(phases.report(counts, tasks, keys))
}

/// Where a bench client runs its ZooKeeper sessions.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Sessions {
    /// The default: a driver thread of the client's own.
    OwnThread,
    /// The bench's own runtime (`LockClientBuilder::runtime`), which outlives the client.
    CallerRuntime,
}

impl Sessions {
    /// `builder`, set to run its client's sessions here (called on the bench's runtime).
    fn apply(self, builder: LockClientBuilder) -> LockClientBuilder {
        match self {
            Sessions::OwnThread => builder,
            Sessions::CallerRuntime => builder.runtime(tokio::runtime::Handle::current()),
        }
    }
}

/// `tasks` tasks each run `cycle(key)` on random keys below `keys` from the phases' begin to
/// their end; returns the cycles completed in each phase. The per-key sections' loop.
pub async fn per_key_cycles<F, Fut, E>(
    tasks: usize,
    keys: usize,
    phases: Phases,
    cycle: F,
) -> Result<[u64; 2], BoxError>
where
    F: Fn(u64) -> Fut + Clone + Send + 'static,
    Fut: std::future::Future<Output = Result<(), E>> + Send,
    E: Into<BoxError> + Send + 'static,
{
    let counted = Arc::new([AtomicU64::new(0), AtomicU64::new(0)]);
    let mut handles = Vec::new();
    for task in 0..tasks {
        let (cycle, counted) = (cycle.clone(), counted.clone());
        handles.push(tokio::spawn(async move {
            let mut rng = Xorshift(0x9E37_79B9_7F4A_7C15u64.wrapping_mul(task as u64 + 1) | 1);
            let now = epoch_ms();
            if phases.begin_ms > now {
                tokio::time::sleep(Duration::from_millis(phases.begin_ms - now)).await;
            }
            while epoch_ms() < phases.end_ms {
                cycle(rng.below(keys as u64)).await?;
                if let Some(phase) = phases.of(epoch_ms()) {
                    counted[phase].fetch_add(1, Ordering::Relaxed);
                }
            }
            Ok::<_, E>(())
        }));
    }
    for h in handles {
        h.await?.map_err(Into::into)?;
    }
    Ok(counted.each_ref().map(|c| c.load(Ordering::Relaxed)))
}

/// Memory per distinct key: acquires and releases `keys` never-repeated lock names in sequence,
/// each twice (the second grant has the session watch the name's directory, the most a
/// name costs), and reports the process's resident set before and after. Run in a process of
/// its own (the bench's `rss` worker), so nothing else allocates beside it.
pub async fn rss_growth(connect: &str, keys: usize) -> Result<Value, BoxError> {
    let client = LockClient::builder(connect)
        .namespace("/zklock-rss")
        .session_timeout(Duration::from_secs(10))
        .connect()
        .await?;
    // Warm up the allocator, the runtime and the client's buffers first.
    for i in 0..1000 {
        let lock = client.mutex(&format!("warm-{i}"))?;
        for _ in 0..2 {
            lock.acquire().await?.release().await?;
        }
    }
    let before = rss_kib()?;
    let started = Instant::now();
    for i in 0..keys {
        let lock = client.mutex(&format!("key-{i}"))?;
        for _ in 0..2 {
            lock.acquire().await?.release().await?;
        }
    }
    let seconds = started.elapsed().as_secs_f64();
    let after = rss_kib()?;
    let mb = |kib: u64| kib as f64 / 1024.0;
    Ok(json!({
        "keys": keys,
        "seconds": seconds,
        "rss_before_mb": mb(before),
        "rss_after_mb": mb(after),
        "rss_growth_mb": mb(after) - mb(before),
    }))
}

/// This process's resident set size (`VmRSS` in /proc/self/status), in KiB.
pub fn rss_kib() -> Result<u64, BoxError> {
    status_kib("VmRSS")
}

/// A memory figure of this process from /proc/self/status (`VmRSS`, `VmHWM`, ...), in KiB.
pub fn status_kib(field: &str) -> Result<u64, BoxError> {
    let status = std::fs::read_to_string("/proc/self/status")?;
    status
        .lines()
        .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .ok_or_else(|| format!("no {field} in /proc/self/status").into())
}

/// A small deterministic generator for picking keys.
struct Xorshift(u64);

impl Xorshift {
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n.max(1)
    }
}

/// The per-key floor: tasks of one bare ZooKeeper client each creating an ephemeral sequential
/// node in one of `keys` directories (made beforehand, persistent) and deleting it, with the
/// directory's listing pipelined behind the create or not.
pub struct DistinctFloor {
    raw: zk::Client,
    keys: usize,
}

impl DistinctFloor {
    const ROOT: &'static str = "/bench-distinct-floor";

    /// Connects and makes the `keys` directories (all requests in flight at once).
    pub async fn prepare(connect: &str, keys: usize) -> Result<DistinctFloor, BoxError> {
        let raw = zk::Client::connector()
            .with_session_timeout(Duration::from_secs(10))
            .connect(connect)
            .await?;
        let persistent = zk::CreateMode::Persistent.with_acls(zk::Acls::anyone_all());
        let dirs: Vec<String> = std::iter::once(Self::ROOT.to_owned())
            .chain((0..keys).map(|k| format!("{}/key-{k}", Self::ROOT)))
            .collect();
        let (root, keyed) = dirs.split_first().expect("the root is first");
        let made = futures::future::join_all(
            std::iter::once(raw.create(root, b"", &persistent))
                .chain(keyed.iter().map(|d| raw.create(d, b"", &persistent))),
        )
        .await;
        for result in made {
            match result {
                Ok(_) | Err(zk::Error::NodeExists) => {}
                Err(e) => return Err(e.into()),
            }
        }
        Ok(DistinctFloor { raw, keys })
    }

    /// `tasks` tasks loop create (‖ list when `with_list`) + delete on random keys through
    /// both `phases` (alike for a bare client: the directories exist from the start).
    pub async fn run(&self, tasks: usize, with_list: bool, phases: Phases) -> Result<Value, BoxError> {
        let raw = self.raw.clone();
        let counts = per_key_cycles(tasks, self.keys, phases, move |key| {
            let raw = raw.clone();
            async move {
                let sequential = zk::CreateMode::EphemeralSequential.with_acls(zk::Acls::anyone_all());
                let dir = format!("{}/key-{key}", Self::ROOT);
                let prefix = format!("{dir}/lock-");
                let create = raw.create(&prefix, b"", &sequential);
                let seq = if with_list {
                    let (created, listed) = tokio::join!(create, raw.list_children(&dir));
                    listed?;
                    created?.1
                } else {
                    create.await?.1
                };
                raw.delete(&format!("{dir}/lock-{seq}"), None).await
            }
        })
        .await?;
        let mut report = phases.report(counts, tasks, self.keys);
        report["with_listing"] = json!(with_list);
        Ok(report)
    }
}
