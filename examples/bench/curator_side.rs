//! The Curator measurements, run by the Java peer (`zklock-testing/java/CuratorPeer.java`) on the Debian jars.

use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use zklock::testing::curator::CuratorPeer;
use zklock::zk;

use crate::server::{notifications_sent, watch_summary};
use crate::zklock_side::Phases;

type BoxError = Box<dyn std::error::Error + Send + Sync>;

const LONG: Duration = Duration::from_secs(600);

pub async fn peer(connect: &str) -> Result<CuratorPeer, BoxError> {
    Ok(CuratorPeer::start_with(connect, Duration::from_secs(10)).await?)
}

fn parse(text: &str) -> Result<Value, BoxError> {
    Ok(serde_json::from_str(text)?)
}

/// Back-to-back acquire + release of one uncontended InterProcessMutex, in the peer.
pub async fn uncontended(peer: &CuratorPeer, cycles: usize) -> Result<(Vec<u64>, Duration), BoxError> {
    let command = format!("bench-uncontended /zklock/bench-uncontended-curator 0 {cycles}");
    let result = parse(&peer.bench(&command, LONG).await?)?;
    let ns: Vec<u64> = result["latencies_ns"]
        .as_array()
        .ok_or("no latencies")?
        .iter()
        .filter_map(Value::as_u64)
        .collect();
    let total = Duration::from_nanos(result["total_ns"].as_u64().ok_or("no total")?);
    Ok((ns, total))
}

pub async fn reentrant(connect: &str, warmup: usize, cycles: usize) -> Result<f64, BoxError> {
    let peer = peer(connect).await?;
    let result = parse(
        &peer
            .bench(
                &format!("bench-reentrant /zklock/bench-reentrant-curator {warmup} {cycles}"),
                LONG,
            )
            .await?,
    )?;
    Ok(result["total_ns"].as_f64().ok_or("no total")? / cycles as f64)
}

/// Runs `bench-contended` on every peer at once (same wall-clock window).
pub async fn contended(
    peers: &[Arc<CuratorPeer>],
    path: &str,
    threads: usize,
    start_ms: u64,
    end_ms: u64,
) -> Result<Vec<Value>, BoxError> {
    let command = format!("bench-contended {path} {threads} {start_ms} {end_ms}");
    let runs: Vec<_> = peers
        .iter()
        .map(|p| {
            let (p, command) = (p.clone(), command.clone());
            tokio::spawn(async move { p.bench(&command, LONG).await })
        })
        .collect();
    let mut out = Vec::new();
    for r in runs {
        out.push(parse(&r.await??)?);
    }
    Ok(out)
}

/// Herd check for Curator: `waiters` InterProcessMutex contenders of one Curator session queue
/// in id order behind a holder; count server notifications per hand-over.
pub async fn herd(connect: &str, waiters: usize, releases: usize) -> Result<Value, BoxError> {
    let peer = peer(connect).await?;
    let view = zk::Client::connector()
        .with_session_timeout(Duration::from_secs(10))
        .connect(connect)
        .await?;
    let path = "/zklock/bench-herd-curator";
    for i in 0..=waiters {
        peer.mutex(&format!("w{i}"), path).await?;
    }
    peer.acquire("w0", None)?;
    peer.wait_acquired("w0", Duration::from_secs(30)).await?;
    let deadline = Instant::now() + Duration::from_secs(120);
    for i in 1..=waiters {
        peer.acquire(&format!("w{i}"), None)?;
        // Enqueue one at a time so the queue order is the id order.
        while view.list_children(path).await?.len() < i + 1 {
            if Instant::now() > deadline {
                return Err("Curator waiters did not queue within 120 s".into());
            }
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    let (_, paths_before, watches_before) = watch_summary(connect)?;
    let mut per_release = Vec::new();
    for i in 0..releases.min(waiters) {
        let before = notifications_sent(connect)?;
        peer.release(&format!("w{i}")).await?;
        peer.wait_acquired(&format!("w{}", i + 1), Duration::from_secs(30))
            .await?;
        tokio::time::sleep(Duration::from_millis(100)).await;
        per_release.push(notifications_sent(connect)? - before);
    }
    Ok(json!({
        "waiters": waiters,
        "sessions": 1,
        "watches_before_first_release": watches_before,
        "paths_watched_before_first_release": paths_before,
        "notifications_per_release": per_release,
        "max_notifications_per_release": per_release.iter().max(),
    }))
}

/// Per-key locking in the peer: `threads` threads each pick a random key out of `keys`,
/// through the same two phases as zklock's run, under a prefix of the `round`'s own.
pub async fn distinct_keys(
    peer: &CuratorPeer,
    round: usize,
    threads: usize,
    keys: usize,
    phases: Phases,
) -> Result<Value, BoxError> {
    let Phases {
        begin_ms,
        middle_ms,
        end_ms,
    } = phases;
    let command =
        format!("bench-distinct /zklock-distinct-curator-{round} {threads} {keys} {begin_ms} {middle_ms} {end_ms}");
    parse(&peer.bench(&command, LONG).await?)
}
