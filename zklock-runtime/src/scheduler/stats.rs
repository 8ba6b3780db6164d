//! What one node did with one singleton job: counters readable while the job runs.

use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::SystemTime;

use super::history::Outcome;
use super::ticks::tick_time;

const NONE: i64 = i64::MIN;

#[derive(Debug)]
struct Counters {
    job: String,
    /// The job name as a metrics label (shared, so exporting clones a pointer).
    #[cfg_attr(not(feature = "metrics"), allow(dead_code))]
    label: Arc<str>,
    runs: AtomicU64,
    skips: AtomicU64,
    failures: AtomicU64,
    lost: AtomicU64,
    missed: AtomicU64,
    timed_out: AtomicU64,
    run_ms_total: AtomicU64,
    in_flight: AtomicU64,
    clock_skew_ms: AtomicI64,
    last_tick: AtomicI64,
    last_recorded_tick: AtomicI64,
}

/// Live counters of one singleton job on this node; cheap to clone, readable at any time.
///
/// Returned by [`SingletonJob::stats`](super::SingletonJob::stats) and
/// [`JobSchedulerExt::add_singleton`](super::JobSchedulerExt::add_singleton). Every change is
/// also emitted as a `tracing` event with target `zklock::scheduler`.
///
/// ```
/// # fn demo(job: &zklock_runtime::scheduler::SingletonJob) {
/// let stats = job.stats();
/// let s = stats.snapshot();
/// println!("{}: {} runs, {} skips, {} failures, {} lost", s.job, s.runs, s.skips, s.failures, s.lost);
/// # }
/// ```
#[derive(Debug, Clone)]
pub struct JobStats {
    inner: Arc<Counters>,
}

/// A copy of a job's counters at one moment.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct StatsSnapshot {
    /// The job name.
    pub job: String,
    /// Runs started on this node.
    pub runs: u64,
    /// Fires on this node that ran nothing (tick already taken, job busy elsewhere).
    pub skips: u64,
    /// Runs on this node that returned an error, panicked or timed out, and fires that could
    /// not decide (ZooKeeper unreachable, unreadable tick record).
    pub failures: u64,
    /// Runs on this node aborted for outlasting `max_hold`.
    pub timed_out: u64,
    /// Runs on this node whose lock was lost while they ran, and ticks this node took whose
    /// claim may have been applied but could not be confirmed.
    pub lost: u64,
    /// Ticks this node gave up without running them anywhere: more late ticks than the catch-up
    /// bound allows (see [late ticks](super#late-ticks)).
    pub missed: u64,
    /// The scheduled tick of the latest run started on this node.
    pub last_tick: Option<SystemTime>,
    /// The latest tick this node saw recorded as taken in ZooKeeper (once-per-tick policy).
    pub last_recorded_tick: Option<SystemTime>,
}

impl JobStats {
    pub(crate) fn new(job: &str) -> JobStats {
        let stats = JobStats {
            inner: Arc::new(Counters {
                job: job.to_owned(),
                label: Arc::from(job),
                runs: AtomicU64::new(0),
                skips: AtomicU64::new(0),
                failures: AtomicU64::new(0),
                lost: AtomicU64::new(0),
                missed: AtomicU64::new(0),
                timed_out: AtomicU64::new(0),
                run_ms_total: AtomicU64::new(0),
                in_flight: AtomicU64::new(0),
                clock_skew_ms: AtomicI64::new(NONE),
                last_tick: AtomicI64::new(NONE),
                last_recorded_tick: AtomicI64::new(NONE),
            }),
        };
        #[cfg(feature = "metrics")]
        register(&stats.inner.label);
        stats
    }

    /// The job name.
    pub fn job(&self) -> &str {
        &self.inner.job
    }

    /// Runs started on this node.
    pub fn runs(&self) -> u64 {
        self.inner.runs.load(Ordering::Relaxed)
    }

    /// Fires on this node that ran nothing.
    pub fn skips(&self) -> u64 {
        self.inner.skips.load(Ordering::Relaxed)
    }

    /// Failed runs and undecidable fires on this node.
    pub fn failures(&self) -> u64 {
        self.inner.failures.load(Ordering::Relaxed)
    }

    /// Runs on this node whose lock was lost while they ran, and claims whose outcome this
    /// node could not learn.
    pub fn lost(&self) -> u64 {
        self.inner.lost.load(Ordering::Relaxed)
    }

    /// Ticks this node gave up: they run nowhere (see [late ticks](super#late-ticks)).
    pub fn missed(&self) -> u64 {
        self.inner.missed.load(Ordering::Relaxed)
    }

    /// Runs on this node aborted for outlasting the job's `max_hold` (also counted in
    /// [`failures`](Self::failures)).
    pub fn timed_out(&self) -> u64 {
        self.inner.timed_out.load(Ordering::Relaxed)
    }

