//! One hold of a singleton job's lock: the fenced writes and the runs a beat makes while it
//! holds the lock ([`Hold`]), and the runs under [`Policy::Allow`], which go on without it.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde_json::Value;
use tracing::{debug, warn};

use super::history::{self, HistoryEntry, Outcome};
use super::node::{ms_of, Handled, Shared};
use super::policy::Policy;
use super::record::{RunState, TickRecord};
use super::run::{execute, Ended, JobRun};
use super::store::{Commit, WriteError};
use super::ticks::{show, tick_time};
use crate::engine::guard::LockGuard;
use crate::error::is_transient;
use zookeeper_client as zk;

/// One hold of the job's lock: the session it is held in, and the job's state as this node
/// last wrote or read it.
pub(crate) struct Hold<'a> {
    pub shared: &'a Arc<Shared>,
    pub guard: &'a LockGuard,
    pub zk: &'a zk::Client,
    pub record: Option<TickRecord>,
    pub version: i32,
    pub history: Vec<Value>,
    /// History entries to write with the next commit.
    pub pending: Vec<HistoryEntry>,
}

impl Hold<'_> {
    /// Writes the record (over the version read) and the pending history entries plus `entry`,
    /// fenced by our lock node; keeps what was written.
    async fn commit(
        &mut self,
        record: Option<TickRecord>,
        entry: Option<HistoryEntry>,
        take: Option<&str>,
    ) -> Result<Option<zk::Stat>, WriteError> {
        let mut entries = std::mem::take(&mut self.pending);
        entries.extend(entry);
        let history = (!entries.is_empty()).then(|| history::prepend(self.history.clone(), &entries));
        let commit = Commit {
            record: record.as_ref().map(|r| (r.encode(), self.version)),
            history: history.clone(),
            take,
        };
        let stat = self
            .shared
            .store
            .commit(self.zk, self.guard.node_path(), commit)
            .await?;
        if let Some(history) = history {
            self.history = history::parse_raw(&history);
        }
        if let (Some(record), Some(stat)) = (record, &stat) {
            self.record = Some(record);
            self.version = stat.version;
        }
        Ok(stat)
    }

    /// Takes the run-now request `name` and runs the job once for it. Returns false when the
    /// hold cannot go on (the lock was lost, or ZooKeeper failed).
    pub async fn run_requested(&mut self, name: &str) -> bool {
        let shared = self.shared;
        match self.commit(None, None, Some(name)).await {
            Ok(_) => {}
            Err(WriteError::Taken) => return true,
            Err(err) => {
                shared.stats.failed();
                warn!(target: "zklock::scheduler", job = %shared.name, request = name, error = %err, "could not take a run-now request");
                return false;
            }
        }
        if self.guard.is_lost() {
            shared.stats.lost_lock();
            return false;
        }
        shared.stats.ran(None);
        debug!(target: "zklock::scheduler", job = %shared.name, request = name, session = %shared.session(),
            token = %self.guard.fencing_token(), "running on request");
        let run = JobRun {
            job: shared.name.clone(),
            tick: SystemTime::now(),
            triggered: true,
            token: self.guard.fencing_token(),
            loss: self.guard.loss_signal(),
        };
        let ended = execute(
            &shared.run,
            run,
            self.guard.lost(),
            &shared.limits,
            std::future::pending(),
            name,
        )
        .await;
        self.report(None, ended).await.is_some()
    }

    /// Counts and records how a run ended; returns the record state for a tick's run, `None`
    /// when the run was lost (the record can then no longer be written by this node).
    async fn report(&mut self, tick: Option<i64>, ended: Ended) -> Option<RunState> {
        let shared = self.shared;
        let (state, entry) = tally(shared, tick, ended);
        let state = state?;
        let record = tick.and_then(|tick| {
            let claim = self.record.as_ref().filter(|r| r.tick == tick)?;
            Some(TickRecord::next(
                Some(claim),
                tick,
                state.clone(),
                claim.session,
                self.version,
            ))
        });
        match self.commit(record, Some(entry), None).await {
            Ok(_) => Some(state),
            Err(err) => {
                warn!(target: "zklock::scheduler", job = %shared.name, tick = ?tick.map(show), error = %err,
                    "could not record how the run ended");
                None
            }
        }
    }

    /// A record left `running` by a run that never reported back: we hold the lock, so that run
    /// is not going on under it any more. Records it as lost. A record that was not `proven`
    /// as read (restored or edited) is rewritten without a version stamp, so that it proves
    /// no more to later holds than it did to this one. Returns false when the hold cannot go
    /// on.
    pub async fn settle_orphan(&mut self, proven: bool) -> bool {
        let shared = self.shared;
        // Under `Allow` runs go on without the lock: `running` is no sign of a dead run.
        let orphan = self
            .record
            .as_ref()
            .filter(|r| r.state == RunState::Running && shared.policy != Policy::Allow);
        let Some(orphan) = orphan else {
            return true;
        };
        let session = orphan.session.map_or_else(|| "none".to_owned(), |s| format!("{s:#x}"));
        let mut lost = TickRecord::next(Some(orphan), orphan.tick, RunState::Lost, orphan.session, self.version);
        if !proven {
            lost.version = None;
        }
        let entry = shared.entry(Some(orphan.tick), Outcome::Lost).because(format!(
            "the run by session {session} never reported back (its node died or lost the lock)"
        ));
        let tick = orphan.tick;
        match self.commit(Some(lost), Some(entry), None).await {
            Ok(_) => {
                warn!(target: "zklock::scheduler", job = %shared.name, tick = %show(tick), %session,
                    "the run of this tick never reported back (its node died or lost the lock); recorded as lost");
                true
            }
            Err(err) => {
                shared.stats.failed();
                warn!(target: "zklock::scheduler", job = %shared.name, error = %err, "could not record a dead run as lost");
                false
            }
        }
    }

    /// Takes `tick`, given up, as missed, so that no node runs it late.
    pub async fn take_missed(&mut self, tick: i64) {
        let shared = self.shared;
        let missed = TickRecord::next(
            self.record.as_ref(),
            tick,
            RunState::Missed,
            shared.client.session_id(),
            self.version,
        );
        if let Err(err) = self.commit(Some(missed), None, None).await {
            warn!(target: "zklock::scheduler", job = %shared.name, tick = %show(tick), error = %err, "could not record a missed tick");
        }
    }

    /// Takes `own` as skipped because the job is paused, so no node runs it and no node replays
    /// it after the resume; one history entry stands for a run of paused ticks.
    pub async fn skip_paused(&mut self, own: i64) {
        let shared = self.shared;
        shared.stats.skipped();
        debug!(target: "zklock::scheduler", job = %shared.name, tick = %show(own), "skipped: the job is paused");
        let skipped = TickRecord::next(
            self.record.as_ref(),
            own,
            RunState::Skipped,
            shared.client.session_id(),
            self.version,
        );
        let already = self.record.as_ref().is_some_and(|r| r.state == RunState::Skipped);
        let entry = (!already).then(|| shared.entry(Some(own), Outcome::Skipped).because("paused"));
        if let Err(err) = self.commit(Some(skipped), entry, None).await {
            warn!(target: "zklock::scheduler", job = %shared.name, tick = %show(own), error = %err, "could not record a paused tick");
        }
    }

    /// Claims and runs `tick`. Returns whether the tick was taken (claimed), and whether the
    /// hold may go on to later ticks (false when the lock was lost, a write failed, or the run
    /// made way for a later tick).
    pub async fn run_tick(&mut self, tick: i64, handled: &mut Handled) -> Ran {
        // Take the tick before running it: from here on no node runs it again, whatever
        // happens to this run. The write is fenced, so it also proves the lock is still ours.
        let claim = TickRecord::next(
            self.record.as_ref(),
            tick,
            RunState::Running,
            self.shared.client.session_id(),
            self.version,
        );
        if !self.claim(&claim, handled).await {
            return Ran {
                taken: false,
                go_on: false,
            };
        }
        Ran {
            taken: true,
            go_on: self.run_claimed(claim).await,
        }
    }

    /// Reads the job's state again (between the runs of a backlog), so that the next decision
    /// sees a pause or a record written meanwhile. `None` when it cannot be read.
    pub async fn reread(&mut self) -> Option<super::store::JobState> {
        let shared = self.shared;
        let state = match shared
            .store
            .read_state(self.zk, shared.client.inner.config.acls())
            .await
        {
            Ok(state) => state,
            Err(err) => {
                shared.stats.failed();
                warn!(target: "zklock::scheduler", job = %shared.name, error = %err, "could not read the tick record again");
                return None;
            }
        };
        match &state.record {
            Ok(record) => {
                self.record = record.clone();
                self.version = state.stat.version;
                self.history = state.history.clone();
                Some(state)
            }
            Err(reason) => {
                shared.stats.failed();
                warn!(target: "zklock::scheduler", job = %shared.name, %reason, "the tick record became unreadable");
                None
            }
        }
    }

    /// Writes `claim` over the record. Returns whether it is known to be applied.
    async fn claim(&mut self, claim: &TickRecord, handled: &mut Handled) -> bool {
        let shared = self.shared;
        let tick = claim.tick;
        let pending = self.pending.clone();
        let stat = match self.commit(Some(claim.clone()), None, None).await {
            Ok(stat) => stat,
            Err(WriteError::ZooKeeper(err)) if is_transient(&err) => {
                // The answer was lost, not necessarily the write: if it was applied, the tick
                // is ours and would otherwise run nowhere.
                let wait = shared.wait_for_lock(Some(tick));
                match shared.store.confirm(self.zk, claim, self.version, wait).await {
                    Some(stat) => {
                        debug!(target: "zklock::scheduler", job = %shared.name, tick = %show(tick), error = %err,
                            "the claim's answer was lost, but the record shows it was applied");
                        self.record = Some(claim.clone());
                        self.version = stat.version;
                        Some(stat)
                    }
                    None => {
                        // Applied or not, nobody can tell now; the next hold of this node
                        // looks again, and runs the tick if the record still shows this claim.
                        shared.stats.lost_lock();
                        warn!(target: "zklock::scheduler", job = %shared.name, tick = %show(tick), error = %err,
                            "could not learn whether the tick was taken; the next beat looks again");
                        handled.unconfirmed = Some((claim.clone(), self.version));
                        self.pending = pending;
                        return false;
                    }
                }
            }
            Err(err) => {
                shared.stats.failed();
                let what = match err {
                    WriteError::Fenced => "lost the job's lock before taking the tick",
                    _ => "could not take the tick",
                };
                warn!(target: "zklock::scheduler", job = %shared.name, tick = %show(tick), error = %err, "{what}");
                self.pending = pending;
                return false;
            }
        };
        if let Some(stat) = stat {
            check_clock(shared, stat.mtime);
        }
        true
    }

    /// Runs the tick of `claim`, which the record holds, and records how it ended. Returns
    /// false when later ticks must be left to the next beat or other nodes.
    pub async fn run_claimed(&mut self, claim: TickRecord) -> bool {
        let (shared, guard, tick) = (self.shared, self.guard, claim.tick);
        if guard.is_lost() {
            // The tick is taken (the record says so), but running it now would run it
            // without the lock; it is given up rather than risked twice.
            shared.stats.lost_lock();
            warn!(target: "zklock::scheduler", job = %shared.name, tick = %show(tick),
                "the job's lock was lost right after the tick was taken; not running it");
            return false;
        }
        shared.stats.saw_recorded(tick);
        shared.stats.ran(Some(tick));
        if shared.policy == Policy::Replace {
            // Requests for this tick or earlier are served by this run.
            shared.store.clear_replaced_up_to(self.zk, &shared.ticks, tick).await;
        }
        debug!(target: "zklock::scheduler", job = %shared.name, tick = %show(tick), session = %shared.session(),
            token = %guard.fencing_token(), "running");
        let run = JobRun {
            job: shared.name.clone(),
            tick: tick_time(tick),
            triggered: false,
            token: guard.fencing_token(),
            loss: guard.loss_signal(),
        };
        if shared.policy == Policy::Allow {
            allow(shared.clone(), claim, run);
            return true;
        }
        let replaced = async {
            match shared.policy {
                Policy::Replace => tokio::select! {
                    () = shared.replace.notified() => {}
                    () = shared.store.replaced_after(self.zk, &shared.ticks, tick) => {}
                },
                _ => std::future::pending().await,
            }
        };
        shared.running.store(tick, Ordering::SeqCst);
        let ended = execute(&shared.run, run, guard.lost(), &shared.limits, replaced, &show(tick)).await;
        shared.running.store(i64::MIN, Ordering::SeqCst);
        let made_way = ended.outcome == Outcome::Replaced;
        self.report(Some(tick), ended).await.is_some() && !made_way
    }
}

