//! One fire of a singleton job on one node: decide, run, record, report.

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex as StdMutex};
use std::time::{Duration, SystemTime};

use tokio::sync::Mutex as AsyncMutex;
use tracing::{debug, error, warn};

use super::clock::Clock;
use super::policy::Policy;
use super::record::{RecordStore, RunState, TickRecord, WriteError};
use super::stats::JobStats;
use super::ticks::{show, tick_time, Ticks};
use crate::error::is_transient;
use crate::OnLost;
use crate::{FencingToken, Lock, LockClient, LockError, LockGuard, LossSignal};

/// The boxed user closure: builds the run's future for one tick.
pub(crate) type RunFn = Box<dyn FnMut(JobRun) -> Pin<Box<dyn Future<Output = Result<(), String>> + Send>> + Send>;

/// What a run of a singleton job is told about itself.
///
/// ```
/// # use zklock_runtime::scheduler::JobRun;
/// async fn report(run: JobRun) -> Result<(), std::io::Error> {
///     println!("{} for tick {:?}, token {}", run.job(), run.tick(), run.fencing_token());
///     Ok(())
/// }
/// ```
#[derive(Debug, Clone)]
pub struct JobRun {
    job: Arc<str>,
    tick: SystemTime,
    token: FencingToken,
    loss: LossSignal,
}

impl JobRun {
    /// The job name.
    pub fn job(&self) -> &str {
        &self.job
    }

    /// The scheduled time this run is for (for the skip policy: the tick this node's clock was
    /// at when the job fired).
    pub fn tick(&self) -> SystemTime {
        self.tick
    }

    /// The fencing token of the job's lock for this run: pass it to resources that must reject
    /// a run whose node has since lost the lock.
    pub fn fencing_token(&self) -> FencingToken {
        self.token
    }

    /// Resolves when this run's lock is lost; see [`OnLost`] for what the adapter does then.
    pub fn loss_signal(&self) -> LossSignal {
        self.loss.clone()
    }
}

/// What one node knows about one job.
pub(crate) struct Shared {
    pub name: Arc<str>,
    pub client: LockClient,
    pub lock: Lock,
    pub ticks: Ticks,
    pub policy: Policy,
    pub on_lost: OnLost,
    pub clock: Arc<dyn Clock>,
    pub lock_wait: Option<Duration>,
    pub store: RecordStore,
    pub stats: JobStats,
    /// Fires of this job on this node are handled one at a time; holds the latest tick this
    /// node is done with: run, found taken, or given up (once-per-tick policy).
    pub serial: AsyncMutex<Option<i64>>,
    pub run: StdMutex<RunFn>,
}

enum Outcome {
    Done,
    Failed(String),
    Lost,
}

impl Shared {
    fn session(&self) -> String {
        match self.client.session_id() {
            Some(id) => format!("{id:#x}"),
            None => "none".into(),
        }
    }
}

/// Entry point of every fire.
pub(crate) async fn fire(shared: Arc<Shared>) {
    let _in_flight = shared.stats.fire_started();
    let seen = shared.clock.now();
    let Some(own) = shared.ticks.tick_at(seen) else {
        shared.stats.failed();
        error!(target: "zklock::scheduler", job = %shared.name, "the schedule has no tick at or before this node's clock");
        return;
    };
    match shared.policy {
        Policy::Skip => fire_skip(&shared, own).await,
        Policy::OncePerTick => fire_once(&shared, own).await,
    }
}

async fn fire_skip(shared: &Shared, own: i64) {
    let Ok(_serial) = shared.serial.try_lock() else {
        shared.stats.skipped();
        debug!(target: "zklock::scheduler", job = %shared.name, tick = %show(own), "skipped: the previous run is still going on this node");
        return;
    };
    match shared.lock.try_acquire().await {
        Ok(Some(guard)) => {
            shared.stats.ran(own);
            debug!(target: "zklock::scheduler", job = %shared.name, tick = %show(own), session = %shared.session(), token = %guard.fencing_token(), "running");
            let _ = execute(shared, &guard, own).await;
            drop(guard);
        }
        Ok(None) => {
            shared.stats.skipped();
            debug!(target: "zklock::scheduler", job = %shared.name, tick = %show(own), "skipped: running on another node");
        }
        Err(err) => {
            shared.stats.failed();
            warn!(target: "zklock::scheduler", job = %shared.name, tick = %show(own), error = %err, "could not try the job's lock");
        }
    }
}

