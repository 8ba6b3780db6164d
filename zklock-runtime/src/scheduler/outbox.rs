//! The ends of runs this node owes the job's history ([`Shared::owe`]): a run whose lock was
//! lost before it could report, a write of its end that failed, a run under [`Policy::Allow`]
//! (which ends without the lock), a run-now request taken and then not run. Each is written
//! under the next hold of the job's lock: the next beat's, or that of a task, started when the
//! first end was owed, that queues for the lock again and again (backing off up to
//! [`LONGEST_PAUSE`]) until everything owed is written or the client is closed. What is owed lives in this process only: a node that dies owing leaves its runs
//! to be recorded as lost by the next holder (the record's `running` state, or the run's
//! marker, [`super::store::Marker`]).
//!
//! [`Policy::Allow`]: super::Policy::Allow

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use tracing::{debug, warn};

use super::hold::Hold;
use super::node::{Owed, Shared};
use super::record::RunState;
use super::store::{Marker, RunMarker};
use crate::error::LockError;

/// The longest pause between two tries to write what is owed.
pub(crate) const LONGEST_PAUSE: Duration = Duration::from_secs(30);

/// Called when a run's end is owed ([`Shared::owe`]): when no task is writing what is owed
/// yet, starts one ([`pay_later`]).
pub(crate) fn pay_later_if_owing(shared: &Arc<Shared>) {
    let owing = !shared.owed.lock().unwrap_or_else(|e| e.into_inner()).is_empty();
    if owing && !shared.paying.swap(true, Ordering::SeqCst) {
        tokio::spawn(pay_later(shared.clone()));
    }
}

/// Writes everything owed in this hold: the history entries, the record's end state of a run
/// it still shows as claimed, the markers' deletion (those in `runs`, as read under this hold,
/// which then leave `runs`). Returns false when the write failed; what was owed is owed again.
pub(crate) async fn pay(hold: &mut Hold<'_>, runs: &mut Vec<RunMarker>) -> bool {
    let shared = hold.shared;
    let owed: Vec<Owed> = std::mem::take(&mut *shared.owed.lock().unwrap_or_else(|e| e.into_inner()));
    if owed.is_empty() {
        return true;
    }
    let mut record = None;
    let mut markers = Vec::new();
    for debt in &owed {
        hold.pending.push(debt.entry.clone());
        if let Some(end) = &debt.end {
            let shows = hold
                .record
                .as_ref()
                .filter(|r| r.tick == end.tick && r.state == RunState::Running && r.session == end.session);
            if let (None, Some(claimed)) = (&record, shows) {
                record = Some(claimed.ended(end.state.clone(), hold.version));
            }
        }
        if let Some(run) = debt.marker.as_ref().and_then(|key| runs.iter().find(|m| m.key == *key)) {
            markers.push(Marker::Close {
                key: run.key.clone(),
                alive: run.alive,
            });
        }
    }
    match hold.commit(record, None, None, markers).await {
        Ok(_) => {
            debug!(target: "zklock::scheduler", job = %shared.name, runs = owed.len(), "wrote the runs' ends owed");
            runs.retain(|run| !owed.iter().any(|debt| debt.marker.as_deref() == Some(run.key.as_str())));
            true
        }
        Err(err) => {
            warn!(target: "zklock::scheduler", job = %shared.name, runs = owed.len(), error = %err,
                "could not write how runs ended; trying again under a later hold");
            let mut again = shared.owed.lock().unwrap_or_else(|e| e.into_inner());
            let later = std::mem::replace(&mut *again, owed);
            again.extend(later);
            false
        }
    }
}

/// Takes the job's lock to write what is owed, again and again (backing off) until nothing is
/// owed or the client is closed.
async fn pay_later(shared: Arc<Shared>) {
    let mut pause = Duration::from_millis(100);
    loop {
        let empty = || shared.owed.lock().unwrap_or_else(|e| e.into_inner()).is_empty();
        if empty() {
            shared.paying.store(false, Ordering::SeqCst);
            // Owed after the check but before the flag went down: nobody else starts for it.
            if empty() || shared.paying.swap(true, Ordering::SeqCst) {
                return;
            }
            continue;
        }
        // Waits as a beat would (a period), then queues again: the loop also notices a client
        // closed meanwhile.
        let wait = shared.wait_for_lock(shared.ticks.tick_at(shared.clock.now()));
        let guard = match shared.lock.acquire_timeout(wait).await {
            Ok(guard) => guard,
            Err(err @ LockError::Closed { .. }) => {
                let dropped = std::mem::take(&mut *shared.owed.lock().unwrap_or_else(|e| e.into_inner()));
                warn!(target: "zklock::scheduler", job = %shared.name, runs = dropped.len(), error = %err,
                    "the client was closed before the ends of these runs were written; the next holder records them as lost");
                shared.paying.store(false, Ordering::SeqCst);
                return;
            }
            Err(err) => {
                debug!(target: "zklock::scheduler", job = %shared.name, error = %err, "could not take the job's lock to write the runs' ends");
                pause = back_off(pause).await;
                continue;
            }
        };
        let Ok(zk) = guard.zk() else {
            pause = back_off(pause).await;
            continue;
        };
        let acls = shared.client.inner.config.acls();
        let state = match shared.store.read_state(&zk, acls).await {
            Ok(state) => state,
            Err(err) => {
                debug!(target: "zklock::scheduler", job = %shared.name, error = %err, "could not read the job's state to write the runs' ends");
                pause = back_off(pause).await;
                continue;
            }
        };
        let Ok(record) = state.record else {
            pause = back_off(pause).await;
            continue;
        };
        let mut hold = Hold::over(&shared, &guard, &zk, record, state.stat.version, state.history);
        let mut runs = state.runs;
        if !pay(&mut hold, &mut runs).await {
            drop(guard);
            pause = back_off(pause).await;
        }
    }
}

/// Sleeps `pause`; returns the next, twice as long up to [`LONGEST_PAUSE`].
async fn back_off(pause: Duration) -> Duration {
    tokio::time::sleep(pause).await;
    (pause * 2).min(LONGEST_PAUSE)
}
