//! The watch on a contender node of ours, from its grant until we give it up: the one place
//! that learns what others do to a held node.
//!
//! - The node deleted while held, and not by our own release: someone (an operator clearing a
//!   stuck lock, a tool) took the lock away, and the next contender may already be granted.
//!   That is a loss, reported through the hold's [`LossSignal`](crate::LossSignal) like the end
//!   of its session.
//! - The node's data set to [`REVOKE_MESSAGE`]: another process asks the holder to release
//!   (Curator's revocation, `Revoker.attemptRevoke`). A request, never enforced.
//!
//! The watch belongs to the node ([`NodeWatch`]), not to one hold of it: a node handed from
//! task to task of this process ([`crate::engine::local_queue`]) is watched once, and each
//! hold ([`OwnNode`]) is told what is learned while it is the node's holder. The watch costs
//! a node given up early nothing: its request (`getData` with a watch) is sent only once the
//! node has been ours for [`ARM_AFTER`] (counted from its grant, however many holds it served
//! since), by a task of the session's runtime, never by the acquirer. An uncontended acquire
//! and release stay at two requests, the create and the delete; a node held for longer, by
//! one hold or by a chain of short ones, is known deleted or revoked within `ARM_AFTER` and a
//! round trip (the first read of the node tells what happened before it). A node known
//! deleted or revoked is not taken by another hold of this process. The node is marked given
//! up before our delete is sent, so the deletion it causes is never taken for someone else's,
//! whichever of the two reaches the server first.
//!
//! The watch is set again after every event while the node is ours, and followed to its event
//! once given up (our delete fires it). A watch already set survives a connection loss (the
//! client sets it again on reconnecting, and the server reports what changed meanwhile); a
//! read that fails on the connection is sent again once reconnected. An event can be missed
//! only if the session ended, which is a loss already.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::watch;
use tracing::{debug, warn};
use zookeeper_client as zk;

use crate::connection::session::{send_now, Answer, Session};
use crate::engine::around::{Around, DirWatch};
use crate::error::{is_session_over, is_transient};
use crate::node_data::REVOKE_MESSAGE;

/// How long a node is ours before it is watched. Most critical sections are shorter and
/// never pay the request; a deletion or revocation before it is seen by the first read.
pub(crate) const ARM_AFTER: Duration = Duration::from_millis(100);

/// What has happened to a held node, as far as its watch knows: of the node, or of one hold of
/// it (what happened while the hold was the node's holder). Every flag is sticky.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct NodeState {
    /// The node was deleted, not by us.
    pub deleted: bool,
    /// A revocation was requested.
    pub revoked: bool,
    /// For a hold: the hold ended (released, handed over, or dropped). For the node: we gave
    /// it up (our delete is coming, or the session is gone), and the watch stops.
    pub released: bool,
}

type DataAnswer = Answer<Result<(Vec<u8>, zk::Stat, zk::OneshotWatcher), zk::Error>>;

/// What a node's watch shares with its task.
struct Shared {
    /// What is known of the node.
    node: watch::Sender<NodeState>,
    /// The state of the hold the node serves now, if one does; the task tells it what it
    /// learns. Whatever is learned is recorded in `node` and told to the holder under this
    /// lock, and a hold begins or ends under it too, so each event reaches exactly the hold
    /// that was the node's holder when it was learned (or none, while the node waits for its
    /// next local holder).
    holder: Mutex<Option<Arc<watch::Sender<NodeState>>>>,
}

impl Shared {
    fn holder(&self) -> std::sync::MutexGuard<'_, Option<Arc<watch::Sender<NodeState>>>> {
        self.holder.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// The watch on one contender node of ours, from its grant until we give it up: dropping it
/// gives the node up (called just before the node's delete is sent). It passes from hold to
/// hold with the node.
pub(crate) struct NodeWatch {
    shared: Arc<Shared>,
    /// The watch on the directory around the node, once the node is first kept idle
    /// ([`crate::engine::cache`]); it goes from hold to hold with the node, and stops with it.
    around: Option<DirWatch>,
}

impl NodeWatch {
    /// Starts watching `node_path`, granted now in `session`, once it has been ours for
    /// [`ARM_AFTER`]; a node given up before sends nothing.
    fn start(session: &Arc<Session>, node_path: &str) -> NodeWatch {
        let shared = Arc::new(Shared {
            node: watch::channel(NodeState::default()).0,
            holder: Mutex::default(),
        });
        let node = NodeWatch {
            shared: shared.clone(),
            around: None,
        };
        if session.runtime_gone() {
            return node; // nothing will answer; the hold is reported lost by its session
        }
        let (session, path) = (session.clone(), node_path.to_owned());
        session.runtime.clone().spawn(async move {
            let mut given_up = shared.node.subscribe();
            tokio::select! {
                _ = tokio::time::sleep(ARM_AFTER) => {}
                // Given up (or the watch dropped) first: nothing to watch.
                _ = given_up.wait_for(|s| s.released) => return,
            }
            if let Some(answer) = arm(&session, &path) {
                follow(&session, &path, &shared, answer).await;
            }
        });
        node
    }

