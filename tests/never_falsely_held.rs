//! A caller is never told it holds a lock it does not hold, against real servers: a multi-lock
//! whose first part was lost while a later part was awaited; re-entry and multi-lock
//! de-duplication across two clients (of two ensembles, or of one); a client closed while
//! guards, waiters and raw handles of its session are alive; and a scope future made in one
//! place and run in another.

mod support;

use std::time::{Duration, Instant};

use support::{client, contenders, eventually, raw, server, session_is_open, AppError};
use zklock::{distributed_lock, LockClient, LockError, MultiLock};
use zklock_testing::{FaultProxy, ZkServer};

/// Generous bound for anything that should happen promptly on a loaded machine.
const SOON: Duration = Duration::from_secs(20);

/// Long enough to tell "waits for another holder" from "granted at once" (a grant takes one
/// round trip on loopback).
const SHORT: Duration = Duration::from_millis(700);

/// Waits until `dir` has at least `n` contender nodes, as the server sees it.
async fn until_contenders(view: &zklock::zk::Client, dir: &str, n: usize) {
    let seen = eventually(SOON, || async { contenders(view, dir).await.len() >= n }).await;
    assert!(
        seen,
        "{dir} never had {n} contenders: {:?}",
        contenders(view, dir).await
    );
}

/// Hold the first part, queue on the second, cut the connection until the session expires,
/// heal, then free the second part: the multi-lock must not come back holding a dead first
/// part. It starts over (every part on the new session) or reports the loss.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_multi_lock_never_returns_with_a_part_lost_while_it_waited() {
    let zk = server();
    let proxy = FaultProxy::start(zk.addr()).unwrap();
    let taker = client(&proxy.connect_string()).await;
    let blocker = client(&zk.connect_string()).await;
    let view = raw(&zk.connect_string()).await;
    let second = blocker.mutex("multi-loss-b").unwrap().acquire().await.unwrap();

    let multi = taker.multi_lock(["multi-loss-a", "multi-loss-b"]).unwrap();
    let waiting = tokio::spawn(async move { multi.acquire_timeout(Duration::from_secs(60)).await });
    // The first part is held and the second is queued behind `blocker`.
    until_contenders(&view, "/zklock/multi-loss-a", 1).await;
    until_contenders(&view, "/zklock/multi-loss-b", 2).await;
    let first_session = taker.session_id().unwrap();

    proxy.blackhole();
    // The server expires the session: its first-part node goes with it.
    let expired = eventually(SOON, || async {
        contenders(&view, "/zklock/multi-loss-a").await.is_empty()
    })
    .await;
    assert!(expired, "session {first_session:#x} never expired");
    proxy.pass();
    second.release().await.unwrap();

    let guard = tokio::time::timeout(SOON, waiting)
        .await
        .expect("the multi-lock never answered")
        .unwrap()
        .expect("a fresh round on the new session takes both parts");
    assert!(!guard.is_lost(), "returned Ok holding a lost part");
    guard.ensure_held().await.expect("every part held on the server");
    let live = taker.session_id().unwrap();
    assert_ne!(live, first_session);
    for held in guard.guards() {
        let (_, stat) = view.get_data(held.node_path()).await.unwrap();
        assert_eq!(
            stat.ephemeral_owner,
            live,
            "{} is not held by the live session",
            held.name()
        );
    }
    guard.release().await.unwrap();
}

