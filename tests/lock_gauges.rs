//! What is going on now, through the `metrics` facade (feature `metrics`) and read back through
//! a real Prometheus exporter: holds and waiters per lock template (never per filled-in name),
//! the oldest hold, a `max_hold` deadline that work blocked past it keeps showing, leadership
//! per group, and the sessions' states through a cut, a loss and an expiry; and the
//! `lock_hold` span that covers an acquisition and its hold.
#![cfg(feature = "metrics")]

mod support;

use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};
use support::{client, eventually, server};
use tracing_subscriber::fmt::format::FmtSpan;
use zklock::{LockClient, SessionStatus};
use zklock_testing::FaultProxy;

/// The exporter's samples now.
fn samples(handle: &PrometheusHandle) -> (String, std::collections::HashMap<String, f64>) {
    let text = handle.render();
    let samples = support::prometheus_samples(&text);
    (text, samples)
}

/// The value of `key`, failing with the whole text when there is none.
fn get(handle: &PrometheusHandle, key: &str) -> f64 {
    let (text, samples) = samples(handle);
    samples
        .get(key)
        .copied()
        .unwrap_or_else(|| panic!("no sample {key} in:\n{text}"))
}

/// Waits (bounded) for `key` to read `value`.
async fn reads(handle: &PrometheusHandle, key: &str, value: f64) {
    let seen = eventually(Duration::from_secs(20), || async {
        samples(handle).1.get(key) == Some(&value)
    })
    .await;
    assert!(seen, "{key} never read {value}:\n{}", handle.render());
}

fn unix_now() -> f64 {
    SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap()
        .as_secs_f64()
}

/// Everything the global `fmt` subscriber writes, span closes included.
#[derive(Clone, Default)]
struct Log(Arc<Mutex<Vec<u8>>>);

