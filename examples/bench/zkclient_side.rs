//! The lock recipe of zookeeper-client, the client zklock builds on: `Client::lock` with a
//! Curator-compatible prefix (`LockPrefix::new_curator(dir, "lock-")`), its directory made as a
//! container on first use. It is what a Rust user of the same dependency might take instead of
//! zklock.
//!
//! The recipe releases by dropping its guard, which deletes the lock node in the background.
//! Here each release deletes the node and waits for the answer, as zklock's and Curator's
//! releases do, so a cycle here is the same work (acquired, then gone from the server). The
//! guard is then forgotten instead of dropped, so that it does not delete a second time; that
//! leaks its path string (tens of bytes) per cycle, which a bench run can afford.

use std::mem::ManuallyDrop;
use std::time::{Duration, Instant};

use serde_json::Value;
use zklock::zk;

use crate::zklock_side::{per_key_cycles, Phases, Window};

type BoxError = Box<dyn std::error::Error + Send + Sync>;

pub async fn client(connect: &str) -> Result<zk::Client, BoxError> {
    Ok(zk::Client::connector()
        .with_session_timeout(Duration::from_secs(10))
        .connect(connect)
        .await?)
}

/// Acquires the lock in `dir`; release with [`release`].
async fn acquire<'a>(client: &'a zk::Client, dir: &str) -> Result<ManuallyDrop<zk::LockClient<'a>>, zk::Error> {
    let prefix = zk::LockPrefix::new_curator(dir, "lock-")?;
    let options = zk::LockOptions::new(zk::Acls::anyone_all())
        .with_ancestor_options(zk::CreateMode::Container.with_acls(zk::Acls::anyone_all()))?;
    Ok(ManuallyDrop::new(client.lock(prefix, b"", options).await?))
}

/// Deletes the lock node of `guard` and waits for the answer.
async fn release(client: &zk::Client, guard: ManuallyDrop<zk::LockClient<'_>>) -> Result<(), zk::Error> {
    client.delete(guard.lock_path(), None).await
}

/// One acquire + release of the lock in `dir`.
async fn cycle(client: &zk::Client, dir: &str) -> Result<(), zk::Error> {
    let guard = acquire(client, dir).await?;
    release(client, guard).await
}

/// Back-to-back acquire + release of one uncontended lock.
pub struct Uncontended {
    client: zk::Client,
}

impl Uncontended {
    pub async fn new(connect: &str) -> Result<Uncontended, BoxError> {
        Ok(Uncontended {
            client: client(connect).await?,
        })
    }

    /// Runs `cycles` cycles; returns each one's latency in nanoseconds and the total time.
    pub async fn run(&self, cycles: usize) -> Result<(Vec<u64>, Duration), BoxError> {
        let mut ns = Vec::with_capacity(cycles);
        let start = Instant::now();
        for _ in 0..cycles {
            let t = Instant::now();
            cycle(&self.client, "/bench-uncontended-zkclient").await?;
            ns.push(t.elapsed().as_nanos() as u64);
        }
        Ok((ns, start.elapsed()))
    }
}

/// `tasks` tasks of one client loop acquire / tiny critical section / release on the lock in
/// `dir` through the window [start_ms, end_ms] (the same loop as zklock's `contended`).
pub async fn contended(
    client: &zk::Client,
    dir: &str,
    tasks: usize,
    start_ms: u64,
    end_ms: u64,
) -> Result<Value, BoxError> {
    let window = Window::new(start_ms, end_ms);
    let mut handles = Vec::new();
    for _ in 0..tasks {
        let (client, dir, window) = (client.clone(), dir.to_owned(), window.clone());
        handles.push(tokio::spawn(async move {
            window.opening().await;
            while window.is_open() {
                let guard = acquire(&client, &dir).await?;
                window.critical_section();
                release(&client, guard).await?;
                window.released();
            }
            Ok::<_, zk::Error>(())
        }));
    }
    for h in handles {
        h.await??;
    }
    Ok(window.report(tasks))
}

/// Per-key locking with the recipe: `tasks` tasks of one client on random keys out of `keys`,
/// through both `phases`; each `round` has directories of its own.
pub async fn distinct_keys(
    connect: &str,
    round: usize,
    tasks: usize,
    keys: usize,
    phases: Phases,
) -> Result<Value, BoxError> {
    let client = client(connect).await?;
    let counts = per_key_cycles(tasks, keys, phases, move |key| {
        let client = client.clone();
        async move { cycle(&client, &format!("/zkclient-distinct-{round}/key-{key}")).await }
    })
    .await?;
    Ok(phases.report(counts, tasks, keys))
}
