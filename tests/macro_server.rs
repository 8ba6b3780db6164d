//! `#[distributed_lock]` against a real ZooKeeper: exclusion, reentrancy, timeouts, loss,
//! fencing, clients held by a struct, the default client, read/write sharing, and methods of
//! `#[async_trait]` impls.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::Barrier;
use zklock::{current_fencing_token, current_fencing_token_for, distributed_lock, FencingToken, LockClient, LockError};
use zklock_testing::FaultProxy;

/// Bound on anything that should happen "soon": generous, so a loaded machine does not flake.
const PATIENCE: Duration = Duration::from_secs(60);

mod support;

use support::{client, server, AppError};

/// Counts bodies inside the critical section, with the client the struct holds.
struct Counter {
    locks: LockClient,
    inside: Arc<AtomicUsize>,
    overlaps: Arc<AtomicUsize>,
    entries: Arc<AtomicUsize>,
}

impl Counter {
    #[distributed_lock("macro-exclusion", client = self.locks, timeout = "1m")]
    async fn critical(&self, pause: Duration) -> Result<(), AppError> {
        if self.inside.fetch_add(1, Ordering::SeqCst) != 0 {
            self.overlaps.fetch_add(1, Ordering::SeqCst);
        }
        tokio::time::sleep(pause).await;
        self.inside.fetch_sub(1, Ordering::SeqCst);
        self.entries.fetch_add(1, Ordering::SeqCst);
        Ok(())
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bodies_never_overlap_across_two_clients() {
    let zk = server();
    let (inside, overlaps, entries) = Default::default();
    let (inside, overlaps, entries): (Arc<AtomicUsize>, Arc<AtomicUsize>, Arc<AtomicUsize>) =
        (inside, overlaps, entries);
    let mut tasks = Vec::new();
    for c in 0..2 {
        let counter = Arc::new(Counter {
            locks: client(&zk.connect_string()).await,
            inside: inside.clone(),
            overlaps: overlaps.clone(),
            entries: entries.clone(),
        });
        for t in 0..3 {
            let counter = counter.clone();
            tasks.push(tokio::spawn(async move {
                for _ in 0..4 {
                    counter.critical(Duration::from_millis(2 + c + t)).await.unwrap();
                }
            }));
        }
    }
    for task in tasks {
        tokio::time::timeout(PATIENCE, task)
            .await
            .expect("no deadlock")
            .unwrap();
    }
    assert_eq!(entries.load(Ordering::SeqCst), 24);
    assert_eq!(overlaps.load(Ordering::SeqCst), 0, "two bodies ran at once");
}

/// Locked methods calling locked methods, through a proxy that drops every byte while the
/// inner calls are made: a reentrant grant that needed the server would never come.
struct Nested {
    locks: LockClient,
    proxy: FaultProxy,
    tokens: Mutex<Vec<FencingToken>>,
}

impl Nested {
    #[distributed_lock("macro-reentrant:{key}", client = self.locks, timeout = "5s", token = fence)]
    async fn outer(&self, key: &str) -> Result<u32, AppError> {
        self.tokens.lock().unwrap().push(fence);
        self.proxy.blackhole();
        let inner = self.inner(key).await;
        self.proxy.pass();
        Ok(inner? + 1)
    }

    #[distributed_lock("macro-reentrant:{key}", client = self.locks, timeout = "5s", token = fence)]
    async fn inner(&self, key: &str) -> Result<u32, AppError> {
        self.tokens.lock().unwrap().push(fence);
        assert_eq!(current_fencing_token(), Some(fence));
        assert_eq!(
            current_fencing_token_for(&format!("macro-reentrant:{key}")),
            Some(fence)
        );
        Ok(1)
    }

    /// Recurses `depth` times under one hold; the calls below the first see no server.
    async fn recurse(&self, depth: u32) -> Result<u32, AppError> {
        self.recurse_locked(depth, true).await
    }

    #[distributed_lock("macro-recursive", client = self.locks, timeout = "5s")]
    async fn recurse_locked(&self, depth: u32, top: bool) -> Result<u32, AppError> {
        if depth == 0 {
            return Ok(0);
        }
        if top {
            self.proxy.blackhole();
        }
        let below = Box::pin(self.recurse_locked(depth - 1, false)).await;
        if top {
            self.proxy.pass();
        }
        Ok(1 + below?)
    }
}

#[tokio::test]
async fn nested_and_recursive_calls_reenter_without_a_round_trip() {
    let zk = server();
    let proxy = FaultProxy::start(zk.addr()).unwrap();
    let nested = Nested {
        locks: client(&proxy.connect_string()).await,
        proxy,
        tokens: Mutex::new(Vec::new()),
    };
    let before = nested.locks.metrics();

    let out = tokio::time::timeout(PATIENCE, nested.outer("a"))
        .await
        .expect("no deadlock")
        .unwrap();
    assert_eq!(out, 2);
    let after_nested = nested.locks.metrics();
    assert_eq!(
        after_nested.acquired - before.acquired,
        1,
        "one grant through ZooKeeper"
    );
    assert_eq!(
        after_nested.reentered - before.reentered,
        1,
        "the inner call re-entered"
    );
    let tokens = nested.tokens.lock().unwrap().clone();
    assert_eq!(tokens.len(), 2);
    assert_eq!(
        tokens[0].zxid(),
        tokens[1].zxid(),
        "the inner call shares the outer hold"
    );

    let depth = tokio::time::timeout(PATIENCE, nested.recurse(5))
        .await
        .expect("no deadlock")
        .unwrap();
    assert_eq!(depth, 5);
    let after_recursion = nested.locks.metrics();
    assert_eq!(after_recursion.acquired - after_nested.acquired, 1);
    assert_eq!(after_recursion.reentered - after_nested.reentered, 5);
}

#[distributed_lock("macro-busy", client = locks, timeout = "500ms")]
async fn busy_with_timeout(locks: &LockClient, ran: &AtomicBool) -> Result<(), AppError> {
    ran.store(true, Ordering::SeqCst);
    Ok(())
}

#[distributed_lock("macro-busy", client = locks, timeout = "0s")]
async fn busy_try_once(locks: &LockClient, ran: &AtomicBool) -> Result<(), AppError> {
    ran.store(true, Ordering::SeqCst);
    Ok(())
}

#[tokio::test]
async fn a_timeout_comes_out_through_the_error_type_and_the_body_does_not_run() {
    let zk = server();
    let holder = client(&zk.connect_string()).await;
    let waiter = client(&zk.connect_string()).await;
    let guard = holder.mutex("macro-busy").unwrap().acquire().await.unwrap();
    let ran = AtomicBool::new(false);

    match busy_with_timeout(&waiter, &ran).await {
        Err(AppError::Lock(LockError::Timeout { name, .. })) => assert_eq!(name, "macro-busy"),
        other => panic!("expected a timeout, got {other:?}"),
    }
    match busy_try_once(&waiter, &ran).await {
        Err(AppError::Lock(LockError::Timeout { .. })) => {}
        other => panic!("expected a timeout, got {other:?}"),
    }
    assert!(!ran.load(Ordering::SeqCst), "the body ran without the lock");

    guard.release().await.unwrap();
    busy_with_timeout(&waiter, &ran).await.unwrap();
    assert!(ran.load(Ordering::SeqCst));
}

/// Sets its flag when dropped: proves the body's future was dropped, not left running.
struct DropFlag(Arc<AtomicBool>);

impl Drop for DropFlag {
    fn drop(&mut self) {
        self.0.store(true, Ordering::SeqCst);
    }
}

struct Fragile {
    locks: LockClient,
    started: Arc<tokio::sync::Notify>,
    dropped: Arc<AtomicBool>,
    finished: Arc<AtomicBool>,
}

impl Fragile {
    #[distributed_lock("macro-fragile", client = self.locks, timeout = "10s")]
    async fn abort_on_loss(&self) -> Result<(), AppError> {
        let _flag = DropFlag(self.dropped.clone());
        self.started.notify_one();
        tokio::time::sleep(Duration::from_secs(600)).await;
        self.finished.store(true, Ordering::SeqCst);
        Ok(())
    }

    #[distributed_lock("macro-fragile-continue", client = self.locks, timeout = "10s", on_lost = "continue")]
    async fn continue_on_loss(&self) -> Result<bool, AppError> {
        self.started.notify_one();
        let loss = zklock::current_loss_signal().expect("inside a locked body");
        let _ = tokio::time::timeout(PATIENCE, loss.lost()).await;
        self.finished.store(true, Ordering::SeqCst);
        Ok(loss.is_lost())
    }
}

async fn fragile(proxy: &FaultProxy) -> Fragile {
    Fragile {
        locks: LockClient::builder(proxy.connect_string())
            .session_timeout(Duration::from_secs(2))
            .connect()
            .await
            .expect("connect through the proxy"),
        started: Arc::new(tokio::sync::Notify::new()),
        dropped: Arc::new(AtomicBool::new(false)),
        finished: Arc::new(AtomicBool::new(false)),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn losing_the_lock_drops_the_body_and_returns_lost() {
    let zk = server();
    let proxy = FaultProxy::start(zk.addr()).expect("start proxy");
    let fragile = fragile(&proxy).await;

    let call = fragile.abort_on_loss();
    let cut = async {
        fragile.started.notified().await;
        proxy.blackhole();
    };
    let (result, ()) = tokio::time::timeout(PATIENCE, async { tokio::join!(call, cut) })
        .await
        .expect("the loss was noticed");
    match result {
        Err(AppError::Lock(LockError::Lost { name, .. })) => assert_eq!(name, "macro-fragile"),
        other => panic!("expected Lost, got {other:?}"),
    }
    assert!(fragile.dropped.load(Ordering::SeqCst), "the body's future was dropped");
    assert!(
        !fragile.finished.load(Ordering::SeqCst),
        "the body ran on after the loss"
    );

    // Another client can take the lock once the cut-off session is gone.
    let other = client(&zk.connect_string()).await;
    let guard = other.mutex("macro-fragile").unwrap().acquire_timeout(PATIENCE).await;
    assert!(guard.is_ok(), "{guard:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_lost_continue_lets_the_body_finish_and_see_the_loss() {
    let zk = server();
    let proxy = FaultProxy::start(zk.addr()).expect("start proxy");
    let fragile = fragile(&proxy).await;

    let call = fragile.continue_on_loss();
    let cut = async {
        fragile.started.notified().await;
        proxy.blackhole();
    };
    let (result, ()) = tokio::time::timeout(PATIENCE * 2, async { tokio::join!(call, cut) })
        .await
        .expect("the body finished");
    assert!(result.unwrap(), "the body saw the loss signal");
    assert!(fragile.finished.load(Ordering::SeqCst));
}

#[distributed_lock("macro-fenced", client = locks, timeout = "30s", token = fence)]
async fn fenced_write(locks: &LockClient) -> Result<FencingToken, AppError> {
    assert_eq!(current_fencing_token(), Some(fence));
    assert_eq!(zklock::current_fencing_token_for("macro-fenced"), Some(fence));
    Ok(fence)
}

#[tokio::test]
async fn fencing_tokens_increase_across_calls_and_clients() {
    let zk = server();
    let clients = [client(&zk.connect_string()).await, client(&zk.connect_string()).await];
    let mut tokens = Vec::new();
    for i in 0..6 {
        tokens.push(fenced_write(&clients[i % 2]).await.unwrap());
    }
    for pair in tokens.windows(2) {
        assert!(pair[0] < pair[1], "tokens not increasing: {tokens:?}");
    }
    assert_eq!(current_fencing_token(), None, "no lock outside the body");
}

#[distributed_lock("macro-default:{job}", timeout = "10s", token = fence)]
async fn on_the_default_client(job: u32) -> Result<(u32, FencingToken), AppError> {
    Ok((job, fence))
}

#[tokio::test]
async fn without_client_option_the_installed_default_is_used() {
    // The only test in this binary that installs a default client.
    let zk = server();
    let default = client(&zk.connect_string()).await;
    default.install_default();
    let before = default.metrics().acquired;
    let (job, token) = on_the_default_client(3).await.unwrap();
    assert_eq!(job, 3);
    assert!(token.zxid() > 0);
    assert_eq!(
        default.metrics().acquired,
        before + 1,
        "the default client took the lock"
    );
}

struct Catalog {
    locks: LockClient,
    readers_in: Arc<Barrier>,
    release_readers: Arc<Barrier>,
}

impl Catalog {
    #[distributed_lock("macro-catalog", mode = "read", client = self.locks, timeout = "30s")]
    async fn read(&self) -> Result<(), AppError> {
        // Both readers (and the test) meet here: only possible if the readers hold at once.
        self.readers_in.wait().await;
        self.release_readers.wait().await;
        Ok(())
    }
}

#[distributed_lock("macro-catalog", mode = "write", client = locks, timeout = "0s")]
async fn write_catalog(locks: &LockClient) -> Result<(), AppError> {
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readers_hold_together_and_exclude_a_writer() {
    let zk = server();
    let readers_in = Arc::new(Barrier::new(3));
    let release_readers = Arc::new(Barrier::new(3));
    let mut tasks = Vec::new();
    for _ in 0..2 {
        let catalog = Catalog {
            locks: client(&zk.connect_string()).await,
            readers_in: readers_in.clone(),
            release_readers: release_readers.clone(),
        };
        tasks.push(tokio::spawn(async move { catalog.read().await }));
    }
    tokio::time::timeout(PATIENCE, readers_in.wait())
        .await
        .expect("both readers held the lock at the same time");

    let writer = client(&zk.connect_string()).await;
    match write_catalog(&writer).await {
        Err(AppError::Lock(LockError::Timeout { .. })) => {}
        other => panic!("a writer got in while readers held the lock: {other:?}"),
    }

    release_readers.wait().await;
    for task in tasks {
        task.await.unwrap().unwrap();
    }
    let writer_in = async {
        loop {
            match write_catalog(&writer).await {
                Ok(()) => break,
                Err(AppError::Lock(LockError::Timeout { .. })) => tokio::time::sleep(Duration::from_millis(50)).await,
                Err(other) => panic!("{other:?}"),
            }
        }
    };
    tokio::time::timeout(PATIENCE, writer_in)
        .await
        .expect("the writer got in after the readers left");
}

/// A trait object's methods, locked inside `#[async_trait]`'s boxed future.
#[async_trait::async_trait]
trait Ledger: Send + Sync {
    async fn post(&self, pause: Duration) -> Result<FencingToken, AppError>;
    async fn hold_until(&self, held: &tokio::sync::Notify, release: &tokio::sync::Notify) -> Result<(), AppError>;
}

struct ZkLedger {
    locks: LockClient,
    book: &'static str,
    inside: Arc<AtomicUsize>,
    overlaps: Arc<AtomicUsize>,
}

#[async_trait::async_trait]
impl Ledger for ZkLedger {
    #[distributed_lock("macro-ledger:{self.book}", client = self.locks, timeout = "1m", token = fence)]
    async fn post(&self, pause: Duration) -> Result<FencingToken, AppError> {
        assert_eq!(current_fencing_token(), Some(fence));
        if self.inside.fetch_add(1, Ordering::SeqCst) != 0 {
            self.overlaps.fetch_add(1, Ordering::SeqCst);
        }
        tokio::time::sleep(pause).await;
        self.inside.fetch_sub(1, Ordering::SeqCst);
        Ok(fence)
    }

    #[distributed_lock("macro-ledger:{self.book}", client = self.locks, timeout = "1m")]
    async fn hold_until(&self, held: &tokio::sync::Notify, release: &tokio::sync::Notify) -> Result<(), AppError> {
        held.notify_one();
        release.notified().await;
        Ok(())
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn async_trait_methods_lock_in_zookeeper_and_release() {
    let zk = server();
    let (inside, overlaps) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    let mut ledgers: Vec<Arc<dyn Ledger>> = Vec::new();
    for _ in 0..2 {
        ledgers.push(Arc::new(ZkLedger {
            locks: client(&zk.connect_string()).await,
            book: "main",
            inside: inside.clone(),
            overlaps: overlaps.clone(),
        }));
    }

    // Exclusion across two clients, from spawned tasks (the boxed future is `Send`).
    let mut tasks = Vec::new();
    for (i, ledger) in ledgers.iter().enumerate() {
        for t in 0..2 {
            let ledger = ledger.clone();
            tasks.push(tokio::spawn(async move {
                let mut tokens = Vec::new();
                for _ in 0..3 {
                    tokens.push(ledger.post(Duration::from_millis(2 + (i + t) as u64)).await.unwrap());
                }
                tokens
            }));
        }
    }
    let mut tokens = Vec::new();
    for task in tasks {
        tokens.extend(
            tokio::time::timeout(PATIENCE, task)
                .await
                .expect("no deadlock")
                .unwrap(),
        );
    }
    assert_eq!(overlaps.load(Ordering::SeqCst), 0, "two bodies ran at once");
    tokens.sort();
    tokens.dedup();
    assert_eq!(tokens.len(), 12, "every call held the lock on its own");

    // While a method runs, the lock is held in ZooKeeper: another client cannot take it.
    let other = client(&zk.connect_string()).await;
    let lock = other.mutex("macro-ledger:main").unwrap();
    let (held, release) = (tokio::sync::Notify::new(), tokio::sync::Notify::new());
    let holder = ledgers[0].hold_until(&held, &release);
    let probe = async {
        held.notified().await;
        let busy = lock.try_acquire().await.unwrap();
        assert!(busy.is_none(), "another client took the lock while the method held it");
        release.notify_one();
    };
    let (result, ()) = tokio::time::timeout(PATIENCE, async { tokio::join!(holder, probe) })
        .await
        .expect("the method finished");
    result.unwrap();

    // Once it returned, the lock is free again.
    let guard = lock.acquire_timeout(PATIENCE).await;
    assert!(guard.is_ok(), "the method did not release the lock: {guard:?}");
}

#[distributed_lock("macro-skip:{n}", client = locks, if_busy = "skip")]
async fn refresh_once(locks: &LockClient, n: u32, ran: &AtomicUsize) -> Result<Option<u32>, AppError> {
    ran.fetch_add(1, Ordering::SeqCst);
    Ok(Some(n))
}

#[distributed_lock("macro-skip-wait", client = locks, if_busy = "skip", timeout = "5s")]
async fn refresh_waiting(locks: &LockClient) -> Result<bool, AppError> {
    Ok(true)
}

/// `if_busy = "skip"`: a call that finds the lock held elsewhere returns `Ok(Default)` at once
/// without running its body (ShedLock's behaviour); with the lock free the body runs; with a
/// timeout it waits that long first; and an unreachable ZooKeeper is still an error.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn if_busy_skip_returns_the_default_without_running_the_body() {
    let zk = server();
    let locks = client(&zk.connect_string()).await;
    let other = client(&zk.connect_string()).await;
    let ran = AtomicUsize::new(0);

    assert_eq!(refresh_once(&locks, 1, &ran).await.unwrap(), Some(1));
    assert_eq!(ran.load(Ordering::SeqCst), 1);

    let held = other.mutex("macro-skip:1").unwrap().acquire().await.unwrap();
    let started = std::time::Instant::now();
    assert_eq!(
        refresh_once(&locks, 1, &ran).await.unwrap(),
        None,
        "a busy lock skips the body"
    );
    assert_eq!(ran.load(Ordering::SeqCst), 1, "the body ran although the lock was busy");
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "a skip tries once: {:?}",
        started.elapsed()
    );
    drop(held);

    // With a timeout, a skip waits that long: freed meanwhile, the body runs.
    let held = other.mutex("macro-skip-wait").unwrap().acquire().await.unwrap();
    let waiting = tokio::spawn({
        let locks = locks.clone();
        async move { refresh_waiting(&locks).await }
    });
    let view = support::raw(&zk.connect_string()).await;
    let queued = support::eventually(PATIENCE, || async {
        support::contenders(&view, "/zklock/macro-skip-wait").await.len() == 2
    })
    .await;
    assert!(queued, "the waiting call never queued");
    held.release().await.unwrap();
    assert!(
        waiting.await.unwrap().unwrap(),
        "the body did not run once the lock was free"
    );

    // Not busy but unreachable: an error, not a skip.
    tokio::task::block_in_place(|| zk.stop()).unwrap();
    let mut status = locks.watch_status();
    let down = tokio::time::timeout(PATIENCE, status.wait_for(|s| !s.is_connected()))
        .await
        .is_ok();
    assert!(down);
    match refresh_once(&locks, 2, &ran).await {
        Err(AppError::Lock(err)) => assert_eq!(err.kind(), zklock::ErrorKind::Unavailable, "{err:?}"),
        other => panic!("expected an unavailable error, got {other:?}"),
    }
}

#[distributed_lock("macro-defaults", client = locks)]
async fn with_the_clients_defaults(locks: &LockClient, forever: bool) -> Result<(), AppError> {
    if forever {
        std::future::pending::<()>().await;
    }
    Ok(())
}

/// A function whose attribute gives no `timeout` and no `max_hold` takes the client's
/// `default_timeout` and `default_max_hold`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_attribute_without_timeout_or_max_hold_takes_the_clients_defaults() {
    let zk = server();
    let defaults = LockClient::builder(zk.connect_string())
        .session_timeout(Duration::from_secs(4))
        .default_timeout(Duration::from_millis(700))
        .default_max_hold(Duration::from_millis(300))
        .connect()
        .await
        .unwrap();
    assert_eq!(defaults.default_timeout(), Duration::from_millis(700));
    assert_eq!(defaults.default_max_hold(), Some(Duration::from_millis(300)));

    // Nobody else holds it: the body runs until the default max_hold stops it.
    let stopped = tokio::time::timeout(Duration::from_secs(20), with_the_clients_defaults(&defaults, true))
        .await
        .expect("the client's default_max_hold never stopped the body");
    match stopped {
        Err(AppError::Lock(LockError::MaxHoldExceeded { max_hold, .. })) => {
            assert_eq!(max_hold, Duration::from_millis(300));
        }
        other => panic!("expected MaxHoldExceeded, got {other:?}"),
    }

    // Held elsewhere: the call gives up after the default timeout (not the attribute's 30 s).
    let holder = client(&zk.connect_string()).await;
    let guard = holder.mutex("macro-defaults").unwrap().acquire().await.unwrap();
    let busy = tokio::time::timeout(Duration::from_secs(20), with_the_clients_defaults(&defaults, false))
        .await
        .expect("the client's default_timeout was not used");
    match busy {
        Err(AppError::Lock(LockError::Timeout { waited, .. })) => {
            assert!(waited >= Duration::from_millis(700), "gave up after {waited:?}");
        }
        other => panic!("expected a timeout, got {other:?}"),
    }
    guard.release().await.unwrap();

    let zero = LockClient::builder(zk.connect_string())
        .default_max_hold(Duration::ZERO)
        .connect()
        .await;
    assert!(
        matches!(zero, Err(LockError::InvalidConfig { ref message, .. }) if message.contains("default_max_hold")),
        "{zero:?}"
    );
}
