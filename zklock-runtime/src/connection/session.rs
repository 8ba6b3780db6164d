//! One ZooKeeper session and its health, as the lock engine sees it.
//!
//! The client library reconnects by itself while the session lives, and reports `Expired`
//! when it ends. Locks need one more state in between: a connection that has been down long
//! enough that the server *may* already have expired the session. From that moment a holder
//! must stop trusting its lock (CURATOR-206), so this module turns "disconnected for
//! `loss_after`" into a sticky loss count that every guard of the session watches.

use std::collections::{HashMap, HashSet};
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use futures_util::task::noop_waker_ref;
use tokio::sync::watch;
use tracing::{info, warn};
use zookeeper_client as zk;

use crate::connection::connect_string::Contact;
use crate::connection::driver::Driver;
use crate::connection::pulse::{keep_beating, Pulse};
use crate::engine::alone::Alone;

/// The pause before a request that failed on the connection is sent again.
const RETRY_PAUSE: Duration = Duration::from_millis(20);

/// The state of a client's ZooKeeper session, as far as held locks are concerned.
///
/// ```
/// use zklock_runtime::SessionStatus;
/// assert!(SessionStatus::Connected.is_connected());
/// assert!(!SessionStatus::Suspended.is_connected());
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum SessionStatus {
    /// No session yet, or a new one is being opened.
    Connecting,
    /// Connected; held locks are safe.
    Connected,
    /// The connection dropped; the session may still recover. Held locks are at risk.
    Suspended,
    /// Disconnected long enough that the server may expire the session: held locks were
    /// reported lost. The session may still reconnect; new acquisitions then work again.
    Lost,
    /// The session expired; the next acquisition opens a new one.
    Expired,
    /// The client was closed.
    Closed,
}

impl SessionStatus {
    /// Whether requests can currently reach the ensemble.
    pub fn is_connected(self) -> bool {
        self == SessionStatus::Connected
    }

    /// Whether this session is over for good.
    pub(crate) fn is_terminal(self) -> bool {
        matches!(self, SessionStatus::Expired | SessionStatus::Closed)
    }
}

/// What a guard watches: the status, plus how many times the session has been declared lost.
/// The count makes loss sticky: a guard compares it with the count at grant time, so a quick
/// Lost → Connected flap cannot slip past a receiver that was not polling at that instant.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Health {
    pub status: SessionStatus,
    pub losses: u64,
}

impl Health {
    /// Whether a hold granted when `losses_at_grant` was current is no longer trustworthy.
    pub fn invalidates(&self, losses_at_grant: u64) -> bool {
        self.losses > losses_at_grant || self.status.is_terminal()
    }
}

/// On what condition the deletion of one of our nodes is marked clean, so that waiters of a lock
/// with a lock-delay do not wait it out ([`crate::engine::lock_delay`]). The session keeps the
/// marks of its nodes until their deletions are sent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Mark {
    /// Always: the node was granted, and its deletion is a release.
    Clean,
    /// Only while this node (full path), the one ours waits for, still exists: a waiter that
    /// gives up hands its turn on cleanly only if it has not missed a vanish ahead of it.
    WhileAhead(String),
}

/// A live (or finished) ZooKeeper session shared by every contender and guard created in it.
pub(crate) struct Session {
    /// The client library's handle of the session, until the client closes it
    /// ([`close_handle`](Self::close_handle)). Requests borrow it for their round trip only,
    /// so dropping it here ends the session on the server as soon as those are answered.
    zk: RwLock<Option<Arc<zk::Client>>>,
    /// The library's view of the connection, readable after the handle is gone.
    states: zk::StateWatcher,
    /// The session timeout the server granted.
    pub timeout: Duration,
    pub id: i64,
    /// How long the connection may stay down before holds are reported lost.
    pub loss_after: Duration,
    /// The client's driver runtime ([`crate::connection::driver`]), where the session's connection, its
    /// monitor and background cleanups run, so a guard can be dropped anywhere.
    pub runtime: tokio::runtime::Handle,
    health: watch::Sender<Health>,
    /// Set when the driver runtime has shut down under the session: the client library's
    /// connection task died with it, so nothing sent on this session will ever be answered.
    runtime_gone: Arc<AtomicBool>,
    /// Contender nodes granted in this session and not yet deleted (held or handed over), so
    /// that closing the client can release them all.
    held: Mutex<HashSet<String>>,
    /// Contender nodes of locks with a lock-delay whose deletion is marked as clean, and on
    /// what condition ([`crate::engine::lock_delay`]).
    marked: Mutex<HashMap<String, Mark>>,
    /// Lock directories this session was last alone in (the listing-free fast path); cleared
    /// by the monitor when the connection drops.
    alone: Arc<Mutex<Alone>>,
    /// The ensemble's clock as last seen in this session: the commit time of a node we created,
    /// and when (by this process's monotonic clock) its answer came ([`server_now_ms`]).
    ///
    /// [`server_now_ms`]: Self::server_now_ms
    server_time: Mutex<Option<(i64, Instant)>>,
    /// The driver's beat, which tells whether this process may have been paused long enough
    /// for the session to expire unnoticed ([`crate::connection::pulse`]).
    pulse: Arc<Pulse>,
    /// Dropping the session drops this and so ends its monitor task.
    _stop: tokio::sync::oneshot::Sender<()>,
    /// Keeps the driver running while the session lives (dropped last: after the handle, so
    /// the close request can go out first).
    _driver: Arc<Driver>,
}

