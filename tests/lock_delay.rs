//! Lock-delay (`Lock::with_lock_delay`) against a real server: a holder that vanishes without
//! releasing — its session expired, or its node deleted by an operator — keeps the lock
//! unavailable for the delay; clean releases and waiters that give up are marked and cost
//! nothing; a waiter's deadline still holds during the delay.

mod support;

use std::sync::OnceLock;
use std::time::Duration;

use support::{client, contenders, cut_off_able, raw, server, session_of, wait_watching, AppError, Captured};
use zklock::{distributed_lock, LockClient, LockError, LockGuard};
use zklock_testing::FaultProxy;

/// Generous bound for anything that should happen promptly on a loaded machine.
const SOON: Duration = Duration::from_secs(20);
/// A delay no test waits for: a waiter that would wait it out times out first.
const LONG: Duration = Duration::from_secs(600);

/// This binary's log at DEBUG, installed by the first test that reads it: what a contender
/// learned shows there before anything of it reaches the server.
fn log() -> &'static Captured {
    static LOG: OnceLock<Captured> = OnceLock::new();
    LOG.get_or_init(Captured::install)
}

async fn waiter(lock: zklock::Lock, timeout: Duration) -> tokio::task::JoinHandle<Result<LockGuard, LockError>> {
    tokio::spawn(async move { lock.acquire_timeout(timeout).await })
}

/// A clean release is marked: the waiter behind it goes at once, not after the delay.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_clean_release_costs_no_delay() {
    let zk = server();
    let holder = client(&zk.connect_string()).await;
    let other = client(&zk.connect_string()).await;
    let lock = |c: &zklock::LockClient| c.mutex("ld-clean").unwrap().with_lock_delay(LONG).unwrap();
    let guard = lock(&holder).acquire().await.unwrap();
    let next = waiter(lock(&other), SOON).await;
    wait_watching(&zk, &session_of(&other), guard.node_path(), "the waiter").await;
    guard.release().await.unwrap();
    let next = next.await.unwrap().expect("granted without waiting out the delay");
    next.release().await.unwrap();
    // Again through the drop path and with a read/write lock.
    let write = |c: &zklock::LockClient| c.write_lock("ld-clean-rw").unwrap().with_lock_delay(LONG).unwrap();
    let guard = write(&holder).acquire().await.unwrap();
    let reader = {
        let lock = other.read_lock("ld-clean-rw").unwrap().with_lock_delay(LONG).unwrap();
        tokio::spawn(async move { lock.acquire_timeout(SOON).await })
    };
    wait_watching(&zk, &session_of(&other), guard.node_path(), "the reader").await;
    drop(guard);
    reader
        .await
        .unwrap()
        .expect("granted without waiting out the delay")
        .release()
        .await
        .unwrap();
}

/// An operator deletes the holder's node: the waiter that watched it go waits the delay
/// before it takes the lock (it cannot within less), then gets it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_holder_node_deleted_by_an_operator_keeps_the_lock_for_the_delay() {
    let zk = server();
    let holder = client(&zk.connect_string()).await;
    let other = client(&zk.connect_string()).await;
    let view = raw(&zk.connect_string()).await;
    let delay = Duration::from_secs(3);
    let lock = |c: &zklock::LockClient| c.mutex("ld-deleted").unwrap().with_lock_delay(delay).unwrap();
    let guard = lock(&holder).acquire().await.unwrap();
    let next = waiter(lock(&other), SOON + delay).await;
    wait_watching(&zk, &session_of(&other), guard.node_path(), "the waiter").await;

    // Taken before the delete is sent: the waiter cannot hear of it any earlier.
    let deleted_at = tokio::time::Instant::now();
    view.delete(guard.node_path(), None).await.unwrap();
    let next = next.await.unwrap().expect("granted after the delay");
    let waited = deleted_at.elapsed();
    assert!(
        waited >= delay,
        "granted {waited:?} after the unmarked deletion, within the {delay:?} delay"
    );
    drop((guard, next));
}

