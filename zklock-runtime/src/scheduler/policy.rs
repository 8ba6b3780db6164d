//! What a node does when a job fires: the two cluster policies and the reaction to a lost lock.

/// How the nodes of a cluster share the fires of one singleton job.
///
/// ```
/// use zklock_runtime::scheduler::Policy;
/// assert_eq!(Policy::default(), Policy::OncePerTick);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Policy {
    /// Every scheduled tick runs exactly once in the whole cluster.
    ///
    /// The last tick taken is recorded in ZooKeeper and read and written under the job's lock;
    /// a fire runs only a tick later than the recorded one. Nodes need not agree on the time
    /// (see the [module docs](super#once-per-tick-without-synchronized-clocks)).
    #[default]
    OncePerTick,
    /// ShedLock's behaviour: a fire runs if the job's lock is free and is skipped if the job is
    /// running anywhere (on another node, or still on this one). Nothing is recorded, so a node
    /// whose timer fires after another node's run finished runs the same tick again.
    Skip,
}

/// What happens to a run whose node lost the job's lock while it was running (session expired,
/// or disconnected long enough that it may have; see [`LockGuard::lost`](crate::LockGuard::lost)).
///
/// Either way the run is counted in [`JobStats::lost`](super::JobStats::lost) and reported
/// through `tracing` at `warn` level.
///
/// ```
/// use zklock_runtime::scheduler::OnLoss;
/// assert_eq!(OnLoss::default(), OnLoss::Cancel);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum OnLoss {
    /// Abort the run's task at its next `.await`: another node may already be running the job.
    #[default]
    Cancel,
    /// Let the run finish, and only report it. For jobs that protect their side effects with the
    /// fencing token ([`JobRun::fencing_token`](super::JobRun::fencing_token)) or watch
    /// [`JobRun::loss_signal`](super::JobRun::loss_signal) themselves.
    Flag,
}
