//! SVG charts, written by hand to keep the bench free of a plotting stack: the main two-panel
//! chart (uncontended cycle latency distributions, throughput against the number of
//! contenders), the seckill chart, and the panels and header the scale curves' charts
//! ([`crate::scale::chart`]) are drawn with.

use std::fmt::Write;

/// One line of a panel: label, colour, points.
pub struct Series {
    pub label: String,
    pub color: &'static str,
    pub dashed: bool,
    pub points: Vec<(f64, f64)>,
}

const W: f64 = 1040.0;
const H: f64 = 440.0;
const PANEL_W: f64 = 420.0;
const PANEL_H: f64 = 300.0;

struct Axes {
    x0: f64,
    y0: f64,
    x_min: f64,
    x_max: f64,
    y_min: f64,
    y_max: f64,
    log_x: bool,
    log_y: bool,
}

impl Axes {
    fn x(&self, v: f64) -> f64 {
        let (v, lo, hi) = if self.log_x {
            (v.max(1e-9).log10(), self.x_min.log10(), self.x_max.log10())
        } else {
            (v, self.x_min, self.x_max)
        };
        self.x0 + (v - lo) / (hi - lo).max(1e-9) * PANEL_W
    }
    fn y(&self, v: f64) -> f64 {
        let (v, lo, hi) = if self.log_y {
            (v.max(1e-9).log10(), self.y_min.log10(), self.y_max.log10())
        } else {
            (v, self.y_min, self.y_max)
        };
        self.y0 + PANEL_H - (v - lo) / (hi - lo).max(1e-9) * PANEL_H
    }
}

/// Renders both panels into one SVG document.
pub fn render(latency: &[Series], throughput: &[Series], subtitle: &str) -> String {
    let mut svg = header(
        "zklock vs Apache Curator vs zookeeper-client vs raw ZooKeeper floor",
        subtitle,
    );
    panel(
        &mut svg,
        80.0,
        80.0,
        "Uncontended acquire+release latency (CDF)",
        "latency (µs, log scale)",
        "fraction of cycles",
        latency,
        Scale {
            log_x: true,
            log_y: false,
        },
        Some(1.0),
    );
    panel(
        &mut svg,
        590.0,
        80.0,
        "Throughput against contenders",
        "contenders (log scale)",
        "acquisitions / s (log scale)",
        throughput,
        // Curator's throughput is orders of magnitude below zklock's: a linear axis flattens it.
        Scale {
            log_x: true,
            log_y: true,
        },
        None,
    );
    svg.push_str("</svg>\n");
    svg
}

/// Which axes of a panel are logarithmic.
pub struct Scale {
    pub log_x: bool,
    pub log_y: bool,
}