/// Closing the holder's client stops the work under its hold rather than finishing it: the
/// node goes unmarked, and the waiter of another client waits the delay before it takes the
/// lock, as after a holder that vanished.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn closing_the_holders_client_keeps_the_lock_for_the_delay() {
    let zk = server();
    let holder = client(&zk.connect_string()).await;
    let other = client(&zk.connect_string()).await;
    let delay = Duration::from_secs(3);
    let lock = |c: &zklock::LockClient| c.mutex("ld-closed").unwrap().with_lock_delay(delay).unwrap();
    let guard = lock(&holder).acquire().await.unwrap();
    let next = waiter(lock(&other), SOON + delay).await;
    wait_watching(&zk, &session_of(&other), guard.node_path(), "the waiter").await;

    // Taken before the close starts: the waiter cannot hear of the node's end any earlier.
    let closed_at = tokio::time::Instant::now();
    holder.close().await;
    assert!(guard.is_lost());
    let next = next.await.unwrap().expect("granted after the delay");
    let waited = closed_at.elapsed();
    assert!(
        waited >= delay,
        "granted {waited:?} after the holder's client was closed, within the {delay:?} delay"
    );
    drop((guard, next));
}

/// A holder cut off until the server expired its session vanishes unmarked: the waiter that
/// watched it waits the delay after the node went.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_holder_whose_session_expired_keeps_the_lock_for_the_delay() {
    let zk = server();
    let proxy = FaultProxy::start(zk.addr()).unwrap();
    let holder = cut_off_able(&proxy).await;
    let other = client(&zk.connect_string()).await;
    let view = raw(&zk.connect_string()).await;
    let delay = Duration::from_secs(2);
    let lock = |c: &zklock::LockClient| c.mutex("ld-expired").unwrap().with_lock_delay(delay).unwrap();
    let guard = lock(&holder).acquire().await.unwrap();
    let node = guard.node_path().to_owned();
    let next = waiter(lock(&other), SOON + delay).await;
    wait_watching(&zk, &session_of(&other), &node, "the waiter").await;

    proxy.blackhole();
    // Polled no more often than every 20 ms: the node went at most that long before this.
    let gone = support::eventually(SOON, || async { view.check_stat(&node).await.unwrap().is_none() }).await;
    assert!(gone, "the holder's session never expired");
    let seen_gone_at = tokio::time::Instant::now();
    let next = next.await.unwrap().expect("granted after the delay");
    // Seen gone a poll after it went: without the delay the grant would come about then, with
    // it about `delay` later; half of it tells the two apart on a loaded machine too.
    let waited = seen_gone_at.elapsed();
    assert!(
        waited >= delay / 2,
        "granted {waited:?} after the holder's session ended, within the {delay:?} delay"
    );
    assert!(guard.is_lost());
    drop((guard, next));
}

/// A waiter that gives up ahead of another marks its node's removal: the one behind it goes as
/// soon as the holder releases cleanly.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_that_gives_up_is_marked_too() {
    let zk = server();
    let holder = client(&zk.connect_string()).await;
    let quitter = client(&zk.connect_string()).await;
    let patient = client(&zk.connect_string()).await;
    let view = raw(&zk.connect_string()).await;
    let lock = |c: &zklock::LockClient| c.mutex("ld-give-up").unwrap().with_lock_delay(LONG).unwrap();
    let guard = lock(&holder).acquire().await.unwrap();
    let (give_up, gave_up) = tokio::sync::oneshot::channel::<()>();
    let quitting = {
        let lock = lock(&quitter);
        tokio::spawn(async move {
            tokio::select! {
                _ = lock.acquire() => panic!("granted while held"),
                _ = gave_up => {}
            }
        })
    };
    wait_watching(&zk, &session_of(&quitter), guard.node_path(), "the quitter").await;
    let dir = lock(&holder).path().to_owned();
    let held = guard.node_path().rsplit('/').next().unwrap().to_owned();
    let queue = contenders(&view, &dir).await;
    assert_eq!(queue.len(), 2, "{queue:?}");
    let quitter_node = format!("{dir}/{}", queue.iter().find(|n| **n != held).unwrap());
    let next = waiter(lock(&patient), SOON).await;
    wait_watching(&zk, &session_of(&patient), &quitter_node, "the patient waiter").await;

    give_up.send(()).unwrap();
    quitting.await.unwrap();
    quitter.flush().await;
    wait_watching(&zk, &session_of(&patient), guard.node_path(), "the patient waiter").await;
    guard.release().await.unwrap();
    next.await
        .unwrap()
        .expect("granted without waiting out the delay")
        .release()
        .await
        .unwrap();
}

