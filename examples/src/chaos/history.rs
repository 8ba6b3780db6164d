//! What a chaos run records: critical sections, fenced writes, faults.
//!
//! Contender processes report [`Event`]s as JSON lines on their stdout (prefixed with
//! [`EVENT_PREFIX`]); the register logs every write attempt; the runner logs the faults it
//! injected. Together they form a [`History`], the checker's only input. All times are
//! nanoseconds of the host's `CLOCK_MONOTONIC` ([`super::clock`]).

use serde::{Deserialize, Serialize};

/// Prefix of the stdout lines that carry an [`Event`]; other lines are ignored.
pub const EVENT_PREFIX: &str = "@chaos ";

/// The lock every run contends for; faults and availability are about this one.
pub const LOCK: &str = "chaos";
/// The second lock: taken alone by some tasks, and together with [`LOCK`] by multi-lock tasks
/// (which take [`LOCK`] first: it sorts first).
pub const LOCK_B: &str = "chaos-b";

fn main_lock() -> String {
    LOCK.to_string()
}

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

/// One lock of a multi-lock and its fencing token.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Part {
    /// The lock name.
    pub lock: String,
    /// Its token.
    pub token: Token,
}

/// One critical section, as its holder saw it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Section {
    /// The contender task, e.g. `p2-t1` (process 2, task 1; `p2-m` is its multi-lock task,
    /// `p2-b` its task on the second lock).
    pub client: String,
    /// Index of the contender process.
    pub process: usize,
    /// The lock `token` fences.
    #[serde(default = "main_lock")]
    pub lock: String,
    /// The grant's fencing token.
    pub token: Token,
    /// For a multi-lock section, the second lock and its token.
    #[serde(default)]
    pub second: Option<Part>,
    /// Whether the guard already reported a loss when `acquire` returned it.
    #[serde(default)]
    pub lost_at_grant: bool,
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
    /// Whether another process asked for the lock (revocation) and the section ended early
    /// for it.
    #[serde(default)]
    pub revoked: bool,
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
        lock: String,
        token: Token,
        second: Option<Part>,
        granted_ns: u64,
        long: bool,
    },
    /// The section ended and the lock is about to be released.
    Section(Section),
    /// An acquisition that did not end in a grant.
    AcquireFailed(AcquireFailure),
    /// The process closed its client (`LockClient::close`) and is opening a fresh one.
    Closed(CloseRecord),
    /// The multi-lock task holds [`LOCK`] while it waits for [`LOCK_B`] (answer to `probe`).
    MultiWaiting {
        process: usize,
        client: String,
        since_ns: u64,
        at_ns: u64,
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

/// How an acquisition failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FailureKind {
    /// `LockError::Timeout`.
    Timeout,
    /// `LockError::Closed`: the client was closed.
    Closed,
    /// Anything else.
    Other,
}

/// An acquisition that did not end in a grant.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AcquireFailure {
    /// The contender task.
    pub client: String,
    /// Its process.
    pub process: usize,
    /// When `acquire` returned the error.
    pub at_ns: u64,
    /// What kind of error.
    pub kind: FailureKind,
    /// The error's message.
    pub error: String,
}

/// A task waiting in `acquire` when its client was closed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Waiter {
    /// The contender task.
    pub client: String,
    /// When its `acquire` began.
    pub since_ns: u64,
    /// When its `acquire` would time out.
    pub deadline_ns: u64,
}

/// One `LockClient::close()` under load.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CloseRecord {
    /// The contender process.
    pub process: usize,
    /// The ZooKeeper session of the closed client, if it had one.
    pub session: Option<i64>,
    /// When `close()` was called.
    pub called_ns: u64,
    /// When it returned.
    pub returned_ns: u64,
    /// Tasks waiting in `acquire` on that client at the call.
    pub waiters: Vec<Waiter>,
    /// Tasks holding a lock of that client at the call.
    pub holders: Vec<String>,
    /// Nodes of the closed session still in the lock dirs after `close()` returned (listed
    /// by the runner).
    #[serde(default)]
    pub leftover_nodes: Vec<String>,
    /// The bound on a waiter's end after the call, and on a holder's loss signal after the
    /// return, in milliseconds.
    #[serde(default)]
    pub bound_ms: u64,
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
    /// The lock `token` belongs to.
    #[serde(default = "main_lock")]
    pub lock: String,
    /// The token it wrote with.
    pub token: Token,
    /// A multi-lock writer's second lock and token; the write is accepted only if both are
    /// current.
    #[serde(default)]
    pub second: Option<Part>,
    /// `claim`, `write` or `done`.
    pub kind: String,
    /// Whether the register accepted it (every token ≥ the highest accepted for its lock).
    pub accepted: bool,
}

