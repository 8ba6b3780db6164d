//! Known failure modes of ZooKeeper locks, each reproduced with the fault proxy against a real
//! server: CURATOR-206, CURATOR-678, connection loss during create, session expiry, and leader
//! failover. (CURATOR-604's ownership check is tested next to the code, in `queue.rs`.)

mod support;

use std::time::{Duration, Instant};

use support::{client, contenders, eventually, raw, server};
use zklock_runtime::{zk, Lock, LockClient, LockError, LockGuard, SessionStatus};
use zklock_testing::{FaultProxy, ZkEnsemble};

const SESSION: Duration = Duration::from_secs(4);

async fn client_via(proxy: &FaultProxy) -> LockClient {
    LockClient::builder(proxy.connect_string())
        .session_timeout(SESSION)
        .connect()
        .await
        .unwrap()
}

/// The loss-timing guarantee, as both fault tests check it: `other` queues behind the holder of
/// `guard`, `fault` cuts the holder off, and the holder must be told it lost the lock before
/// `other` is granted it (with a higher token).
async fn told_before_another_is_granted(
    guard: &LockGuard,
    other: &LockClient,
    view: &zk::Client,
    fault_name: &str,
    fault: impl FnOnce(),
) {
    let loss = tokio::spawn({
        let signal = guard.loss_signal();
        async move {
            let err = signal.lost().await;
            (Instant::now(), err)
        }
    });
    let contender = tokio::spawn({
        let lock = other.mutex(guard.name()).unwrap();
        async move {
            let g = lock.acquire_timeout(Duration::from_secs(30)).await.unwrap();
            (Instant::now(), g.fencing_token())
        }
    });
    // The other client is queued (its node is in the lock dir) before the fault.
    let dir = guard.node_path().rsplit_once('/').unwrap().0.to_owned();
    assert!(
        eventually(Duration::from_secs(20), || async {
            contenders(view, &dir).await.len() == 2
        })
        .await,
        "the other client never queued"
    );
    let cut = Instant::now();
    fault();
    let (lost_at, err) = tokio::time::timeout(Duration::from_secs(20), loss)
        .await
        .expect("loss signalled")
        .unwrap();
    assert!(matches!(err, LockError::Lost { .. }), "{err:?}");
    let (granted_at, token) = tokio::time::timeout(Duration::from_secs(30), contender)
        .await
        .expect("granted once the holder's session expired")
        .unwrap();
    eprintln!(
        "{fault_name} at 0; holder told of loss at {:?}; other client granted at {:?}",
        lost_at - cut,
        granted_at - cut
    );
    assert!(
        lost_at < granted_at,
        "the other client was granted the lock before the holder learned it lost it"
    );
    assert!(token > guard.fencing_token());
}

/// CURATOR-206: a holder cut off until its session expires must learn that it lost the lock
/// before anyone else can be granted it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn curator_206_partitioned_holder_learns_of_loss_before_another_acquires() {
    // A 500 ms tick allows a 10 s session: the holder is told at about 0.4 × 10 s (the client
    // notices the dead connection) + 2.5 s (loss_after), leaving seconds of margin before the
    // server can expire the session, even when the machine is busy.
    let zk = zklock_testing::ZkServer::builder()
        .tick_time(Duration::from_millis(500))
        .start()
        .unwrap();
    let proxy = FaultProxy::start(zk.addr()).unwrap();
    let holder = LockClient::builder(proxy.connect_string())
        .session_timeout(Duration::from_secs(10))
        .connect()
        .await
        .unwrap();
    let other = client(&zk.connect_string()).await;
    let view = raw(&zk.connect_string()).await;
    let guard = holder.mutex("partition").unwrap().acquire().await.unwrap();
    told_before_another_is_granted(&guard, &other, &view, "partitioned", || proxy.blackhole()).await;
    assert!(guard.is_lost());
    assert!(holder.metrics().lost == 0, "loss is counted when the hold ends");
    drop(guard);
    assert_eq!(holder.metrics().lost, 1);
}

