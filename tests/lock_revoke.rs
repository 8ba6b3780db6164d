//! What a holder is told about its own node, against a real server: a revocation requested by
//! another client (`LockClient::revoke`) and what a locked body does about it (`on_revoke`);
//! the node deleted by someone else, which is a loss, also in a chain of short local holds; and
//! that a lasting hold watches its node.

mod support;

use std::time::Duration;

use support::{client, contenders, eventually, raw, server, session_of, watches_of, AppError};
use zklock::{distributed_lock, zk, LockClient, LockError, RevokeOutcome};

/// Generous bound for anything that should happen promptly on a loaded machine.
const SOON: Duration = Duration::from_secs(20);

/// A revocation by another client reaches the holder: `revoked()` resolves, the hold is still
/// sound (a request, not a loss), and releasing it afterwards works and frees the lock.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_revocation_reaches_the_holder_and_release_still_works() {
    let zk = server();
    let holder = client(&zk.connect_string()).await;
    let revoker = client(&zk.connect_string()).await;
    let view = raw(&zk.connect_string()).await;
    let guard = holder.mutex("rv-basic").unwrap().acquire().await.unwrap();
    assert!(!guard.is_revoked());

    let outcome = revoker.revoke("rv-basic").await.unwrap();
    assert_eq!(
        outcome,
        RevokeOutcome::Requested {
            nodes: vec![guard.node_path().to_owned()]
        }
    );
    tokio::time::timeout(SOON, guard.revoked())
        .await
        .expect("the holder never saw the revocation");
    assert!(guard.is_revoked());
    assert!(!guard.is_lost(), "a revocation is not a loss");
    guard.ensure_held().await.expect("still held after the request");

    guard.release().await.expect("release after a revocation");
    assert!(contenders(&view, "/zklock/rv-basic").await.is_empty());
    assert_eq!(holder.metrics().lost, 0);
    // The lock is free again for anyone.
    let next = revoker.mutex("rv-basic").unwrap().try_acquire().await.unwrap();
    assert!(next.is_some(), "the lock stayed taken after its release");
}

/// Revoking a lock nobody holds says so: no directory at all, or a directory with no holder.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn revoking_a_lock_nobody_holds_says_so() {
    let zk = server();
    let c = client(&zk.connect_string()).await;
    let view = raw(&zk.connect_string()).await;
    assert_eq!(c.revoke("rv-never-used").await.unwrap(), RevokeOutcome::NoSuchLock);
    // A directory that stays (persistent, so the server does not reap it) with nobody in it.
    view.mkdir(
        "/zklock/rv-empty",
        &zk::CreateMode::Persistent.with_acls(zk::Acls::anyone_all()),
    )
    .await
    .unwrap();
    assert_eq!(c.revoke("rv-empty").await.unwrap(), RevokeOutcome::NoHolder);
}

/// Only the holder is asked: a waiter's node is left as it was.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_holders_are_asked() {
    let zk = server();
    let holder = client(&zk.connect_string()).await;
    let waiter = client(&zk.connect_string()).await;
    let view = raw(&zk.connect_string()).await;
    let guard = holder.mutex("rv-waiter").unwrap().acquire().await.unwrap();
    let waiting = tokio::spawn({
        let lock = waiter.mutex("rv-waiter").unwrap();
        async move { lock.acquire_timeout(SOON).await }
    });
    let queued = eventually(SOON, || async {
        contenders(&view, "/zklock/rv-waiter").await.len() == 2
    })
    .await;
    assert!(queued, "the waiter never queued");

    let outcome = holder.revoke("rv-waiter").await.unwrap();
    assert_eq!(
        outcome,
        RevokeOutcome::Requested {
            nodes: vec![guard.node_path().to_owned()]
        }
    );
    tokio::time::timeout(SOON, guard.revoked()).await.expect("holder asked");
    drop(guard);
    let next = waiting.await.unwrap().expect("the waiter is granted after the release");
    assert!(!next.is_revoked(), "the waiter's own node was never asked");
    next.release().await.unwrap();
}

