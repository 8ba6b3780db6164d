//! zklock and Apache Curator on the same lock path, against a real ZooKeeper: they exclude each
//! other and queue in FIFO order in both directions, for `InterProcessMutex` and for
//! `InterProcessReadWriteLock`; and contender nodes written by any other ZooKeeper client are
//! honoured in sequence order.
//!
//! The Curator side is a real JVM running the Debian Curator jars
//! (`zklock_testing::curator::CuratorPeer`).

mod support;

use std::time::Duration;

use support::{client, raw, server, session_of, wait_watching};
use tokio::sync::oneshot;
use tokio::task::JoinHandle;
use zklock_runtime::{zk, Lock, LockClient, LockError};
use zklock_testing::curator::{CuratorPeer, RwMode};
use zklock_testing::ZkServer;

/// Generous bound for anything that should happen promptly on a loaded machine.
const SOON: Duration = Duration::from_secs(20);

async fn curator(connect: &str) -> CuratorPeer {
    CuratorPeer::start(connect)
        .await
        .expect("start the Curator peer (run scripts/install-deps.sh)")
}

async fn children(raw: &zk::Client, dir: &str) -> Vec<String> {
    match raw.list_children(dir).await {
        Ok(children) => children,
        Err(zk::Error::NoNode) => Vec::new(),
        Err(err) => panic!("list {dir}: {err}"),
    }
}

