//! What a multi-lock hands back, against a real ZooKeeper: `multi_lock_of` for read, write and
//! semaphore kinds, a `MultiGuard` split into its guards, its loss signals (`is_lost`, `lost`)
//! and `run`, which stops the work when a part is lost; `ensure_held` and `revoked` over every
//! part, and a release that reports a lost part before other failures.

mod support;

use std::time::Duration;

use support::{client, client_with, contenders, eventually, raw, server, session_of, watches_of};
use zklock_runtime::{zk, LockError, LockKind};
use zklock_testing::FaultProxy;

/// Generous bound for anything that should happen promptly on a loaded machine.
const SOON: Duration = Duration::from_secs(20);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn read_multi_locks_share_and_a_write_multi_lock_excludes_them() {
    let zk = server();
    let (a, b) = (client(&zk.connect_string()).await, client(&zk.connect_string()).await);
    let names = ["shelf:2", "shelf:1"];
    let readers_a = a.multi_lock_of(LockKind::Read, names).unwrap();
    let readers_b = b.multi_lock_of(LockKind::Read, names).unwrap();
    let writers = b.multi_lock_of(LockKind::Write, names).unwrap();

    let ra = readers_a.acquire_timeout(SOON).await.unwrap();
    let rb = readers_b
        .acquire_timeout(SOON)
        .await
        .expect("a second reader of both names is let in");
    for guard in ra.guards().iter().chain(rb.guards()) {
        assert!(guard.node_path().contains("-__READ__"), "{}", guard.node_path());
    }
    assert!(
        writers.try_acquire().await.unwrap().is_none(),
        "a writer of both names got in beside readers"
    );
    b.flush().await;
    ra.release().await.unwrap();
    // One reader left on both names: still no writer.
    assert!(writers.try_acquire().await.unwrap().is_none());
    b.flush().await;
    rb.release().await.unwrap();
    let w = writers.acquire_timeout(SOON).await.unwrap();
    assert_eq!(w.guards().len(), 2);
    for guard in w.guards() {
        assert!(guard.node_path().contains("-__WRIT__"), "{}", guard.node_path());
    }
    // And the writer keeps readers out of both.
    assert!(readers_a.try_acquire().await.unwrap().is_none());
    w.release().await.unwrap();
    readers_a.acquire_timeout(SOON).await.unwrap().release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_semaphore_multi_lock_takes_one_lease_of_each() {
    let zk = server();
    let (a, b, c) = (
        client(&zk.connect_string()).await,
        client(&zk.connect_string()).await,
        client(&zk.connect_string()).await,
    );
    let kind = LockKind::Semaphore { leases: 2 };
    let names = ["pool-x", "pool-y"];
    let first = a
        .multi_lock_of(kind, names)
        .unwrap()
        .acquire_timeout(SOON)
        .await
        .unwrap();
    let second = b
        .multi_lock_of(kind, names)
        .unwrap()
        .acquire_timeout(SOON)
        .await
        .unwrap();
    let view = raw(&zk.connect_string()).await;
    for name in names {
        let leases = contenders(&view, &format!("/zklock/{name}/leases")).await;
        assert_eq!(leases.len(), 2, "{name}: one lease per holder: {leases:?}");
    }
    // Both leases of both semaphores are out: a third holder gets none, and keeps none.
    let third = c.multi_lock_of(kind, names).unwrap();
    assert!(third.try_acquire().await.unwrap().is_none());
    c.flush().await;
    for name in names {
        assert_eq!(contenders(&view, &format!("/zklock/{name}/leases")).await.len(), 2);
    }
    first.release().await.unwrap();
    let got = third.acquire_timeout(SOON).await.expect("a lease of each came free");
    got.release().await.unwrap();
    second.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn into_guards_lets_each_lock_end_on_its_own() {
    let zk = server();
    let (a, b) = (client(&zk.connect_string()).await, client(&zk.connect_string()).await);
    let guard = a
        .multi_lock(["order:7", "stock:7"])
        .unwrap()
        .acquire_timeout(SOON)
        .await
        .unwrap();
    let tokens: Vec<_> = guard
        .guards()
        .iter()
        .map(|g| (g.name().to_owned(), g.fencing_token()))
        .collect();
    let mut parts = guard.into_guards();
    assert_eq!(parts.len(), 2);
    // Same locks, same tokens, in path order.
    let split: Vec<_> = parts.iter().map(|g| (g.name().to_owned(), g.fencing_token())).collect();
    assert_eq!(split, tokens);
    assert_eq!(parts[0].name(), "order:7");

    // Releasing one part frees that lock only.
    let stock = parts.pop().unwrap();
    let order = parts.pop().unwrap();
    order.release().await.unwrap();
    let taken = b
        .mutex("order:7")
        .unwrap()
        .try_acquire()
        .await
        .unwrap()
        .expect("the released part is free");
    assert!(
        b.mutex("stock:7").unwrap().try_acquire().await.unwrap().is_none(),
        "the kept part is still held"
    );
    stock.ensure_held().await.expect("the kept part is sound");
    drop(taken);
    stock.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn losing_the_session_is_seen_by_is_lost_lost_and_run() {
    use futures::FutureExt;

    let zk = server();
    let proxy = FaultProxy::start(zk.addr()).unwrap();
    let c = client_with(&proxy.connect_string(), Duration::from_secs(4)).await;
    let guard = c
        .multi_lock(["ledger-a", "ledger-b"])
        .unwrap()
        .acquire_timeout(SOON)
        .await
        .unwrap();
    assert!(!guard.is_lost());
    assert!(!guard.is_revoked(), "nobody asked for the parts");
    // One lost() future, asked before the loss: it stays pending while the server confirms
    // both parts, and it is the one that resolves when they are lost below.
    let mut lost = Box::pin(guard.lost());
    assert!(
        (&mut lost).now_or_never().is_none(),
        "lost() resolved while both locks are held"
    );
    // While sound, run() runs the work to its end and hands back its output.
    assert_eq!(guard.run(async { 41 + 1 }).await.unwrap(), 42);
    // A spurious loss would come from each part's watch on its own node, whose first read
    // answers once the hold has lasted a while: wait until the server lists both watches,
    // then for an answer of the session sent after them.
    let session = session_of(&c);
    for part in guard.guards() {
        let node = part.node_path().to_owned();
        let watched = eventually(SOON, || async { watches_of(&zk, &session).contains(&node) }).await;
        assert!(watched, "{node} was never watched: {:?}", watches_of(&zk, &session));
    }
    guard.ensure_held().await.expect("the server has both parts");
    assert!(
        (&mut lost).now_or_never().is_none(),
        "lost() resolved while both parts were watched and confirmed held"
    );

    // Work that would never end is stopped when the locks are lost.
    let work = guard.run(std::future::pending::<()>());
    proxy.blackhole();
    match tokio::time::timeout(SOON, work).await.expect("run() stopped the work") {
        Err(LockError::Lost { name, .. }) => assert!(name.starts_with("ledger-"), "{name}"),
        other => panic!("expected Err(Lost), got {other:?}"),
    }
    assert!(guard.is_lost());
    match tokio::time::timeout(SOON, lost)
        .await
        .expect("the lost() asked earlier resolves")
    {
        LockError::Lost { .. } => {}
        other => panic!("expected Lost, got {other:?}"),
    }
    match tokio::time::timeout(SOON, guard.lost()).await.expect("lost() resolves") {
        LockError::Lost { .. } => {}
        other => panic!("expected Lost, got {other:?}"),
    }
    proxy.pass();
    assert!(matches!(guard.release().await, Err(LockError::Lost { .. })));
}

/// `revoked()` waits while nobody asks, and `ensure_held` asks the server about every part: a
/// part whose node someone else deleted makes it fail.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ensure_held_checks_every_part_and_revoked_waits_until_asked() {
    use futures::FutureExt;

    let zk = server();
    let c = client(&zk.connect_string()).await;
    let admin = raw(&zk.connect_string()).await;
    let guard = c
        .multi_lock(["checked-a", "checked-b"])
        .unwrap()
        .acquire_timeout(SOON)
        .await
        .unwrap();
    assert!(guard.revoked().now_or_never().is_none(), "revoked() resolved unasked");
    guard.ensure_held().await.expect("both parts held");
    admin.delete(guard.guards()[1].node_path(), None).await.unwrap();
    let err = guard.ensure_held().await.unwrap_err();
    assert!(
        matches!(err, LockError::NotHeld { .. } | LockError::Lost { .. }),
        "{err:?}"
    );
}

/// A release that meets a lost part and another failure reports the loss first: a loss tells
/// the caller that its work may have overlapped another holder's, a failed delete does not.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_reports_a_lost_part_before_other_failures() {
    let zk = server();
    let admin = raw(&zk.connect_string()).await;
    let anyone_all = zk::Acls::anyone_all();
    admin
        .create("/zklock", b"", &zk::CreateMode::Persistent.with_acls(anyone_all))
        .await
        .unwrap();
    // Contenders may be made in `undeletable`, not deleted: that part's release fails.
    let create_only = [zk::Acl::new(
        zk::Permission::CREATE | zk::Permission::READ,
        zk::AuthId::anyone(),
    )];
    admin
        .create(
            "/zklock/undeletable",
            b"",
            &zk::CreateMode::Persistent.with_acls(zk::Acls::new(&create_only)),
        )
        .await
        .unwrap();
    let c = client(&zk.connect_string()).await;
    let guard = c
        .multi_lock(["undeletable", "vanishing"])
        .unwrap()
        .acquire_timeout(SOON)
        .await
        .unwrap();
    let vanishing = guard
        .guards()
        .iter()
        .find(|g| g.name() == "vanishing")
        .unwrap()
        .node_path()
        .to_owned();
    admin.delete(&vanishing, None).await.unwrap();
    tokio::time::timeout(SOON, guard.lost())
        .await
        .expect("the deleted part is reported lost");
    match guard.release().await {
        Err(LockError::Lost { name, .. }) => assert_eq!(name, "vanishing"),
        other => panic!("expected the lost part first, got {other:?}"),
    }
}