async fn wait_forever() -> Result<(), AppError> {
    std::future::pending::<()>().await;
    Ok(())
}

#[distributed_lock("rv-abort", on_revoke = "abort", timeout = "10s", client = locks)]
async fn stops_when_revoked(locks: &LockClient) -> Result<(), AppError> {
    wait_forever().await
}

#[distributed_lock("rv-continue", timeout = "10s", client = locks)]
async fn runs_on_when_revoked(
    locks: &LockClient,
    saw: tokio::sync::oneshot::Sender<()>,
    proceed: tokio::sync::oneshot::Receiver<()>,
) -> Result<u32, AppError> {
    // Re-entered: the same hold as the body's, so its revocation is the body's.
    let hold = locks.mutex("rv-continue")?.acquire().await?;
    hold.revoked().await;
    let _ = saw.send(());
    let _ = proceed.await;
    Ok(7)
}

/// `on_revoke = "abort"` stops the body at the request and returns `LockError::Revoked`, and
/// the lock is released; the default (`"continue"`) lets the body run to its end after it saw
/// the request.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_revoke_abort_stops_the_body_and_continue_runs_on() {
    let zk = server();
    let holder = client(&zk.connect_string()).await;
    let revoker = client(&zk.connect_string()).await;
    let view = raw(&zk.connect_string()).await;

    let running = tokio::spawn({
        let holder = holder.clone();
        async move { stops_when_revoked(&holder).await }
    });
    let held = eventually(SOON, || async {
        contenders(&view, "/zklock/rv-abort").await.len() == 1
    })
    .await;
    assert!(held, "the body never took the lock");
    assert!(matches!(
        revoker.revoke("rv-abort").await.unwrap(),
        RevokeOutcome::Requested { .. }
    ));
    let stopped = tokio::time::timeout(SOON, running)
        .await
        .expect("the body was not stopped")
        .unwrap();
    match stopped {
        Err(AppError::Lock(LockError::Revoked { name })) => assert_eq!(name, "rv-abort"),
        other => panic!("expected Revoked, got {other:?}"),
    }
    holder.flush().await;
    assert!(
        contenders(&view, "/zklock/rv-abort").await.is_empty(),
        "the lock was not released"
    );

    let (saw_tx, saw_rx) = tokio::sync::oneshot::channel();
    let (proceed_tx, proceed_rx) = tokio::sync::oneshot::channel();
    let running = tokio::spawn({
        let holder = holder.clone();
        async move { runs_on_when_revoked(&holder, saw_tx, proceed_rx).await }
    });
    let held = eventually(SOON, || async {
        contenders(&view, "/zklock/rv-continue").await.len() == 1
    })
    .await;
    assert!(held, "the body never took the lock");
    assert!(matches!(
        revoker.revoke("rv-continue").await.unwrap(),
        RevokeOutcome::Requested { .. }
    ));
    tokio::time::timeout(SOON, saw_rx)
        .await
        .expect("the body never saw the request")
        .expect("the body was stopped before it could say it saw the request");
    proceed_tx.send(()).unwrap();
    let finished = tokio::time::timeout(SOON, running).await.unwrap().unwrap();
    assert_eq!(finished.unwrap(), 7, "the body ran to its end");
}

