//! Downgrading a write lock to a read lock (`Lock::downgrade`) against a real server, among
//! zklock contenders and Curator's `InterProcessReadWriteLock` (the Debian jars): readers are
//! admitted beside the downgraded holder, and no writer — one queued before the downgrade, one
//! of the same process, or a Curator writer — ever gets in between.

mod support;

use std::time::Duration;

use support::{client, contenders, raw, server, session_of, wait_watching};
use zklock::{LockError, LockGuard};
use zklock_testing::curator::{CuratorPeer, RwMode};

/// Generous bound for anything that should happen promptly on a loaded machine.
const SOON: Duration = Duration::from_secs(20);

/// Waits until the lock directory holds exactly `n` nodes.
async fn wait_for_nodes(view: &zklock::zk::Client, dir: &str, n: usize) -> Vec<String> {
    let deadline = tokio::time::Instant::now() + SOON;
    loop {
        let now = contenders(view, dir).await;
        if now.len() == n {
            return now;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{dir} never had {n} nodes: {now:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

async fn granted(task: tokio::task::JoinHandle<Result<LockGuard, LockError>>) -> LockGuard {
    tokio::time::timeout(SOON, task)
        .await
        .expect("granted in time")
        .expect("task")
        .expect("acquire")
}

/// Readers queued behind the writer are admitted once it downgrades, while it still reads; a
/// writer arriving afterwards waits for both.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readers_queued_behind_the_writer_are_admitted_beside_it() {
    let zk = server();
    let holder = client(&zk.connect_string()).await;
    let other = client(&zk.connect_string()).await;
    let view = raw(&zk.connect_string()).await;
    let write = holder.write_lock("dg-readers").unwrap();
    let dir = write.path().to_owned();
    let mut guard = write.acquire().await.unwrap();
    let write_node = guard.node_path().to_owned();
    let reader = tokio::spawn({
        let lock = other.read_lock("dg-readers").unwrap();
        async move { lock.acquire().await }
    });
    wait_watching(&zk, &session_of(&other), &write_node, "the queued reader").await;

    write.downgrade(&mut guard).await.unwrap();

    assert!(guard.node_path().contains("__READ__"), "{}", guard.node_path());
    assert!(guard.fencing_token().zxid() > 0);
    let reader = granted(reader).await;
    assert_eq!(wait_for_nodes(&view, &dir, 2).await.len(), 2, "the write node is gone");
    guard.ensure_held().await.expect("the downgraded holder still holds");

    let writer = tokio::spawn({
        let lock = other.write_lock("dg-readers").unwrap();
        async move { lock.acquire().await }
    });
    // Queue: the reader, the downgraded holder's read node, the writer (waiting on the latter).
    wait_for_nodes(&view, &dir, 3).await;
    wait_watching(&zk, &session_of(&other), guard.node_path(), "the later writer").await;
    assert!(!writer.is_finished(), "a writer got in beside two readers");
    guard.release().await.unwrap();
    wait_watching(&zk, &session_of(&other), reader.node_path(), "the later writer").await;
    assert!(!writer.is_finished(), "a writer got in beside a reader");
    reader.release().await.unwrap();
    granted(writer).await.release().await.unwrap();
}

/// A writer that queued before the downgrade keeps its turn and never goes while the
/// downgraded holder reads: the write node is kept as the read hold (the read node made for
/// the downgrade is withdrawn), and a reader queued behind that writer stays behind it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_writer_queued_before_the_downgrade_never_gets_in_between() {
    let zk = server();
    let holder = client(&zk.connect_string()).await;
    let other = client(&zk.connect_string()).await;
    let third = client(&zk.connect_string()).await;
    let view = raw(&zk.connect_string()).await;
    let write = holder.write_lock("dg-writer-between").unwrap();
    let dir = write.path().to_owned();
    let mut guard = write.acquire().await.unwrap();
    let write_node = guard.node_path().to_owned();
    let writer = tokio::spawn({
        let lock = other.write_lock("dg-writer-between").unwrap();
        async move { lock.acquire().await }
    });
    wait_watching(&zk, &session_of(&other), &write_node, "the queued writer").await;
    let reader = tokio::spawn({
        let lock = third.read_lock("dg-writer-between").unwrap();
        async move { lock.acquire().await }
    });
    wait_for_nodes(&view, &dir, 3).await;

    write.downgrade(&mut guard).await.unwrap();

    assert_eq!(guard.node_path(), write_node, "the write node is kept");
    holder.flush().await;
    wait_for_nodes(&view, &dir, 3).await; // the withdrawn read node is gone
    guard.ensure_held().await.unwrap();
    wait_watching(&zk, &session_of(&other), &write_node, "the queued writer").await;
    assert!(
        !writer.is_finished(),
        "the queued writer got in beside the downgraded reader"
    );
    assert!(
        !reader.is_finished(),
        "a reader went ahead of the writer queued before it"
    );
    // The downgraded hold is a read hold now: a read acquisition inside its scope re-enters.
    let read = holder.read_lock("dg-writer-between").unwrap();
    let inner = guard
        .scope(async { read.acquire_timeout(Duration::ZERO).await })
        .await
        .unwrap();
    assert_eq!(inner.fencing_token(), guard.fencing_token());
    drop(inner);

    guard.release().await.unwrap();
    let writer = granted(writer).await;
    assert!(!reader.is_finished(), "the reader went beside the writer");
    writer.release().await.unwrap();
    granted(reader).await.release().await.unwrap();
}

/// A writer task of the same process waiting in its local queue is not handed the write node
/// on a downgrade: it queues in ZooKeeper behind the read node and goes only after it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_local_writer_is_not_handed_the_write_node() {
    let zk = server();
    let holder = client(&zk.connect_string()).await;
    let write = holder.write_lock("dg-local").unwrap();
    let mut guard = write.acquire().await.unwrap();
    // The local writer waits in this process's queue (it has no node yet).
    let local = support::queue_in_process(&write);

    write.downgrade(&mut guard).await.unwrap();

    wait_watching(&zk, &session_of(&holder), guard.node_path(), "the local writer").await;
    assert!(
        !local.is_finished(),
        "the local writer got in beside the downgraded reader"
    );
    guard.release().await.unwrap();
    let local = granted(local).await;
    assert!(local.node_path().contains("__WRIT__"), "{}", local.node_path());
}

/// Misuse is refused with the guard left as it was: still held, still the write hold.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn misuse_is_refused_and_loses_nothing() {
    let zk = server();
    let holder = client(&zk.connect_string()).await;
    let other = client(&zk.connect_string()).await;
    let write = holder.write_lock("dg-misuse").unwrap();
    let mut guard = write.acquire().await.unwrap();
    let node = guard.node_path().to_owned();

    let refused = [
        holder.read_lock("dg-misuse").unwrap(),
        holder.mutex("dg-misuse").unwrap(),
        holder.write_lock("dg-other").unwrap(),
        other.write_lock("dg-misuse").unwrap(),
    ];
    for lock in &refused {
        let err = lock.downgrade(&mut guard).await.unwrap_err();
        assert!(matches!(err, LockError::InvalidConfig { .. }), "{lock:?}: {err:?}");
        assert!(err.to_string().contains("cannot downgrade `"), "{err}");
    }
    // A guard shared by a reentrant acquisition.
    let shared = guard.scope(async { write.acquire().await.unwrap() }).await;
    let err = write.downgrade(&mut guard).await.unwrap_err();
    assert!(err.to_string().contains("other guards share the hold"), "{err}");
    drop(shared);

    assert_eq!(guard.node_path(), node);
    guard.ensure_held().await.unwrap();
    write.downgrade(&mut guard).await.unwrap();
    assert!(guard.node_path().contains("__READ__"));
    // A read guard cannot be downgraded again.
    assert!(write.downgrade(&mut guard).await.is_err());
    guard.release().await.unwrap();
}

