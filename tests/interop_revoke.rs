//! Revocation between zklock and Apache Curator, against a real ZooKeeper: both write the same
//! `__REVOKE__` into a holder's node, so a Curator revoker reaches a zklock holder, and a
//! zklock revoker reaches a Curator holder that made its `InterProcessMutex` revocable.
//!
//! The Curator side is a real JVM running the Debian Curator jars
//! (`zklock_testing::curator::CuratorPeer`).

mod support;

use std::time::Duration;

use support::{client, server};
use zklock::RevokeOutcome;
use zklock_testing::curator::CuratorPeer;

/// Generous bound for anything that should happen promptly on a loaded machine.
const SOON: Duration = Duration::from_secs(20);

async fn curator(connect: &str) -> CuratorPeer {
    CuratorPeer::start(connect)
        .await
        .expect("start the Curator peer (run scripts/install-deps.sh)")
}

/// Curator's `Revoker.attemptRevoke` on a zklock holder's node: the holder's `revoked()`
/// resolves, it still holds, and once it releases Curator gets the lock.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_curator_revoker_reaches_a_zklock_holder() {
    let zk = server();
    let holder = client(&zk.connect_string()).await;
    let peer = curator(&zk.connect_string()).await;
    let guard = holder.mutex("rv-by-curator").unwrap().acquire().await.unwrap();

    peer.revoke(guard.node_path()).await.unwrap();
    tokio::time::timeout(SOON, guard.revoked())
        .await
        .expect("the zklock holder never saw Curator's revocation");
    assert!(guard.is_revoked() && !guard.is_lost());
    guard.ensure_held().await.expect("a revocation takes nothing away");

    peer.mutex("c", "/zklock/rv-by-curator").await.unwrap();
    peer.acquire("c", None).unwrap();
    guard.release().await.unwrap();
    peer.wait_acquired("c", SOON)
        .await
        .expect("Curator acquires after the release");
    peer.release("c").await.unwrap();
}

/// `LockClient::revoke` on a lock a revocable Curator `InterProcessMutex` holds: Curator's
/// revocation listener is called (`REVOKED`), and a zklock waiter gets the lock once Curator
/// releases.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_zklock_revoker_reaches_a_curator_holder() {
    let zk = server();
    let c = client(&zk.connect_string()).await;
    let peer = curator(&zk.connect_string()).await;
    peer.mutex("c", "/zklock/rv-of-curator").await.unwrap();
    peer.make_revocable("c").await.unwrap();
    peer.acquire("c", None).unwrap();
    let node = peer.wait_acquired("c", SOON).await.unwrap();

    let outcome = c.revoke("rv-of-curator").await.unwrap();
    assert_eq!(outcome, RevokeOutcome::Requested { nodes: vec![node] });
    peer.wait_revoked("c", SOON)
        .await
        .expect("Curator's revocation listener was never called");

    let waiting = tokio::spawn({
        let lock = c.mutex("rv-of-curator").unwrap();
        async move { lock.acquire_timeout(SOON).await }
    });
    peer.release("c").await.unwrap();
    let guard = waiting.await.unwrap().expect("zklock acquires after Curator released");
    guard.release().await.unwrap();
}
