//! What a node does on each beat of a singleton job: notice operators' requests, decide which
//! ticks are due, take them under the job's lock, run them, record how they ended.
//!
//! tokio-cron-scheduler calls [`fire`] once a second (the *beat*); the job's own schedule, in
//! its time zone, is read here ([`Ticks`]), so that a zone's offset changes are followed and a
//! run-now request is noticed within a second.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::sync::{Arc, Mutex as StdMutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use futures_util::FutureExt;
use serde_json::Value;
use tokio::sync::Mutex as AsyncMutex;
use tracing::{debug, error, warn};

use super::clock::Clock;
use super::control::{JobSpec, SPEC_CONFLICT};
use super::history::{self, HistoryEntry, Outcome};
use super::policy::{CatchUp, Policy};
use super::record::{RunState, TickRecord};
use super::run::{execute, Ended, JobRun, RunFn, RunLimits};
use super::stats::JobStats;
use super::store::{Commit, RecordStore, WriteError, SPEC, TRIGGER_PREFIX};
use super::ticks::{due_ticks, past_deadline, show, tick_time, Missed, Ticks};
use crate::error::is_transient;
use crate::{zk, Lock, LockClient, LockError, LockGuard};

/// What one node knows about one job.
pub(crate) struct Shared {
    pub name: Arc<str>,
    pub client: LockClient,
    pub lock: Lock,
    pub ticks: Ticks,
    pub spec: JobSpec,
    pub policy: Policy,
    pub catch_up: CatchUp,
    pub starting_deadline: Option<Duration>,
    pub limits: RunLimits,
    pub clock: Arc<dyn Clock>,
    pub lock_wait: Option<Duration>,
    pub store: RecordStore,
    pub stats: JobStats,
    /// Beats of this job on this node are handled one at a time.
    pub serial: AsyncMutex<Handled>,
    pub run: StdMutex<RunFn>,
    /// Whether this node was warned that its clock runs ahead of the ensemble's.
    pub clock_ahead_reported: AtomicBool,
    /// The latest tick a beat of this node saw, also while another beat was under way.
    pub seen: AtomicI64,
    /// The tick of the run going on on this node (`i64::MIN`: none).
    pub running: AtomicI64,
    /// Tells this node's run to make way for a later tick ([`Policy::Replace`]).
    pub replace: tokio::sync::Notify,
}

/// What this node has done with the job so far.
#[derive(Default)]
pub(crate) struct Handled {
    /// The latest tick this node is done with: run, found taken, or given up.
    pub last: Option<i64>,
    /// A claim whose write may have been applied although its answer never came, with the
    /// record version it was written over: if the record still shows exactly it, the tick is
    /// this node's to run.
    pub unconfirmed: Option<(TickRecord, i32)>,
    requests: Requests,
}

/// What the job node's children said when last listed, and the watch that tells when they
/// change.
#[derive(Default)]
struct Requests {
    watch: Option<Pin<Box<dyn Future<Output = zk::WatchedEvent> + Send>>>,
    triggers: bool,
    registered: bool,
}

impl Shared {
    fn session(&self) -> String {
        match self.client.session_id() {
            Some(id) => format!("{id:#x}"),
            None => "none".into(),
        }
    }

    fn wait_for_lock(&self, own: Option<i64>) -> Duration {
        self.lock_wait
            .or_else(|| own.and_then(|own| self.ticks.period_after(own)))
            .unwrap_or(Duration::from_secs(60))
    }

    fn entry(&self, tick: Option<i64>, outcome: Outcome) -> HistoryEntry {
        HistoryEntry::new(tick, self.client.identity(), ms_of(SystemTime::now()), 0, outcome)
    }
}

fn ms_of(time: SystemTime) -> i64 {
    time.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_millis() as i64)
}

