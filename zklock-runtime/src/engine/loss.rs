//! The loss side of a hold: the signal that tells work under a lock that the lock can no
//! longer be trusted ([`LossSignal`]) and why ([`loss_reason`], [`deleted_reason`]). What work
//! does then is [`crate::engine::supervise`]'s; the hold itself and its guard are in
//! [`crate::engine::guard`].

use std::sync::Arc;

use tokio::sync::watch;

use crate::connection::session::Health;
use crate::engine::own_node::NodeState;
use crate::error::LockError;

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

    /// Whether nothing has been told to this signal since it was made (or since the signal it
    /// was cloned from was made): no change of the session's health, nothing learned of the
    /// node. Two atomic reads, no lock; what [`is_lost`](Self::is_lost) answered when the
    /// signal was made still holds while this is true.
    #[inline]
    pub(crate) fn unchanged(&self) -> bool {
        // A closed channel (`Err`) counts as a change.
        let quiet = |changed: Result<bool, watch::error::RecvError>| matches!(changed, Ok(false));
        quiet(self.rx.has_changed()) && self.node.as_ref().is_none_or(|n| quiet(n.rx.has_changed()))
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
    /// let loss = guard.loss_signal();
    /// let err = loss.lost().await; // waits for as long as the hold is sound
    /// eprintln!("{err}");
    /// # Ok(()) }
    /// ```
    pub async fn lost(&self) -> LockError {
        // Waits on a copy: the signal's own receivers stay as they are, so it can be shared and
        // asked again (and, like a guard's `lost`, only needs `&self`).
        self.clone().wait_lost().await
    }

    /// [`lost`](Self::lost), on receivers of its own.
    async fn wait_lost(&mut self) -> LockError {
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
