//! Singleton jobs through the `metrics` facade (features `scheduler` and `metrics`): runs by
//! outcome, skips, missed ticks, run times and start delays, and the gauges of runs in
//! progress, last run, last success, next tick, period and pause, labelled with the job name
//! (`job_name`), read back through a real Prometheus exporter; the job's lock is labelled with
//! the job name too.
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
        get(r#"zklock_job_runs_total{job_name="ledger-close",outcome="ok"}"#),
        get(r#"zklock_job_runs_total{job_name="ledger-close",outcome="failed"}"#),
    );
    let snapshot = stats.snapshot();
    assert_eq!(ok + failed, snapshot.runs as f64, "{text}");
    assert_eq!(failed, snapshot.failures as f64);
    assert!(ok >= 2.0 && failed >= 2.0, "{text}");
    assert_eq!(
        get(r#"zklock_job_run_seconds_count{job_name="ledger-close"}"#),
        snapshot.runs as f64
    );
    // What is going on now: no run in progress, when the last run started and the last
    // success ended, the next tick and the period, and that the job is not paused.
    let job = r#"job_name="ledger-close""#;
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs_f64();
    assert_eq!(get(&format!("zklock_job_runs_in_progress{{{job}}}")), 0.0);
    let last_run = get(&format!("zklock_job_last_run_timestamp_seconds{{{job}}}"));
    let last_success = get(&format!("zklock_job_last_success_timestamp_seconds{{{job}}}"));
    assert!(last_run > now - 30.0 && last_run <= now, "{text}");
    assert!(last_success > now - 30.0 && last_success <= now, "{text}");
    let next = get(&format!("zklock_job_next_tick_timestamp_seconds{{{job}}}"));
    assert!(next > now - 30.0 && next <= now + 1.0, "{text}");
    assert_eq!(next.fract(), 0.0, "a tick of a per-second schedule: {next}");
    assert_eq!(get(&format!("zklock_job_period_seconds{{{job}}}")), 1.0);
    assert_eq!(get(&format!("zklock_job_paused{{{job}}}")), 0.0);
    assert_eq!(
        get(&format!("zklock_job_start_delay_seconds_count{{{job}}}")),
        snapshot.runs as f64
    );
    // Outcomes that never happened have their series, at 0.
    assert_eq!(get(&format!("zklock_job_runs_total{{{job},outcome=\"lost\"}}")), 0.0);
    // The job's lock is labelled with the job's name.
    assert!(get(r#"zklock_acquired_total{kind="mutex",lock="ledger-close"}"#) >= snapshot.runs as f64);
}
