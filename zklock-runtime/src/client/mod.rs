//! The lock client: the handle services keep ([`LockClient`]), what its clones share, its
//! status, and the process-wide default client. How a client is configured is in
//! [`builder`], the settings it keeps in [`config`], and how it opens and hands out its
//! ZooKeeper session in [`sessions`].

pub(crate) mod builder;
pub(crate) mod config;
mod sessions;

use std::sync::atomic::AtomicBool;
use std::sync::{Arc, OnceLock, RwLock as StdRwLock};
use std::time::Duration;

use tokio::sync::{watch, Mutex as AsyncMutex};
use tracing::{info, warn};
use zookeeper_client as zk;

use crate::client::config::Config;
use crate::connection::connect_string;
use crate::connection::driver::Driver;
use crate::connection::session::{Session, SessionStatus};
use crate::engine::cleanup::{delete_node, Cleanup};
use crate::engine::guard::ClientId;
use crate::engine::local_queue::Gates;
use crate::error::LockError;
use crate::telemetry::gauges::SessionGauge;
use crate::telemetry::metrics::{Metrics, MetricsSnapshot};

/// A handle to a ZooKeeper ensemble for taking locks. Cheap to clone; clones share one session.
///
/// The client owns one ZooKeeper session at a time. While the session lives, the underlying
/// library reconnects across server failures (including leader failover) and held locks stay
/// held. When the session expires, held locks are reported lost and the next acquisition opens
/// a new session transparently.
///
/// # Runtimes
///
/// A client works from any tokio runtime, and keeps working after the runtime it was made in
/// has ended: its sessions (the client library's connection, the engine's session monitor and
/// background releases) run on a small runtime on a thread of the client's own, started with
/// its first session and stopped once the client and everything of it (guards, sessions) is
/// gone. So one client can serve a whole test suite of `#[tokio::test]`s, each of which has a
/// runtime of its own, or a process whose runtimes come and go; no runtime needs to run between
/// uses. The price is one mostly idle thread per client, and a hop to that thread and back
/// for each request; a service whose runtime lives as long as the client can have the
/// sessions run there instead, with [`LockClientBuilder::runtime`](builder::LockClientBuilder::runtime). The futures you await
/// (acquire, release, …) run on your runtime and use its timers; a runtime with the time
/// driver enabled is needed there, as for any tokio timer.
///
/// ```no_run
/// # async fn demo() -> Result<(), zklock_runtime::LockError> {
/// use tokio::sync::OnceCell;
/// use zklock_runtime::LockClient;
///
/// // One client for a whole test suite (each #[tokio::test] has a runtime of its own).
/// static CLIENT: OnceCell<LockClient> = OnceCell::const_new();
/// let client = CLIENT
///     .get_or_try_init(|| LockClient::connect("127.0.0.1:2181"))
///     .await?;
/// let guard = client.mutex("orders:7")?.acquire().await?;
/// # drop(guard); Ok(()) }
/// ```
///
/// ```no_run
/// # async fn demo() -> Result<(), zklock_runtime::LockError> {
/// use std::time::Duration;
/// use zklock_runtime::LockClient;
///
/// let client = LockClient::builder("zk1:2181,zk2:2181,zk3:2181/apps/shop")
///     .session_timeout(Duration::from_secs(6))
///     .namespace("/locks")
///     .connect()
///     .await?;
/// let guard = client.mutex("orders:7")?.acquire().await?;
/// # drop(guard); Ok(()) }
/// ```
#[derive(Clone)]
pub struct LockClient {
    pub(crate) inner: Arc<ClientInner>,
}

impl std::fmt::Debug for LockClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LockClient")
            .field("connect", &self.inner.config.connect)
            .field("namespace", &self.inner.config.namespace)
            .field("status", &self.status())
            .finish()
    }
}

