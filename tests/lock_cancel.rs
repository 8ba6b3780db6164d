//! Cancellation safety: an acquire future dropped at any point leaves no contender node behind
//! once the client's background cleanup has run.

mod support;

use std::time::Duration;

use support::{cancellation_storm, client, contenders, eventually, raw, server};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn thousands_of_random_cancellations_leave_no_node() {
    let zk = server();
    let connect = zk.connect_string();
    let (a, b) = (client(&connect).await, client(&connect).await);
    let acquirers = [&a, &b, &a, &b]
        .map(|c| {
            let lock = c.mutex("cancel").unwrap();
            move || {
                let lock = lock.clone();
                async move { lock.acquire().await }
            }
        })
        .to_vec();
    // 4 × 500 cancellations after 0..2000 µs: before the create is sent, while it is in
    // flight, while waiting on a predecessor, or not at all.
    let granted = cancellation_storm(acquirers, 500, Duration::from_micros(2000)).await;
    a.flush().await;
    b.flush().await;
    let raw = raw(&connect).await;
    let left = contenders(&raw, "/zklock/cancel").await;
    assert!(
        left.is_empty(),
        "{} nodes left after 2000 cancellations ({granted} granted): {left:?}",
        left.len()
    );
    let m = a.metrics();
    eprintln!("granted {granted}; client a: {m:?}");
    assert!(
        m.abandoned + b.metrics().abandoned > 0,
        "no acquisition was cancelled midway; the test did not test"
    );
    // And the lock still works for everyone.
    let g = a
        .mutex("cancel")
        .unwrap()
        .acquire_timeout(Duration::from_secs(5))
        .await
        .unwrap();
    g.release().await.unwrap();
    assert!(
        eventually(Duration::from_secs(10), || async {
            contenders(&raw, "/zklock/cancel").await.is_empty()
        })
        .await
    );
}