/// An operator deletes the holder's node once its watch is set: the holder is told it lost the
/// lock (with a message that says so), work under `run` is stopped, the next contender is
/// granted, the release reports the loss, and the metrics count it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_deleted_by_someone_else_is_a_loss() {
    let zk = server();
    let holder = client(&zk.connect_string()).await;
    let waiter = client(&zk.connect_string()).await;
    let operator = raw(&zk.connect_string()).await;
    let guard = holder.mutex("rv-deleted").unwrap().acquire().await.unwrap();
    let signal = guard.loss_signal();
    let waiting = tokio::spawn({
        let lock = waiter.mutex("rv-deleted").unwrap();
        async move { lock.acquire_timeout(SOON).await }
    });
    let queued = eventually(SOON, || async {
        contenders(&operator, "/zklock/rv-deleted").await.len() == 2
    })
    .await;
    assert!(queued, "the waiter never queued");

    // The deletion comes after the hold's watch is set, so it is the watch's event that tells
    // (a deletion before it would be told by the watch's first read).
    let node = guard.node_path().to_owned();
    let session = session_of(&holder);
    let watched = eventually(SOON, || async { watches_of(&zk, &session).contains(&node) }).await;
    assert!(watched, "the hold never watched its node");
    let (ran, deleted) = tokio::join!(
        tokio::time::timeout(SOON, guard.run(std::future::pending::<()>())),
        operator.delete(&node, None)
    );
    deleted.expect("the operator's delete");
    let err = ran
        .expect("run() was not stopped")
        .expect_err("run() must report the loss");
    match &err {
        LockError::Lost { name, reason } => {
            assert_eq!(name, "rv-deleted");
            assert!(reason.contains("deleted by someone else"), "{reason}");
            assert!(reason.contains(&node), "{reason}");
        }
        other => panic!("expected Lost, got {other:?}"),
    }
    assert!(guard.is_lost());
    assert!(signal.is_lost());
    let from_signal = tokio::time::timeout(SOON, signal.lost()).await.unwrap();
    assert_eq!(from_signal, err);
    let from_guard = tokio::time::timeout(SOON, guard.lost()).await.unwrap();
    assert_eq!(from_guard, err);

    let next = waiting.await.unwrap().expect("the next contender is granted");
    assert!(!next.is_lost());
    match guard.release().await {
        Err(LockError::Lost { reason, .. }) => assert!(reason.contains("deleted by someone else")),
        other => panic!("the release must report the loss, got {other:?}"),
    }
    assert_eq!(holder.metrics().lost, 1);
    // The next holder's node is untouched by the old holder's release.
    next.ensure_held().await.expect("the next holder still holds");
    next.release().await.unwrap();
}

/// Our own release deletes the node too: that is never taken for a loss, for a guard released
/// or dropped, with the node watched (the hold lasted long enough for its watch to be set: the
/// release's delete fires it) or not, and the node watch is gone with the hold (the server
/// holds no watch on it).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn our_own_release_is_not_a_loss() {
    let zk = server();
    let c = client(&zk.connect_string()).await;
    let session = session_of(&c);
    for round in 0..20 {
        let guard = c.mutex("rv-own").unwrap().acquire().await.unwrap();
        let signal = guard.loss_signal();
        if round % 4 < 2 {
            let node = guard.node_path().to_owned();
            let watched = eventually(SOON, || async { watches_of(&zk, &session).contains(&node) }).await;
            assert!(watched, "round {round}: the hold never watched its node");
        }
        if round % 2 == 0 {
            guard.release().await.unwrap();
        } else {
            drop(guard);
            c.flush().await;
        }
        assert!(!signal.is_lost(), "round {round}: our own release counted as a loss");
        let late = tokio::time::timeout(Duration::from_millis(50), signal.lost()).await;
        assert!(late.is_err(), "round {round}: {late:?}");
    }
    assert_eq!(c.metrics().lost, 0);
    let gone = eventually(SOON, || async {
        !watches_of(&zk, &session)
            .iter()
            .any(|w| w.starts_with("/zklock/rv-own/"))
    })
    .await;
    assert!(
        gone,
        "watches on released nodes remain: {:?}",
        watches_of(&zk, &session)
    );
}

