//! The singleton job a node builds: [`SingletonJob`], its options, and the tokio-cron-scheduler
//! job it becomes.

use std::future::Future;
use std::sync::{Arc, Mutex as StdMutex};
use std::time::Duration;

use tokio_cron_scheduler::{Job, JobSchedulerError};

use super::clock::{Clock, SystemClock};
use super::control::JobSpec;
use super::fire;
use super::node::Shared;
use super::policy::{CatchUp, Policy};
use super::run::{JobRun, RunFn, RunLimits};
use super::stats::JobStats;
use super::store::RecordStore;
use super::ticks::Ticks;
use crate::client::LockClient;
use crate::error::LockError;

/// How often tokio-cron-scheduler calls a singleton job: each call reads the job's own schedule,
/// in its time zone, and the operators' requests.
const BEAT: &str = "* * * * * *";

/// Why a singleton job could not be built or added.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SchedulerError {
    /// The job name is not a valid lock name (the name's error is also the source).
    #[error("invalid job name: {0}")]
    InvalidName(#[source] LockError),
    /// The cron expression does not parse.
    #[error("invalid schedule {schedule:?}: {reason} (six or seven fields, seconds first)")]
    InvalidSchedule {
        /// The schedule as given.
        schedule: String,
        /// What is wrong with it.
        reason: String,
    },
    /// A job option is out of its range (a `min_hold` over the limit); the lock's error says
    /// which.
    #[error("invalid job option: {0}")]
    InvalidOption(#[source] LockError),
    /// tokio-cron-scheduler refused the job.
    #[error("tokio-cron-scheduler: {0}")]
    Scheduler(#[from] JobSchedulerError),
}

/// What a job's run may return: `()` or any `Result` whose error can be displayed.
///
/// An `Err` counts as a failed run (see the [module docs](super#failed-runs-lost-locks-dead-nodes)).
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
/// [`JobSchedulerExt::add_singleton`](super::JobSchedulerExt::add_singleton).
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
    on_lost: crate::engine::supervise::OnLost,
    max_hold: Option<Duration>,
    min_hold: Option<Duration>,
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
            .field("max_hold", &self.max_hold)
            .field("min_hold", &self.min_hold)
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
        crate::name::validate_name(name).map_err(SchedulerError::InvalidName)?;
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
            on_lost: crate::engine::supervise::OnLost::default(),
            max_hold: None,
            min_hold: None,
            clock: Arc::new(SystemClock),
            lock_wait: None,
            stats: JobStats::new(name),
            run,
        })
    }

    /// Chooses the cluster policy (default [`Policy::OncePerTick`]).
    #[must_use]
    pub fn policy(mut self, policy: Policy) -> Self {
        self.policy = policy;
        self
    }

    /// Chooses what happens to a run whose lock is lost (default
    /// [`OnLost::Abort`](crate::OnLost::Abort): the run's task is aborted). Either way the run
    /// is counted in [`JobStats::lost`] and reported at `warn` level.
    #[must_use]
    pub fn on_lost(mut self, on_lost: crate::engine::supervise::OnLost) -> Self {
        self.on_lost = on_lost;
        self
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
    #[must_use]
    pub fn time_zone(mut self, zone: chrono_tz::Tz) -> Self {
        self.zone = zone;
        self
    }

    /// Chooses what happens to ticks that were due but did not run at their time (default
    /// [`CatchUp::RunAll`] with a limit of 10). On start-up, a node catches up from the job's
    /// record, so the ticks missed while the whole cluster was down are run or recorded as
    /// missed by this policy.
    #[must_use]
    pub fn catch_up(mut self, catch_up: CatchUp) -> Self {
        self.catch_up = catch_up;
        self
    }

    /// A tick not started within `deadline` of its time is given up and recorded as missed,
    /// whatever the catch-up policy (Kubernetes' `startingDeadlineSeconds`). Default: no
    /// deadline.
    #[must_use]
    pub fn starting_deadline(mut self, deadline: Duration) -> Self {
        self.starting_deadline = Some(deadline);
        self
    }

    /// Aborts a run that takes longer than `max_hold` (its task is dropped at its next `.await`)
    /// and records it as timed out. Without it a run may hold the job's lock for as long as it
    /// takes.
    #[must_use]
    pub fn max_hold(mut self, max_hold: Duration) -> Self {
        self.max_hold = Some(max_hold);
        self
    }

    /// Keeps the job's lock taken for at least `min_hold` from its grant, however soon the run
    /// ends (ShedLock's `lockAtLeastFor`): a node whose fire comes a moment later, because its
    /// clock is behind or its scheduler was late, finds the lock still taken. The run's own
    /// tick is already recorded in ZooKeeper, so this is a second line of defence, and it
    /// delays every other node's next take of the lock by up to `min_hold`: keep it well
    /// under the period. At most an hour ([`Lock::with_min_hold`](crate::Lock::with_min_hold));
    /// a longer one is refused by [`into_job`](Self::into_job).
    #[must_use]
    pub fn min_hold(mut self, min_hold: Duration) -> Self {
        self.min_hold = Some(min_hold);
        self
    }

    /// The clock used to map fires to ticks (default [`SystemClock`]); tests inject skew here.
    #[must_use]
    pub fn clock(mut self, clock: impl Clock) -> Self {
        self.clock = Arc::new(clock);
        self
    }

    /// How long a once-per-tick fire waits for the job's lock while another node holds it
    /// (default: the gap to the next tick). A fire that waits in vain is counted as a skip; its
    /// tick is not given up: unless another node takes it, this node's next fire runs it late
    /// (see [late ticks](super#late-ticks)).
    #[must_use]
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
    pub(super) fn into_shared(self) -> Result<Arc<Shared>, SchedulerError> {
        let store = RecordStore::for_job(self.client.namespace(), &self.name);
        // The job's name labels its lock's metrics (a job name is fixed, not per key).
        let mut lock = self
            .client
            .mutex(&self.name)
            .map_err(SchedulerError::InvalidName)?
            .with_template(self.name.clone());
        if let Some(min_hold) = self.min_hold {
            lock = lock.with_min_hold(min_hold).map_err(SchedulerError::InvalidOption)?;
        }
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
                max_hold: self.max_hold,
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
            owed: StdMutex::default(),
            paying: Default::default(),
            start_paying: super::outbox::pay_later_if_owing,
        });
        // Known from the start, not only from the first fire (a day away for a daily job).
        shared.note_next_ticks();
        Ok(shared)
    }
}
