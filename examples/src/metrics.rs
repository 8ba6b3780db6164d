//! The examples' Prometheus exporter: one recorder per process, with histogram buckets so the
//! rules in `observability/` (which take quantiles of `_bucket` series) work on what they export.

use std::net::SocketAddr;

use axum::routing::get;
use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};

/// What an example prints on stdout, followed by its address, once it serves its metrics.
pub const METRICS_LISTENING: &str = "METRICS_LISTENING ";

/// Bucket bounds of every `*_seconds` histogram: lock waits and holds of milliseconds, job
/// runs and start delays of minutes.
pub const BUCKETS: &[f64] = &[
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0,
];

/// Installs the process's Prometheus recorder.
///
/// # Errors
///
/// When a recorder is installed already.
pub fn install_recorder() -> Result<PrometheusHandle, Box<dyn std::error::Error + Send + Sync>> {
    Ok(PrometheusBuilder::new()
        .set_buckets_for_metric(Matcher::Suffix("_seconds".into()), BUCKETS)?
        .install_recorder()?)
}

/// Installs the recorder and serves `GET /metrics` at `addr` on a task of the runtime; prints
/// [`METRICS_LISTENING`] and the address it bound, which it also returns with the task.
///
/// # Errors
///
/// When a recorder is installed already or `addr` cannot be bound.
pub async fn serve_metrics(
    addr: SocketAddr,
) -> Result<(tokio::task::JoinHandle<()>, SocketAddr), Box<dyn std::error::Error + Send + Sync>> {
    let handle = install_recorder()?;
    let listener = tokio::net::TcpListener::bind(addr).await?;
    let bound = listener.local_addr()?;
    println!("{METRICS_LISTENING}{bound}");
    let app = axum::Router::new().route("/metrics", get(move || std::future::ready(handle.render())));
    let task = tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    Ok((task, bound))
}