/// A hold that lasts watches its node (the server lists the watch once the hold has lasted the
/// short delay before it is set), and releasing it is not taken for a deletion by someone else.
/// A short hold sends no watch at all: `lock_alone`'s
/// `a_lone_grant_and_release_send_two_requests` counts the requests of uncontended grants.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lasting_hold_watches_its_node() {
    let zk = server();
    let c = client(&zk.connect_string()).await;
    let lock = c.mutex("rv-watched").unwrap();
    let session = session_of(&c);
    let guard = lock.acquire().await.unwrap();
    let node = guard.node_path().to_owned();
    let watched = eventually(SOON, || async { watches_of(&zk, &session).contains(&node) }).await;
    assert!(
        watched,
        "the holder does not watch its node: {:?}",
        watches_of(&zk, &session)
    );
    guard.release().await.unwrap();
    assert_eq!(c.metrics().lost, 0);
}

/// What the tasks of a local handoff chain did ([`short_hold_chain`]).
#[derive(Default)]
struct ChainLog {
    /// Every local grant: its node and when it was granted.
    grants: Vec<(String, std::time::Instant)>,
    /// Holds that ended reported lost: their node and when the holder saw it.
    lost: Vec<(String, std::time::Instant)>,
    /// The holds alive now: their node and loss signal.
    holding: Vec<(String, zklock::LossSignal)>,
}

/// The log, also after a task panicked holding it.
fn locked(log: &std::sync::Mutex<ChainLog>) -> std::sync::MutexGuard<'_, ChainLog> {
    log.lock().unwrap_or_else(|e| e.into_inner())
}

/// A chain of local handoffs: `tasks` tasks of one client take the lock `name` in turn, each
/// holding it for 10 ms (far less than the 100 ms after which a node is watched),
/// until `stop` is set. With several tasks there is nearly always one waiting, so the node is
/// handed from task to task (the client allows 10 000 handoffs in a row) rather than deleted.
fn short_hold_chain(
    locks: &LockClient,
    name: &str,
    tasks: usize,
    log: &std::sync::Arc<std::sync::Mutex<ChainLog>>,
    stop: &std::sync::Arc<std::sync::atomic::AtomicBool>,
) -> Vec<tokio::task::JoinHandle<()>> {
    use std::sync::atomic::Ordering;
    (0..tasks)
        .map(|_| {
            let (lock, log, stop) = (locks.mutex(name).unwrap(), log.clone(), stop.clone());
            tokio::spawn(async move {
                while !stop.load(Ordering::SeqCst) {
                    let guard = match lock.acquire_timeout(SOON).await {
                        Ok(guard) => guard,
                        Err(LockError::Timeout { .. }) if stop.load(Ordering::SeqCst) => return,
                        Err(err) => panic!("a local task could not take the lock: {err}"),
                    };
                    let node = guard.node_path().to_owned();
                    {
                        let mut log = locked(&log);
                        log.grants.push((node.clone(), std::time::Instant::now()));
                        log.holding.push((node.clone(), guard.loss_signal()));
                    }
                    tokio::time::sleep(Duration::from_millis(10)).await;
                    {
                        let mut log = locked(&log);
                        let at = log.holding.iter().position(|(n, _)| *n == node).unwrap();
                        log.holding.swap_remove(at);
                        if guard.is_lost() {
                            log.lost.push((node.clone(), std::time::Instant::now()));
                        }
                    }
                    let _ = guard.release().await;
                }
            })
        })
        .collect()
}

/// The client of a handoff chain: up to 10 000 handoffs of one node in a row.
async fn chain_client(connect: &str) -> LockClient {
    LockClient::builder(connect)
        .session_timeout(Duration::from_secs(4))
        .max_local_handoffs(10_000)
        .connect()
        .await
        .expect("connect lock client")
}

