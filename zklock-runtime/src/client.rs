//! The lock client: configuration, the current ZooKeeper session, and the default client.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock, RwLock as StdRwLock};
use std::time::Duration;

use tokio::sync::{watch, Mutex as AsyncMutex};
use tracing::{debug, info, warn};
use zookeeper_client as zk;

use crate::connection::connect_string;
use crate::connection::driver::Driver;
use crate::connection::secure::{self, Secured, Security};
use crate::connection::session::{Health, Session, SessionStatus};
use crate::engine::alone::DEFAULT_FAST_PATH_DIRS;
use crate::engine::cache::MAX_LINGER;
use crate::engine::cleanup::{delete_node, Cleanup};
use crate::engine::guard::ClientId;
use crate::engine::local_queue::{Gates, DEFAULT_MAX_LOCAL_HANDOFFS};
use crate::error::LockError;
use crate::name::validate_namespace;
use crate::node_data::Holder;
use crate::telemetry::gauges::SessionGauge;
use crate::telemetry::metrics::{Metrics, MetricsSnapshot};

/// 30 s: safe against ZooKeeper's default server settings (tickTime 2 s, syncLimit 5), where a
/// follower cut off from the quorum keeps its clients connected for up to 10 s while the leader
/// may already expire their sessions; see the loss-timing precondition in docs/safety.md.
const DEFAULT_SESSION_TIMEOUT: Duration = Duration::from_secs(30);
const DEFAULT_NAMESPACE: &str = "/zklock";

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
/// sessions run there instead, with [`LockClientBuilder::runtime`]. The futures you await
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

/// How long a `#[distributed_lock]` function waits for its lock when the attribute gives no
/// `timeout` and the client no [`default_timeout`](LockClientBuilder::default_timeout).
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(30);

pub(crate) struct Config {
    pub connect: String,
    pub session_timeout: Duration,
    pub connect_timeout: Option<Duration>,
    pub namespace: String,
    pub auth: Vec<(String, Vec<u8>)>,
    pub acls: Vec<zk::Acl>,
    pub loss_after: Option<Duration>,
    pub max_local_handoffs: u32,
    /// Lock directories each session remembers for the listing-free fast path.
    pub fast_path_dirs: usize,
    /// Who this client's contender nodes say they belong to.
    pub holder: Holder,
    /// The wait of a `#[distributed_lock]` function that gives no `timeout`.
    pub default_timeout: Duration,
    /// The `max_hold` of a `#[distributed_lock]` function that gives none.
    pub default_max_hold: Option<Duration>,
    /// How long an idle node of a mutex or write lock is kept for this process, unless the
    /// lock says otherwise ([`LockClientBuilder::default_cache`]).
    pub default_cache: Option<Duration>,
    /// TLS and SASL settings, checked.
    pub security: Secured,
    /// The runtime the sessions run on, when the caller gave one
    /// ([`LockClientBuilder::runtime`]); a driver thread of the client's own otherwise.
    pub runtime: Option<tokio::runtime::Handle>,
}

impl Config {
    /// The longest wait for a session to open (or to be seen closed).
    pub fn connect_limit(&self) -> Duration {
        self.connect_timeout.unwrap_or(self.session_timeout)
    }

    pub fn acls(&self) -> zk::Acls<'_> {
        if self.acls.is_empty() {
            zk::Acls::anyone_all()
        } else {
            zk::Acls::new(&self.acls)
        }
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

/// Configures and connects a [`LockClient`].
///
/// ```no_run
/// # async fn demo() -> Result<(), zklock_runtime::LockError> {
/// use std::time::Duration;
/// let client = zklock_runtime::LockClient::builder("127.0.0.1:2181")
///     .session_timeout(Duration::from_secs(4))
///     .connect_timeout(Duration::from_secs(2))
///     .digest("shop", "s3cret")
///     .connect()
///     .await?;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct LockClientBuilder {
    connect: String,
    session_timeout: Duration,
    connect_timeout: Option<Duration>,
    namespace: String,
    auth: Vec<(String, Vec<u8>)>,
    acls: Vec<zk::Acl>,
    loss_after: Option<Duration>,
    max_local_handoffs: u32,
    fast_path_dirs: usize,
    identity: Option<String>,
    security: Security,
    default_timeout: Duration,
    default_max_hold: Option<Duration>,
    default_cache: Option<Duration>,
    runtime: Option<tokio::runtime::Handle>,
}