async fn curator(connect: &str) -> CuratorPeer {
    CuratorPeer::start(connect)
        .await
        .expect("start the Curator peer (run scripts/install-deps.sh)")
}

/// Curator interop: a Curator reader queued behind a zklock writer reads beside it once it
/// downgrades; a Curator writer queued before the downgrade waits until the zklock holder is
/// done, and a Curator writer arriving after it waits too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn curator_readers_join_and_curator_writers_wait() {
    let zk = server();
    let holder = client(&zk.connect_string()).await;
    let view = raw(&zk.connect_string()).await;
    let peer = curator(&zk.connect_string()).await;
    let write = holder.write_lock("dg-curator").unwrap();
    let dir = write.path().to_owned();
    peer.rw_lock("r", &dir).await.unwrap();
    peer.rw_lock("w", &dir).await.unwrap();

    // A Curator reader behind the zklock writer joins it after the downgrade.
    let mut guard = write.acquire().await.unwrap();
    peer.acquire_rw("r", RwMode::Read, None).unwrap();
    wait_watching(&zk, peer.session_id(), guard.node_path(), "Curator's reader").await;
    write.downgrade(&mut guard).await.unwrap();
    assert!(guard.node_path().contains("__READ__"));
    peer.wait_acquired("r", SOON).await.unwrap();
    // A Curator writer arriving now waits for both readers.
    peer.acquire_rw("w", RwMode::Write, None).unwrap();
    wait_for_nodes(&view, &dir, 3).await;
    peer.release("r").await.unwrap();
    wait_watching(&zk, peer.session_id(), guard.node_path(), "Curator's writer").await;
    assert_eq!(
        peer.poll_event("w", Duration::ZERO).await.unwrap(),
        None,
        "Curator's writer got in"
    );
    guard.release().await.unwrap();
    peer.wait_acquired("w", SOON).await.unwrap();
    peer.release("w").await.unwrap();

    // A Curator writer queued before the downgrade does not get in while zklock reads.
    let mut guard = write.acquire_timeout(SOON).await.unwrap();
    let write_node = guard.node_path().to_owned();
    peer.acquire_rw("w", RwMode::Write, None).unwrap();
    wait_watching(&zk, peer.session_id(), &write_node, "Curator's writer").await;
    write.downgrade(&mut guard).await.unwrap();
    assert_eq!(guard.node_path(), write_node);
    holder.flush().await;
    wait_for_nodes(&view, &dir, 2).await;
    wait_watching(&zk, peer.session_id(), &write_node, "Curator's writer").await;
    assert_eq!(
        peer.poll_event("w", Duration::ZERO).await.unwrap(),
        None,
        "Curator's writer got in"
    );
    guard.release().await.unwrap();
    peer.wait_acquired("w", SOON).await.unwrap();
    peer.release("w").await.unwrap();
}

