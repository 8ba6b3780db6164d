//! The scale curves' charts: one per curve, two panels each, drawn with [`crate::chart`].

use serde_json::Value;

use crate::chart::{header, panel, Scale, Series};

const COLORS: [&str; 4] = ["#d62728", "#1f77b4", "#2ca02c", "#9467bd"];

/// The (`x`, `y`) pairs of `points` where both are numbers.
fn line(points: &Value, x: &str, y: &str) -> Vec<(f64, f64)> {
    points
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|p| Some((p[x].as_f64()?, p[y].as_f64()?)))
        .collect()
}

fn series(label: &str, color: &'static str, dashed: bool, points: Vec<(f64, f64)>) -> Series {
    Series {
        label: label.to_owned(),
        color,
        dashed,
        points,
    }
}

const LOG_LOG: Scale = Scale {
    log_x: true,
    log_y: true,
};
const LOG_X: Scale = Scale {
    log_x: true,
    log_y: false,
};

/// One panel of a scale chart: its title, axis labels, lines and which axes are logarithmic.
struct Panel<'a> {
    title: &'a str,
    x_label: &'a str,
    y_label: &'a str,
    series: Vec<Series>,
    scale: Scale,
}

/// A chart of two panels side by side, under `title` and `subtitle`.
fn two_panels(title: &str, subtitle: &str, left: Panel, right: Panel) -> String {
    let mut svg = header(title, subtitle);
    for (x0, p) in [(80.0, left), (590.0, right)] {
        panel(
            &mut svg, x0, 80.0, p.title, p.x_label, p.y_label, &p.series, p.scale, None,
        );
    }
    svg.push_str("</svg>\n");
    svg
}

/// The handoff scale chart: handoff latency (p50 solid, p99 dashed) against the contenders on one
/// lock, a line per process count (left), and the server's watch notifications per release
/// (right).
pub fn handoff(points: &Value, subtitle: &str) -> String {
    let points = points.as_array().cloned().unwrap_or_default();
    let mut procs: Vec<u64> = points.iter().filter_map(|p| p["processes"].as_u64()).collect();
    procs.sort_unstable();
    procs.dedup();
    let of_procs = |procs: u64, key: &str| -> Vec<(f64, f64)> {
        points
            .iter()
            .filter(|p| p["processes"].as_u64() == Some(procs))
            .filter_map(|p| Some((p["contenders"].as_f64()?, p[key].as_f64()?)))
            .collect()
    };
    let mut latency = Vec::new();
    let mut notifications = Vec::new();
    for (i, &n) in procs.iter().enumerate() {
        let color = COLORS[i % COLORS.len()];
        for (key, what, dashed) in [("handoff_p50_us", "p50", false), ("handoff_p99_us", "p99", true)] {
            latency.push(Series {
                label: format!("{n} process(es), {what}"),
                color,
                dashed,
                points: of_procs(n, key),
            });
        }
        notifications.push(Series {
            label: format!("{n} process(es)"),
            color,
            dashed: false,
            points: of_procs(n, "notifications_per_release"),
        });
    }
    two_panels(
        "zklock: handoff against the contenders on one lock",
        subtitle,
        Panel {
            title: "Release to next grant",
            x_label: "contenders on the lock (log scale)",
            y_label: "µs (log scale)",
            series: latency,
            scale: LOG_LOG,
        },
        Panel {
            title: "Watch notifications per release (server-counted)",
            x_label: "contenders on the lock (log scale)",
            y_label: "notifications",
            series: notifications,
            scale: LOG_X,
        },
    )
}

/// The keys chart: each phase's acquisitions per second against the distinct keys (left), and
/// the client's resident memory before the load, after it and at its peak (right).
pub fn keys(points: &Value, subtitle: &str) -> String {
    let rates = vec![
        series(
            "cold phase",
            COLORS[0],
            true,
            line(points, "keys", "cold_acquisitions_per_sec"),
        ),
        series(
            "warm phase",
            COLORS[1],
            false,
            line(points, "keys", "warm_acquisitions_per_sec"),
        ),
    ];
    let memory = vec![
        series(
            "before the load",
            COLORS[2],
            true,
            line(points, "keys", "rss_before_mb"),
        ),
        series("after it", COLORS[1], false, line(points, "keys", "rss_after_mb")),
        series("peak", COLORS[3], true, line(points, "keys", "rss_peak_mb")),
    ];
    two_panels(
        "zklock: per-key locking against the number of distinct keys",
        subtitle,
        Panel {
            title: "Acquire + release per second (64 tasks, one process)",
            x_label: "distinct keys (log scale)",
            y_label: "acquisitions / s (log scale)",
            series: rates,
            scale: LOG_LOG,
        },
        Panel {
            title: "Client resident memory",
            x_label: "distinct keys (log scale)",
            y_label: "MB",
            series: memory,
            scale: LOG_X,
        },
    )
}

/// The sessions chart: a lock cycle's p50 and p99 from one more session against the sessions
/// open (left), and the server's heap in use after a full GC and its resident memory (right).
pub fn sessions(points: &Value, subtitle: &str) -> String {
    let latency = vec![
        series("p50", COLORS[1], false, line(points, "sessions", "probe_p50_us")),
        series("p99", COLORS[1], true, line(points, "sessions", "probe_p99_us")),
    ];
    let memory = vec![
        series(
            "heap in use after GC",
            COLORS[0],
            false,
            line(points, "sessions", "server_heap_used_mb"),
        ),
        series("resident", COLORS[2], true, line(points, "sessions", "server_rss_mb")),
    ];
    two_panels(
        "zklock: sessions open on one server, one lock held in each",
        subtitle,
        Panel {
            title: "Acquire + release latency from one more session",
            x_label: "sessions open (log scale)",
            y_label: "µs (log scale)",
            series: latency,
            scale: LOG_LOG,
        },
        Panel {
            title: "Server memory",
            x_label: "sessions open (log scale)",
            y_label: "MB",
            series: memory,
            scale: LOG_X,
        },
    )
}