/// How many ticks before a fire's own tick one fire may still run late: ticks further back are
/// given up (see the [module docs](super#late-ticks)).
pub(crate) const MAX_CATCH_UP: usize = 10;

async fn fire_once(shared: &Shared, own: i64) {
    let mut last_local = shared.serial.lock().await;
    // The scheduler fired again within a tick this node already handled: not a fire of its
    // own, so not counted.
    if last_local.is_some_and(|prev| own <= prev) {
        debug!(target: "zklock::scheduler", job = %shared.name, tick = %show(own), "skipped: this node already handled the tick");
        return;
    }
    // A node's first fire offers its own tick only; later fires also offer every tick after
    // the last one this node handled, so the node walks its ticks in order even when the
    // scheduler fired late, a fire read the clock across a tick boundary, or an earlier fire
    // could not take the lock.
    let since = last_local.or_else(|| shared.ticks.before(own));
    // When nothing could be decided, the floor stays where it was (on a first fire: just
    // before its own tick), so the next fire offers this fire's tick again.
    let decided = catch_up(shared, since, own).await.or(since);
    *last_local = (*last_local).max(decided);
}

/// The ticks after `floor` up to and including `own`, oldest first, at most
/// [`MAX_CATCH_UP`] of them before `own`; and the first and last tick given up, if there were
/// more.
fn due_ticks(ticks: &Ticks, floor: Option<i64>, own: i64) -> (Vec<i64>, Option<(i64, i64)>) {
    let mut due = vec![own];
    let Some(floor) = floor else {
        return (due, None);
    };
    let mut missed = None;
    let mut at = own;
    while let Some(before) = ticks.before(at).filter(|b| *b > floor) {
        if due.len() > MAX_CATCH_UP {
            let first = ticks.after(floor).filter(|f| *f <= before).unwrap_or(before);
            missed = Some((first, before));
            break;
        }
        due.push(before);
        at = before;
    }
    due.reverse();
    (due, missed)
}