/// A downgrade cancelled at any point — before its first request, with the read node's create
/// in flight, while the write node's delete is on its way, or not at all — leaves a guard that
/// is one hold or the other, never both and never neither: once the background cleanup has run
/// the directory holds exactly the guard's node, the server vouches for it, and releasing it
/// empties the directory. Each round is cancelled by a timeout, by losing a `select!` or by
/// aborting its task, after a random delay.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_downgrade_cancelled_anywhere_leaves_one_hold_and_nothing_else() {
    let zk = server();
    let holder = client(&zk.connect_string()).await;
    let view = raw(&zk.connect_string()).await;
    let write = holder.write_lock("dg-cancel").unwrap();
    let dir = write.path().to_owned();
    let mut rng = support::Rng::from_clock();
    let (mut downgraded, mut kept) = (0, 0);
    for round in 0..36 {
        let guard = write.acquire().await.unwrap();
        let after = Duration::from_micros(rng.below(3000));
        let guard = match round % 3 {
            0 => {
                let mut guard = guard;
                let _ = tokio::time::timeout(after, write.downgrade(&mut guard)).await;
                guard
            }
            1 => {
                let mut guard = guard;
                tokio::select! {
                    _ = write.downgrade(&mut guard) => {}
                    _ = tokio::time::sleep(after) => {}
                }
                guard
            }
            _ => {
                // Hands the guard back however the downgrade ends, also when aborted, and also
                // when aborted before the task first ran: it is made here and moved into the
                // task, so dropping the task's future unpolled drops it too.
                struct Give(Option<LockGuard>, Option<tokio::sync::oneshot::Sender<LockGuard>>);
                impl Drop for Give {
                    fn drop(&mut self) {
                        if let (Some(g), Some(tx)) = (self.0.take(), self.1.take()) {
                            let _ = tx.send(g);
                        }
                    }
                }
                let (back, returned) = tokio::sync::oneshot::channel();
                let mut give = Give(Some(guard), Some(back));
                let task = tokio::spawn({
                    let write = write.clone();
                    async move {
                        let guard = give.0.as_mut().expect("the guard");
                        let _ = write.downgrade(guard).await;
                    }
                });
                tokio::time::sleep(after).await;
                task.abort();
                let _ = task.await;
                returned.await.expect("the guard comes back")
            }
        };
        let node = guard.node_path().rsplit('/').next().unwrap().to_owned();
        if node.contains("__READ__") {
            downgraded += 1;
        } else {
            kept += 1;
        }
        assert_eq!(
            wait_for_nodes(&view, &dir, 1).await,
            vec![node.clone()],
            "round {round}"
        );
        guard
            .ensure_held()
            .await
            .unwrap_or_else(|e| panic!("round {round}: {node}: {e}"));
        guard.release().await.unwrap();
        wait_for_nodes(&view, &dir, 0).await;
    }
    eprintln!("{downgraded} rounds downgraded, {kept} kept the write hold");
}

/// The hold is reported lost while the downgrade makes its read node (the connection cut for
/// longer than `loss_after`, healed before the session expires): the downgrade fails, and the
/// guard is still the write hold it was, as `downgrade`'s doc promises for every error; the
/// read node is removed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hold_lost_while_downgrading_fails_with_the_guard_unchanged() {
    let zk = server();
    let proxy = zklock_testing::FaultProxy::start(zk.addr()).unwrap();
    let holder = support::cut_off_able(&proxy).await;
    let view = raw(&zk.connect_string()).await;
    let lock = holder.write_lock("dg-lost").unwrap();
    let mut guard = lock.acquire().await.unwrap();
    let write_node = guard.node_path().to_owned();
    let signal = guard.loss_signal();

    // The read node's create goes into the cut.
    proxy.blackhole();
    let downgrading = tokio::spawn(async move {
        let outcome = lock.downgrade(&mut guard).await;
        (outcome, guard)
    });
    let lost = support::eventually(SOON, || async { signal.is_lost() }).await;
    assert!(lost, "the cut was never reported as a loss");
    proxy.pass();
    let (outcome, guard) = tokio::time::timeout(SOON, downgrading)
        .await
        .expect("the downgrade never finished")
        .unwrap();
    let err = outcome.expect_err("a hold lost before it changed cannot be downgraded");
    assert!(matches!(err, LockError::Lost { .. }), "{err:?}");
    assert_eq!(
        guard.node_path(),
        write_node,
        "the downgrade failed ({err}) but the guard became another hold"
    );
    wait_for_nodes(&view, "/zklock/dg-lost", 1).await;
    drop(guard);
}