/// CURATOR-678: a release whose delete hits a connection loss must not forget the node; it
/// retries once the connection is back, and the lock keeps working.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn curator_678_release_during_connection_loss_still_deletes_the_node() {
    let zk = server();
    let proxy = FaultProxy::start(zk.addr()).unwrap();
    let holder = client_via(&proxy).await;
    let session = holder.session_id();
    let lock = holder.mutex("release-loss").unwrap();
    let guard = lock.acquire().await.unwrap();
    let node = guard.node_path().to_owned();
    let mut status = holder.watch_status();
    proxy.blackhole();
    let release = tokio::spawn(guard.release());
    // The client noticed the partition: the release's delete is stuck behind it.
    tokio::time::timeout(
        Duration::from_secs(20),
        status.wait_for(|s| matches!(s, SessionStatus::Suspended | SessionStatus::Lost)),
    )
    .await
    .expect("the holder never noticed the partition")
    .unwrap();
    let raw = raw(&zk.connect_string()).await;
    assert!(
        raw.check_stat(&node).await.unwrap().is_some(),
        "the delete got through the partition"
    );
    assert!(!release.is_finished(), "release gave up during the partition");
    proxy.pass();
    proxy.reset_all();
    tokio::time::timeout(Duration::from_secs(10), release)
        .await
        .expect("release finished")
        .unwrap()
        .unwrap();
    assert_eq!(
        holder.session_id(),
        session,
        "the session survived; only the retry can have deleted the node"
    );
    assert_eq!(
        holder.status(),
        SessionStatus::Connected,
        "the session must have survived the partition (not expired)"
    );
    assert!(
        raw.check_stat(&node).await.unwrap().is_none(),
        "node outlived its release"
    );
    let again = lock
        .acquire_timeout(Duration::from_secs(5))
        .await
        .expect("later acquires keep working");
    again.release().await.unwrap();
}

/// Guarantee 7: a waiter whose session is reported lost while it waits (the connection down
/// for `loss_after`, the session alive on the server) and whose turn comes meanwhile does not
/// keep the grant of the node it queued with: the count of losses is read before the attempt,
/// so that grant is given up and the acquisition starts over, in the same session.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_grant_in_a_session_reported_lost_meanwhile_is_given_up() {
    // A 10 s session with a 1 s `loss_after`: the loss is reported about 5 s into the cut,
    // seconds before the server could expire the session.
    let zk = zklock_testing::ZkServer::builder()
        .tick_time(Duration::from_millis(500))
        .start()
        .unwrap();
    let proxy = FaultProxy::start(zk.addr()).unwrap();
    let waiter = LockClient::builder(proxy.connect_string())
        .session_timeout(Duration::from_secs(10))
        .loss_after(Duration::from_secs(1))
        .connect()
        .await
        .unwrap();
    let session = waiter.session_id();
    let holder = client(&zk.connect_string()).await;
    let view = raw(&zk.connect_string()).await;
    let dir = "/zklock/lost-meanwhile";
    let held = holder.mutex("lost-meanwhile").unwrap().acquire().await.unwrap();
    let waiting = tokio::spawn({
        let lock = waiter.mutex("lost-meanwhile").unwrap();
        async move { lock.acquire_timeout(Duration::from_secs(60)).await }
    });
    assert!(
        eventually(Duration::from_secs(20), || async {
            contenders(&view, dir).await.len() == 2
        })
        .await,
        "the waiter never queued"
    );
    let queued_with = contenders(&view, dir)
        .await
        .into_iter()
        .find(|c| !held.node_path().ends_with(c.as_str()))
        .expect("the waiter's node");

    let mut status = waiter.watch_status();
    proxy.blackhole();
    tokio::time::timeout(Duration::from_secs(20), status.wait_for(|s| *s == SessionStatus::Lost))
        .await
        .expect("the loss was never reported")
        .unwrap();
    // The turn comes while the waiter is cut off; it learns of it once reconnected.
    held.release().await.unwrap();
    proxy.pass();
    proxy.reset_all();

    let guard = tokio::time::timeout(Duration::from_secs(30), waiting)
        .await
        .expect("the waiter was never granted")
        .unwrap()
        .expect("granted once reconnected");
    assert_eq!(waiter.session_id(), session, "the session survived the cut");
    assert!(!guard.is_lost());
    assert!(
        !guard.node_path().ends_with(queued_with.as_str()),
        "granted the node queued before the loss was reported: {queued_with}"
    );
    guard.release().await.unwrap();
}

