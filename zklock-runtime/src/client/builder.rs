//! Configuring a client: [`LockClientBuilder`], its defaults, and the checks that turn its
//! settings into a client's [`Config`].

use std::time::Duration;

use zookeeper_client as zk;

use crate::client::config::Config;
use crate::client::LockClient;
use crate::connection::connect_string;
#[cfg(feature = "sasl")]
use crate::connection::secure::Sasl;
use crate::connection::secure::Security;
#[cfg(feature = "tls")]
use crate::connection::secure::TlsConfig;
use crate::engine::alone::DEFAULT_FAST_PATH_DIRS;
use crate::engine::cache::MAX_LINGER;
use crate::engine::local_queue::DEFAULT_MAX_LOCAL_HANDOFFS;
use crate::error::LockError;
use crate::name::validate_namespace;
use crate::node_data::Holder;

/// 30 s: safe against ZooKeeper's default server settings (tickTime 2 s, syncLimit 5), where a
/// follower cut off from the quorum keeps its clients connected for up to 10 s while the leader
/// may already expire their sessions; see the loss-timing precondition in docs/safety.md.
const DEFAULT_SESSION_TIMEOUT: Duration = Duration::from_secs(30);
const DEFAULT_NAMESPACE: &str = "/zklock";
/// How long a `#[distributed_lock]` function waits for its lock when the attribute gives no
/// `timeout` and the client no [`default_timeout`](LockClientBuilder::default_timeout).
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(30);

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
    pub fn tls(mut self, tls: TlsConfig) -> Self {
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
        self.security.sasl = Some(Sasl {
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
        self.security.sasl = Some(Sasl {
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
        Ok(LockClient::from_config(config, servers))
    }
}

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
}
