//! Who else is in a lock's directory beside a node of ours: the watch that tells a cached node
//! ([`crate::engine::cache`]) that another contender arrived, or that the node itself is gone.
//!
//! One children watch on the directory, set with a listing, for as long as the node is ours.
//! The listing that sets it also proves the node still exists: [`Around::Alone`] means the last
//! listing showed our node and nothing else, and no change has been reported since. A change
//! of the children (another contender's create, or our node's deletion: nothing else can
//! change a directory that held our node alone) ends in [`Around::Crowded`] at once, without
//! listing again. A connection loss makes the state [`Around::Unknown`] until a new listing
//! answers. Anything that stops the watch (the session over, a refused listing) also ends in
//! [`Around::Crowded`], which is final: a node is kept idle only while the watch vouches for
//! it.

use std::sync::Arc;

use tokio::sync::watch;
use zookeeper_client as zk;

use crate::connection::session::Session;
use crate::error::is_transient;

/// What the directory around a node of ours holds, as far as its watch knows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Around {
    /// Not known: the first listing, or a listing after a change, is under way.
    Unknown,
    /// The last listing showed our node alone, and the directory has not changed since.
    Alone,
    /// Another node is in the directory, ours is gone, or the directory cannot be watched any
    /// more. Final.
    Crowded,
}

/// The children watch on the directory around one node of ours; dropping it stops the watch.
pub(crate) struct DirWatch {
    state: watch::Receiver<Around>,
    task: Option<tokio::task::AbortHandle>,
}

impl DirWatch {
    /// Starts watching the directory of `node_path` (a node of ours in `session`).
    pub fn start(session: &Arc<Session>, node_path: &str) -> DirWatch {
        let (tx, state) = watch::channel(Around::Unknown);
        let split = node_path
            .rsplit_once('/')
            .filter(|(dir, name)| !dir.is_empty() && !name.is_empty());
        let Some((dir, ours)) = split.filter(|_| !session.runtime_gone()) else {
            tx.send_replace(Around::Crowded);
            return DirWatch { state, task: None };
        };
        let task = session
            .runtime
            .spawn(follow(session.clone(), dir.to_owned(), ours.to_owned(), tx));
        DirWatch {
            state,
            task: Some(task.abort_handle()),
        }
    }

    /// Follows the state.
    pub fn subscribe(&self) -> watch::Receiver<Around> {
        self.state.clone()
    }
}

impl Drop for DirWatch {
    fn drop(&mut self) {
        if let Some(task) = &self.task {
            task.abort();
        }
    }
}

/// Lists `dir` with a watch until it holds something besides `ours` (or lacks it) or its
/// children change, telling `state` what each listing showed.
async fn follow(session: Arc<Session>, dir: String, ours: String, state: watch::Sender<Around>) {
    loop {
        let Ok(zk) = session.zk() else { break };
        match zk.list_and_watch_children(&dir).await {
            Ok((children, watcher)) => {
                if !(children.len() == 1 && children[0] == ours) {
                    break;
                }
                state.send_replace(Around::Alone);
                let event = watcher.changed().await;
                // The listing showed our node alone, so any change of the children is another
                // contender's create or our node's deletion: either way the node is not kept,
                // and telling so now spares the listing that would say it.
                if event.event_type == zk::EventType::NodeChildrenChanged {
                    break;
                }
                state.send_replace(Around::Unknown);
                if event.event_type == zk::EventType::Session && event.session_state.is_terminated() {
                    break;
                }
            }
            Err(err) if is_transient(&err) => {
                state.send_replace(Around::Unknown);
                if !session.wait_to_retry().await {
                    break;
                }
            }
            // The directory gone (with our node), the session over, or the listing refused.
            Err(_) => break,
        }
    }
    state.send_replace(Around::Crowded);
}
