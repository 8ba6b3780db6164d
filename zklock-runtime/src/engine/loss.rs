//! The loss side of a hold: the signal that tells work under a lock that the lock can no
//! longer be trusted ([`LossSignal`]), why ([`loss_reason`], [`deleted_reason`]), what the work
//! does then ([`OnLost`]), and the one place that stops work under a hold early
//! ([`supervise`]: loss, revocation, `max_hold`). The hold itself and its guard are in
//! [`crate::engine::guard`].

use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::watch;
use tracing::warn;

use crate::connection::session::Health;
use crate::engine::own_node::NodeState;
use crate::error::LockError;
use crate::ops::gauges::Deadline;
use crate::ops::metrics::{Event, Labels, Metrics};

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
    /// [`LossSignal`] itself.
    Continue,
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

/// Why a hold whose node was deleted by someone else is lost.
pub(crate) fn deleted_reason(node_path: &str) -> String {
    format!(
        "its node {node_path} was deleted by someone else while it was held (an operator or a tool, not this holder); \
         the next contender may already hold the lock"
    )
}

pub(crate) fn loss_reason(health: &Health) -> &'static str {
    if health.status.is_terminal() {
        "the ZooKeeper session ended"
    } else {
        "the connection to ZooKeeper was down long enough that the session may expire"
    }
}

/// Watches one hold for loss, apart from its guard. Clone it into whatever must stop when the
/// lock is lost.
///
/// ```no_run
/// # async fn demo(client: zklock_runtime::LockClient) -> Result<(), zklock_runtime::LockError> {
/// let guard = client.mutex("reports")?.acquire().await?;
/// let mut loss = guard.loss_signal();
/// tokio::spawn(async move {
///     let err = loss.lost().await;
///     eprintln!("stop writing: {err}");
/// });
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct LossSignal {
    name: String,
    rx: watch::Receiver<Health>,
    losses_at_grant: u64,
    /// The watch on the hold's node, if the signal belongs to a hold.
    node: Option<NodeSignal>,
}

/// What a [`LossSignal`] follows of a hold's node.
#[derive(Debug, Clone)]
struct NodeSignal {
    path: Arc<str>,
    rx: watch::Receiver<NodeState>,
    /// False once the watch is gone (the hold ended): its last state stays.
    open: bool,
}

impl NodeSignal {
    fn deleted(&self) -> bool {
        self.rx.borrow().deleted
    }
}

impl LossSignal {
    /// The signal of a hold named `name`, granted when its session had seen `losses_at_grant`
    /// losses, whose node `node_path` is watched through `node`.
    pub(crate) fn of_hold(
        name: &str,
        health: watch::Receiver<Health>,
        losses_at_grant: u64,
        node_path: &str,
        node: watch::Receiver<NodeState>,
    ) -> LossSignal {
        LossSignal {
            name: name.to_owned(),
            rx: health,
            losses_at_grant,
            node: Some(NodeSignal {
                path: node_path.into(),
                rx: node,
                open: true,
            }),
        }
    }

    /// A signal that never fires: for runs that hold no lock (a singleton job's runs under
    /// `Policy::Allow`) and for scopes made without a server in model tests.
    #[cfg_attr(not(any(test, feature = "scheduler")), allow(dead_code))]
    pub(crate) fn never(name: &str) -> LossSignal {
        let (_, rx) = watch::channel(Health {
            status: crate::connection::session::SessionStatus::Connected,
            losses: 0,
        });
        LossSignal {
            name: name.to_owned(),
            rx,
            losses_at_grant: 0,
            node: None,
        }
    }

    /// Whether the hold has been lost.
    pub fn is_lost(&self) -> bool {
        self.rx.borrow().invalidates(self.losses_at_grant) || self.node.as_ref().is_some_and(NodeSignal::deleted)
    }

    /// Resolves with [`LockError::Lost`] once the hold is lost; pending otherwise.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: a loss is sticky, so a later call still sees one that happened meanwhile.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn demo(client: zklock_runtime::LockClient) -> Result<(), zklock_runtime::LockError> {
    /// let guard = client.mutex("reports")?.acquire().await?;
    /// let mut loss = guard.loss_signal();
    /// let err = loss.lost().await; // waits for as long as the hold is sound
    /// eprintln!("{err}");
    /// # Ok(()) }
    /// ```
    pub async fn lost(&mut self) -> LockError {
        loop {
            let health = *self.rx.borrow_and_update();
            if health.invalidates(self.losses_at_grant) {
                return LockError::Lost {
                    name: self.name.clone(),
                    reason: loss_reason(&health).into(),
                };
            }
            if let Some(node) = self.node.as_mut() {
                if node.rx.borrow_and_update().deleted {
                    return LockError::Lost {
                        name: self.name.clone(),
                        reason: deleted_reason(&node.path),
                    };
                }
            }
            let node = self.node.as_mut();
            let node_changed = async move {
                match node {
                    Some(node) if node.open => {
                        if node.rx.changed().await.is_err() {
                            node.open = false;
                        }
                    }
                    _ => std::future::pending().await,
                }
            };
            let health = &mut self.rx;
            tokio::select! {
                changed = health.changed() => if changed.is_err() {
                    // The session is gone together with every guard of it; nothing is held.
                    std::future::pending::<()>().await;
                },
                () = node_changed => {}
            }
        }
    }
}
