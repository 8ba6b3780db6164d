//! Helpers shared by the tests of secured ensembles (`tls.rs`, `sasl.rs`, `secured.rs`), each
//! of which builds with its own features: real servers, clients with short sessions, and the
//! lock checks every kind of security must pass.

use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::task::JoinHandle;
#[cfg(feature = "tls")]
use zklock::TlsConfig;
use zklock::{distributed_lock, zk, Lock, LockClient, LockClientBuilder, LockError, LockGuard};
#[cfg(feature = "tls")]
use zklock_testing::TestCa;
use zklock_testing::ZkServer;

use super::AppError;

/// Generous bound for anything that should happen promptly on a loaded machine.
pub const SOON: Duration = Duration::from_secs(20);
/// The connect timeout of clients that must fail: long, so that an error naming the problem
/// (rather than [`LockError::Connection`]'s "within 30s") shows the diagnosis came first.
pub const PATIENT: Duration = Duration::from_secs(30);

pub fn start(builder: zklock_testing::ZkServerBuilder) -> ZkServer {
    builder.start().expect("start ZooKeeper (run scripts/install-deps.sh)")
}

pub fn builder(connect: &str) -> LockClientBuilder {
    LockClient::builder(connect).session_timeout(Duration::from_secs(4))
}

pub async fn connect(builder: LockClientBuilder) -> LockClient {
    builder.connect().await.expect("connect lock client")
}

/// Connects a client that must fail, and returns its error.
pub async fn refused(builder: LockClientBuilder) -> LockError {
    match builder.connect_timeout(PATIENT).connect().await {
        Ok(client) => panic!("connected although misconfigured: {client:?}"),
        Err(err) => {
            eprintln!("refused as expected: {err}");
            err
        }
    }
}

/// A service whose method runs under the attribute's lock and notices any overlap.
pub struct Counter {
    pub locks: LockClient,
    pub busy: Arc<AtomicBool>,
    pub runs: Arc<AtomicU32>,
}

impl Counter {
    #[distributed_lock("secured:{id}", timeout = "20s", client = self.locks)]
    async fn bump(&self, id: u32) -> Result<(), AppError> {
        assert!(!self.busy.swap(true, Ordering::SeqCst), "two holders of secured:{id}");
        tokio::time::sleep(Duration::from_millis(5)).await;
        self.busy.store(false, Ordering::SeqCst);
        self.runs.fetch_add(1, Ordering::SeqCst);
        Ok(())
    }
}

/// Takes the mutex `name` and releases it.
pub async fn take_and_release(client: &LockClient, name: &str) {
    let guard = client.mutex(name).unwrap().acquire_timeout(SOON).await.unwrap();
    guard.release().await.unwrap();
}

/// The number of contender nodes in `dir`, seen through `client`'s session.
pub async fn queue_length(client: &LockClient, dir: &str) -> usize {
    let zk = client.zookeeper().await.expect("a session");
    match zk.list_children(dir).await {
        Ok(children) => children.len(),
        Err(zk::Error::NoNode) => 0,
        Err(err) => panic!("list {dir}: {err}"),
    }
}

/// Starts acquiring `lock` (of `client`) on a task of its own and returns once its node is
/// queued behind the `ahead` nodes already there. When granted, the waiter checks `gone`: the
/// holder sets it just before releasing, so a waiter that went ahead while `because` fails.
pub async fn waiting(
    client: &LockClient,
    lock: Lock,
    ahead: usize,
    gone: Arc<AtomicBool>,
    because: &'static str,
) -> JoinHandle<Result<LockGuard, LockError>> {
    let dir = lock.path().to_owned();
    let waiter = tokio::spawn(async move {
        let granted = lock.acquire_timeout(SOON).await;
        assert!(gone.load(Ordering::SeqCst), "a waiter went ahead while {because}");
        granted
    });
    let deadline = tokio::time::Instant::now() + SOON;
    while queue_length(client, &dir).await <= ahead {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the waiter never queued in {dir}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(!waiter.is_finished(), "a waiter went ahead while {because}");
    waiter
}

/// Exclusion between two clients for a mutex, sharing and exclusion for a read/write lock, and
/// the attribute on both clients at once.
pub async fn locks_work(a: &LockClient, b: &LockClient) {
    let held = a.mutex("orders").unwrap().acquire_timeout(SOON).await.unwrap();
    let theirs = b.mutex("orders").unwrap();
    assert!(theirs.try_acquire().await.unwrap().is_none(), "b got the mutex a holds");
    let gone = Arc::new(AtomicBool::new(false));
    let waiter = waiting(b, theirs, 1, gone.clone(), "a holds").await;
    let first = held.fencing_token();
    gone.store(true, Ordering::SeqCst);
    held.release().await.unwrap();
    let next = waiter.await.unwrap().expect("b granted after a released");
    assert!(next.fencing_token() > first);
    next.release().await.unwrap();

    let r1 = a.read_lock("doc").unwrap().acquire_timeout(SOON).await.unwrap();
    let r2 = b.read_lock("doc").unwrap().acquire_timeout(SOON).await.unwrap();
    let writer = a.write_lock("doc").unwrap();
    assert!(
        writer.try_acquire().await.unwrap().is_none(),
        "a writer got in beside readers"
    );
    r1.release().await.unwrap();
    r2.release().await.unwrap();
    writer.acquire_timeout(SOON).await.unwrap().release().await.unwrap();

    let busy = Arc::new(AtomicBool::new(false));
    let runs = Arc::new(AtomicU32::new(0));
    let counter = |locks: &LockClient| Counter {
        locks: locks.clone(),
        busy: busy.clone(),
        runs: runs.clone(),
    };
    let (on_a, on_b) = (counter(a), counter(b));
    let rounds = |c: Counter| async move {
        for _ in 0..10 {
            c.bump(7).await.expect("bump");
        }
    };
    tokio::join!(rounds(on_a), rounds(on_b));
    assert_eq!(runs.load(Ordering::SeqCst), 20);
}

/// A server serving TLS with a certificate `ca` issues (and plain on its client port).
#[cfg(feature = "tls")]
pub fn tls_server(ca: &TestCa) -> ZkServer {
    start(ZkServer::builder().tls(ca))
}

/// The connect string of `server`'s TLS port.
#[cfg(feature = "tls")]
pub fn secure_connect(server: &ZkServer) -> String {
    server.secure_connect_string().expect("a TLS server has a TLS port")
}

/// TLS settings that trust `ca` and present no client certificate.
#[cfg(feature = "tls")]
pub fn trusting(ca: &TestCa) -> TlsConfig {
    TlsConfig::ca_pem(ca.cert_pem())
}

/// A plain ZooKeeper session of the SASL user `bob` (see [`sasl_server`]).
#[cfg(feature = "sasl")]
pub async fn raw_as_bob(zk: &ZkServer) -> zk::Client {
    zk::Client::connector()
        .with_sasl(zk::SaslOptions::digest_md5("bob", "bob-secret"))
        .with_session_timeout(Duration::from_secs(4))
        .connect(&zk.connect_string())
        .await
        .expect("bob connects")
}

/// A server with two SASL DIGEST-MD5 users, `alice` and `bob`.
#[cfg(feature = "sasl")]
pub fn sasl_server() -> ZkServer {
    start(
        ZkServer::builder()
            .sasl_user("alice", "alice-secret")
            .sasl_user("bob", "bob-secret"),
    )
}