pub(crate) struct ClientInner {
    /// Who holds what this client holds: unique among the clients of this process, never
    /// reused (reentrancy and multi-lock de-duplication key on it).
    pub id: ClientId,
    pub config: Config,
    /// The connect string's servers, and what the last look at them found.
    pub contact: Arc<connect_string::Contact>,
    /// Why the client cannot be used any more, once it cannot (the first reason given).
    closed: OnceLock<String>,
    /// Set by the first [`LockClient::close`]: turns true once its work is done.
    closing: OnceLock<watch::Receiver<bool>>,
    /// The session new work goes to. Locked while a session is being opened, so concurrent
    /// callers share one connect attempt.
    current: AsyncMutex<Option<Arc<Session>>>,
    /// The same session, readable without awaiting.
    latest: StdRwLock<Option<Arc<Session>>>,
    status: watch::Sender<SessionStatus>,
    /// The client's place in the session gauges; moved with `status`.
    session_gauge: SessionGauge,
    /// Where this client's sessions run: a thread of its own, started with the first session,
    /// or the runtime the caller gave.
    driver: tokio::sync::OnceCell<Arc<Driver>>,
    /// Whether a session timeout cut by the server was reported (once per client).
    cut_reported: AtomicBool,
    pub metrics: Arc<Metrics>,
    pub gates: Gates,
    pub cleanup: Cleanup,
}

impl ClientInner {
    /// The client's status is now `status`: told to its watchers and to the session gauges,
    /// in one step, so both see the same order of changes.
    fn set_status(&self, status: SessionStatus) {
        self.status.send_modify(|current| {
            *current = status;
            self.session_gauge.set(status);
        });
    }
}

impl LockClient {
    /// A client of `config`, for the `servers` of its connect string; nothing connects yet.
    pub(super) fn from_config(config: Config, servers: Vec<connect_string::Server>) -> LockClient {
        let (status, _) = watch::channel(SessionStatus::Connecting);
        LockClient {
            inner: Arc::new(ClientInner {
                id: ClientId::next(),
                config,
                contact: Arc::new(connect_string::Contact::new(servers)),
                closed: OnceLock::new(),
                closing: OnceLock::new(),
                current: AsyncMutex::new(None),
                latest: StdRwLock::new(None),
                status,
                session_gauge: SessionGauge::new(),
                driver: tokio::sync::OnceCell::new(),
                cut_reported: AtomicBool::new(false),
                metrics: Arc::default(),
                gates: Gates::default(),
                cleanup: Cleanup::new(),
            }),
        }
    }
}

impl LockClient {
    /// The state of the current session.
    pub fn status(&self) -> SessionStatus {
        *self.inner.status.borrow()
    }

    /// A receiver that sees every change of [`status`](Self::status).
    pub fn watch_status(&self) -> watch::Receiver<SessionStatus> {
        self.inner.status.subscribe()
    }

    /// The holder identity this client writes into its contender nodes (see
    /// [`LockClientBuilder::identity`](builder::LockClientBuilder::identity)).
    pub fn identity(&self) -> &str {
        self.inner.config.holder.identity()
    }

    /// How long a `#[distributed_lock]` function waits for its lock when the attribute gives no
    /// `timeout` (see [`LockClientBuilder::default_timeout`](builder::LockClientBuilder::default_timeout)).
    pub fn default_timeout(&self) -> Duration {
        self.inner.config.default_timeout
    }

    /// The `max_hold` of a `#[distributed_lock]` function whose attribute gives none, if any
    /// (see [`LockClientBuilder::default_max_hold`](builder::LockClientBuilder::default_max_hold)).
    pub fn default_max_hold(&self) -> Option<Duration> {
        self.inner.config.default_max_hold
    }

    /// The session timeout the server granted for the current session, once one is open.
    ///
    /// ```no_run
    /// # async fn demo() -> Result<(), zklock_runtime::LockError> {
    /// use std::time::Duration;
    /// let client = zklock_runtime::LockClient::builder("127.0.0.1:2181")
    ///     .session_timeout(Duration::from_secs(60))
    ///     .connect()
    ///     .await?;
    /// // A server with tickTime 2 s grants at most 40 s (20 ticks).
    /// println!("granted {:?}, loss reported after {:?}", client.session_timeout(), client.loss_after());
    /// # Ok(()) }
    /// ```
    pub fn session_timeout(&self) -> Option<Duration> {
        self.latest().map(|s| s.timeout)
    }

