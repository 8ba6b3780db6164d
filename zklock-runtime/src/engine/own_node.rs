//! A holder's watch on its own contender node, from the grant until the hold ends: the one
//! place that learns what others do to a held node.
//!
//! - The node deleted while held, and not by our own release: someone (an operator clearing a
//!   stuck lock, a tool) took the lock away, and the next contender may already be granted.
//!   That is a loss, reported through the hold's [`LossSignal`](crate::LossSignal) like the end
//!   of its session.
//! - The node's data set to [`REVOKE_MESSAGE`]: another process asks the holder to release
//!   (Curator's revocation, `Revoker.attemptRevoke`). A request, never enforced.
//!
//! The watch costs a short hold nothing: its request (`getData` with a watch) is sent only once
//! the hold has lasted [`ARM_AFTER`], by a task of the session's runtime, never by the acquirer.
//! An uncontended acquire and release stay at two requests, the create and the delete; a hold
//! that lasts is told of a deletion or a revocation within `ARM_AFTER` and a round trip (the
//! first read of the node tells what happened before it). The hold is marked released before
//! its release's delete is sent, so the deletion it causes is never taken for someone else's,
//! whichever of the two reaches the server first.
//!
//! The watch is set again after every event while the hold lasts, and followed to its event
//! once the hold ends (the release's delete fires it). After a connection loss it
//! is set again once reconnected, and that read is a fresh check of the node: an event can be
//! missed only if the session ended, which is a loss already.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;
use tracing::{debug, warn};
use zookeeper_client as zk;

use crate::connection::session::{send_now, Answer, Session};
use crate::error::{is_session_over, is_transient};
use crate::ops::holder::REVOKE_MESSAGE;

/// How long a hold lasts before its node is watched. Most critical sections are shorter and
/// never pay the request; a deletion or revocation before it is seen by the first read.
pub(crate) const ARM_AFTER: Duration = Duration::from_millis(100);

/// What has happened to a held node, as far as its watch knows. Every flag is sticky.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct NodeState {
    /// The node was deleted while held, not by our release.
    pub deleted: bool,
    /// A revocation was requested.
    pub revoked: bool,
    /// The hold ended (released, handed over, or dropped): the watch stops.
    pub released: bool,
}

type DataAnswer = Answer<Result<(Vec<u8>, zk::Stat, zk::OneshotWatcher), zk::Error>>;

/// The watch on one held node, owned by its hold. Dropping it (the hold ends) stops the watch.
pub(crate) struct OwnNode {
    state: Arc<watch::Sender<NodeState>>,
}

impl OwnNode {
    /// Starts watching `node_path`, granted in `session`, once the hold has lasted
    /// [`ARM_AFTER`]; a hold that ends before sends nothing.
    pub fn watch(session: &Arc<Session>, node_path: &str) -> OwnNode {
        let (state, _) = watch::channel(NodeState::default());
        let state = Arc::new(state);
        let own = OwnNode { state: state.clone() };
        if session.runtime_gone() {
            return own; // nothing will answer; the hold is reported lost by its session
        }
        let (session, path) = (session.clone(), node_path.to_owned());
        session.runtime.clone().spawn(async move {
            let mut ended = state.subscribe();
            tokio::select! {
                _ = tokio::time::sleep(ARM_AFTER) => {}
                // Released (or the watch dropped) first: nothing to watch.
                _ = ended.wait_for(|s| s.released) => return,
            }
            if let Some(answer) = arm(&session, &path) {
                follow(&session, &path, &state, answer).await;
            }
        });
        own
    }

    /// What is known now.
    pub fn state(&self) -> NodeState {
        *self.state.borrow()
    }

    /// Follows the state, for signals that outlive the hold.
    pub fn subscribe(&self) -> watch::Receiver<NodeState> {
        self.state.subscribe()
    }

    /// The hold ends: what happens to the node from now on is ours (a delete, a handover).
    /// Called before the release's delete is sent.
    pub fn release(&self) {
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

/// Awaits the watch's answers and events until the node is gone, the session over, or the hold
/// ended. A watch set is followed to its event even after the hold ended, rather than dropped:
/// dropping it would cost a request to remove it, and the release's delete fires it anyway.
async fn follow(session: &Session, path: &str, state: &watch::Sender<NodeState>, first: DataAnswer) {
    let mut answer = first;
    loop {
        match answer.await {
            Ok((data, stat, watcher)) => {
                if stat.ephemeral_owner != session.id {
                    // Not ours any more (a node of that name cannot come back, but be sure).
                    deleted(state, path);
                    return;
                }
                if data == REVOKE_MESSAGE {
                    revoked(state, path);
                }
                let event = watcher.changed().await;
                if state.borrow().released {
                    return;
                }
                match event.event_type {
                    zk::EventType::NodeDeleted => {
                        deleted(state, path);
                        return;
                    }
                    zk::EventType::Session if event.session_state.is_terminated() => return,
                    // A reconnect: read again once connected, a fresh look at the node.
                    zk::EventType::Session if !session.wait_connected().await => return,
                    // Data changed (a revocation, maybe): the next read tells.
                    _ => {}
                }
            }
            Err(zk::Error::NoNode) => {
                deleted(state, path);
                return;
            }
            Err(err) if is_session_over(&err) => return,
            Err(err) if is_transient(&err) => {
                if state.borrow().released || !session.wait_to_retry().await {
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

/// The node is gone: a loss, unless the hold had ended (our own delete) first.
fn deleted(state: &watch::Sender<NodeState>, path: &str) {
    state.send_if_modified(|s| {
        if s.released || s.deleted {
            return false;
        }
        warn!(node = %path, "the held node was deleted by someone else; the lock is lost");
        s.deleted = true;
        true
    });
}

fn revoked(state: &watch::Sender<NodeState>, path: &str) {
    state.send_if_modified(|s| {
        if s.released || s.revoked {
            return false;
        }
        debug!(node = %path, "revocation requested");
        s.revoked = true;
        true
    });
}
