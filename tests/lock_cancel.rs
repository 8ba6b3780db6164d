//! Cancellation safety: an acquire or release future dropped at any point leaves no contender
//! node behind once the client's background cleanup has run.

mod support;

use std::time::Duration;

use support::{cancellation_storm, client, contenders, eventually, raw, server, Rng};

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

/// A release runs inside the caller's future; cut at a random point after it started (a
/// timeout, a lost `select!`, an aborted task) or never polled, its deletion still finishes in
/// the background, so no node is left and the lock stays free for everyone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancelled_releases_still_delete_their_nodes() {
    let zk = server();
    let connect = zk.connect_string();
    // `a` and `b` have one worker each, so their releases always delete; `c` has two, so its
    // releases also hand the node to its other worker.
    let (a, b, c) = (client(&connect).await, client(&connect).await, client(&connect).await);
    let seeds = Rng::from_clock();
    let mut workers = Vec::new();
    for (n, c) in [&a, &b, &c, &c].into_iter().enumerate() {
        let lock = c.mutex("cancel-release").unwrap();
        let mut rng = seeds.for_worker(n as u64);
        workers.push(tokio::spawn(async move {
            let mut cut = 0;
            for round in 0..150u32 {
                let guard = lock.acquire_timeout(Duration::from_secs(30)).await.unwrap();
                // Every sixth round ends right after the release's first poll. A release that
                // deletes is then cut midway on any machine (its delete is on the wire, the
                // answer is not); one that hands over may already have been taken by the other
                // worker, on the runtime's other thread.
                let after = match round % 6 {
                    0 => Duration::ZERO,
                    _ => Duration::from_micros(rng.below(1500)),
                };
                let finished = match round % 3 {
                    0 => tokio::time::timeout(after, guard.release()).await.is_ok(),
                    1 => tokio::select! {
                        released = guard.release() => released.is_ok(),
                        _ = tokio::time::sleep(after) => false,
                    },
                    _ => {
                        let releasing = tokio::spawn(guard.release());
                        tokio::time::sleep(after).await;
                        releasing.abort();
                        matches!(releasing.await, Ok(Ok(())))
                    }
                };
                cut += u32::from(!finished);
            }
            cut
        }));
    }
    let mut cut = 0;
    for worker in workers {
        cut += worker.await.unwrap();
    }
    // At least the 25 zero-timeout rounds of each of `a`'s and `b`'s workers.
    assert!(cut >= 2 * 25, "only {cut} releases were cut; the test did not test");
    // A release future dropped before its first poll.
    let lock = a.mutex("cancel-release").unwrap();
    let unpolled = lock.acquire_timeout(Duration::from_secs(5)).await.unwrap().release();
    drop(unpolled);
    for c in [&a, &b, &c] {
        c.flush().await;
    }
    let raw = raw(&connect).await;
    let left = contenders(&raw, "/zklock/cancel-release").await;
    assert!(
        left.is_empty(),
        "{} nodes left after {cut} releases were cut: {left:?}",
        left.len()
    );
    // Every client can still take the lock at once.
    for c in [&a, &b, &c] {
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
