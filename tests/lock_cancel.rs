//! Cancellation safety: an acquire or release future dropped at any point leaves no contender
//! node behind once the client's background cleanup has run.

mod support;

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
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

/// A release runs inside the caller's future; dropped midway (a timeout, a lost `select!`, an
/// aborted task) or never polled, its deletion still finishes in the background, so no node is
/// left and the lock stays free for everyone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancelled_releases_still_delete_their_nodes() {
    let zk = server();
    let connect = zk.connect_string();
    let (a, b) = (client(&connect).await, client(&connect).await);
    let started = Arc::new(AtomicU32::new(0));
    let finished = Arc::new(AtomicU32::new(0));
    let workers = [&a, &b, &a, &b]
        .map(|c| {
            let lock = c.mutex("cancel-release").unwrap();
            let (started, finished) = (started.clone(), finished.clone());
            move || {
                let (lock, started, finished) = (lock.clone(), started.clone(), finished.clone());
                async move {
                    let guard = lock.acquire().await?;
                    started.fetch_add(1, Ordering::SeqCst);
                    guard.release().await?;
                    finished.fetch_add(1, Ordering::SeqCst);
                    Ok(())
                }
            }
        })
        .to_vec();
    // 4 × 300 cycles cancelled after 0..3000 µs: while acquiring, while the release's delete
    // is in flight, or not at all.
    cancellation_storm(workers, 300, Duration::from_micros(3000)).await;
    let cut = started.load(Ordering::SeqCst) - finished.load(Ordering::SeqCst);
    assert!(cut > 0, "no release was cancelled midway; the test did not test");
    // A release future dropped before its first poll.
    let lock = a.mutex("cancel-release").unwrap();
    let unpolled = lock.acquire_timeout(Duration::from_secs(5)).await.unwrap().release();
    drop(unpolled);
    a.flush().await;
    b.flush().await;
    let raw = raw(&connect).await;
    let left = contenders(&raw, "/zklock/cancel-release").await;
    assert!(
        left.is_empty(),
        "{} nodes left after {cut} releases were cancelled midway: {left:?}",
        left.len()
    );
    // Both clients can still take the lock at once.
    for c in [&a, &b] {
        let lock = c.mutex("cancel-release").unwrap();
        lock.try_acquire()
            .await
            .unwrap()
            .expect("the lock is free")
            .release()
            .await
            .unwrap();
    }
}