/// The waiter's own deadline holds during the delay: it times out, and leaves no node behind.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deadline_inside_the_delay_times_out_and_leaves_nothing() {
    let zk = server();
    let holder = client(&zk.connect_string()).await;
    let other = client(&zk.connect_string()).await;
    let view = raw(&zk.connect_string()).await;
    let lock = |c: &zklock::LockClient| c.mutex("ld-deadline").unwrap().with_lock_delay(LONG).unwrap();
    let dir = lock(&holder).path().to_owned();
    let guard = lock(&holder).acquire().await.unwrap();
    let next = waiter(lock(&other), Duration::from_secs(5)).await;
    wait_watching(&zk, &session_of(&other), guard.node_path(), "the waiter").await;
    view.delete(guard.node_path(), None).await.unwrap();
    let err = next.await.unwrap().unwrap_err();
    assert!(matches!(err, LockError::Timeout { .. }), "{err:?}");
    other.flush().await;
    assert_eq!(contenders(&view, &dir).await, Vec::<String>::new());
    drop(guard);
}

/// Bad settings are refused with a clear error; zero turns the delay off.
#[tokio::test]
async fn bad_settings_are_refused() {
    let zk = server();
    let c = client(&zk.connect_string()).await;
    let err = c
        .semaphore("ld-sem", 2)
        .unwrap()
        .with_lock_delay(Duration::from_secs(1))
        .unwrap_err();
    assert!(err.to_string().contains("a semaphore takes no lock-delay"), "{err}");
    let err = c
        .mutex("ld-long")
        .unwrap()
        .with_lock_delay(Duration::from_secs(3601))
        .unwrap_err();
    assert!(err.to_string().contains("over the limit"), "{err}");
    let off = c.mutex("ld-off").unwrap().with_lock_delay(Duration::ZERO).unwrap();
    assert_eq!(off.lock_delay(), None);
    let on = c
        .mutex("ld-on")
        .unwrap()
        .with_lock_delay(Duration::from_millis(1))
        .unwrap();
    assert_eq!(on.lock_delay(), Some(Duration::from_millis(1)));
}

#[distributed_lock("ld-attr", lock_delay = "2s", timeout = "30s", client = locks)]
async fn after_the_delay(locks: &LockClient) -> Result<tokio::time::Instant, AppError> {
    Ok(tokio::time::Instant::now())
}

/// The attribute's `lock_delay` is the lock's: a call waiting behind a holder whose node an
/// operator deleted runs its body only once the delay has passed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_attribute_waits_out_its_lock_delay() {
    let zk = server();
    let holder = client(&zk.connect_string()).await;
    let other = client(&zk.connect_string()).await;
    let view = raw(&zk.connect_string()).await;
    let delay = Duration::from_secs(2);
    let guard = holder
        .mutex("ld-attr")
        .unwrap()
        .with_lock_delay(delay)
        .unwrap()
        .acquire()
        .await
        .unwrap();
    let other_session = session_of(&other);
    let call = tokio::spawn(async move { after_the_delay(&other).await.map(|at| (at, other)) });
    wait_watching(&zk, &other_session, guard.node_path(), "the attribute's call").await;
    // Taken before the delete is sent: the waiter cannot hear of it any earlier.
    let deleted_at = tokio::time::Instant::now();
    view.delete(guard.node_path(), None).await.unwrap();
    let (ran_at, _other) = call.await.unwrap().expect("the body ran");
    assert!(
        ran_at - deleted_at >= delay,
        "the body ran {:?} after the unmarked deletion",
        ran_at - deleted_at
    );
    drop(guard);
}

/// A waiter that gives up while it waits out the delay does not hand the lock on early: its
/// removal is unmarked, so the waiter behind it waits a delay of its own.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn giving_up_inside_the_delay_passes_the_delay_on() {
    let zk = server();
    let holder = client(&zk.connect_string()).await;
    let first = client(&zk.connect_string()).await;
    let second = client(&zk.connect_string()).await;
    let view = raw(&zk.connect_string()).await;
    let delay = Duration::from_secs(3);
    let lock = |c: &LockClient| c.mutex("ld-pass-on").unwrap().with_lock_delay(delay).unwrap();
    let dir = lock(&holder).path().to_owned();
    let guard = lock(&holder).acquire().await.unwrap();
    let held = guard.node_path().to_owned();
    let quitter = waiter(lock(&first), SOON).await;
    wait_watching(&zk, &session_of(&first), &held, "the first waiter").await;
    let queue = contenders(&view, &dir).await;
    let first_node = format!("{dir}/{}", queue.iter().find(|n| !held.ends_with(n.as_str())).unwrap());
    let next = waiter(lock(&second), SOON + 2 * delay).await;
    wait_watching(&zk, &session_of(&second), &first_node, "the second waiter").await;

    let deleted_at = tokio::time::Instant::now();
    view.delete(&held, None).await.unwrap();
    // The first waiter has heard of the deletion once its watch on the node is spent.
    let heard = support::eventually(SOON, || async {
        !support::watches_of(&zk, &session_of(&first)).contains(&held)
    })
    .await;
    assert!(heard, "the first waiter never heard of the deletion");
    quitter.abort();
    let next = next.await.unwrap().expect("granted after the delay");
    let waited = deleted_at.elapsed();
    assert!(
        waited >= delay,
        "granted {waited:?} after the holder vanished, within the {delay:?} delay"
    );
    drop((guard, next));
}

