//! What a chaos run records: critical sections, fenced writes, faults.
//!
//! Contender processes report [`Event`]s as JSON lines on their stdout (prefixed with
//! [`EVENT_PREFIX`]); the register logs every write attempt; the runner logs the faults it
//! injected. Together they form a [`History`], the checker's only input. All times are
//! nanoseconds of the host's `CLOCK_MONOTONIC` ([`super::clock`]).

use serde::{Deserialize, Serialize};

/// Prefix of the stdout lines that carry an [`Event`]; other lines are ignored.
pub const EVENT_PREFIX: &str = "@chaos ";

/// A fencing token as the history stores it: the order is zklock's `FencingToken` order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct Token {
    /// Creation zxid of the contender node.
    pub zxid: i64,
    /// Grant number among grants sharing one node.
    pub generation: u32,
}

impl std::fmt::Display for Token {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:016x}-{:08x}", self.zxid as u64, self.generation)
    }
}

/// One critical section, as its holder saw it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Section {
    /// The contender task, e.g. `p2-t1` (process 2, task 1).
    pub client: String,
    /// Index of the contender process.
    pub process: usize,
    /// The grant's fencing token.
    pub token: Token,
    /// When `acquire` returned.
    pub granted_ns: u64,
    /// When the holder's claim of the register (its first fenced write) was answered.
    pub start_ns: u64,
    /// When the holder's work ended (before its closing fenced write).
    pub end_ns: u64,
    /// Whether the holder saw the loss signal before it released the lock.
    pub lost: bool,
    /// When it first saw the loss signal, if it did.
    pub lost_ns: Option<u64>,
    /// Whether this section ignored the loss signal on purpose (to exercise fencing).
    pub misbehaving: bool,
    /// Whether the runner asked for a long section (to be cut off by a fault mid-section).
    #[serde(default)]
    pub long: bool,
    /// Fenced writes it attempted (claim, writes, done).
    pub writes_attempted: u32,
    /// Of those, how many the register rejected.
    pub writes_rejected: u32,
    /// False when the holder never reported the section's end (its process died holding).
    pub complete: bool,
}

/// An event a contender process reports.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "ev", rename_all = "snake_case")]
pub enum Event {
    /// Connected; about to contend.
    Ready { process: usize },
    /// `acquire` returned a guard: the task holds the lock (as far as it knows).
    Granted {
        client: String,
        process: usize,
        token: Token,
        granted_ns: u64,
        long: bool,
    },
    /// The section ended and the lock is about to be released.
    Section(Section),
    /// An acquisition that did not end in a grant.
    AcquireFailed {
        client: String,
        process: usize,
        at_ns: u64,
        timeout: bool,
        error: String,
    },
    /// A release that returned an error.
    ReleaseFailed {
        client: String,
        process: usize,
        at_ns: u64,
        error: String,
    },
    /// The process is exiting.
    Exit {
        process: usize,
        acquired: u64,
        lost: u64,
        released: u64,
    },
}

/// One attempt to write to the fenced register, as the register logged it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WriteRecord {
    /// Position in the register's log (the register serializes writes).
    pub seq: u64,
    /// When the register decided.
    pub at_ns: u64,
    /// The writer, e.g. `p2-t1`.
    pub client: String,
    /// The token it wrote with.
    pub token: Token,
    /// `claim`, `write` or `done`.
    pub kind: String,
    /// Whether the register accepted it (token ≥ highest accepted token).
    pub accepted: bool,
}

/// The kinds of fault a run injects.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FaultKind {
    /// Kill the leader (SIGKILL), wait for a new one, restart the old one.
    LeaderKill,
    /// Blackhole every connection of a holder's process until its session expires.
    PartitionHolder,
    /// SIGSTOP a holder's process past its session timeout, then SIGCONT.
    PauseHolder,
    /// Stop every member, then start them all again.
    EnsembleRestart,
    /// Let every contender idle until the empty lock dir is reaped, then resume.
    ReapDir,
    /// Cut the ensemble member a holder is connected to off from the other members, together
    /// with the holder (which can reach only that member), for longer than a session timeout,
    /// then heal it.
    IsolateHolderMember,
}

impl FaultKind {
    /// Every kind, in the order a CI-sized run injects them.
    pub const ALL: [FaultKind; 6] = [
        FaultKind::LeaderKill,
        FaultKind::PartitionHolder,
        FaultKind::IsolateHolderMember,
        FaultKind::PauseHolder,
        FaultKind::EnsembleRestart,
        FaultKind::ReapDir,
    ];

    /// The snake_case name used in reports.
    pub fn name(self) -> &'static str {
        match self {
            FaultKind::LeaderKill => "leader_kill",
            FaultKind::PartitionHolder => "partition_holder",
            FaultKind::PauseHolder => "pause_holder",
            FaultKind::EnsembleRestart => "ensemble_restart",
            FaultKind::ReapDir => "reap_dir",
            FaultKind::IsolateHolderMember => "isolate_holder_member",
        }
    }
}

/// One injected fault.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FaultRecord {
    /// What was done.
    pub kind: FaultKind,
    /// When the fault began.
    pub injected_ns: u64,
    /// When it was healed (proxy passing, process continued, members serving, contenders resumed).
    pub healed_ns: u64,
    /// From when the lock must be granted again (the injection, or the heal for faults that
    /// keep the lock unavailable on purpose: a stopped ensemble, idle contenders).
    pub measure_from_ns: u64,
    /// The bound on `first grant after measure_from − measure_from`, in milliseconds.
    pub bound_ms: u64,
    /// The contender process the fault targeted, if one; its own grants do not count as the
    /// lock being available again.
    pub target_process: Option<usize>,
    /// Whether the fault took effect (e.g. the lock dir really was reaped).
    pub effective: bool,
    /// Free-form details for the summary.
    pub note: String,
}

/// Everything a run recorded.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct History {
    /// Critical sections, complete or not.
    pub sections: Vec<Section>,
    /// Every write attempt at the register, in its log order.
    pub writes: Vec<WriteRecord>,
    /// Faults, in injection order.
    pub faults: Vec<FaultRecord>,
    /// Acquisitions attempted (granted, timed out or failed).
    pub acquire_attempts: u64,
    /// Contender nodes left in the lock dir after every contender exited and dead sessions
    /// had time to expire.
    pub leaked_nodes: usize,
    /// Names of those nodes.
    pub leaked_node_names: Vec<String>,
    /// When recording ended.
    pub ended_ns: u64,
}
