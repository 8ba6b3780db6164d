//! Leader election against a real ZooKeeper: one member of a group leads and the next takes
//! over when it leaves or is cut off past its session; members and the current leader are
//! listed and watched; a leader's work is stopped on loss; and the leader service restarts its
//! body on regaining leadership and hands over on shutdown. Curator's `LeaderLatch` on the
//! same paths is in `interop_leader.rs`.

mod support;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use support::{client, contenders, cut_off_able, eventually, raw, server, session_of, wait_watching};
use tokio::sync::mpsc;
use zklock_runtime::{LockClient, LockError, RecipeKind, ServeOptions, Side};
use zklock_testing::FaultProxy;

/// Generous bound for anything that should happen promptly on a loaded machine.
const SOON: Duration = Duration::from_secs(20);

/// The full path of `group`'s member nodes in queue order, as the server lists them.
async fn member_nodes(view: &zklock_runtime::zk::Client, group: &str) -> Vec<String> {
    let dir = format!("/zklock/{group}");
    let mut nodes = contenders(view, &dir).await;
    nodes.sort_by_key(|n| n[n.len() - 10..].to_owned());
    nodes.into_iter().map(|n| format!("{dir}/{n}")).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_member_leads_and_the_next_takes_over_when_it_relinquishes() {
    let zk = server();
    let view = raw(&zk.connect_string()).await;
    let (a, b) = (client(&zk.connect_string()).await, client(&zk.connect_string()).await);
    let first = a.election("leaders-1").unwrap().lead().await.unwrap();
    assert!(first.is_leader());
    assert!(first.node_path().contains("-latch-"), "{}", first.node_path());

    let election = b.election("leaders-1").unwrap();
    let waiting = tokio::spawn(async move { election.lead().await });
    wait_watching(&zk, &session_of(&b), first.node_path(), "the second member").await;
    assert!(!waiting.is_finished(), "two leaders at once");
    let first_token = first.fencing_token();
    first.release().await.unwrap();

    let second = tokio::time::timeout(SOON, waiting).await.unwrap().unwrap().unwrap();
    assert!(second.is_leader());
    assert!(second.fencing_token() > first_token, "the next term's token is larger");
    assert_eq!(member_nodes(&view, "leaders-1").await, [second.node_path().to_owned()]);
    second.release().await.unwrap();
    assert!(member_nodes(&view, "leaders-1").await.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn members_are_listed_in_order_with_their_ids_and_every_member_has_a_node() {
    let zk = server();
    let c = client(&zk.connect_string()).await;
    let election = |id: &str| c.election("listed").unwrap().with_participant_id(id).unwrap();
    assert!(election("x").members().await.unwrap().is_empty(), "nobody joined yet");
    assert_eq!(election("x").leader().await.unwrap(), None);

    let leader = election("alpha").lead().await.unwrap();
    // Two more members of the same client: each is a member of its own, with its own node
    // (no in-process queue in front of an election).
    let (beta, gamma) = (election("beta"), election("gamma"));
    let beta_waits = tokio::spawn(async move { beta.lead().await });
    wait_watching(&zk, &session_of(&c), leader.node_path(), "beta").await;
    let beta_node = election("x").members().await.unwrap()[1].node.clone();
    let gamma_waits = tokio::spawn(async move { gamma.lead().await });
    wait_watching(&zk, &session_of(&c), &format!("/zklock/listed/{beta_node}"), "gamma").await;

    let members = election("x").members().await.unwrap();
    let ids: Vec<_> = members.iter().map(|m| (m.participant.as_str(), m.is_leader)).collect();
    assert_eq!(ids, [("alpha", true), ("beta", false), ("gamma", false)]);
    assert_eq!(format!("/zklock/listed/{}", members[0].node), leader.node_path());
    assert_eq!(members[0].token, leader.fencing_token());
    assert!(members.iter().all(|m| m.session == c.session_id().unwrap()));
    let shown = election("x").leader().await.unwrap().expect("a leader");
    assert_eq!(shown.participant, "alpha");

    // Inspection tells an election group apart from a mutex.
    let view = c.inspect("listed").await.unwrap().unwrap();
    assert_eq!(view.recipe, RecipeKind::Election);
    assert!(view.holders.iter().chain(&view.waiters).all(|n| n.side == Side::Member));

    leader.release().await.unwrap();
    let beta = tokio::time::timeout(SOON, beta_waits).await.unwrap().unwrap().unwrap();
    assert_eq!(beta.participant_id(), "beta");
    beta.release().await.unwrap();
    let gamma = tokio::time::timeout(SOON, gamma_waits).await.unwrap().unwrap().unwrap();
    gamma.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_leader_watch_reports_every_change_of_leader() {
    let zk = server();
    let (a, b) = (client(&zk.connect_string()).await, client(&zk.connect_string()).await);
    let follow = a.election("watched").unwrap();
    let mut leader = follow.watch_leader().await.unwrap();
    assert_eq!(*leader.borrow(), None, "nobody leads yet");

    let first = a.election("watched").unwrap().with_participant_id("first").unwrap();
    let first = first.lead().await.unwrap();
    tokio::time::timeout(
        SOON,
        leader.wait_for(|l| l.as_ref().is_some_and(|m| m.participant == "first")),
    )
    .await
    .expect("the watch saw the first leader")
    .unwrap();

    let second = b.election("watched").unwrap().with_participant_id("second").unwrap();
    let waiting = tokio::spawn(async move { second.lead().await });
    wait_watching(&zk, &session_of(&b), first.node_path(), "the second member").await;
    // A member joining behind the leader changes nothing the watch reports.
    assert_eq!(leader.borrow_and_update().as_ref().unwrap().participant, "first");
    first.release().await.unwrap();
    tokio::time::timeout(
        SOON,
        leader.wait_for(|l| l.as_ref().is_some_and(|m| m.participant == "second")),
    )
    .await
    .expect("the watch saw the second leader")
    .unwrap();
    let second = tokio::time::timeout(SOON, waiting)
        .await
        .expect("the second member leads")
        .unwrap()
        .unwrap();
    second.release().await.unwrap();
    tokio::time::timeout(SOON, leader.wait_for(Option::is_none))
        .await
        .expect("the watch saw the group without a leader")
        .unwrap();
    // A leaderless group is a state like any other: the watch reports the leader that ends it.
    let third = b.election("watched").unwrap().with_participant_id("third").unwrap();
    let third = third.lead().await.unwrap();
    tokio::time::timeout(
        SOON,
        leader.wait_for(|l| l.as_ref().is_some_and(|m| m.participant == "third")),
    )
    .await
    .expect("the watch saw the leader after the leaderless group")
    .unwrap();
    third.release().await.unwrap();
    tokio::time::timeout(SOON, leader.wait_for(Option::is_none))
        .await
        .expect("the watch saw the group without a leader again")
        .unwrap();

    // Closing the client ends the watch: the receiver learns that its sender is gone.
    a.close().await;
    tokio::time::timeout(SOON, async { while leader.changed().await.is_ok() {} })
        .await
        .expect("the watch ends with its client");
}

/// The leader is cut off from the ensemble: its loss is signalled after `loss_after`, its
/// work is stopped, and only after that does the server expire its session and let the next
/// member lead, with a larger token.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_cut_off_past_its_session_is_told_before_the_next_leads() {
    let zk = server();
    let proxy = FaultProxy::start(zk.addr()).unwrap();
    let cut = cut_off_able(&proxy).await;
    let other = client(&zk.connect_string()).await;
    let leadership = cut.election("cut-off").unwrap().lead().await.unwrap();
    let next = other.election("cut-off").unwrap();
    let waiting = tokio::spawn(async move { next.lead().await });
    wait_watching(&zk, &session_of(&other), leadership.node_path(), "the next member").await;

    let (started_tx, started) = tokio::sync::oneshot::channel();
    let dropped = Arc::new(AtomicBool::new(false));
    let work = {
        let dropped = dropped.clone();
        async move {
            let _mark = scopeguard(dropped);
            started_tx.send(()).unwrap();
            std::future::pending::<()>().await
        }
    };
    let (outcome, ()) = tokio::join!(tokio::time::timeout(SOON, leadership.run(work)), async {
        started.await.unwrap();
        proxy.blackhole();
    });
    let outcome = outcome.expect("the work was stopped");
    assert!(matches!(outcome, Err(LockError::Lost { .. })), "{outcome:?}");
    assert!(dropped.load(Ordering::SeqCst), "the leader's work was dropped");
    assert!(!leadership.is_leader());
    assert!(
        !waiting.is_finished(),
        "the next member led before the old leader was told"
    );

    let next = tokio::time::timeout(SOON, waiting).await.unwrap().unwrap().unwrap();
    assert!(next.fencing_token() > leadership.fencing_token());
    next.release().await.unwrap();
    proxy.pass();
}

/// Sets the flag when dropped.
fn scopeguard(flag: Arc<AtomicBool>) -> impl Drop {
    struct Mark(Arc<AtomicBool>);
    impl Drop for Mark {
        fn drop(&mut self) {
            self.0.store(true, Ordering::SeqCst);
        }
    }
    Mark(flag)
}

/// The service's body runs only while leading: stopped when its member is cut off, and run
/// again, as a new term with a larger token, once the member leads again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_service_restarts_its_body_on_regaining_leadership() {
    let zk = server();
    let proxy = FaultProxy::start(zk.addr()).unwrap();
    let served = cut_off_able(&proxy).await;
    let other = client(&zk.connect_string()).await;
    let view = raw(&zk.connect_string()).await;
    let (terms_tx, mut terms) = mpsc::unbounded_channel();
    let ended = Arc::new(AtomicU64::new(0));
    let service = {
        let ended = ended.clone();
        served
            .election("served")
            .unwrap()
            .serve_with(
                ServeOptions::default().backoff(Duration::from_millis(50), Duration::from_millis(200)),
                move |leading| {
                    let (terms_tx, ended) = (terms_tx.clone(), ended.clone());
                    async move {
                        terms_tx.send((leading.term(), leading.fencing_token())).unwrap();
                        let _count = CountOnDrop(ended);
                        std::future::pending::<()>().await
                    }
                },
            )
            .unwrap()
    };
    let (term, first_token) = tokio::time::timeout(SOON, terms.recv()).await.unwrap().unwrap();
    assert_eq!(term, 1);
    assert!(service.is_leading());

    // Cut off: the body is stopped, and `other` leads once the session has expired.
    let mut leading = service.leading();
    proxy.blackhole();
    tokio::time::timeout(SOON, leading.wait_for(|l| !l))
        .await
        .expect("the service noticed the loss")
        .unwrap();
    assert_eq!(ended.load(Ordering::SeqCst), 1, "the first term's body was dropped");
    let theirs = tokio::time::timeout(SOON, other.election("served").unwrap().lead())
        .await
        .unwrap()
        .unwrap();
    proxy.pass();
    // The service rejoins behind `other` and leads again when `other` leaves.
    let rejoined = eventually(SOON, || async { member_nodes(&view, "served").await.len() == 2 }).await;
    assert!(
        rejoined,
        "the service never rejoined: {:?}",
        member_nodes(&view, "served").await
    );
    assert!(terms.try_recv().is_err(), "a body ran while another member led");
    theirs.release().await.unwrap();
    let (term, token) = tokio::time::timeout(SOON, terms.recv()).await.unwrap().unwrap();
    assert_eq!(term, 2);
    assert!(token > first_token);
    service.shutdown(Duration::from_secs(5)).await;
    assert_eq!(ended.load(Ordering::SeqCst), 2);
    assert!(
        member_nodes(&view, "served").await.is_empty(),
        "shutdown left the group"
    );
}

struct CountOnDrop(Arc<AtomicU64>);

impl Drop for CountOnDrop {
    fn drop(&mut self) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }
}

/// Shutdown hands over: the body is told and returns, leadership is given up before
/// `shutdown` returns, and the waiting member leads at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_lets_the_body_finish_and_hands_leadership_over() {
    let zk = server();
    let (a, b) = (client(&zk.connect_string()).await, client(&zk.connect_string()).await);
    let finished = Arc::new(AtomicBool::new(false));
    let service = {
        let finished = finished.clone();
        a.election("handover")
            .unwrap()
            .serve(move |mut leading| {
                let finished = finished.clone();
                async move {
                    leading.handing_over().await;
                    assert!(leading.is_handing_over());
                    finished.store(true, Ordering::SeqCst);
                }
            })
            .unwrap()
    };
    let mut leading = service.leading();
    tokio::time::timeout(SOON, leading.wait_for(|l| *l))
        .await
        .unwrap()
        .unwrap();
    let next = b.election("handover").unwrap();
    let waiting = tokio::spawn(async move { next.lead().await });
    let leader_node = a.election("handover").unwrap().leader().await.unwrap().unwrap().node;
    wait_watching(&zk, &session_of(&b), &format!("/zklock/handover/{leader_node}"), "b").await;

    service.shutdown(SOON).await;
    assert!(finished.load(Ordering::SeqCst), "the body finished its hand-over");
    // Leadership was given up before shutdown returned: the next member is granted on the
    // notification of that delete, without waiting for any session to end.
    let next = tokio::time::timeout(SOON, waiting).await.unwrap().unwrap().unwrap();
    next.release().await.unwrap();
}

