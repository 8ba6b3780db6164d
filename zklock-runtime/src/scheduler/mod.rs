//! Singleton cron jobs: a [tokio-cron-scheduler](tokio_cron_scheduler) job added on every node
//! of a cluster runs on one node per fire.
//!
//! Build the job with [`SingletonJob::new_async`] (the counterpart of
//! `Job::new_async`, plus a lock client and a job name), then add it to the node's
//! `JobScheduler`, directly or through [`JobSchedulerExt::add_singleton`]:
//!
//! ```no_run
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! use zklock_runtime::scheduler::tokio_cron_scheduler::JobScheduler;
//! use zklock_runtime::scheduler::{JobSchedulerExt, Policy, SingletonJob};
//! use zklock_runtime::LockClient;
//!
//! let client = LockClient::connect("127.0.0.1:2181").await?;
//! let job = SingletonJob::new_async("0 */5 * * * *", &client, "nightly-report", |run| async move {
//!     println!("building the report for {:?}", run.tick());
//!     Ok::<(), std::io::Error>(())
//! })?
//! .policy(Policy::OncePerTick);
//!
//! let scheduler = JobScheduler::new().await?;
//! let (_id, stats) = scheduler.add_singleton(job).await?;
//! scheduler.start().await?;
//! // later: stats.runs(), stats.skips(), stats.failures(), stats.lost(), stats.last_tick()
//! # Ok(()) }
//! ```
//!
//! The job name is validated like a lock name; the job's lock is the mutex of that name, so
//! Curator peers and `#[distributed_lock("nightly-report")]` exclude it too.
//!
//! tokio-cron-scheduler calls the job once a second (the *beat*); the job reads its own
//! schedule, in its time zone ([`SingletonJob::time_zone`], UTC by default), so daylight saving
//! changes are followed, not frozen when the job is created. Around a change, a fixed-time
//! schedule (its hour field names hours) runs a local time that does not exist at the first
//! moment after the gap, and a local time that occurs twice at the first of the two only; an
//! interval schedule (hour field `*`) runs by the wall clock, through both passes of a repeated
//! hour, so its ticks stay evenly spaced in real time.
//!
//! # Policies
//!
//! What happens when a tick comes while the job is running ([`Policy`]):
//!
//! * [`Policy::OncePerTick`] (default): each scheduled tick runs exactly once in the cluster;
//!   ticks that came during a run run after it, in order (see [late ticks](#late-ticks)).
//! * [`Policy::BufferOne`]: the ticks that came during a run collapse into one run after it.
//! * [`Policy::Replace`]: a tick that comes during a run stops it (on whichever node it runs)
//!   and runs instead.
//! * [`Policy::Allow`]: runs overlap; each tick runs when it comes, once.
//! * [`Policy::Skip`]: ShedLock's behaviour; a tick that finds the job running anywhere is
//!   skipped. It takes its tick through the same record, so it never runs a tick that already
//!   ran, whatever the policy of the node that ran it.
//!
//! # Operators
//!
//! From code or from `zklock jobs`: [`job_records`] lists the jobs, [`job_history`] gives a
//! job's latest runs (kept in ZooKeeper, newest first, 50 at most), [`pause_job`] and
//! [`resume_job`] stop and restart a job on every node (paused ticks are recorded as skipped
//! and never replayed), [`trigger_job`] runs it once now on one node (also while paused,
//! without touching the schedule's record), [`reset_job`] clears its record and history and
//! [`remove_job`] deletes all it keeps. A node that registers a job name with another schedule,
//! zone or policy than the first node did logs a warning and is shown by `zklock jobs`.
//!
//! # Once per tick without synchronized clocks
//!
//! Each node maps a beat to a *tick*: the latest time of the schedule at or before its own
//! clock ([`Clock`]). Under the job's lock it reads the last tick taken, kept in a persistent
//! znode (`<namespace>.jobs/<job>`), and runs only a later tick, after writing that tick to the
//! record (fenced: the write fails unless this node's lock node still exists and the record is
//! unchanged since it was read). ShedLock instead holds the lock for at least a fixed time
//! (`lockAtLeastFor`) and needs the nodes' clocks to agree to within it; here nothing depends on
//! how long a run takes or on the lock being held past it.
//!
//! Why each tick runs once when the nodes' clocks disagree by less than the period:
//!
//! * **At most once** needs no clock at all: the record only grows, every run first writes its
//!   tick under the lock, and a tick at or before the record is never run. A node whose clock is
//!   behind beats late, possibly after the run on a faster node has finished and the lock is
//!   free; it reads the record and skips.
//! * **At least once**: every node walks the ticks of its own clock in order (a beat offers,
//!   under one hold of the lock, every tick after the last one the node handled up to the
//!   beat's own tick, oldest first; a beat that could not take the lock or read the record
//!   handles nothing, so a later beat offers its ticks again). So the first node to reach tick
//!   *T* on its clock finds the record below *T*: any node that could have recorded *T+1* or
//!   later already went through its own *T* before. That node runs *T*. A node whose clock is
//!   ahead simply runs the ticks a little early, once each.
//!
//! What it does not cover: a node that joins while another node's clock is more than a tick
//! ahead may find its first tick already passed; ticks beyond the catch-up policy are given
//! up; and a record that was edited by hand, emptied or restored from a backup (the record
//! carries the znode version it was written at) cannot say which ticks due before it was
//! written ran: those count as taken and the history names them as in doubt, none runs twice,
//! and the ticks after it run as late ticks do. This holds whatever state the record shows: a
//! record restored while its run was going on is settled as `lost` and stays unproven for the
//! nodes after it.
//!
//! Clocks that disagree by more than the period are caught where it matters: a node never
//! takes a tick more than one second ahead of ZooKeeper's clock (it takes the ticks due by
//! ZooKeeper's clock instead, and warns once), and a record claiming a tick far beyond its own
//! write time, as only such a node could have written, is honoured only up to that time; so is
//! a [`Policy::Replace`] request, by its creation time. The starting deadline is judged by the
//! same capped time, so the ticks such a node takes are on time, not missed. A node with a
//! clock set to 2100 thus runs the job's current ticks, not the ticks of 2100, and cannot stop
//! the others.
//!
//! # Late ticks
//!
//! A tick is still run after its time while the cluster is behind: the beat came late on a
//! loaded machine, the lock was busy for longer than [`SingletonJob::lock_wait`], runs take
//! longer than the period, or the whole cluster was down (a node's first beat catches up from
//! the record). Such a tick runs once, late, in order, with [`JobRun::tick`] telling its
//! scheduled time.
//!
//! How many late ticks run is the [`CatchUp`] policy: all of them up to a limit (default 10),
//! the latest once, or none; and [`SingletonJob::starting_deadline`] gives up any tick not
//! started within a time of its own. Ticks given up run on no node (never twice): a `warn`
//! event names the first and last of them, they are counted in [`JobStats::missed`] and written
//! to the history, and the record moves past them. A beat reads the clock when it starts, so a
//! job whose runs keep taking longer than its period runs its latest ticks, not an
//! ever-growing backlog. Between the runs of a backlog the job's state is read again and the
//! decision made again: a pause made during a run starts no further run (the beat's tick is
//! taken as skipped), and a tick whose starting deadline passed while an earlier one ran is
//! given up.
//!
//! # Failed runs, lost locks, dead nodes
//!
//! A tick is taken when its run starts. A run that returns an error, panics, or outlasts
//! [`SingletonJob::max_hold`] (it is then aborted) is counted in [`JobStats::failures`], logged,
//! and recorded as `state=failed` with its error in the history; it is **not** retried by
//! another node, because the run may have had effects before it failed and a second run of the
//! same tick is exactly what this policy promises not to do. The next tick is the retry.
//!
//! If the node running a job dies, its session expires, its lock node disappears and the next
//! tick runs on another node; the first node to hold the lock after it records the dead node's
//! tick as `state=lost` (and does not run it again). If a node loses the lock while its run is
//! still going (see [`LockGuard::lost`](crate::LockGuard::lost)), the run is cancelled
//! ([`OnLost::Abort`](crate::OnLost::Abort), the default) or let finish
//! ([`OnLost::Continue`](crate::OnLost::Continue)); either way it is counted in
//! [`JobStats::lost`] and reported at `warn` level.
//!
//! # Visibility
//!
//! [`JobStats`] counts runs, skips, failures, lost runs and missed ticks per job and per node.
//! The history in ZooKeeper keeps the cluster's latest runs. With the `metrics` feature, runs by
//! outcome, skips, missed ticks and run times are exported labelled with the job's name. Every
//! decision is also a `tracing` event with target `zklock::scheduler` and fields `job` and
//! `tick`.