/// Entry point of every beat.
pub(crate) async fn fire(shared: Arc<Shared>) {
    let _in_flight = shared.stats.fire_started();
    let now_tick = shared.ticks.tick_at(shared.clock.now());
    // One beat at a time on this node: one under way (waiting for the lock, or running) reads
    // the clock again when it is done, so beats that come meanwhile have nothing to add. Under
    // the skip policy, a tick that comes while this node is still running is skipped.
    let Ok(mut handled) = shared.serial.try_lock() else {
        if let Some(own) = now_tick.filter(|own| shared.seen.fetch_max(*own, Ordering::SeqCst) < *own) {
            match shared.policy {
                Policy::Skip => {
                    shared.stats.skipped();
                    debug!(target: "zklock::scheduler", job = %shared.name, tick = %show(own), "skipped: the previous run is still going on this node");
                }
                Policy::Replace if own > shared.running.load(Ordering::SeqCst) => shared.replace.notify_waiters(),
                _ => {}
            }
        }
        return;
    };
    if let Some(own) = now_tick {
        shared.seen.fetch_max(own, Ordering::SeqCst);
    }
    let fresh =
        |handled: &Handled, tick: Option<i64>| tick.filter(|own| !handled.last.is_some_and(|last| *own <= last));
    let due = fresh(&handled, now_tick);
    let requested = look_for_requests(&shared, &mut handled).await;
    if due.is_none() && !requested {
        return;
    }
    let guard = match shared.policy {
        Policy::Skip => match shared.lock.try_acquire().await {
            Ok(Some(guard)) => guard,
            Ok(None) => {
                if let Some(own) = due {
                    shared.stats.skipped();
                    handled.last = Some(own);
                    debug!(target: "zklock::scheduler", job = %shared.name, tick = %show(own), "skipped: running on another node");
                }
                return;
            }
            Err(err) => {
                shared.stats.failed();
                warn!(target: "zklock::scheduler", job = %shared.name, error = %err, "could not try the job's lock");
                return;
            }
        },
        Policy::OncePerTick | Policy::BufferOne | Policy::Replace => {
            let wait = shared.wait_for_lock(due);
            if let (Policy::Replace, Some(own)) = (shared.policy, due) {
                ask_to_replace(&shared, own).await;
            }
            match shared.lock.acquire_timeout(wait).await {
                Ok(guard) => guard,
                Err(LockError::Timeout { .. }) => {
                    if let Some(own) = due {
                        shared.stats.skipped();
                        debug!(target: "zklock::scheduler", job = %shared.name, tick = %show(own),
                            "skipped: the job's lock stayed busy for {wait:?}; a later beat offers the tick again");
                    }
                    return;
                }
                Err(err) => {
                    shared.stats.failed();
                    warn!(target: "zklock::scheduler", job = %shared.name, error = %err, "could not take the job's lock");
                    return;
                }
            }
        }
    };
    // The lock may have taken a while: decide by the clock now.
    let own = fresh(&handled, shared.ticks.tick_at(shared.clock.now()));
    let decided = under_lock(&shared, &guard, &mut handled, own).await;
    handled.last = handled.last.max(decided);
    drop(guard);
}

/// Under [`Policy::Replace`], when the job's lock is busy: asks the run going on to make way
/// for `own`.
async fn ask_to_replace(shared: &Shared, own: i64) {
    if let Ok(Some(guard)) = shared.lock.try_acquire().await {
        // Free after all; the acquisition that follows takes it again (reentrantly cheap).
        drop(guard);
        return;
    }
    let asked = async {
        let zk = shared.client.session(None).await.ok()?.zk().ok()?;
        shared
            .store
            .ask_to_replace(&zk, shared.client.inner.config.acls(), own)
            .await
            .ok()
    };
    if asked.await.is_some() {
        debug!(target: "zklock::scheduler", job = %shared.name, tick = %show(own), "the job is running: asked the run to make way");
    }
}

/// Lists the job node's children again if they changed since the last look (or were never
/// looked at), registering the job on the first look; tells whether run-now requests wait.
async fn look_for_requests(shared: &Shared, handled: &mut Handled) -> bool {
    let requests = &mut handled.requests;
    let changed = match requests.watch.as_mut() {
        Some(watch) => watch.as_mut().now_or_never().is_some(),
        None => true,
    };
    if !changed {
        return requests.triggers;
    }
    requests.watch = None;
    let Ok(session) = shared.client.session(None).await else {
        return requests.triggers;
    };
    let Ok(zk) = session.zk() else {
        return requests.triggers;
    };
    let acls = shared.client.inner.config.acls();
    let mut listed = zk.list_and_watch_children(&shared.store.path).await;
    if let Err(zk::Error::NoNode) = listed {
        // Not created yet (or removed): create it and look again.
        if let Err(err) = shared.store.create(&zk, acls).await {
            debug!(target: "zklock::scheduler", job = %shared.name, error = %err, "could not create the job's node");
        }
        listed = zk.list_and_watch_children(&shared.store.path).await;
    }
    let children = match listed {
        Ok((children, watch)) => {
            requests.watch = Some(Box::pin(watch.changed()));
            children
        }
        Err(err) => {
            debug!(target: "zklock::scheduler", job = %shared.name, error = %err, "could not list the job's requests");
            return requests.triggers;
        }
    };
    requests.triggers = children.iter().any(|c| c.starts_with(TRIGGER_PREFIX));
    if !requests.registered {
        requests.registered = register(shared, &zk, acls).await;
    }
    requests.triggers
}

