//! The handoff curve: how the handoff of one lock grows with the contenders queued on it and
//! the processes they are spread over. Each point runs `procs` worker processes of the bench (one
//! session each) whose tasks, `waiters` in all, loop acquire / release on one lock through a
//! window; every grant and release is stamped with the wall clock, and the handoff latency is
//! the time from one holder's release to the next holder's grant. The server's own count of
//! watch notifications over the window, divided by the releases in it, is the notifications per
//! release.

use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde_json::{json, Value};

use crate::server::notifications_sent;
use crate::stats::round;
use crate::workers;
use crate::zklock_side::{self, epoch_ms};

type BoxError = Box<dyn std::error::Error + Send + Sync>;

fn epoch_ns() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0)
}

/// One worker process's part of a point: `tasks` tasks of one client loop on lock `name` until
/// `end_ms`, and report each hold that began inside [`start_ms`, `end_ms`] as
/// `[granted_ns, released_ns]` (the release stamped as it begins).
pub async fn worker(connect: &str, name: &str, tasks: usize, start_ms: u64, end_ms: u64) -> Result<Value, BoxError> {
    let client = zklock_side::client(connect).await?;
    let holds = Arc::new(Mutex::new(Vec::<[u64; 2]>::new()));
    let mut handles = Vec::new();
    for _ in 0..tasks {
        let lock = client.mutex(name)?;
        let holds = holds.clone();
        handles.push(tokio::spawn(async move {
            while epoch_ms() < end_ms {
                let guard = lock.acquire().await?;
                let granted = epoch_ns();
                let released = epoch_ns();
                if granted / 1_000_000 >= start_ms && granted / 1_000_000 < end_ms {
                    holds
                        .lock()
                        .unwrap_or_else(|p| p.into_inner())
                        .push([granted, released]);
                }
                guard.release().await?;
            }
            Ok::<_, zklock::LockError>(())
        }));
    }
    for h in handles {
        h.await??;
    }
    let holds = std::mem::take(&mut *holds.lock().unwrap_or_else(|p| p.into_inner()));
    Ok(json!({ "holds": holds }))
}

/// The handoff latencies (µs) of `holds` from all processes: each grant's distance from the
/// release before it, in grant order. `Err` with the pair when a grant came before the previous
/// release: two holders at once.
pub fn handoffs(mut holds: Vec<[u64; 2]>) -> Result<Vec<f64>, String> {
    holds.sort_unstable();
    let mut gaps = Vec::with_capacity(holds.len());
    for pair in holds.windows(2) {
        let ([_, released], [granted, _]) = (pair[0], pair[1]);
        if granted < released {
            return Err(format!(
                "a grant at {granted} ns came before the release at {released} ns"
            ));
        }
        gaps.push((granted - released) as f64 / 1000.0);
    }
    Ok(gaps)
}

/// One point of the curve: `waiters` contenders over `procs` worker processes (one session
/// each) loop on one lock for `length`; the handoff latency's p50 and p99, the grants per
/// second, and the server's watch notifications per release over the window.
pub async fn point(
    launch: &workers::Launch,
    connect: &str,
    procs: usize,
    waiters: usize,
    length: Duration,
) -> Result<Value, BoxError> {
    // Room for the workers to start and queue before the window opens.
    let (start, end) = workers::window(Duration::from_millis(2000), length);
    let name = format!("bench-handoff-{procs}x{waiters}");
    let args: Vec<Vec<String>> = (0..procs)
        .map(|i| {
            let tasks = waiters / procs + usize::from(i < waiters % procs);
            let mut args = vec!["handoff".to_string(), connect.to_string(), name.clone()];
            args.extend([tasks.to_string(), start.to_string(), end.to_string()]);
            args
        })
        .collect();
    let children = workers::spawn(launch, &args)?;
    let mut sent = Vec::new();
    for at in [start, end] {
        tokio::time::sleep(Duration::from_millis(at.saturating_sub(epoch_ms()))).await;
        let connect = connect.to_owned();
        sent.push(tokio::task::spawn_blocking(move || notifications_sent(&connect)).await?);
    }
    let answers = workers::collect(children, "handoff").await?;
    let holds: Vec<[u64; 2]> = answers
        .iter()
        .flat_map(|a| a["holds"].as_array().cloned().unwrap_or_default())
        .filter_map(|h| Some([h[0].as_u64()?, h[1].as_u64()?]))
        .collect();
    let grants = holds.len();
    let mut gaps = handoffs(holds)?;
    gaps.sort_by(f64::total_cmp);
    let at = |q: f64| {
        gaps.get(((gaps.len() as f64 - 1.0) * q).round() as usize)
            .map(|v| round(*v))
    };
    let notifications = match (&sent[0], &sent[1]) {
        (Ok(before), Ok(after)) if grants > 0 => Some(round(after.saturating_sub(*before) as f64 / grants as f64)),
        _ => None,
    };
    Ok(json!({
        "processes": procs,
        "contenders": waiters,
        "window_s": length.as_secs_f64(),
        "grants_per_sec": round(grants as f64 / length.as_secs_f64()),
        "handoff_p50_us": at(0.5),
        "handoff_p99_us": at(0.99),
        "notifications_per_release": notifications,
    }))
}

/// How the handoff grows with the contenders, per process count: the p50 and p99 at the fewest
/// and at the most contenders measured, the factors between them, and a word for the p50's
/// growth against the growth in contenders (see [`super::grows`]).
pub fn growth(points: &[Value]) -> Value {
    let mut by_procs: Vec<u64> = points.iter().filter_map(|p| p["processes"].as_u64()).collect();
    by_procs.sort_unstable();
    by_procs.dedup();
    let mut out = serde_json::Map::new();
    for procs in by_procs {
        let mut mine: Vec<&Value> = points
            .iter()
            .filter(|p| p["processes"].as_u64() == Some(procs))
            .collect();
        mine.sort_by_key(|p| p["contenders"].as_u64());
        let (Some(first), Some(last)) = (mine.first(), mine.last()) else {
            continue;
        };
        let factor = |key: &str| match (first[key].as_f64(), last[key].as_f64()) {
            (Some(a), Some(b)) if a > 0.0 => Some((b / a * 100.0).round() / 100.0),
            _ => None,
        };
        let contenders =
            last["contenders"].as_f64().unwrap_or(1.0) / first["contenders"].as_f64().unwrap_or(1.0).max(1.0);
        let p50 = factor("handoff_p50_us");
        let word = super::grows(p50, contenders);
        out.insert(
            format!("{procs} processes"),
            json!({
                "contenders": [first["contenders"], last["contenders"]],
                "handoff_p50_us": [first["handoff_p50_us"], last["handoff_p50_us"]],
                "handoff_p99_us": [first["handoff_p99_us"], last["handoff_p99_us"]],
                "p50_factor": p50,
                "p99_factor": factor("handoff_p99_us"),
                "p50_grows": word,
            }),
        );
    }
    Value::Object(out)
}