/// A service on `group` whose body leads until it is dropped, setting the returned flag then;
/// returned once it leads.
async fn leading_until_dropped(c: &LockClient, group: &str) -> (zklock_runtime::LeaderService, Arc<AtomicBool>) {
    let dropped = Arc::new(AtomicBool::new(false));
    let service = {
        let dropped = dropped.clone();
        c.election(group)
            .unwrap()
            .serve(move |_leading| {
                let dropped = dropped.clone();
                async move {
                    let _mark = scopeguard(dropped);
                    std::future::pending::<()>().await
                }
            })
            .unwrap()
    };
    let mut leading = service.leading();
    tokio::time::timeout(SOON, leading.wait_for(|l| *l))
        .await
        .expect("the service leads")
        .unwrap();
    (service, dropped)
}

/// A body that ignores the hand-over is dropped after the grace period.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_drops_a_body_that_outlives_the_grace_period() {
    let zk = server();
    let a = client(&zk.connect_string()).await;
    let view = raw(&zk.connect_string()).await;
    let (service, dropped) = leading_until_dropped(&a, "stubborn").await;
    assert!(!dropped.load(Ordering::SeqCst));
    tokio::time::timeout(SOON, service.shutdown(Duration::from_millis(100)))
        .await
        .expect("shutdown does not wait for a body past its grace");
    assert!(dropped.load(Ordering::SeqCst), "the body was dropped");
    assert!(member_nodes(&view, "stubborn").await.is_empty());
}

