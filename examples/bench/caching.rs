//! Lock caching (`LockClient::builder(..).default_cache(linger)`): what a grant from the cache
//! costs the process that keeps the node, and what the cache costs a contender of another
//! process that wants the lock next.

use std::time::{Duration, Instant};

use serde_json::{json, Value};
use zklock::LockClient;

use crate::stats::{ratio, round, Summary};

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// The linger of the caching clients: far longer than any phase here, so only a contender (or
/// the end of the phase) takes a kept node away.
const LINGER: Duration = Duration::from_secs(60);

async fn client(connect: &str, cache: bool) -> Result<LockClient, BoxError> {
    let builder = LockClient::builder(connect).session_timeout(Duration::from_secs(10));
    let builder = if cache { builder.default_cache(LINGER) } else { builder };
    Ok(builder.connect().await?)
}

/// Back-to-back acquire + release of one lock by one task of a caching client: after the first
/// cycle every grant comes from the cache. Returns each cycle's latency.
pub async fn reacquire(connect: &str, warmup: usize, cycles: usize) -> Result<Summary, BoxError> {
    let client = client(connect, true).await?;
    let lock = client.mutex("bench-cached-reacquire")?;
    for _ in 0..warmup {
        lock.acquire().await?.release().await?;
    }
    let mut ns = Vec::with_capacity(cycles);
    let start = Instant::now();
    for _ in 0..cycles {
        let t = Instant::now();
        lock.acquire().await?.release().await?;
        ns.push(t.elapsed().as_nanos() as u64);
    }
    let took = start.elapsed();
    let granted_from_cache = client.metrics().granted_from_cache;
    client.close().await;
    if (granted_from_cache as usize) < cycles {
        return Err(format!("only {granted_from_cache} of {cycles} cached re-acquisitions came from the cache").into());
    }
    Ok(Summary::of(ns, took))
}

/// How long a contender of another process waits for a lock whose node a caching process
/// keeps idle (from its `acquire` to the grant: its create, the keeper's notification, the
/// keeper's delete and its own notification), beside the uncached handoff it is compared with:
/// the contender already queued behind a holder, from the holder's `release` to the grant (the
/// delete and the notification). `rounds` of each, interleaved.
pub async fn remote_wait(connect: &str, rounds: usize) -> Result<Value, BoxError> {
    let keeper = client(connect, true).await?;
    let holder = client(connect, false).await?;
    let contender = client(connect, false).await?;
    let view = contender.zookeeper().await?;
    let name = "bench-cached-remote-wait";
    let dir = contender.mutex(name)?.path().to_owned();
    let mut cached_ns = Vec::with_capacity(rounds);
    let mut handoff_ns = Vec::with_capacity(rounds);
    for _ in 0..rounds {
        // Cached: the keeper's node idles in its cache when the contender asks.
        let kept = keeper.mutex(name)?;
        kept.acquire().await?.release().await?;
        if !kept.is_cached() {
            return Err("the keeper did not keep its node".into());
        }
        // Let the keeper's directory watch settle, as it has on a lock idle for a while.
        tokio::time::sleep(Duration::from_millis(20)).await;
        let t = Instant::now();
        let guard = contender.mutex(name)?.acquire().await?;
        cached_ns.push(t.elapsed().as_nanos() as u64);
        guard.release().await?;

        // Uncached: the contender queued behind a holder that releases.
        let held = holder.mutex(name)?.acquire().await?;
        let lock = contender.mutex(name)?;
        let waiting = tokio::spawn(async move {
            let guard = lock.acquire().await?;
            let granted = Instant::now();
            guard.release().await?;
            Ok::<_, zklock::LockError>(granted)
        });
        let deadline = Instant::now() + Duration::from_secs(30);
        while view.list_children(&dir).await?.len() < 2 {
            if Instant::now() > deadline {
                return Err("the contender never queued".into());
            }
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
        let t = Instant::now();
        held.release().await?;
        let granted = waiting.await??;
        handoff_ns.push(granted.duration_since(t).as_nanos() as u64);
    }
    keeper.close().await;
    let cached = Summary::of(cached_ns, Duration::ZERO);
    let handoff = Summary::of(handoff_ns, Duration::ZERO);
    Ok(json!({
        "rounds": rounds,
        "behind_cached_node": wait_json(&cached),
        "uncached_handoff": wait_json(&handoff),
        "p50_cached_vs_uncached_handoff": ratio(cached.p50_us, handoff.p50_us),
        "p99_cached_vs_uncached_handoff": ratio(cached.p99_us, handoff.p99_us),
    }))
}

fn wait_json(s: &Summary) -> Value {
    json!({
        "p50_us": round(s.p50_us),
        "p90_us": round(s.p90_us),
        "p99_us": round(s.p99_us),
        "max_us": round(s.max_us),
    })
}
