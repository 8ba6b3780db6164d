//! One hold of a singleton job's lock: the fenced writes and the runs a beat makes while it
//! holds the lock ([`Hold`]), and the runs under [`Policy::Allow`], which go on without it.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde_json::Value;
use tracing::{debug, warn};

use super::history::{self, HistoryEntry, Outcome};
use super::node::{ms_of, End, Handled, Shared};
use super::plan;
use super::policy::Policy;
use super::record::{RunState, TickRecord};
use super::run::{execute, Ended, JobRun};
use super::stats::Running;
use super::store::{Commit, Marker, RunMarker, WriteError};
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

impl<'a> Hold<'a> {
    /// A hold over the job's state as read under the lock: its (readable) record, the znode
    /// version it was read at, and the history.
    pub fn over(
        shared: &'a Arc<Shared>,
        guard: &'a LockGuard,
        zk: &'a zk::Client,
        record: Option<TickRecord>,
        version: i32,
        history: Vec<Value>,
    ) -> Hold<'a> {
        Hold {
            shared,
            guard,
            zk,
            record,
            version,
            history,
            pending: Vec::new(),
        }
    }

    /// Writes the record (over the version read), the pending history entries plus `entry`
    /// and the runs' `markers`, fenced by our lock node; keeps what was written.
    pub async fn commit(
        &mut self,
        record: Option<TickRecord>,
        entry: Option<HistoryEntry>,
        take: Option<&str>,
        markers: Vec<Marker>,
    ) -> Result<Option<zk::Stat>, WriteError> {
        let mut entries = std::mem::take(&mut self.pending);
        entries.extend(entry);
        let history = (!entries.is_empty()).then(|| history::prepend(self.history.clone(), &entries));
        let commit = Commit {
            record: record.as_ref().map(|r| (r.encode(), self.version)),
            history: history.clone(),
            take,
            unless_paused: record.as_ref().is_some_and(|r| r.state == RunState::Running),
            markers,
        };
        let acls = self.shared.client.inner.config.acls();
        let stat = self
            .shared
            .store
            .commit(self.zk, acls, self.guard.node_path(), commit)
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
        // The request's marker speaks for the run until its end is written: if this node dies
        // first, the next holder records the run as lost.
        let marker = Marker::Open {
            key: name.to_owned(),
            data: self.marker_data(),
        };
        match self.commit(None, None, Some(name), vec![marker]).await {
            Ok(_) => {}
            Err(WriteError::Taken) => return true,
            // The answer was lost, not necessarily the take: if it was applied, the request is
            // this node's to run, and nobody else will.
            Err(WriteError::ZooKeeper(err)) if is_transient(&err) => {
                let session = shared.client.session_id();
                let took = match session {
                    Some(session) => shared.store.took(self.zk, name, session).await == Some(true),
                    None => false,
                };
                if !took {
                    shared.stats.failed();
                    warn!(target: "zklock::scheduler", job = %shared.name, request = name, error = %err, "could not take a run-now request");
                    return false;
                }
                debug!(target: "zklock::scheduler", job = %shared.name, request = name, error = %err,
                    "the take's answer was lost, but the request's marker shows it was applied");
            }
            Err(err) => {
                shared.stats.failed();
                warn!(target: "zklock::scheduler", job = %shared.name, request = name, error = %err, "could not take a run-now request");
                return false;
            }
        }
        if self.guard.is_lost() {
            shared.stats.lost_lock();
            let entry = shared.entry(None, Outcome::Lost).because(format!(
                "the run-now request {name} was taken, but the job's lock was lost before it ran"
            ));
            shared.owe(entry, None, Some(name.to_owned()));
            return false;
        }
        let _running = shared.stats.ran(None);
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
        self.report(None, ended, Some(name)).await.is_some()
    }

    /// What a run's marker says about its node.
    fn marker_data(&self) -> String {
        format!(
            "session={} node={}",
            self.shared.session(),
            self.shared.client.identity()
        )
    }

    /// Counts and records how a run ended (a tick's run, or the run-now request `marker`);
    /// returns the record state for a tick's run. `None` when the hold cannot go on: the run
    /// lost the lock, or its end could not be written; its end is then owed
    /// ([`super::outbox`]) and written under a later hold.
    async fn report(&mut self, tick: Option<i64>, ended: Ended, marker: Option<&str>) -> Option<RunState> {
        let shared = self.shared;
        let (state, entry) = tally(shared, tick, ended);
        let claim = tick.and_then(|tick| self.record.as_ref().filter(|r| r.tick == tick).cloned());
        let owe = |state: RunState, entry: HistoryEntry| {
            let end = claim.as_ref().map(|claim| End {
                tick: claim.tick,
                state,
                session: claim.session,
            });
            shared.owe(entry, end, marker.map(str::to_owned));
        };
        let Some(state) = state else {
            owe(RunState::Lost, entry);
            return None;
        };
        let record = claim.as_ref().map(|claim| claim.ended(state.clone(), self.version));
        let markers = marker
            .map(|key| Marker::Close {
                key: key.to_owned(),
                alive: true,
            })
            .into_iter()
            .collect();
        match self.commit(record, Some(entry.clone()), None, markers).await {
            Ok(_) => Some(state),
            Err(err) => {
                warn!(target: "zklock::scheduler", job = %shared.name, tick = ?tick.map(show), error = %err,
                    "could not record how the run ended; trying again under a later hold");
                owe(state, entry);
                None
            }
        }
    }

    /// Settles the runs earlier holds left: this node's `unconfirmed` claim, run now when the
    /// record still shows exactly it, then a run that never reported back
    /// ([`settle_orphan`](Self::settle_orphan)). Returns false when the hold cannot go on.
    pub async fn settle_earlier_runs(&mut self, unconfirmed: Option<(TickRecord, i32)>, runs: &[RunMarker]) -> bool {
        if let Some((claim, over)) = unconfirmed {
            if self.record.as_ref() == Some(&claim) && self.version == over + 1 {
                debug!(target: "zklock::scheduler", job = %self.shared.name, tick = %show(claim.tick),
                    "an earlier claim of this node was applied after all; running its tick now");
                if !self.run_claimed(claim).await {
                    return false;
                }
            }
        }
        self.settle_orphan(runs).await
    }

    /// Deletes the replace requests for the record's tick or earlier (the record written at
    /// `written`): they are stale whatever the policy of the node that took the tick, and
    /// nothing else would delete them when no node under `Policy::Replace` runs again.
    pub async fn clear_stale_replace_requests(&self, written: i64) {
        let shared = self.shared;
        let taken = self
            .record
            .as_ref()
            .and_then(|record| plan::credible(&shared.ticks, record.tick, written));
        if let Some(taken) = taken {
            shared.store.clear_replaced_up_to(self.zk, &shared.ticks, taken).await;
        }
    }

    /// A record left `running` by a run that never reported back: we hold the lock, so that run
    /// is not going on under it any more, unless its marker in `runs` shows its node alive (a
    /// run under `Allow`, of this node or another). Records it as lost; the history entry is
    /// left out when the run's dead marker already gave one ([`settle_dead_runs`]). A restored
    /// or edited record stays unproven ([`TickRecord::ended`]). Returns false when the hold
    /// cannot go on.
    ///
    /// [`settle_dead_runs`]: Self::settle_dead_runs
    pub async fn settle_orphan(&mut self, runs: &[RunMarker]) -> bool {
        let shared = self.shared;
        let marker = |tick: i64| runs.iter().find(|run| run.key == tick.to_string());
        let orphan = self
            .record
            .as_ref()
            .filter(|r| r.state == RunState::Running && !marker(r.tick).is_some_and(|run| run.alive));
        let Some(orphan) = orphan else {
            return true;
        };
        let session = orphan.session.map_or_else(|| "none".to_owned(), |s| format!("{s:#x}"));
        let lost = orphan.ended(RunState::Lost, self.version);
        let entry = marker(orphan.tick).is_none().then(|| {
            shared.entry(Some(orphan.tick), Outcome::Lost).because(format!(
                "the run by session {session} never reported back (its node died or lost the lock)"
            ))
        });
        let tick = orphan.tick;
        match self.commit(Some(lost), entry, None, Vec::new()).await {
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

    /// Records as lost the runs whose marker outlived their node's session (`run-<key>`
    /// without `alive-<key>`): the run's end was never written and never will be. Returns
    /// false when the hold cannot go on.
    pub async fn settle_dead_runs(&mut self, runs: &[RunMarker]) -> bool {
        let shared = self.shared;
        let dead: Vec<&RunMarker> = runs.iter().filter(|run| !run.alive).collect();
        if dead.is_empty() {
            return true;
        }
        for run in &dead {
            let tick = run.key.parse::<i64>().ok();
            let what = match tick {
                Some(tick) => format!("the run of tick {}", show(tick)),
                None => format!("the run for {}", run.key),
            };
            warn!(target: "zklock::scheduler", job = %shared.name, run = %run.key,
                "{what} never reported back (its node's session ended); recorded as lost");
            self.pending.push(
                shared
                    .entry(tick, Outcome::Lost)
                    .because(format!("{what} never reported back (its node's session ended first)")),
            );
        }
        let markers = dead
            .iter()
            .map(|run| Marker::Close {
                key: run.key.clone(),
                alive: false,
            })
            .collect();
        match self.commit(None, None, None, markers).await {
            Ok(_) => true,
            Err(err) => {
                shared.stats.failed();
                warn!(target: "zklock::scheduler", job = %shared.name, error = %err, "could not record dead runs as lost");
                false
            }
        }
    }

    /// Takes `tick`, given up, as missed, so that no node runs it late.
    /// Returns whether it was written (with the pending history entries).
    pub async fn take_missed(&mut self, tick: i64) -> bool {
        let shared = self.shared;
        let missed = TickRecord::next(
            self.record.as_ref(),
            tick,
            RunState::Missed,
            shared.client.session_id(),
            self.version,
        );
        match self.commit(Some(missed), None, None, Vec::new()).await {
            Ok(_) => true,
            Err(err) => {
                warn!(target: "zklock::scheduler", job = %shared.name, tick = %show(tick), error = %err, "could not record a missed tick");
                false
            }
        }
    }

    /// Takes `own` as skipped because the job is paused, so no node runs it and no node replays
    /// it after the resume. `first` is the first untaken tick: from it to `own` the ticks are
    /// paused ones. One history entry stands for a paused stretch: while the newest entry is
    /// the one this stretch began, it is widened to `own` instead of a new one being written.
    /// Returns whether it was written.
    pub async fn skip_paused(&mut self, first: i64, own: i64) -> bool {
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
        let stretch = self
            .record
            .as_ref()
            .filter(|r| r.state == RunState::Skipped)
            .and_then(|r| self.history.first().and_then(|head| paused_entry(head, r.tick)));
        let first = match stretch {
            Some(began) => {
                self.history.remove(0);
                began
            }
            None => first,
        };
        let entry = shared
            .entry(Some(own), Outcome::Skipped)
            .starting_at(first)
            .because(PAUSED_REASON);
        match self.commit(Some(skipped), Some(entry), None, Vec::new()).await {
            Ok(_) => true,
            Err(err) => {
                warn!(target: "zklock::scheduler", job = %shared.name, tick = %show(own), error = %err, "could not record a paused tick");
                false
            }
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
        // A run under `Allow` goes on after the next claim writes over this one: its marker
        // speaks for it until its end is written.
        let markers = match shared.policy {
            Policy::Allow => vec![Marker::Open {
                key: tick.to_string(),
                data: self.marker_data(),
            }],
            _ => Vec::new(),
        };
        let stat = match self.commit(Some(claim.clone()), None, None, markers).await {
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
                    WriteError::Paused => "the job was paused before the tick was taken",
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
        let running = shared.stats.ran(Some(tick));
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
            allow(shared.clone(), claim, run, running);
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
        self.report(Some(tick), ended, None).await.is_some() && !made_way
    }
}

/// The reason of a paused stretch's history entry.
const PAUSED_REASON: &str = "paused";

/// Where the history entry `head` stands for a paused stretch whose last tick is `last`: the
/// stretch's first tick.
fn paused_entry(head: &Value, last: i64) -> Option<i64> {
    let entry: HistoryEntry = serde_json::from_value(head.clone()).ok()?;
    let paused =
        entry.outcome == Outcome::Skipped && entry.error.as_deref() == Some(PAUSED_REASON) && entry.tick == Some(last);
    paused.then(|| entry.first_tick.unwrap_or(last))
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
/// lock; its end is owed ([`super::outbox`]) and written under the lock by a later beat.
fn allow(shared: Arc<Shared>, claim: TickRecord, run: JobRun, running: Running) {
    let in_flight = shared.stats.fire_started();
    tokio::spawn(async move {
        let _in_flight = in_flight;
        let _running = running;
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
        let (state, entry) = tally(&shared, Some(tick), ended);
        let end = End {
            tick,
            state: state.unwrap_or(RunState::Failed),
            session: claim.session,
        };
        shared.owe(entry, Some(end), Some(tick.to_string()));
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