/// A waiter that learned of an unmarked vanish ahead of it and then waits for another node
/// (here the holder) keeps its own removal unmarked (`Vanished::pending`): when it gives up,
/// the waiter behind it learns of an unmarked vanish in turn and waits the delay once its turn
/// comes, rather than walking in as soon as the holder releases.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_that_knows_of_a_vanish_and_gives_up_behind_the_holder_passes_the_delay_on() {
    let zk = server();
    let holder = client(&zk.connect_string()).await;
    let doomed = client(&zk.connect_string()).await;
    let first = client(&zk.connect_string()).await;
    let second = client(&zk.connect_string()).await;
    let view = raw(&zk.connect_string()).await;
    let delay = Duration::from_secs(3);
    let lock = |c: &LockClient| c.mutex("ld-behind").unwrap().with_lock_delay(delay).unwrap();
    let dir = lock(&holder).path().to_owned();
    let guard = lock(&holder).acquire().await.unwrap();
    let held = guard.node_path().to_owned();
    let newest = |queue: Vec<String>, known: &[&str]| {
        let mut others: Vec<String> = queue
            .into_iter()
            .map(|n| format!("{dir}/{n}"))
            .filter(|n| !known.contains(&n.as_str()))
            .collect();
        assert_eq!(others.len(), 1, "one new contender: {others:?}");
        others.remove(0)
    };
    let doomed_task = waiter(lock(&doomed), SOON).await;
    wait_watching(&zk, &session_of(&doomed), &held, "the doomed waiter").await;
    let doomed_node = newest(contenders(&view, &dir).await, &[&held]);
    let quitter = waiter(lock(&first), SOON).await;
    wait_watching(&zk, &session_of(&first), &doomed_node, "the first waiter").await;
    let first_node = newest(contenders(&view, &dir).await, &[&held, &doomed_node]);
    let next = waiter(lock(&second), SOON + 2 * delay).await;
    wait_watching(&zk, &session_of(&second), &first_node, "the second waiter").await;

    // An operator deletes the doomed waiter's node: the first waiter learns of an unmarked
    // vanish, and waits for the holder from then on.
    view.delete(&doomed_node, None).await.unwrap();
    doomed_task.abort();
    wait_watching(&zk, &session_of(&first), &held, "the first waiter, after the vanish").await;
    let quit_at = tokio::time::Instant::now();
    quitter.abort();
    let heard = support::eventually(SOON, || async {
        !support::watches_of(&zk, &session_of(&second)).contains(&first_node)
    })
    .await;
    assert!(heard, "the second waiter never heard of the first one's removal");
    // A clean release: the second waiter's turn comes at once, and only the delay it was
    // passed holds it back.
    guard.release().await.unwrap();
    let next = next.await.unwrap().expect("granted after the delay");
    let waited = quit_at.elapsed();
    assert!(
        waited >= delay,
        "granted {waited:?} after the first waiter gave up, within the {delay:?} delay it knew of"
    );
    next.release().await.unwrap();
}

/// A client whose ACL lets it create and delete its nodes but not write them still releases:
/// the marked delete is refused, and the node is deleted unmarked instead of kept.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_the_acl_forbids_writing_is_still_released() {
    use zklock::zk;
    let zk = server();
    let no_write = vec![zk::Acl::new(
        zk::Permission::READ | zk::Permission::CREATE | zk::Permission::DELETE,
        zk::AuthId::anyone(),
    )];
    let c = LockClient::builder(zk.connect_string())
        .session_timeout(Duration::from_secs(4))
        .acls(no_write)
        .connect()
        .await
        .unwrap();
    let view = raw(&zk.connect_string()).await;
    let lock = c.mutex("ld-no-write").unwrap().with_lock_delay(LONG).unwrap();
    let guard = lock.acquire().await.unwrap();
    let node = guard.node_path().to_owned();
    guard.release().await.expect("released without WRITE permission");
    assert_eq!(view.check_stat(&node).await.unwrap(), None, "the node was kept");
}

