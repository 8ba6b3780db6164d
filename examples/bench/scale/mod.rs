//! The scale curves: how zklock's costs grow with the contenders on one lock (the handoff
//! curve, [`handoff`]), with the number of distinct keys ([`keys`]) and with the sessions open
//! on one server ([`sessions`]). Each curve is a list of points measured in worker processes of
//! the bench, a growth summary, a table and a chart ([`chart`]).

pub mod chart;
pub mod handoff;
pub mod keys;
pub mod sessions;

use std::path::Path;
use std::time::Duration;

use serde_json::{json, Value};

use crate::server::Server;
use crate::workers::Launch;

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// The sizes of the three curves.
pub struct ScalePlan {
    /// (processes, contenders) points of the handoff curve, and each point's window.
    pub handoff_points: Vec<(usize, usize)>,
    pub handoff_window: Duration,
    /// Distinct keys of each point of the keys curve, its tasks, and each phase's length.
    pub keys_points: Vec<usize>,
    pub keys_tasks: usize,
    pub keys_phase: Duration,
    /// Sessions of each point of the sessions curve, the processes that open them, the idle
    /// window the server's CPU is sampled over, and the probe's cycles.
    pub sessions_points: Vec<usize>,
    pub sessions_processes: usize,
    pub sessions_idle: Duration,
    pub sessions_probe_cycles: usize,
}

impl ScalePlan {
    pub fn quick() -> ScalePlan {
        ScalePlan {
            handoff_points: vec![(1, 1), (1, 10), (2, 10), (1, 100), (2, 100)],
            handoff_window: Duration::from_secs(2),
            keys_points: vec![1, 100, 10_000, 1_000_000],
            keys_tasks: 64,
            keys_phase: Duration::from_secs(2),
            sessions_points: vec![1, 100, 1000],
            sessions_processes: 4,
            sessions_idle: Duration::from_secs(2),
            sessions_probe_cycles: 300,
        }
    }

    pub fn full() -> ScalePlan {
        ScalePlan {
            handoff_points: vec![
                (1, 1),
                (1, 10),
                (2, 10),
                (8, 10),
                (1, 100),
                (2, 100),
                (8, 100),
                (1, 1000),
                (2, 1000),
                (8, 1000),
            ],
            handoff_window: Duration::from_secs(5),
            keys_points: vec![1, 10, 100, 1000, 10_000, 100_000, 1_000_000],
            keys_tasks: 64,
            keys_phase: Duration::from_secs(5),
            sessions_points: vec![1, 10, 100, 300, 1000],
            sessions_processes: 4,
            sessions_idle: Duration::from_secs(5),
            sessions_probe_cycles: 2000,
        }
    }

    /// How many steps (points) the curves take.
    pub fn steps(&self) -> usize {
        self.handoff_points.len() + self.keys_points.len() + self.sessions_points.len()
    }
}

/// Measures every point of the three curves on `server`, with worker processes started by
/// `launch`, calling `step` before each point; the `scale` object of results.json.
pub async fn run(
    server: &Server,
    plan: &ScalePlan,
    launch: &Launch,
    step: &mut dyn FnMut(&str),
) -> Result<Value, BoxError> {
    let connect = &server.connect;
    let mut handoff = Vec::new();
    for &(procs, waiters) in &plan.handoff_points {
        step(&format!("handoff scale: {waiters} contenders over {procs} processes"));
        handoff.push(handoff::point(launch, connect, procs, waiters, plan.handoff_window).await?);
    }
    let mut keys = Vec::new();
    for &n in &plan.keys_points {
        step(&format!("keys scale: {} tasks over {n} keys", plan.keys_tasks));
        keys.push(keys::point(launch, connect, n, plan.keys_tasks, plan.keys_phase).await?);
    }
    let mut sessions = Vec::new();
    for &n in &plan.sessions_points {
        step(&format!(
            "sessions scale: {n} sessions from {} processes, one lock held in each",
            plan.sessions_processes.min(n)
        ));
        sessions.push(
            sessions::point(
                launch,
                server,
                n,
                plan.sessions_processes,
                plan.sessions_idle,
                plan.sessions_probe_cycles,
            )
            .await?,
        );
    }
    Ok(json!({
        "handoff_growth": handoff::growth(&handoff),
        "handoff": handoff,
        "keys_growth": keys::growth(&keys),
        "keys": keys,
        "sessions_growth": sessions::growth(&sessions),
        "sessions": sessions,
    }))
}

