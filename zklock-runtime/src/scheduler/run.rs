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
use super::ticks::{due_ticks, show, tick_time, Missed, Ticks, MAX_CATCH_UP};
use crate::error::is_transient;
use crate::zk;
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
    /// Fires of this job on this node are handled one at a time.
    pub serial: AsyncMutex<Handled>,
    pub run: StdMutex<RunFn>,
    /// Whether this node was warned that its clock runs ahead of the ensemble's.
    pub clock_ahead_reported: std::sync::atomic::AtomicBool,
}

/// What this node has done with the job's ticks so far.
#[derive(Debug, Default)]
pub(crate) struct Handled {
    /// The latest tick this node is done with: run, found taken, or given up.
    pub last: Option<i64>,
    /// A claim whose write may have been applied although its answer never came, with the
    /// record version it was written over: if the record still shows exactly it, the tick is
    /// this node's to run ([`resume_unconfirmed`]).
    pub unconfirmed: Option<(TickRecord, i32)>,
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

    fn wait_for_lock(&self, own: i64) -> Duration {
        self.lock_wait
            .or_else(|| self.ticks.period_after(own))
            .unwrap_or(Duration::from_secs(60))
    }
}

/// Entry point of every fire.
pub(crate) async fn fire(shared: Arc<Shared>) {
    let _in_flight = shared.stats.fire_started();
    // One fire at a time on this node. The clock is read once this fire's turn has come: a
    // fire that queued behind a long run decides by the time it runs, so the catch-up bound
    // applies to it, and fires that queued meanwhile find their tick handled.
    let mut handled = match shared.policy {
        Policy::Skip => match shared.serial.try_lock() {
            Ok(handled) => handled,
            Err(_) => {
                shared.stats.skipped();
                debug!(target: "zklock::scheduler", job = %shared.name, "skipped: the previous run is still going on this node");
                return;
            }
        },
        Policy::OncePerTick => shared.serial.lock().await,
    };
    let Some(own) = shared.ticks.tick_at(shared.clock.now()) else {
        shared.stats.failed();
        error!(target: "zklock::scheduler", job = %shared.name, "the schedule has no tick at or before this node's clock");
        return;
    };
    // The scheduler fired again within a tick this node already handled (it fired twice, or
    // this fire queued behind the run of its tick): not a fire of its own, so not counted.
    if handled.last.is_some_and(|prev| own <= prev) {
        debug!(target: "zklock::scheduler", job = %shared.name, tick = %show(own), "skipped: this node already handled the tick");
        return;
    }
    let guard = match shared.policy {
        Policy::Skip => match shared.lock.try_acquire().await {
            Ok(Some(guard)) => guard,
            Ok(None) => {
                shared.stats.skipped();
                debug!(target: "zklock::scheduler", job = %shared.name, tick = %show(own), "skipped: running on another node");
                return;
            }
            Err(err) => {
                shared.stats.failed();
                warn!(target: "zklock::scheduler", job = %shared.name, tick = %show(own), error = %err, "could not try the job's lock");
                return;
            }
        },
        Policy::OncePerTick => {
            let wait = shared.wait_for_lock(own);
            match shared.lock.acquire_timeout(wait).await {
                Ok(guard) => guard,
                Err(LockError::Timeout { .. }) => {
                    shared.stats.skipped();
                    debug!(target: "zklock::scheduler", job = %shared.name, tick = %show(own),
                        "skipped: the job's lock stayed busy for {wait:?}; the next fire offers the tick again");
                    return;
                }
                Err(err) => {
                    shared.stats.failed();
                    warn!(target: "zklock::scheduler", job = %shared.name, tick = %show(own), error = %err, "could not take the job's lock");
                    return;
                }
            }
        }
    };
    // A node's first fire offers its own tick only; a once-per-tick node's later fires also
    // offer every tick after the last one it handled, so the node walks its ticks in order even
    // when the scheduler fired late, a fire read the clock across a tick boundary, or an
    // earlier fire could not take the lock. A skip-policy fire offers its own tick only.
    let since = match shared.policy {
        Policy::OncePerTick => handled.last,
        Policy::Skip => None,
    };
    // When nothing could be decided, the floor stays where it was, so the next fire offers
    // this fire's ticks again.
    let decided = under_lock(&shared, &guard, &mut handled, since, own).await;
    handled.last = handled.last.max(decided);
    drop(guard);
}

