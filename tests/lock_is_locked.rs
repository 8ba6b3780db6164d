//! `Lock::is_locked` (does anyone hold the lock now, read from the server) and
//! `Lock::is_held_by_current_task` (does the calling code run inside a hold's scope), against a
//! real ZooKeeper.

mod support;

use std::time::Duration;

use support::{client, server, AppError};
use zklock::{distributed_lock, Lock, LockClient, LockKind};
use zklock_testing::curator::CuratorPeer;

/// The longest a test waits for a grant or a task on a loaded machine; past it the test fails.
const WAIT: Duration = Duration::from_secs(30);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_mutex_is_locked_while_anyone_holds_it() {
    let zk = server();
    let holder = client(&zk.connect_string()).await;
    let observer = client(&zk.connect_string()).await;
    let seen = observer.mutex("report").unwrap();

    // Never used: no directory at all.
    assert!(!seen.is_locked().await.unwrap(), "a lock nobody has used is not locked");

    let guard = holder.mutex("report").unwrap().acquire_timeout(WAIT).await.unwrap();
    assert!(seen.is_locked().await.unwrap(), "held by another client");
    assert!(
        holder.mutex("report").unwrap().is_locked().await.unwrap(),
        "the holder's own client sees it held too"
    );

    guard.release().await.unwrap();
    assert!(!seen.is_locked().await.unwrap(), "released");
    observer.close().await;
    holder.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_curator_holder_locks_it_too() {
    let zk = server();
    let observer = client(&zk.connect_string()).await;
    let lock = observer.mutex("shared-with-curator").unwrap();
    let peer = CuratorPeer::start(&zk.connect_string())
        .await
        .expect("start the Curator peer (run scripts/install-deps.sh)");
    peer.mutex("c", lock.path()).await.unwrap();
    peer.acquire("c", Some(WAIT)).unwrap();
    peer.wait_acquired("c", WAIT).await.unwrap();
    assert!(lock.is_locked().await.unwrap(), "held by Curator");
    peer.release("c").await.unwrap();
    assert!(!lock.is_locked().await.unwrap(), "released by Curator");
    observer.close().await;
}

/// Readers share: a read lock held by readers alone is not locked for a reader, but is for a
/// writer; a writer holding it locks both sides.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_read_lock_is_locked_only_by_a_writer() {
    let zk = server();
    let holder = client(&zk.connect_string()).await;
    let observer = client(&zk.connect_string()).await;
    let (read, write) = (
        observer.read_lock("catalog").unwrap(),
        observer.write_lock("catalog").unwrap(),
    );

    let reader = holder
        .read_lock("catalog")
        .unwrap()
        .acquire_timeout(WAIT)
        .await
        .unwrap();
    assert!(
        !read.is_locked().await.unwrap(),
        "readers alone do not lock it for a reader"
    );
    assert!(write.is_locked().await.unwrap(), "readers lock it for a writer");
    reader.release().await.unwrap();
    assert!(!read.is_locked().await.unwrap());
    assert!(!write.is_locked().await.unwrap());

    let writer = holder
        .write_lock("catalog")
        .unwrap()
        .acquire_timeout(WAIT)
        .await
        .unwrap();
    assert!(read.is_locked().await.unwrap(), "a writer locks it for a reader");
    assert!(write.is_locked().await.unwrap(), "and for a writer");
    writer.release().await.unwrap();
    assert!(!read.is_locked().await.unwrap());
    observer.close().await;
    holder.close().await;
}

/// A semaphore is locked once every lease is taken.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_semaphore_is_locked_when_no_lease_is_free() {
    let zk = server();
    let holder = client(&zk.connect_string()).await;
    let observer = client(&zk.connect_string()).await;
    let seen = observer.lock("exports", LockKind::Semaphore { leases: 2 }).unwrap();
    let slots = holder.lock("exports", LockKind::Semaphore { leases: 2 }).unwrap();
    let one = slots.acquire_timeout(WAIT).await.unwrap();
    assert!(!seen.is_locked().await.unwrap(), "one of two leases is free");
    let two = slots.acquire_timeout(WAIT).await.unwrap();
    assert!(seen.is_locked().await.unwrap(), "both leases taken");
    one.release().await.unwrap();
    assert!(!seen.is_locked().await.unwrap(), "a lease is free again");
    two.release().await.unwrap();
    observer.close().await;
    holder.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn held_by_current_task_only_inside_the_holds_scope() {
    let zk = server();
    let locks = client(&zk.connect_string()).await;
    let other_client = client(&zk.connect_string()).await;
    let lock = locks.write_lock("ledger").unwrap();
    assert!(!lock.is_held_by_current_task(), "nothing held");

    let guard = lock.acquire_timeout(WAIT).await.unwrap();
    assert!(
        !lock.is_held_by_current_task(),
        "keeping a guard is not running inside its scope"
    );
    guard
        .scope(async {
            assert!(lock.is_held_by_current_task(), "inside the scope");
            assert!(
                locks.write_lock("ledger").unwrap().is_held_by_current_task(),
                "any handle of the same lock through the same client"
            );
            assert!(
                locks.read_lock("ledger").unwrap().is_held_by_current_task(),
                "a writer holds the read side too"
            );
            assert!(
                !locks.mutex("ledger-2").unwrap().is_held_by_current_task(),
                "another lock"
            );
            assert!(
                !other_client.write_lock("ledger").unwrap().is_held_by_current_task(),
                "the same lock through another client is another holder"
            );
            // Another task, spawned from inside the scope, is not inside it.
            let spawned = tokio::spawn({
                let lock = lock.clone();
                async move { lock.is_held_by_current_task() }
            });
            assert!(!spawned.await.unwrap(), "another task");
            // Nor is a future polled beside the scope's body by the same task (checked below).
        })
        .await;
    let beside = {
        let lock = lock.clone();
        async move { lock.is_held_by_current_task() }
    };
    let (inside, beside) = tokio::join!(guard.scope(async { lock.is_held_by_current_task() }), beside);
    assert!(inside && !beside, "inside {inside}, beside {beside}");

    guard.release().await.unwrap();
    assert!(!lock.is_held_by_current_task(), "released");
    other_client.close().await;
    locks.close().await;
}

/// A hold that was lost (its node deleted by someone else) no longer counts, even inside its
/// scope.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_hold_is_not_held() {
    let zk = server();
    let locks = client(&zk.connect_string()).await;
    let raw = support::raw(&zk.connect_string()).await;
    let lock = locks.mutex("taken-away").unwrap();
    let guard = lock.acquire_timeout(WAIT).await.unwrap();
    guard
        .scope(async {
            assert!(lock.is_held_by_current_task());
            raw.delete(guard.node_path(), None).await.unwrap();
            tokio::time::timeout(WAIT, guard.lost())
                .await
                .expect("the holder learns its node was deleted");
            assert!(!lock.is_held_by_current_task(), "lost");
        })
        .await;
    drop(guard);
    locks.close().await;
}

#[distributed_lock("attribute-held", client = locks, timeout = "30s")]
async fn attribute_body(locks: &LockClient, lock: &Lock) -> Result<bool, AppError> {
    Ok(lock.is_held_by_current_task())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn held_by_current_task_inside_an_attribute_body() {
    let zk = server();
    let locks = client(&zk.connect_string()).await;
    let lock = locks.mutex("attribute-held").unwrap();
    assert!(attribute_body(&locks, &lock).await.unwrap(), "inside the body");
    assert!(!lock.is_held_by_current_task(), "after the body");
    locks.close().await;
}