/// Connection loss during create: the create reaches the server but its answer is lost. The
/// contender must find its own protected node instead of creating a second one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connection_loss_during_create_finds_the_protected_node() {
    let zk = server();
    let proxy = FaultProxy::start(zk.addr()).unwrap();
    let c = LockClient::builder(proxy.connect_string())
        .session_timeout(SESSION)
        .loss_after(SESSION / 2)
        .connect()
        .await
        .unwrap();
    let raw = raw(&zk.connect_string()).await;
    // Keep the lock dir alive (a container is reaped once empty) with a child that is no
    // contender (no sequence number), so the create is a single request.
    raw.mkdir(
        "/zklock/lost-answer",
        &zk::CreateMode::Container.with_acls(zk::Acls::anyone_all()),
    )
    .await
    .unwrap();
    raw.create(
        "/zklock/lost-answer/keeper",
        b"",
        &zk::CreateMode::Ephemeral.with_acls(zk::Acls::anyone_all()),
    )
    .await
    .unwrap();
    let queued = || async {
        contenders(&raw, "/zklock/lost-answer")
            .await
            .into_iter()
            .filter(|c| c != "keeper")
            .collect::<Vec<_>>()
    };
    // Every chunk is held LATENCY in each direction (less than the client's ping interval, so
    // the proxy keeps up): the create reaches the server no sooner than LATENCY after the
    // acquisition starts, and its answer reaches the client no sooner than 2 × LATENCY after.
    // The reconnect after the cut goes through the same latency for a while; the client's
    // loss_after is raised past it, so a grant after the reconnect is trusted (a grant in a
    // session reported lost meanwhile is given up and taken again, with a new node).
    const LATENCY: Duration = Duration::from_millis(500);
    proxy.set_latency(LATENCY);
    let started = Instant::now();
    let acquire = tokio::spawn({
        let lock = c.mutex("lost-answer").unwrap();
        async move { lock.acquire_timeout(Duration::from_secs(20)).await }
    });
    let arrived = eventually(Duration::from_secs(10), || async { queued().await.len() == 1 }).await;
    assert!(arrived, "the create did not reach the server");
    let created = queued().await;
    let cut_at = started.elapsed();
    proxy.reset_all();
    proxy.set_latency(Duration::ZERO);
    // The connections were cut while the create's answer was still inside the proxy: the
    // fault was injected only if that holds.
    assert!(
        cut_at < 2 * LATENCY,
        "too slow to cut the connection before the answer could arrive ({cut_at:?}); the fault was not injected"
    );
    let guard = acquire.await.unwrap().expect("acquired after the lost answer");
    assert_eq!(
        guard.node_path(),
        format!("/zklock/lost-answer/{}", created[0]),
        "it adopted the node it created"
    );
    assert_eq!(queued().await.len(), 1, "an orphan was left behind");
    guard.release().await.unwrap();
}

