//! A client's life against a real server: bad connect strings refused up front, an unknown host
//! named as such, `close()` freeing every lock at once, a client outliving the runtime that made
//! it (or, on the caller's runtime, ending with it), and `release()` reporting what became of
//! the grant.

mod support;

use std::time::{Duration, Instant};

use support::{client, contenders, eventually, raw, server, session_is_open};
use zklock_runtime::{LockClient, LockError, SessionStatus};
use zklock_testing::{FaultProxy, ZkServer};

/// Bound on anything that should happen "soon", generous for a loaded machine.
const SOON: Duration = Duration::from_secs(30);

#[test]
fn malformed_connect_strings_are_refused_when_the_client_is_built() {
    for bad in [
        "not a connect string!!",
        ":::",
        "zk1:0",
        "zk1,,zk2",
        "[::1",
        "zk1:2181//x",
        " ",
    ] {
        match LockClient::builder(bad).build() {
            Err(LockError::InvalidConfig { message: why, .. }) => {
                assert!(why.contains("connect string"), "{bad:?}: {why}");
            }
            other => panic!("{bad:?} accepted: {other:?}"),
        }
    }
    for good in [
        "127.0.0.1:2181",
        "zk1,zk2:2182,zk3/apps/shop",
        "[::1]:2181",
        "localhost",
    ] {
        LockClient::builder(good)
            .build()
            .unwrap_or_else(|e| panic!("{good:?}: {e}"));
    }
}