    /// The time runs on this node took, in total, in milliseconds (lost runs not included).
    pub fn run_ms_total(&self) -> u64 {
        self.inner.run_ms_total.load(Ordering::Relaxed)
    }

    /// The scheduled tick of the latest run started on this node.
    pub fn last_tick(&self) -> Option<SystemTime> {
        load_tick(&self.inner.last_tick)
    }

    /// The latest tick this node saw recorded in ZooKeeper.
    pub fn last_recorded_tick(&self) -> Option<SystemTime> {
        load_tick(&self.inner.last_recorded_tick)
    }

    /// All counters at once.
    pub fn snapshot(&self) -> StatsSnapshot {
        StatsSnapshot {
            job: self.inner.job.clone(),
            runs: self.runs(),
            skips: self.skips(),
            failures: self.failures(),
            lost: self.lost(),
            missed: self.missed(),
            timed_out: self.inner.timed_out.load(Ordering::Relaxed),
            last_tick: self.last_tick(),
            last_recorded_tick: self.last_recorded_tick(),
        }
    }

    /// Fires of this job on this node that have started and not yet finished (deciding,
    /// waiting for the lock, or running). After the scheduler is shut down, a fire already
    /// under way still finishes: wait for this to reach 0 before reading final counts.
    ///
    /// ```no_run
    /// # async fn demo(mut scheduler: zklock_runtime::scheduler::tokio_cron_scheduler::JobScheduler, stats: zklock_runtime::scheduler::JobStats)
    /// # -> Result<(), Box<dyn std::error::Error>> {
    /// scheduler.shutdown().await?;
    /// while stats.fires_in_flight() > 0 {
    ///     tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    /// }
    /// println!("final: {} runs", stats.runs());
    /// # Ok(()) }
    /// ```
    pub fn fires_in_flight(&self) -> u64 {
        self.inner.in_flight.load(Ordering::SeqCst)
    }

    /// How far ahead of ZooKeeper's clock (negative: behind) this node's clock was at the last
    /// tick it took, in milliseconds, measured against the ensemble's commit time of the claim
    /// (so it includes that write's round trip). `None` before the first claim.
    ///
    /// ```no_run
    /// # fn demo(stats: zklock_runtime::scheduler::JobStats) {
    /// if let Some(skew) = stats.clock_skew_ms().filter(|ms| ms.abs() > 1_000) {
    ///     eprintln!("this node's clock is {skew} ms off ZooKeeper's: ticks may run late");
    /// }
    /// # }
    /// ```
    pub fn clock_skew_ms(&self) -> Option<i64> {
        match self.inner.clock_skew_ms.load(Ordering::SeqCst) {
            NONE => None,
            skew => Some(skew),
        }
    }

    pub(crate) fn saw_clock_skew(&self, skew_ms: i64) {
        self.inner.clock_skew_ms.store(skew_ms, Ordering::SeqCst);
    }

    /// Counts a fire as in flight until the returned value drops (also when the fire is
    /// cancelled).
    pub(crate) fn fire_started(&self) -> InFlight {
        self.inner.in_flight.fetch_add(1, Ordering::SeqCst);
        InFlight(self.inner.clone())
    }

    /// A run started: for `tick`, or on request (`None`). It counts as in progress in the
    /// exported gauges until the returned value drops.
    pub(crate) fn ran(&self, tick: Option<i64>) -> Running {
        self.inner.runs.fetch_add(1, Ordering::Relaxed);
        if let Some(tick) = tick {
            self.inner.last_tick.fetch_max(tick, Ordering::Relaxed);
        }
        #[cfg(feature = "metrics")]
        {
            let now = SystemTime::now();
            let job = self.label();
            metrics::gauge!("zklock_job_runs_in_progress", "job_name" => job.clone()).increment(1.0);
            metrics::gauge!("zklock_job_last_run_timestamp_seconds", "job_name" => job.clone()).set(unix_seconds(now));
            if let Some(tick) = tick {
                let late = now.duration_since(tick_time(tick)).unwrap_or_default();
                metrics::histogram!("zklock_job_start_delay_seconds", "job_name" => job).record(late.as_secs_f64());
            }
        }
        Running(self.clone())
    }

    /// The job's next tick and the one after it, as this node sees them at a beat.
    pub(crate) fn saw_next_ticks(&self, next: i64, after: Option<i64>) {
        #[cfg(feature = "metrics")]
        {
            let job = self.label();
            metrics::gauge!("zklock_job_next_tick_timestamp_seconds", "job_name" => job.clone())
                .set(next as f64 / 1000.0);
            if let Some(after) = after {
                metrics::gauge!("zklock_job_period_seconds", "job_name" => job).set((after - next) as f64 / 1000.0);
            }
        }
        #[cfg(not(feature = "metrics"))]
        let _ = (next, after);
    }