/// Writes the three charts of `scale` into `dir`: handoff.svg, keys.svg and sessions.svg.
pub fn write_charts(scale: &Value, subtitle: &str, dir: &Path) -> std::io::Result<()> {
    std::fs::write(dir.join("handoff.svg"), chart::handoff(&scale["handoff"], subtitle))?;
    std::fs::write(dir.join("keys.svg"), chart::keys(&scale["keys"], subtitle))?;
    std::fs::write(dir.join("sessions.svg"), chart::sessions(&scale["sessions"], subtitle))
}

/// A word for how a cost grows over a curve, from `factor` (the cost at the curve's largest
/// point over its smallest) and `x_factor` (the largest point's size over the smallest's):
/// `flat` under 2 x; `sublinear` (a logarithm's growth included) under the square root of
/// `x_factor`; `linear or steeper` otherwise.
pub fn grows(factor: Option<f64>, x_factor: f64) -> &'static str {
    match factor {
        None => "unknown",
        Some(f) if f < 2.0 => "flat",
        Some(f) if f < x_factor.sqrt() => "sublinear",
        Some(_) => "linear or steeper",
    }
}

/// A word for the shape of a cost over a curve of (size, cost) points, sorted by size: `falls`
/// when the last cost is under half the first; `flat` when it is under twice the first (a
/// bounded cost may peak in between: see the curve's figures); otherwise `logarithmic` or
/// `linear`, whichever of cost = a + b ln(size) and cost = a + b size fits the points better
/// (least squares). With fewer than three points the two fits cannot be told apart, and
/// [`grows`] decides.
pub fn shape(points: &[(f64, f64)]) -> &'static str {
    let (Some(&(x0, y0)), Some(&(x1, y1))) = (points.first(), points.last()) else {
        return "unknown";
    };
    if y0 <= 0.0 {
        return "unknown";
    }
    if y1 < 0.5 * y0 {
        return "falls";
    }
    if y1 < 2.0 * y0 {
        return "flat";
    }
    if points.len() < 3 {
        return grows(Some(y1 / y0), x1 / x0.max(1e-9));
    }
    let log: Vec<(f64, f64)> = points.iter().map(|&(x, y)| (x.max(1e-9).ln(), y)).collect();
    if residual(&log) < residual(points) {
        "logarithmic"
    } else {
        "linear"
    }
}

/// The sum of squared residuals of the least-squares line through `points`.
fn residual(points: &[(f64, f64)]) -> f64 {
    let n = points.len() as f64;
    let mean_x = points.iter().map(|p| p.0).sum::<f64>() / n;
    let mean_y = points.iter().map(|p| p.1).sum::<f64>() / n;
    let sxx: f64 = points.iter().map(|p| (p.0 - mean_x).powi(2)).sum();
    let sxy: f64 = points.iter().map(|p| (p.0 - mean_x) * (p.1 - mean_y)).sum();
    let slope = if sxx > 0.0 { sxy / sxx } else { 0.0 };
    points
        .iter()
        .map(|p| (p.1 - mean_y - slope * (p.0 - mean_x)).powi(2))
        .sum()
}

/// The three tables.
pub fn print(scale: &Value) {
    print_handoff(scale);
    print_keys(scale);
    print_sessions(scale);
}

fn row(cells: &[String]) {
    let line: Vec<String> = cells.iter().map(|c| format!("{c:>12}")).collect();
    println!("  {}", line.join(" "));
}