/// A scope entered while its hold was sound stops re-entering once the session is reported
/// lost during the scope (the connection cut for longer than `loss_after`): a re-entry then
/// answers `Lost`, although it re-entered at once before the cut.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hold_whose_session_is_lost_during_its_scope_is_not_reentered() {
    let zk = server();
    let proxy = FaultProxy::start(zk.addr()).unwrap();
    let c = client_via(&proxy).await;
    let lock = c.mutex("lost-session-in-scope").unwrap();
    let guard = lock.acquire().await.unwrap();
    guard
        .scope(async {
            let share = lock
                .acquire_timeout(Duration::from_secs(5))
                .await
                .expect("re-enters a sound hold");
            assert_eq!(share.fencing_token(), guard.fencing_token());
            drop(share);
            proxy.blackhole();
            tokio::time::timeout(Duration::from_secs(20), guard.lost())
                .await
                .expect("the holder learns of the loss");
            refused_as_lost(&lock).await;
            // Reconnecting does not make the hold sound again.
            proxy.pass();
            let mut status = c.watch_status();
            let settled = tokio::time::timeout(
                Duration::from_secs(20),
                status.wait_for(|s| matches!(s, SessionStatus::Connected | SessionStatus::Expired)),
            )
            .await;
            assert!(
                settled.is_ok(),
                "the client neither reconnected nor expired: {:?}",
                c.status()
            );
            refused_as_lost(&lock).await;
        })
        .await;
    drop(guard);
    c.close().await;
}

/// Asserts that acquiring `lock` (inside the scope of its lost hold) answers `Lost` at once.
async fn refused_as_lost(lock: &Lock) {
    match lock.acquire_timeout(Duration::from_secs(5)).await {
        Err(LockError::Lost { .. }) => {}
        other => panic!("a lost hold was re-entered: {other:?}"),
    }
}

/// After a session expiry, held locks are lost and never count as held again; new
/// acquisitions transparently open a new session.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn session_expiry_reports_loss_and_later_acquires_use_a_new_session() {
    let zk = server();
    let proxy = FaultProxy::start(zk.addr()).unwrap();
    let c = client_via(&proxy).await;
    let first_session = c.session_id().unwrap();
    let lock = c.mutex("expiry").unwrap();
    let guard = lock.acquire().await.unwrap();
    let old_node = guard.node_path().to_owned();
    proxy.blackhole();
    let mut status = c.watch_status();
    let expired = tokio::time::timeout(
        Duration::from_secs(20),
        status.wait_for(|s| *s == SessionStatus::Expired),
    )
    .await
    .is_ok();
    assert!(expired, "session never expired: {:?}", c.status());
    proxy.pass();
    assert!(guard.is_lost());
    // Code inside the hold's scope re-acquiring does not get the dead hold back.
    assert!(matches!(
        guard.scope(lock.acquire_timeout(Duration::from_secs(5))).await,
        Err(LockError::Lost { .. })
    ));
    drop(guard);
    let fresh = lock
        .acquire_timeout(Duration::from_secs(10))
        .await
        .expect("acquire on a new session");
    assert_ne!(c.session_id().unwrap(), first_session);
    assert_ne!(fresh.node_path(), old_node);
    let raw = raw(&zk.connect_string()).await;
    let (_, stat) = raw.get_data(fresh.node_path()).await.unwrap();
    assert_eq!(stat.ephemeral_owner, c.session_id().unwrap());
    assert!(
        raw.check_stat(&old_node).await.unwrap().is_none(),
        "the old session's node survived its expiry"
    );
}

