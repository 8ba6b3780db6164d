//! Guarantee 9 against a real ensemble: a session that moved to another member while a holder's
//! request was on its way is alive, and the holder's release is retried until its node is gone.
//!
//! The move is made the way ZooKeeper sees one: a second connection takes the holder's session
//! (its id and password) to another member. The holder's next write, sent over the connection
//! the session has left, meets `SessionMoved` at the leader. ZooKeeper 3.8 does not answer that
//! code: the member closes the connection instead (`FinalRequestProcessor`, ZOOKEEPER-710), so
//! the client sees the connection lost, reconnects with its session and must send the delete
//! again. The classification test `a_moved_session_is_retried_not_taken_for_over`
//! (`zklock-runtime/src/error.rs`) pins the same rule for a server that does answer the code.

mod support;

use std::time::Duration;

use support::raw;
use zklock_runtime::{zk, LockClient};
use zklock_testing::ZkEnsemble;

const SOON: Duration = Duration::from_secs(20);

/// The client end (`/ip:port`) of `session`'s connection to `server`, from its `cons` report;
/// `None` when the session has no connection there.
fn connection_of(server: &zklock_testing::ZkServer, session: i64) -> Option<String> {
    let dump = tokio::task::block_in_place(|| server.four_letter_word("cons")).expect("cons answers");
    dump.lines()
        .find(|l| l.contains(&format!("sid=0x{session:x}")))
        .and_then(|l| l.trim().split('[').next())
        .map(str::to_owned)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_in_a_session_that_moved_is_retried_until_the_node_is_gone() {
    let ensemble = ZkEnsemble::start(3).expect("start a 3-member ensemble");
    let leader = ensemble.wait_for_quorum(Duration::from_secs(60)).unwrap();
    // The holder and the second connection each talk to one follower only.
    let followers: Vec<_> = (0..3).filter(|&m| m != leader).collect();
    let member = |m: usize| ensemble.members()[m].connect_string();
    let holder = LockClient::builder(member(followers[0]))
        .session_timeout(Duration::from_secs(4))
        .connect()
        .await
        .unwrap();
    let other = LockClient::builder(member(leader)).connect().await.unwrap();
    let view = raw(&member(leader)).await;

    let guard = holder.mutex("moved").unwrap().acquire_timeout(SOON).await.unwrap();
    let node = guard.node_path().to_owned();
    let session = holder.zookeeper().await.unwrap().session().clone();
    let session_id = holder.session_id().unwrap();
    let waiting = tokio::spawn({
        let lock = other.mutex("moved").unwrap();
        async move { lock.acquire_timeout(SOON).await }
    });
    assert!(
        support::eventually(SOON, || async {
            support::contenders(&view, "/zklock/moved").await.len() == 2
        })
        .await,
        "the other client never queued"
    );

    // The session moves to the other follower: the holder's connection is one it has left.
    let first = &ensemble.members()[followers[0]];
    let before = connection_of(first, session_id).expect("the holder is connected to its follower");
    let mover = zk::Client::connector()
        .with_session(session)
        .connect(&member(followers[1]))
        .await
        .expect("take the holder's session to another member");
    assert_eq!(mover.session_id().0, session_id, "the same session, elsewhere");
    assert_eq!(
        connection_of(first, session_id).as_deref(),
        Some(before.as_str()),
        "the holder's connection is still the one it had: the move alone did not close it"
    );

    // The release's delete meets the move; it is sent again until the node is gone, and only
    // then does the release answer.
    tokio::time::timeout(SOON, guard.release())
        .await
        .expect("the release ended within 20 s")
        .expect("the release succeeded");
    // The delete was answered by the holder's member; the leader's own copy may apply it a
    // moment later.
    view.sync(&node).await.unwrap();
    assert!(
        view.check_stat(&node).await.unwrap().is_none(),
        "the release answered while {node} lives"
    );
    assert_eq!(
        holder.session_id(),
        Some(session_id),
        "the session was not taken for over"
    );
    // The delete did meet the move: the member closed that connection, and the holder came
    // back on a new one, in the same session.
    let after = connection_of(first, session_id);
    assert!(
        after.as_ref().is_some_and(|now| *now != before),
        "the holder's connection did not change ({before} then {after:?}): the delete never met the move"
    );
    let next = tokio::time::timeout(SOON, waiting)
        .await
        .expect("the other client is granted once the node is gone")
        .unwrap()
        .unwrap();
    next.release().await.unwrap();
    drop(mover);
}