mod clock;
mod control;
mod fire;
mod history;
mod hold;
mod job;
mod node;
mod outbox;
mod plan;
mod policy;
mod record;
mod registration;
mod run;
#[cfg(test)]
mod sim;
mod stats;
mod store;
#[cfg(test)]
mod tests;
mod ticks;

use std::future::Future;

/// IANA time zones for [`SingletonJob::time_zone`], re-exported so `zklock` users need no extra
/// dependency.
pub use chrono_tz;
pub use clock::{Clock, OffsetClock, SystemClock};
pub use control::{
    create_job, job_history, job_records, pause_job, remove_job, reset_job, resume_job, trigger_job, JobRecord, JobSpec,
};
pub use history::{HistoryEntry, Outcome};
pub use job::{RunResult, SchedulerError, SingletonJob};
pub use policy::{CatchUp, Policy};
pub use run::JobRun;
pub use stats::{JobStats, StatsSnapshot};
/// The scheduler this adapter plugs into, re-exported so `zklock` users need no extra
/// dependency.
pub use tokio_cron_scheduler;

use tokio_cron_scheduler::JobScheduler;

/// Adds singleton jobs to a tokio-cron-scheduler `JobScheduler`.
///
/// ```no_run
/// # async fn demo(client: zklock_runtime::LockClient) -> Result<(), Box<dyn std::error::Error>> {
/// use zklock_runtime::scheduler::tokio_cron_scheduler::JobScheduler;
/// use zklock_runtime::scheduler::{JobSchedulerExt, SingletonJob};
///
/// let scheduler = JobScheduler::new().await?;
/// let job = SingletonJob::new_async("0 * * * * *", &client, "minutely", |_run| async {})?;
/// let (id, stats) = scheduler.add_singleton(job).await?;
/// # let _ = (id, stats); Ok(()) }
/// ```
pub trait JobSchedulerExt {
    /// Adds `job`; returns its tokio-cron-scheduler id and its live counters.
    fn add_singleton(
        &self,
        job: SingletonJob,
    ) -> impl Future<Output = Result<(uuid::Uuid, JobStats), SchedulerError>> + Send;
}

impl JobSchedulerExt for JobScheduler {
    async fn add_singleton(&self, job: SingletonJob) -> Result<(uuid::Uuid, JobStats), SchedulerError> {
        let stats = job.stats();
        let id = self.add(job.into_job()?).await?;
        Ok((id, stats))
    }
}