/// Under one hold of the job's lock, runs in order every tick after `since` up to `own` that
/// the cluster's record says nobody took yet.
///
/// Returns the latest tick this node is done with (run, found taken, or given up), or `None`
/// when it could not decide anything; ticks after the returned one are offered again by the
/// next fire.
async fn catch_up(shared: &Shared, since: Option<i64>, own: i64) -> Option<i64> {
    let skip = |why: &str| {
        shared.stats.skipped();
        debug!(target: "zklock::scheduler", job = %shared.name, tick = %show(own), "skipped: {why}");
    };
    let fail = |tick: i64, what: &str, err: &dyn std::fmt::Display| {
        shared.stats.failed();
        warn!(target: "zklock::scheduler", job = %shared.name, tick = %show(tick), error = %err, "{what}");
    };

    let wait = shared
        .lock_wait
        .or_else(|| shared.ticks.period_after(own))
        .unwrap_or(Duration::from_secs(60));
    let guard = match shared.lock.acquire_timeout(wait).await {
        Ok(guard) => guard,
        Err(LockError::Timeout { .. }) => {
            skip(&format!(
                "the job's lock stayed busy for {wait:?}; the next fire offers the tick again"
            ));
            return None;
        }
        Err(err) => {
            fail(own, "could not take the job's lock", &err);
            return None;
        }
    };
    let zk = match shared.client.zookeeper().await {
        Ok(zk) => zk,
        Err(err) => {
            fail(own, "no ZooKeeper session for the tick record", &err);
            return None;
        }
    };
    let acls = shared.client.inner.config.acls();
    let (record, mut version) = match shared.store.read(&zk, acls).await {
        Ok(read) => read,
        Err(err) => {
            fail(own, "could not read the tick record", &err);
            return None;
        }
    };
    let record = match record {
        Ok(record) => record,
        Err(reason) => {
            shared.stats.failed();
            error!(target: "zklock::scheduler", job = %shared.name, path = %shared.store.path, %reason,
                "the tick record is unreadable; not running (fix or delete the node)");
            return None;
        }
    };
    let recorded = record.as_ref().map(|r| r.tick);
    if let Some(record) = &record {
        shared.stats.saw_recorded(record.tick);
        if record.tick >= own {
            let far = shared
                .ticks
                .after(own)
                .and_then(|next| shared.ticks.after(next))
                .is_some_and(|far| record.tick > far);
            if far {
                warn!(target: "zklock::scheduler", job = %shared.name, recorded = %show(record.tick), tick = %show(own),
                    "the recorded tick is well ahead of this node's clock; check the clocks of the cluster");
            }
            skip(&format!(
                "tick already taken (recorded {}, {:?})",
                show(record.tick),
                record.state
            ));
            return Some(own);
        }
    }

    // Ticks at or before the record were taken; ticks at or before `since` were handled here.
    let floor = since.max(recorded);
    let (due, missed) = due_ticks(&shared.ticks, floor, own);
    let mut decided = floor;
    if let Some((first, last)) = missed {
        warn!(target: "zklock::scheduler", job = %shared.name, tick = %show(own), first = %show(first), last = %show(last),
            max_catch_up = MAX_CATCH_UP, "missed: ticks from first to last were more than max_catch_up ticks late; giving them up");
        decided = decided.max(Some(last));
    }
    for tick in due {
        // Take the tick before running it: from here on no node runs it again, whatever
        // happens to this run. The write is fenced, so it also proves the lock is still ours.
        let session = shared.client.session_id();
        let claim = TickRecord {
            tick,
            state: RunState::Running,
            session,
        };
        let claimed = match shared.store.write_stat(&zk, guard.node_path(), &claim, version).await {
            Ok(stat) => stat,
            Err(WriteError::Fenced) => {
                fail(tick, "lost the job's lock before taking the tick", &WriteError::Fenced);
                return decided;
            }
            Err(WriteError::ZooKeeper(err)) if is_transient(&err) => {
                // The answer was lost, not necessarily the write: if it was applied, the tick
                // is ours and would otherwise run nowhere.
                match shared.store.confirm(&zk, &claim, version, wait).await {
                    Some(stat) => {
                        debug!(target: "zklock::scheduler", job = %shared.name, tick = %show(tick), error = %err,
                            "the claim's answer was lost, but the record shows it was applied");
                        stat
                    }
                    None => {
                        fail(tick, "could not take the tick", &err);
                        return decided;
                    }
                }
            }
            Err(err) => {
                fail(tick, "could not take the tick", &err);
                return decided;
            }
        };
        version = claimed.version;
        decided = Some(tick);
        check_clock(shared, claimed.mtime);
        if guard.is_lost() {
            // The tick is taken (the record says so), but running it now would run it
            // without the lock; it is given up rather than risked twice.
            shared.stats.lost_lock();
            warn!(target: "zklock::scheduler", job = %shared.name, tick = %show(tick),
                "the job's lock was lost right after the tick was taken; not running it");
            return decided;
        }
        shared.stats.saw_recorded(tick);
        shared.stats.ran(tick);
        debug!(target: "zklock::scheduler", job = %shared.name, tick = %show(tick), session = %shared.session(),
            token = %guard.fencing_token(), catch_up = tick != own, "running");

        let state = match execute(shared, &guard, tick).await {
            Outcome::Done => RunState::Done,
            Outcome::Failed(_) => RunState::Failed,
            // The lock is gone: the record can no longer be written by this node, and says
            // `running` for this tick. Later ticks are left to the next fire or other nodes.
            Outcome::Lost => return decided,
        };
        let done = TickRecord { tick, state, session };
        version = match shared.store.write(&zk, guard.node_path(), &done, version).await {
            Ok(version) => version,
            Err(err) => {
                warn!(target: "zklock::scheduler", job = %shared.name, tick = %show(tick), error = %err,
                    "could not record how the run ended");
                return decided;
            }
        };
    }
    drop(guard);
    decided
}

/// How far this node's clock may be off ZooKeeper's before it is warned about.
const CLOCK_SKEW_WARNING: Duration = Duration::from_millis(500);

/// Compares this node's clock with the ensemble's commit time of a write just made (`mtime`,
/// milliseconds since the epoch): a node whose clock runs far ahead takes ticks early and pushes
/// the record forward, so the others skip them; a node far behind runs ticks late. Records the
/// skew in the stats and warns when it exceeds [`CLOCK_SKEW_WARNING`]. The write's round trip
/// is in the figure too, so small skews are not told apart from latency.
fn check_clock(shared: &Shared, mtime: i64) {
    let local = match shared.clock.now().duration_since(std::time::UNIX_EPOCH) {
        Ok(since) => since.as_millis() as i64,
        Err(_) => return,
    };
    let skew_ms = local - mtime;
    shared.stats.saw_clock_skew(skew_ms);
    if skew_ms.unsigned_abs() > CLOCK_SKEW_WARNING.as_millis() as u64 {
        warn!(target: "zklock::scheduler", job = %shared.name, skew_ms,
            "this node's clock is {} ZooKeeper's by {} ms; ticks run early or late and other nodes may skip them; sync the clocks",
            if skew_ms > 0 { "ahead of" } else { "behind" }, skew_ms.unsigned_abs());
    }
}

