//! One fire of a singleton job on one node: decide, run, record, report.

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex as StdMutex};
use std::time::{Duration, SystemTime};

use tokio::sync::Mutex as AsyncMutex;
use tracing::{debug, error, info, warn};

use super::clock::Clock;
use super::policy::{OnLoss, Policy};
use super::record::{RecordStore, RunState, TickRecord, WriteError};
use super::stats::JobStats;
use super::ticks::{show, tick_time, Ticks};
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

    /// Resolves when this run's lock is lost; see [`OnLoss`] for what the adapter does then.
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
    pub on_loss: OnLoss,
    pub clock: Arc<dyn Clock>,
    pub lock_wait: Option<Duration>,
    pub store: RecordStore,
    pub stats: JobStats,
    /// Fires of this job on this node are handled one at a time; holds the latest own tick
    /// handled (once-per-tick policy).
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
        info!(target: "zklock::scheduler", job = %shared.name, tick = %show(own), "skipped: the previous run is still going on this node");
        return;
    };
    match shared.lock.try_acquire().await {
        Ok(Some(guard)) => {
            shared.stats.ran(own);
            info!(target: "zklock::scheduler", job = %shared.name, tick = %show(own), session = %shared.session(), token = %guard.fencing_token(), "running");
            let _ = execute(shared, &guard, own).await;
            drop(guard);
        }
        Ok(None) => {
            shared.stats.skipped();
            info!(target: "zklock::scheduler", job = %shared.name, tick = %show(own), "skipped: running on another node");
        }
        Err(err) => {
            shared.stats.failed();
            warn!(target: "zklock::scheduler", job = %shared.name, tick = %show(own), error = %err, "could not try the job's lock");
        }
    }
}

async fn fire_once(shared: &Shared, own: i64) {
    let mut last_local = shared.serial.lock().await;
    let mut todo = Vec::with_capacity(2);
    match *last_local {
        // The scheduler fired again within a tick this node already handled: not a fire of
        // its own, so not counted.
        Some(prev) if own <= prev => {
            debug!(target: "zklock::scheduler", job = %shared.name, tick = %show(own), "skipped: this node already handled the tick");
            return;
        }
        // A fire that lands one tick further than the last one handled here (the scheduler
        // fired late, or this node's clock was read across a tick boundary) first offers the
        // tick in between, so the node walks its ticks in order.
        Some(prev) => {
            if let Some(before) = shared.ticks.before(own).filter(|b| *b > prev) {
                todo.push((before, false));
            }
        }
        None => {}
    }
    todo.push((own, true));
    *last_local = Some(own);
    for (tick, is_own) in todo {
        once(shared, tick, is_own).await;
    }
}

/// Runs `tick` unless the cluster's record says it was taken already.
async fn once(shared: &Shared, tick: i64, is_own: bool) {
    let skip = |why: &str| {
        if is_own {
            shared.stats.skipped();
            info!(target: "zklock::scheduler", job = %shared.name, tick = %show(tick), "skipped: {why}");
        } else {
            debug!(target: "zklock::scheduler", job = %shared.name, tick = %show(tick), "catch-up not needed: {why}");
        }
    };
    let fail = |what: &str, err: &dyn std::fmt::Display| {
        shared.stats.failed();
        warn!(target: "zklock::scheduler", job = %shared.name, tick = %show(tick), error = %err, "{what}");
    };

    let wait = shared
        .lock_wait
        .or_else(|| shared.ticks.period_after(tick))
        .unwrap_or(Duration::from_secs(60));
    let guard = match shared.lock.acquire_timeout(wait).await {
        Ok(guard) => guard,
        Err(LockError::Timeout { .. }) => {
            return skip(&format!("the job's lock stayed busy for {wait:?}"));
        }
        Err(err) => return fail("could not take the job's lock", &err),
    };
    let zk = match shared.client.zookeeper().await {
        Ok(zk) => zk,
        Err(err) => return fail("no ZooKeeper session for the tick record", &err),
    };
    let acls = shared.client.inner.config.acls();
    let (record, version) = match shared.store.read(&zk, acls).await {
        Ok(read) => read,
        Err(err) => return fail("could not read the tick record", &err),
    };
    let record = match record {
        Ok(record) => record,
        Err(reason) => {
            shared.stats.failed();
            error!(target: "zklock::scheduler", job = %shared.name, path = %shared.store.path, %reason,
                "the tick record is unreadable; not running (fix or delete the node)");
            return;
        }
    };
    if let Some(record) = &record {
        shared.stats.saw_recorded(record.tick);
        if record.tick >= tick {
            let far = shared
                .ticks
                .after(tick)
                .and_then(|next| shared.ticks.after(next))
                .is_some_and(|far| record.tick > far);
            if far {
                warn!(target: "zklock::scheduler", job = %shared.name, recorded = %show(record.tick), tick = %show(tick),
                    "the recorded tick is well ahead of this node's clock; check the clocks of the cluster");
            }
            return skip(&format!(
                "tick already taken (recorded {}, {:?})",
                show(record.tick),
                record.state
            ));
        }
    }

    // Take the tick before running it: from here on no node runs it again, whatever happens
    // to this run.
    let session = shared.client.session_id();
    let claim = TickRecord {
        tick,
        state: RunState::Running,
        session,
    };
    let version = match shared.store.write(&zk, guard.node_path(), &claim, version).await {
        Ok(version) => version,
        Err(WriteError::Fenced) => return fail("lost the job's lock before taking the tick", &WriteError::Fenced),
        Err(err) => return fail("could not take the tick", &err),
    };
    shared.stats.saw_recorded(tick);
    shared.stats.ran(tick);
    info!(target: "zklock::scheduler", job = %shared.name, tick = %show(tick), session = %shared.session(),
        token = %guard.fencing_token(), catch_up = !is_own, "running");

    let state = match execute(shared, &guard, tick).await {
        Outcome::Done => RunState::Done,
        Outcome::Failed(_) => RunState::Failed,
        // The lock is gone: the record can no longer be written by this node, and says
        // `running` for this tick.
        Outcome::Lost => return,
    };
    let done = TickRecord { tick, state, session };
    if let Err(err) = shared.store.write(&zk, guard.node_path(), &done, version).await {
        warn!(target: "zklock::scheduler", job = %shared.name, tick = %show(tick), error = %err,
            "could not record how the run ended");
    }
    drop(guard);
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
            match shared.on_loss {
                OnLoss::Cancel => {
                    task.abort();
                    let _ = task.await;
                    warn!(target: "zklock::scheduler", job = %shared.name, tick = %show(tick), error = %err,
                        "lock lost during the run; run cancelled");
                    return Outcome::Lost;
                }
                OnLoss::Flag => {
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
            info!(target: "zklock::scheduler", job = %shared.name, tick = %show(tick), "run finished")
        }
        Outcome::Failed(reason) => {
            shared.stats.failed();
            warn!(target: "zklock::scheduler", job = %shared.name, tick = %show(tick), %reason, "run failed");
        }
        Outcome::Lost => {}
    }
    outcome
}
