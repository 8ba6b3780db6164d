//! The simulation's ZooKeeper: one job's znodes, the job's lock and the sessions, in memory.
//! ZooKeeper's clock is the simulation's true time ([`Ensemble::now`]). Every write the
//! scheduler makes goes through [`Ensemble::commit`], which applies it whole or not at all, as a
//! `multi` does, and fails it when the writer's lock node is gone (the fence).
//!
//! Beside the znodes it keeps the [`Journal`]: what really happened (runs started, every
//! history entry ever written, the operators' acts), which the checker reads.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::sync::{Arc, Mutex};

use tokio::sync::watch;
use tokio::time::Instant;

use super::super::history::Outcome;
use super::super::record::{RunState, TickRecord};

pub(super) type Session = u64;

/// The moment the simulation starts, by ZooKeeper's clock (ms since the epoch): a Thursday in
/// 2026, on a whole minute.
pub(super) const EPOCH: i64 = 1_790_000_040_000;

/// One history entry as the simulation writes it: what the scheduler writes, plus the run it
/// speaks for, so that the checker can match ends to starts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Entry {
    pub tick: Option<i64>,
    pub first: Option<i64>,
    pub outcome: Outcome,
    /// The run this entry is the end of (a run's id, [`Start::run`]).
    pub run: Option<u64>,
    /// The run-now request it speaks for.
    pub trigger: Option<String>,
    pub why: &'static str,
}

/// A run's body starting.
#[derive(Debug, Clone)]
pub(super) struct Start {
    pub run: u64,
    pub node: usize,
    pub tick: Option<i64>,
    pub trigger: Option<String>,
    pub at: i64,
    /// When its tick was claimed (for a run-now request: when it started).
    pub claimed: i64,
}

/// What really happened, by ZooKeeper's clock.
#[derive(Debug, Default)]
pub(super) struct Journal {
    pub starts: Vec<Start>,
    /// Every history entry ever committed, with its commit time.
    pub entries: Vec<(i64, Entry)>,
    /// Resets and removals: when, the record's tick just before, and whether it was a
    /// removal. The ticks between that tick and the reset are given up on purpose.
    pub cleared: Vec<(i64, Option<i64>, bool)>,
    /// Pauses: acknowledged at, resumed at.
    pub pauses: Vec<(i64, Option<i64>)>,
    /// Run-now requests: name, created at, removed (by a removal) at.
    pub triggers: Vec<(String, i64)>,
    /// Ticks given up by a beat of a node whose catch-up would have run them: the node's
    /// starting deadline (ms), the time it gave them up, first, last.
    pub deadline_misses: Vec<(i64, i64, i64, i64)>,
    /// When the server reaped the job's empty node.
    pub reaped: Vec<i64>,
    /// Notes on what the world did, for a failing seed's report.
    pub acts: Vec<(i64, String)>,
}

/// One job's znode and its children.
#[derive(Debug, Clone)]
pub(super) struct JobNode {
    pub data: Vec<u8>,
    pub version: i32,
    pub mtime: i64,
    pub has_history: bool,
    /// The history child's entries, newest last (unbounded here; the checker reads the journal).
    pub history: Vec<Entry>,
    pub paused: bool,
    pub triggers: BTreeSet<String>,
    /// `run-<key>` markers, with the session owning `alive-<key>` while it exists.
    pub runs: BTreeMap<String, Option<Session>>,
    /// `replace-N` requests: name, the tick asked for, created at.
    pub replace: BTreeMap<String, (i64, i64)>,
    /// Whether the children list ever held anything: the server reaps only such containers.
    pub had_children: bool,
    /// Since when it has had no children, as the server's container check last saw.
    pub childless_since: Option<i64>,
}

impl JobNode {
    fn new() -> JobNode {
        JobNode {
            data: Vec::new(),
            version: 0,
            mtime: 0,
            has_history: false,
            history: Vec::new(),
            paused: false,
            triggers: BTreeSet::new(),
            runs: BTreeMap::new(),
            replace: BTreeMap::new(),
            had_children: false,
            childless_since: None,
        }
    }

    pub fn has_children(&self) -> bool {
        self.has_history
            || self.paused
            || !self.triggers.is_empty()
            || !self.runs.is_empty()
            || !self.replace.is_empty()
    }

    pub fn record(&self) -> Result<Option<TickRecord>, String> {
        TickRecord::decode(&self.data)
    }
}