/// Shows the settings, never a credential: digest auth appears as its scheme only.
impl std::fmt::Debug for LockClientBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let auth: Vec<&str> = self.auth.iter().map(|(scheme, _)| scheme.as_str()).collect();
        f.debug_struct("LockClientBuilder")
            .field("connect", &self.connect)
            .field("session_timeout", &self.session_timeout)
            .field("connect_timeout", &self.connect_timeout)
            .field("namespace", &self.namespace)
            .field("auth", &auth)
            .field("acls", &self.acls)
            .field("loss_after", &self.loss_after)
            .field("max_local_handoffs", &self.max_local_handoffs)
            .field("fast_path_dirs", &self.fast_path_dirs)
            .field("identity", &self.identity)
            .field("security", &self.security)
            .field("default_timeout", &self.default_timeout)
            .field("default_max_hold", &self.default_max_hold)
            .field("default_cache", &self.default_cache)
            .field("runtime", &self.runtime.as_ref().map(|_| "the caller's"))
            .finish()
    }
}

impl LockClientBuilder {
    /// The session timeout to ask the server for (default 30 s). The server clamps it to
    /// between 2 and 20 times its `tickTime`; [`LockClient::session_timeout`] tells what it
    /// granted.
    ///
    /// It bounds how long a crashed holder blocks others, and it must leave room for the loss
    /// signal: a holder is told of trouble within `syncLimit × tickTime` of the servers (when
    /// the member it talks to is cut off from the quorum) plus [`loss_after`](Self::loss_after),
    /// which must stay below the session timeout with a margin. With ZooKeeper's defaults
    /// (tickTime 2 s, syncLimit 5) that is 10 s + 7.5 s against the default 30 s.
    #[must_use]
    pub fn session_timeout(mut self, timeout: Duration) -> Self {
        self.session_timeout = timeout;
        self
    }

