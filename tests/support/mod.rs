//! Shared helpers for the lock engine's integration tests: a real ZooKeeper per test, clients
//! with short session timeouts, and a raw ZooKeeper view to inspect lock directories.
#![allow(dead_code)]

#[cfg(any(feature = "tls", feature = "sasl"))]
pub mod secured;

use std::time::Duration;

use zklock_runtime::{zk, LockClient, LockError};
use zklock_testing::ZkServer;

/// The error type of locked functions in tests: a lock error, or the test's own failure (read
/// through `Debug` when a test fails).
#[derive(Debug)]
#[allow(dead_code)]
pub enum AppError {
    Lock(LockError),
    Other(String),
}

impl From<LockError> for AppError {
    fn from(err: LockError) -> Self {
        AppError::Lock(err)
    }
}

/// A standalone server with a 200 ms tick (sessions of 0.4–4 s) that reaps empty containers
/// every 100 ms.
pub fn server() -> ZkServer {
    ZkServer::builder()
        .system_property("znode.container.checkIntervalMs", "100")
        .start()
        .expect("start ZooKeeper (run scripts/install-deps.sh)")
}

/// A client with a session timeout short enough for fault tests.
pub async fn client(connect: &str) -> LockClient {
    client_with(connect, Duration::from_secs(4)).await
}

/// A client behind `proxy` that reports its holds lost 500 ms into a cut (4 s sessions), well
/// before the server can expire its session.
pub async fn cut_off_able(proxy: &zklock_testing::FaultProxy) -> LockClient {
    LockClient::builder(proxy.connect_string())
        .session_timeout(Duration::from_secs(4))
        .loss_after(Duration::from_millis(500))
        .connect()
        .await
        .expect("connect lock client through the proxy")
}

pub async fn client_with(connect: &str, session_timeout: Duration) -> LockClient {
    LockClient::builder(connect)
        .session_timeout(session_timeout)
        .connect()
        .await
        .expect("connect lock client")
}

/// A client authenticated as the digest user `shop`: its lock nodes are `creator_all`, which
/// nobody without those credentials may read or delete.
pub async fn shop_client(connect: &str) -> LockClient {
    LockClient::builder(connect)
        .digest("shop", "s3cret")
        .connect()
        .await
        .expect("connect the digest client")
}

/// A raw ZooKeeper session, to look at what the engine left on the server.
pub async fn raw(connect: &str) -> zk::Client {
    zk::Client::connector()
        .with_session_timeout(Duration::from_secs(4))
        .connect(connect)
        .await
        .expect("connect raw client")
}

/// The children of a lock directory; empty when the directory does not exist.
pub async fn contenders(raw: &zk::Client, dir: &str) -> Vec<String> {
    match raw.list_children(dir).await {
        Ok(children) => children,
        Err(zk::Error::NoNode) => Vec::new(),
        Err(err) => panic!("list {dir}: {err}"),
    }
}

/// The server's view of whether a session is still open (its `cons` list names it).
pub async fn session_is_open(server: &ZkServer, session: i64) -> bool {
    let dump = tokio::task::block_in_place(|| server.four_letter_word("cons")).unwrap_or_default();
    dump.contains(&format!("sid=0x{session:x}"))
}

/// How many requests the server has received on `session`'s connection, from its `cons`
/// report (`recved=`; pings count too).
pub fn requests_received(server: &ZkServer, session: i64) -> u64 {
    connection_field(server, session, "recved")
        .parse()
        .unwrap_or_else(|err| panic!("no request count for session {session:#x}: {err}"))
}

/// The last operation the server answered on `session`'s connection, from its `cons` report
/// (`lop=`: `CREA`, `GETC`, `GETD`, `DELE`, `PING`, …). A request is answered once handled, so
/// this tells what the server has done, where [`requests_received`] tells what has arrived.
pub fn last_operation(server: &ZkServer, session: i64) -> String {
    connection_field(server, session, "lop")
}

/// One `name=value` field of `session`'s connection in the server's `cons` report.
fn connection_field(server: &ZkServer, session: i64, name: &str) -> String {
    let dump = tokio::task::block_in_place(|| server.four_letter_word("cons")).expect("cons answers");
    let line = dump
        .lines()
        .find(|l| l.contains(&format!("sid=0x{session:x}")))
        .unwrap_or_else(|| panic!("session {session:#x} has no connection: {dump}"));
    let value = line
        .split(&format!("{name}="))
        .nth(1)
        .and_then(|rest| rest.split([',', ')']).next());
    value.unwrap_or_else(|| panic!("no {name} in {line}")).to_owned()
}