fn cells(p: &Value, keys: &[&str]) -> Vec<String> {
    keys.iter().map(|k| p[*k].to_string()).collect()
}

fn heading(names: &[&str]) -> Vec<String> {
    names.iter().map(|n| n.to_string()).collect()
}

fn print_handoff(scale: &Value) {
    println!();
    println!("Handoff against contenders on one lock (release to next grant)");
    row(&heading(&[
        "processes",
        "contenders",
        "grants/s",
        "p50 µs",
        "p99 µs",
        "notif./rel.",
    ]));
    for p in scale["handoff"].as_array().into_iter().flatten() {
        row(&cells(
            p,
            &[
                "processes",
                "contenders",
                "grants_per_sec",
                "handoff_p50_us",
                "handoff_p99_us",
                "notifications_per_release",
            ],
        ));
    }
    for (procs, g) in scale["handoff_growth"].as_object().into_iter().flatten() {
        println!(
            "  {procs}: p50 x{} and p99 x{} from {} to {} contenders: {}",
            g["p50_factor"],
            g["p99_factor"],
            g["contenders"][0],
            g["contenders"][1],
            word(&g["p50_grows"])
        );
    }
}

fn print_keys(scale: &Value) {
    println!();
    println!("Per-key locking against distinct keys (one process, 64 tasks)");
    row(&heading(&[
        "keys",
        "cold acq/s",
        "warm acq/s",
        "touched",
        "RSS MB",
        "growth MB",
        "B/key",
    ]));
    for p in scale["keys"].as_array().into_iter().flatten() {
        row(&cells(
            p,
            &[
                "keys",
                "cold_acquisitions_per_sec",
                "warm_acquisitions_per_sec",
                "keys_touched",
                "rss_after_mb",
                "rss_growth_mb",
                "rss_growth_bytes_per_key_touched",
            ],
        ));
    }
    let g = &scale["keys_growth"];
    println!(
        "  from {} to {} keys: warm cost x{} ({}), client memory x{} ({}, peak {} MB at {} keys)",
        g["keys"][0],
        g["keys"][1],
        g["warm_cost_factor"],
        word(&g["warm_cost_grows"]),
        g["rss_factor"],
        word(&g["rss_grows"]),
        g["rss_peak"]["rss_after_mb"],
        g["rss_peak"]["keys"]
    );
}

fn word(v: &Value) -> &str {
    v.as_str().unwrap_or("?")
}

fn print_sessions(scale: &Value) {
    println!();
    println!("Sessions open on the server (one lock held in each)");
    row(&heading(&[
        "sessions",
        "conns",
        "watches",
        "idle CPU %",
        "idle req/s",
        "heap MB",
        "RSS MB",
        "p50 µs",
        "p99 µs",
    ]));
    for p in scale["sessions"].as_array().into_iter().flatten() {
        row(&cells(
            p,
            &[
                "sessions",
                "server_connections",
                "server_watches",
                "server_idle_cpu_percent",
                "server_idle_requests_per_sec",
                "server_heap_used_mb",
                "server_rss_mb",
                "probe_p50_us",
                "probe_p99_us",
            ],
        ));
    }
    let g = &scale["sessions_growth"];
    println!("  up to {} sessions:", g["sessions"][1]);
    for (key, what) in [
        ("probe_p50_us", "probe p50"),
        ("probe_p99_us", "probe p99"),
        ("server_heap_used_mb", "server heap"),
        ("server_idle_cpu_percent", "server idle CPU"),
        ("server_idle_requests_per_sec", "server idle requests"),
    ] {
        let f = &g[key];
        println!(
            "    {what}: x{} from {} sessions ({})",
            f["factor"],
            f["sessions"][0],
            word(&f["grows"])
        );
    }
    println!("    server heap per session: {} KiB", g["server_heap_kib_per_session"]);
}