/// A hold taken through one client is not re-entered through another, whatever the path: here
/// the two clients talk to two ensembles, and the lock of the same name on the second one is
/// held by somebody else.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hold_on_one_ensemble_is_not_reentered_on_another() {
    let (east, west) = (server(), server());
    let east_client = client(&east.connect_string()).await;
    let west_client = client(&west.connect_string()).await;
    let west_owner = client(&west.connect_string()).await;
    let taken_elsewhere = west_owner.mutex("shared-name").unwrap().acquire().await.unwrap();

    let east_lock = east_client.mutex("shared-name").unwrap();
    let west_lock = west_client.mutex("shared-name").unwrap();
    assert_eq!(east_lock.path(), west_lock.path());
    let held = east_lock.acquire().await.unwrap();
    let inside = held.scope(west_lock.acquire_timeout(SHORT)).await;
    assert!(
        matches!(inside, Err(LockError::Timeout { .. })),
        "granted a lock another process holds on the other ensemble: {inside:?}"
    );
    // The same path through one client still re-enters.
    let again = held.scope(east_lock.acquire_timeout(SHORT)).await.unwrap();
    assert_eq!(again.fencing_token(), held.fencing_token());
    drop(again);

    // A multi-lock keeps both: two locks, and the west one is busy.
    let both = MultiLock::new([east_client.mutex("pair").unwrap(), west_client.mutex("pair").unwrap()]).unwrap();
    assert_eq!(
        both.locks().len(),
        2,
        "the same path on two ensembles was collapsed into one lock"
    );
    let west_pair = west_owner.mutex("pair").unwrap().acquire().await.unwrap();
    assert!(
        both.try_acquire().await.unwrap().is_none(),
        "took a multi-lock whose west part is held by another process"
    );
    drop(west_pair);
    let pair = both.acquire_timeout(SOON).await.unwrap();
    assert_eq!(pair.guards().len(), 2);
    drop((pair, taken_elsewhere, held));
}

/// Two clients of one ensemble are two holders, like two processes: inside one's hold, the
/// other queues behind it instead of re-entering.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_client_of_the_same_ensemble_is_another_holder() {
    let zk = server();
    let first = client(&zk.connect_string()).await;
    let second = client(&zk.connect_string()).await;
    let held = first.mutex("one-ensemble").unwrap().acquire().await.unwrap();
    let other_lock = second.mutex("one-ensemble").unwrap();
    let inside = held.scope(other_lock.acquire_timeout(SHORT)).await;
    assert!(matches!(inside, Err(LockError::Timeout { .. })), "{inside:?}");
    // A clone of the client is the same client: it re-enters.
    let cloned = first.clone().mutex("one-ensemble").unwrap();
    let again = held.scope(cloned.acquire_timeout(SHORT)).await.unwrap();
    assert_eq!(again.fencing_token(), held.fencing_token());
}

/// `close()` ends the server session at once, with a guard and a waiter of the session still
/// alive: the server deletes every node of it, the waiter returns `Closed`
/// promptly, the guard reports the loss and an attributed body under it is stopped.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn close_ends_the_session_whatever_is_alive() {
    // A 500 ms tick allows a 10 s session: an expiry would take longer than the bounds below.
    let zk = ZkServer::builder()
        .tick_time(Duration::from_millis(500))
        .start()
        .unwrap();
    let closing = support::client_with(&zk.connect_string(), Duration::from_secs(10)).await;
    let other = client(&zk.connect_string()).await;
    let view = raw(&zk.connect_string()).await;
    let session = closing.session_id().unwrap();

    let kept = closing.mutex("close-held").unwrap().acquire().await.unwrap();
    let busy = other.mutex("close-waited").unwrap().acquire().await.unwrap();
    let waiter = tokio::spawn({
        let lock = closing.mutex("close-waited").unwrap();
        async move { lock.acquire().await }
    });
    let (running, body_runs) = tokio::sync::oneshot::channel();
    let body = tokio::spawn({
        let client = closing.clone();
        async move { hold_forever(&client, running).await }
    });
    until_contenders(&view, "/zklock/close-waited", 2).await;
    // The body's node is there before its grant is; close() must come while the body runs.
    tokio::time::timeout(SOON, body_runs)
        .await
        .expect("the body never ran")
        .expect("the body's task ended");

    let started = Instant::now();
    closing.close().await;
    // The server drops the connection just after answering the close: half the session
    // timeout is long enough for that, and far too short for an expiry.
    let ended = eventually(Duration::from_secs(5), || async {
        !session_is_open(&zk, session).await
    })
    .await;
    assert!(ended, "the server still has session {session:#x} open after close()");
    assert!(contenders(&view, "/zklock/close-held").await.is_empty());
    assert!(contenders(&view, "/zklock/close-body").await.is_empty());
    assert_eq!(
        contenders(&view, "/zklock/close-waited").await.len(),
        1,
        "the waiter's node outlived close()"
    );
    match tokio::time::timeout(SOON, waiter)
        .await
        .expect("the waiter never answered")
        .unwrap()
    {
        Err(LockError::Closed { .. }) => {}
        other => panic!("expected Closed, got {other:?}"),
    }
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "close took {:?}",
        started.elapsed()
    );
    assert!(kept.is_lost(), "a guard of a closed client still looks held");
    match tokio::time::timeout(SOON, body)
        .await
        .expect("the body was never stopped")
        .unwrap()
    {
        Err(AppError::Lock(LockError::Lost { name, .. })) => assert_eq!(name, "close-body"),
        other => panic!("expected Lost, got {other:?}"),
    }
    closing.close().await; // a second close does nothing
    drop((kept, busy));
}