/// Starts a chain on `name` and waits until one node has been handed over at least 20 times,
/// then queues `remote` behind it; returns the chain's node, the remote acquisition and the
/// chain's tasks.
async fn chain_with_a_remote_waiter(
    local: &LockClient,
    remote: &LockClient,
    view: &zk::Client,
    name: &str,
    log: &std::sync::Arc<std::sync::Mutex<ChainLog>>,
    stop: &std::sync::Arc<std::sync::atomic::AtomicBool>,
) -> (
    String,
    tokio::task::JoinHandle<Result<zklock::LockGuard, LockError>>,
    Vec<tokio::task::JoinHandle<()>>,
) {
    let dir = format!("/zklock/{name}");
    let tasks = short_hold_chain(local, name, 3, log, stop);
    let chained = eventually(SOON, || async { local.metrics().handed_off >= 20 }).await;
    assert!(chained, "the local tasks never handed the node over 20 times");
    let waiting = tokio::spawn({
        let lock = remote.mutex(name).unwrap();
        async move { lock.acquire_timeout(SOON).await }
    });
    let queued = eventually(SOON, || async { contenders(view, &dir).await.len() == 2 }).await;
    assert!(queued, "the remote contender never queued behind the chain");
    let mut nodes = contenders(view, &dir).await;
    nodes.sort_by_key(|n| n.rsplit('-').next().unwrap().to_owned());
    (format!("{dir}/{}", nodes[0]), waiting, tasks)
}

/// Stops a chain's tasks, each within a bound.
async fn stop_chain(stop: &std::sync::atomic::AtomicBool, tasks: Vec<tokio::task::JoinHandle<()>>) {
    stop.store(true, std::sync::atomic::Ordering::SeqCst);
    for task in tasks {
        tokio::time::timeout(SOON, task)
            .await
            .expect("a chain task did not stop")
            .expect("a chain task panicked");
    }
}

/// How long after a deletion or revocation the chain must have heard of it: guarantee 10's
/// 100 ms and a round trip, with room for a loaded machine.
const TOLD_WITHIN: Duration = Duration::from_secs(5);

/// Local holds far shorter than the 100 ms before a node is watched, handed from task
/// to task: an operator deletes the node. The watch belongs to the node, so it is set 100 ms
/// into the chain: the hold current when the deletion is heard of is told of the loss, the
/// node is not handed on again, and the remote contender holds the lock while no local task
/// believes it holds it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_deleted_during_a_chain_of_short_local_holds_is_a_loss() {
    let zk = server();
    let local = chain_client(&zk.connect_string()).await;
    let remote = client(&zk.connect_string()).await;
    let operator = raw(&zk.connect_string()).await;
    let (log, stop) = Default::default();
    let (node, waiting, tasks) =
        chain_with_a_remote_waiter(&local, &remote, &operator, "rv-chain-deleted", &log, &stop).await;

    operator.delete(&node, None).await.expect("the operator's delete");
    let deleted_at = std::time::Instant::now();
    let told = eventually(TOLD_WITHIN, || async {
        locked(&log).lost.iter().any(|(n, _)| *n == node)
    })
    .await;
    let later_grants = |log: &ChainLog| {
        log.grants
            .iter()
            .filter(|(n, at)| *n == node && *at > deleted_at)
            .count()
    };
    assert!(
        told,
        "no local hold of {node} was told of its deletion within {TOLD_WITHIN:?}; the node was granted \
         locally {} more times since",
        later_grants(&locked(&log))
    );

    let next = tokio::time::timeout(SOON, waiting)
        .await
        .expect("the remote contender was never answered")
        .unwrap()
        .expect("the remote contender is granted once the node is gone");
    // The local tasks queue again in ZooKeeper, behind the remote holder.
    let requeued = eventually(SOON, || async {
        contenders(&operator, "/zklock/rv-chain-deleted").await.len() == 2
    })
    .await;
    assert!(requeued, "the local tasks never queued behind the remote holder");
    {
        let log = locked(&log);
        let told_at = log.lost.iter().find(|(n, _)| *n == node).unwrap().1;
        let after_told = log.grants.iter().filter(|(n, at)| *n == node && *at > told_at).count();
        assert_eq!(
            after_told, 0,
            "{node} was granted locally after a holder was told it was deleted"
        );
        let believers: Vec<_> = log.holding.iter().filter(|(_, signal)| !signal.is_lost()).collect();
        assert!(
            believers.is_empty(),
            "local tasks believe they hold the lock beside the remote holder: {:?}",
            believers.iter().map(|(n, _)| n).collect::<Vec<_>>()
        );
    }
    next.ensure_held().await.expect("the remote holder holds the lock");
    next.release().await.unwrap();
    stop_chain(&stop, tasks).await;
}