/// Waits until the lock dir holds `n` contender nodes, so the queue order is settled.
async fn wait_for_contenders(raw: &zk::Client, dir: &str, n: usize) {
    let deadline = tokio::time::Instant::now() + SOON;
    loop {
        let now = children(raw, dir).await;
        if now.len() == n {
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{dir} never reached {n} contenders: {now:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn seq(node: &str) -> u64 {
    let digits = node.len() - node.trim_end_matches(|c: char| c.is_ascii_digit()).len();
    node[node.len() - digits..].parse().expect("sequence suffix")
}

/// The contender nodes of `dir` in queue (sequence) order, as full paths.
async fn queue_of(raw: &zk::Client, dir: &str) -> Vec<String> {
    let mut nodes = children(raw, dir).await;
    nodes.sort_by_key(|n| seq(n));
    nodes.into_iter().map(|n| format!("{dir}/{n}")).collect()
}

/// A zklock contender on its own task: reports its node when granted, holds until told to
/// release.
struct ZkContender {
    granted: oneshot::Receiver<Result<String, LockError>>,
    release: Option<oneshot::Sender<()>>,
    task: JoinHandle<()>,
}

impl ZkContender {
    fn spawn(lock: Lock) -> ZkContender {
        let (granted_tx, granted) = oneshot::channel();
        let (release, release_rx) = oneshot::channel::<()>();
        let task = tokio::spawn(async move {
            match lock.acquire().await {
                Ok(guard) => {
                    let _ = granted_tx.send(Ok(guard.node_path().to_owned()));
                    let _ = release_rx.await;
                    guard.release().await.expect("release");
                }
                Err(err) => {
                    let _ = granted_tx.send(Err(err));
                }
            }
        });
        ZkContender {
            granted,
            release: Some(release),
            task,
        }
    }

    /// Asserts the contender waits on `node` (of `client`'s session): it watches it, and was
    /// not granted.
    async fn assert_waiting(&mut self, zk: &ZkServer, client: &LockClient, node: &str, why: &str) {
        wait_watching(zk, &session_of(client), node, "the zklock contender").await;
        if let Ok(outcome) = self.granted.try_recv() {
            panic!("zklock contender went ahead while {why}: {outcome:?}");
        }
    }

    async fn wait_granted(&mut self) -> String {
        tokio::time::timeout(SOON, &mut self.granted)
            .await
            .expect("zklock contender not granted in time")
            .expect("contender task ended")
            .expect("zklock acquire failed")
    }

    async fn release(mut self) {
        let _ = self.release.take().unwrap().send(());
        tokio::time::timeout(SOON, self.task)
            .await
            .expect("release in time")
            .expect("contender task");
    }
}

/// Asserts Curator's contender `id` waits on `node`: the peer's session watches it, and no
/// event came for `id`.
async fn assert_curator_waiting(zk: &ZkServer, peer: &CuratorPeer, id: &str, node: &str, why: &str) {
    wait_watching(zk, peer.session_id(), node, &format!("Curator contender {id}")).await;
    let event = peer.poll_event(id, Duration::ZERO).await.expect("peer alive");
    assert_eq!(event, None, "Curator contender {id} did something while {why}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn curator_mutex_waits_while_zklock_holds() {
    let zk = server();
    let zl = client(&zk.connect_string()).await;
    let peer = curator(&zk.connect_string()).await;
    let lock = zl.mutex("interop-hold").unwrap();
    assert_eq!(lock.path(), "/zklock/interop-hold");

    let guard = lock.acquire_timeout(SOON).await.unwrap();
    peer.mutex("c", lock.path()).await.unwrap();
    peer.acquire("c", None).unwrap();
    assert_curator_waiting(&zk, &peer, "c", guard.node_path(), "zklock holds").await;

    guard.release().await.unwrap();
    let node = peer.wait_acquired("c", SOON).await.unwrap();
    assert!(node.starts_with("/zklock/interop-hold/_c_"), "{node}");
    peer.release("c").await.unwrap();
}

/// A zklock client caches its lock (an hour of linger): the idle node blocks Curator's
/// `InterProcessMutex` only until Curator's contender node appears in the directory, which
/// makes zklock give the node up; Curator is then granted, and zklock's next acquisition
/// queues behind it on a new node.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn curator_mutex_behind_a_cached_zklock_node_is_granted() {
    let zk = server();
    let zl = LockClient::builder(zk.connect_string())
        .session_timeout(Duration::from_secs(4))
        .default_cache(Duration::from_secs(3600))
        .connect()
        .await
        .unwrap();
    let peer = curator(&zk.connect_string()).await;
    let lock = zl.mutex("interop-cached").unwrap();
    let guard = lock.acquire_timeout(SOON).await.unwrap();
    let cached_node = guard.node_path().to_owned();
    guard.release().await.unwrap();
    assert!(lock.is_cached(), "the node was not kept");

    peer.mutex("c", lock.path()).await.unwrap();
    peer.acquire("c", None).unwrap();
    let node = peer.wait_acquired("c", SOON).await.expect("Curator is granted");
    assert!(node.starts_with("/zklock/interop-cached/_c_"), "{node}");
    assert_ne!(node, cached_node);
    assert!(!lock.is_cached());

    let mut next = ZkContender::spawn(lock.clone());
    let raw = raw(&zk.connect_string()).await;
    wait_for_contenders(&raw, lock.path(), 2).await;
    let ours = queue_of(&raw, lock.path()).await.pop().unwrap();
    next.assert_waiting(&zk, &zl, &node, "Curator holds").await;
    peer.release("c").await.unwrap();
    assert_eq!(next.wait_granted().await, ours);
    next.release().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn zklock_mutex_waits_while_curator_holds() {
    let zk = server();
    let zl = client(&zk.connect_string()).await;
    let peer = curator(&zk.connect_string()).await;
    let lock = zl.mutex("interop-held-by-curator").unwrap();

    peer.mutex("c", lock.path()).await.unwrap();
    peer.acquire("c", Some(SOON)).unwrap();
    let curators = peer.wait_acquired("c", SOON).await.unwrap();

    assert!(
        lock.try_acquire().await.unwrap().is_none(),
        "zklock's try_acquire succeeded while Curator holds"
    );
    match lock.acquire_timeout(Duration::from_millis(300)).await {
        Err(LockError::Timeout { .. }) => {}
        other => panic!("expected a timeout while Curator holds, got {other:?}"),
    }
    let mut waiter = ZkContender::spawn(lock.clone());
    waiter.assert_waiting(&zk, &zl, &curators, "Curator holds").await;

    peer.release("c").await.unwrap();
    waiter.wait_granted().await;
    waiter.release().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fifo_zklock_then_curator_then_zklock() {
    let zk = server();
    let zl = client(&zk.connect_string()).await;
    let zl2 = client(&zk.connect_string()).await;
    let peer = curator(&zk.connect_string()).await;
    let view = raw(&zk.connect_string()).await;
    let lock = zl.mutex("interop-fifo-zcz").unwrap();
    let dir = lock.path().to_owned();

    let a = lock.acquire_timeout(SOON).await.unwrap();
    peer.mutex("b", &dir).await.unwrap();
    peer.acquire("b", None).unwrap();
    wait_for_contenders(&view, &dir, 2).await;
    let mut c = ZkContender::spawn(zl2.mutex("interop-fifo-zcz").unwrap());
    wait_for_contenders(&view, &dir, 3).await;

    a.release().await.unwrap();
    // B (Curator) queued before C (zklock), so B goes first and C keeps waiting.
    let b_node = tokio::select! {
        b = peer.wait_acquired("b", SOON) => b.unwrap(),
        c_first = &mut c.granted => panic!("zklock's C overtook Curator's B: {c_first:?}"),
    };
    c.assert_waiting(&zk, &zl2, &b_node, "Curator's B holds").await;

    peer.release("b").await.unwrap();
    let c_node = c.wait_granted().await;
    assert!(seq(&b_node) < seq(&c_node), "{b_node} vs {c_node}");
    c.release().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fifo_curator_then_zklock_then_curator() {
    let zk = server();
    let zl = client(&zk.connect_string()).await;
    let peer = curator(&zk.connect_string()).await;
    let view = raw(&zk.connect_string()).await;
    let lock = zl.mutex("interop-fifo-czc").unwrap();
    let dir = lock.path().to_owned();

    peer.mutex("a", &dir).await.unwrap();
    peer.mutex("c", &dir).await.unwrap();
    peer.acquire("a", None).unwrap();
    peer.wait_acquired("a", SOON).await.unwrap();
    let mut b = ZkContender::spawn(lock.clone());
    wait_for_contenders(&view, &dir, 2).await;
    peer.acquire("c", None).unwrap();
    wait_for_contenders(&view, &dir, 3).await;

    peer.release("a").await.unwrap();
    // B (zklock) queued before C (Curator): B goes first, C keeps waiting while B holds.
    let b_node = tokio::select! {
        b = b.wait_granted() => b,
        c_first = peer.wait_acquired("c", SOON) => panic!("Curator's C overtook zklock's B: {c_first:?}"),
    };
    assert_curator_waiting(&zk, &peer, "c", &b_node, "zklock's B holds").await;

    b.release().await;
    let c_node = peer.wait_acquired("c", SOON).await.unwrap();
    assert!(seq(&b_node) < seq(&c_node), "{b_node} vs {c_node}");
    peer.release("c").await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn curator_and_zklock_readers_hold_together() {
    let zk = server();
    let zl = client(&zk.connect_string()).await;
    let peer = curator(&zk.connect_string()).await;
    let read = zl.read_lock("interop-readers").unwrap();
    peer.rw_lock("r", read.path()).await.unwrap();

    // Curator reads first, then zklock joins.
    peer.acquire_rw("r", RwMode::Read, Some(SOON)).unwrap();
    let node = peer.wait_acquired("r", SOON).await.unwrap();
    assert!(node.contains("__READ__"), "{node}");
    let guard = read
        .acquire_timeout(SOON)
        .await
        .expect("zklock reader shares with a Curator reader");
    assert!(guard.node_path().contains("__READ__"));
    peer.release("r").await.unwrap();

    // zklock reads first, then Curator joins.
    peer.acquire_rw("r", RwMode::Read, Some(SOON)).unwrap();
    peer.wait_acquired("r", SOON)
        .await
        .expect("Curator reader shares with a zklock reader");
    peer.release("r").await.unwrap();
    guard.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn curator_writer_excludes_zklock_readers_and_writers() {
    let zk = server();
    let zl = client(&zk.connect_string()).await;
    let peer = curator(&zk.connect_string()).await;
    let read = zl.read_lock("interop-curator-writes").unwrap();
    let write = zl.write_lock("interop-curator-writes").unwrap();
    peer.rw_lock("w", read.path()).await.unwrap();

    peer.acquire_rw("w", RwMode::Write, Some(SOON)).unwrap();
    let node = peer.wait_acquired("w", SOON).await.unwrap();
    assert!(node.contains("__WRIT__"), "{node}");

    // Queue the reader's node before the writer's: the order the test is about, made
    // observable instead of assumed from the order the two tasks were spawned in.
    let view = raw(&zk.connect_string()).await;
    let mut reader = ZkContender::spawn(read.clone());
    wait_for_contenders(&view, read.path(), 2).await;
    let mut writer = ZkContender::spawn(write.clone());
    wait_for_contenders(&view, read.path(), 3).await;
    let queue = queue_of(&view, read.path()).await;
    // The reader waits for the writer ahead of it; the writer for the node just ahead of it.
    reader.assert_waiting(&zk, &zl, &node, "a Curator writer holds").await;
    writer
        .assert_waiting(&zk, &zl, &queue[1], "a Curator writer holds")
        .await;

    peer.release("w").await.unwrap();
    // The reader queued first, so it goes; the writer waits for it.
    reader.wait_granted().await;
    writer
        .assert_waiting(&zk, &zl, &queue[1], "a zklock reader holds")
        .await;
    reader.release().await;
    writer.wait_granted().await;
    writer.release().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn zklock_reader_and_writer_exclude_curator_writer_and_reader() {
    let zk = server();
    let zl = client(&zk.connect_string()).await;
    let peer = curator(&zk.connect_string()).await;
    let read = zl.read_lock("interop-zklock-holds").unwrap();
    let write = zl.write_lock("interop-zklock-holds").unwrap();
    peer.rw_lock("w", read.path()).await.unwrap();
    peer.rw_lock("r", read.path()).await.unwrap();

    // A zklock reader keeps a Curator writer out.
    let held = read.acquire_timeout(SOON).await.unwrap();
    peer.acquire_rw("w", RwMode::Write, None).unwrap();
    assert_curator_waiting(&zk, &peer, "w", held.node_path(), "a zklock reader holds").await;
    held.release().await.unwrap();
    peer.wait_acquired("w", SOON).await.unwrap();
    peer.release("w").await.unwrap();

    // A zklock writer keeps a Curator reader out.
    let held = write.acquire_timeout(SOON).await.unwrap();
    assert!(held.node_path().contains("__WRIT__"));
    peer.acquire_rw("r", RwMode::Read, None).unwrap();
    assert_curator_waiting(&zk, &peer, "r", held.node_path(), "a zklock writer holds").await;
    held.release().await.unwrap();
    peer.wait_acquired("r", SOON).await.unwrap();
    peer.release("r").await.unwrap();
}

/// Creates an ephemeral sequential node `<dir>/<prefix>NNNNNNNNNN` from a plain ZooKeeper
/// session, the way a client that knows nothing of zklock or Curator would queue.
async fn foreign_contender(raw: &zk::Client, dir: &str, prefix: &str) -> String {
    let persistent = zk::CreateMode::Persistent.with_acls(zk::Acls::anyone_all());
    let container = zk::CreateMode::Container.with_acls(zk::Acls::anyone_all());
    let parent = &dir[..dir.rfind('/').unwrap()];
    for (path, options) in [(parent, &persistent), (dir, &container)] {
        match raw.create(path, b"", options).await {
            Ok(_) | Err(zk::Error::NodeExists) => {}
            Err(err) => panic!("create {path}: {err}"),
        }
    }
    let sequential = zk::CreateMode::EphemeralSequential.with_acls(zk::Acls::anyone_all());
    let (_, sequence) = raw
        .create(&format!("{dir}/{prefix}"), b"", &sequential)
        .await
        .expect("create foreign contender");
    format!("{dir}/{prefix}{sequence}")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn foreign_sequential_nodes_are_honoured_in_sequence_order() {
    let zk = server();
    let zl = client(&zk.connect_string()).await;
    let zl2 = client(&zk.connect_string()).await;
    let foreign = raw(&zk.connect_string()).await;
    let view = raw(&zk.connect_string()).await;
    let lock = zl.mutex("interop-foreign").unwrap();
    let dir = lock.path().to_owned();

    // Queue: foreign F1, zklock Z, foreign F2.
    let first = foreign_contender(&foreign, &dir, "foreign-").await;
    assert!(
        lock.try_acquire().await.unwrap().is_none(),
        "zklock ignored the foreign node {first}"
    );
    // The try's node is removed in the background; wait for that, so the count below sees Z.
    zl.flush().await;
    let mut z = ZkContender::spawn(lock.clone());
    wait_for_contenders(&view, &dir, 2).await;
    let second = foreign_contender(&foreign, &dir, "other-client-").await;
    assert!(seq(&first) < seq(&second));
    z.assert_waiting(&zk, &zl, &first, "a foreign node is ahead").await;

    // Removing the node behind changes nothing; removing the one ahead lets zklock go.
    foreign.delete(&second, None).await.unwrap();
    z.assert_waiting(&zk, &zl, &first, "the foreign node ahead is still there")
        .await;
    foreign.delete(&first, None).await.unwrap();
    let node = z.wait_granted().await;
    assert!(seq(&node) > seq(&first), "{node} vs {first}");

    // And a foreign node queued behind a zklock holder waits its turn in the same order:
    // zklock sees it as a contender, so a second zklock contender queues after it.
    let third = foreign_contender(&foreign, &dir, "foreign-").await;
    let mut after = ZkContender::spawn(zl2.mutex("interop-foreign").unwrap());
    wait_for_contenders(&view, &dir, 3).await;
    z.release().await;
    after
        .assert_waiting(&zk, &zl2, &third, "a foreign node is ahead of it")
        .await;
    foreign.delete(&third, None).await.unwrap();
    after.wait_granted().await;
    after.release().await;
}

/// zklock and Curator semaphores (`InterProcessSemaphoreV2`) on one path count each other's
/// leases, in both directions: with 2 leases, one held by each, neither side gets a third, and a
/// lease returned by one side goes to a waiter of the other.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn zklock_and_curator_semaphores_share_their_leases() {
    let zk = server();
    let zl = client(&zk.connect_string()).await;
    let zl2 = client(&zk.connect_string()).await;
    let peer = curator(&zk.connect_string()).await;
    let sem = zl.semaphore("interop-sem", 2).unwrap();
    for id in ["c1", "c2"] {
        peer.semaphore(id, sem.path(), 2).await.unwrap();
    }

    // One lease each.
    peer.acquire("c1", Some(SOON)).unwrap();
    let curator_lease = peer.wait_acquired("c1", SOON).await.unwrap();
    assert!(
        curator_lease.starts_with(&format!("{}/leases/", sem.path())),
        "{curator_lease}"
    );
    let zklock_lease = sem.acquire_timeout(SOON).await.unwrap();
    assert!(zklock_lease.node_path().starts_with(&format!("{}/leases/", sem.path())));

    // Full: a third zklock lease and a third Curator lease both wait.
    assert!(matches!(
        zl2.semaphore("interop-sem", 2).unwrap().try_acquire().await,
        Ok(None)
    ));
    peer.acquire("c2", Some(Duration::from_millis(500))).unwrap();
    assert!(
        matches!(
            peer.wait_acquired("c2", SOON).await,
            Err(zklock_testing::curator::PeerError::NotAcquired { .. })
        ),
        "Curator got a third lease of two"
    );

    // Curator returns its lease: a waiting zklock acquirer gets it.
    let waiter = tokio::spawn({
        let sem = zl2.semaphore("interop-sem", 2).unwrap();
        async move { sem.acquire_timeout(SOON).await }
    });
    let view = raw(&zk.connect_string()).await;
    wait_for_contenders(&view, &format!("{}/leases", sem.path()), 3).await;
    peer.release("c1").await.unwrap();
    let zklock_second = tokio::time::timeout(SOON, waiter)
        .await
        .expect("zklock got the lease Curator returned")
        .unwrap()
        .unwrap();

    // zklock returns one: a waiting Curator acquirer gets it.
    peer.acquire("c2", Some(SOON)).unwrap();
    wait_for_contenders(&view, &format!("{}/leases", sem.path()), 3).await;
    zklock_lease.release().await.unwrap();
    let node = peer
        .wait_acquired("c2", SOON)
        .await
        .expect("Curator got the lease zklock returned");
    assert!(node.starts_with(&format!("{}/leases/", sem.path())), "{node}");
    peer.release("c2").await.unwrap();
    zklock_second.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_multi_lock_and_a_curator_mutex_on_one_of_its_paths_exclude_each_other() {
    let zk = server();
    let zl = client(&zk.connect_string()).await;
    let peer = curator(&zk.connect_string()).await;
    let raw = raw(&zk.connect_string()).await;
    let multi = zl.multi_lock(["interop-multi-b", "interop-multi-a"]).unwrap();
    let (a_dir, b_dir) = ("/zklock/interop-multi-a", "/zklock/interop-multi-b");

    peer.mutex("c", b_dir).await.unwrap();
    peer.acquire("c", Some(SOON)).unwrap();
    let curators = peer.wait_acquired("c", SOON).await.unwrap();
    // All or nothing: a try fails on the Curator-held path and keeps nothing.
    assert!(multi.try_acquire().await.unwrap().is_none());
    zl.flush().await;
    assert!(
        children(&raw, a_dir).await.is_empty(),
        "the try left a node on the free path"
    );

    // A waiting multi-lock holds the free path (taken first, in path order) and queues behind
    // Curator on the other.
    let (granted_tx, mut granted) = oneshot::channel();
    let (release, release_rx) = oneshot::channel::<()>();
    let task = tokio::spawn({
        let multi = multi.clone();
        async move {
            let guard = multi.acquire().await.expect("multi-lock");
            let held = guard
                .guards()
                .iter()
                .map(|g| g.node_path().to_owned())
                .collect::<Vec<_>>();
            let _ = granted_tx.send(held);
            let _ = release_rx.await;
            guard.release().await.expect("release");
        }
    });
    wait_for_contenders(&raw, a_dir, 1).await;
    wait_for_contenders(&raw, b_dir, 2).await;
    wait_watching(&zk, &session_of(&zl), &curators, "the multi-lock").await;
    if let Ok(held) = granted.try_recv() {
        panic!("the multi-lock went ahead while Curator holds one of its paths: {held:?}");
    }

    peer.release("c").await.unwrap();
    let held = tokio::time::timeout(SOON, &mut granted)
        .await
        .expect("multi-lock granted after Curator released")
        .unwrap();
    let on_b = held
        .iter()
        .find(|node| node.starts_with(b_dir))
        .expect("the multi-lock holds a node on the Curator path");
    peer.acquire("c", None).unwrap();
    assert_curator_waiting(&zk, &peer, "c", on_b, "zklock's multi-lock holds").await;

    let _ = release.send(());
    task.await.unwrap();
    peer.wait_acquired("c", SOON).await.unwrap();
    peer.release("c").await.unwrap();
    assert!(children(&raw, a_dir).await.is_empty());
}