/// The job's state as a holder reads it.
#[derive(Debug, Clone)]
pub(super) struct State {
    pub record: Result<Option<TickRecord>, String>,
    pub version: i32,
    pub mtime: i64,
    pub paused: bool,
    pub triggers: Vec<String>,
    /// Run markers: key, whether `alive-<key>` exists.
    pub runs: Vec<(String, bool)>,
}

/// A grant of the job's lock.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Ticket {
    pub session: Session,
    pub id: u64,
}

/// A marker written with a commit.
#[derive(Debug, Clone)]
pub(super) enum Marker {
    Open(String),
    Close { key: String, alive: bool },
}

/// One fenced multi-operation ([`super::super::store::Commit`]).
#[derive(Debug, Default)]
pub(super) struct Commit {
    pub record: Option<(TickRecord, i32)>,
    pub entries: Vec<Entry>,
    pub take: Option<String>,
    pub markers: Vec<Marker>,
    /// Fails the commit while the job is paused (a tick's claim).
    pub unless_paused: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum WriteError {
    Fenced,
    Taken,
    Stale,
    Paused,
    /// The answer was lost: the write may or may not be applied.
    Transient,
}

pub(super) struct Ensemble {
    start: Instant,
    pub job: Option<JobNode>,
    alive: BTreeSet<Session>,
    next_session: Session,
    next_ticket: u64,
    holder: Option<Ticket>,
    queue: VecDeque<Ticket>,
    next_seq: u64,
    /// Bumped on every change of the lock, a session or the job's children.
    changes: watch::Sender<u64>,
    pub journal: Journal,
    /// The quiet spell has begun: runs are short, so that backlogs drain.
    pub quiet: bool,
}

pub(super) type Zk = Arc<Mutex<Ensemble>>;

impl Ensemble {
    pub fn new() -> Zk {
        // Outside the runtime, `Instant::now()` is the real clock, which a loaded machine moves
        // on: a seed would then not replay to the millisecond.
        assert!(
            tokio::runtime::Handle::try_current().is_ok(),
            "the ensemble starts on the simulation's paused clock"
        );
        Arc::new(Mutex::new(Ensemble {
            start: Instant::now(),
            job: None,
            alive: BTreeSet::new(),
            next_session: 1,
            next_ticket: 1,
            holder: None,
            queue: VecDeque::new(),
            next_seq: 0,
            changes: watch::channel(0).0,
            journal: Journal::default(),
            quiet: false,
        }))
    }

    /// ZooKeeper's clock.
    pub fn now(&self) -> i64 {
        EPOCH + self.start.elapsed().as_millis() as i64
    }

    pub fn changes(&self) -> watch::Receiver<u64> {
        self.changes.subscribe()
    }

    fn changed(&self) {
        self.changes.send_modify(|n| *n += 1);
    }

    pub fn open_session(&mut self) -> Session {
        let session = self.next_session;
        self.next_session += 1;
        self.alive.insert(session);
        session
    }

    pub fn alive(&self, session: Session) -> bool {
        self.alive.contains(&session)
    }

    /// The server expires `session`: its lock node and its ephemeral `alive-` markers go.
    pub fn expire(&mut self, session: Session) {
        if !self.alive.remove(&session) {
            return;
        }
        if self.holder.is_some_and(|t| t.session == session) {
            self.holder = None;
        }
        self.queue.retain(|t| t.session != session);
        if let Some(job) = &mut self.job {
            for owner in job.runs.values_mut() {
                if *owner == Some(session) {
                    *owner = None;
                }
            }
        }
        self.changed();
    }

    /// Queues for the lock.
    pub fn enqueue(&mut self, session: Session) -> Option<Ticket> {
        if !self.alive(session) {
            return None;
        }
        let ticket = Ticket {
            session,
            id: self.next_ticket,
        };
        self.next_ticket += 1;
        self.queue.push_back(ticket);
        self.changed();
        Some(ticket)
    }

    /// Whether `ticket` holds the lock now, granting it when it is first in line.
    pub fn granted(&mut self, ticket: Ticket) -> bool {
        if self.holder == Some(ticket) {
            return true;
        }
        if self.holder.is_none() && self.queue.front() == Some(&ticket) {
            self.queue.pop_front();
            self.holder = Some(ticket);
            return true;
        }
        false
    }

    /// Leaves the queue, or lets the lock go.
    pub fn release(&mut self, ticket: Ticket) {
        if self.holder == Some(ticket) {
            self.holder = None;
        }
        self.queue.retain(|t| *t != ticket);
        self.changed();
    }

    pub fn holds(&self, ticket: Ticket) -> bool {
        self.holder == Some(ticket)
    }

    pub fn busy(&self) -> bool {
        self.holder.is_some() || !self.queue.is_empty()
    }

