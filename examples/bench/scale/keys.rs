//! The keys curve: how per-key locking grows with the number of distinct keys. Each point runs
//! one worker process of the bench (one session) whose tasks pick keys at random out of `keys`
//! and acquire + release each key's lock, through a cold phase (the keys' directories do not
//! exist yet) and a warm one; the worker reports both phases' acquisitions, how many distinct
//! keys it touched, and its resident memory before the load, after it (every lock released,
//! the client still open) and at its peak.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use serde_json::{json, Value};
use zklock::LockClient;

use crate::stats::round;
use crate::workers;
use crate::zklock_side::{per_key_cycles, rss_kib, status_kib, Phases};

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// The worker's part of a point: `tasks` tasks over `keys` keys for two phases of `phase`
/// each, on a namespace of the point's own (so its cold phase starts without directories).
pub async fn worker(connect: &str, keys: usize, tasks: usize, phase: Duration) -> Result<Value, BoxError> {
    let client = LockClient::builder(connect)
        .namespace(format!("/zklock-keys-{keys}"))
        .session_timeout(Duration::from_secs(10))
        .connect()
        .await?;
    // One bit per key, allocated (and written) before the baseline, so the bitmap itself is
    // not counted as the client's memory.
    let touched: Arc<Vec<AtomicU64>> = Arc::new((0..keys.div_ceil(64)).map(|_| AtomicU64::new(0)).collect());
    let before = rss_kib()?;
    let phases = Phases::after(Duration::from_millis(300), phase);
    let marks = touched.clone();
    let counts = per_key_cycles(tasks, keys, phases, move |key| {
        let (client, marks) = (client.clone(), marks.clone());
        async move {
            marks[(key / 64) as usize].fetch_or(1 << (key % 64), Ordering::Relaxed);
            client.mutex(&format!("key-{key}"))?.acquire().await?.release().await
        }
    })
    .await?;
    let after = rss_kib()?;
    let peak = status_kib("VmHWM")?;
    let distinct: u64 = touched
        .iter()
        .map(|w| u64::from(w.load(Ordering::Relaxed).count_ones()))
        .sum();
    let mb = |kib: u64| round(kib as f64 / 1024.0);
    Ok(json!({
        "keys": keys,
        "tasks": tasks,
        "phase_s": phase.as_secs_f64(),
        "acquisitions": { "cold": counts[0], "warm": counts[1] },
        "keys_touched": distinct,
        "rss_before_mb": mb(before),
        "rss_after_mb": mb(after),
        "rss_peak_mb": mb(peak),
    }))
}

/// One point: the worker's answer in a process of its own, with each phase's rate and the
/// client's memory growth, in all and per key touched.
pub async fn point(
    launch: &workers::Launch,
    connect: &str,
    keys: usize,
    tasks: usize,
    phase: Duration,
) -> Result<Value, BoxError> {
    let args = vec![
        "keys".to_string(),
        connect.to_string(),
        keys.to_string(),
        tasks.to_string(),
        phase.as_millis().to_string(),
    ];
    let mut answers = workers::collect(workers::spawn(launch, &[args])?, "keys").await?;
    let mut point = answers.pop().ok_or("the keys worker gave no answer")?;
    let seconds = phase.as_secs_f64();
    for name in ["cold", "warm"] {
        let n = point["acquisitions"][name].as_f64().unwrap_or(0.0);
        point[format!("{name}_acquisitions_per_sec")] = json!(round(n / seconds));
    }
    let growth = point["rss_after_mb"].as_f64().unwrap_or(0.0) - point["rss_before_mb"].as_f64().unwrap_or(0.0);
    point["rss_growth_mb"] = json!(round(growth));
    // Over a few keys the growth is the runtime's and the allocator's, not the keys'.
    let touched = point["keys_touched"].as_f64().unwrap_or(0.0);
    let per_key = (touched >= 1000.0).then(|| round(growth * 1024.0 * 1024.0 / touched));
    point["rss_growth_bytes_per_key_touched"] = json!(per_key);
    Ok(point)
}

/// How the points grow from the fewest keys to the most: the warm phase's cost per
/// acquisition (the inverse of its rate) and the client's resident memory after the load,
/// each as a factor and a word (see [`super::shape`]). Points with fewer keys than tasks are
/// left out: there the tasks queue on shared keys, and a grant is a handoff inside the
/// process, another regime (the handoff curve's).
pub fn growth(points: &[Value]) -> Value {
    let mut points: Vec<&Value> = points
        .iter()
        .filter(|p| p["keys"].as_u64() >= p["tasks"].as_u64())
        .collect();
    points.sort_by_key(|p| p["keys"].as_u64());
    let (Some(first), Some(last)) = (points.first(), points.last()) else {
        return Value::Null;
    };
    let factor = |a: Option<f64>, b: Option<f64>| match (a, b) {
        (Some(a), Some(b)) if a > 0.0 => Some(round(b / a)),
        _ => None,
    };
    let rate = |p: &Value| p["warm_acquisitions_per_sec"].as_f64();
    // The cost per acquisition is the inverse of the rate: its factor is first rate / last.
    let cost = factor(rate(last), rate(first));
    let memory = factor(first["rss_after_mb"].as_f64(), last["rss_after_mb"].as_f64());
    let curve = |y: &dyn Fn(&Value) -> Option<f64>| -> Vec<(f64, f64)> {
        points
            .iter()
            .filter_map(|p| Some((p["keys"].as_f64()?, y(p)?)))
            .collect()
    };
    let cost_curve = curve(&|p| rate(p).filter(|r| *r > 0.0).map(|r| 1.0 / r));
    let memory_curve = curve(&|p| p["rss_after_mb"].as_f64());
    let peak = memory_curve.iter().copied().max_by(|a, b| a.1.total_cmp(&b.1));
    json!({
        "keys": [first["keys"], last["keys"]],
        "warm_acquisitions_per_sec": [first["warm_acquisitions_per_sec"], last["warm_acquisitions_per_sec"]],
        "warm_cost_factor": cost,
        "warm_cost_grows": super::shape(&cost_curve),
        "rss_after_mb": [first["rss_after_mb"], last["rss_after_mb"]],
        "rss_factor": memory,
        "rss_grows": super::shape(&memory_curve),
        "rss_peak": { "keys": peak.map(|p| p.0), "rss_after_mb": peak.map(|p| p.1) },
    })
}