/// Polls `cond` every 20 ms until it holds or `within` passes; returns whether it held.
pub async fn eventually<F, Fut>(within: Duration, mut cond: F) -> bool
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = tokio::time::Instant::now() + within;
    loop {
        if cond().await {
            return true;
        }
        if tokio::time::Instant::now() >= deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// A small xorshift generator: random enough to vary cancellation points and interleavings,
/// and replayable from its seed.
pub struct Rng(pub u64);

impl Rng {
    /// A generator seeded from the clock; the seed is printed so a failing run can be replayed
    /// with `Rng(seed)`.
    pub fn from_clock() -> Rng {
        let seed = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(0x9e37_79b9)
            | 1;
        eprintln!("random seed {seed}");
        Rng(seed)
    }

    /// A generator for worker `n` of a test, derived from this one's seed.
    pub fn for_worker(&self, n: u64) -> Rng {
        Rng(self.0.wrapping_add(n * 0x9e37_79b9) | 1)
    }

    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    /// A number below `n`.
    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// How long [`cancellation_storm`] waits for an acquisition it does not cut.
pub const UNCUT_BOUND: Duration = Duration::from_secs(60);

/// Starts one worker per entry of `acquirers`; each makes `rounds` acquisitions with its
/// function and cancels each after a random 0..`max_delay` (before the first request is sent,
/// while one is in flight, while waiting, or not at all), in turn by a timeout, by losing a
/// `select!`, and by aborting the task that runs it. Every eighth acquisition is not cut: it
/// must be granted within [`UNCUT_BOUND`] (a stranded node or waiter would stop it), and it
/// keeps the storm from granting nothing on a machine so loaded that every cut comes before
/// the server answers. Returns how many acquisitions were granted: the uncut ones, and the cut
/// ones whose grant came before their cancellation. The seed is printed.
pub async fn cancellation_storm<F, Fut, G>(acquirers: Vec<F>, rounds: u32, max_delay: Duration) -> u32
where
    F: Fn() -> Fut + Send + 'static,
    Fut: std::future::Future<Output = Result<G, LockError>> + Send + 'static,
    G: Send + 'static,
{
    let seeds = Rng::from_clock();
    let max_micros = max_delay.as_micros().max(1) as u64;
    let mut workers = Vec::new();
    for (n, acquire) in acquirers.into_iter().enumerate() {
        let mut rng = seeds.for_worker(n as u64);
        workers.push(tokio::spawn(async move {
            let mut granted = 0;
            for round in 0..rounds {
                let after = Duration::from_micros(rng.below(max_micros));
                let got = match round % 8 {
                    7 => match tokio::time::timeout(UNCUT_BOUND, acquire()).await {
                        Ok(res) => res.is_ok(),
                        Err(_) => panic!("an acquisition nobody cut was not granted within {UNCUT_BOUND:?}"),
                    },
                    0 | 3 | 6 => matches!(tokio::time::timeout(after, acquire()).await, Ok(Ok(_))),
                    1 | 4 => tokio::select! {
                        res = acquire() => res.is_ok(),
                        _ = tokio::time::sleep(after) => false,
                    },
                    _ => {
                        let acquiring = acquire();
                        let task = tokio::spawn(async move { acquiring.await.map(drop) });
                        tokio::time::sleep(after).await;
                        task.abort();
                        matches!(task.await, Ok(Ok(())))
                    }
                };
                granted += u32::from(got);
            }
            granted
        }));
    }
    let mut granted = 0;
    for worker in workers {
        granted += worker.await.expect("storm worker");
    }
    granted
}

/// The samples of a Prometheus exporter's text: `metric{labels}` → value.
pub fn prometheus_samples(text: &str) -> std::collections::HashMap<String, f64> {
    text.lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .filter_map(|l| {
            let (key, value) = l.rsplit_once(' ')?;
            Some((key.to_owned(), value.parse().ok()?))
        })
        .collect()
}

/// The paths `session` (in hex, with or without `0x`) has watches on, from the server's
/// `wchc` report: a line per session, then a tab-indented line per watched path.
pub fn watches_of(zk: &ZkServer, session: &str) -> Vec<String> {
    let id = |hex: &str| u64::from_str_radix(hex.trim().trim_start_matches("0x"), 16).ok();
    let wanted = id(session).unwrap_or_else(|| panic!("not a session id: {session:?}"));
    let report = tokio::task::block_in_place(|| zk.four_letter_word("wchc")).expect("wchc answers");
    let mut watched = Vec::new();
    let mut ours = false;
    for line in report.lines() {
        match line.strip_prefix('\t') {
            Some(path) if ours => watched.push(path.trim().to_owned()),
            Some(_) => {}
            None => ours = id(line) == Some(wanted),
        }
    }
    watched
}

/// Waits until `session` watches `node`: its contender has read the queue, found `node` in
/// its way and settled down to wait for it to go. A contender that took the lock (or queued
/// behind another node) sets no such watch, so this fails for it.
pub async fn wait_watching(zk: &ZkServer, session: &str, node: &str, who: &str) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    loop {
        let watched = watches_of(zk, session);
        if watched.iter().any(|w| w == node) {
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{who} (session {session}) never waited on {node}; it watches {watched:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// A zklock client's session id as ZooKeeper prints it.
pub fn session_of(client: &LockClient) -> String {
    format!("{:#x}", client.session_id().expect("the client has a session"))
}

/// Everything a `tracing_subscriber::fmt` subscriber writes, shared with the test that reads
/// it back (the log tests install one as the binary's global subscriber).
#[derive(Clone, Default)]
pub struct Captured(pub std::sync::Arc<std::sync::Mutex<Vec<u8>>>);

impl std::io::Write for Captured {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Captured {
    /// Installs a DEBUG-level `fmt` subscriber as the binary's global one, writing here.
    pub fn install() -> Captured {
        let captured = Captured::default();
        let writer = captured.clone();
        tracing_subscriber::fmt()
            .with_max_level(tracing::Level::DEBUG)
            .with_ansi(false)
            .with_writer(move || writer.clone())
            .init();
        captured
    }

    /// The lines written so far.
    pub fn lines(&self) -> Vec<String> {
        String::from_utf8_lossy(&self.0.lock().unwrap())
            .lines()
            .map(str::to_owned)
            .collect()
    }
}

/// Asks for `lock` on a task of its own, after polling the request once here: a request for an
/// exclusive lock that a task of this process holds is then queued behind it in the process,
/// so the holder's release hands it the node.
pub fn queue_in_process(
    lock: &zklock_runtime::Lock,
) -> tokio::task::JoinHandle<Result<zklock_runtime::LockGuard, LockError>> {
    use futures::FutureExt;
    let lock = lock.clone();
    let mut request = Box::pin(async move { lock.acquire().await });
    assert!(
        (&mut request).now_or_never().is_none(),
        "the lock is held: the request waits"
    );
    tokio::spawn(request)
}
