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
//! changes are followed, not frozen when the job is created. Ticks around a change follow
//! croner's rules: a local time that does not exist runs at the first moment after the gap, a
//! local time that occurs twice runs at the first of the two only.
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
//! up; and a record that was deleted, edited by hand or restored from a backup proves nothing
//! about the ticks after it (the record carries the znode version it was written at), so a
//! node then offers only its own tick: ticks in between that never ran are lost, none runs
//! twice.
//!
//! Clocks that disagree by more than the period are caught where it matters: a node never
//! takes a tick more than one second ahead of ZooKeeper's clock (it takes the ticks due by
//! ZooKeeper's clock instead, and warns once), and a record claiming a tick far beyond its own
//! write time, as only such a node could have written, is honoured only up to that time. A
//! node with a clock set to 2100 thus runs the job's current ticks, not the ticks of 2100, and
//! cannot stop the others.
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
//! ever-growing backlog.
//!
//! # Failed runs, lost locks, dead nodes
//!
//! A tick is taken when its run starts. A run that returns an error, panics, or outlasts
//! [`SingletonJob::max_run`] (it is then aborted) is counted in [`JobStats::failures`], logged,
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
mod policy;
mod record;
mod run;
mod stats;
mod store;
#[cfg(test)]
mod tests;
mod ticks;

use std::future::Future;
use std::sync::{Arc, Mutex as StdMutex};
use std::time::Duration;

/// IANA time zones for [`SingletonJob::time_zone`], re-exported so `zklock` users need no extra
/// dependency.
pub use chrono_tz;
pub use clock::{Clock, OffsetClock, SystemClock};
pub use control::{
    job_history, job_records, pause_job, remove_job, reset_job, resume_job, trigger_job, JobRecord, JobSpec,
};
pub use history::{HistoryEntry, Outcome};
#[allow(deprecated)]
pub use policy::OnLoss;
pub use policy::{CatchUp, Policy};
pub use run::JobRun;
pub use stats::{JobStats, StatsSnapshot};
/// The scheduler this adapter plugs into, re-exported so `zklock` users need no extra
/// dependency.
pub use tokio_cron_scheduler;

use tokio_cron_scheduler::{Job, JobScheduler, JobSchedulerError};

use crate::{LockClient, LockError};
use fire::Shared;
use run::{RunFn, RunLimits};
use store::RecordStore;
use ticks::Ticks;

/// How often tokio-cron-scheduler calls a singleton job: each call reads the job's own schedule,
/// in its time zone, and the operators' requests.
const BEAT: &str = "* * * * * *";

/// Why a singleton job could not be built or added.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SchedulerError {
    /// The job name is not a valid lock name.
    #[error("invalid job name: {0}")]
    InvalidName(LockError),
    /// The cron expression does not parse.
    #[error("invalid schedule {schedule:?}: {reason} (six or seven fields, seconds first)")]
    InvalidSchedule {
        /// The schedule as given.
        schedule: String,
        /// What is wrong with it.
        reason: String,
    },
    /// tokio-cron-scheduler refused the job.
    #[error("tokio-cron-scheduler: {0}")]
    Scheduler(#[from] JobSchedulerError),
}

/// What a job's run may return: `()` or any `Result` whose error can be displayed.
///
/// An `Err` counts as a failed run (see the [module docs](self#failed-runs-lost-locks-dead-nodes)).
pub trait RunResult: Send + 'static {
    /// `Err` with a description when the run failed.
    fn into_run_result(self) -> Result<(), String>;
}

impl RunResult for () {
    fn into_run_result(self) -> Result<(), String> {
        Ok(())
    }
}

impl<T: Send + 'static, E: std::fmt::Display + Send + 'static> RunResult for Result<T, E> {
    fn into_run_result(self) -> Result<(), String> {
        self.map(|_| ()).map_err(|e| e.to_string())
    }
}

