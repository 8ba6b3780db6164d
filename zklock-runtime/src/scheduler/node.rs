//! What one node knows about one singleton job: its settings, its counters, and what its beats
//! have done so far. Shared by the beats ([`super::fire`]) and the holds ([`super::hold`]).

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicI64};
use std::sync::{Arc, Mutex as StdMutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use tokio::sync::Mutex as AsyncMutex;

use super::clock::Clock;
use super::control::JobSpec;
use super::history::{HistoryEntry, Outcome};
use super::policy::{CatchUp, Policy};
use super::record::{RunState, TickRecord};
use super::registration::Registration;
use super::run::{RunFn, RunLimits};
use super::stats::JobStats;
use super::store::RecordStore;
use super::ticks::Ticks;
use crate::client::LockClient;
use crate::lock::Lock;
use zookeeper_client as zk;

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
    /// The ends of runs not written yet ([`super::outbox`]).
    pub owed: StdMutex<Vec<Owed>>,
    /// Whether a task is on its way to write what is owed.
    pub paying: AtomicBool,
    /// Starts the task that writes what is owed (`outbox::pay_later_if_owing`, which holds
    /// the lock to do it: passed in, so that this module stays below the hold's).
    pub start_paying: fn(&Arc<Shared>),
}

/// One run's end this node has not written yet ([`super::outbox`]). It is not counted in
/// [`JobStats::fires_in_flight`]: waiting for that before closing the client must not wait on
/// a ZooKeeper that is gone.
#[derive(Debug)]
pub(crate) struct Owed {
    pub entry: HistoryEntry,
    /// The state the tick's run ended in, for the record while it still shows the claim.
    pub end: Option<End>,
    /// The key of the run's marker to delete (`run-<key>`, [`super::store::Marker`]).
    pub marker: Option<String>,
}

/// How a claimed tick's run ended.
#[derive(Debug, Clone)]
pub(crate) struct End {
    pub tick: i64,
    pub state: RunState,
    /// The session that claimed the tick (the record shows it while nobody settled the run).
    pub session: Option<i64>,
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
    pub requests: Requests,
}

/// What the job node's children said when last listed, and the watch that tells when they
/// change.
#[derive(Default)]
pub(crate) struct Requests {
    pub watch: Option<Pin<Box<dyn Future<Output = zk::WatchedEvent> + Send>>>,
    pub triggers: bool,
    /// Whether the listing showed the job's registration (`spec`).
    pub has_spec: bool,
    pub registration: Registration,
}

impl Shared {
    /// Tells this node's stats the job's next tick by its clock now, and the one after it.
    pub(crate) fn note_next_ticks(&self) {
        if let Some(next) = self
            .ticks
            .tick_at(self.clock.now())
            .and_then(|tick| self.ticks.after(tick))
        {
            self.stats.saw_next_ticks(next, self.ticks.after(next));
        }
    }

    pub fn session(&self) -> String {
        match self.client.session_id() {
            Some(id) => format!("{id:#x}"),
            None => "none".into(),
        }
    }

    pub fn wait_for_lock(&self, own: Option<i64>) -> Duration {
        self.lock_wait
            .or_else(|| own.and_then(|own| self.ticks.period_after(own)))
            .unwrap_or(Duration::from_secs(60))
    }

    /// Notes a run's end this node could not write, and starts a task that writes it under
    /// a later hold of the lock ([`super::outbox`]).
    pub fn owe(self: &Arc<Self>, entry: HistoryEntry, end: Option<End>, marker: Option<String>) {
        tracing::debug!(target: "zklock::scheduler", job = %self.name, tick = ?entry.tick,
            outcome = ?entry.outcome, "a run's end is written under a later hold of the job's lock");
        let owed = Owed { entry, end, marker };
        self.owed.lock().unwrap_or_else(|e| e.into_inner()).push(owed);
        (self.start_paying)(self);
    }

    pub fn entry(&self, tick: Option<i64>, outcome: Outcome) -> HistoryEntry {
        HistoryEntry::new(tick, self.client.identity(), ms_of(SystemTime::now()), 0, outcome)
    }
}

pub(crate) fn ms_of(time: SystemTime) -> i64 {
    time.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_millis() as i64)
}
