//! Deleting contender nodes in the background: releases handed off by `Drop`, and
//! acquisitions abandoned midway (timeout, cancellation, errors).
//!
//! Two rules from Curator's bug history shape this file:
//! - CURATOR-678: a delete that hits a connection loss is retried until the node is gone or
//!   the session is over; the node is never just forgotten.
//! - A contender whose create had no answer is found again by its protected `_c_<uuid>`
//!   prefix. The listing is sent on the same session after the create, and ZooKeeper answers a
//!   session's requests in order, so the listing sees the create if it happened at all.

use std::future::Future;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use tokio::sync::Notify;
use tracing::{debug, warn};
use zookeeper_client as zk;

use crate::error::is_transient;
use crate::session::Session;
use crate::LockError;

const RETRY_PAUSE: std::time::Duration = std::time::Duration::from_millis(20);

/// Tracks background cleanup jobs so [`LockClient::flush`](crate::LockClient::flush) can
/// wait for them.
#[derive(Clone, Default)]
pub(crate) struct Cleanup {
    state: Arc<State>,
}

#[derive(Default)]
struct State {
    pending: AtomicUsize,
    idle: Notify,
}

impl Cleanup {
    pub fn new() -> Self {
        Self::default()
    }

    /// Runs `job` on the session's runtime, counted until it finishes.
    pub fn spawn(&self, session: &Session, job: impl Future<Output = ()> + Send + 'static) {
        let state = self.state.clone();
        state.pending.fetch_add(1, Ordering::SeqCst);
        session.runtime.spawn(async move {
            job.await;
            if state.pending.fetch_sub(1, Ordering::SeqCst) == 1 {
                state.idle.notify_waiters();
            }
        });
    }

    pub async fn flush(&self) {
        loop {
            let idle = self.state.idle.notified();
            tokio::pin!(idle);
            idle.as_mut().enable();
            if self.state.pending.load(Ordering::SeqCst) == 0 {
                return;
            }
            idle.await;
        }
    }
}

/// Finishes deleting `path`, whose first delete request `first` is already on the wire, and
/// retries through connection losses until the node is gone or the session is over.
pub(crate) async fn finish_delete(
    session: Arc<Session>,
    path: String,
    first: impl Future<Output = Result<(), zk::Error>>,
) -> Result<(), LockError> {
    let mut outcome = first.await;
    loop {
        match outcome {
            Ok(()) | Err(zk::Error::NoNode) => {
                debug!(node = %path, "contender node deleted");
                return Ok(());
            }
            Err(zk::Error::SessionExpired | zk::Error::ClientClosed | zk::Error::AuthFailed) => {
                // The session is over; the server deletes its ephemeral nodes.
                return Ok(());
            }
            Err(err) if is_transient(&err) => {
                debug!(node = %path, %err, "delete interrupted; retrying once reconnected");
                if !session.wait_connected().await {
                    return Ok(());
                }
                tokio::time::sleep(RETRY_PAUSE).await;
            }
            Err(err) => {
                warn!(node = %path, %err, "cannot delete contender node");
                return Err(LockError::zk("delete", err));
            }
        }
        outcome = session.zk.delete(&path, None).await;
    }
}

/// Removes the contender an abandoned acquisition may have left in `dir`: the node itself when
/// its name is known, otherwise whatever child carries the protected `_c_<uuid>` prefix.
pub(crate) async fn remove_contender(session: Arc<Session>, dir: String, protect: String, node: Option<String>) {
    if let Some(node) = node {
        let path = format!("{dir}/{node}");
        let first = session.zk.delete(&path, None);
        let _ = finish_delete(session, path, first).await;
        return;
    }
    loop {
        match session.zk.list_children(&dir).await {
            Ok(children) => {
                let Some(node) = children.into_iter().find(|c| c.starts_with(&protect)) else {
                    return;
                };
                let path = format!("{dir}/{node}");
                let first = session.zk.delete(&path, None);
                let _ = finish_delete(session, path, first).await;
                return;
            }
            Err(zk::Error::NoNode | zk::Error::SessionExpired | zk::Error::ClientClosed) => return,
            Err(err) if is_transient(&err) => {
                if !session.wait_connected().await {
                    return;
                }
                tokio::time::sleep(RETRY_PAUSE).await;
            }
            Err(err) => {
                warn!(%dir, %err, "cannot list lock dir to clean up an abandoned contender");
                return;
            }
        }
    }
}