/// A cron job that runs on one node of the cluster per fire; the counterpart of
/// tokio-cron-scheduler's `Job::new_async`.
///
/// Build it with [`new_async`](Self::new_async), adjust it with the builder methods, then turn
/// it into a tokio-cron-scheduler [`Job`] with [`into_job`](Self::into_job) or add it with
/// [`JobSchedulerExt::add_singleton`].
///
/// ```no_run
/// # async fn demo(client: zklock_runtime::LockClient) -> Result<(), Box<dyn std::error::Error>> {
/// use std::time::Duration;
/// use zklock_runtime::scheduler::{Policy, SingletonJob};
/// use zklock_runtime::OnLost;
///
/// let job = SingletonJob::new_async("*/10 * * * * *", &client, "cleanup", |run| async move {
///     // do the work; run.fencing_token() fences writes, run.loss_signal() reports a lost lock
///     let _ = run;
/// })?
/// .policy(Policy::Skip)
/// .on_lost(OnLost::Abort)
/// .lock_wait(Duration::from_secs(2));
/// let stats = job.stats();
/// let job = job.into_job()?; // a tokio_cron_scheduler::Job
/// # let _ = (stats, job); Ok(()) }
/// ```
pub struct SingletonJob {
    schedule: String,
    name: Arc<str>,
    client: LockClient,
    ticks: Ticks,
    zone: chrono_tz::Tz,
    policy: Policy,
    catch_up: CatchUp,
    starting_deadline: Option<Duration>,
    on_lost: crate::OnLost,
    max_run: Option<Duration>,
    clock: Arc<dyn Clock>,
    lock_wait: Option<Duration>,
    stats: JobStats,
    run: RunFn,
}

impl std::fmt::Debug for SingletonJob {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SingletonJob")
            .field("name", &self.name)
            .field("schedule", &self.schedule)
            .field("time_zone", &self.zone)
            .field("policy", &self.policy)
            .field("catch_up", &self.catch_up)
            .field("starting_deadline", &self.starting_deadline)
            .field("on_lost", &self.on_lost)
            .field("max_run", &self.max_run)
            .field("lock_wait", &self.lock_wait)
            .finish_non_exhaustive()
    }
}

impl SingletonJob {
    /// A job running `run` on `schedule` (a cron expression with seconds, in UTC, as
    /// `Job::new_async` takes it) on one node at a time, under the lock `name` of `client`.
    ///
    /// `run` is called once per run, after this node has won the tick, with a [`JobRun`]; it
    /// returns `()` or a `Result` (see [`RunResult`]). The run executes in its own task, so a
    /// panic counts as a failed run.
    ///
    /// ```no_run
    /// # async fn demo(client: zklock_runtime::LockClient) {
    /// use zklock_runtime::scheduler::{SchedulerError, SingletonJob};
    ///
    /// let bad = SingletonJob::new_async("*/1 * * * * *", &client, "a/b", |_run| async {});
    /// assert!(matches!(bad, Err(SchedulerError::InvalidName(_))));
    /// let bad = SingletonJob::new_async("every minute", &client, "ok", |_run| async {});
    /// assert!(matches!(bad, Err(SchedulerError::InvalidSchedule { .. })));
    /// # }
    /// ```
    pub fn new_async<S, F, Fut>(
        schedule: S,
        client: &LockClient,
        name: &str,
        mut run: F,
    ) -> Result<SingletonJob, SchedulerError>
    where
        S: ToString,
        F: FnMut(JobRun) -> Fut + Send + 'static,
        Fut: Future + Send + 'static,
        Fut::Output: RunResult,
    {
        crate::validate_name(name).map_err(SchedulerError::InvalidName)?;
        let schedule = schedule.to_string();
        let ticks = Ticks::parse(&schedule).map_err(|reason| SchedulerError::InvalidSchedule {
            schedule: schedule.clone(),
            reason,
        })?;
        let run: RunFn = Box::new(move |job_run| {
            let future = run(job_run);
            Box::pin(async move { future.await.into_run_result() })
        });
        Ok(SingletonJob {
            schedule,
            name: Arc::from(name),
            client: client.clone(),
            ticks,
            zone: chrono_tz::Tz::UTC,
            policy: Policy::default(),
            catch_up: CatchUp::default(),
            starting_deadline: None,
            on_lost: crate::OnLost::default(),
            max_run: None,
            clock: Arc::new(SystemClock),
            lock_wait: None,
            stats: JobStats::new(name),
            run,
        })
    }

    /// Chooses the cluster policy (default [`Policy::OncePerTick`]).
    pub fn policy(mut self, policy: Policy) -> Self {
        self.policy = policy;
        self
    }

    /// Chooses what happens to a run whose lock is lost (default
    /// [`OnLost::Abort`](crate::OnLost::Abort): the run's task is aborted). Either way the run
    /// is counted in [`JobStats::lost`] and reported at `warn` level.
    pub fn on_lost(mut self, on_lost: crate::OnLost) -> Self {
        self.on_lost = on_lost;
        self
    }

    /// The old name of [`on_lost`](Self::on_lost).
    #[deprecated(since = "0.1.0", note = "use on_lost(zklock::OnLost::…)")]
    #[allow(deprecated)]
    pub fn on_loss(self, on_loss: OnLoss) -> Self {
        self.on_lost(on_loss.into())
    }