#[tokio::test]
async fn an_unresolvable_host_is_named_as_such_not_left_to_the_connect_timeout() {
    let started = Instant::now();
    let err = LockClient::builder("no-such-host.invalid:2181")
        .connect_timeout(Duration::from_secs(60))
        .connect()
        .await
        .unwrap_err();
    match &err {
        LockError::Connection { message: why, .. } => assert!(
            why.contains("cannot resolve") && why.contains("no-such-host.invalid"),
            "{why}"
        ),
        other => panic!("expected a connection error naming the lookup, got {other:?}"),
    }
    assert!(
        started.elapsed() < Duration::from_secs(30),
        "the lookup failure waited for the connect timeout: {:?}",
        started.elapsed()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn close_releases_every_lock_at_once_and_later_calls_say_closed() {
    // A 500 ms tick allows a 10 s session: an expiry would take far longer than the bounds below.
    let zk = ZkServer::builder()
        .tick_time(Duration::from_millis(500))
        .system_property("znode.container.checkIntervalMs", "100")
        .start()
        .unwrap();
    let holder = support::client_with(&zk.connect_string(), Duration::from_secs(10)).await;
    let other = client(&zk.connect_string()).await;
    let view = raw(&zk.connect_string()).await;
    let session = holder.session_id().unwrap();

    let kept = holder.mutex("close-kept").unwrap().acquire().await.unwrap();
    let dropped = holder.mutex("close-dropped").unwrap().acquire().await.unwrap();
    drop(dropped); // its delete is in the background: close() waits for it
    let loss = kept.loss_signal();
    assert!(!loss.is_lost(), "a sound hold's signal says lost");

    holder.close().await;

    assert!(
        contenders(&view, "/zklock/close-kept").await.is_empty(),
        "the held lock's node outlived close()"
    );
    assert!(contenders(&view, "/zklock/close-dropped").await.is_empty());
    assert!(kept.is_lost(), "a guard of a closed client still looks held");
    match tokio::time::timeout(SOON, loss.lost()).await {
        Ok(LockError::Lost { reason, .. }) => assert!(reason.contains("session ended"), "{reason}"),
        other => panic!("expected the loss of a closed session, got {other:?}"),
    }
    assert_eq!(holder.status(), SessionStatus::Closed);
    match holder.mutex("close-kept").unwrap().acquire_timeout(SOON).await {
        Err(LockError::Closed { message: why, .. }) => assert!(why.contains("close()"), "{why}"),
        other => panic!("expected Closed, got {other:?}"),
    }
    // Inside the kept hold's scope as well: a re-entry through a closed client is Closed too.
    let lock = holder.mutex("close-kept").unwrap();
    match kept.scope(lock.acquire_timeout(SOON)).await {
        Err(LockError::Closed { message: why, .. }) => assert!(why.contains("close()"), "{why}"),
        other => panic!("expected Closed for a re-entry, got {other:?}"),
    }
    // Another client gets the lock at once, long before a 10 s session could expire.
    let next = other
        .mutex("close-kept")
        .unwrap()
        .acquire_timeout(Duration::from_secs(5))
        .await
        .expect("the lock was freed by close()");
    drop(next);
    // The session itself was ended by close(), with a guard of it still alive (the server
    // drops the connection just after answering the close; 5 s is far too short for an
    // expiry of the 10 s session).
    let ended = eventually(Duration::from_secs(5), || async {
        !session_is_open(&zk, session).await
    })
    .await;
    assert!(ended, "the server still has session {session:#x} open");
    drop(kept);
    holder.close().await; // a second close does nothing
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn closing_a_client_without_guards_closes_its_session_before_returning() {
    let zk = server();
    let holder = client(&zk.connect_string()).await;
    let session = holder.session_id().unwrap();
    holder
        .mutex("brief")
        .unwrap()
        .acquire()
        .await
        .unwrap()
        .release()
        .await
        .unwrap();
    assert!(session_is_open(&zk, session).await);
    holder.close().await;
    let closed = eventually(SOON, || async { !session_is_open(&zk, session).await }).await;
    assert!(closed, "the server still has session {session:#x} open after close()");
}

/// A client's session lives on a thread of its own: the runtime that made the client (and
/// took a lock with it) can end, and the client, its session and the guard carry on in the
/// next runtime.
#[test]
fn a_client_outlives_the_runtime_that_made_it() {
    let zk = server();
    let first = tokio::runtime::Runtime::new().unwrap();
    let (client, guard) = first.block_on(async {
        let client = client(&zk.connect_string()).await;
        let guard = client.mutex("runtime-gone").unwrap().acquire().await.unwrap();
        (client, guard)
    });
    let session = client.session_id();
    drop(first);

    assert!(!guard.is_lost(), "the hold died with the runtime that took it");
    assert_eq!(client.status(), SessionStatus::Connected);
    let second = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    second.block_on(async {
        guard.ensure_held().await.expect("still held, as the server sees it");
        guard.release().await.expect("released from another runtime");
        let again = client
            .mutex("runtime-gone")
            .unwrap()
            .acquire_timeout(SOON)
            .await
            .expect("acquired from another runtime");
        assert_eq!(client.session_id(), session, "a new session was needed");
        drop(again);
        tokio::time::timeout(SOON, client.flush()).await.expect("flush hung");
        client.close().await;
    });
}

/// The other choice: a client whose sessions run on the caller's runtime
/// (`LockClientBuilder::runtime`) ends with that runtime. Its hold is lost, not silently kept,
/// the client answers `Closed` instead of hanging, and the lock frees once the server ends the
/// session whose connection went with the runtime.
#[test]
fn a_client_on_the_callers_runtime_ends_with_it() {
    let zk = server();
    let first = tokio::runtime::Runtime::new().unwrap();
    let (client, guard) = first.block_on(async {
        let client = on_this_runtime(&zk).await;
        let guard = client.mutex("runtime-owned").unwrap().acquire().await.unwrap();
        (client, guard)
    });
    drop(first);

    assert!(guard.is_lost(), "the hold outlived the runtime its session ran on");
    let second = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    second.block_on(async {
        let again = tokio::time::timeout(SOON, client.mutex("runtime-owned").unwrap().acquire())
            .await
            .expect("an acquisition on a client whose runtime is gone hung");
        assert!(matches!(again, Err(LockError::Closed { .. })), "not Closed: {again:?}");
        assert_eq!(client.status(), SessionStatus::Closed);
        assert!(
            matches!(guard.release().await, Err(LockError::Lost { .. })),
            "the release of a hold lost with its runtime did not say so"
        );
        let other = support::client(&zk.connect_string()).await;
        other
            .mutex("runtime-owned")
            .unwrap()
            .acquire_timeout(SOON)
            .await
            .expect("the lock stayed taken after its holder's runtime ended")
            .release()
            .await
            .unwrap();
    });
}

/// A client on the caller's runtime and a client on a thread of its own contend for one lock
/// from several tasks each: never two holders at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_on_the_callers_runtime_excludes_like_any_other() {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;
    let zk = server();
    let on_caller = on_this_runtime(&zk).await;
    let own_thread = client(&zk.connect_string()).await;
    let inside = Arc::new(AtomicUsize::new(0));
    let most = Arc::new(AtomicUsize::new(0));
    let granted = Arc::new(AtomicUsize::new(0));
    let mut tasks = Vec::new();
    for c in [
        &on_caller,
        &own_thread,
        &on_caller,
        &own_thread,
        &on_caller,
        &own_thread,
    ] {
        let lock = c.mutex("runtime-shared").unwrap();
        let (inside, most, granted) = (inside.clone(), most.clone(), granted.clone());
        tasks.push(tokio::spawn(async move {
            for _ in 0..15 {
                let guard = lock.acquire_timeout(SOON).await.unwrap();
                let now = inside.fetch_add(1, Ordering::SeqCst) + 1;
                most.fetch_max(now, Ordering::SeqCst);
                tokio::task::yield_now().await;
                inside.fetch_sub(1, Ordering::SeqCst);
                granted.fetch_add(1, Ordering::SeqCst);
                guard.release().await.unwrap();
            }
        }));
    }
    for task in tasks {
        task.await.unwrap();
    }
    assert_eq!(granted.load(Ordering::SeqCst), 90);
    assert_eq!(most.load(Ordering::SeqCst), 1, "two holders at once");
    on_caller.close().await;
    own_thread.close().await;
}

/// A runtime given to `LockClientBuilder::runtime` without tokio's time driver cannot run a
/// session's timers: connecting answers a connection error that says why, instead of opening a
/// session whose tasks then fail, and the caller does not panic.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_runtime_without_drivers_for_the_sessions_is_refused_with_the_reason() {
    let zk = server();
    let bare = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .build()
        .unwrap();
    let connecting = LockClient::builder(zk.connect_string())
        .runtime(bare.handle().clone())
        .connect();
    let connected = tokio::time::timeout(SOON, connecting).await.expect("connecting hung");
    match connected {
        Err(err @ LockError::Connection { .. }) => assert!(
            err.to_string().contains("enable_time"),
            "the error does not say what the runtime lacks: {err}"
        ),
        other => panic!("not a connection error: {:?}", other.map(|_| "connected")),
    }
    bare.shutdown_background();
}

/// A client of `zk` whose sessions run on the runtime this is called from.
async fn on_this_runtime(zk: &ZkServer) -> LockClient {
    LockClient::builder(zk.connect_string())
        .session_timeout(Duration::from_secs(4))
        .runtime(tokio::runtime::Handle::current())
        .connect()
        .await
        .expect("connect a client on this runtime")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn release_of_a_lost_hold_says_lost() {
    let zk = server();
    let proxy = FaultProxy::start(zk.addr()).unwrap();
    let holder = support::client_with(&proxy.connect_string(), Duration::from_secs(4)).await;
    let guard = holder.mutex("release-lost").unwrap().acquire().await.unwrap();
    let shown = format!("{guard:?}");
    assert!(
        shown.contains("release-lost") && shown.contains(guard.node_path()),
        "a guard's debug output names its lock and node: {shown}"
    );
    proxy.blackhole();
    let err = tokio::time::timeout(SOON, guard.lost()).await.expect("loss reported");
    assert!(
        err.to_string().contains("connection to ZooKeeper was down"),
        "the loss says why: {err}"
    );
    proxy.pass();
    match guard.release().await {
        Err(LockError::Lost { name, .. }) => assert_eq!(name, "release-lost"),
        other => panic!("expected Err(Lost), got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn release_handed_to_a_waiter_that_gives_up_returns_once_the_node_is_gone() {
    use futures::FutureExt;

    let zk = server();
    let c = client(&zk.connect_string()).await;
    let view = raw(&zk.connect_string()).await;
    let lock = c.mutex("handoff-abandoned").unwrap();
    let guard = lock.acquire().await.unwrap();
    let node = guard.node_path().to_owned();
    // A local waiter queues behind the guard (one poll puts it in the process's queue) and is
    // then never polled again: it cannot take the node it is handed.
    let mut waiter = Box::pin(lock.acquire());
    assert!(
        (&mut waiter).now_or_never().is_none(),
        "the lock is held: the waiter waits"
    );
    // The release hands the node to the waiter and waits for it to be taken (a waiter polled
    // once is queued: `another_task_of_the_same_process_waits` in lock_mutex.rs sees such a
    // waiter handed the node).
    let handed_off = c.metrics().handed_off;
    let mut release = Box::pin(guard.release());
    assert!((&mut release).now_or_never().is_none(), "release waits for the taker");
    // The waiter gives up holding the handed-over node: release() must answer only once the
    // node is gone, since nobody holds it.
    drop(waiter);
    let released = tokio::time::timeout(SOON, release).await.expect("release answers");
    assert!(released.is_ok(), "{released:?}");
    assert!(
        view.check_stat(&node).await.unwrap().is_none(),
        "release() returned Ok while its node {node} was still there, taken by nobody"
    );
    assert_eq!(
        c.metrics().handed_off,
        handed_off,
        "the waiter that gave up took nothing"
    );
    // The lock is free for the next one.
    let next = lock.try_acquire().await.unwrap().expect("the lock is free");
    assert_ne!(next.node_path(), node);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn close_fails_queued_waiters_promptly_and_takes_their_nodes_away() {
    let zk = server();
    let (closing, holder) = (client(&zk.connect_string()).await, client(&zk.connect_string()).await);
    let view = raw(&zk.connect_string()).await;
    let held = holder.mutex("queued").unwrap().acquire().await.unwrap();
    // Two waiters of the closing client: the first queues in ZooKeeper, the second behind it
    // in the process.
    let waiters: Vec<_> = (0..2)
        .map(|_| {
            let lock = closing.mutex("queued").unwrap();
            tokio::spawn(async move { lock.acquire().await.map(drop) })
        })
        .collect();
    assert!(
        eventually(SOON, || async { contenders(&view, "/zklock/queued").await.len() == 2 }).await,
        "the closing client's waiter never queued"
    );
    closing.close().await;
    for waiter in waiters {
        match tokio::time::timeout(SOON, waiter)
            .await
            .expect("a waiter answered")
            .unwrap()
        {
            Err(LockError::Closed { .. }) => {}
            other => panic!("expected Closed, got {other:?}"),
        }
    }
    assert_eq!(
        contenders(&view, "/zklock/queued").await,
        vec![held.node_path().rsplit('/').next().unwrap().to_owned()],
        "the closed client's contender node outlived close()"
    );
    held.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn close_during_a_partition_returns_and_the_lock_frees_with_the_session() {
    let zk = server();
    let proxy = FaultProxy::start(zk.addr()).unwrap();
    let session_timeout = Duration::from_secs(4);
    let cut = support::client_with(&proxy.connect_string(), session_timeout).await;
    let other = client(&zk.connect_string()).await;
    let guard = cut.mutex("partitioned-close").unwrap().acquire().await.unwrap();
    proxy.blackhole();
    // close() cannot reach the server: it must still return, bounded by the session's end
    // and the connect limit, not hang.
    tokio::time::timeout(SOON, cut.close()).await.expect("close() returned");
    assert!(guard.is_lost(), "a guard of a closed client still looks held");
    assert_eq!(cut.status(), SessionStatus::Closed);
    match cut.mutex("partitioned-close").unwrap().try_acquire().await {
        Err(LockError::Closed { .. }) => {}
        other => panic!("expected Closed, got {other:?}"),
    }
    // The server ends the unreachable session after its timeout, which frees the lock.
    let next = other
        .mutex("partitioned-close")
        .unwrap()
        .acquire_timeout(SOON)
        .await
        .expect("the lock was freed when the session ended");
    assert_ne!(next.node_path(), guard.node_path());
    next.release().await.unwrap();
}