/// A held lock survives the ensemble losing its leader, as long as the session lives.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn held_lock_survives_leader_failover() {
    // A 1 s tick allows a 20 s session, and loss_after 15 s covers an election plus the
    // client's reconnect backoff (its retries to three members come at about 0.3, 1, 2.3, 4.8
    // and 9.7 s) on a busy machine.
    let ensemble = ZkEnsemble::builder(3)
        .tick_time(Duration::from_millis(1000))
        .start()
        .unwrap();
    let connect = ensemble.connect_string();
    let holder = LockClient::builder(&connect)
        .session_timeout(Duration::from_secs(20))
        .loss_after(Duration::from_secs(15))
        .connect()
        .await
        .unwrap();
    let other = LockClient::builder(&connect)
        .session_timeout(Duration::from_secs(20))
        .connect()
        .await
        .unwrap();
    let guard = holder.mutex("failover").unwrap().acquire().await.unwrap();
    let leader = ensemble.wait_for_quorum(Duration::from_secs(60)).expect("a leader");
    ensemble.kill(leader).unwrap();
    ensemble.wait_for_quorum(Duration::from_secs(60)).unwrap();
    let mut status = holder.watch_status();
    tokio::time::timeout(
        Duration::from_secs(40),
        status.wait_for(|s| *s == SessionStatus::Connected),
    )
    .await
    .expect("holder reconnected")
    .unwrap();
    assert!(!guard.is_lost(), "the hold was given up during failover");
    // A try answers at once while its client is not connected: wait for the other client too.
    let mut other_status = other.watch_status();
    let other_back = tokio::time::timeout(
        Duration::from_secs(40),
        other_status.wait_for(|s| *s == SessionStatus::Connected),
    )
    .await
    .is_ok();
    assert!(other_back, "the other client never reconnected: {:?}", other.status());
    let lock = other.mutex("failover").unwrap();
    assert!(
        lock.try_acquire().await.unwrap().is_none(),
        "another client got a held lock after failover"
    );
    let token = guard.fencing_token();
    guard.release().await.unwrap();
    let next = lock.acquire_timeout(Duration::from_secs(10)).await.unwrap();
    assert!(next.fencing_token() > token);
}

/// A holder whose server is cut off from the rest of the ensemble (but not from the holder)
/// keeps a healthy-looking connection until that member gives up on its leader, while the
/// others expire the holder's session and grant the lock. With the loss-timing precondition
/// met (`session timeout > syncLimit × tickTime + loss_after + margin`: here 4 s > 1 s + 1 s +
/// 2 s), the holder is told before anyone else is granted. With the ensemble's syncLimit at 25
/// ticks (5 s, longer than the session) this test fails: the grant comes first.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn holder_on_an_isolated_follower_learns_of_loss_before_another_acquires() {
    let ensemble = ZkEnsemble::builder(3)
        .tick_time(Duration::from_millis(200))
        .sync_limit(5)
        .partitionable()
        .start()
        .unwrap();
    let leader = ensemble.wait_for_quorum(Duration::from_secs(60)).unwrap();
    let follower = (0..ensemble.len()).find(|&i| i != leader).unwrap();
    let others: Vec<String> = (0..ensemble.len())
        .filter(|&i| i != follower)
        .map(|i| ensemble.members()[i].connect_string())
        .collect();
    let holder = LockClient::builder(ensemble.members()[follower].connect_string())
        .session_timeout(SESSION)
        .connect()
        .await
        .unwrap();
    assert_eq!(holder.session_timeout(), Some(SESSION));
    assert_eq!(holder.loss_after(), Some(SESSION / 4));
    let other = LockClient::builder(others.join(","))
        .session_timeout(SESSION)
        .connect()
        .await
        .unwrap();
    let view = raw(&others.join(",")).await;
    let guard = holder.mutex("isolated-member").unwrap().acquire().await.unwrap();
    told_before_another_is_granted(&guard, &other, &view, &format!("member {follower} isolated"), || {
        ensemble.isolate(follower).unwrap()
    })
    .await;
    ensemble.heal(follower).unwrap();
}