/// Runs the user's closure for `tick` in its own task, racing it against the loss of `guard`.
async fn execute(shared: &Shared, guard: &LockGuard, tick: i64) -> Outcome {
    let run = JobRun {
        job: shared.name.clone(),
        tick: tick_time(tick),
        token: guard.fencing_token(),
        loss: guard.loss_signal(),
    };
    let future = {
        let mut make = shared.run.lock().unwrap_or_else(|e| e.into_inner());
        (*make)(run)
    };
    let mut task = tokio::spawn(future);
    let finished = |joined: Result<Result<(), String>, tokio::task::JoinError>| match joined {
        Ok(Ok(())) => Outcome::Done,
        Ok(Err(reason)) => Outcome::Failed(reason),
        Err(join) if join.is_panic() => Outcome::Failed("the run panicked".into()),
        Err(_) => Outcome::Failed("the run was cancelled".into()),
    };
    let outcome = tokio::select! {
        joined = &mut task => finished(joined),
        err = guard.lost() => {
            shared.stats.lost_lock();
            match shared.on_lost {
                OnLost::Abort => {
                    task.abort();
                    let _ = task.await;
                    warn!(target: "zklock::scheduler", job = %shared.name, tick = %show(tick), error = %err,
                        "lock lost during the run; run cancelled");
                    return Outcome::Lost;
                }
                OnLost::Continue => {
                    warn!(target: "zklock::scheduler", job = %shared.name, tick = %show(tick), error = %err,
                        "lock lost during the run; letting it finish");
                    let outcome = finished(task.await);
                    if let Outcome::Failed(reason) = outcome {
                        shared.stats.failed();
                        warn!(target: "zklock::scheduler", job = %shared.name, tick = %show(tick), %reason, "run failed");
                    }
                    return Outcome::Lost;
                }
            }
        }
    };
    match &outcome {
        Outcome::Done => {
            debug!(target: "zklock::scheduler", job = %shared.name, tick = %show(tick), "run finished")
        }
        Outcome::Failed(reason) => {
            shared.stats.failed();
            warn!(target: "zklock::scheduler", job = %shared.name, tick = %show(tick), %reason, "run failed");
        }
        Outcome::Lost => {}
    }
    outcome
}

#[cfg(test)]
mod tests {
    use super::*;

    const T: i64 = 1_700_000_000_000;

    #[test]
    fn due_ticks_are_every_tick_after_the_floor_oldest_first() {
        let ticks = Ticks::parse("* * * * * *").unwrap();
        assert_eq!(due_ticks(&ticks, Some(T - 1000), T), (vec![T], None));
        assert_eq!(
            due_ticks(&ticks, Some(T - 4000), T),
            (vec![T - 3000, T - 2000, T - 1000, T], None)
        );
        // A floor between ticks: the tick after it is due.
        assert_eq!(due_ticks(&ticks, Some(T - 1500), T), (vec![T - 1000, T], None));
        // No floor: only the fire's own tick.
        assert_eq!(due_ticks(&ticks, None, T), (vec![T], None));
    }

    #[test]
    fn due_ticks_give_up_all_but_the_latest_ones() {
        let ticks = Ticks::parse("* * * * * *").unwrap();
        let limit = MAX_CATCH_UP as i64;
        // Exactly the limit of late ticks: all run.
        let (due, missed) = due_ticks(&ticks, Some(T - (limit + 1) * 1000), T);
        assert_eq!(due.len(), MAX_CATCH_UP + 1);
        assert_eq!(missed, None);
        // One more: the oldest is given up.
        let (due, missed) = due_ticks(&ticks, Some(T - (limit + 2) * 1000), T);
        assert_eq!(due.len(), MAX_CATCH_UP + 1);
        assert_eq!(due.first(), Some(&(T - limit * 1000)));
        assert_eq!(due.last(), Some(&T));
        let gone = T - (limit + 1) * 1000;
        assert_eq!(missed, Some((gone, gone)));
        // A floor a day back costs no more than the limit.
        let (due, missed) = due_ticks(&ticks, Some(T - 86_400_000), T);
        assert_eq!(due.len(), MAX_CATCH_UP + 1);
        assert_eq!(missed, Some((T - 86_399_000, T - (limit + 1) * 1000)));
    }
}