/// How far ahead of the ensemble's clock a tick may be and still be taken. A node whose clock
/// runs further ahead takes the ticks that are due by ZooKeeper's clock instead of its own, so
/// it cannot push the record past ticks the other nodes have yet to run.
pub(crate) const CLOCK_AHEAD_LIMIT: Duration = Duration::from_secs(1);

/// The latest tick that may be taken now: this node's `own` tick, unless the ensemble's clock
/// says that is more than [`CLOCK_AHEAD_LIMIT`] in the future.
fn cap_by_server_clock(shared: &Shared, guard: &LockGuard, own: i64) -> Option<i64> {
    let Some(server_now) = guard.server_now_ms() else {
        return Some(own);
    };
    let limit = server_now.saturating_add(CLOCK_AHEAD_LIMIT.as_millis() as i64);
    if own <= limit {
        return Some(own);
    }
    if !shared
        .clock_ahead_reported
        .swap(true, std::sync::atomic::Ordering::Relaxed)
    {
        warn!(target: "zklock::scheduler", job = %shared.name, tick = %show(own), server_time = %show(server_now),
            "this node's clock is ahead of ZooKeeper's; it takes only ticks due by ZooKeeper's clock (sync the clocks)");
    }
    shared.ticks.tick_at(tick_time(limit))
}

/// The tick a record proves taken: its own, unless it was written more than
/// [`CLOCK_AHEAD_LIMIT`] before that tick by the ensemble's clock (`written_ms`), which only a
/// node with a clock far ahead does; such a claim covers the ticks due when it was written.
fn taken_up_to(shared: &Shared, record: &TickRecord, written_ms: i64) -> Option<i64> {
    let limit = written_ms.saturating_add(CLOCK_AHEAD_LIMIT.as_millis() as i64);
    if record.tick <= limit {
        return Some(record.tick);
    }
    warn!(target: "zklock::scheduler", job = %shared.name, recorded = %show(record.tick), written = %show(written_ms),
        "the record claims a tick far ahead of when it was written (a node's clock ran ahead); honouring only the ticks due by then");
    shared.ticks.tick_at(tick_time(limit))
}

