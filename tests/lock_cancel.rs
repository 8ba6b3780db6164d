//! Cancellation safety: an acquire future dropped at any point leaves no contender node behind
//! once the client's background cleanup has run.

mod support;

use std::time::Duration;

use support::{client, contenders, eventually, raw, server};

/// A small xorshift generator, so the cancellation points differ from run to run while a
/// failing seed can be replayed.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn thousands_of_random_cancellations_leave_no_node() {
    let zk = server();
    let connect = zk.connect_string();
    let seed = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos() as u64
        | 1;
    eprintln!("cancellation seed {seed}");
    let (a, b) = (client(&connect).await, client(&connect).await);
    let mut tasks = Vec::new();
    for (worker, c) in [&a, &b, &a, &b].into_iter().enumerate() {
        let lock = c.mutex("cancel").unwrap();
        let mut rng = Rng(seed.wrapping_add(worker as u64 * 0x9e37_79b9));
        tasks.push(tokio::spawn(async move {
            let mut granted = 0;
            for i in 0..500u32 {
                // Cancel after 0..2000 µs: before the create is sent, while it is in flight,
                // while waiting on a predecessor, or not at all.
                let after = Duration::from_micros(rng.next() % 2000);
                match i % 3 {
                    // Dropped by a timeout.
                    0 => {
                        if let Ok(Ok(guard)) = tokio::time::timeout(after, lock.acquire()).await {
                            granted += 1;
                            drop(guard);
                        }
                    }
                    // Dropped by losing a select!.
                    1 => {
                        tokio::select! {
                            res = lock.acquire() => { if res.is_ok() { granted += 1; } }
                            _ = tokio::time::sleep(after) => {}
                        }
                    }
                    // Dropped by aborting the task that runs it.
                    _ => {
                        let l = lock.clone();
                        let task = tokio::spawn(async move { l.acquire().await.map(drop) });
                        tokio::time::sleep(after).await;
                        task.abort();
                        if let Ok(Ok(())) = task.await {
                            granted += 1;
                        }
                    }
                }
            }
            granted
        }));
    }
    let mut granted = 0;
    for t in tasks {
        granted += t.await.unwrap();
    }
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