    /// Whether the job is paused, as this node last read its record.
    pub(crate) fn saw_paused(&self, paused: bool) {
        #[cfg(feature = "metrics")]
        metrics::gauge!("zklock_job_paused", "job_name" => self.label()).set(if paused { 1.0 } else { 0.0 });
        #[cfg(not(feature = "metrics"))]
        let _ = paused;
    }

    pub(crate) fn run_timed_out(&self) {
        self.inner.failures.fetch_add(1, Ordering::Relaxed);
        self.inner.timed_out.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn skipped(&self) {
        self.inner.skips.fetch_add(1, Ordering::Relaxed);
        #[cfg(feature = "metrics")]
        metrics::counter!("zklock_job_skips_total", "job_name" => self.label()).increment(1);
    }

    /// A run ended with `outcome` after `took`: exported per job and outcome.
    pub(crate) fn ended(&self, outcome: &Outcome, took: std::time::Duration) {
        if *outcome != Outcome::Lost {
            self.inner
                .run_ms_total
                .fetch_add(took.as_millis() as u64, Ordering::Relaxed);
        }
        #[cfg(feature = "metrics")]
        {
            let name = outcome_label(outcome);
            metrics::counter!("zklock_job_runs_total", "job_name" => self.label(), "outcome" => name).increment(1);
            metrics::histogram!("zklock_job_run_seconds", "job_name" => self.label()).record(took.as_secs_f64());
            if *outcome == Outcome::Ok {
                metrics::gauge!("zklock_job_last_success_timestamp_seconds", "job_name" => self.label())
                    .set(unix_seconds(SystemTime::now()));
            }
        }
    }

    #[cfg(feature = "metrics")]
    fn label(&self) -> metrics::SharedString {
        metrics::SharedString::from(self.inner.label.clone())
    }

    pub(crate) fn failed(&self) {
        self.inner.failures.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn lost_lock(&self) {
        self.inner.lost.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn gave_up(&self, ticks: u64) {
        self.inner.missed.fetch_add(ticks, Ordering::Relaxed);
        #[cfg(feature = "metrics")]
        metrics::counter!("zklock_job_missed_total", "job_name" => self.label()).increment(ticks);
    }

    pub(crate) fn saw_recorded(&self, tick: i64) {
        self.inner.last_recorded_tick.fetch_max(tick, Ordering::Relaxed);
    }
}

fn load_tick(cell: &AtomicI64) -> Option<SystemTime> {
    match cell.load(Ordering::Relaxed) {
        NONE => None,
        tick => Some(tick_time(tick)),
    }
}

/// A run in progress on this node, counted in `zklock_job_runs_in_progress` until it drops
/// (also when the run is cancelled).
#[must_use]
pub(crate) struct Running(#[cfg_attr(not(feature = "metrics"), allow(dead_code))] JobStats);

#[cfg(feature = "metrics")]
impl Drop for Running {
    fn drop(&mut self) {
        metrics::gauge!("zklock_job_runs_in_progress", "job_name" => self.0.label()).decrement(1.0);
    }
}

#[cfg(feature = "metrics")]
fn unix_seconds(at: SystemTime) -> f64 {
    at.duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}

/// The `outcome` label of a run: the outcome as the history writes it (`timed_out`, …).
#[cfg(feature = "metrics")]
fn outcome_label(outcome: &Outcome) -> String {
    serde_json::to_value(outcome)
        .ok()
        .and_then(|v| v.as_str().map(str::to_owned))
        .unwrap_or_else(|| "other".to_owned())
}

/// Registers every series of `job` at 0, so rates and alerts have them before the first event.
#[cfg(feature = "metrics")]
fn register(job: &Arc<str>) {
    let job = || metrics::SharedString::from(job.clone());
    let runs = [
        Outcome::Ok,
        Outcome::Failed,
        Outcome::Panicked,
        Outcome::TimedOut,
        Outcome::Lost,
        Outcome::Replaced,
    ];
    for outcome in &runs {
        metrics::counter!("zklock_job_runs_total", "job_name" => job(), "outcome" => outcome_label(outcome))
            .increment(0);
    }
    metrics::counter!("zklock_job_skips_total", "job_name" => job()).increment(0);
    metrics::counter!("zklock_job_missed_total", "job_name" => job()).increment(0);
    for gauge in [
        "zklock_job_runs_in_progress",
        "zklock_job_last_run_timestamp_seconds",
        "zklock_job_last_success_timestamp_seconds",
        "zklock_job_paused",
    ] {
        metrics::gauge!(gauge, "job_name" => job()).increment(0.0);
    }
}

/// A fire or a run, counted in [`JobStats::fires_in_flight`] until it
/// drops.
#[derive(Debug)]
pub(crate) struct InFlight(Arc<Counters>);

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.in_flight.fetch_sub(1, Ordering::SeqCst);
    }
}