/// What [`Hold::run_tick`] did.
pub(crate) struct Ran {
    /// The tick was claimed: no node runs it again.
    pub taken: bool,
    /// Later ticks may follow in this hold.
    pub go_on: bool,
}

/// Counts how a run ended and makes its history entry; with the state the run leaves in the
/// record, `None` when it was lost (the record is then no longer this node's to write).
fn tally(shared: &Shared, tick: Option<i64>, ended: Ended) -> (Option<RunState>, HistoryEntry) {
    shared.stats.ended(&ended.outcome, ended.took);
    let state = match ended.outcome {
        Outcome::Ok => Some(RunState::Done),
        Outcome::Lost => {
            shared.stats.lost_lock();
            None
        }
        Outcome::TimedOut => {
            shared.stats.run_timed_out();
            Some(RunState::Failed)
        }
        Outcome::Replaced => Some(RunState::Replaced),
        _ => {
            shared.stats.failed();
            Some(RunState::Failed)
        }
    };
    let mut entry = HistoryEntry::new(
        tick,
        shared.client.identity(),
        ms_of(ended.started),
        ended.took.as_millis() as u64,
        ended.outcome,
    );
    if let Some(error) = ended.error {
        entry = entry.because(error);
    }
    (state, entry)
}

/// Under [`Policy::Allow`]: runs the taken tick of `claim` in a task of its own, without the
/// lock, and records how it ended under the lock once it has.
fn allow(shared: Arc<Shared>, claim: TickRecord, run: JobRun) {
    let in_flight = shared.stats.fire_started();
    tokio::spawn(async move {
        let _in_flight = in_flight;
        let tick = claim.tick;
        let run = JobRun {
            loss: crate::engine::loss::LossSignal::never(&shared.name),
            ..run
        };
        let ended = execute(
            &shared.run,
            run,
            std::future::pending(),
            &shared.limits,
            std::future::pending(),
            &show(tick),
        )
        .await;
        // No lock, so never lost: the run ends done or failed.
        let (state_of_run, entry) = tally(&shared, Some(tick), ended);
        let ended_as = state_of_run.unwrap_or(RunState::Failed);
        let wait = shared.wait_for_lock(Some(tick));
        let guard = match shared.lock.acquire_timeout(wait).await {
            Ok(guard) => guard,
            Err(err) => {
                warn!(target: "zklock::scheduler", job = %shared.name, tick = %show(tick), error = %err, "could not take the job's lock to record how the run ended");
                return;
            }
        };
        let Ok(zk) = guard.zk() else { return };
        let Ok(state) = shared.store.read_state(&zk, shared.client.inner.config.acls()).await else {
            return;
        };
        // The record still names this tick only when no later tick was taken meanwhile.
        let version = state.stat.version;
        let record = state
            .record
            .ok()
            .flatten()
            .filter(|r| r.tick == tick && r.state == RunState::Running);
        let commit = Commit {
            record: record.map(|r| {
                (
                    TickRecord::next(Some(&r), tick, ended_as, r.session, version).encode(),
                    version,
                )
            }),
            history: Some(history::prepend(state.history, &[entry])),
            take: None,
        };
        if let Err(err) = shared.store.commit(&zk, guard.node_path(), commit).await {
            warn!(target: "zklock::scheduler", job = %shared.name, tick = %show(tick), error = %err, "could not record how the run ended");
        }
    });
}

/// How far this node's clock may be off ZooKeeper's before it is warned about.
const CLOCK_SKEW_WARNING: Duration = Duration::from_millis(500);

/// Compares this node's clock with the ensemble's commit time of a write just made (`mtime`,
/// milliseconds since the epoch): a node whose clock runs far ahead takes ticks early; a node
/// far behind runs ticks late. Records the skew in the stats and warns when it exceeds
/// [`CLOCK_SKEW_WARNING`]. The write's round trip is in the figure too, so small skews are not
/// told apart from latency.
fn check_clock(shared: &Shared, mtime: i64) {
    let Ok(since) = shared.clock.now().duration_since(UNIX_EPOCH) else {
        return;
    };
    let skew_ms = since.as_millis() as i64 - mtime;
    shared.stats.saw_clock_skew(skew_ms);
    if skew_ms.unsigned_abs() > CLOCK_SKEW_WARNING.as_millis() as u64 {
        warn!(target: "zklock::scheduler", job = %shared.name, skew_ms,
            "this node's clock is {} ZooKeeper's by {} ms; ticks run early or late (sync the clocks)",
            if skew_ms > 0 { "ahead of" } else { "behind" }, skew_ms.unsigned_abs());
    }
}