    /// Follows what is known of the node (deleted, revoked, given up).
    pub fn subscribe(&self) -> watch::Receiver<NodeState> {
        self.shared.node.subscribe()
    }

    /// Follows what the directory around the node holds, starting the watch on it the first
    /// time (`node_path` is the node's path in `session`).
    pub fn watch_around(&mut self, session: &Arc<Session>, node_path: &str) -> watch::Receiver<Around> {
        self.around
            .get_or_insert_with(|| DirWatch::start(session, node_path))
            .subscribe()
    }

    /// A hold of the node begins: it is told what is learned of the node from now on. `None`
    /// if the node is known deleted or revoked: it is not to be held again (dropping this
    /// gives it up, for its delete).
    pub fn hold(self) -> Option<OwnNode> {
        let state = Arc::new(watch::channel(NodeState::default()).0);
        {
            let mut holder = self.shared.holder();
            let known = *self.shared.node.borrow();
            if known.deleted || known.revoked {
                return None;
            }
            *holder = Some(state.clone());
        }
        Some(OwnNode {
            state,
            node: Some(self),
        })
    }
}

impl Drop for NodeWatch {
    fn drop(&mut self) {
        self.shared
            .node
            .send_if_modified(|s| !std::mem::replace(&mut s.released, true));
    }
}

/// One hold's view of its node's watch, owned by the hold. Dropping it ends the hold and gives
/// the node up, unless it was [handed over](Self::hand_over).
pub(crate) struct OwnNode {
    /// What happened to the node while this hold held it.
    state: Arc<watch::Sender<NodeState>>,
    /// The node's watch; `None` once handed over or given up.
    node: Option<NodeWatch>,
}

impl OwnNode {
    /// A node granted now in `session`, held from now on: its watch starts, armed once the node
    /// has been ours for [`ARM_AFTER`].
    pub fn watch(session: &Arc<Session>, node_path: &str) -> OwnNode {
        NodeWatch::start(session, node_path)
            .hold()
            .expect("nothing is known yet of a node granted just now")
    }

    /// A view of no node, for a hold whose node went on to a value of its own (a release put
    /// off by a minimum hold): it has ended, and learns nothing.
    pub fn detached() -> OwnNode {
        let ended = NodeState {
            released: true,
            ..NodeState::default()
        };
        OwnNode {
            state: Arc::new(watch::channel(ended).0),
            node: None,
        }
    }

    /// What is known now.
    pub fn state(&self) -> NodeState {
        *self.state.borrow()
    }

    /// Follows the state, for signals that outlive the hold.
    pub fn subscribe(&self) -> watch::Receiver<NodeState> {
        self.state.subscribe()
    }

    /// The hold ends and the node goes on to another hold of this process: returns the node's
    /// watch, which goes on watching it. `None` if the hold had ended already.
    pub fn hand_over(&mut self) -> Option<NodeWatch> {
        self.end();
        self.node.take()
    }

    /// The hold ends and so does the node: what happens to it from now on is ours (its delete).
    /// Called before the delete is sent.
    pub fn release(&mut self) {
        self.end();
        drop(self.node.take());
    }

