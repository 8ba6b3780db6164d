//! Fenced ZooKeeper writes (`LockGuard::fenced_write`, `Leadership::fenced_write`) against a
//! real server: a batch applies whole while the hold's node exists, a refused operation applies
//! nothing, and a stale holder — its node deleted, or its session expired mid-hold — changes
//! nothing.

mod support;

use std::time::Duration;

use support::{client, cut_off_able, eventually, raw, server};
use zklock::{zk, LockError};
use zklock_testing::FaultProxy;

/// Generous bound for anything that should happen promptly on a loaded machine.
const SOON: Duration = Duration::from_secs(20);

fn persistent() -> zk::CreateOptions<'static> {
    zk::CreateMode::Persistent.with_acls(zk::Acls::anyone_all())
}

async fn data_of(view: &zk::Client, path: &str) -> Option<Vec<u8>> {
    match view.get_data(path).await {
        Ok((data, _)) => Some(data),
        Err(zk::Error::NoNode) => None,
        Err(err) => panic!("read {path}: {err}"),
    }
}

/// Every operation of a batch is applied while the lock is held, and the results come back in
/// the caller's order, without the fence's own check.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_applies_whole_while_the_lock_is_held() {
    let zk = server();
    let holder = client(&zk.connect_string()).await;
    let view = raw(&zk.connect_string()).await;
    view.create("/cfg", b"", &persistent()).await.unwrap();
    view.create("/cfg/old", b"", &persistent()).await.unwrap();
    let guard = holder.mutex("fw-apply").unwrap().acquire().await.unwrap();

    let results = guard
        .fenced_write(|batch| {
            batch.add_create("/cfg/new", b"v1", &persistent())?;
            batch.add_set_data("/cfg", b"epoch-2", Some(0))?;
            batch.add_check_version("/cfg/new", 0)?;
            batch.add_delete("/cfg/old", None)
        })
        .await
        .unwrap();

    assert_eq!(results.len(), 4, "{results:?}");
    assert!(matches!(&results[0], zk::MultiWriteResult::Create { path, .. } if path == "/cfg/new"));
    assert!(matches!(&results[1], zk::MultiWriteResult::SetData { stat } if stat.version == 1));
    assert!(matches!(results[2], zk::MultiWriteResult::Check));
    assert!(matches!(results[3], zk::MultiWriteResult::Delete));
    assert_eq!(data_of(&view, "/cfg/new").await.as_deref(), Some(&b"v1"[..]));
    assert_eq!(data_of(&view, "/cfg").await.as_deref(), Some(&b"epoch-2"[..]));
    assert_eq!(data_of(&view, "/cfg/old").await, None);
    guard.release().await.unwrap();
}

/// An operation the server refuses fails the whole batch: the error names the caller's
/// operation by index, nothing before it was applied, and the lock is still held.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_operation_applies_nothing_and_is_named_by_index() {
    let zk = server();
    let holder = client(&zk.connect_string()).await;
    let view = raw(&zk.connect_string()).await;
    view.create("/taken", b"", &persistent()).await.unwrap();
    let guard = holder.mutex("fw-refused").unwrap().acquire().await.unwrap();

    let err = guard
        .fenced_write(|batch| {
            batch.add_create("/fresh", b"", &persistent())?;
            batch.add_set_data("/taken", b"x", Some(7))?; // wrong version
            batch.add_create("/also-fresh", b"", &persistent())
        })
        .await
        .unwrap_err();
    match &err {
        LockError::WriteRejected { name, index, source } => {
            assert_eq!(name, "fw-refused");
            assert_eq!(*index, Some(1));
            assert_eq!(*source, zk::Error::BadVersion);
        }
        other => panic!("expected WriteRejected, got {other:?}"),
    }
    assert_eq!(err.zookeeper_error(), Some(&zk::Error::BadVersion));
    assert!(err.to_string().contains("(operation 1 failed)"), "{err}");
    assert_eq!(data_of(&view, "/fresh").await, None, "an earlier operation was applied");
    assert_eq!(data_of(&view, "/taken").await.as_deref(), Some(&b""[..]));
    guard
        .ensure_held()
        .await
        .expect("a refused batch leaves the hold alone");

    // A path the client library refuses while the batch is built: no index, nothing sent.
    let err = guard
        .fenced_write(|batch| batch.add_create("no-leading-slash", b"", &persistent()))
        .await
        .unwrap_err();
    assert!(matches!(err, LockError::WriteRejected { index: None, .. }), "{err:?}");
    assert!(err.to_string().contains("refused while the batch was built"), "{err}");
}

/// A holder whose node an operator deleted is stale: its batch is refused (by the server's
/// check when the holder has not heard of the deletion yet, by its own state once it has) and
/// changes nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_holder_whose_node_was_deleted_changes_nothing() {
    let zk = server();
    let holder = client(&zk.connect_string()).await;
    let view = raw(&zk.connect_string()).await;
    let guard = holder.mutex("fw-deleted").unwrap().acquire().await.unwrap();
    view.delete(guard.node_path(), None).await.unwrap();

    let err = guard
        .fenced_write(|batch| batch.add_create("/written-by-stale", b"", &persistent()))
        .await
        .unwrap_err();
    assert!(
        matches!(err, LockError::NotHeld { .. } | LockError::Lost { .. }),
        "{err:?}"
    );
    assert_eq!(err.kind(), zklock::ErrorKind::Lost);
    assert_eq!(data_of(&view, "/written-by-stale").await, None);
}

