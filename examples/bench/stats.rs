//! Latency summaries: percentiles, rates and a compact distribution for the chart.

use std::time::Duration;

use serde_json::{json, Value};

/// A latency sample set reduced to the figures the report shows.
#[derive(Debug, Clone)]
pub struct Summary {
    pub cycles: usize,
    pub mean_us: f64,
    pub p50_us: f64,
    pub p90_us: f64,
    pub p99_us: f64,
    pub max_us: f64,
    pub per_sec: f64,
    /// (fraction, latency µs) points of the distribution, for plotting.
    pub cdf: Vec<(f64, f64)>,
}

impl Summary {
    /// Summarizes per-cycle latencies (nanoseconds) measured back to back over `total`.
    pub fn of(mut ns: Vec<u64>, total: Duration) -> Summary {
        assert!(!ns.is_empty(), "no samples");
        ns.sort_unstable();
        let us = |v: u64| v as f64 / 1000.0;
        let q = |f: f64| us(ns[((ns.len() - 1) as f64 * f).round() as usize]);
        let cdf = (0..=200).map(|i| i as f64 / 200.0).map(|f| (f, q(f))).collect();
        Summary {
            cycles: ns.len(),
            mean_us: ns.iter().sum::<u64>() as f64 / ns.len() as f64 / 1000.0,
            p50_us: q(0.50),
            p90_us: q(0.90),
            p99_us: q(0.99),
            max_us: us(*ns.last().unwrap()),
            per_sec: ns.len() as f64 / total.as_secs_f64(),
            cdf,
        }
    }

    pub fn to_json(&self) -> Value {
        json!({
            "cycles": self.cycles,
            "mean_us": round(self.mean_us),
            "p50_us": round(self.p50_us),
            "p90_us": round(self.p90_us),
            "p99_us": round(self.p99_us),
            "max_us": round(self.max_us),
            "cycles_per_sec": round(self.per_sec),
            "cdf_us": self.cdf.iter().map(|(f, v)| json!([f, round(*v)])).collect::<Vec<_>>(),
        })
    }
}

/// Two decimals are plenty for microseconds and rates.
pub fn round(v: f64) -> f64 {
    (v * 100.0).round() / 100.0
}

/// `a / b`, rounded to three decimals; `None` when `b` is zero: the seckill section's rounding,
/// so that every ratio the targets are checked on is rounded alike.
pub use zklock_examples::seckill::bench::ratio;