impl std::fmt::Debug for Session {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Session")
            .field("id", &format_args!("{:#x}", self.id))
            .finish()
    }
}

impl Session {
    /// Wraps a freshly connected client and starts the task that tracks its health. The session
    /// remembers up to `fast_path_dirs` lock directories it was alone in.
    pub fn start(
        zk: zk::Client,
        driver: Arc<Driver>,
        loss_after: Duration,
        fast_path_dirs: usize,
        contact: Arc<Contact>,
        on_change: Arc<dyn Fn(Health) + Send + Sync>,
    ) -> Arc<Session> {
        let id = zk.session_id().0;
        let (states, timeout) = (zk.state_watcher(), zk.session_timeout());
        driver.adopt(states.clone());
        let (health, _) = watch::channel(Health {
            status: SessionStatus::Connected,
            losses: 0,
        });
        let (stop, stopped) = tokio::sync::oneshot::channel();
        let runtime_gone = Arc::new(AtomicBool::new(false));
        let session = Arc::new(Session {
            zk: RwLock::new(Some(Arc::new(zk))),
            states: states.clone(),
            timeout,
            id,
            loss_after,
            runtime: driver.handle().clone(),
            health,
            runtime_gone: runtime_gone.clone(),
            held: Mutex::default(),
            marked: Mutex::default(),
            server_time: Mutex::default(),
            pulse: Arc::new(Pulse::new(timeout)),
            alone: Arc::new(Mutex::new(Alone::new(fast_path_dirs))),
            _stop: stop,
            _driver: driver,
        });
        let sender = session.health.clone();
        let alone = session.alone.clone();
        // The monitor task lives as long as the session; if its future is dropped before it
        // finished, the runtime dropped it while shutting down.
        let mut sentinel = RuntimeSentinel {
            finished: false,
            gone: runtime_gone,
            health: sender.clone(),
            on_change: on_change.clone(),
        };
        // While in doubt, the pulse asks the leader whether the session is still there: a
        // `multi` (here of one `check`) is a write, which the leader validates the session for,
        // whereas a follower answers a read from its own view, also when it is cut off from a
        // quorum that has expired the session.
        let weak = Arc::downgrade(&session);
        let beating = keep_beating(session.pulse.clone(), move || {
            let zk = weak.upgrade()?.zk().ok()?;
            Some(async move {
                let mut confirm = zk.new_multi_writer();
                confirm.add_check_version("/", -1).is_ok() && confirm.commit().await.is_ok()
            })
        });
        session.runtime.spawn(async move {
            tokio::select! {
                _ = monitor(id, states, sender, loss_after, on_change, alone, contact) => {}
                _ = beating => {}
                _ = stopped => {}
            }
            sentinel.disarm();
        });
        session
    }

    /// The client library's handle of the session, for the requests of one round trip (hold it
    /// no longer: a handle kept alive keeps the session open after the client closed it).
    /// `ClientClosed` once the client has closed the session.
    pub fn zk(&self) -> Result<Arc<zk::Client>, zk::Error> {
        self.zk
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
            .ok_or(zk::Error::ClientClosed)
    }

    /// Drops this session's handle of the client library, as the client closes: once the
    /// requests under way are answered (and no raw handle from `LockClient::zookeeper` is
    /// left), the library sends the server the close request, and the server deletes every
    /// node of the session. Resolves once the library reports the session over, or never if
    /// a raw handle keeps it open (the caller bounds the wait).
    pub async fn close_handle(&self) {
        self.alone().close(); // its pending watch requests hold handles too
        drop(self.zk.write().unwrap_or_else(|e| e.into_inner()).take());
        let mut states = self.states.clone();
        while !states.peek_state().is_terminated() {
            states.changed().await;
        }
    }

