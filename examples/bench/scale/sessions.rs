//! The sessions curve: what the sessions open on one server cost it. Each point opens
//! `sessions` sessions from a few worker processes of the bench, each session holding one lock
//! of its own (one ephemeral node, and after 100 ms the holder's watch on it: a service's
//! steady state); then, with all of them open, it samples the server's CPU while only their
//! pings run, measures a lock cycle's latency from one more session, and reads the server's
//! memory (resident, and the heap in use after a full GC) and its own counts of connections,
//! ephemeral nodes and watches.

use std::time::{Duration, Instant};

use futures::{StreamExt, TryStreamExt};
use serde_json::{json, Value};

use crate::server::{mntr, Server};
use crate::stats::{round, Summary};
use crate::workers::{self, Held};
use crate::zklock_side;

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// How long the workers of a point may take to open their sessions and take their locks.
const READY_WITHIN: Duration = Duration::from_secs(300);

/// The worker's part of a point: opens `count` sessions, `prefix`-`i` locked in each, says so,
/// and keeps them until the bench closes its standard input; then releases and closes them.
pub async fn worker(connect: &str, count: usize, prefix: &str) -> Result<(), BoxError> {
    let started = Instant::now();
    let held: Vec<_> = futures::stream::iter(0..count)
        .map(|i| async move {
            let client = zklock_side::client(connect).await?;
            let guard = client.mutex(&format!("{prefix}-{i}"))?.acquire().await?;
            Ok::<_, BoxError>((client, guard))
        })
        .buffer_unordered(32)
        .try_collect()
        .await?;
    let opened = started.elapsed().as_secs_f64();
    workers::hold_until_told(&json!({ "sessions": held.len(), "open_s": round(opened) })).await?;
    for (client, guard) in held {
        guard.release().await?;
        drop(client);
    }
    Ok(())
}

/// One point: `sessions` sessions over `procs` worker processes, then the measurements while
/// they are open: the server's CPU and the requests it received over `idle` with only their
/// pings, `probe_cycles` lock cycles (acquire + release) from one more session, and the
/// server's memory and counts.
pub async fn point(
    launch: &workers::Launch,
    server: &Server,
    sessions: usize,
    procs: usize,
    idle: Duration,
    probe_cycles: usize,
) -> Result<Value, BoxError> {
    let connect = server.connect.clone();
    let procs = procs.clamp(1, sessions.max(1));
    let mut held = Vec::new();
    for i in 0..procs {
        let count = sessions / procs + usize::from(i < sessions % procs);
        let prefix = format!("bench-sessions-{sessions}-{i}");
        held.push(Held::spawn(
            launch,
            &["sessions".into(), connect.clone(), count.to_string(), prefix],
        )?);
    }
    // A worker that never answers fails the point; once this process ends, its standard input
    // closes and it lets its sessions go.
    let (mut held, ready) = tokio::time::timeout(
        READY_WITHIN,
        tokio::task::spawn_blocking(move || {
            let ready: Result<Vec<Value>, BoxError> = held.iter_mut().map(Held::ready).collect();
            (held, ready)
        }),
    )
    .await
    .map_err(|_| format!("the sessions workers were not ready within {READY_WITHIN:?}"))??;
    let ready = ready?;
    let open_s = ready.iter().filter_map(|r| r["open_s"].as_f64()).fold(0.0, f64::max);

    let packets = || {
        let connect = connect.clone();
        async move {
            let counts = tokio::task::spawn_blocking(move || mntr(&connect)).await??;
            let received = counts.get("zk_packets_received").and_then(|v| v.parse::<u64>().ok());
            Ok::<_, BoxError>(received)
        }
    };
    let (cpu_before, packets_before) = (server.cpu(), packets().await?);
    tokio::time::sleep(idle).await;
    let (cpu_after, packets_after) = (server.cpu(), packets().await?);
    let per_second = |d: f64| round(d / idle.as_secs_f64());
    let idle_cpu = cpu_after
        .zip(cpu_before)
        .map(|(after, before)| per_second(after.saturating_sub(before).as_secs_f64() * 100.0));
    // The mntr request itself is one packet of the window.
    let idle_requests = packets_after
        .zip(packets_before)
        .map(|(after, before)| per_second(after.saturating_sub(before).saturating_sub(1) as f64));

    let probe = zklock_side::Uncontended::new(&connect).await?;
    probe.run(probe_cycles / 10 + 1).await?;
    let (ns, took) = probe.run(probe_cycles).await?;
    let latency = Summary::of(ns, took);
    drop(probe);

    let counts = {
        let connect = connect.clone();
        tokio::task::spawn_blocking(move || mntr(&connect)).await??
    };
    let count = |key: &str| counts.get(key).and_then(|v| v.parse::<f64>().ok());
    let memory = server.memory().await;

    tokio::task::spawn_blocking(move || held.drain(..).try_for_each(Held::finish)).await??;
    Ok(json!({
        "sessions": sessions,
        "processes": procs,
        "open_s": round(open_s),
        "server_connections": count("zk_num_alive_connections"),
        "server_ephemerals": count("zk_ephemerals_count"),
        "server_watches": count("zk_watch_count"),
        "server_idle_cpu_percent": idle_cpu,
        "server_idle_requests_per_sec": idle_requests,
        "server_rss_mb": memory["rss_mb"],
        "server_heap_used_mb": memory["heap_used_after_gc_mb"],
        "probe_cycles": probe_cycles,
        "probe_p50_us": round(latency.p50_us),
        "probe_p99_us": round(latency.p99_us),
    }))
}

/// How the points grow from the fewest sessions to the most: the probe's p50 and p99, the
/// server's heap in use, its idle CPU and requests, each as a factor from the first point with
/// a figure above zero and a word for the curve from there (see [`super::shape`]), and the
/// heap each session added.
pub fn growth(points: &[Value]) -> Value {
    let mut points: Vec<&Value> = points.iter().collect();
    points.sort_by_key(|p| p["sessions"].as_u64());
    let (Some(first), Some(last)) = (points.first(), points.last()) else {
        return Value::Null;
    };
    let sessions = |p: &Value| p["sessions"].as_f64().unwrap_or(1.0).max(1.0);
    let curve = |key: &str| -> Vec<(f64, f64)> {
        points
            .iter()
            .filter_map(|p| Some((sessions(p), p[key].as_f64()?)))
            .skip_while(|&(_, y)| y <= 0.0)
            .collect()
    };
    let mut out = json!({ "sessions": [first["sessions"], last["sessions"]] });
    for key in [
        "probe_p50_us",
        "probe_p99_us",
        "server_heap_used_mb",
        "server_idle_cpu_percent",
        "server_idle_requests_per_sec",
    ] {
        let base = points.iter().find(|p| p[key].as_f64().is_some_and(|v| v > 0.0));
        let factor = match (base.and_then(|p| p[key].as_f64()), last[key].as_f64()) {
            (Some(a), Some(b)) => Some(round(b / a)),
            _ => None,
        };
        out[key] = json!({
            "from_to": [base.map(|p| &p[key]), last[key]],
            "sessions": [base.map(|p| &p["sessions"]), last["sessions"]],
            "factor": factor,
            "grows": super::shape(&curve(key)),
        });
    }
    let added = sessions(last) - sessions(first);
    let heap = match (
        first["server_heap_used_mb"].as_f64(),
        last["server_heap_used_mb"].as_f64(),
    ) {
        (Some(a), Some(b)) if added > 0.0 => Some(round((b - a) * 1024.0 / added)),
        _ => None,
    };
    out["server_heap_kib_per_session"] = json!(heap);
    out
}