    /// Stops telling this hold about the node: from now on it is not the holder.
    fn end(&self) {
        if let Some(node) = &self.node {
            let mut holder = node.shared.holder();
            if holder.as_ref().is_some_and(|h| Arc::ptr_eq(h, &self.state)) {
                *holder = None;
            }
        }
        self.state
            .send_if_modified(|s| !std::mem::replace(&mut s.released, true));
    }
}

impl Drop for OwnNode {
    fn drop(&mut self) {
        self.release();
    }
}

/// Sends `getData` with a watch on `path` now (the first poll sends it) and returns the
/// answer to await; `None` if the client closed the session.
fn arm(session: &Session, path: &str) -> Option<DataAnswer> {
    let zk = session.zk().ok()?;
    let path = path.to_owned();
    Some(send_now(Box::pin(async move { zk.get_and_watch_data(&path).await })))
}

/// Awaits the watch's answers and events until the node is gone, the session over, or the node
/// given up. A watch set is followed to its event even after the node was given up, rather
/// than dropped: dropping it would cost a request to remove it, and our delete fires it anyway.
async fn follow(session: &Session, path: &str, shared: &Shared, first: DataAnswer) {
    let given_up = || shared.node.borrow().released;
    let mut answer = first;
    loop {
        match answer.await {
            Ok((data, stat, watcher)) => {
                if stat.ephemeral_owner != session.id {
                    // Not ours any more (a node of that name cannot come back, but be sure).
                    deleted(shared, path);
                    return;
                }
                if data == REVOKE_MESSAGE {
                    revoked(shared, path);
                }
                let event = watcher.changed().await;
                if given_up() {
                    return;
                }
                match event.event_type {
                    zk::EventType::NodeDeleted => {
                        deleted(shared, path);
                        return;
                    }
                    // A one-shot watch hears of the session only when it ends (the client
                    // sets its watches again after a reconnect): a loss the session reports.
                    zk::EventType::Session => return,
                    // Data changed (a revocation, maybe): the next read tells.
                    _ => {}
                }
            }
            Err(zk::Error::NoNode) => {
                deleted(shared, path);
                return;
            }
            Err(err) if is_session_over(&err) => return,
            Err(err) if is_transient(&err) => {
                if given_up() || !session.wait_to_retry().await {
                    return;
                }
            }
            Err(err) => {
                warn!(node = %path, %err, "cannot watch the held node; its deletion or revocation would go unnoticed");
                return;
            }
        }
        let Some(next) = arm(session, path) else {
            return;
        };
        answer = next;
    }
}

/// Records what was learned of the node, unless we gave it up meanwhile, and tells the hold
/// that holds it now, if one does.
fn learned(shared: &Shared, learn: impl Fn(&mut NodeState) -> bool) -> bool {
    let holder = shared.holder();
    let new = shared.node.send_if_modified(|s| !s.released && learn(s));
    if new {
        if let Some(holder) = holder.as_ref() {
            holder.send_if_modified(|s| !s.released && learn(s));
        }
    }
    new
}

/// The node is gone, not by our delete: a loss for the hold that holds it.
fn deleted(shared: &Shared, path: &str) {
    if learned(shared, |s| !std::mem::replace(&mut s.deleted, true)) {
        warn!(node = %path, "the held node was deleted by someone else; the lock is lost");
    }
}

/// A revocation was requested: the hold that holds the node is asked, and the node is not
/// handed on.
fn revoked(shared: &Shared, path: &str) {
    if learned(shared, |s| !std::mem::replace(&mut s.revoked, true)) {
        debug!(node = %path, "revocation requested");
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use tokio::sync::watch;
    use tokio::time::timeout;
    use zookeeper_client as zk;

    use super::{NodeState, OwnNode};
    use crate::connection::session::Session;
    use crate::node_data::REVOKE_MESSAGE;
    use crate::test_server::{setup, Setup};

    /// How long anything these tests wait for may take before the test fails.
    const BOUND: Duration = Duration::from_secs(15);

    /// An ephemeral node of `session`'s, standing for a contender node granted now.
    async fn granted(session: &Session, name: &str) -> String {
        let path = format!("/{name}");
        let mode = zk::CreateMode::Ephemeral.with_acls(zk::Acls::anyone_all());
        session.zk().unwrap().create(&path, b"", &mode).await.unwrap();
        path
    }

    /// Waits until `rx` shows something learned of the node (a deletion or a revocation).
    async fn learned_something(rx: &mut watch::Receiver<NodeState>) -> NodeState {
        let state = timeout(BOUND, rx.wait_for(|s| s.deleted || s.revoked))
            .await
            .expect("the hold never learned what happened to its node")
            .expect("the hold's state lives as long as the hold");
        *state
    }

    /// A node handed from hold to hold: a deletion or a revocation reaches the hold that holds
    /// the node when it is learned and no hold that ended before; a hold that ends is told so;
    /// and a node known deleted or revoked is not held again.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn what_is_learned_of_a_node_reaches_only_the_hold_that_holds_it() {
        let Setup {
            server: _server,
            client,
            view,
        } = setup(Duration::from_secs(10)).await;
        let session = client.latest().unwrap();
        for revoke in [false, true] {
            let what = if revoke { "revoked" } else { "deleted" };
            let path = granted(&session, what).await;
            let mut first = OwnNode::watch(&session, &path);
            let mut first_sees = first.subscribe();
            let node = first.hand_over().expect("a hold that has not ended hands its node on");
            timeout(BOUND, first_sees.changed())
                .await
                .expect("a hold that ended was never told")
                .unwrap();
            let mut second = node.hold().expect("nothing is known yet of the node");
            let mut second_sees = second.subscribe();
            if revoke {
                view.set_data(&path, REVOKE_MESSAGE, None).await.unwrap();
            } else {
                view.delete(&path, None).await.unwrap();
            }
            let expected = NodeState {
                deleted: !revoke,
                revoked: revoke,
                released: false,
            };
            assert_eq!(
                learned_something(&mut second_sees).await,
                expected,
                "the node was {what}"
            );
            let ended = NodeState {
                released: true,
                ..NodeState::default()
            };
            assert_eq!(first.state(), ended, "a hold that ended learned of its node");
            let node = second.hand_over().expect("a hold that has not ended hands its node on");
            assert!(node.hold().is_none(), "a node known {what} was held again");
        }
    }

    /// Our own delete, sent after the hold gave the node up, fires the node's watch: that is
    /// not someone else deleting a held node, and the watch stops there.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn our_own_delete_after_the_release_is_not_taken_for_a_loss() {
        let Setup {
            server: _server,
            client,
            view,
        } = setup(Duration::from_secs(10)).await;
        let session = client.latest().unwrap();
        let path = granted(&session, "released").await;
        let mut own = OwnNode::watch(&session, &path);
        let mut node_sees = own.node.as_ref().expect("a node").shared.node.subscribe();
        // The watch is set: it hears of a revocation.
        view.set_data(&path, REVOKE_MESSAGE, None).await.unwrap();
        learned_something(&mut own.subscribe()).await;
        own.release();
        session.zk().unwrap().delete(&path, None).await.unwrap();
        // The watch follows our delete to its event, then its task ends and drops the node's
        // state: the receiver's `changed` fails.
        loop {
            match timeout(BOUND, node_sees.changed()).await {
                Err(_) => panic!("the watch went on after the node was given up and deleted"),
                Ok(Err(_)) => break,
                Ok(Ok(())) => assert!(
                    !node_sees.borrow().deleted,
                    "our own delete was taken for someone else's"
                ),
            }
        }
        assert!(
            !node_sees.borrow().deleted,
            "our own delete was taken for someone else's"
        );
        assert!(!own.state().deleted, "the released hold learned of our own delete");

        // A hold dropped without a release ends all the same, and says so at once.
        let dropped = OwnNode::watch(&session, &granted(&session, "dropped").await);
        let dropped_sees = dropped.subscribe();
        drop(dropped);
        assert!(dropped_sees.borrow().released, "a dropped hold did not end");
    }

