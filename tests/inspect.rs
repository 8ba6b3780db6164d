//! Inspection (`LockClient::lock_names`, `inspect`) of queues that hold more than zklock's own
//! nodes, against a real ZooKeeper: Kazoo's and unknown clients' nodes are shown in queue
//! order with who made them, a node gone between the listing and its read is left out, and a
//! client with its own namespace sees its own locks only.

mod support;

use std::time::Duration;

use support::{client, raw, server};
use zklock_runtime::{zk, ClientKind, LockClient, RecipeKind};

/// Creates an ephemeral sequential node `dir/prefix<seq>` holding `data` from a plain session;
/// returns its name.
async fn foreign_node(raw: &zk::Client, dir: &str, prefix: &str, data: &[u8]) -> String {
    let sequential = zk::CreateMode::EphemeralSequential.with_acls(zk::Acls::anyone_all());
    let (_, seq) = raw
        .create(&format!("{dir}/{prefix}"), data, &sequential)
        .await
        .expect("create a foreign contender");
    format!("{prefix}{seq}")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kazoo_and_unknown_nodes_are_shown_in_queue_order_with_their_makers() {
    let zk = server();
    let c = client(&zk.connect_string()).await;
    let foreign = raw(&zk.connect_string()).await;
    let guard = c.mutex("mixed").unwrap().acquire().await.unwrap();
    // Kazoo names its nodes `<uuid>__lock__<seq>` and stores the contender's identifier.
    let kazoo = foreign_node(&foreign, "/zklock/mixed", "8d2f6c1e0b5a4f3e9c7d__lock__", b"worker-3").await;
    let unknown = foreign_node(&foreign, "/zklock/mixed", "someone-", b"\xff\xfe\x00").await;

    let view = c.inspect("mixed").await.unwrap().expect("the lock exists");
    assert_eq!(view.recipe, RecipeKind::Mutex);
    assert_eq!(view.holders.len(), 1, "{view:?}");
    let holder = &view.holders[0];
    assert_eq!(format!("/zklock/mixed/{}", holder.node), guard.node_path());
    assert_eq!(holder.data.client, ClientKind::Zklock);

    let waiters: Vec<_> = view.waiters.iter().map(|w| w.node.as_str()).collect();
    assert_eq!(waiters, [kazoo.as_str(), unknown.as_str()], "queue order: {view:?}");
    let (k, u) = (&view.waiters[0], &view.waiters[1]);
    assert_eq!(k.data.client, ClientKind::Kazoo);
    assert_eq!(k.data.identity.as_deref(), Some("worker-3"));
    assert_eq!(
        k.waits_for.as_deref(),
        Some(holder.node.as_str()),
        "each waits for the one before"
    );
    assert_eq!(u.data.client, ClientKind::Unknown);
    assert_eq!(
        u.data.identity, None,
        "data that is not text is not shown as an identity"
    );
    assert_eq!(u.waits_for.as_deref(), Some(kazoo.as_str()));
    assert!(!k.holds && !u.holds);
    let session = foreign.session_id().0;
    assert!(view.waiters.iter().all(|w| w.session == session), "{view:?}");
    guard.release().await.unwrap();

    // With zklock's node gone, Kazoo's node is the holder.
    let view = c.inspect("mixed").await.unwrap().expect("the lock exists");
    assert_eq!(view.holders.len(), 1);
    assert_eq!(view.holders[0].node, kazoo);
    assert_eq!(view.waiters.len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_with_its_own_namespace_inspects_its_own_locks() {
    let zk = server();
    let apps = LockClient::builder(zk.connect_string())
        .namespace("/apps/locks")
        .session_timeout(Duration::from_secs(4))
        .connect()
        .await
        .unwrap();
    let default = client(&zk.connect_string()).await;
    let guard = apps.mutex("report").unwrap().acquire().await.unwrap();
    let other = default.mutex("elsewhere").unwrap().acquire().await.unwrap();

    assert_eq!(apps.lock_names().await.unwrap(), ["report"]);
    assert_eq!(default.lock_names().await.unwrap(), ["elsewhere"]);
    let view = apps.inspect("report").await.unwrap().expect("the lock exists");
    assert_eq!(view.path, "/apps/locks/report");
    assert_eq!(format!("{}/{}", view.path, view.holders[0].node), guard.node_path());
    assert!(
        default.inspect("report").await.unwrap().is_none(),
        "a lock of another namespace is not seen"
    );
    guard.release().await.unwrap();
    other.release().await.unwrap();
}

/// A holder's node deleted after the inspection listed the directory and before it read the
/// node: the view leaves it out, judges the rest without it, and reports the queue changed.
///
/// The delete is ordered by the server, not by timing: the inspection's listing is sent first
/// (its first poll), then the release's delete on the same session, and only then are the
/// node reads sent (when the inspection is polled again, with the listing already answered).
/// The fired directory watch shows that the listing came before the delete, so the node was
/// listed and then found gone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_gone_between_the_listing_and_its_read_is_left_out() {
    use futures::FutureExt;

    let zk = server();
    let c = client(&zk.connect_string()).await;
    let foreign = raw(&zk.connect_string()).await;
    let guard = c.mutex("vanishing").unwrap().acquire().await.unwrap();
    let waiter = foreign_node(&foreign, "/zklock/vanishing", "someone-", b"").await;

    let mut inspection = Box::pin(c.inspect_and_watch("vanishing"));
    assert!(
        inspection.as_mut().now_or_never().is_none(),
        "the listing waits for its answer"
    );
    guard.release().await.unwrap();
    let (view, changed) = tokio::time::timeout(Duration::from_secs(20), inspection)
        .await
        .expect("the inspection answers")
        .expect("a vanished node is not an error");
    tokio::time::timeout(Duration::from_secs(20), changed)
        .await
        .expect("the listing saw the holder's node, so its delete fires the watch");
    let view = view.expect("the lock exists");
    let nodes: Vec<_> = view
        .holders
        .iter()
        .chain(&view.waiters)
        .map(|n| n.node.as_str())
        .collect();
    assert_eq!(nodes, [waiter.as_str()], "{view:?}");
    assert!(
        view.holders[0].waits_for.is_none(),
        "judged without the vanished node, the next in line holds: {view:?}"
    );
}