    /// How long the connection of the current session may stay down before its holds are
    /// reported lost, as in force (see [`LockClientBuilder::loss_after`](builder::LockClientBuilder::loss_after)).
    ///
    /// ```no_run
    /// # async fn demo() -> Result<(), zklock_runtime::LockError> {
    /// use std::time::Duration;
    /// let client = zklock_runtime::LockClient::builder("127.0.0.1:2181")
    ///     .session_timeout(Duration::from_secs(10))
    ///     .loss_after(Duration::from_secs(8)) // more than half: lowered, with a warning
    ///     .connect()
    ///     .await?;
    /// let granted = client.session_timeout().unwrap();
    /// assert!(client.loss_after().unwrap() <= granted / 2);
    /// # Ok(()) }
    /// ```
    pub fn loss_after(&self) -> Option<Duration> {
        self.latest().map(|s| s.loss_after)
    }

    /// The id of the current session, once one is open.
    pub fn session_id(&self) -> Option<i64> {
        self.latest().map(|s| s.id)
    }

    /// The namespace root lock directories live under.
    pub fn namespace(&self) -> &str {
        &self.inner.config.namespace
    }

    /// Counters of what this client has done so far.
    pub fn metrics(&self) -> MetricsSnapshot {
        self.inner.metrics.snapshot(self.inner.cleanup.abandoned())
    }