/// Dropping the service stops the body at once and leaves the group in the background.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropping_the_service_stops_the_body_and_leaves_the_group() {
    let zk = server();
    let a = client(&zk.connect_string()).await;
    let view = raw(&zk.connect_string()).await;
    let (service, dropped) = leading_until_dropped(&a, "dropped").await;
    assert!(!dropped.load(Ordering::SeqCst));
    drop(service);
    let left = eventually(SOON, || async { member_nodes(&view, "dropped").await.is_empty() }).await;
    assert!(left, "the member's node outlived the service");
    assert!(dropped.load(Ordering::SeqCst));
}

/// A `lead()` dropped while it waits leaves the group: its node is removed, and the member
/// after it moves up.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_member_that_stops_waiting_leaves_the_group() {
    let zk = server();
    let c = client(&zk.connect_string()).await;
    let view = raw(&zk.connect_string()).await;
    let leader = c.election("patient").unwrap().lead().await.unwrap();
    let election = c.election("patient").unwrap();
    let gave_up = tokio::time::timeout(Duration::from_millis(300), election.lead()).await;
    assert!(gave_up.is_err(), "granted while another member leads");
    c.flush().await;
    assert_eq!(member_nodes(&view, "patient").await, [leader.node_path().to_owned()]);
    let err = election.lead_timeout(Duration::from_millis(300)).await.unwrap_err();
    assert!(matches!(err, LockError::Timeout { .. }), "{err:?}");
    assert!(election.try_lead().await.unwrap().is_none());
    c.flush().await;
    assert_eq!(member_nodes(&view, "patient").await, [leader.node_path().to_owned()]);
    leader.release().await.unwrap();
    election
        .try_lead()
        .await
        .unwrap()
        .expect("alone, it leads")
        .release()
        .await
        .unwrap();
}

