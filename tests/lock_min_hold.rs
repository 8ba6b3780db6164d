//! `Lock::with_min_hold` (ShedLock's `lockAtLeastFor`): a hold that ends early keeps its node
//! until its minimum from the grant has passed, for other processes and for this one's own
//! waiters; `release` waits for it; a client that closes does not. The attribute's `min_hold`
//! does the same for its body.

mod support;

use std::time::{Duration, Instant};

use support::{client, raw, server, AppError};
use zklock::{distributed_lock, LockClient, LockError};

const MIN: Duration = Duration::from_secs(2);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hold_dropped_early_keeps_the_lock_until_its_min_hold() {
    let zk = server();
    let (a, b) = (client(&zk.connect_string()).await, client(&zk.connect_string()).await);
    let zk_raw = raw(&zk.connect_string()).await;
    let lock = a.mutex("mh-report").unwrap().with_min_hold(MIN).unwrap();
    assert_eq!(lock.min_hold(), Some(MIN));
    let guard = lock.acquire().await.unwrap();
    // The grant came before this: whatever is checked before `granted + MIN * 3/5` is checked
    // well inside the minimum.
    let granted = Instant::now();
    let node = guard.node_path().rsplit('/').next().unwrap().to_owned();
    drop(guard);
    let other = b.mutex("mh-report").unwrap();
    assert!(
        other.try_acquire().await.unwrap().is_none(),
        "taken at once after a drop inside min_hold"
    );
    tokio::time::sleep_until((granted + MIN * 3 / 5).into()).await;
    assert!(
        support::contenders(&zk_raw, "/zklock/mh-report").await.contains(&node),
        "the node went before its min_hold"
    );
    assert!(other.try_acquire().await.unwrap().is_none(), "taken inside min_hold");
    // Then it is released, without anyone asking.
    let taken = other.acquire_timeout(Duration::from_secs(20)).await;
    assert!(taken.is_ok(), "{taken:?}");
    assert!(granted.elapsed() >= MIN * 3 / 5);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn release_returns_once_the_min_hold_has_passed() {
    let zk = server();
    let a = client(&zk.connect_string()).await;
    let lock = a.mutex("mh-release").unwrap().with_min_hold(MIN).unwrap();
    let asked = Instant::now();
    let guard = lock.acquire().await.unwrap();
    guard.release().await.unwrap();
    // The grant came after `asked`, and the release after the grant plus the minimum.
    assert!(asked.elapsed() >= MIN, "released after {:?}", asked.elapsed());
    // A hold longer than its minimum releases at once (nothing left to wait).
    let guard = lock.acquire().await.unwrap();
    tokio::time::sleep(MIN).await;
    let releasing = Instant::now();
    guard.release().await.unwrap();
    assert!(
        releasing.elapsed() < MIN,
        "waited {:?} after the minimum",
        releasing.elapsed()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_local_waiter_waits_out_the_min_hold_too() {
    let zk = server();
    let a = client(&zk.connect_string()).await;
    let lock = a.mutex("mh-local").unwrap().with_min_hold(MIN).unwrap();
    let guard = lock.acquire().await.unwrap();
    let granted = Instant::now();
    let queued = support::queue_in_process(&lock);
    drop(guard);
    tokio::time::sleep_until((granted + MIN * 3 / 5).into()).await;
    assert!(
        !queued.is_finished(),
        "a task of this process was granted inside min_hold"
    );
    let next = tokio::time::timeout(Duration::from_secs(20), queued).await;
    let next = next.expect("granted after the minimum").unwrap().unwrap();
    next.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_closing_client_does_not_wait_out_the_min_hold() {
    let zk = server();
    let (a, b) = (client(&zk.connect_string()).await, client(&zk.connect_string()).await);
    let lock = a
        .mutex("mh-close")
        .unwrap()
        .with_min_hold(Duration::from_secs(3600))
        .unwrap();
    drop(lock.acquire().await.unwrap());
    assert!(b.mutex("mh-close").unwrap().try_acquire().await.unwrap().is_none());
    let closed = tokio::time::timeout(Duration::from_secs(20), a.close()).await;
    assert!(closed.is_ok(), "close waited for the min_hold");
    // The session ended with the close: the node is gone with it.
    let taken = b
        .mutex("mh-close")
        .unwrap()
        .acquire_timeout(Duration::from_secs(20))
        .await;
    assert!(taken.is_ok(), "{taken:?}");
}

#[tokio::test]
async fn a_min_hold_over_an_hour_is_refused_and_zero_turns_it_off() {
    let zk = server();
    let a = client(&zk.connect_string()).await;
    let refused = a.mutex("mh-bad").unwrap().with_min_hold(Duration::from_secs(7200));
    assert!(
        matches!(refused, Err(LockError::InvalidConfig { message: ref why, .. }) if why.contains("min_hold")),
        "{refused:?}"
    );
    let off = a.mutex("mh-bad").unwrap().with_min_hold(Duration::ZERO).unwrap();
    assert_eq!(off.min_hold(), None);
}

struct Reports {
    locks: LockClient,
}

impl Reports {
    #[distributed_lock("mh-attr:{day}", min_hold = "2s", timeout = "10s", client = self.locks)]
    async fn send(&self, day: u32) -> Result<(), AppError> {
        let _ = day;
        Ok(())
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_attributes_min_hold_keeps_the_lock_after_a_short_body() {
    let zk = server();
    let reports = Reports {
        locks: client(&zk.connect_string()).await,
    };
    let other = client(&zk.connect_string()).await;
    let asked = Instant::now();
    reports.send(7).await.unwrap();
    // The call returned at once; the lock stays taken until two seconds from its grant.
    assert!(asked.elapsed() < MIN, "the body's caller waited out the minimum");
    let lock = other.mutex("mh-attr:7").unwrap();
    assert!(
        lock.try_acquire().await.unwrap().is_none(),
        "taken right after a short body"
    );
    let taken = lock.acquire_timeout(Duration::from_secs(20)).await;
    assert!(taken.is_ok(), "{taken:?}");
    assert!(
        asked.elapsed() >= MIN,
        "taken {:?} after the call began",
        asked.elapsed()
    );
}