/// A holder cut off until the server expired its session: once it can talk again, its batch
/// fails as not held and changes nothing, while the next holder's batch applies.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_holder_whose_session_expired_mid_hold_changes_nothing() {
    let zk = server();
    let proxy = FaultProxy::start(zk.addr()).unwrap();
    let stale = cut_off_able(&proxy).await;
    let next = client(&zk.connect_string()).await;
    let view = raw(&zk.connect_string()).await;
    view.create("/owner", b"none", &persistent()).await.unwrap();
    let guard = stale.mutex("fw-expired").unwrap().acquire().await.unwrap();
    let node = guard.node_path().to_owned();

    proxy.blackhole();
    // The server expired the session: its node is gone, and another client holds the lock.
    let gone = eventually(SOON, || async { view.check_stat(&node).await.unwrap().is_none() }).await;
    assert!(gone, "the stale holder's session never expired");
    let fresh = next.mutex("fw-expired").unwrap().acquire_timeout(SOON).await.unwrap();
    proxy.pass();

    let err = guard
        .fenced_write(|batch| batch.add_set_data("/owner", b"stale", None))
        .await
        .unwrap_err();
    assert_eq!(err.kind(), zklock::ErrorKind::Lost, "{err:?}");
    fresh
        .fenced_write(|batch| batch.add_set_data("/owner", b"fresh", None))
        .await
        .unwrap();
    assert_eq!(data_of(&view, "/owner").await.as_deref(), Some(&b"fresh"[..]));
    drop(guard);
    fresh.release().await.unwrap();
}

/// A leader's fenced write applies while it leads; a deposed leader's does not.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deposed_leader_cannot_write() {
    let zk = server();
    let member = client(&zk.connect_string()).await;
    let view = raw(&zk.connect_string()).await;
    let leadership = member.election("fw-group").unwrap().lead().await.unwrap();
    leadership
        .fenced_write(|batch| batch.add_create("/epoch", b"1", &persistent()))
        .await
        .unwrap();
    view.delete(leadership.node_path(), None).await.unwrap();
    let err = leadership
        .fenced_write(|batch| batch.add_set_data("/epoch", b"2", None))
        .await
        .unwrap_err();
    assert_eq!(err.kind(), zklock::ErrorKind::Lost, "{err:?}");
    assert_eq!(data_of(&view, "/epoch").await.as_deref(), Some(&b"1"[..]));
}

/// A fenced write cancelled at any point applies its batch whole or not at all (nothing when it
/// was dropped before its first poll), and leaves the hold as it was; two fenced writes of one
/// guard run side by side in `join!` and both apply.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancelled_fenced_write_applies_whole_or_not_at_all_and_keeps_the_hold() {
    let zk = server();
    let holder = client(&zk.connect_string()).await;
    let view = raw(&zk.connect_string()).await;
    view.create("/fw-cancel", b"", &persistent()).await.unwrap();
    let guard = holder.mutex("fw-cancel").unwrap().acquire().await.unwrap();
    let mut rng = support::Rng::from_clock();
    // The nodes of the batches that applied, as read once each round's outcome was settled.
    let mut outcomes = Vec::new();
    for round in 0..40 {
        let (a, b) = (format!("/fw-cancel/a-{round}"), format!("/fw-cancel/b-{round}"));
        let write = guard.fenced_write(|batch| {
            batch.add_create(&a, b"", &persistent())?;
            batch.add_create(&b, b"", &persistent())
        });
        let after = Duration::from_micros(rng.below(800));
        match round % 3 {
            // Dropped before its first poll: nothing was sent, so nothing may apply.
            0 => drop(write),
            1 => drop(tokio::time::timeout(after, write).await),
            _ => tokio::select! {
                _ = write => {}
                _ = tokio::time::sleep(after) => {}
            },
        }
        // A request of the holder's session answered after the cancelled write: ZooKeeper
        // answers a session's requests in order, so a batch that was sent at all has been
        // applied or refused by now, and what the view reads next is its outcome for good.
        guard
            .ensure_held()
            .await
            .unwrap_or_else(|e| panic!("round {round}: {e}"));
        let (here, there) = (data_of(&view, &a).await.is_some(), data_of(&view, &b).await.is_some());
        assert_eq!(here, there, "round {round}: half a batch applied");
        assert!(
            !(round % 3 == 0 && here),
            "round {round}: a batch never polled was applied"
        );
        if here {
            outcomes.push(a.clone());
            outcomes.push(b.clone());
        }
    }
    let applied = outcomes.len() / 2;
    // No batch landed after its outcome was read: the nodes on the server are exactly those
    // read then.
    let mut on_server: Vec<_> = view
        .list_children("/fw-cancel")
        .await
        .unwrap()
        .into_iter()
        .map(|n| format!("/fw-cancel/{n}"))
        .collect();
    on_server.sort();
    outcomes.sort();
    assert_eq!(
        on_server, outcomes,
        "a cancelled batch applied after its outcome was read"
    );
    eprintln!("{applied} of 40 cancelled batches applied");
    // A batch is on the wire once polled, and a timeout polls it before its clock: the rounds
    // cut by one sent theirs, so some applied, and "whole" was checked on real batches.
    assert!(
        applied > 0,
        "no cancelled batch applied: the test checked nothing but absences"
    );

    let (one, two) = tokio::join!(
        guard.fenced_write(|batch| batch.add_create("/fw-cancel/joined-1", b"", &persistent())),
        guard.fenced_write(|batch| batch.add_create("/fw-cancel/joined-2", b"", &persistent())),
    );
    one.unwrap();
    two.unwrap();
    assert!(data_of(&view, "/fw-cancel/joined-1").await.is_some());
    assert!(data_of(&view, "/fw-cancel/joined-2").await.is_some());
    guard.release().await.unwrap();
}
