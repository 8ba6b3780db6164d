//! zklock members and Apache Curator `LeaderLatch`es in one election group, against a real
//! ZooKeeper: exactly one of them leads, leadership passes between them in join order when
//! the leader leaves, is killed, or is cut off past its session, and each lists the other
//! among the participants with its id.
//!
//! The Curator side is a real JVM running the Debian Curator jars
//! (`zklock_testing::curator::CuratorPeer`).

mod support;

use std::time::Duration;

use support::{client, cut_off_able, server, session_of, wait_watching};
use zklock_runtime::LockError;
use zklock_testing::curator::{CuratorPeer, LatchParticipant};
use zklock_testing::FaultProxy;

/// Generous bound for anything that should happen promptly on a loaded machine.
const SOON: Duration = Duration::from_secs(20);

async fn curator(connect: &str) -> CuratorPeer {
    CuratorPeer::start(connect)
        .await
        .expect("start the Curator peer (run scripts/install-deps.sh)")
}

fn participant(id: &str, is_leader: bool) -> LatchParticipant {
    LatchParticipant {
        id: id.to_owned(),
        is_leader,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_zklock_member_waits_behind_a_curator_leader_and_leads_when_it_closes() {
    let zk = server();
    let peer = curator(&zk.connect_string()).await;
    let curator_node = peer.leader_latch("l", "/zklock/mixed-a", "curator-1").await.unwrap();
    peer.wait_leader("l", SOON).await.unwrap();

    let c = client(&zk.connect_string()).await;
    let election = c.election("mixed-a").unwrap().with_participant_id("zklock-1").unwrap();
    let waiting = {
        let election = election.clone();
        tokio::spawn(async move { election.lead().await })
    };
    wait_watching(&zk, &session_of(&c), &curator_node, "the zklock member").await;
    assert!(!waiting.is_finished(), "zklock led beside a Curator leader");
    assert!(peer.has_leadership("l").await.unwrap());

    // Both sides list both members, in the same order, with the same leader.
    let ours: Vec<_> = election
        .members()
        .await
        .unwrap()
        .into_iter()
        .map(|m| (m.participant, m.is_leader))
        .collect();
    assert_eq!(ours, [("curator-1".to_owned(), true), ("zklock-1".to_owned(), false)]);
    assert_eq!(
        peer.latch_participants("l").await.unwrap(),
        [participant("curator-1", true), participant("zklock-1", false)]
    );

    peer.close_latch("l").await.unwrap();
    let leadership = tokio::time::timeout(SOON, waiting).await.unwrap().unwrap().unwrap();
    assert!(leadership.is_leader());
    assert_eq!(election.leader().await.unwrap().unwrap().participant, "zklock-1");
    leadership.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_curator_latch_waits_behind_a_zklock_leader_and_leads_when_it_relinquishes() {
    let zk = server();
    let c = client(&zk.connect_string()).await;
    let election = c.election("mixed-b").unwrap().with_participant_id("zklock-1").unwrap();
    let leadership = election.lead().await.unwrap();

    let peer = curator(&zk.connect_string()).await;
    peer.leader_latch("l", "/zklock/mixed-b", "curator-1").await.unwrap();
    // Curator has read the group, found zklock's node ahead and watches it.
    wait_watching(&zk, peer.session_id(), leadership.node_path(), "the Curator latch").await;
    assert!(
        !peer.has_leadership("l").await.unwrap(),
        "Curator led beside a zklock leader"
    );
    assert_eq!(peer.latch_leader("l").await.unwrap(), participant("zklock-1", true));
    assert_eq!(
        peer.latch_participants("l").await.unwrap(),
        [participant("zklock-1", true), participant("curator-1", false)]
    );

    leadership.release().await.unwrap();
    peer.wait_leader("l", SOON).await.unwrap();
    let leader = election.leader().await.unwrap().expect("Curator leads");
    assert_eq!(leader.participant, "curator-1");
    // A zklock member that joins now queues behind Curator.
    assert!(election.try_lead().await.unwrap().is_none());
    peer.close_latch("l").await.unwrap();
}

/// The Curator leader's process is killed: its session expires and the zklock member behind
/// it leads.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_curator_leader_hands_leadership_to_the_zklock_member_behind_it() {
    let zk = server();
    let peer = curator(&zk.connect_string()).await;
    let curator_node = peer.leader_latch("l", "/zklock/mixed-c", "curator-1").await.unwrap();
    peer.wait_leader("l", SOON).await.unwrap();
    let c = client(&zk.connect_string()).await;
    let election = c.election("mixed-c").unwrap();
    let waiting = {
        let election = election.clone();
        tokio::spawn(async move { election.lead().await })
    };
    wait_watching(&zk, &session_of(&c), &curator_node, "the zklock member").await;

    drop(peer); // kills the JVM: nothing is closed, the session just stops
    let leadership = tokio::time::timeout(SOON, waiting)
        .await
        .expect("the zklock member leads once Curator's session expired")
        .unwrap()
        .unwrap();
    let members = election.members().await.unwrap();
    assert_eq!(members.len(), 1, "Curator's node went with its session: {members:?}");
    assert!(members[0].is_leader);
    leadership.release().await.unwrap();
}

/// The zklock leader is cut off past its session: it is told it lost leadership before the
/// server expires its session, and only then does the Curator latch behind it lead.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_zklock_leader_cut_off_past_its_session_is_told_before_curator_leads() {
    let zk = server();
    let proxy = FaultProxy::start(zk.addr()).unwrap();
    let cut = cut_off_able(&proxy).await;
    let leadership = cut.election("mixed-d").unwrap().lead().await.unwrap();
    let peer = curator(&zk.connect_string()).await;
    peer.leader_latch("l", "/zklock/mixed-d", "curator-1").await.unwrap();
    wait_watching(&zk, peer.session_id(), leadership.node_path(), "the Curator latch").await;

    proxy.blackhole();
    let err = tokio::time::timeout(SOON, leadership.lost())
        .await
        .expect("the cut-off leader is told");
    assert!(matches!(err, LockError::Lost { .. }), "{err:?}");
    assert!(!leadership.is_leader());
    assert!(
        !peer.has_leadership("l").await.unwrap(),
        "Curator led before the old leader was told"
    );
    peer.wait_leader("l", SOON).await.unwrap();
    proxy.pass();
    peer.close_latch("l").await.unwrap();
}