#[tokio::test]
async fn bad_group_names_and_participant_ids_are_refused() {
    let zk = server();
    let c = client(&zk.connect_string()).await;
    assert!(matches!(c.election("a/b"), Err(LockError::InvalidName { .. })));
    assert!(matches!(c.election(""), Err(LockError::InvalidName { .. })));
    let election = c.election("ids").unwrap();
    assert!(matches!(
        election.clone().with_participant_id(""),
        Err(LockError::InvalidConfig { .. })
    ));
    assert!(matches!(
        election.clone().with_participant_id("x".repeat(257)),
        Err(LockError::InvalidConfig { .. })
    ));
    assert_eq!(
        election.participant_id(),
        c.identity(),
        "the client's identity by default"
    );
}

#[test]
fn a_service_or_a_watch_without_a_runtime_is_an_error_not_a_panic() {
    let c = LockClient::builder("127.0.0.1:1").build().unwrap();
    let election = c.election("no-runtime").unwrap();
    let err = election.serve(|_| async {}).unwrap_err();
    assert!(matches!(err, LockError::InvalidConfig { .. }), "{err:?}");
}

/// A body that panics ends its term, not the service: leadership is given up and the member
/// joins again, running the body as the next term.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_panicking_body_ends_its_term_and_the_service_goes_on() {
    let zk = server();
    let c = client(&zk.connect_string()).await;
    let (terms_tx, mut terms) = mpsc::unbounded_channel();
    let service = c
        .election("panicky")
        .unwrap()
        .serve_with(
            ServeOptions::default().backoff(Duration::from_millis(20), Duration::from_millis(100)),
            move |leading| {
                let terms_tx = terms_tx.clone();
                async move {
                    terms_tx.send(leading.term()).unwrap();
                    if leading.term() == 1 {
                        panic!("the first term's body fails");
                    }
                    std::future::pending::<()>().await
                }
            },
        )
        .unwrap();
    assert_eq!(tokio::time::timeout(SOON, terms.recv()).await.unwrap(), Some(1));
    assert_eq!(tokio::time::timeout(SOON, terms.recv()).await.unwrap(), Some(2));
    assert!(service.is_leading());
    service.shutdown(Duration::from_secs(1)).await;
}