impl WriteRecord {
    /// The token this write carries for `lock`, if any.
    pub fn token_for(&self, lock: &str) -> Option<Token> {
        if self.lock == lock {
            return Some(self.token);
        }
        self.second.as_ref().filter(|p| p.lock == lock).map(|p| p.token)
    }
}

impl Section {
    /// The token this section holds `lock` with, if it holds it.
    pub fn token_for(&self, lock: &str) -> Option<Token> {
        if self.lock == lock {
            return Some(self.token);
        }
        self.second.as_ref().filter(|p| p.lock == lock).map(|p| p.token)
    }
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
    /// `LockClient::close()` in a process whose tasks hold and wait for the lock; it then
    /// carries on with a fresh client.
    CloseUnderLoad,
    /// Blackhole a process whose multi-lock task holds [`LOCK`] while it waits for [`LOCK_B`],
    /// until its session expires, then heal it.
    MultiWaitExpiry,
    /// Ask the holder of [`LOCK`] in a long section to release it (`LockClient::revoke`,
    /// Curator's `__REVOKE__`); it must end its section early.
    RevokeHolder,
    /// Delete the node of the holder of [`LOCK`] in a long section, as an operator clearing a
    /// stuck lock would: a loss for the holder, and, with a lock-delay, the lock stays
    /// unavailable to the waiter behind it for the delay.
    DeleteHolderNode,
}

impl FaultKind {
    /// Every kind, in the order a CI-sized run injects them.
    pub const ALL: [FaultKind; 10] = [
        FaultKind::LeaderKill,
        FaultKind::PartitionHolder,
        FaultKind::IsolateHolderMember,
        FaultKind::PauseHolder,
        FaultKind::RevokeHolder,
        FaultKind::DeleteHolderNode,
        FaultKind::CloseUnderLoad,
        FaultKind::MultiWaitExpiry,
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
            FaultKind::CloseUnderLoad => "close_under_load",
            FaultKind::MultiWaitExpiry => "multi_wait_expiry",
            FaultKind::RevokeHolder => "revoke_holder",
            FaultKind::DeleteHolderNode => "delete_holder_node",
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
    /// The contender task the fault was aimed at, if one (the waiting multi-lock task).
    #[serde(default)]
    pub target_client: Option<String>,
    /// Whether the fault took effect (e.g. the lock dir really was reaped).
    pub effective: bool,
    /// For [`FaultKind::DeleteHolderNode`]: the creation zxid (the token) of the node that
    /// was next in line behind the deleted one, if any.
    #[serde(default)]
    pub successor_zxid: Option<i64>,
    /// For [`FaultKind::DeleteHolderNode`] and [`FaultKind::RevokeHolder`]: the creation zxid
    /// of the node deleted, or asked to release; no grant of it may follow the fault.
    #[serde(default)]
    pub node_zxid: Option<i64>,
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
    /// Clients closed under load, in order.
    #[serde(default)]
    pub closes: Vec<CloseRecord>,
    /// Acquisitions that did not end in a grant.
    #[serde(default)]
    pub acquire_failures: Vec<AcquireFailure>,
    /// Acquisitions attempted (granted, timed out or failed).
    pub acquire_attempts: u64,
    /// Contender nodes left in the lock dirs after every contender exited and dead sessions
    /// had time to expire.
    pub leaked_nodes: usize,
    /// Names of those nodes.
    pub leaked_node_names: Vec<String>,
    /// When recording ended.
    pub ended_ns: u64,
    /// The main lock's lock-delay in milliseconds (0: none).
    #[serde(default)]
    pub lock_delay_ms: u64,
}