/// Draws one panel with its top-left corner at (`x0`, `y0`): its frame, title, axis labels and
/// ticks, and a line with a legend entry per series; `y_max` fixes the top of the y axis.
#[allow(clippy::too_many_arguments)]
pub fn panel(
    svg: &mut String,
    x0: f64,
    y0: f64,
    title: &str,
    x_label: &str,
    y_label: &str,
    series: &[Series],
    Scale { log_x, log_y }: Scale,
    y_max: Option<f64>,
) {
    let xs = series.iter().flat_map(|s| s.points.iter().map(|p| p.0));
    let x_min = xs.clone().fold(f64::INFINITY, f64::min);
    let x_max = xs.fold(f64::NEG_INFINITY, f64::max);
    if !x_min.is_finite() {
        return;
    }
    let (x_min, x_max) = if log_x {
        (
            10f64.powf(x_min.max(1e-3).log10().floor()),
            10f64.powf(x_max.max(1e-3).log10().ceil()),
        )
    } else {
        (x_min, x_max)
    };
    let ys = series.iter().flat_map(|s| s.points.iter().map(|p| p.1));
    let (y_min, y_max) = if log_y {
        let lo = ys.clone().filter(|v| *v > 0.0).fold(f64::INFINITY, f64::min);
        let hi = ys.fold(0.0, f64::max);
        let lo = if lo.is_finite() { lo } else { 1.0 };
        (
            10f64.powf(lo.log10().floor()),
            y_max.unwrap_or_else(|| 10f64.powf(hi.max(lo * 10.0).log10().ceil())),
        )
    } else {
        (0.0, y_max.unwrap_or_else(|| nice(ys.fold(0.0, f64::max) * 1.1)))
    };
    let a = Axes {
        x0,
        y0,
        x_min,
        x_max,
        y_min,
        y_max,
        log_x,
        log_y,
    };
    let _ = writeln!(
        svg,
        r##"<text x="{x0}" y="{}" font-size="13" font-weight="bold">{}</text>
<rect x="{x0}" y="{y0}" width="{PANEL_W}" height="{PANEL_H}" fill="none" stroke="#888"/>
<text x="{}" y="{}" text-anchor="middle">{}</text>
<text transform="translate({},{}) rotate(-90)" text-anchor="middle">{}</text>"##,
        y0 - 12.0,
        escape(title),
        x0 + PANEL_W / 2.0,
        y0 + PANEL_H + 34.0,
        escape(x_label),
        x0 - 52.0,
        y0 + PANEL_H / 2.0,
        escape(y_label),
    );
    // Grid and ticks.
    let y_ticks: Vec<f64> = if log_y {
        std::iter::successors(Some(y_min), |v| Some(v * 10.0))
            .take_while(|v| *v <= y_max * 1.0001)
            .collect()
    } else {
        (0..=4).map(|i| y_max * i as f64 / 4.0).collect()
    };
    for v in y_ticks {
        let y = a.y(v);
        let _ = writeln!(
            svg,
            r##"<line x1="{x0}" x2="{}" y1="{y}" y2="{y}" stroke="#eee"/><text x="{}" y="{}" text-anchor="end">{}</text>"##,
            x0 + PANEL_W,
            x0 - 6.0,
            y + 4.0,
            short(v)
        );
    }
    let ticks: Vec<f64> = if log_x {
        let mut t = Vec::new();
        let mut v = x_min;
        while v <= x_max * 1.0001 {
            for m in [1.0, 2.0, 5.0] {
                if v * m <= x_max * 1.0001 {
                    t.push(v * m);
                }
            }
            v *= 10.0;
        }
        t
    } else {
        (0..=4).map(|i| x_min + (x_max - x_min) * i as f64 / 4.0).collect()
    };
    for v in ticks {
        let x = a.x(v);
        let _ = writeln!(
            svg,
            r##"<line x1="{x}" x2="{x}" y1="{y0}" y2="{}" stroke="#eee"/><text x="{x}" y="{}" text-anchor="middle">{}</text>"##,
            y0 + PANEL_H,
            y0 + PANEL_H + 16.0,
            short(v)
        );
    }
    // Lines and legend.
    for (i, s) in series.iter().enumerate() {
        let pts: Vec<String> = s
            .points
            .iter()
            .map(|&(x, y)| format!("{:.1},{:.1}", a.x(x), a.y(y)))
            .collect();
        let dash = if s.dashed { r#" stroke-dasharray="6,4""# } else { "" };
        let _ = writeln!(
            svg,
            r#"<polyline points="{}" fill="none" stroke="{}" stroke-width="2"{dash}/>"#,
            pts.join(" "),
            s.color
        );
        if s.points.len() < 12 {
            for &(x, y) in &s.points {
                let _ = writeln!(
                    svg,
                    r#"<circle cx="{:.1}" cy="{:.1}" r="3" fill="{}"/>"#,
                    a.x(x),
                    a.y(y),
                    s.color
                );
            }
        }
        let ly = y0 + 14.0 + i as f64 * 16.0;
        let _ = writeln!(
            svg,
            r#"<line x1="{}" x2="{}" y1="{ly}" y2="{ly}" stroke="{}" stroke-width="2"{dash}/><text x="{}" y="{}">{}</text>"#,
            x0 + 10.0,
            x0 + 30.0,
            s.color,
            x0 + 36.0,
            ly + 4.0,
            escape(&s.label)
        );
    }
}

fn nice(v: f64) -> f64 {
    if v <= 0.0 {
        return 1.0;
    }
    let p = 10f64.powf(v.log10().floor());
    [1.0, 2.0, 2.5, 5.0, 10.0]
        .iter()
        .map(|m| m * p)
        .find(|&c| c >= v)
        .unwrap_or(10.0 * p)
}

fn short(v: f64) -> String {
    if v >= 1000.0 {
        format!("{}k", (v / 100.0).round() / 10.0)
    } else if v >= 10.0 || v == 0.0 {
        format!("{}", v.round())
    } else {
        format!("{}", (v * 100.0).round() / 100.0)
    }
}

fn escape(s: &str) -> String {
    s.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;")
}

/// The seckill chart: per lock, the median throughput with its min..max over the rounds (left),
/// p50 and p99 latency (right), and the units oversold in the plain rounds and the fault round
/// under each bar.
pub fn seckill(section: &serde_json::Value, subtitle: &str) -> String {
    const LOCKS: [(&str, &str, &str); 7] = [
        ("zklock", "zklock", "#d62728"),
        ("zklock_cached", "zklock cached", "#ff7f0e"),
        ("zklock_by_item", "zklock by item", "#e377c2"),
        ("zklock_cached_by_item", "zklock cached, by item", "#8c564b"),
        ("database", "PostgreSQL advisory", "#2ca02c"),
        ("redis", "Redis SET NX PX", "#9467bd"),
        ("none", "no lock", "#7f7f7f"),
    ];
    let num = |v: &serde_json::Value| v.as_f64().unwrap_or(0.0);
    let title = format!(
        "Seckill: the same sale under each lock ({} items x {} units, {} in flight, {} instances)",
        section["settings"]["items"],
        section["settings"]["stock_per_item"],
        section["settings"]["concurrency"],
        section["settings"]["instances"],
    );
    let mut svg = header(&title, subtitle);
    let bar_w = PANEL_W / LOCKS.len() as f64;
    // Left: throughput.
    let top = LOCKS
        .iter()
        .map(|(k, _, _)| num(&section[*k]["throughput_rps_max"]))
        .fold(1.0, f64::max);
    let top = nice(top * 1.1);
    let (x0, y0) = (80.0, 70.0);
    let y = |v: f64| y0 + PANEL_H - v / top * PANEL_H;
    bar_frame(
        &mut svg,
        x0,
        y0,
        top,
        "requests / s (median; whisker: min..max); under each bar: oversold, rounds | fault round",
    );
    for (i, (key, label, color)) in LOCKS.iter().enumerate() {
        let e = &section[*key];
        let left = x0 + i as f64 * bar_w + bar_w * 0.15;
        let w = bar_w * 0.7;
        let mid = left + w / 2.0;
        let median = num(&e["throughput_rps"]);
        let _ = writeln!(
            svg,
            r##"<rect x="{left:.1}" y="{:.1}" width="{w:.1}" height="{:.1}" fill="{color}" opacity="0.85"/>
<line x1="{mid:.1}" y1="{:.1}" x2="{mid:.1}" y2="{:.1}" stroke="#000"/>
<text x="{mid:.1}" y="{:.1}" text-anchor="middle">{median:.0}</text>
<text x="{mid:.1}" y="{:.1}" text-anchor="middle" font-size="9">{}</text>
<text x="{mid:.1}" y="{:.1}" text-anchor="middle" font-size="9">oversold {} | {}</text>"##,
            y(median),
            y0 + PANEL_H - y(median),
            y(num(&e["throughput_rps_min"])),
            y(num(&e["throughput_rps_max"])),
            y(median) - 6.0,
            staggered(y0 + PANEL_H + 14.0, i),
            escape(label),
            staggered(y0 + PANEL_H + 40.0, i),
            e["oversold"],
            section["fault_round"][*key]["oversold"]
                .as_i64()
                .map_or("-".to_string(), |v| v.to_string()),
        );
    }
    // Right: latency.
    let top = LOCKS
        .iter()
        .map(|(k, _, _)| num(&section[*k]["p99_ms"]))
        .fold(1.0, f64::max);
    let top = nice(top * 1.1);
    let x0 = 80.0 + PANEL_W + 100.0;
    let y = |v: f64| y0 + PANEL_H - v / top * PANEL_H;
    bar_frame(&mut svg, x0, y0, top, "latency ms (solid: p50, light: p99)");
    for (i, (key, label, color)) in LOCKS.iter().enumerate() {
        let e = &section[*key];
        let left = x0 + i as f64 * bar_w + bar_w * 0.15;
        let w = bar_w * 0.35;
        let (p50, p99) = (num(&e["p50_ms"]), num(&e["p99_ms"]));
        let _ = writeln!(
            svg,
            r##"<rect x="{left:.1}" y="{:.1}" width="{w:.1}" height="{:.1}" fill="{color}"/>
<rect x="{:.1}" y="{:.1}" width="{w:.1}" height="{:.1}" fill="{color}" opacity="0.4"/>
<text x="{:.1}" y="{:.1}" text-anchor="middle" font-size="10">{p50}</text>
<text x="{:.1}" y="{:.1}" text-anchor="middle" font-size="10">{p99}</text>
<text x="{:.1}" y="{:.1}" text-anchor="middle" font-size="9">{}</text>"##,
            y(p50),
            y0 + PANEL_H - y(p50),
            left + w,
            y(p99),
            y0 + PANEL_H - y(p99),
            left + w / 2.0,
            y(p50) - 4.0,
            left + w * 1.5,
            y(p99) - 4.0,
            left + w,
            staggered(y0 + PANEL_H + 14.0, i),
            escape(label),
        );
    }
    svg.push_str("</svg>\n");
    svg
}

/// The baseline of the text under bar `i`: every other bar's a line lower, so that labels wider
/// than a bar do not run into their neighbours'.
fn staggered(y: f64, i: usize) -> f64 {
    y + if i % 2 == 1 { 12.0 } else { 0.0 }
}

/// A bar panel's title, axes and five value labels (0 to `top`), its origin at (`x0`, `y0`).
fn bar_frame(svg: &mut String, x0: f64, y0: f64, top: f64, title: &str) {
    let _ = write!(
        svg,
        r##"<text x="{x0}" y="{}" font-weight="bold">{}</text>
<line x1="{x0}" y1="{}" x2="{}" y2="{}" stroke="#333"/>
<line x1="{x0}" y1="{y0}" x2="{x0}" y2="{}" stroke="#333"/>
"##,
        y0 - 10.0,
        escape(title),
        y0 + PANEL_H,
        x0 + PANEL_W,
        y0 + PANEL_H,
        y0 + PANEL_H
    );
    for k in 0..=4 {
        let v = top * k as f64 / 4.0;
        let _ = writeln!(
            svg,
            r##"<text x="{}" y="{}" text-anchor="end" fill="#555">{}</text>"##,
            x0 - 6.0,
            y0 + PANEL_H - v / top * PANEL_H + 4.0,
            short(v)
        );
    }
}

/// The start of a chart: the document, a white background, the title and the subtitle.
pub fn header(title: &str, subtitle: &str) -> String {
    format!(
        r##"<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" font-family="sans-serif" font-size="12">
<rect width="100%" height="100%" fill="white"/>
<text x="20" y="24" font-size="15" font-weight="bold">{}</text>
<text x="20" y="42" fill="#555555">{}</text>
"##,
        escape(title),
        escape(subtitle)
    )
}