    fn job_mut(&mut self) -> &mut JobNode {
        let now = self.now();
        self.job.get_or_insert_with(|| {
            let mut job = JobNode::new();
            job.mtime = now;
            job
        })
    }

    /// Reads the job's state, creating its node and history first.
    pub fn read_state(&mut self) -> State {
        let job = self.job_mut();
        if !job.has_history {
            job.has_history = true;
            job.had_children = true;
        }
        State {
            record: job.record(),
            version: job.version,
            mtime: job.mtime,
            paused: job.paused,
            triggers: job.triggers.iter().cloned().collect(),
            runs: job
                .runs
                .iter()
                .map(|(key, owner)| (key.clone(), owner.is_some()))
                .collect(),
        }
    }

    /// Applies `commit` whole if `ticket` still holds the lock; returns the record's new
    /// version and mtime when it wrote the record.
    pub fn commit(&mut self, ticket: Ticket, commit: Commit) -> Result<Option<(i32, i64)>, WriteError> {
        if !self.holds(ticket) {
            return Err(WriteError::Fenced);
        }
        let now = self.now();
        let job = self.job.as_ref().ok_or(WriteError::Fenced)?;
        if let Some((_, over)) = &commit.record {
            if job.version != *over {
                return Err(WriteError::Fenced);
            }
        }
        if commit.unless_paused && job.paused {
            return Err(WriteError::Paused);
        }
        if let Some(take) = &commit.take {
            if !job.triggers.contains(take) {
                return Err(WriteError::Taken);
            }
        }
        let mut runs = job.runs.clone();
        for marker in &commit.markers {
            match marker {
                Marker::Open(key) => {
                    if runs.insert(key.clone(), Some(ticket.session)).is_some() {
                        return Err(WriteError::Stale);
                    }
                }
                Marker::Close { key, alive } => match runs.remove(key) {
                    Some(owner) if owner.is_some() == *alive => {}
                    _ => return Err(WriteError::Stale),
                },
            }
        }
        let job = self.job.as_mut().expect("checked above");
        job.runs = runs;
        job.had_children |= !job.runs.is_empty();
        if let Some(take) = &commit.take {
            job.triggers.remove(take);
        }
        let mut written = None;
        if let Some((record, _)) = commit.record {
            job.data = record.encode();
            job.version += 1;
            job.mtime = now;
            written = Some((job.version, now));
        }
        for entry in commit.entries {
            job.history.push(entry.clone());
            self.journal.entries.push((now, entry));
        }
        self.changed();
        Ok(written)
    }

    pub fn record_start(&mut self, start: Start) {
        self.journal.starts.push(start);
    }

    pub fn next_seq(&mut self) -> u64 {
        self.next_seq += 1;
        self.next_seq
    }

    /// `replace-N`: asks the run going on to make way for `tick`.
    pub fn ask_to_replace(&mut self, tick: i64) {
        let now = self.now();
        let name = format!("replace-{:010}", self.next_seq());
        let job = self.job_mut();
        job.replace.insert(name, (tick, now));
        job.had_children = true;
        self.changed();
    }

    /// The replace requests, as (tick asked for, created at).
    pub fn replace_requests(&self) -> Vec<(i64, i64)> {
        self.job
            .as_ref()
            .map(|job| job.replace.values().copied().collect())
            .unwrap_or_default()
    }

    /// Deletes the requests `served` decides are served.
    pub fn clear_replaced(&mut self, served: impl Fn(i64, i64) -> bool) {
        if let Some(job) = &mut self.job {
            job.replace.retain(|_, (tick, ctime)| !served(*tick, *ctime));
        }
        self.changed();
    }

    /// Whether the job exists for an operator (not a removal's tombstone).
    pub fn job_exists(&self) -> bool {
        self.job.as_ref().is_some_and(|job| {
            !matches!(
                job.record(),
                Ok(Some(TickRecord {
                    state: RunState::Removed,
                    ..
                }))
            ) || job.has_children()
        })
    }

    /// The server's container check: reaps the job's node once it has had children and has had
    /// none for `interval` (`znode.container.checkIntervalMs`, a minute by default).
    pub fn reap(&mut self, interval: i64) {
        let now = self.now();
        let Some(job) = self.job.as_mut() else {
            return;
        };
        if !job.had_children || job.has_children() {
            job.childless_since = None;
            return;
        }
        let since = *job.childless_since.get_or_insert(now);
        if now - since >= interval {
            self.job = None;
            self.journal.reaped.push(now);
            self.journal
                .acts
                .push((now, "the server reaped the job's empty node".into()));
        }
    }
}