/// The nodes of `session` among the children of `dirs`, as the server sees them.
async fn nodes_of(view: &zklock::zk::Client, session: i64, dirs: &[&str]) -> Vec<String> {
    let mut found = Vec::new();
    for dir in dirs {
        for child in contenders(view, dir).await {
            let path = format!("{dir}/{child}");
            if let Ok(Some(stat)) = view.check_stat(&path).await {
                if stat.ephemeral_owner == session {
                    found.push(path);
                }
            }
        }
    }
    found
}

/// `close()` dropped at any point of its work (at its first poll, while its deletes are in
/// flight, while it waits for the session to end), then called again: once the second call
/// returns, the session has ended on the server and none of its nodes is left, neither the
/// held one nor a waiter's, and the waiter has been told the client is closed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_close_cancelled_at_any_point_and_called_again_ends_the_session() {
    // A 500 ms tick allows a 10 s session: an expiry would take longer than the bounds below.
    let zk = ZkServer::builder()
        .tick_time(Duration::from_millis(500))
        .start()
        .unwrap();
    let other = client(&zk.connect_string()).await;
    let view = raw(&zk.connect_string()).await;
    let _busy = other.mutex("cc-waited").unwrap().acquire().await.unwrap();
    for step in 0..24u64 {
        let closing = support::client_with(&zk.connect_string(), Duration::from_secs(10)).await;
        let session = closing.session_id().unwrap();
        let kept = closing.mutex("cc-held").unwrap().acquire().await.unwrap();
        let waiter = tokio::spawn({
            let lock = closing.mutex("cc-waited").unwrap();
            async move { lock.acquire().await }
        });
        until_contenders(&view, "/zklock/cc-waited", 2).await;

        // Dropped after its first poll (step 0), then a little later at each step.
        let cancelled = tokio::time::timeout(Duration::from_micros(step * 300), closing.close()).await;
        tokio::time::timeout(SOON, closing.close())
            .await
            .unwrap_or_else(|_| panic!("step {step}: the second close() never returned"));
        // The server drops the connection just after answering the close.
        let ended = eventually(Duration::from_secs(5), || async {
            !session_is_open(&zk, session).await
        })
        .await;
        assert!(
            ended,
            "step {step} (first close {}): session {session:#x} is still open after a second close()",
            if cancelled.is_ok() { "finished" } else { "cancelled" }
        );
        let left = nodes_of(&view, session, &["/zklock/cc-held", "/zklock/cc-waited"]).await;
        assert!(
            left.is_empty(),
            "step {step}: nodes of the closed session remain: {left:?}"
        );
        assert!(
            kept.is_lost(),
            "step {step}: a guard of a closed client still looks held"
        );
        match tokio::time::timeout(SOON, waiter)
            .await
            .unwrap_or_else(|_| panic!("step {step}: the waiter never answered"))
            .unwrap()
        {
            Err(LockError::Closed { .. }) => {}
            other => panic!("step {step}: expected Closed, got {other:?}"),
        }
    }
}

#[distributed_lock("close-body", client = client)]
async fn hold_forever(client: &LockClient, running: tokio::sync::oneshot::Sender<()>) -> Result<(), AppError> {
    let _ = running.send(());
    std::future::pending::<()>().await;
    Ok(())
}