/// Under one hold of the job's lock: settles what the record says about earlier runs, then
/// runs in order every tick after `since` up to `own` that nobody took yet (only `own` when
/// the record cannot prove which earlier ticks are untaken).
///
/// Returns the latest tick this node is done with (run, found taken, or given up), or `None`
/// when it could not decide anything; ticks after the returned one are offered again by the
/// next fire.
async fn under_lock(
    shared: &Shared,
    guard: &LockGuard,
    handled: &mut Handled,
    since: Option<i64>,
    own: i64,
) -> Option<i64> {
    let fail = |tick: i64, what: &str, err: &dyn std::fmt::Display| {
        shared.stats.failed();
        warn!(target: "zklock::scheduler", job = %shared.name, tick = %show(tick), error = %err, "{what}");
    };
    let zk = match shared.client.zookeeper().await {
        Ok(zk) => zk,
        Err(err) => {
            fail(own, "no ZooKeeper session for the tick record", &err);
            return None;
        }
    };
    let acls = shared.client.inner.config.acls();
    let (record, stat) = match shared.store.read(&zk, acls).await {
        Ok(read) => read,
        Err(err) => {
            fail(own, "could not read the tick record", &err);
            return None;
        }
    };
    let mut record = match record {
        Ok(record) => record,
        Err(reason) => {
            shared.stats.failed();
            error!(target: "zklock::scheduler", job = %shared.name, path = %shared.store.path, %reason,
                "the tick record is unreadable; not running (fix it, or reset the job: `zklock jobs reset`)");
            return None;
        }
    };
    let mut version = stat.version;
    let ctx = Hold { shared, guard, zk: &zk };

    // Earlier runs: our own claim whose answer was lost, or someone's run that never reported.
    if let Some((claim, over)) = handled.unconfirmed.take() {
        if record.as_ref() == Some(&claim) && version == over + 1 {
            debug!(target: "zklock::scheduler", job = %shared.name, tick = %show(claim.tick),
                "an earlier claim of this node was applied after all; running its tick now");
            match ctx.run_claimed(&claim, version).await {
                Some((done, v)) => (record, version) = (Some(done), v),
                None => return None,
            }
        }
    }
    if let Some(orphan) = record.as_ref().filter(|r| r.state == RunState::Running) {
        // We hold the lock, so the run that took this tick is not running under it any more.
        let lost = TickRecord::next(Some(orphan), orphan.tick, RunState::Lost, orphan.session, version);
        match shared.store.write(&zk, guard.node_path(), &lost, version).await {
            Ok(v) => {
                warn!(target: "zklock::scheduler", job = %shared.name, tick = %show(orphan.tick),
                    session = %orphan.session.map_or_else(|| "none".to_owned(), |s| format!("{s:#x}")),
                    "the run of this tick never reported back (its node died or lost the lock); recorded as lost");
                (record, version) = (Some(lost), v);
            }
            Err(err) => {
                fail(own, "could not record a dead run as lost", &err);
                return None;
            }
        }
    }

    let own = cap_by_server_clock(shared, guard, own)?;
    let recorded = match &record {
        Some(record) => {
            shared.stats.saw_recorded(record.tick);
            taken_up_to(shared, record, stat.mtime)
        }
        None => None,
    };
    if let Some(recorded) = recorded.filter(|recorded| *recorded >= own) {
        shared.stats.skipped();
        debug!(target: "zklock::scheduler", job = %shared.name, tick = %show(own), recorded = %show(recorded), "skipped: tick already taken");
        return Some(own);
    }

    // Ticks at or before the record were taken; ticks at or before `since` were handled here.
    // Ticks in between are run late only when the record proves it was written by the node
    // that took the last of them: a deleted, hand-edited or rolled-back record says nothing
    // of the ticks after it, which may have run. A first fire offers only its own tick.
    let proven = record.as_ref().is_some_and(|r| r.intact(version));
    let floor = match since {
        Some(since) if proven => Some(since).max(recorded),
        _ => {
            if since.is_some() {
                warn!(target: "zklock::scheduler", job = %shared.name, tick = %show(own),
                    "the tick record is missing or was not written by a scheduler node (deleted, edited or restored?); not running late ticks");
            }
            since.max(recorded).max(shared.ticks.before(own))
        }
    };
    let Some(floor) = floor else {
        // The schedule has no tick before `own`: `own` is its first.
        return ctx.run_due(&[own], record, version, handled).await;
    };
    let (due, missed) = due_ticks(&shared.ticks, floor, own);
    let mut decided = Some(floor);
    if let Some(Missed { first, last, count }) = missed {
        shared.stats.gave_up(count);
        warn!(target: "zklock::scheduler", job = %shared.name, tick = %show(own), first = %show(first), last = %show(last),
            count, max_catch_up = MAX_CATCH_UP, "missed: ticks from first to last were more than max_catch_up ticks late; giving them up");
        decided = Some(last);
    }
    ctx.run_due(&due, record, version, handled).await.max(decided)
}

/// One hold of the job's lock, with the session it is held in.
struct Hold<'a> {
    shared: &'a Shared,
    guard: &'a LockGuard,
    zk: &'a zk::Client,
}

