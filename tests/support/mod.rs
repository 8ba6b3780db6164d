//! Shared helpers for the lock engine's integration tests: a real ZooKeeper per test, clients
//! with short session timeouts, and a raw ZooKeeper view to inspect lock directories.
#![allow(dead_code)]

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

pub async fn client_with(connect: &str, session_timeout: Duration) -> LockClient {
    LockClient::builder(connect)
        .session_timeout(session_timeout)
        .connect()
        .await
        .expect("connect lock client")
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
