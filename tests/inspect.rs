//! Inspection (`LockClient::lock_names`, `inspect`) of queues that hold more than zklock's own
//! nodes, against a real ZooKeeper: Kazoo's and unknown clients' nodes are shown in queue
//! order with who made them, a lock's queue followed through `watch_lock`, and a client with its
//! own namespace sees its own locks only. (A node gone between the listing and its read:
//! `ops::inspect`'s own tests.)

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
    // The oldest wait is the first waiter's: it was queued first.
    assert!(k.age >= u.age, "{view:?}");
    assert_eq!(view.oldest_wait(), Some(k.age));
    guard.release().await.unwrap();

    // With zklock's node gone, Kazoo's node is the holder.
    let view = c.inspect("mixed").await.unwrap().expect("the lock exists");
    assert_eq!(view.holders.len(), 1);
    assert_eq!(view.holders[0].node, kazoo);
    assert_eq!(view.waiters.len(), 1);
    assert_eq!(view.oldest_wait(), Some(view.waiters[0].age));
    foreign.delete(&format!("/zklock/mixed/{unknown}"), None).await.unwrap();
    let alone = c.inspect("mixed").await.unwrap().expect("Kazoo's node holds it");
    assert_eq!(alone.oldest_wait(), None, "nobody waits: {alone:?}");
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

/// `watch_lock` follows a lock's queue from before it exists: no directory, then a holder, a
/// waiter behind it, the waiter holding once the holder left; and a closed client ends it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watch_lock_follows_the_queue_as_it_changes() {
    let zk = server();
    let c = client(&zk.connect_string()).await;
    let foreign = raw(&zk.connect_string()).await;
    let mut queue = c.watch_lock("followed").await.unwrap();
    assert!(queue.borrow_and_update().is_none(), "no directory yet");

    /// The holders' and waiters' node names the receiver shows once `until` holds of them.
    async fn shows(
        queue: &mut tokio::sync::watch::Receiver<Option<zklock_runtime::LockView>>,
        until: impl Fn(&[String], &[String]) -> bool,
    ) -> (Vec<String>, Vec<String>) {
        let names = |view: &Option<zklock_runtime::LockView>| {
            let view = view.as_ref();
            let of = |nodes: Option<&Vec<zklock_runtime::QueuedNode>>| {
                nodes.map_or_else(Vec::new, |n| n.iter().map(|n| n.node.clone()).collect::<Vec<_>>())
            };
            (of(view.map(|v| &v.holders)), of(view.map(|v| &v.waiters)))
        };
        let seen = tokio::time::timeout(
            Duration::from_secs(20),
            queue.wait_for(|view| {
                let (holders, waiters) = names(view);
                until(&holders, &waiters)
            }),
        )
        .await
        .expect("the watch never showed the change")
        .expect("the watch is running");
        names(&seen)
    }

    let guard = c.mutex("followed").unwrap().acquire().await.unwrap();
    let holder = guard.node_path().rsplit('/').next().unwrap().to_owned();
    let (holders, _) = shows(&mut queue, |h, _| !h.is_empty()).await;
    assert_eq!(holders, std::slice::from_ref(&holder));

    let waiter = foreign_node(&foreign, "/zklock/followed", "someone-", b"").await;
    let (holders, waiters) = shows(&mut queue, |_, w| !w.is_empty()).await;
    assert_eq!((holders, waiters), (vec![holder.clone()], vec![waiter.clone()]));

    guard.release().await.unwrap();
    let (holders, waiters) = shows(&mut queue, |h, _| h.first() != Some(&holder)).await;
    assert_eq!(
        (holders, waiters),
        (vec![waiter], vec![]),
        "the waiter holds once the holder left"
    );

    c.close().await;
    let ended = tokio::time::timeout(Duration::from_secs(20), async {
        while queue.changed().await.is_ok() {}
    })
    .await;
    assert!(ended.is_ok(), "the watch went on after the client was closed");
}
