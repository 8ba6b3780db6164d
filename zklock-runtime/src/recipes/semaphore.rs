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
//! The lease count is recorded in the semaphore's directory node (`leases=<n>`), so clients
//! that disagree on it are told instead of letting in more holders than either expects
//! (Curator records nothing and cannot tell). The rule: the record is the count of the holders
//! of the moment. An acquirer reads it in the same round trip as its lease node is created;
//! while any other lease is held, a different count is refused
//! ([`LockError::LeaseCountMismatch`]); when none is, the acquirer's count becomes the record.
//! Acquirers hold the mutex, so they read and write the record one at a time.
//!
//! The orchestrator ([`crate::lock`]) takes the mutex and hands down the session it holds it
//! in; this module only waits for a lease on that session.

use std::sync::Arc;
use std::time::Instant;

use tracing::debug;
use zookeeper_client as zk;

use crate::connection::session::Session;
use crate::engine::queue::{deadline_passed, handle, retry_after, Contending, Failed, Granted, Recipe};
use crate::error::LockError;

/// The semaphore a lease is taken in, as the lease-count agreement needs it.
pub(crate) struct Semaphore<'a> {
    /// The lock name, for errors.
    pub name: &'a str,
    /// The semaphore's directory, whose data records the lease count.
    pub dir: &'a str,
    /// How many leases this acquirer asks for.
    pub leases: u32,
}

/// Creates a lease node in `recipe.dir` (the `leases` directory) and waits until at most
/// `semaphore.leases` lease nodes exist, or `deadline` passes (the node is then removed). The
/// caller holds the semaphore's mutex throughout.
pub(crate) async fn take_lease(
    recipe: &Recipe<'_>,
    semaphore: &Semaphore<'_>,
    session: &Arc<Session>,
    deadline: Option<Instant>,
) -> Result<Granted, Failed> {
    let dir = recipe.dir;
    let leases = semaphore.leases;
    // Sent first, answered in the create's round trip.
    let record = handle(session)?.get_data(semaphore.dir);
    let (created, record) = tokio::join!(Contending::create(recipe, session), record);
    let (contending, granted, mut children) = created?;
    let others = children.iter().filter(|c| *c != contending.name()).count();
    agree_on_count(semaphore, session, record, others).await?;
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

/// What the semaphore's directory says about the lease count.
#[derive(Debug, PartialEq, Eq)]
enum Recorded {
    /// Nothing yet (an empty node).
    Nothing,
    /// `leases=<n>`.
    Leases(u32),
    /// Data of someone else's: left alone, and no agreement is checked.
    Foreign,
}

impl Recorded {
    fn read(data: &[u8]) -> Recorded {
        if data.is_empty() {
            return Recorded::Nothing;
        }
        let count = std::str::from_utf8(data)
            .ok()
            .and_then(|text| text.strip_prefix(RECORD_PREFIX))
            .and_then(|n| n.parse().ok());
        count.map_or(Recorded::Foreign, Recorded::Leases)
    }
}

const RECORD_PREFIX: &str = "leases=";

/// Applies the agreement rule (see the module docs) to the record read with our lease node's
/// create, `others` being how many other lease nodes were there: refuses a different count
/// while others hold leases, otherwise records ours when it is not the record yet.
async fn agree_on_count(
    semaphore: &Semaphore<'_>,
    session: &Session,
    record: Result<(Vec<u8>, zk::Stat), zk::Error>,
    others: usize,
) -> Result<(), Failed> {
    let record = match record {
        // The semaphore's first use: its directory was made with our lease node, after the
        // read. Read it again now that it exists (once per new semaphore).
        Err(zk::Error::NoNode) => handle(session)?.get_data(semaphore.dir).await,
        record => record,
    };
    let Ok((data, stat)) = record else {
        // Unreadable (not allowed, or the answer was lost): nothing to agree with.
        return Ok(());
    };
    let leases = semaphore.leases;
    match Recorded::read(&data) {
        Recorded::Leases(n) if n == leases => return Ok(()),
        Recorded::Leases(recorded) if others > 0 => {
            return Err(Failed::Error(LockError::LeaseCountMismatch {
                name: semaphore.name.to_owned(),
                asked: leases,
                recorded,
            }))
        }
        Recorded::Foreign => return Ok(()),
        Recorded::Leases(_) | Recorded::Nothing => {}
    }
    let ours = format!("{RECORD_PREFIX}{leases}");
    // Version-checked: should anything else have written meanwhile, its data stays.
    let written = handle(session)?
        .set_data(semaphore.dir, ours.as_bytes(), Some(stat.version))
        .await;
    if let Err(err) = written {
        debug!(dir = %semaphore.dir, %err, "could not record the lease count");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_record() {
        assert_eq!(Recorded::read(b""), Recorded::Nothing);
        assert_eq!(Recorded::read(b"leases=4"), Recorded::Leases(4));
        assert_eq!(Recorded::read(b"leases=-1"), Recorded::Foreign);
        assert_eq!(Recorded::read(b"10.0.0.7"), Recorded::Foreign);
        assert_eq!(Recorded::read(&[0xff, 0xfe]), Recorded::Foreign);
    }
}
