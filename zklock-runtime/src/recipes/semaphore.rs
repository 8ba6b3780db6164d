//! The semaphore recipe: Curator's `InterProcessSemaphoreV2` layout, so zklock and Curator
//! semaphores on one path count each other's leases.
//!
//! - `<dir>/locks`: an exclusive lock (the mutex recipe) that acquirers take one at a time.
//! - `<dir>/leases`: one ephemeral-sequential `_c_<uuid>-lease-<seq>` node per lease.
//!
//! Holding the mutex, an acquirer creates its lease node, then lists `leases` with a child
//! watch until at most `leases` nodes are there; then it gives the mutex up and holds its lease.
//! Releasing a lease deletes its node. Only the mutex holder watches `leases`, so a release
//! wakes one client (no herd), and whichever holder releases, the waiting acquirer sees the
//! free lease on that very notification (a queue in which each waiter watched one node ahead
//! could sleep through a lease freed by another holder).
//!
//! The orchestrator ([`crate::lock`]) takes the mutex and hands down the session it holds it
//! in; this module only waits for a lease on that session.

use std::sync::Arc;
use std::time::Instant;

use tracing::debug;
use zookeeper_client as zk;

use crate::connection::session::Session;
use crate::engine::queue::{deadline_passed, handle, retry_after, Contending, Failed, Granted, Recipe};

/// Creates a lease node in `recipe.dir` (the `leases` directory) and waits until at most
/// `leases` lease nodes exist, or `deadline` passes (the node is then removed). The caller
/// holds the semaphore's mutex throughout.
pub(crate) async fn take_lease(
    recipe: &Recipe<'_>,
    leases: u32,
    session: &Arc<Session>,
    deadline: Option<Instant>,
) -> Result<Granted, Failed> {
    let dir = recipe.dir;
    let (contending, granted, mut children) = Contending::create(recipe, session).await?;
    let mut watcher = None;
    loop {
        if !children.iter().any(|c| c == contending.name()) {
            debug!(node = %granted.node_path, "lease node vanished");
            return Err(Failed::SessionEnded);
        }
        if children.len() <= leases as usize {
            contending.disarm();
            return Ok(granted);
        }
        if let Some(watcher) = watcher.take() {
            // The event first: a lease freed by the deadline still counts.
            tokio::select! {
                biased;
                event = zk::OneshotWatcher::changed(watcher) => {
                    if event.event_type == zk::EventType::Session && event.session_state.is_terminated() {
                        return Err(Failed::SessionEnded);
                    }
                }
                _ = session.ended() => return Err(Failed::SessionEnded),
                _ = deadline_passed(deadline) => return Err(Failed::TimedOut),
            }
        } else if deadline.is_some_and(|d| Instant::now() >= d) {
            return Err(Failed::TimedOut);
        }
        let listed = handle(session)?.list_and_watch_children(dir).await;
        match listed {
            Ok((listed, set)) => {
                children = listed;
                watcher = Some(set);
            }
            Err(err) => retry_after(session, "list lease nodes", err).await?,
        }
    }
}