    /// Reads the schedule's times in `zone` (default UTC), following its daylight saving
    /// changes: a daily 02:30 in `Europe/Berlin` runs once on the spring-forward day (at 03:00,
    /// the first moment after the gap) and once on the fall-back day (at the first 02:30).
    ///
    /// ```no_run
    /// # async fn demo(client: zklock_runtime::LockClient) -> Result<(), Box<dyn std::error::Error>> {
    /// use zklock_runtime::scheduler::{chrono_tz::Europe::Berlin, SingletonJob};
    ///
    /// let job = SingletonJob::new_async("0 30 2 * * *", &client, "nightly", |_run| async {})?.time_zone(Berlin);
    /// # let _ = job; Ok(()) }
    /// ```
    pub fn time_zone(mut self, zone: chrono_tz::Tz) -> Self {
        self.zone = zone;
        self
    }

    /// Chooses what happens to ticks that were due but did not run at their time (default
    /// [`CatchUp::RunAll`] with a limit of 10). On start-up, a node catches up from the job's
    /// record, so the ticks missed while the whole cluster was down are run or recorded as
    /// missed by this policy.
    pub fn catch_up(mut self, catch_up: CatchUp) -> Self {
        self.catch_up = catch_up;
        self
    }

    /// A tick not started within `deadline` of its time is given up and recorded as missed,
    /// whatever the catch-up policy (Kubernetes' `startingDeadlineSeconds`). Default: no
    /// deadline.
    pub fn starting_deadline(mut self, deadline: Duration) -> Self {
        self.starting_deadline = Some(deadline);
        self
    }

    /// Aborts a run that takes longer than `max_run` (its task is dropped at its next `.await`)
    /// and records it as timed out. Without it a run may hold the job's lock for as long as it
    /// takes.
    pub fn max_run(mut self, max_run: Duration) -> Self {
        self.max_run = Some(max_run);
        self
    }

    /// The clock used to map fires to ticks (default [`SystemClock`]); tests inject skew here.
    pub fn clock(mut self, clock: impl Clock) -> Self {
        self.clock = Arc::new(clock);
        self
    }

    /// How long a once-per-tick fire waits for the job's lock while another node holds it
    /// (default: the gap to the next tick). A fire that waits in vain is counted as a skip; its
    /// tick is not given up: unless another node takes it, this node's next fire runs it late
    /// (see [late ticks](self#late-ticks)).
    pub fn lock_wait(mut self, wait: Duration) -> Self {
        self.lock_wait = Some(wait);
        self
    }

    /// The job name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The job's counters on this node; stays live after [`into_job`](Self::into_job).
    pub fn stats(&self) -> JobStats {
        self.stats.clone()
    }

    /// The tokio-cron-scheduler job to add to this node's `JobScheduler`.
    pub fn into_job(self) -> Result<Job, SchedulerError> {
        let shared = self.into_shared()?;
        Ok(Job::new_async(BEAT, move |_id, _scheduler| {
            Box::pin(fire::fire(shared.clone()))
        })?)
    }

    /// What every fire of the job shares.
    fn into_shared(self) -> Result<Arc<Shared>, SchedulerError> {
        let store = RecordStore::for_job(self.client.namespace(), &self.name);
        // The job's name labels its lock's metrics (a job name is fixed, not per key).
        let lock = self
            .client
            .mutex(&self.name)
            .map_err(SchedulerError::InvalidName)?
            .with_template(self.name.clone());
        let spec = JobSpec {
            schedule: self.schedule,
            time_zone: self.zone.name().to_owned(),
            policy: self.policy.as_str().to_owned(),
            node: self.client.identity().to_owned(),
        };
        let shared = Arc::new(Shared {
            name: self.name,
            client: self.client,
            lock,
            ticks: self.ticks.in_zone(self.zone),
            spec,
            policy: self.policy,
            catch_up: self.catch_up,
            starting_deadline: self.starting_deadline,
            limits: RunLimits {
                on_lost: self.on_lost,
                max_run: self.max_run,
            },
            clock: self.clock,
            lock_wait: self.lock_wait,
            store,
            stats: self.stats,
            serial: tokio::sync::Mutex::default(),
            run: StdMutex::new(self.run),
            clock_ahead_reported: Default::default(),
            seen: std::sync::atomic::AtomicI64::new(i64::MIN),
            running: std::sync::atomic::AtomicI64::new(i64::MIN),
            replace: tokio::sync::Notify::new(),
        });
        Ok(shared)
    }
}

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