impl std::io::Write for Log {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Log {
    fn text(&self) -> String {
        String::from_utf8_lossy(&self.0.lock().unwrap()).into_owned()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn what_is_held_waited_for_and_leading_now_is_exported() {
    // The only test of this binary: the recorder and the subscriber are process-wide.
    let handle = PrometheusBuilder::new()
        .set_buckets_for_metric(Matcher::Suffix("_seconds".into()), &[0.01, 0.1, 1.0, 10.0])
        .unwrap()
        .install_recorder()
        .expect("install the recorder");
    let log = Log::default();
    let writer = log.clone();
    tracing_subscriber::fmt()
        .with_max_level(tracing::Level::INFO)
        .with_ansi(false)
        .with_span_events(FmtSpan::CLOSE)
        .with_writer(move || writer.clone())
        .init();
    let zk = server();
    let holder = client(&zk.connect_string()).await;
    let waiter = client(&zk.connect_string()).await;
    let tpl = r#"kind="mutex",lock="inventory:{sku}""#;
    let held = format!("zklock_locks_held{{{tpl}}}");
    let waiting = format!("zklock_lock_waiters{{{tpl}}}");
    let oldest = format!("zklock_oldest_hold_start_timestamp_seconds{{{tpl}}}");
    let item = |client: &LockClient, sku: u32| {
        client
            .mutex(&format!("inventory:{sku}"))
            .unwrap()
            .with_template("inventory:{sku}")
    };

    // Holds of one template share its series, however many keys are held.
    let before = unix_now();
    let first = item(&holder, 0).acquire().await.unwrap();
    let after = unix_now();
    let first_token = first.fencing_token();
    let mut others = Vec::new();
    for sku in 1..=30 {
        others.push(item(&holder, sku).acquire().await.unwrap());
    }
    assert_eq!(get(&handle, &held), 31.0);
    assert_eq!(get(&handle, &waiting), 0.0);
    let started = get(&handle, &oldest);
    assert!(
        started >= before - 0.001 && started <= after + 0.001,
        "oldest hold started at {started}, granted between {before} and {after}"
    );
    let (text, _) = samples(&handle);
    let series = text.lines().filter(|l| l.starts_with("zklock_locks_held{")).count();
    assert_eq!(series, 1, "one series per template, not per key:\n{text}");
    assert!(
        !text.contains("inventory:1\""),
        "a filled-in name became a label:\n{text}"
    );
    // Rates have their counters before the first event.
    assert_eq!(get(&handle, &format!("zklock_lost_total{{{tpl}}}")), 0.0);
    assert!(get(&handle, &format!("zklock_wait_seconds_bucket{{{tpl},le=\"+Inf\"}}")) >= 31.0);

    // A waiter in another client of the process, seen once its node is in the lock dir.
    let contested = item(&waiter, 0);
    let queued = tokio::spawn(async move { contested.acquire_timeout(Duration::from_secs(30)).await });
    let raw = support::raw(&zk.connect_string()).await;
    let in_queue = eventually(Duration::from_secs(20), || async {
        support::contenders(&raw, "/zklock/inventory:0").await.len() == 2
    })
    .await;
    assert!(in_queue, "the waiter never queued");
    assert_eq!(get(&handle, &waiting), 1.0);

    // The oldest hold goes: the next oldest is exported, and the waiter becomes a holder.
    drop(first);
    let second = queued.await.unwrap().expect("the waiter is granted");
    reads(&handle, &waiting, 0.0).await;
    reads(&handle, &held, 31.0).await;
    assert!(get(&handle, &oldest) > started, "the released hold is still the oldest");
    drop(second);
    drop(others);
    reads(&handle, &held, 0.0).await;
    assert_eq!(get(&handle, &oldest), 0.0);

    // The hold's span covers the wait and the hold, with its token and how it ended.
    let spans = log.text();
    let closed = format!("lock_hold{{lock=inventory:0 kind=Mutex token={first_token} outcome=\"released\"}}");
    assert!(
        spans.lines().any(|l| l.contains(&closed) && l.contains("close")),
        "no closed span `{closed}` in:\n{spans}"
    );

    // Work blocked past its max_hold keeps its passed deadline exported until it ends.
    let deadline = r#"zklock_max_hold_deadline_timestamp_seconds{kind="mutex",lock="report"}"#;
    let report = holder.mutex("report").unwrap().with_template("report");
    let guard = report.acquire().await.unwrap();
    let (blocked_tx, blocked_rx) = std::sync::mpsc::channel::<()>();
    let (go_tx, go_rx) = std::sync::mpsc::channel::<()>();
    let work = tokio::spawn(async move {
        let outcome = guard
            .run_for(Duration::from_millis(200), async move {
                // Blocking code: nothing can stop it at its max_hold.
                blocked_tx.send(()).unwrap();
                go_rx.recv_timeout(Duration::from_secs(60)).unwrap();
            })
            .await;
        drop(guard);
        outcome
    });
    tokio::task::spawn_blocking(move || blocked_rx.recv_timeout(Duration::from_secs(20)))
        .await
        .unwrap()
        .expect("the work started");
    let due = get(&handle, deadline);
    assert!(due > 0.0, "no deadline for work with a max_hold");
    let passed = eventually(Duration::from_secs(20), || async { unix_now() > due + 0.2 }).await;
    assert!(passed);
    assert_eq!(
        get(&handle, deadline),
        due,
        "a passed deadline of work still running was dropped"
    );
    go_tx.send(()).unwrap();
    work.await.unwrap().expect("work that ended on its own is not cut");
    reads(&handle, deadline, 0.0).await;

    // Leadership: 1 for the group this process leads, 0 for one it only joined.
    let idle = holder.election("idle-group").unwrap();
    let compactor = holder.election("compactor").unwrap();
    let leading = compactor.lead().await.unwrap();
    assert_eq!(get(&handle, r#"zklock_leader{group="compactor"}"#), 1.0);
    assert_eq!(get(&handle, r#"zklock_leader{group="idle-group"}"#), 0.0);
    leading.release().await.unwrap();
    assert_eq!(get(&handle, r#"zklock_leader{group="compactor"}"#), 0.0);
    drop(idle);

    // Sessions: a client cut off from the server is suspended, then lost; after the server
    // expired its session and the cut heals, it is expired.
    let base_disconnects = get(&handle, "zklock_session_disconnects_total");
    assert_eq!(get(&handle, "zklock_session_expiries_total"), 0.0);
    assert_eq!(get(&handle, r#"zklock_sessions{state="connected"}"#), 2.0);
    assert_eq!(get(&handle, "zklock_session_state"), 0.0);
    let proxy = FaultProxy::start(zk.addr()).unwrap();
    let cut = support::cut_off_able(&proxy).await;
    cut.mutex("ledger")
        .unwrap()
        .acquire()
        .await
        .unwrap()
        .release()
        .await
        .unwrap();
    let session = cut.session_id().expect("a session");
    reads(&handle, r#"zklock_sessions{state="connected"}"#, 3.0).await;
    let mut status = cut.watch_status();
    proxy.blackhole();
    tokio::time::timeout(
        Duration::from_secs(20),
        status.wait_for(|s| *s == SessionStatus::Suspended || *s == SessionStatus::Lost),
    )
    .await
    .expect("the cut is noticed")
    .unwrap();
    assert_eq!(get(&handle, "zklock_session_disconnects_total"), base_disconnects + 1.0);
    tokio::time::timeout(Duration::from_secs(20), status.wait_for(|s| *s == SessionStatus::Lost))
        .await
        .expect("the loss is reported")
        .unwrap();
    assert_eq!(get(&handle, r#"zklock_sessions{state="lost"}"#), 1.0);
    assert_eq!(get(&handle, "zklock_session_state"), 3.0);
    let expired = eventually(Duration::from_secs(30), || async {
        !support::session_is_open(&zk, session).await
    })
    .await;
    assert!(expired, "the server never expired the cut session");
    proxy.pass();
    tokio::time::timeout(
        Duration::from_secs(20),
        status.wait_for(|s| *s == SessionStatus::Expired),
    )
    .await
    .expect("the expiry is learnt")
    .unwrap();
    assert_eq!(get(&handle, "zklock_session_expiries_total"), 1.0);
    assert_eq!(get(&handle, r#"zklock_sessions{state="expired"}"#), 1.0);
    assert_eq!(get(&handle, "zklock_session_state"), 4.0);
    // A client that goes is no longer counted.
    drop(cut);
    reads(&handle, r#"zklock_sessions{state="expired"}"#, 0.0).await;
    assert_eq!(get(&handle, "zklock_session_state"), 0.0);
}
