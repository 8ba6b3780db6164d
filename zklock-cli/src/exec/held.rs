//! What CMD runs under: a lock guard or a leadership, seen through one face.

use zklock_runtime::{FencingToken, Leadership, LockError, LockGuard};

/// What CMD runs under: a grant with a fencing token and a node, that can be lost and is
/// given up once CMD has exited. A lock guard (a mutex, or a semaphore's lease), or the
/// leadership of an election group.
pub(crate) enum Held {
    Lock(LockGuard),
    Leader(Leadership),
}

impl Held {
    pub(crate) fn fencing_token(&self) -> FencingToken {
        match self {
            Held::Lock(guard) => guard.fencing_token(),
            Held::Leader(leadership) => leadership.fencing_token(),
        }
    }

    pub(crate) fn node_path(&self) -> &str {
        match self {
            Held::Lock(guard) => guard.node_path(),
            Held::Leader(leadership) => leadership.node_path(),
        }
    }

    /// The participant id a leader joined its group as; `None` for a lock.
    pub(crate) fn participant_id(&self) -> Option<&str> {
        match self {
            Held::Lock(_) => None,
            Held::Leader(leadership) => Some(leadership.participant_id()),
        }
    }

    pub(crate) fn is_lost(&self) -> bool {
        match self {
            Held::Lock(guard) => guard.is_lost(),
            Held::Leader(leadership) => !leadership.is_leader(),
        }
    }

    /// Resolves once the grant can no longer be trusted; pending otherwise.
    pub(crate) async fn lost(&self) -> LockError {
        match self {
            Held::Lock(guard) => guard.lost().await,
            Held::Leader(leadership) => leadership.lost().await,
        }
    }

    /// Resolves once another process asks for the lock (revocation); pending otherwise, and
    /// always for a leader (an election group cannot be revoked).
    pub(crate) async fn revoked(&self) {
        match self {
            Held::Lock(guard) => guard.revoked().await,
            Held::Leader(_) => std::future::pending().await,
        }
    }

    /// Gives the grant up and waits for the outcome.
    pub(crate) async fn release(self) -> Result<(), LockError> {
        match self {
            Held::Lock(guard) => guard.release().await,
            Held::Leader(leadership) => leadership.release().await,
        }
    }
}