/// The same chain, asked to release by a revocation: the watch set 100 ms into the chain
/// reads the request, the node is not handed on again but deleted, and the revoker, queued
/// behind the chain, gets the lock within the bound.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_revocation_during_a_chain_of_short_local_holds_lets_the_revoker_in() {
    let zk = server();
    let local = chain_client(&zk.connect_string()).await;
    let remote = client(&zk.connect_string()).await;
    let view = raw(&zk.connect_string()).await;
    let (log, stop) = Default::default();
    let (node, waiting, tasks) =
        chain_with_a_remote_waiter(&local, &remote, &view, "rv-chain-revoked", &log, &stop).await;

    let outcome = remote.revoke("rv-chain-revoked").await.unwrap();
    assert_eq!(
        outcome,
        RevokeOutcome::Requested {
            nodes: vec![node.clone()]
        }
    );
    let next = tokio::time::timeout(TOLD_WITHIN, waiting)
        .await
        .unwrap_or_else(|_| {
            panic!(
                "the revoker was not granted within {TOLD_WITHIN:?}; {node} was granted locally {} times meanwhile",
                locked(&log).grants.iter().filter(|(n, _)| *n == node).count()
            )
        })
        .unwrap()
        .expect("the revoker is granted");
    assert!(!next.is_lost());
    {
        let log = locked(&log);
        let believers: Vec<_> = log.holding.iter().filter(|(_, signal)| !signal.is_lost()).collect();
        assert!(
            believers.is_empty(),
            "local tasks believe they hold the lock beside the revoker: {:?}",
            believers.iter().map(|(n, _)| n).collect::<Vec<_>>()
        );
    }
    next.release().await.unwrap();
    stop_chain(&stop, tasks).await;
}

/// Two readers hold the lock; one's node does not let the revoker write it (its ACL gives
/// others READ only). Revoking asks the other all the same, and the error names both: the
/// holder asked, and the one that could not be.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_holder_that_cannot_be_asked_does_not_hide_those_that_were() {
    let zk = server();
    let open = client(&zk.connect_string()).await;
    let guarded = LockClient::builder(zk.connect_string())
        .session_timeout(Duration::from_secs(4))
        .digest("guarded", "s3cret")
        .acls(vec![
            zk::Acl::new(zk::Permission::ALL, zk::AuthId::authed()),
            zk::Acl::new(zk::Permission::READ, zk::AuthId::anyone()),
        ])
        .connect()
        .await
        .unwrap();
    let revoker = client(&zk.connect_string()).await;
    // The open reader first: the lock directory is open to every client.
    let askable = open.read_lock("rv-partial").unwrap().acquire().await.unwrap();
    let unaskable = guarded.read_lock("rv-partial").unwrap().acquire().await.unwrap();

    match revoker.revoke("rv-partial").await {
        Err(LockError::RevokeIncomplete { name, asked, refused }) => {
            assert_eq!(name, "rv-partial");
            assert_eq!(asked, vec![askable.node_path().to_owned()]);
            assert_eq!(refused.len(), 1, "{refused:?}");
            assert!(refused[0].starts_with(unaskable.node_path()), "{refused:?}");
        }
        other => panic!("expected RevokeIncomplete naming the holder asked, got {other:?}"),
    }
    tokio::time::timeout(SOON, askable.revoked())
        .await
        .expect("the holder that could be asked never was");
    assert!(!unaskable.is_revoked());
    drop((askable, unaskable));
}
