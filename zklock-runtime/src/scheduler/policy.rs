//! What a node does when a job fires: the overlap policies, the catch-up of late ticks, and
//! the reaction to a lost lock.

/// How the nodes of a cluster share the fires of one singleton job.
///
/// ```
/// use zklock_runtime::scheduler::Policy;
/// assert_eq!(Policy::default(), Policy::OncePerTick);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum Policy {
    /// Every scheduled tick runs exactly once in the whole cluster.
    ///
    /// The last tick taken is recorded in ZooKeeper and read and written under the job's lock;
    /// a fire runs only a tick later than the recorded one. Nodes need not agree on the time
    /// (see the [module docs](super#once-per-tick-without-synchronized-clocks)).
    #[default]
    OncePerTick,
    /// Like [`OncePerTick`](Self::OncePerTick), except that ticks that come while the job is
    /// running collapse into one run right after it (the latest of them); the others are
    /// recorded as missed, whatever the [`CatchUp`] policy. Kubernetes' `Forbid` with one
    /// buffered run; Temporal's `BufferOne`.
    BufferOne,
    /// A tick that comes while the job is running stops that run (its task is aborted, as on a
    /// lost lock, and the run is recorded as replaced) and runs instead: the latest tick always
    /// wins. Kubernetes' `Replace`; Temporal's `CancelOther`. Late ticks are not run.
    Replace,
    /// Runs may overlap: each tick runs once, when it comes, whether or not earlier runs are
    /// still going (on this node or others). The job's lock is held only while a tick is
    /// taken, so a run has no lock to lose: its loss signal never fires and `on_lost` does not
    /// apply; its fencing token is that of the hold that took the tick. Kubernetes' `Allow`;
    /// Temporal's `AllowAll`.
    Allow,
    /// ShedLock's behaviour: a fire runs if the job's lock is free and is skipped if the job is
    /// running anywhere (on another node, or still on this one). The tick is taken through the
    /// same record as under [`OncePerTick`](Self::OncePerTick), so a node whose timer fires
    /// after another node ran the tick skips it; late ticks are not run.
    Skip,
}

/// What happens to ticks that were due but did not run at their time: the cluster was down,
/// the job was running (under [`Policy::OncePerTick`]), or no node could take the lock.
///
/// Late ticks are those after the last tick the record shows taken and before the current
/// one; the current tick always runs (unless it is past the
/// [starting deadline](super::SingletonJob::starting_deadline)). Given-up ticks are recorded
/// as missed, in the history and in [`JobStats::missed`](super::JobStats::missed).
///
/// ```
/// use zklock_runtime::scheduler::CatchUp;
/// assert_eq!(CatchUp::default(), CatchUp::RunAll { limit: 10 });
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum CatchUp {
    /// Late ticks are not run; only the current tick is.
    Skip,
    /// Late ticks run once in all: the latest of them, before the current tick.
    RunOnce,
    /// Every late tick runs, oldest first, at most `limit` of them; older ones are given up.
    RunAll {
        /// How many late ticks one beat runs at most.
        limit: usize,
    },
}

impl Default for CatchUp {
    fn default() -> Self {
        CatchUp::RunAll {
            limit: super::ticks::MAX_CATCH_UP,
        }
    }
}

impl CatchUp {
    /// How many late ticks may run.
    pub(crate) fn late(self) -> usize {
        match self {
            CatchUp::Skip => 0,
            CatchUp::RunOnce => 1,
            CatchUp::RunAll { limit } => limit,
        }
    }
}

impl Policy {
    /// The policy's name in a job's registration (`once_per_tick`, `buffer_one`, `replace`, `allow`, `skip`).
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Policy::OncePerTick => "once_per_tick",
            Policy::BufferOne => "buffer_one",
            Policy::Replace => "replace",
            Policy::Allow => "allow",
            Policy::Skip => "skip",
        }
    }
}
