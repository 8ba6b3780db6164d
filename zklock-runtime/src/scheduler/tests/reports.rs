//! Every run's end reaches the history: runs under `Allow` whose node died, run-now requests
//! whose node died, ends that had to wait for a busy lock, runs that lost the lock.

use super::*;
use crate::scheduler::HistoryEntry;

async fn history_of(node: &Node, job: &str) -> Vec<HistoryEntry> {
    job_history(&node.shared.client, job).await.unwrap()
}

/// Waits (bounded) until the job's history has an entry that `wanted` accepts.
async fn wait_for_entry(node: &Node, job: &str, what: &str, wanted: impl Fn(&HistoryEntry) -> bool) -> HistoryEntry {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        if let Some(entry) = history_of(node, job).await.into_iter().find(|e| wanted(e)) {
            return entry;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out waiting for {what} in the history"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The job node's children whose names start with `prefix`.
async fn children(zk: &zk::Client, job: &str, prefix: &str) -> Vec<String> {
    let mut children = zk.list_children(&record_path(job)).await.unwrap();
    children.retain(|c| c.starts_with(prefix));
    children
}

/// Under `Allow` a run goes on after the next claim wrote over its tick: a run whose node
/// died is recorded as lost by the next holder (its marker outlived its session), and no
/// marker is left behind.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_allow_run_whose_node_died_is_recorded_as_lost() {
    let server = ZkServer::start().unwrap();
    let zk = raw(&server).await;
    let log = Log::default();
    let a = Node::start(&server, 0, "allow-died", Policy::Allow, &log).await;
    let b = Node::start(&server, 1, "allow-died", Policy::Allow, &log).await;
    let t = an_hour_ago();
    a.then(Act::Hold);
    a.fire_at(t).await;
    wait_until("a's run started", || runs(&log).len() == 1).await;
    assert_eq!(children(&zk, "allow-died", "run-").await, vec![format!("run-{t}")]);
    // a's session ends with its run still going (as when its process is killed).
    a.shared.client.close().await;
    b.fire_at(t + SECOND).await;
    // Under `Allow` the run starts in a task of its own.
    wait_until("b's run started", || runs(&log).len() == 2).await;
    assert_eq!(runs(&log), vec![(0, t), (1, t + SECOND)]);
    let lost = wait_for_entry(&b, "allow-died", "tick t's loss", |e| e.tick == Some(t)).await;
    assert_eq!(lost.outcome, Outcome::Lost, "{lost:?}");
    assert!(
        lost.error
            .as_deref()
            .unwrap_or_default()
            .contains("never reported back"),
        "{lost:?}"
    );
    wait_for_entry(&b, "allow-died", "b's run's end", |e| e.tick == Some(t + SECOND)).await;
    assert!(children(&zk, "allow-died", "run-").await.is_empty());
    assert!(children(&zk, "allow-died", "alive-").await.is_empty());
}

/// A run-now request taken by a node that then died (its run never reported back) is
/// recorded as lost by the next holder: a taken request never vanishes without a trace.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_triggered_run_whose_node_died_is_recorded_as_lost() {
    let server = ZkServer::start().unwrap();
    let log = Log::default();
    let a = Arc::new(Node::start(&server, 0, "trigger-died", Policy::OncePerTick, &log).await);
    let b = Node::start(&server, 1, "trigger-died", Policy::OncePerTick, &log).await;
    let t = an_hour_ago();
    a.fire_at(t).await;
    let request = trigger_job(&b.shared.client, "trigger-died")
        .await
        .unwrap()
        .expect("requested");
    a.then(Act::Hold);
    a.at.store(t, Ordering::SeqCst);
    let running = tokio::spawn(fire(a.shared.clone()));
    wait_until("the requested run started", || runs(&log).len() == 2).await;
    a.shared.client.close().await;
    b.fire_at(t + SECOND).await;
    let lost = wait_for_entry(&b, "trigger-died", "the request's loss", |e| e.tick.is_none()).await;
    assert_eq!(lost.outcome, Outcome::Lost, "{lost:?}");
    assert!(lost.error.as_deref().unwrap_or_default().contains(&request), "{lost:?}");
    a.release.notify_one();
    running.await.unwrap();
}

/// Under `Allow` a run's end is written under the lock: when the lock stays busy past one
/// lock wait, the node queues again later instead of giving up.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_allow_runs_end_waits_out_a_busy_lock() {
    let server = ZkServer::start().unwrap();
    let log = Log::default();
    let a = Node::start(&server, 0, "allow-busy", Policy::Allow, &log).await;
    let t = an_hour_ago();
    a.then(Act::Hold);
    a.fire_at(t).await;
    // Someone holds the job's lock; the node's wait for it (the period, a second) runs out,
    // and it queues again: seen as its node leaving the lock's directory and coming back.
    let other = LockClient::builder(server.connect_string()).connect().await.unwrap();
    let busy = other.mutex("allow-busy").unwrap().acquire().await.unwrap();
    let dir = "/zklock/allow-busy";
    let zk = raw(&server).await;
    a.release.notify_one();
    for (queued, what) in [(2, "queued"), (1, "gave up one wait"), (2, "queued again")] {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
        while zk.list_children(dir).await.unwrap().len() != queued {
            assert!(
                tokio::time::Instant::now() < deadline,
                "timed out: the node never {what}"
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
    assert!(
        history_of(&a, "allow-busy").await.is_empty(),
        "nothing is written while the lock is busy"
    );
    busy.release().await.unwrap();
    let ended = wait_for_entry(&a, "allow-busy", "the run's end", |e| e.tick == Some(t)).await;
    assert_eq!(ended.outcome, Outcome::Ok);
    let shown = job_records(&a.shared.client).await.unwrap();
    assert_eq!((shown[0].tick_ms, shown[0].state.as_str()), (Some(t), "done"));
}

/// A run whose lock was lost (its node deleted by an operator) writes how it ended once it
/// holds the lock again: the record and the history say it was lost and why, rather than
/// leaving the next holder to guess that it never reported back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_that_lost_its_lock_writes_its_end_under_a_later_hold() {
    let server = ZkServer::start().unwrap();
    let zk = raw(&server).await;
    let log = Log::default();
    let a = Arc::new(Node::start(&server, 0, "lost-end", Policy::OncePerTick, &log).await);
    let t = an_hour_ago();
    a.then(Act::Hold);
    a.at.store(t, Ordering::SeqCst);
    let running = tokio::spawn(fire(a.shared.clone()));
    wait_until("the run started", || runs(&log).len() == 1).await;
    let dir = "/zklock/lost-end";
    let held = zk.list_children(dir).await.unwrap();
    assert_eq!(held.len(), 1, "{held:?}");
    zk.delete(&format!("{dir}/{}", held[0]), None).await.unwrap();
    running.await.unwrap();
    let lost = wait_for_entry(&a, "lost-end", "the run's end", |e| e.tick == Some(t)).await;
    assert_eq!(lost.outcome, Outcome::Lost, "{lost:?}");
    assert!(
        !lost
            .error
            .as_deref()
            .unwrap_or_default()
            .contains("never reported back"),
        "the node itself says how its run ended: {lost:?}"
    );
    let shown = job_records(&a.shared.client).await.unwrap();
    assert_eq!((shown[0].tick_ms, shown[0].state.as_str()), (Some(t), "lost"));
    // The next beat has nothing to settle: one entry for the tick.
    a.fire_at(t + SECOND).await;
    let entries = history_of(&a, "lost-end").await;
    assert_eq!(entries.iter().filter(|e| e.tick == Some(t)).count(), 1, "{entries:?}");
}
