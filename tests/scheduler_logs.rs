//! What a singleton job logs about its runs, captured from a real scheduler: a run that
//! finishes is a DEBUG line, a run that fails a WARN line with its reason, and neither is said
//! at INFO. One test: the subscriber is global to this binary.
#![cfg(feature = "scheduler")]

mod support;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use support::Captured;
use zklock::scheduler::tokio_cron_scheduler::JobScheduler;
use zklock::scheduler::{JobSchedulerExt, SingletonJob};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn finished_runs_are_debug_and_failed_runs_warn_with_their_reason() {
    let captured = Captured::install();

    let zk = support::server();
    let client = support::client(&zk.connect_string()).await;
    // Odd runs finish, even runs fail.
    let count = Arc::new(AtomicUsize::new(0));
    let job = SingletonJob::new_async("* * * * * *", &client, "logged", {
        let count = count.clone();
        move |_run| {
            let n = count.fetch_add(1, Ordering::SeqCst);
            async move {
                match n % 2 {
                    0 => Ok(()),
                    _ => Err(format!("out of paper on run {n}")),
                }
            }
        }
    })
    .unwrap();
    let mut scheduler = JobScheduler::new().await.unwrap();
    let (_, stats) = scheduler.add_singleton(job).await.unwrap();
    scheduler.start().await.unwrap();
    let ran = support::eventually(Duration::from_secs(30), || async {
        stats.runs() >= 2 && stats.failures() >= 1 && stats.fires_in_flight() == 0
    })
    .await;
    assert!(ran, "two runs, one failed: {:?}", stats.snapshot());
    scheduler.shutdown().await.unwrap();
    let settled = support::eventually(Duration::from_secs(30), || async { stats.fires_in_flight() == 0 }).await;
    assert!(settled, "{:?}", stats.snapshot());

    let all = captured.lines();
    let lines: Vec<&String> = all.iter().filter(|l| l.contains("zklock::scheduler")).collect();
    let finished: Vec<_> = lines.iter().filter(|l| l.contains("run finished")).collect();
    let failed: Vec<_> = lines.iter().filter(|l| l.contains("run failed")).collect();
    assert!(
        !finished.is_empty()
            && finished
                .iter()
                .all(|l| l.contains(" DEBUG ") && l.contains("job=logged")),
        "a finished run is one DEBUG line naming the job: {lines:#?}"
    );
    assert!(
        !failed.is_empty()
            && failed
                .iter()
                .all(|l| l.contains(" WARN ") && l.contains("job=logged") && l.contains("out of paper on run")),
        "a failed run is a WARN line with the job and the reason: {lines:#?}"
    );
    assert!(
        !lines.iter().any(|l| l.contains(" INFO ") && l.contains("run ")),
        "nothing per run at INFO: {lines:#?}"
    );
}
