//! A handle for one named lock, and the ways to acquire it.

use std::sync::Arc;
use std::time::Duration;

use crate::client::LockClient;
use crate::guard::LockGuard;
use crate::reentrancy::{HoldKey, Holder};
use crate::rules::{Leases, Readers, Rule, LEASE_NODE, MUTEX_NODE, WRITE_NODE};
use crate::{queue, LockError};

/// Which recipe a [`Lock`] follows.
///
/// ```
/// use zklock_runtime::LockKind;
/// assert_ne!(LockKind::Read, LockKind::Write);
/// let pool = LockKind::Semaphore { leases: 4 };
/// # let _ = pool;
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum LockKind {
    /// Exclusive; nodes named like Curator's `InterProcessMutex` (`_c_<uuid>-lock-<seq>`).
    Mutex,
    /// The shared side of a read/write lock (`__READ__`): waits only for earlier writers.
    Read,
    /// The exclusive side of a read/write lock (`__WRIT__`): waits for every earlier contender.
    Write,
    /// Up to `leases` holders at once (`lease-` nodes).
    Semaphore {
        /// How many holders may hold the semaphore at once.
        leases: u32,
    },
}

impl LockKind {
    pub(crate) fn rule(self) -> Arc<dyn Rule> {
        match self {
            LockKind::Mutex => Arc::new(Leases {
                leases: 1,
                node: MUTEX_NODE,
            }),
            LockKind::Write => Arc::new(Leases {
                leases: 1,
                node: WRITE_NODE,
            }),
            LockKind::Read => Arc::new(Readers),
            LockKind::Semaphore { leases } => Arc::new(Leases {
                leases,
                node: LEASE_NODE,
            }),
        }
    }
}

/// One named lock of one kind. Cheap to clone; creating it costs nothing on the server.
///
/// ```no_run
/// # async fn demo(client: zklock_runtime::LockClient) -> Result<(), zklock_runtime::LockError> {
/// use std::time::Duration;
///
/// let lock = client.mutex("inventory:42")?;
/// match lock.try_acquire().await? {
///     Some(guard) => println!("got it: {}", guard.fencing_token()),
///     None => println!("busy elsewhere"),
/// }
/// let guard = lock.acquire_timeout(Duration::from_secs(5)).await?;
/// # drop(guard); Ok(()) }
/// ```
#[derive(Clone)]
pub struct Lock {
    pub(crate) client: LockClient,
    pub(crate) name: Arc<str>,
    pub(crate) dir: Arc<str>,
    pub(crate) kind: LockKind,
    pub(crate) rule: Arc<dyn Rule>,
}

impl std::fmt::Debug for Lock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Lock")
            .field("name", &self.name)
            .field("dir", &self.dir)
            .field("kind", &self.kind)
            .finish()
    }
}

impl Lock {
    pub(crate) fn new(client: LockClient, name: &str, kind: LockKind) -> Lock {
        let dir = format!("{}/{}", client.namespace(), name);
        Lock {
            client,
            name: name.into(),
            dir: dir.into(),
            kind,
            rule: kind.rule(),
        }
    }

    /// The lock name as given.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The lock directory in ZooKeeper (`<namespace>/<name>`).
    pub fn path(&self) -> &str {
        &self.dir
    }

    /// The recipe this lock follows.
    pub fn kind(&self) -> LockKind {
        self.kind
    }

    /// Waits, without a bound, until the lock is granted.
    ///
    /// Fails early only on errors a wait cannot cure: no ZooKeeper session can be opened
    /// within the client's connect timeout, or the server refuses the request.
    ///
    /// Cancel safe: dropping the future at any point leaves no contender node behind once the
    /// background cleanup has run (see [`LockClient::flush`](crate::LockClient::flush)).
    pub async fn acquire(&self) -> Result<LockGuard, LockError> {
        queue::acquire(self, None).await
    }

    /// Waits at most `timeout` for the lock; [`LockError::Timeout`] after that.
    ///
    /// `Duration::ZERO` tries once: one create-and-list round trip, no waiting on other
    /// holders. If the ensemble is unreachable the error is [`LockError::Connection`], given
    /// within `timeout` (or within 2 s for very short timeouts, which still need one round
    /// trip). Cancel safe, like [`acquire`](Self::acquire).
    pub async fn acquire_timeout(&self, timeout: Duration) -> Result<LockGuard, LockError> {
        queue::acquire(self, Some(timeout)).await
    }

    /// Tries once: `Ok(None)` if the lock is held elsewhere.
    pub async fn try_acquire(&self) -> Result<Option<LockGuard>, LockError> {
        match queue::acquire(self, Some(Duration::ZERO)).await {
            Ok(guard) => Ok(Some(guard)),
            Err(LockError::Timeout { .. }) => Ok(None),
            Err(err) => Err(err),
        }
    }

    /// The registry keys under which the current holder may already hold this lock; the first
    /// is where a new hold is registered. Semaphore leases are never reentrant.
    pub(crate) fn hold_keys(&self) -> Vec<HoldKey> {
        let holder = Holder::current();
        let key = |kind| HoldKey {
            dir: self.dir.to_string(),
            kind,
            holder,
        };
        match self.kind {
            LockKind::Semaphore { .. } => Vec::new(),
            // A writer may also read (as in Curator's read/write lock).
            LockKind::Read => vec![key(LockKind::Read), key(LockKind::Write)],
            kind => vec![key(kind)],
        }
    }
}