    /// What this session knows about lock directories it was alone in (never held across an
    /// await).
    pub fn alone(&self) -> std::sync::MutexGuard<'_, Alone> {
        self.alone.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Notes the commit time (`ctime`/`mtime`, ms since the epoch by the leader's clock) of a
    /// write this session just had answered.
    pub fn saw_server_time(&self, committed_ms: i64) {
        *self.server_time.lock().unwrap_or_else(|e| e.into_inner()) = Some((committed_ms, Instant::now()));
    }

    /// The ensemble's clock now, as far as this session can tell: the last commit time seen plus
    /// the time passed here since its answer came (which the answer's travel time makes a
    /// little early). `None` before the session's first write.
    // Only singleton jobs ask (feature `scheduler`).
    #[cfg_attr(not(feature = "scheduler"), allow(dead_code))]
    pub fn server_now_ms(&self) -> Option<i64> {
        let (committed, at) = (*self.server_time.lock().unwrap_or_else(|e| e.into_inner()))?;
        Some(committed.saturating_add(at.elapsed().as_millis() as i64))
    }

    /// Notes a node granted in this session.
    pub fn track(&self, node_path: &str) {
        self.held
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(node_path.to_owned());
    }

    /// Forgets a node that is being deleted. Returns how its deletion is to be marked as clean,
    /// if it is (it belongs to a lock with a lock-delay, see [`mark_deletion`](Self::mark_deletion)).
    pub fn untrack(&self, node_path: &str) -> Option<Mark> {
        self.held.lock().unwrap_or_else(|e| e.into_inner()).remove(node_path);
        self.marked.lock().unwrap_or_else(|e| e.into_inner()).remove(node_path)
    }

    /// Takes back [`mark_deletion`](Self::mark_deletion): the deletion of `node_path` will not
    /// be marked.
    pub fn unmark_deletion(&self, node_path: &str) {
        self.marked.lock().unwrap_or_else(|e| e.into_inner()).remove(node_path);
    }

    /// Marks the deletion of `node_path`, whenever it comes, as clean on the condition `mark`
    /// states ([`crate::engine::lock_delay`]); replaces an earlier mark.
    pub fn mark_deletion(&self, node_path: &str, mark: Mark) {
        self.marked
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(node_path.to_owned(), mark);
    }

    /// Ends the session for its holders as the client closes: every hold of it is reported
    /// lost from now on (for good: the loss count is sticky and the status stays `Closed`).
    /// Returns the nodes still granted, for the caller to delete. No deletion of the session's
    /// nodes is marked clean from now on: a hold the close ends was stopped, not released
    /// ([`crate::engine::lock_delay`]).
    pub fn close_holds(&self) -> Vec<String> {
        self.health.send_modify(|h| {
            h.status = SessionStatus::Closed;
            h.losses += 1;
        });
        self.marked.lock().unwrap_or_else(|e| e.into_inner()).clear();
        self.held.lock().unwrap_or_else(|e| e.into_inner()).drain().collect()
    }

    /// Whether the runtime this session was opened on has shut down.
    pub fn runtime_gone(&self) -> bool {
        self.runtime_gone.load(Ordering::SeqCst)
    }

    pub fn health(&self) -> Health {
        *self.health.borrow()
    }

    pub fn subscribe(&self) -> watch::Receiver<Health> {
        self.health.subscribe()
    }

    /// Whether a grant may trust this session without asking the server: it is connected, and
    /// this process has not been paused (or its driver starved) long enough since the server
    /// last vouched for it for the session to have expired unnoticed
    /// ([`crate::connection::pulse`]).
    pub fn vouched_for(&self) -> bool {
        self.health().status.is_connected() && self.pulse.steady()
    }

    /// Whether new work may still be started in this session.
    pub fn is_usable(&self) -> bool {
        !self.health().status.is_terminal() && !self.states.peek_state().is_terminated() && !self.runtime_gone()
    }

    /// After a request failed on the connection ([`is_transient`](crate::error::is_transient)):
    /// waits until the session is connected again (true) or over (false), then pauses briefly,
    /// because the library may report the loss before its state does. The one place requests
    /// wait out a connection loss before they are sent again.
    pub async fn wait_to_retry(&self) -> bool {
        if !self.wait_connected().await {
            return false;
        }
        tokio::time::sleep(RETRY_PAUSE).await;
        true
    }

    /// Resolves once the session is over (expired, closed, or its runtime gone).
    pub async fn ended(&self) {
        let mut rx = self.subscribe();
        let _ = rx.wait_for(|h| h.status.is_terminal()).await;
    }

    /// Waits until the session is connected again (true) or over (false).
    pub async fn wait_connected(&self) -> bool {
        let mut rx = self.subscribe();
        loop {
            let status = rx.borrow_and_update().status;
            if status.is_terminal() {
                return false;
            }
            if status.is_connected() {
                return true;
            }
            if rx.changed().await.is_err() {
                return false;
            }
        }
    }
}

/// Owned by a session's monitor task. Dropped unfinished, it means the runtime is shutting down
/// and took the client library's connection task with it: the session is over (nothing will
/// answer it, and every hold of it must be reported lost), which nobody else would notice.
struct RuntimeSentinel {
    finished: bool,
    gone: Arc<AtomicBool>,
    health: watch::Sender<Health>,
    on_change: Arc<dyn Fn(Health) + Send + Sync>,
}

impl RuntimeSentinel {
    /// The monitor finished normally: the runtime did not go away under it.
    fn disarm(&mut self) {
        self.finished = true;
    }
}

impl Drop for RuntimeSentinel {
    fn drop(&mut self) {
        if self.finished {
            return;
        }
        self.gone.store(true, Ordering::SeqCst);
        self.health.send_modify(|h| h.status = SessionStatus::Closed);
        (self.on_change)(*self.health.borrow());
    }
}

/// Follows the client library's session states and derives [`Health`].
async fn monitor(
    id: i64,
    mut states: zk::StateWatcher,
    health: watch::Sender<Health>,
    loss_after: Duration,
    on_change: Arc<dyn Fn(Health) + Send + Sync>,
    alone: Arc<Mutex<Alone>>,
    contact: Arc<Contact>,
) {
    let set = |status: SessionStatus, lost: bool| {
        health.send_if_modified(|h| {
            if h.status.is_terminal() {
                return false; // closed or expired: that is final
            }
            let next = Health {
                status,
                losses: h.losses + u64::from(lost),
            };
            let changed = *h != next;
            *h = next;
            changed
        });
        on_change(*health.borrow());
    };
    let mut state = states.state();
    loop {
        match state {
            zk::SessionState::SyncConnected | zk::SessionState::ConnectedReadOnly => {
                info!(session = format_args!("{id:#x}"), "zookeeper session connected");
                set(SessionStatus::Connected, false);
                state = states.changed().await;
            }
            zk::SessionState::Disconnected => {
                alone.lock().unwrap_or_else(|e| e.into_inner()).clear();
                warn!(
                    session = format_args!("{id:#x}"),
                    "zookeeper connection lost; held locks are at risk"
                );
                set(SessionStatus::Suspended, false);
                // While down, look at the servers now and then: what the look finds goes into
                // the errors of acquisitions that wait meanwhile.
                let looking = contact.keep_looking();
                tokio::pin!(looking);
                tokio::select! {
                    next = states.changed() => state = next,
                    _ = &mut looking => unreachable!("looks until dropped"),
                    _ = tokio::time::sleep(loss_after) => {
                        warn!(
                            session = format_args!("{id:#x}"),
                            after = ?loss_after,
                            "still disconnected; the session may expire, held locks are lost"
                        );
                        set(SessionStatus::Lost, true);
                        tokio::select! {
                            next = states.changed() => state = next,
                            _ = &mut looking => unreachable!("looks until dropped"),
                        }
                    }
                }
            }
            zk::SessionState::Expired | zk::SessionState::AuthFailed => {
                warn!(session = format_args!("{id:#x}"), ?state, "zookeeper session ended");
                set(SessionStatus::Expired, false);
                return;
            }
            zk::SessionState::Closed => {
                set(SessionStatus::Closed, false);
                return;
            }
        }
    }
}

/// A request's answer, boxed, to be awaited later.
pub(crate) type Answer<T> = Pin<Box<dyn Future<Output = T> + Send>>;

/// Polls `request` once, which puts it on the wire now (the client library sends a request on
/// the first poll of the future that builds it), and returns its answer to await: the same
/// future, or the answer itself if it already came. A request sent this way is ordered ahead of
/// anything the caller sends next on the session.
pub(crate) fn send_now<T: Send + 'static>(mut request: Answer<T>) -> Answer<T> {
    match request.as_mut().poll(&mut Context::from_waker(noop_waker_ref())) {
        Poll::Ready(answered) => Box::pin(std::future::ready(answered)),
        Poll::Pending => request,
    }
}
