//! One run of a singleton job: the user's closure in its own task, raced against the loss of
//! the job's lock and the job's `max_hold`.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use tracing::{debug, warn};

use super::history::Outcome;
use crate::engine::loss::LossSignal;
use crate::engine::supervise::OnLost;
use crate::engine::token::FencingToken;

/// The boxed user closure: builds the run's future for one tick.
pub(crate) type RunFn = Box<dyn FnMut(JobRun) -> Pin<Box<dyn Future<Output = Result<(), String>> + Send>> + Send>;

/// What a run of a singleton job is told about itself.
///
/// ```
/// # use zklock_runtime::scheduler::JobRun;
/// async fn report(run: JobRun) -> Result<(), std::io::Error> {
///     println!("{} for tick {:?}, token {}", run.job(), run.tick(), run.fencing_token());
///     Ok(())
/// }
/// ```
#[derive(Debug, Clone)]
pub struct JobRun {
    pub(crate) job: Arc<str>,
    pub(crate) tick: SystemTime,
    pub(crate) triggered: bool,
    pub(crate) token: FencingToken,
    pub(crate) loss: LossSignal,
}

impl JobRun {
    /// The job name.
    pub fn job(&self) -> &str {
        &self.job
    }

    /// The scheduled time this run is for; for a run an operator triggered
    /// ([`triggered`](Self::triggered)), the time the run started.
    pub fn tick(&self) -> SystemTime {
        self.tick
    }

    /// Whether an operator asked for this run ([`trigger_job`](super::trigger_job), `zklock
    /// jobs trigger`) rather than the schedule.
    pub fn triggered(&self) -> bool {
        self.triggered
    }

    /// The fencing token of the job's lock for this run: pass it to resources that must reject
    /// a run whose node has since lost the lock.
    pub fn fencing_token(&self) -> FencingToken {
        self.token
    }

    /// Resolves when this run's lock is lost; see [`OnLost`] for what the adapter does then.
    pub fn loss_signal(&self) -> LossSignal {
        self.loss.clone()
    }
}

/// How a run ended, as far as this node can tell.
pub(crate) struct Ended {
    pub outcome: Outcome,
    /// The error's text, for a failed, panicked or timed-out run.
    pub error: Option<String>,
    pub started: SystemTime,
    pub took: Duration,
}

/// What a run needs to know besides the closure.
pub(crate) struct RunLimits {
    pub on_lost: OnLost,
    pub max_hold: Option<Duration>,
}

/// Runs `make(run)` in its own task, racing it against `lost` (the job's lock lost), `limits.max_hold`
/// and `replaced` (a later tick asking for the run to make way, [`Policy::Replace`]). `what`
/// names the run in logs.
///
/// [`Policy::Replace`]: super::Policy::Replace
pub(crate) async fn execute(
    make: &std::sync::Mutex<RunFn>,
    run: JobRun,
    lost: impl Future<Output = crate::error::LockError>,
    limits: &RunLimits,
    replaced: impl Future<Output = ()>,
    what: &str,
) -> Ended {
    let job = run.job.clone();
    let started = SystemTime::now();
    let clock = Instant::now();
    let future = {
        let mut make = make.lock().unwrap_or_else(|e| e.into_inner());
        (*make)(run)
    };
    let mut task = tokio::spawn(future);
    let ended = |outcome: Outcome, error: Option<String>| Ended {
        outcome,
        error,
        started,
        took: clock.elapsed(),
    };
    let finished = |joined: Result<Result<(), String>, tokio::task::JoinError>| match joined {
        Ok(Ok(())) => (Outcome::Ok, None),
        Ok(Err(reason)) => (Outcome::Failed, Some(reason)),
        Err(join) if join.is_panic() => (Outcome::Panicked, Some(panic_text(join.into_panic()))),
        Err(_) => (Outcome::Failed, Some("the run was cancelled".into())),
    };
    let timeout = async {
        match limits.max_hold {
            Some(max) => tokio::time::sleep(max).await,
            None => std::future::pending().await,
        }
    };
    let (outcome, error) = tokio::select! {
        joined = &mut task => finished(joined),
        () = replaced => {
            task.abort();
            let _ = task.await;
            warn!(target: "zklock::scheduler", job = %job, run = what, "a later tick replaces the run; aborted");
            (Outcome::Replaced, Some("aborted: a later tick replaced it".to_owned()))
        }
        () = timeout => {
            task.abort();
            let _ = task.await;
            let max = limits.max_hold.unwrap_or_default();
            warn!(target: "zklock::scheduler", job = %job, run = what, max_hold = ?max, "the run outlasted max_hold; aborted");
            (Outcome::TimedOut, Some(format!("aborted after max_hold {max:?}")))
        }
        err = lost => match limits.on_lost {
            OnLost::Abort => {
                task.abort();
                let _ = task.await;
                warn!(target: "zklock::scheduler", job = %job, run = what, error = %err, "lock lost during the run; run cancelled");
                (Outcome::Lost, Some(err.to_string()))
            }
            OnLost::Continue => {
                warn!(target: "zklock::scheduler", job = %job, run = what, error = %err, "lock lost during the run; letting it finish");
                let (outcome, error) = finished(task.await);
                if outcome != Outcome::Ok {
                    warn!(target: "zklock::scheduler", job = %job, run = what, error = error.as_deref().unwrap_or(""), "run failed");
                }
                // Lost, since part of it ran without the lock; the text says how it ended.
                let then = match error {
                    Some(error) => format!("{outcome:?}: {error}"),
                    None => format!("{outcome:?}"),
                };
                (Outcome::Lost, Some(format!("{err}; the run went on and ended {then}")))
            }
        },
    };
    match outcome {
        Outcome::Ok => debug!(target: "zklock::scheduler", job = %job, run = what, "run finished"),
        Outcome::Failed | Outcome::Panicked => {
            warn!(target: "zklock::scheduler", job = %job, run = what, reason = error.as_deref().unwrap_or(""), "run failed")
        }
        _ => {}
    }
    ended(outcome, error)
}

/// The text a panic was raised with, when it has one.
fn panic_text(payload: Box<dyn std::any::Any + Send>) -> String {
    match payload.downcast::<String>() {
        Ok(text) => format!("panicked: {text}"),
        Err(payload) => match payload.downcast::<&'static str>() {
            Ok(text) => format!("panicked: {text}"),
            Err(_) => "panicked".to_owned(),
        },
    }
}