    /// The longest wait for a new session to open (default: the session timeout). An
    /// unreachable ensemble gives [`LockError::Connection`] after this long, or earlier when
    /// the caller's own acquire timeout is shorter.
    #[must_use]
    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.connect_timeout = Some(timeout);
        self
    }

    /// The root under which lock directories live (default `/zklock`).
    #[must_use]
    pub fn namespace(mut self, root: impl Into<String>) -> Self {
        self.namespace = root.into();
        self
    }

    /// Authenticates with the `digest` scheme and creates lock nodes readable and writable
    /// only by that identity (`creator_all`), unless [`acls`](Self::acls) says otherwise.
    #[must_use]
    pub fn digest(mut self, user: &str, password: &str) -> Self {
        self.auth
            .push(("digest".to_owned(), format!("{user}:{password}").into_bytes()));
        self
    }

    /// Connects over TLS (feature `tls`): every server of the connect string is reached over
    /// TLS, on its `secureClientPort`, and must present a certificate that `tls`'s CA vouches
    /// for and that is valid for the name the connect string uses.
    ///
    /// A connection that cannot work as configured fails with [`LockError::Tls`] naming the
    /// problem (a certificate the CA does not vouch for, a name mismatch, a server that
    /// requires a client certificate, a port that does not speak TLS), within the connect
    /// timeout rather than at its end. PEM that does not parse fails
    /// [`build`](Self::build) with [`LockError::InvalidConfig`].
    ///
    /// ```no_run
    /// # async fn demo() -> Result<(), zklock_runtime::LockError> {
    /// use zklock_runtime::{LockClient, TlsConfig};
    ///
    /// let client = LockClient::builder("zk1:2281,zk2:2281")
    ///     .tls(TlsConfig::ca_file("/etc/zookeeper/ca.pem")?)
    ///     .connect()
    ///     .await?;
    /// # drop(client); Ok(()) }
    /// ```
    #[cfg(feature = "tls")]
    #[must_use]
    pub fn tls(mut self, tls: secure::TlsConfig) -> Self {
        self.security.tls = Some(tls);
        self
    }

    /// Authenticates with SASL DIGEST-MD5 as `user` (feature `sasl`), one of the users of
    /// the servers' JAAS `Server` section, and creates lock nodes readable and writable only
    /// by that identity (`creator_all`, which ZooKeeper records as `sasl:<user>`), unless
    /// [`acls`](Self::acls) says otherwise. A refused password fails the connect with
    /// [`LockError::AuthFailed`].
    ///
    /// ```no_run
    /// # async fn demo() -> Result<(), zklock_runtime::LockError> {
    /// let client = zklock_runtime::LockClient::builder("zk1:2181")
    ///     .sasl_digest("orders", "s3cret")
    ///     .connect()
    ///     .await?;
    /// # drop(client); Ok(()) }
    /// ```
    #[cfg(feature = "sasl")]
    #[must_use]
    pub fn sasl_digest(mut self, user: &str, password: &str) -> Self {
        self.security.sasl = Some(secure::Sasl {
            options: zk::SaslOptions::digest_md5(user.to_owned(), password.to_owned()).into(),
            who: format!("user {user:?} (DIGEST-MD5)"),
        });
        self
    }

    /// Authenticates with SASL options built with the client library (feature `sasl`), for a
    /// mechanism other than DIGEST-MD5: GSSAPI (Kerberos) is there when the application
    /// enables `zookeeper-client`'s `sasl-gssapi` feature and passes
    /// `zk::SaslOptions::gssapi()`. GSSAPI is not tested with this crate. Node ACLs default to
    /// `creator_all` as with [`sasl_digest`](Self::sasl_digest).
    ///
    /// ```no_run
    /// # async fn demo() -> Result<(), zklock_runtime::LockError> {
    /// use zklock_runtime::{zk, LockClient};
    ///
    /// let client = LockClient::builder("zk1:2181")
    ///     .sasl(zk::SaslOptions::digest_md5("orders", "s3cret"))
    ///     .connect()
    ///     .await?;
    /// # drop(client); Ok(()) }
    /// ```
    #[cfg(feature = "sasl")]
    #[must_use]
    pub fn sasl(mut self, options: impl Into<zk::SaslOptions>) -> Self {
        self.security.sasl = Some(secure::Sasl {
            options: options.into(),
            who: "the configured SASL mechanism".into(),
        });
        self
    }

    /// The ACL for lock directories and contender nodes (default: open, or `creator_all`
    /// after [`digest`](Self::digest) or SASL authentication). For SASL identities, name
    /// them `sasl:<user>`:
    ///
    /// ```no_run
    /// use zklock_runtime::{zk, LockClient};
    ///
    /// let builder = LockClient::builder("zk1:2181").acls(vec![
    ///     zk::Acl::new(zk::Permission::ALL, zk::AuthId::new("sasl", "orders")),
    ///     zk::Acl::new(zk::Permission::READ, zk::AuthId::anyone()),
    /// ]);
    /// # drop(builder);
    /// ```
    #[must_use]
    pub fn acls(mut self, acls: Vec<zk::Acl>) -> Self {
        self.acls = acls;
        self
    }

    /// How long a connection may stay down before held locks are reported lost (default: a
    /// quarter of the negotiated session timeout). The library notices a dead connection
    /// within 2/5 of the session timeout, so the default reports loss by about 0.65 × the
    /// session timeout, before the server could expire the session and grant the lock to
    /// someone else.
    ///
    /// Measured against the timeout the server *negotiates*, which may be shorter than the one
    /// asked for: a value above half of it would report loss after the server may already have
    /// expired the session, so it is lowered to half of the negotiated timeout, with a warning
    /// ([`LockClient::loss_after`] tells the value in force).
    #[must_use]
    pub fn loss_after(mut self, after: Duration) -> Self {
        self.loss_after = Some(after);
        self
    }

    /// How many times in a row a held node of an exclusive lock may be handed straight to the
    /// next task of this process that waits for the same lock (default 16).
    ///
    /// A handoff is a grant without a round trip: the node stays, and the new holder's fencing
    /// token is the old one with the next [`generation`](crate::FencingToken::generation). A
    /// contender of another process queued behind the node therefore waits for at most
    /// `handoffs + 1` grants of this process before its turn. `0` hands nothing over: every
    /// grant goes through ZooKeeper in strict FIFO order across processes, as with Curator.
    ///
    /// ```no_run
    /// # async fn demo() -> Result<(), zklock_runtime::LockError> {
    /// let strict_fifo = zklock_runtime::LockClient::builder("127.0.0.1:2181")
    ///     .max_local_handoffs(0)
    ///     .connect()
    ///     .await?;
    /// # Ok(()) }
    /// ```
    #[must_use]
    pub fn max_local_handoffs(mut self, handoffs: u32) -> Self {
        self.max_local_handoffs = handoffs;
        self
    }

    /// How many lock directories each session remembers for the uncontended fast path (default
    /// [`DEFAULT_FAST_PATH_DIRS`](crate::DEFAULT_FAST_PATH_DIRS), least recently used forgotten
    /// beyond it). A mutex or write lock the session was alone in before, and still remembers,
    /// is acquired again with a create and nothing else; a forgotten one costs a listing and
    /// an exists-watch more (see `docs/safety.md`, "Skipping the listing when alone").
    ///
    /// Raise it when a client takes more distinct lock names again and again than the default
    /// covers (per-key locks over tens of thousands of items). Each remembered directory costs
    /// this process about 0.7 KiB (the client library's watch included) and the server one
    /// exists-watch, which fires only when the directory itself is deleted. `0` turns the fast
    /// path off: every acquisition lists, except the one that makes its directory.
    ///
    /// ```no_run
    /// # async fn demo() -> Result<(), zklock_runtime::LockError> {
    /// // 50 000 SKUs, each locked many times a day.
    /// let client = zklock_runtime::LockClient::builder("zk1:2181")
    ///     .fast_path_dirs(65_536)
    ///     .connect()
    ///     .await?;
    /// # Ok(()) }
    /// ```
    #[must_use]
    pub fn fast_path_dirs(mut self, dirs: usize) -> Self {
        self.fast_path_dirs = dirs;
        self
    }

    /// How long a `#[distributed_lock]` function using this client waits for its lock when the
    /// attribute gives no `timeout` (default [`DEFAULT_TIMEOUT`], 30 s): lock4j's global acquire timeout. `Duration::ZERO` tries once. An explicit
    /// `timeout = …` wins; [`Lock::acquire`](crate::Lock::acquire) is not affected (it waits
    /// as long as it takes, like `tokio::sync::Mutex::lock`).
    ///
    /// ```no_run
    /// # async fn demo() -> Result<(), zklock_runtime::LockError> {
    /// let client = zklock_runtime::LockClient::builder("zk1:2181")
    ///     .default_timeout(std::time::Duration::from_secs(5))
    ///     .connect()
    ///     .await?;
    /// assert_eq!(client.default_timeout(), std::time::Duration::from_secs(5));
    /// # Ok(()) }
    /// ```
    #[must_use]
    pub fn default_timeout(mut self, timeout: Duration) -> Self {
        self.default_timeout = timeout;
        self
    }

    /// The longest a `#[distributed_lock]` function using this client may hold its lock when
    /// the attribute gives no `max_hold` (default: no bound): past it the body is stopped and
    /// the call returns [`LockError::MaxHoldExceeded`], as with the attribute's own option,
    /// which wins. ShedLock's and lock4j's global "lock at most for". Zero is refused when
    /// the client connects.
    ///
    /// ```no_run
    /// # async fn demo() -> Result<(), zklock_runtime::LockError> {
    /// let client = zklock_runtime::LockClient::builder("zk1:2181")
    ///     .default_max_hold(std::time::Duration::from_secs(60))
    ///     .connect()
    ///     .await?;
    /// # Ok(()) }
    /// ```
    #[must_use]
    pub fn default_max_hold(mut self, max_hold: Duration) -> Self {
        self.default_max_hold = Some(max_hold);
        self
    }

    /// Caches every mutex and write lock of this client for `linger` (default: no caching),
    /// unless the lock says otherwise with [`Lock::with_cache`](crate::Lock::with_cache) (or
    /// the attribute with `cache = …`): when a hold ends and no task of this process waits,
    /// the node is kept for up to `linger`, and the next acquisition here is granted without a
    /// request to ZooKeeper. Another process wanting the lock ends the linger at once. See
    /// [`Lock::with_cache`](crate::Lock::with_cache) for what ends it and what it costs others.
    /// `Duration::ZERO` means no caching; over an hour is refused when the client connects.
    ///
    /// ```no_run
    /// # async fn demo() -> Result<(), zklock_runtime::LockError> {
    /// let client = zklock_runtime::LockClient::builder("zk1:2181")
    ///     .default_cache(std::time::Duration::from_secs(5))
    ///     .connect()
    ///     .await?;
    /// assert_eq!(client.mutex("inventory:42")?.cache(), Some(std::time::Duration::from_secs(5)));
    /// # Ok(()) }
    /// ```
    #[must_use]
    pub fn default_cache(mut self, linger: Duration) -> Self {
        self.default_cache = (!linger.is_zero()).then_some(linger);
        self
    }

    /// The holder identity written into every contender node this client creates, so an
    /// operator (`zklock show`, or any ZooKeeper browser) can tell who holds or waits for a
    /// lock: a service and instance name such as `"orders-api@pod-7"`. Default: `host:pid`. At
    /// most [`MAX_IDENTITY_LEN`](crate::MAX_IDENTITY_LEN) bytes. The node data also records
    /// the host, the process id, the time of the create and, for attribute locks, the lock's
    /// name template (see [`ContenderData`](crate::ContenderData)).
    ///
    /// ```no_run
    /// # async fn demo() -> Result<(), zklock_runtime::LockError> {
    /// let client = zklock_runtime::LockClient::builder("zk1:2181")
    ///     .identity("orders-api@pod-7")
    ///     .connect()
    ///     .await?;
    /// assert_eq!(client.identity(), "orders-api@pod-7");
    /// # Ok(()) }
    /// ```
    #[must_use]
    pub fn identity(mut self, identity: impl Into<String>) -> Self {
        self.identity = Some(identity.into());
        self
    }

    /// Runs this client's sessions (the client library's connection, the engine's session
    /// monitor, watches and background releases) on `runtime` instead of on a thread of the
    /// client's own (see [`LockClient`]). A request and its answer then stay on that runtime
    /// instead of crossing to the client's thread and back: on a small machine, where that
    /// crossing is a thread wake-up each way, this is most of the client's CPU per acquisition
    /// (docs/benchmarks.md, "Where the time goes").
    ///
    /// The runtime must outlive the client. Once it shuts down, the client's sessions end with
    /// it, and the client answers [`LockError::Closed`] from then on (a new client is needed).
    /// So it suits a service whose `#[tokio::main]` runtime runs for the life of the process
    /// (`runtime(tokio::runtime::Handle::current())`), not a client shared by `#[tokio::test]`s,
    /// each of which has a runtime of its own. The futures you await run on your runtime
    /// either way. The runtime needs tokio's time driver
    /// ([`enable_all`](tokio::runtime::Builder::enable_all), as `#[tokio::main]` has it);
    /// without it no session opens, and connecting answers [`LockError::Connection`] saying
    /// so.
    ///
    /// ```no_run
    /// # async fn demo() -> Result<(), zklock_runtime::LockError> {
    /// let client = zklock_runtime::LockClient::builder("zk1:2181")
    ///     .runtime(tokio::runtime::Handle::current())
    ///     .connect()
    ///     .await?;
    /// # Ok(()) }
    /// ```
    #[must_use]
    pub fn runtime(mut self, runtime: tokio::runtime::Handle) -> Self {
        self.runtime = Some(runtime);
        self
    }

    /// Validates the configuration and opens the first session.
    ///
    /// Errors: [`LockError::InvalidConfig`] for a bad configuration (before any network
    /// traffic), [`LockError::Connection`] when no host of the connect string resolves or no
    /// session opens within the connect timeout.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: dropping the future abandons the connection attempt; nothing is left open.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn demo() -> Result<(), zklock_runtime::LockError> {
    /// let client = zklock_runtime::LockClient::builder("zk1:2181,zk2:2181")
    ///     .max_local_handoffs(4)
    ///     .connect()
    ///     .await?;
    /// # Ok(()) }
    /// ```
    pub async fn connect(self) -> Result<LockClient, LockError> {
        let client = self.build()?;
        client.session(None).await?;
        Ok(client)
    }

    /// Validates the configuration without connecting; the first acquisition connects.
    pub fn build(self) -> Result<LockClient, LockError> {
        validate_namespace(&self.namespace)?;
        let servers = connect_string::parse(&self.connect)?;
        if self.session_timeout.is_zero() {
            return Err(LockError::invalid_config("the session timeout is zero"));
        }
        // The protocol carries it as an i32 of milliseconds; a larger one would wrap around.
        if self.session_timeout.as_millis() > i32::MAX as u128 {
            return Err(LockError::invalid_config(format!(
                "the session timeout {:?} is longer than ZooKeeper can express ({} ms); servers \
                 grant at most 20 ticks anyway",
                self.session_timeout,
                i32::MAX
            )));
        }
        if self.connect_timeout.is_some_and(|t| t.is_zero()) {
            return Err(LockError::invalid_config("the connect timeout is zero"));
        }
        let mut acls = self.acls;
        if acls.is_empty() && (!self.auth.is_empty() || self.security.authenticates()) {
            acls = zk::Acls::creator_all().to_vec();
        }
        let security = self.security.prepare(&servers)?;
        let holder = Holder::new(self.identity)?;
        if self.default_max_hold.is_some_and(|max| max.is_zero()) {
            return Err(LockError::invalid_config(
                "default_max_hold must be longer than zero; leave it out for no bound",
            ));
        }
        if self.default_cache.is_some_and(|linger| linger > MAX_LINGER) {
            return Err(LockError::invalid_config(format!(
                "default_cache: a linger of {:?} is over the limit of {MAX_LINGER:?}",
                self.default_cache.unwrap_or_default()
            )));
        }
        let (status, _) = watch::channel(SessionStatus::Connecting);
        let config = Config {
            connect: self.connect,
            session_timeout: self.session_timeout,
            connect_timeout: self.connect_timeout,
            namespace: self.namespace,
            auth: self.auth,
            acls,
            loss_after: self.loss_after,
            max_local_handoffs: self.max_local_handoffs,
            fast_path_dirs: self.fast_path_dirs,
            holder,
            security,
            default_timeout: self.default_timeout,
            default_max_hold: self.default_max_hold,
            default_cache: self.default_cache,
            runtime: self.runtime,
        };
        Ok(LockClient {
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
        })
    }
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