    /// The watch's first read is sent while the server does not answer: the read fails with the
    /// connection, and the watch is set again once the session is connected, so a deletion
    /// after that is still learned.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_read_lost_with_the_connection_is_sent_again_once_reconnected() {
        let Setup {
            server,
            client,
            view: _view,
        } = setup(Duration::from_secs(6)).await;
        let session = client.latest().unwrap();
        let path = granted(&session, "reconnected").await;
        server.pause().unwrap();
        // Armed after 100 ms: into the paused server.
        let own = OwnNode::watch(&session, &path);
        let mut health = session.subscribe();
        timeout(BOUND, health.wait_for(|h| !h.status.is_connected()))
            .await
            .expect("the client never noticed the paused server")
            .unwrap();
        server.resume().unwrap();
        timeout(BOUND, health.wait_for(|h| h.status.is_connected()))
            .await
            .expect("the client never reconnected")
            .unwrap();
        let other = zk::Client::connector().connect(&server.connect_string()).await.unwrap();
        other.delete(&path, None).await.unwrap();
        let expected = NodeState {
            deleted: true,
            ..NodeState::default()
        };
        assert_eq!(learned_something(&mut own.subscribe()).await, expected);
    }

    /// The view of a hold whose node went on to a value of its own (a put-off release) has
    /// ended from the start.
    #[test]
    fn a_detached_view_has_ended() {
        let ended = NodeState {
            released: true,
            ..NodeState::default()
        };
        assert_eq!(OwnNode::detached().state(), ended);
    }
}