/// A create whose answer is lost while it is still being committed, followed by a reconnect to
/// a member that has not applied it yet: the contender must find its node there (`sync` before
/// the listing), not create a second one and leave the first as an orphan ahead of itself.
///
/// Both followers' links to the leader are slowed down, so the create the client sent to the
/// leader stays uncommitted for a few seconds; the client is then moved to a follower, which
/// revalidates the session with the leader and would answer a plain listing without the node.
/// Without the `sync` in `find_protected` this test fails (checked twice with the `sync` taken
/// out: the acquisition, queued behind its own first node, was still waiting at its timeout).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_create_still_in_flight_is_found_after_a_reconnect_to_a_lagging_member() {
    const LAG: Duration = Duration::from_millis(1200);
    // A 1 s tick allows a 20 s session, and the client library gives each connection attempt
    // 2/5 of the session (8 s): a reconnect to a follower waits for the leader to revalidate
    // the session (2 × LAG here) with room to spare on a loaded machine. With a 10 s session
    // (4 s attempts) one run in a loaded flake check timed out: every attempt expired before
    // the revalidation came back, so the session ran out and the acquisition started over.
    // syncLimit (10 s) tolerates the lag.
    let ensemble = ZkEnsemble::builder(3)
        .tick_time(Duration::from_millis(1000))
        .sync_limit(10)
        .partitionable()
        .start()
        .unwrap();
    let leader = ensemble.wait_for_quorum(Duration::from_secs(60)).unwrap();
    let followers: Vec<usize> = (0..ensemble.len()).filter(|&i| i != leader).collect();
    let to_leader = FaultProxy::start(ensemble.members()[leader].addr()).unwrap();
    let to_follower = FaultProxy::start(ensemble.members()[followers[0]].addr()).unwrap();
    // The client shuffles its hosts: with the follower's proxy silent it can only settle on
    // the leader.
    to_follower.blackhole();
    let c = LockClient::builder(format!(
        "{},{}",
        to_leader.connect_string(),
        to_follower.connect_string()
    ))
    .session_timeout(Duration::from_secs(20))
    .connect()
    .await
    .unwrap();
    to_follower.pass();
    assert_eq!(to_leader.connection_count(), 1, "the client is not on the leader");
    let view = raw(&ensemble.members()[leader].connect_string()).await;
    view.mkdir(
        "/zklock/in-flight",
        &zk::CreateMode::Container.with_acls(zk::Acls::anyone_all()),
    )
    .await
    .unwrap();
    view.create(
        "/zklock/in-flight/keeper",
        b"",
        &zk::CreateMode::Ephemeral.with_acls(zk::Acls::anyone_all()),
    )
    .await
    .unwrap();
    let queued = || async {
        contenders(&view, "/zklock/in-flight")
            .await
            .into_iter()
            .filter(|c| c != "keeper")
            .collect::<Vec<_>>()
    };
    for &f in &followers {
        ensemble.delay(f, LAG).unwrap();
    }
    let acquire = tokio::spawn({
        let lock = c.mutex("in-flight").unwrap();
        async move { lock.acquire_timeout(Duration::from_secs(60)).await }
    });
    // The create is in the leader's pipeline, waiting for a follower's acknowledgement.
    let leader_server = &ensemble.members()[leader];
    let in_flight = eventually(Duration::from_secs(5), || async {
        outstanding_requests(leader_server) >= 1
    })
    .await;
    assert!(in_flight, "the create never reached the leader");
    // Cut the client off from the leader for good: it reconnects to the follower.
    drop(to_leader);
    let guard = match acquire.await.unwrap() {
        Ok(guard) => guard,
        Err(e) => panic!(
            "not acquired after the lost answer: {e}; client status {:?}, session {:?}, contenders {:?}, \
             connections to the follower {}",
            c.status(),
            c.session_id(),
            queued().await,
            to_follower.connection_count()
        ),
    };
    assert!(
        to_follower.connection_count() >= 1,
        "the client did not move to the follower"
    );
    let nodes = queued().await;
    assert_eq!(nodes.len(), 1, "an orphan was left behind: {nodes:?}");
    assert_eq!(guard.node_path(), format!("/zklock/in-flight/{}", nodes[0]));
    for &f in &followers {
        ensemble.delay(f, Duration::ZERO).unwrap();
    }
    guard.release().await.unwrap();
}

/// `zk_outstanding_requests` from the server's `mntr`, 0 if it does not answer.
fn outstanding_requests(server: &zklock_testing::ZkServer) -> u64 {
    let mntr = tokio::task::block_in_place(|| server.four_letter_word("mntr")).unwrap_or_default();
    mntr.lines()
        .find_map(|l| l.strip_prefix("zk_outstanding_requests"))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0)
}