/// A scope takes the scope of where it runs, not of where its future was made.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_scope_future_takes_the_scope_it_runs_in() {
    let zk = server();
    let locks = client(&zk.connect_string()).await;
    let outer_lock = locks.mutex("scope-outer").unwrap();
    let inner_lock = locks.mutex("scope-inner").unwrap();
    let outer = outer_lock.acquire().await.unwrap();
    let inner = inner_lock.acquire().await.unwrap();

    // Made outside the outer hold, run inside it: re-enters the outer hold.
    let made_outside = inner.scope(outer_lock.acquire_timeout(SHORT));
    let reentered = outer.scope(made_outside).await.expect("runs inside the outer hold");
    assert_eq!(reentered.fencing_token(), outer.fencing_token());
    drop(reentered);

    // Made inside the outer hold, run after it, outside it: not inside the outer hold.
    let made_inside = outer
        // Deliberately not awaited inside: the future is made here and run below.
        .scope(async { Some(Box::pin(inner.scope(outer_lock.acquire_timeout(SHORT)))) })
        .await;
    let result = made_inside.expect("made inside").await;
    assert!(
        matches!(result, Err(LockError::Timeout { .. })),
        "code outside a hold re-entered it: {result:?}"
    );
}

/// A node handed on is not taken once its session was reported lost: the release hands the
/// node to a task of the process queued behind it, the connection is cut long enough for the
/// loss to be reported before that task takes it, then restored on the same session (the node
/// still there). The task must not be granted the node; it queues anew instead.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_handed_on_is_not_taken_after_its_session_was_reported_lost() {
    use futures::FutureExt;

    let zk = server();
    let proxy = FaultProxy::start(zk.addr()).unwrap();
    let c = LockClient::builder(proxy.connect_string())
        .session_timeout(Duration::from_secs(4))
        .loss_after(Duration::from_millis(500))
        .connect()
        .await
        .unwrap();
    let session = c.session_id();
    let lock = c.mutex("lost-handoff").unwrap();
    let guard = lock.acquire().await.unwrap();
    let node = guard.node_path().to_owned();
    let loss = guard.loss_signal();
    // Polled once, the waiter is queued in the process behind the guard; it is not polled
    // again until the loss has been reported.
    let mut waiter = Box::pin(lock.acquire_timeout(SOON));
    assert!((&mut waiter).now_or_never().is_none(), "the lock is held");
    let handed_off = c.metrics().handed_off;
    // Its first poll hands the node to the waiter, then waits for it to be taken.
    let mut release = Box::pin(guard.release());
    assert!(
        (&mut release).now_or_never().is_none(),
        "the release waits for the taker"
    );
    let release = tokio::spawn(release);

    let mut status = c.watch_status();
    proxy.blackhole();
    let lost = tokio::time::timeout(SOON, loss.lost())
        .await
        .expect("the loss is reported");
    // Reported while the session may still be alive: the error says so, not that it ended.
    match lost {
        LockError::Lost { reason, .. } => assert!(
            reason.contains("connection to ZooKeeper was down") && !reason.contains("session ended"),
            "{reason}"
        ),
        other => panic!("not a loss: {other:?}"),
    }
    proxy.pass();
    tokio::time::timeout(SOON, status.wait_for(|s| s.is_connected()))
        .await
        .expect("reconnected")
        .unwrap();
    assert_eq!(c.session_id(), session, "the same session: the node is still there");
    let view = raw(&zk.connect_string()).await;
    assert!(
        view.check_stat(&node).await.unwrap().is_some(),
        "{node} outlived the cut"
    );

    let next = tokio::time::timeout(SOON, waiter)
        .await
        .expect("the waiter is answered")
        .expect("the waiter gets the lock");
    assert_ne!(next.node_path(), node, "the node of a hold reported lost was handed on");
    assert_eq!(c.metrics().handed_off, handed_off);
    tokio::time::timeout(SOON, release)
        .await
        .expect("the release is answered")
        .unwrap()
        .expect("the release deleted the node nobody took");
    assert!(view.check_stat(&node).await.unwrap().is_none(), "the node was deleted");
    next.release().await.unwrap();
}
