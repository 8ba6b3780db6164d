//! Singleton jobs through the `metrics` facade (features `scheduler` and `metrics`): runs by
//! outcome, skips, missed ticks and run times, labelled with the job name, read back through a
//! real Prometheus exporter; the job's lock is labelled with the job name too.
#![cfg(all(feature = "metrics", feature = "scheduler"))]

mod support;

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;

use metrics_exporter_prometheus::PrometheusBuilder;
use zklock::scheduler::tokio_cron_scheduler::JobScheduler;
use zklock::scheduler::{JobSchedulerExt, SingletonJob};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn job_runs_are_counted_per_job_and_outcome() {
    // The only test of this binary: the recorder is process-wide.
    let handle = PrometheusBuilder::new()
        .install_recorder()
        .expect("install the recorder");
    let zk = support::server();
    let client = support::client(&zk.connect_string()).await;
    let calls = Arc::new(AtomicU32::new(0));
    let counted = calls.clone();
    // Every other run fails.
    let job = SingletonJob::new_async("* * * * * *", &client, "ledger-close", move |_run| {
        let n = counted.fetch_add(1, Ordering::SeqCst);
        async move {
            match n % 2 {
                0 => Ok(()),
                _ => Err("ledger locked"),
            }
        }
    })
    .unwrap();
    let mut scheduler = JobScheduler::new().await.unwrap();
    let (_, stats) = scheduler.add_singleton(job).await.unwrap();
    scheduler.start().await.unwrap();
    let reached = support::eventually(Duration::from_secs(30), || async {
        stats.runs() >= 4 && stats.fires_in_flight() == 0
    })
    .await;
    assert!(reached, "{:?}", stats.snapshot());
    scheduler.shutdown().await.unwrap();
    let settled = support::eventually(Duration::from_secs(30), || async { stats.fires_in_flight() == 0 }).await;
    assert!(settled);

    let text = handle.render();
    let s = support::prometheus_samples(&text);
    let get = |key: &str| {
        s.get(key)
            .copied()
            .unwrap_or_else(|| panic!("no sample {key} in:\n{text}"))
    };
    let (ok, failed) = (
        get(r#"zklock_job_runs_total{job="ledger-close",outcome="ok"}"#),
        get(r#"zklock_job_runs_total{job="ledger-close",outcome="failed"}"#),
    );
    let snapshot = stats.snapshot();
    assert_eq!(ok + failed, snapshot.runs as f64, "{text}");
    assert_eq!(failed, snapshot.failures as f64);
    assert!(ok >= 2.0 && failed >= 2.0, "{text}");
    assert_eq!(
        get(r#"zklock_job_run_seconds_count{job="ledger-close"}"#),
        snapshot.runs as f64
    );
    // The job's lock is labelled with the job's name.
    assert!(get(r#"zklock_acquired_total{kind="mutex",lock="ledger-close"}"#) >= snapshot.runs as f64);
}