/// Writes how this node schedules the job, unless a node did before; warns once when an earlier
/// registration differs, and leaves this node's beside it for operators to see. Returns
/// whether the registration was settled.
async fn register(shared: &Shared, zk: &zk::Client, acls: zk::Acls<'_>) -> bool {
    let Ok(ours) = serde_json::to_vec(&shared.spec) else {
        return true;
    };
    let options = zk::CreateMode::Persistent.with_acls(acls);
    let path = shared.store.child(SPEC);
    match zk.create(&path, &ours, &options).await {
        Ok(_) => return true,
        Err(zk::Error::NodeExists) => {}
        Err(_) => return false,
    }
    let Ok((data, _)) = zk.get_data(&path).await else {
        return false;
    };
    let Ok(first) = serde_json::from_slice::<JobSpec>(&data) else {
        return true;
    };
    if !first.agrees_with(&shared.spec) {
        warn!(target: "zklock::scheduler", job = %shared.name,
            registered = %format!("{} in {} ({}) by {}", first.schedule, first.time_zone, first.policy, first.node),
            here = %format!("{} in {} ({})", shared.spec.schedule, shared.spec.time_zone, shared.spec.policy),
            "this job is registered with another schedule, zone or policy; both run, each on its own ticks (align the nodes)");
        let conflict = shared.store.child(SPEC_CONFLICT);
        let written = match zk.create(&conflict, &ours, &options).await {
            Err(zk::Error::NodeExists) => zk.set_data(&conflict, &ours, None).await.map(|_| ()),
            other => other.map(|_| ()),
        };
        if let Err(err) = written {
            debug!(target: "zklock::scheduler", job = %shared.name, error = %err, "could not note the differing registration");
        }
    }
    true
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
    if !shared.clock_ahead_reported.swap(true, Ordering::Relaxed) {
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

/// Under one hold of the job's lock: serves run-now requests, settles what the record says
/// about earlier runs, then runs in order every tick after `handled.last` up to `own` that
/// nobody took yet (only `own` when the record cannot prove which earlier ticks are untaken).
///
/// Returns the latest tick this node is done with (run, found taken, or given up), or `None`
/// when it could not decide anything; ticks after the returned one are offered again later.
async fn under_lock(shared: &Shared, guard: &LockGuard, handled: &mut Handled, own: Option<i64>) -> Option<i64> {
    let fail = |what: &str, err: &dyn std::fmt::Display| {
        shared.stats.failed();
        warn!(target: "zklock::scheduler", job = %shared.name, error = %err, "{what}");
    };
    let zk = match guard.zk() {
        Ok(zk) => zk,
        Err(err) => {
            fail("no ZooKeeper session for the tick record", &err);
            return None;
        }
    };
    let state = match shared.store.read_state(&zk, shared.client.inner.config.acls()).await {
        Ok(state) => state,
        Err(err) => {
            fail("could not read the tick record", &err);
            return None;
        }
    };
    let record = match state.record {
        Ok(record) => record,
        Err(reason) => {
            shared.stats.failed();
            error!(target: "zklock::scheduler", job = %shared.name, path = %shared.store.path, %reason,
                "the tick record is unreadable; not running (fix it, or reset the job: `zklock jobs reset`)");
            return None;
        }
    };
    let mut hold = Hold {
        shared,
        guard,
        zk: &zk,
        record,
        version: state.stat.version,
        history: state.history,
        pending: Vec::new(),
    };

    for request in &state.triggers {
        if !hold.run_requested(request).await {
            return None;
        }
    }
    let own = own?;
    // Earlier runs: our own claim whose answer was lost, or someone's run that never reported.
    if let Some((claim, over)) = handled.unconfirmed.take() {
        if hold.record.as_ref() == Some(&claim) && hold.version == over + 1 {
            debug!(target: "zklock::scheduler", job = %shared.name, tick = %show(claim.tick),
                "an earlier claim of this node was applied after all; running its tick now");
            if !hold.run_claimed(claim).await {
                return None;
            }
        }
    }
    if !hold.settle_orphan().await {
        return None;
    }

    let own = cap_by_server_clock(shared, guard, own)?;
    let recorded = match &hold.record {
        Some(record) => {
            shared.stats.saw_recorded(record.tick);
            taken_up_to(shared, record, state.stat.mtime)
        }
        None => None,
    };
    if let Some(recorded) = recorded.filter(|recorded| *recorded >= own) {
        shared.stats.skipped();
        debug!(target: "zklock::scheduler", job = %shared.name, tick = %show(own), recorded = %show(recorded), "skipped: tick already taken");
        return Some(own);
    }
    if state.paused {
        hold.skip_paused(own).await;
        return Some(own);
    }

    // Ticks at or before the record were taken; ticks at or before `since` were handled here.
    // Ticks in between are run late only when the record proves it was written by the node
    // that took the last of them: a deleted, hand-edited or rolled-back record says nothing
    // of the ticks after it, which may have run. A skip-policy beat offers only its own tick.
    let (since, late) = match shared.policy {
        Policy::OncePerTick => (handled.last, shared.catch_up.late()),
        Policy::BufferOne | Policy::Replace => (handled.last, 0),
        Policy::Skip => (None, 0),
    };
    let proven = hold.record.as_ref().is_some_and(|r| r.intact(hold.version));
    // A node's first beat (`since` is none) catches up from the record alone.
    let floor = if proven && shared.policy != Policy::Skip {
        since.max(recorded)
    } else {
        if since.is_some() && hold.record.is_some() {
            warn!(target: "zklock::scheduler", job = %shared.name, tick = %show(own),
                "the tick record was not written by a scheduler node (edited or restored?); not running late ticks");
        }
        since.max(recorded).max(shared.ticks.before(own))
    };
    let Some(floor) = floor else {
        // The schedule has no tick before `own`: `own` is its first.
        return hold.run_due(&[own], handled).await;
    };
    let (mut due, mut missed) = due_ticks(&shared.ticks, floor, own, late);
    if let Some(deadline) = shared.starting_deadline {
        let now = ms_of(shared.clock.now());
        past_deadline(&mut due, &mut missed, now.saturating_sub(deadline.as_millis() as i64));
    }
    let Some(Missed { first, last, count }) = missed else {
        return hold.run_due(&due, handled).await.max(Some(floor));
    };
    shared.stats.gave_up(count);
    warn!(target: "zklock::scheduler", job = %shared.name, tick = %show(own), first = %show(first), last = %show(last),
        count, late, "missed: giving up ticks from first to last (catch-up policy or starting deadline)");
    let entry = shared.entry(Some(last), Outcome::Missed).because(format!(
        "{count} tick(s) from {} to {} given up (catch-up policy {:?}, starting deadline {:?})",
        show(first),
        show(last),
        shared.catch_up,
        shared.starting_deadline
    ));
    hold.pending.push(entry);
    if due.is_empty() {
        // Nothing runs: take the last missed tick, so that no node runs it.
        hold.take_missed(last).await;
    }
    hold.run_due(&due, handled).await.max(Some(last))
}

/// One hold of the job's lock: the session it is held in, and the job's state as this node
/// last wrote or read it.
struct Hold<'a> {
    shared: &'a Shared,
    guard: &'a LockGuard,
    zk: &'a zk::Client,
    record: Option<TickRecord>,
    version: i32,
    history: Vec<Value>,
    /// History entries to write with the next commit.
    pending: Vec<HistoryEntry>,
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
    async fn run_requested(&mut self, name: &str) -> bool {
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
            self.guard,
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
        shared.stats.ended(&ended.outcome, ended.took);
        let state = match ended.outcome {
            Outcome::Ok => RunState::Done,
            Outcome::Lost => {
                shared.stats.lost_lock();
                return None;
            }
            Outcome::TimedOut => {
                shared.stats.run_timed_out();
                RunState::Failed
            }
            Outcome::Replaced => RunState::Replaced,
            _ => {
                shared.stats.failed();
                RunState::Failed
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
    /// is not going on under it any more. Records it as lost. Returns false when the hold
    /// cannot go on.
    async fn settle_orphan(&mut self) -> bool {
        let shared = self.shared;
        let Some(orphan) = self.record.as_ref().filter(|r| r.state == RunState::Running) else {
            return true;
        };
        let session = orphan.session.map_or_else(|| "none".to_owned(), |s| format!("{s:#x}"));
        let lost = TickRecord::next(Some(orphan), orphan.tick, RunState::Lost, orphan.session, self.version);
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
    async fn take_missed(&mut self, tick: i64) {
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
    async fn skip_paused(&mut self, own: i64) {
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

    /// Claims and runs `due` in order. Returns the latest tick taken, if any.
    async fn run_due(&mut self, due: &[i64], handled: &mut Handled) -> Option<i64> {
        let mut decided = None;
        for &tick in due {
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
                return decided;
            }
            decided = Some(tick);
            if !self.run_claimed(claim).await {
                return decided;
            }
        }
        decided
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
    async fn run_claimed(&mut self, claim: TickRecord) -> bool {
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
            shared.store.clear_replaced_up_to(self.zk, tick).await;
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
        let replaced = async {
            match shared.policy {
                Policy::Replace => tokio::select! {
                    () = shared.replace.notified() => {}
                    () = shared.store.replaced_after(self.zk, tick) => {}
                },
                _ => std::future::pending().await,
            }
        };
        shared.running.store(tick, Ordering::SeqCst);
        let ended = execute(&shared.run, run, guard, &shared.limits, replaced, &show(tick)).await;
        shared.running.store(i64::MIN, Ordering::SeqCst);
        let made_way = ended.outcome == Outcome::Replaced;
        self.report(Some(tick), ended).await.is_some() && !made_way
    }
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