impl Hold<'_> {
    /// Claims and runs `due` in order. Returns the latest tick taken, if any.
    async fn run_due(
        &self,
        due: &[i64],
        mut record: Option<TickRecord>,
        mut version: i32,
        handled: &mut Handled,
    ) -> Option<i64> {
        let shared = self.shared;
        let mut decided = None;
        for &tick in due {
            // Take the tick before running it: from here on no node runs it again, whatever
            // happens to this run. The write is fenced, so it also proves the lock is still ours.
            let claim = TickRecord::next(
                record.as_ref(),
                tick,
                RunState::Running,
                shared.client.session_id(),
                version,
            );
            let claimed = match self.claim(&claim, version, handled).await {
                Some(stat) => stat,
                None => return decided,
            };
            decided = Some(tick);
            check_clock(shared, claimed.mtime);
            match self.run_claimed(&claim, claimed.version).await {
                Some((done, v)) => (record, version) = (Some(done), v),
                None => return decided,
            }
        }
        decided
    }

    /// Writes `claim` over `version`; the new stat once it is known to be applied.
    async fn claim(&self, claim: &TickRecord, version: i32, handled: &mut Handled) -> Option<zk::Stat> {
        let shared = self.shared;
        let tick = claim.tick;
        let failed = |what: &str, err: &dyn std::fmt::Display| {
            shared.stats.failed();
            warn!(target: "zklock::scheduler", job = %shared.name, tick = %show(tick), error = %err, "{what}");
        };
        match shared
            .store
            .write_stat(self.zk, self.guard.node_path(), claim, version)
            .await
        {
            Ok(stat) => Some(stat),
            Err(WriteError::Fenced) => {
                failed("lost the job's lock before taking the tick", &WriteError::Fenced);
                None
            }
            Err(WriteError::ZooKeeper(err)) if is_transient(&err) => {
                // The answer was lost, not necessarily the write: if it was applied, the tick
                // is ours and would otherwise run nowhere.
                let wait = shared.wait_for_lock(tick);
                match shared.store.confirm(self.zk, claim, version, wait).await {
                    Some(stat) => {
                        debug!(target: "zklock::scheduler", job = %shared.name, tick = %show(tick), error = %err,
                            "the claim's answer was lost, but the record shows it was applied");
                        Some(stat)
                    }
                    None => {
                        // Applied or not, nobody can tell now; the next hold of this node
                        // looks again, and runs the tick if the record still shows this claim.
                        shared.stats.lost_lock();
                        warn!(target: "zklock::scheduler", job = %shared.name, tick = %show(tick), error = %err,
                            "could not learn whether the tick was taken; the next fire looks again");
                        handled.unconfirmed = Some((claim.clone(), version));
                        None
                    }
                }
            }
            Err(err) => {
                failed("could not take the tick", &err);
                None
            }
        }
    }

    /// Runs the tick of `claim`, which the record holds at `version`, and records how it ended.
    /// Returns the record written and its version; `None` when the run was lost or its end
    /// could not be recorded (later ticks are then left to the next fire or other nodes).
    async fn run_claimed(&self, claim: &TickRecord, version: i32) -> Option<(TickRecord, i32)> {
        let (shared, guard, tick) = (self.shared, self.guard, claim.tick);
        if guard.is_lost() {
            // The tick is taken (the record says so), but running it now would run it
            // without the lock; it is given up rather than risked twice.
            shared.stats.lost_lock();
            warn!(target: "zklock::scheduler", job = %shared.name, tick = %show(tick),
                "the job's lock was lost right after the tick was taken; not running it");
            return None;
        }
        shared.stats.saw_recorded(tick);
        shared.stats.ran(tick);
        debug!(target: "zklock::scheduler", job = %shared.name, tick = %show(tick), session = %shared.session(),
            token = %guard.fencing_token(), "running");
        let state = match execute(shared, guard, tick).await {
            Outcome::Done => RunState::Done,
            Outcome::Failed(_) => RunState::Failed,
            // The lock is gone: the record can no longer be written by this node, and says
            // `running` for this tick until a node holding the lock records it as lost.
            Outcome::Lost => return None,
        };
        let done = TickRecord::next(Some(claim), tick, state, claim.session, version);
        match shared.store.write(self.zk, guard.node_path(), &done, version).await {
            Ok(v) => Some((done, v)),
            Err(err) => {
                warn!(target: "zklock::scheduler", job = %shared.name, tick = %show(tick), error = %err,
                    "could not record how the run ended");
                None
            }
        }
    }
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