/// Two tasks of one process wait for the lock, the front one in ZooKeeper watching the holder.
/// The holder's node is deleted (unmarked) and the front task gives up inside the delay: the
/// task behind it, which takes its turn in this process's queue, waits out the same delay
/// rather than being granted at once by a listing that no longer shows the vanished holder.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_local_waiter_taking_the_turn_inside_the_delay_waits_it_out() {
    let zk = server();
    let holder = client(&zk.connect_string()).await;
    let waiters = client(&zk.connect_string()).await;
    let view = raw(&zk.connect_string()).await;
    let delay = Duration::from_secs(5);
    let lock = |c: &LockClient| c.mutex("ld-local").unwrap().with_lock_delay(delay).unwrap();
    let guard = lock(&holder).acquire().await.unwrap();
    let held = guard.node_path().to_owned();
    // The front task gives up 3 s after it started, inside the delay of a vanish it saw.
    let front_started = tokio::time::Instant::now();
    let front = waiter(lock(&waiters), Duration::from_secs(3)).await;
    wait_watching(&zk, &session_of(&waiters), &held, "the front task").await;
    let behind = waiter(lock(&waiters), SOON + delay).await;

    let deleted_at = tokio::time::Instant::now();
    view.delete(&held, None).await.unwrap();
    assert!(
        deleted_at - front_started < Duration::from_secs(2),
        "the machine took {:?} to see the front task wait; it must hear of the deletion before it gives up",
        deleted_at - front_started
    );
    match front.await.unwrap() {
        Err(LockError::Timeout { .. }) => {}
        other => panic!("the front task was to give up inside the delay, got {other:?}"),
    }
    let next = behind.await.unwrap().expect("granted after the delay");
    let waited = deleted_at.elapsed();
    assert!(
        waited >= delay,
        "the task behind was granted {waited:?} after the holder vanished, within the {delay:?} delay"
    );
    drop((guard, next));
}

/// A waiter waiting out the delay loses its session (cut off until the server expired it):
/// the acquisition starts over on a new session, where its node is alone in the queue, and
/// still waits out the delay it learned of on the old one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restart_on_a_new_session_still_waits_out_the_delay() {
    // Installed before anything logs, so the waiter's lines are captured.
    let log = log();
    let zk = server();
    let proxy = FaultProxy::start(zk.addr()).unwrap();
    let holder = client(&zk.connect_string()).await;
    let patient = cut_off_able(&proxy).await;
    let view = raw(&zk.connect_string()).await;
    // Longer than the session's expiry (4 s) and the reconnect after it.
    let delay = Duration::from_secs(10);
    let lock = |c: &LockClient| c.mutex("ld-restart").unwrap().with_lock_delay(delay).unwrap();
    let dir = lock(&holder).path().to_owned();
    let guard = lock(&holder).acquire().await.unwrap();
    let held = guard.node_path().to_owned();
    let next = waiter(lock(&patient), SOON + delay).await;
    wait_watching(&zk, &session_of(&patient), &held, "the waiter").await;
    let queue = contenders(&view, &dir).await;
    let waiting = format!("{dir}/{}", queue.iter().find(|n| !held.ends_with(n.as_str())).unwrap());

    let deleted_at = tokio::time::Instant::now();
    view.delete(&held, None).await.unwrap();
    // The waiter learns of it (the server firing its watch is not enough: the notification
    // could still be on its way through the proxy when the proxy cuts it off), then is cut off
    // until the server ends its session.
    let learned = support::eventually(SOON, || async {
        log.lines().iter().any(|line| {
            line.contains("lock=ld-restart") && line.contains("vanished without releasing; waiting out the lock-delay")
        })
    })
    .await;
    assert!(learned, "the waiter never learned of the vanish");
    proxy.blackhole();
    let expired = support::eventually(SOON, || async { view.check_stat(&waiting).await.unwrap().is_none() }).await;
    assert!(expired, "the waiter's session never expired");
    proxy.pass();
    let next = next.await.unwrap().expect("granted on a new session after the delay");
    let waited = deleted_at.elapsed();
    assert!(
        waited >= delay,
        "granted {waited:?} after the holder vanished, within the {delay:?} delay"
    );
    assert_ne!(next.node_path(), waiting, "granted the node of the expired session");
    drop((guard, next));
}