static DEFAULT_CLIENT: OnceLock<StdRwLock<Option<LockClient>>> = OnceLock::new();

impl LockClient {
    /// Connects with default settings: 30 s session timeout, namespace `/zklock`, open ACL.
    ///
    /// The connect string is ZooKeeper's: `host:port[,host:port…][/chroot]`.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe, like [`LockClientBuilder::connect`].
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn demo() -> Result<(), zklock_runtime::LockError> {
    /// let client = zklock_runtime::LockClient::connect("127.0.0.1:2181/apps/shop").await?;
    /// # Ok(()) }
    /// ```
    pub async fn connect(connect_string: &str) -> Result<LockClient, LockError> {
        Self::builder(connect_string).connect().await
    }

    /// Starts configuring a client for `connect_string`.
    pub fn builder(connect_string: impl Into<String>) -> LockClientBuilder {
        LockClientBuilder {
            connect: connect_string.into(),
            session_timeout: DEFAULT_SESSION_TIMEOUT,
            connect_timeout: None,
            namespace: DEFAULT_NAMESPACE.to_owned(),
            auth: Vec::new(),
            acls: Vec::new(),
            loss_after: None,
            max_local_handoffs: DEFAULT_MAX_LOCAL_HANDOFFS,
            fast_path_dirs: DEFAULT_FAST_PATH_DIRS,
            identity: None,
            security: Security::default(),
            default_timeout: DEFAULT_TIMEOUT,
            default_max_hold: None,
            default_cache: None,
            runtime: None,
        }
    }

    /// The state of the current session.
    pub fn status(&self) -> SessionStatus {
        *self.inner.status.borrow()
    }

    /// A receiver that sees every change of [`status`](Self::status).
    pub fn watch_status(&self) -> watch::Receiver<SessionStatus> {
        self.inner.status.subscribe()
    }

    /// The holder identity this client writes into its contender nodes (see
    /// [`LockClientBuilder::identity`]).
    pub fn identity(&self) -> &str {
        self.inner.config.holder.identity()
    }

    /// How long a `#[distributed_lock]` function waits for its lock when the attribute gives no
    /// `timeout` (see [`LockClientBuilder::default_timeout`]).
    pub fn default_timeout(&self) -> Duration {
        self.inner.config.default_timeout
    }

    /// The `max_hold` of a `#[distributed_lock]` function whose attribute gives none, if any
    /// (see [`LockClientBuilder::default_max_hold`]).
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
    /// reported lost, as in force (see [`LockClientBuilder::loss_after`]).
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

    /// A connector with this client's session timeout, credentials and TLS settings.
    fn connector(&self) -> zk::Connector {
        let config = &self.inner.config;
        let mut connector = zk::Client::connector().with_session_timeout(config.session_timeout);
        for (scheme, auth) in &config.auth {
            connector = connector.with_auth(scheme, auth);
        }
        config.security.apply(connector)
    }

    /// The raw ZooKeeper client of the live session (opening one if needed), for adapters
    /// that keep their own state next to the locks. The handle you keep holds the session
    /// open until you drop it, even past [`close`](Self::close), which otherwise ends the
    /// session at once: drop it when done.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe, like [`LockClientBuilder::connect`] when a session must be opened.
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

    pub(crate) fn latest(&self) -> Option<Arc<Session>> {
        self.inner.latest.read().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// The session new work should use, opening a new one if there is none or the last one
    /// ended. `bound` caps the wait (together with the configured connect timeout).
    pub(crate) async fn session(&self, bound: Option<Duration>) -> Result<Arc<Session>, LockError> {
        let config = &self.inner.config;
        let mut limit = config.connect_limit();
        if let Some(bound) = bound {
            limit = limit.min(bound);
        }
        let open = async {
            let mut current = self.inner.current.lock().await;
            if let Some(session) = current.as_ref().filter(|s| s.is_usable()) {
                return Ok(session.clone());
            }
            self.check_open()?;
            let session = self.open_session().await?;
            if let Err(closed) = self.check_open() {
                // Closed while this session was being opened: it is never handed out, and ends
                // here, as `close` ends the one it finds.
                let _ = tokio::time::timeout(config.connect_limit(), session.close_handle()).await;
                return Err(closed);
            }
            *current = Some(session.clone());
            *self.inner.latest.write().unwrap_or_else(|e| e.into_inner()) = Some(session.clone());
            self.inner.set_status(session.health().status);
            Ok(session)
        };
        // A misconfigured TLS connection fails every attempt the same way until the limit;
        // the diagnosis tells it early and says why. A session that opened wins every tie.
        tokio::select! {
            biased;
            result = open => result,
            why = secure::misconfiguration(&config.security, self.inner.contact.servers()) => Err(why),
            why = connect_string::all_refused(&config.connect, &self.inner.contact) => Err(why),
            () = tokio::time::sleep(limit) => Err(LockError::connection(format!(
                "no ZooKeeper session could be opened to {} within {limit:?}{}",
                config.connect,
                self.inner.contact.clause()
            ))),
        }
    }

    /// `Err(Closed)` once the client cannot be used any more: it was closed, or the runtime its
    /// sessions run on (its driver thread, or [`LockClientBuilder::runtime`]) stopped under a
    /// session (which closes it for good).
    pub(crate) fn check_open(&self) -> Result<(), LockError> {
        // Read in place, without cloning the session's handle.
        let latest = self.inner.latest.read().unwrap_or_else(|e| e.into_inner());
        let runtime_gone = latest.as_ref().is_some_and(|s| s.runtime_gone());
        drop(latest);
        self.check_open_in(runtime_gone)
    }

    /// [`check_open`](Self::check_open) for an acquisition that already has a session at hand
    /// (a reentrant one, in its hold's session), which answers whether its runtime stopped:
    /// no lock taken.
    pub(crate) fn check_open_in(&self, runtime_gone: bool) -> Result<(), LockError> {
        if runtime_gone {
            self.mark_closed("the runtime its ZooKeeper session ran on stopped; open a new client");
        }
        match self.inner.closed.get() {
            Some(reason) => Err(LockError::closed(reason.clone())),
            None => Ok(()),
        }
    }

    /// Closes the client for good (the first reason given is kept).
    fn mark_closed(&self, reason: &str) {
        // The first reason given stays; a later one is dropped.
        let _ = self.inner.closed.set(reason.to_owned());
        self.inner.set_status(SessionStatus::Closed);
    }

    async fn open_session(&self) -> Result<Arc<Session>, LockError> {
        let config = &self.inner.config;
        self.inner.set_status(SessionStatus::Connecting);
        connect_string::resolve(&config.connect, self.inner.contact.servers()).await?;
        let driver = self
            .inner
            .driver
            .get_or_try_init(|| async {
                match &config.runtime {
                    Some(runtime) => Ok(Driver::on(runtime.clone())),
                    None => Driver::start().await,
                }
            })
            .await?
            .clone();
        debug!(connect = %config.connect, "opening zookeeper session");
        // On the driver: the client library's connection task is spawned where it connects.
        let client = self.clone();
        let connecting = driver.run(async move {
            // The session's monitor and pulse need the driver's timers, which the connect
            // itself does not: a caller's runtime built without them fails here, before a
            // session opens whose tasks would fail one by one.
            tokio::time::sleep(Duration::ZERO).await;
            let config = &client.inner.config;
            config.security.connect(client.connector(), &config.connect).await
        });
        let zk = connecting
            .await
            .map_err(|why| LockError::connection(format!("the runtime the client's sessions run on: {why}")))?
            .map_err(|e| match e {
                zk::Error::AuthFailed => config.security.auth_failed(),
                e @ zk::Error::BadArguments(_) => {
                    LockError::invalid_config_from(format!("connect string {:?}", config.connect), e)
                }
                e => LockError::connection_from(format!("cannot open a session to {}", config.connect), e),
            })?;
        config.security.check_authenticated(&zk).await?;
        let negotiated = zk.session_timeout();
        if negotiated < config.session_timeout && !self.inner.cut_reported.swap(true, Ordering::Relaxed) {
            warn!(
                asked = ?config.session_timeout,
                granted = ?negotiated,
                "the server granted a shorter session timeout than asked (servers allow 2 to 20 \
                 ticks): a dead holder blocks others for less, and loss is reported sooner"
            );
        }
        let loss_after = match config.loss_after {
            None => negotiated / 4,
            Some(asked) if asked > negotiated / 2 => {
                warn!(
                    asked = ?asked,
                    negotiated = ?negotiated,
                    using = ?(negotiated / 2),
                    "loss_after is too long for the session timeout the server granted: loss would be \
                     reported after the server may have expired the session; using half the session timeout"
                );
                negotiated / 2
            }
            Some(asked) => asked,
        };
        info!(
            session = format_args!("{:#x}", zk.session_id().0),
            timeout = ?negotiated,
            ?loss_after,
            "zookeeper session opened"
        );
        // Only the session new work goes to speaks for the client: a late word from an ended
        // session must not overwrite a newer session's status.
        let id = zk.session_id().0;
        let inner = Arc::downgrade(&self.inner);
        let on_change = Arc::new(move |health: Health| {
            let Some(inner) = inner.upgrade() else { return };
            let latest = inner
                .latest
                .read()
                .unwrap_or_else(|e| e.into_inner())
                .as_ref()
                .map(|s| s.id);
            if latest == Some(id) && inner.closed.get().is_none() {
                inner.set_status(health.status);
            }
        });
        Ok(Session::start(
            zk,
            driver,
            loss_after,
            config.fast_path_dirs,
            self.inner.contact.clone(),
            on_change,
        ))
    }
}