/// An election names its group and its directory; a leadership confirms with the server that
/// it still leads, and turns into the lock guard of the same hold (same node, same token),
/// which sees the node's deletion as any guard does.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leadership_confirms_with_the_server_and_becomes_a_guard() {
    let zk = server();
    let view = raw(&zk.connect_string()).await;
    let c = client(&zk.connect_string()).await;
    let election = c.election("confirmed").unwrap();
    assert_eq!(election.group(), "confirmed");
    assert_eq!(election.path(), "/zklock/confirmed");
    let leadership = election.lead().await.unwrap();
    leadership
        .ensure_held()
        .await
        .expect("the server knows the leader's node");
    let (node, token) = (leadership.node_path().to_owned(), leadership.fencing_token());
    assert!(node.starts_with("/zklock/confirmed/"), "{node}");

    let guard = leadership.into_guard();
    assert_eq!((guard.node_path(), guard.fencing_token()), (node.as_str(), token));
    guard.ensure_held().await.expect("still held as a guard");
    view.delete(&node, None).await.unwrap();
    // NotHeld from the server, or Lost once the node's own watch has told of the deletion.
    let checked = guard.ensure_held().await;
    assert!(
        matches!(checked, Err(LockError::NotHeld { .. } | LockError::Lost { .. })),
        "the guard still claims the deleted node: {checked:?}"
    );
}
