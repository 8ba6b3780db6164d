//! What stops work under a hold before it ends, and the one place that stops it: a loss
//! ([`OnLost`]), a revocation request ([`OnRevoke`]) or a `max_hold` bound, together a
//! [`Supervision`]; [`supervise`] runs the work against them. The signals it waits on are the
//! hold's ([`crate::engine::loss`], [`crate::engine::guard`]).

use std::future::Future;
use std::time::{Duration, Instant};

use tracing::warn;

use crate::error::LockError;
use crate::telemetry::gauges::Deadline;
use crate::telemetry::metrics::{Event, Labels, Metrics};

/// What work running under a hold does when the hold is lost: the one loss policy of the
/// attribute (`on_lost = "abort" | "continue"`), of [`LockGuard::run`](crate::LockGuard::run)-style supervision, and of
/// singleton jobs ([`SingletonJob::on_lost`](crate::scheduler::SingletonJob::on_lost), feature
/// `scheduler`).
///
/// ```
/// use zklock_runtime::OnLost;
/// assert_eq!(OnLost::default(), OnLost::Abort);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[non_exhaustive]
pub enum OnLost {
    /// Stop the work at its next `.await` (its future is dropped, a job's task aborted) and
    /// report [`LockError::Lost`]: another holder may already be at work.
    #[default]
    Abort,
    /// Let the work run to its end and only report the loss: for work that fences its writes
    /// with the token, or watches [`current_loss_signal`](crate::current_loss_signal) or a
    /// [`LossSignal`](crate::LossSignal) itself.
    Continue,
}

/// What work running under a hold does when another process asks for the lock (revocation:
/// see [`LockGuard::revoked`](crate::LockGuard::revoked)): the attribute's
/// `on_revoke = "continue" | "abort"` and [`Supervision::on_revoke`].
///
/// ```
/// use zklock_runtime::OnRevoke;
/// assert_eq!(OnRevoke::default(), OnRevoke::Continue);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[non_exhaustive]
pub enum OnRevoke {
    /// Run on; the work may look at the request itself
    /// ([`LockGuard::is_revoked`](crate::LockGuard::is_revoked)).
    #[default]
    Continue,
    /// Stop the work at its next `.await` and report [`LockError::Revoked`]; the lock is
    /// released as its guard goes.
    Abort,
}

/// What stops work running under a hold before it ends: [`LockGuard::run_with`](crate::LockGuard::run_with)
/// and [`MultiGuard::run_with`](crate::MultiGuard::run_with) take it, and a
/// `#[distributed_lock]` function's `on_lost`, `on_revoke` and `max_hold` options are its
/// fields. The default stops the work on a loss only, as [`LockGuard::run`](crate::LockGuard::run) does.
///
/// ```
/// use std::time::Duration;
/// use zklock_runtime::{OnLost, OnRevoke, Supervision};
///
/// let strict = Supervision::default()
///     .on_revoke(OnRevoke::Abort)
///     .max_hold(Duration::from_secs(30));
/// assert_eq!(strict.on_lost, OnLost::Abort);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub struct Supervision {
    /// What a loss does to the work (default: stop it).
    pub on_lost: OnLost,
    /// What a revocation request does to the work (default: nothing).
    pub on_revoke: OnRevoke,
    /// Stop the work once the lock has been held this long, counted from the acquisition
    /// (default: no bound); [`LockError::MaxHoldExceeded`] then. For a reentrant acquisition,
    /// counted from the re-entry as the system's coarse clock reads it: a clock tick or two (a
    /// few milliseconds) early at most, never late.
    pub max_hold: Option<Duration>,
}

impl Supervision {
    /// The same, with `on_lost`.
    #[must_use]
    pub fn on_lost(mut self, on_lost: OnLost) -> Self {
        self.on_lost = on_lost;
        self
    }

    /// The same, with `on_revoke`.
    #[must_use]
    pub fn on_revoke(mut self, on_revoke: OnRevoke) -> Self {
        self.on_revoke = on_revoke;
        self
    }

    /// The same, with a `max_hold` bound.
    #[must_use]
    pub fn max_hold(mut self, max_hold: Duration) -> Self {
        self.max_hold = Some(max_hold);
        self
    }
}

/// A `max_hold` bound on work under a hold ([`Holding::max_hold`](crate::engine::guard::Holding::max_hold)).
pub(crate) struct MaxHold<'a> {
    /// The lock named in the error.
    pub name: &'a str,
    /// Where running out is counted.
    pub metrics: &'a Metrics,
    pub labels: Labels<'a>,
    /// When the guard was acquired.
    pub since: Instant,
    pub bound: Duration,
}

/// Runs `body` until it finishes, `lost` (if watched) resolves, `revoked` (if watched)
/// resolves, or `max_hold` runs out: the one place where work under a hold is stopped early
/// ([`LockGuard::run`](crate::LockGuard::run), [`LockGuard::run_for`](crate::LockGuard::run_for), their multi-lock twins and
/// `#[distributed_lock]` bodies).
///
/// Loss is checked first, so a body that finishes in the same poll as a loss counts as lost; a
/// revocation next (the body is stopped as asked); a body that finishes in the same poll as its
/// bound runs out counts as finished (the bound is about hung work, not about safety).
pub(crate) async fn supervise<T>(
    body: impl Future<Output = T>,
    lost: Option<impl Future<Output = LockError>>,
    revoked: Option<impl Future<Output = LockError>>,
    max_hold: Option<MaxHold<'_>>,
) -> Result<T, LockError> {
    let lost = async {
        match lost {
            Some(lost) => lost.await,
            None => std::future::pending().await,
        }
    };
    let revoked = async {
        match revoked {
            Some(revoked) => revoked.await,
            None => std::future::pending().await,
        }
    };
    // A bound too far out to be represented (`Duration::MAX`) never runs out.
    let end = max_hold.as_ref().and_then(|b| b.since.checked_add(b.bound));
    let _deadline = max_hold
        .as_ref()
        .zip(end)
        .map(|(bound, end)| Deadline::start(bound.labels, end));
    let over = async {
        match end {
            Some(end) => tokio::time::sleep_until(end.into()).await,
            None => std::future::pending().await,
        }
    };
    tokio::select! {
        biased;
        err = lost => Err(err),
        err = revoked => {
            warn!(%err, "revocation requested; stopped the work under the lock");
            Err(err)
        }
        out = body => Ok(out),
        () = over => {
            let bound = max_hold.expect("the bound ran out, so there is one");
            bound.metrics.record(Event::MaxHoldExceeded, bound.labels);
            warn!(lock = %bound.name, max_hold_ms = bound.bound.as_millis() as u64, "work held the lock past max_hold; stopped it");
            Err(LockError::MaxHoldExceeded {
                name: bound.name.to_string(),
                max_hold: bound.bound,
            })
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::{OnLost, OnRevoke, Supervision};

    /// Each builder method sets its field and leaves the others.
    #[test]
    fn each_option_sets_its_own_field() {
        let default = Supervision::default();
        assert_eq!(
            (default.on_lost, default.on_revoke, default.max_hold),
            (OnLost::Abort, OnRevoke::Continue, None)
        );
        let set = default
            .on_lost(OnLost::Continue)
            .on_revoke(OnRevoke::Abort)
            .max_hold(Duration::from_secs(3));
        assert_eq!(
            (set.on_lost, set.on_revoke, set.max_hold),
            (OnLost::Continue, OnRevoke::Abort, Some(Duration::from_secs(3)))
        );
        assert_eq!(Supervision::default().on_revoke(OnRevoke::Abort).on_lost, OnLost::Abort);
    }
}