    /// Waits until every release and abandoned-contender cleanup handed to the background so
    /// far has finished (deleted its node, or seen its session end).
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: the cleanups go on whether or not this is awaited.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn demo(client: zklock_runtime::LockClient) -> Result<(), zklock_runtime::LockError> {
    /// drop(client.mutex("report")?.acquire().await?); // the delete goes to the background
    /// client.flush().await; // the node is gone now
    /// # Ok(()) }
    /// ```
    pub async fn flush(&self) {
        self.inner.cleanup.flush().await
    }

    /// Closes the client: later acquisitions fail with [`LockError::Closed`]; acquisitions
    /// still waiting fail with it promptly; every lock still held through it is released and
    /// its guards report the loss ([`LockGuard::is_lost`](crate::LockGuard::is_lost),
    /// [`lost`](crate::LockGuard::lost); a `#[distributed_lock]` body running under one is
    /// stopped as on any loss); releases and cleanups already handed to the background finish
    /// ([`flush`](Self::flush)); and the ZooKeeper session is ended on the server, whatever is
    /// still alive (guards, waiters, clones of [`zookeeper`](Self::zookeeper)), so the server
    /// deletes every node of it at once instead of after the session timeout. Calling it again
    /// waits for the first call's work, if it is still going on, and does nothing more.
    ///
    /// A hold ended by the close is not a clean release: the work under it was stopped, not
    /// finished, so its node goes without the release mark and waiters of a lock with a
    /// [lock-delay](crate::Lock::with_lock_delay) wait the delay out, as after a holder that
    /// vanished.
    ///
    /// Dropping the last clone of a client (and its last guard) closes the session too, but
    /// without waiting: call `close` before a process exits, so its locks are freed at once.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: the client is closed, and the end of its session started, by the first
    /// poll; that work runs on the client's own thread whether or not this future is awaited,
    /// so dropping it only stops waiting for the work to finish.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn demo() -> Result<(), zklock_runtime::LockError> {
    /// let client = zklock_runtime::LockClient::connect("127.0.0.1:2181").await?;
    /// let guard = client.mutex("report")?.acquire().await?;
    /// guard.release().await?;
    /// client.close().await;
    /// assert!(matches!(client.mutex("report")?.acquire().await, Err(zklock_runtime::LockError::Closed { .. })));
    /// # Ok(()) }
    /// ```
    pub async fn close(&self) {
        let mut done = self.inner.closing.get_or_init(|| self.start_closing()).clone();
        // An error means the driver's runtime dropped the work: its sessions went with it.
        let _ = done.wait_for(|done| *done).await;
    }

    /// Closes the client for good and starts ending its session: the one start of
    /// [`close`](Self::close)'s work, which runs on the client's driver, so that it finishes
    /// whoever waits for it. Returns what tells when it is done.
    fn start_closing(&self) -> watch::Receiver<bool> {
        info!(connect = %self.inner.config.connect, "closing the lock client");
        self.mark_closed("it was closed with LockClient::close()");
        let (done, finished) = watch::channel(false);
        match self.inner.driver.get() {
            Some(driver) => {
                let client = self.clone();
                driver.handle().spawn(async move {
                    client.end_session().await;
                    let _ = done.send(true);
                });
            }
            // No session was ever opened; one being opened now is not handed out (`session`).
            None => {
                let _ = done.send(true);
            }
        }
        finished
    }

    /// Ends the client's session for its holders and on the server ([`close`](Self::close)).
    async fn end_session(&self) {
        // Waits for a session being opened meanwhile: it is ended too.
        let session = self.inner.current.lock().await.take();
        self.inner.latest.write().unwrap_or_else(|e| e.into_inner()).take();
        let Some(session) = session else { return };
        // Every hold of the session is lost from here on; delete the nodes still held
        // (pipelined: all requests go out before the first answer is awaited).
        let deletions: Vec<_> = session
            .close_holds()
            .into_iter()
            .map(|path| delete_node(&session, path))
            .collect();
        for deletion in deletions {
            let _ = deletion.await;
        }
        let bound = self.inner.config.connect_limit();
        let _ = tokio::time::timeout(bound, self.flush()).await;
        // Dropping the session's handle makes the client library send the close request once
        // the requests under way are answered; the server then deletes every node of the
        // session, waiters' contenders included, and holds nothing for it any more.
        if tokio::time::timeout(bound, session.close_handle()).await.is_err() {
            warn!(
                session = format_args!("{:#x}", session.id),
                "the ZooKeeper session of a closed client did not end within {bound:?} (unreachable, or \
                 a raw handle from LockClient::zookeeper() is still alive); the server ends it after \
                 the session timeout"
            );
        }
    }

    /// The raw ZooKeeper client of the live session (opening one if needed), for adapters
    /// that keep their own state next to the locks. The handle you keep holds the session
    /// open until you drop it, even past [`close`](Self::close), which otherwise ends the
    /// session at once: drop it when done.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe, like [`LockClientBuilder::connect`](builder::LockClientBuilder::connect) when a session must be opened.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn demo(client: zklock_runtime::LockClient) -> Result<(), Box<dyn std::error::Error>> {
    /// let zk = client.zookeeper().await?;
    /// let children = zk.list_children(client.namespace()).await?;
    /// println!("lock dirs: {children:?}");
    /// # Ok(()) }
    /// ```
    pub async fn zookeeper(&self) -> Result<zk::Client, LockError> {
        let zk = self
            .session(None)
            .await?
            .zk()
            .map_err(|err| LockError::zk("open a session", err))?;
        Ok(zk.as_ref().clone())
    }

    /// Makes this client the process-wide default, used by `#[distributed_lock]` without
    /// `client = …`. Replaces any earlier default.
    ///
    /// ```no_run
    /// # async fn demo() -> Result<(), zklock_runtime::LockError> {
    /// zklock_runtime::LockClient::connect("127.0.0.1:2181").await?.install_default();
    /// let client = zklock_runtime::LockClient::default_client()?;
    /// # Ok(()) }
    /// ```
    pub fn install_default(&self) {
        let slot = DEFAULT_CLIENT.get_or_init(|| StdRwLock::new(None));
        *slot.write().unwrap_or_else(|e| e.into_inner()) = Some(self.clone());
    }

    /// The client installed with [`install_default`](Self::install_default).
    pub fn default_client() -> Result<LockClient, LockError> {
        DEFAULT_CLIENT
            .get()
            .and_then(|slot| slot.read().unwrap_or_else(|e| e.into_inner()).clone())
            .ok_or_else(|| {
                LockError::invalid_config(
                    "no default lock client: call LockClient::install_default() at start-up, \
                     or pass `client = …` to #[distributed_lock]",
                )
            })
    }
}

/// The client [`LockClient::install_default`] installed, for `#[distributed_lock]` without
/// `client = …`.
static DEFAULT_CLIENT: OnceLock<StdRwLock<Option<LockClient>>> = OnceLock::new();
