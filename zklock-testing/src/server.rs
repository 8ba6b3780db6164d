//! A real ZooKeeper server in a child JVM: [`ZkServer`] and its builder.

use std::fmt::Write as _;
use std::fs;
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread;
use std::time::{Duration, Instant};

use tempfile::TempDir;

use super::certs::TestIdentity;
use super::error::TestingError;
use super::four_letter::{four_letter_word, mode_of};
use super::java::{server_classpath, tail_of_file, JvmProcess};
use super::orphans;
use super::ports::free_port;

/// How long a four-letter word may take before the server counts as unresponsive.
const FOUR_LETTER_TIMEOUT: Duration = Duration::from_secs(3);
/// How long a readiness probe may take (short: a starting server answers quickly or not at all).
const PROBE_TIMEOUT: Duration = Duration::from_millis(1000);
/// How long a graceful stop may take before the JVM is killed.
const STOP_GRACE: Duration = Duration::from_secs(10);
/// How many times a start is retried on fresh ports when another process took a port first.
const PORT_ATTEMPTS: usize = 3;
/// When set, server directories (configuration, data, log) are kept for a post-mortem.
pub(crate) const KEEP_DIRS_ENV: &str = "ZKLOCK_TESTING_KEEP_DIRS";
/// How a server's temporary directory is named (and how the sweep of orphaned ones finds them).
const DIR_PREFIX: &str = "zklock-zk-";
/// Lines of server log quoted in errors.
const LOG_LINES_IN_ERRORS: usize = 40;

/// Settings shared by standalone servers and ensemble members.
#[derive(Debug, Clone)]
pub(crate) struct Settings {
    pub(crate) tick_time: Duration,
    pub(crate) force_sync: bool,
    pub(crate) system_properties: Vec<(String, String)>,
    pub(crate) config: Vec<(String, String)>,
    pub(crate) start_timeout: Duration,
    pub(crate) max_heap_mb: u32,
    pub(crate) fast_startup: bool,
    pub(crate) init_limit: u32,
    pub(crate) sync_limit: u32,
    /// TLS on a second, TLS-only client port (standalone servers).
    pub(crate) tls: Option<ServerTls>,
    /// SASL DIGEST-MD5 users (name, password); empty: SASL is off.
    pub(crate) sasl_users: Vec<(String, String)>,
    /// A configuration error found by a builder method, reported by `start`.
    pub(crate) invalid: Option<String>,
}

/// What a TLS-serving server is given.
#[derive(Debug, Clone)]
pub(crate) struct ServerTls {
    /// The server's certificate and key in one PEM file.
    key_store_pem: String,
    /// The certificates it trusts for client certificates.
    trust_pem: String,
    pub(crate) client_auth: ClientAuth,
}

/// Gives servers a TLS port with `identity`, trusting `trusted_pem` for client certificates.
pub(crate) fn set_tls(settings: &mut Settings, identity: &TestIdentity, trusted_pem: &str) {
    let client_auth = settings
        .tls
        .as_ref()
        .map_or_else(ClientAuth::default, |t| t.client_auth);
    settings.tls = Some(ServerTls {
        key_store_pem: identity.key_store_pem(),
        trust_pem: trusted_pem.to_owned(),
        client_auth,
    });
}

/// Whether a SASL user can be written into a JAAS file as given.
pub(crate) fn check_sasl_user(user: &str, password: &str) -> Result<(), String> {
    let plain = |s: &str| !s.is_empty() && s.chars().all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_');
    if plain(user) && !password.contains(['"', '\\', '\n']) {
        Ok(())
    } else {
        Err(format!(
            "SASL user {user:?}: names are letters, digits, `-` and `_`; passwords have no quote, \
             backslash or newline"
        ))
    }
}

/// Whether a TLS server asks clients for a certificate (ZooKeeper's `ssl.clientAuth`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ClientAuth {
    /// Never asks.
    None,
    /// Asks, and accepts clients without one (a client certificate given is verified).
    #[default]
    Want,
    /// Refuses clients without a certificate its trust store vouches for.
    Need,
}

impl ClientAuth {
    fn as_config(self) -> &'static str {
        match self {
            ClientAuth::None => "none",
            ClientAuth::Want => "want",
            ClientAuth::Need => "need",
        }
    }
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            tick_time: Duration::from_millis(200),
            force_sync: false,
            system_properties: Vec::new(),
            config: Vec::new(),
            start_timeout: Duration::from_secs(60),
            max_heap_mb: 256,
            fast_startup: true,
            init_limit: 100,
            sync_limit: 5,
            tls: None,
            sasl_users: Vec::new(),
            invalid: None,
        }
    }
}

/// An ensemble member's place in the quorum.
#[derive(Debug, Clone)]
pub(crate) struct Peer {
    pub(crate) myid: usize,
    pub(crate) client_port: u16,
    pub(crate) quorum_port: u16,
    pub(crate) election_port: u16,
}

#[derive(Debug, Clone)]
pub(crate) enum Role {
    Standalone,
    Member { myid: usize, peers: Arc<Vec<Peer>> },
}

/// A real Apache ZooKeeper server running in a child JVM, on a free loopback port, with its own
/// temporary data directory.
///
/// Modelled on Curator's `TestingServer`. The default tick is 200 ms, so sessions may be as short
/// as 400 ms (the server clamps session timeouts to 2..20 ticks) and expiry tests take seconds.
/// Dropping the handle kills the JVM and removes the data directory, also while a test unwinds
/// from a panic; if the whole test process dies, the kernel kills the JVM with it.
///
/// All methods block briefly and need no async runtime, so the type works in sync and async
/// tests alike; methods take `&self`, so a server can be shared (e.g. in an `Arc`) with the task
/// that pauses or kills it.
///
/// ```no_run
/// use zklock_testing::ZkServer;
///
/// let server = ZkServer::start()?;
/// assert_eq!(server.four_letter_word("ruok")?, "imok");
/// let connect = server.connect_string(); // "127.0.0.1:PORT"
/// # let _ = connect;
/// server.kill()?; // crash it
/// server.restart()?; // same port, same data
/// # Ok::<(), zklock_testing::TestingError>(())
/// ```
#[derive(Debug)]
pub struct ZkServer {
    name: String,
    settings: Arc<Settings>,
    role: Role,
    port: u16,
    secure_port: Option<u16>,
    dir: TempDir,
    process: Mutex<Option<JvmProcess>>,
}

impl ZkServer {
    /// Starts a standalone server with the default settings and waits until it serves.
    ///
    /// ```no_run
    /// let server = zklock_testing::ZkServer::start()?;
    /// println!("ZooKeeper at {}", server.connect_string());
    /// # Ok::<(), zklock_testing::TestingError>(())
    /// ```
    pub fn start() -> Result<ZkServer, TestingError> {
        ZkServer::builder().start()
    }

    /// A builder for a standalone server with non-default settings.
    ///
    /// ```no_run
    /// use std::time::Duration;
    /// let server = zklock_testing::ZkServer::builder()
    ///     .tick_time(Duration::from_millis(100))
    ///     .system_property("znode.container.checkIntervalMs", "100")
    ///     .force_sync(false)
    ///     .start()?;
    /// # Ok::<(), zklock_testing::TestingError>(())
    /// ```
    pub fn builder() -> ZkServerBuilder {
        ZkServerBuilder {
            settings: Settings::default(),
        }
    }

    /// Creates the data directory and configuration of a server; does not start it.
    pub(crate) fn prepare(
        settings: Arc<Settings>,
        role: Role,
        port: u16,
        secure_port: Option<u16>,
    ) -> Result<ZkServer, TestingError> {
        orphans::sweep(DIR_PREFIX);
        let keep = std::env::var_os(KEEP_DIRS_ENV).is_some();
        let dir = tempfile::Builder::new()
            .prefix(DIR_PREFIX)
            .disable_cleanup(keep)
            .tempdir()
            .map_err(|e| TestingError::io("create a temporary server directory", e))?;
        if !keep {
            orphans::claim(dir.path());
        }
        let name = match &role {
            Role::Standalone => format!("ZooKeeper server 127.0.0.1:{port}"),
            Role::Member { myid, .. } => format!("ensemble member {} (127.0.0.1:{port})", myid - 1),
        };
        let server = ZkServer {
            name,
            settings,
            role,
            port,
            secure_port,
            dir,
            process: Mutex::new(None),
        };
        server.write_config()?;
        Ok(server)
    }

    fn data_dir(&self) -> PathBuf {
        self.dir.path().join("data")
    }

    fn config_path(&self) -> PathBuf {
        self.dir.path().join("zoo.cfg")
    }

    fn log_path(&self) -> PathBuf {
        self.dir.path().join("server.log")
    }

    fn key_store_path(&self) -> PathBuf {
        self.dir.path().join("keystore.pem")
    }

    fn trust_store_path(&self) -> PathBuf {
        self.dir.path().join("truststore.pem")
    }

    fn jaas_path(&self) -> PathBuf {
        self.dir.path().join("jaas.conf")
    }

    /// Writes the TLS stores and the JAAS file the settings ask for.
    fn write_security_files(&self) -> Result<(), TestingError> {
        let s = &self.settings;
        let mut files = Vec::new();
        if let Some(tls) = &s.tls {
            files.push((self.key_store_path(), tls.key_store_pem.clone()));
            files.push((self.trust_store_path(), tls.trust_pem.clone()));
        }
        if !s.sasl_users.is_empty() {
            let mut jaas = String::from("Server {\n    org.apache.zookeeper.server.auth.DigestLoginModule required");
            for (user, password) in &s.sasl_users {
                let _ = write!(jaas, "\n    user_{user}=\"{password}\"");
            }
            jaas.push_str(";\n};\n");
            files.push((self.jaas_path(), jaas));
        }
        for (path, contents) in files {
            fs::write(&path, contents).map_err(|e| TestingError::io(format!("write {}", path.display()), e))?;
        }
        Ok(())
    }

    /// The JVM properties that turn on TLS and SASL, per the settings.
    fn security_properties(&self) -> Vec<(String, String)> {
        let s = &self.settings;
        let path = |p: PathBuf| p.display().to_string();
        let mut props = Vec::new();
        if let Some(tls) = &s.tls {
            // Only the Netty connection factory serves TLS.
            props.push((
                "zookeeper.serverCnxnFactory".to_string(),
                "org.apache.zookeeper.server.NettyServerCnxnFactory".to_string(),
            ));
            props.push(("zookeeper.ssl.keyStore.location".into(), path(self.key_store_path())));
            props.push(("zookeeper.ssl.keyStore.type".into(), "PEM".into()));
            props.push((
                "zookeeper.ssl.trustStore.location".into(),
                path(self.trust_store_path()),
            ));
            props.push(("zookeeper.ssl.trustStore.type".into(), "PEM".into()));
            props.push(("zookeeper.ssl.clientAuth".into(), tls.client_auth.as_config().into()));
        }
        if !s.sasl_users.is_empty() {
            props.push(("java.security.auth.login.config".into(), path(self.jaas_path())));
            props.push((
                "zookeeper.authProvider.sasl".into(),
                "org.apache.zookeeper.server.auth.SASLAuthenticationProvider".into(),
            ));
        }
        props
    }

    fn write_config(&self) -> Result<(), TestingError> {
        let s = &self.settings;
        let data = self.data_dir();
        fs::create_dir_all(&data).map_err(|e| TestingError::io(format!("create {}", data.display()), e))?;
        let mut cfg = String::new();
        let tick_ms = s.tick_time.as_millis().max(1);
        let _ = writeln!(cfg, "tickTime={tick_ms}");
        let _ = writeln!(cfg, "initLimit={}", s.init_limit);
        let _ = writeln!(cfg, "syncLimit={}", s.sync_limit);
        let _ = writeln!(cfg, "dataDir={}", data.display());
        let _ = writeln!(cfg, "clientPort={}", self.port);
        let _ = writeln!(cfg, "clientPortAddress=127.0.0.1");
        if let Some(secure_port) = self.secure_port {
            let _ = writeln!(cfg, "secureClientPort={secure_port}");
            let _ = writeln!(cfg, "secureClientPortAddress=127.0.0.1");
        }
        let _ = writeln!(cfg, "maxClientCnxns=0");
        let _ = writeln!(cfg, "4lw.commands.whitelist=*");
        let _ = writeln!(cfg, "admin.enableServer=false");
        let _ = writeln!(cfg, "forceSync={}", if s.force_sync { "yes" } else { "no" });
        // Transaction logs are preallocated in blocks of this many KiB (default 64 MiB).
        let _ = writeln!(cfg, "preAllocSize=4096");
        if let Role::Member { myid, peers } = &self.role {
            for p in peers.iter() {
                let _ = writeln!(cfg, "server.{}=127.0.0.1:{}:{}", p.myid, p.quorum_port, p.election_port);
            }
            let myid_path = data.join("myid");
            fs::write(&myid_path, format!("{myid}\n"))
                .map_err(|e| TestingError::io(format!("write {}", myid_path.display()), e))?;
        }
        for (key, value) in &s.config {
            let _ = writeln!(cfg, "{key}={value}");
        }
        self.write_security_files()?;
        let path = self.config_path();
        fs::write(&path, cfg).map_err(|e| TestingError::io(format!("write {}", path.display()), e))
    }

    fn jvm_args(&self) -> Result<Vec<String>, TestingError> {
        let s = &self.settings;
        let mut args = vec![
            format!("-Xmx{}m", s.max_heap_mb),
            "-Xms16m".to_string(),
            "-XX:+UseSerialGC".to_string(),
            "-XX:-UsePerfData".to_string(),
            "-XX:+ExitOnOutOfMemoryError".to_string(),
            "-Djava.net.preferIPv4Stack=true".to_string(),
            "-Djava.awt.headless=true".to_string(),
            format!("-Dzookeeper.forceSync={}", if s.force_sync { "yes" } else { "no" }),
            "-Dzookeeper.admin.enableServer=false".to_string(),
            "-Dorg.slf4j.simpleLogger.showDateTime=true".to_string(),
            "-Dorg.slf4j.simpleLogger.dateTimeFormat=HH:mm:ss.SSS".to_string(),
            // Readiness probes would otherwise fill the log with one line per four-letter word.
            "-Dorg.slf4j.simpleLogger.log.org.apache.zookeeper.server.NIOServerCnxn=warn".to_string(),
            "-Dorg.slf4j.simpleLogger.log.org.apache.zookeeper.server.NettyServerCnxn=warn".to_string(),
            // Marks the JVM as ours, with the pid of the process that owns it.
            format!("-Dzklock.testing.owner={}", std::process::id()),
        ];
        if s.fast_startup {
            args.push("-XX:TieredStopAtLevel=1".to_string());
        }
        for (key, value) in self.security_properties().iter().chain(&s.system_properties) {
            args.push(format!("-D{key}={value}"));
        }
        Ok(args)
    }

    fn main_class(&self) -> &'static str {
        match self.role {
            Role::Standalone => "org.apache.zookeeper.server.ZooKeeperServerMain",
            Role::Member { .. } => "org.apache.zookeeper.server.quorum.QuorumPeerMain",
        }
    }

    fn process(&self) -> MutexGuard<'_, Option<JvmProcess>> {
        self.process.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Starts the JVM without waiting for it to serve. Does nothing when it is already running.
    pub(crate) fn spawn(&self) -> Result<(), TestingError> {
        let mut process = self.process();
        if let Some(p) = process.as_mut() {
            if p.exit_status().is_none() {
                return Ok(());
            }
        }
        let args = [self.config_path().display().to_string()];
        let jvm = JvmProcess::spawn(
            &self.jvm_args()?,
            &server_classpath()?,
            self.main_class(),
            &args,
            &self.log_path(),
            self.dir.path(),
        )?;
        *process = Some(jvm);
        Ok(())
    }

    /// Waits until the server answers `ruok` with `imok` and `srvr` reports a serving mode
    /// (standalone, or leader/follower for an ensemble member).
    pub(crate) fn wait_ready(&self, deadline: Instant) -> Result<(), TestingError> {
        let started = Instant::now();
        loop {
            if let Some(status) = self.process().as_mut().map(|p| p.exit_status()) {
                if let Some(status) = status {
                    return Err(TestingError::Exited {
                        what: self.name.clone(),
                        status,
                        log_tail: self.log_tail(LOG_LINES_IN_ERRORS),
                    });
                }
            } else {
                return Err(TestingError::NotRunning {
                    what: self.name.clone(),
                });
            }
            if self.is_serving(PROBE_TIMEOUT) {
                return Ok(());
            }
            if Instant::now() >= deadline {
                return Err(TestingError::StartTimeout {
                    what: self.name.clone(),
                    waited: started.elapsed(),
                    log_tail: self.log_tail(LOG_LINES_IN_ERRORS),
                });
            }
            thread::sleep(Duration::from_millis(50));
        }
    }

    /// Whether the server answers `ruok`, reports a serving mode and, with TLS, accepts
    /// connections on its TLS port (bound after the plain one).
    pub(crate) fn is_serving(&self, timeout: Duration) -> bool {
        if !matches!(four_letter_word(self.addr(), "ruok", timeout).as_deref(), Ok("imok")) {
            return false;
        }
        if let Some(port) = self.secure_port {
            let addr = SocketAddr::V4(SocketAddrV4::new(Ipv4Addr::LOCALHOST, port));
            if std::net::TcpStream::connect_timeout(&addr, timeout).is_err() {
                return false;
            }
        }
        self.mode_with_timeout(timeout).is_some_and(|mode| match self.role {
            Role::Standalone => mode == "standalone",
            Role::Member { .. } => mode == "leader" || mode == "follower",
        })
    }

    /// The `Mode:` the server reports in `srvr`, or `None` when it does not serve.
    pub(crate) fn mode_with_timeout(&self, timeout: Duration) -> Option<String> {
        let srvr = four_letter_word(self.addr(), "srvr", timeout).ok()?;
        mode_of(&srvr).map(str::to_string)
    }

    /// Whether the server's log says a port it needed was taken.
    pub(crate) fn lost_port_race(&self) -> bool {
        let log = tail_of_file(&self.log_path(), 400);
        log.contains("Address already in use") || log.contains("BindException")
    }

    pub(crate) fn is_paused(&self) -> bool {
        self.process().as_ref().is_some_and(|p| p.is_paused())
    }

    /// The address clients connect to: `127.0.0.1:PORT`.
    ///
    /// The port stays the same across [`restart`](Self::restart).
    pub fn connect_string(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// The client port.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The TLS-only client port of a server started with [`ZkServerBuilder::tls`]; it stays
    /// the same across [`restart`](Self::restart). The plain [`port`](Self::port) serves too.
    pub fn secure_port(&self) -> Option<u16> {
        self.secure_port
    }

    /// `127.0.0.1:SECURE_PORT`, for a server started with [`ZkServerBuilder::tls`].
    pub fn secure_connect_string(&self) -> Option<String> {
        self.secure_port.map(|port| format!("127.0.0.1:{port}"))
    }

    /// The client address, e.g. for [`FaultProxy::start`](super::FaultProxy::start).
    pub fn addr(&self) -> SocketAddr {
        SocketAddr::V4(SocketAddrV4::new(Ipv4Addr::LOCALHOST, self.port))
    }

    /// The pid of the server JVM, while it runs.
    pub fn pid(&self) -> Option<u32> {
        let mut process = self.process();
        let p = process.as_mut()?;
        p.exit_status().is_none().then(|| p.pid())
    }

    /// Whether the server JVM is alive (it may be paused).
    pub fn is_running(&self) -> bool {
        self.pid().is_some()
    }

    /// The directory holding the server's configuration (`zoo.cfg`), data (`data/`) and log
    /// (`server.log`). Removed when the server is dropped.
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// Stops the server gracefully (SIGTERM; SIGKILL if it has not exited after 10 s). Its data
    /// stays for [`restart`](Self::restart). Stopping a stopped server does nothing.
    pub fn stop(&self) -> Result<(), TestingError> {
        if let Some(mut p) = self.process().take() {
            p.terminate(STOP_GRACE);
        }
        Ok(())
    }

    /// Kills the server with SIGKILL, like a crash. Its data stays for [`restart`](Self::restart).
    /// Killing a stopped server does nothing.
    pub fn kill(&self) -> Result<(), TestingError> {
        if let Some(mut p) = self.process().take() {
            p.kill();
        }
        Ok(())
    }

    /// Stops the server if it runs, starts it again on the same port with the same data, and
    /// waits until it serves (for an ensemble member: until it has rejoined the quorum).
    pub fn restart(&self) -> Result<(), TestingError> {
        self.stop()?;
        self.spawn()?;
        let result = self.wait_ready(Instant::now() + self.settings.start_timeout);
        if result.is_err() {
            let _ = self.kill();
        }
        result
    }

    /// Freezes the server with SIGSTOP: connections stay open, nothing is answered, its sessions'
    /// clocks run on at the other members (or resume where they were, standalone).
    pub fn pause(&self) -> Result<(), TestingError> {
        match self.process().as_mut() {
            Some(p) if !p.is_paused() => p.pause(),
            Some(_) => Ok(()),
            None => Err(TestingError::NotRunning {
                what: self.name.clone(),
            }),
        }
    }

    /// Lets a [`pause`](Self::pause)d server run again (SIGCONT).
    pub fn resume(&self) -> Result<(), TestingError> {
        match self.process().as_mut() {
            Some(p) if p.is_paused() => p.resume(),
            Some(_) => Ok(()),
            None => Err(TestingError::NotRunning {
                what: self.name.clone(),
            }),
        }
    }

    /// Sends a four-letter-word admin command and returns the answer, e.g. `ruok` → `imok`, or
    /// the text of `srvr`, `mntr`, `stat`, `wchs`, `cons`.
    ///
    /// ```no_run
    /// let server = zklock_testing::ZkServer::start()?;
    /// let mntr = server.four_letter_word("mntr")?;
    /// assert!(mntr.contains("zk_server_state\tstandalone"));
    /// # Ok::<(), zklock_testing::TestingError>(())
    /// ```
    pub fn four_letter_word(&self, word: &str) -> Result<String, TestingError> {
        four_letter_word(self.addr(), word, FOUR_LETTER_TIMEOUT)
    }

    /// The server's mode from `srvr`: `"standalone"`, `"leader"`, `"follower"`; `None` when it is
    /// stopped, paused, or not serving (e.g. during a leader election).
    pub fn mode(&self) -> Option<String> {
        if !self.is_running() || self.is_paused() {
            return None;
        }
        self.mode_with_timeout(FOUR_LETTER_TIMEOUT)
    }

    /// The last `lines` lines of the server's log.
    pub fn log_tail(&self, lines: usize) -> String {
        tail_of_file(&self.log_path(), lines)
    }
}

impl Drop for ZkServer {
    fn drop(&mut self) {
        // Gone before the data directory is removed (JvmProcess's drop says how).
        drop(self.process().take());
    }
}

/// Settings for a [`ZkServer`]; from [`ZkServer::builder`].
#[derive(Debug, Clone)]
pub struct ZkServerBuilder {
    settings: Settings,
}

/// Builder methods shared by [`ZkServerBuilder`] and [`ZkEnsembleBuilder`](super::ZkEnsembleBuilder).
macro_rules! settings_methods {
    () => {
        /// The server tick (`tickTime`). Default 200 ms. Session timeouts are clamped to
        /// 2..20 ticks.
        #[must_use]
        pub fn tick_time(mut self, tick: std::time::Duration) -> Self {
            self.settings.tick_time = tick;
            self
        }

        /// Whether the server fsyncs its transaction log (`forceSync`). Default `false`: a
        /// throw-away test server has nothing to keep, and the server answers a client's ping
        /// only behind its pending syncs, so one slow fsync on a busy disk would look to the
        /// client like a partition. Set `true` to measure or test with production durability.
        #[must_use]
        pub fn force_sync(mut self, force_sync: bool) -> Self {
            self.settings.force_sync = force_sync;
            self
        }

        /// Adds a JVM system property (`-Dkey=value`), e.g.
        /// `("znode.container.checkIntervalMs", "100")` to reap empty containers quickly.
        #[must_use]
        pub fn system_property(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
            self.settings.system_properties.push((key.into(), value.into()));
            self
        }

        /// Adds a `key=value` line to the server's `zoo.cfg`, e.g. `("maxSessionTimeout", "60000")`.
        #[must_use]
        pub fn config(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
            self.settings.config.push((key.into(), value.into()));
            self
        }

        /// How long a start (or restart) may take before it fails with the log tail. Default 60 s:
        /// a JVM on a loaded 2-core machine has been measured to need more than 30 s.
        #[must_use]
        pub fn start_timeout(mut self, timeout: std::time::Duration) -> Self {
            self.settings.start_timeout = timeout;
            self
        }

        /// The JVM's maximum heap in MiB (`-Xmx`). Default 256.
        #[must_use]
        pub fn max_heap_mb(mut self, mb: u32) -> Self {
            self.settings.max_heap_mb = mb.max(16);
            self
        }

        /// Whether to favour JVM start-up time over peak speed (`-XX:TieredStopAtLevel=1`).
        /// Default `true`; turn it off for benchmarks.
        #[must_use]
        pub fn fast_startup(mut self, fast: bool) -> Self {
            self.settings.fast_startup = fast;
            self
        }

        /// Serves TLS on a second client port of every server
        /// ([`ZkServer::secure_port`](crate::ZkServer::secure_port)), with a certificate `ca`
        /// issues for loopback, and trusts `ca` for client certificates. Servers ask clients
        /// for a certificate but do not require one; see
        /// [`tls_client_auth`](Self::tls_client_auth). The connection factory becomes Netty's,
        /// the one ZooKeeper serves TLS with. Only client connections use TLS, not the quorum's.
        #[must_use]
        pub fn tls(mut self, ca: &$crate::TestCa) -> Self {
            match ca.issue("zookeeper-server") {
                Ok(identity) => $crate::server::set_tls(&mut self.settings, &identity, ca.cert_pem()),
                Err(e) => self.settings.invalid = Some(e.to_string()),
            }
            self
        }

        /// Like [`tls`](Self::tls), with a certificate of the caller's (e.g. one for another
        /// host name, an expired one, or one from another authority: see
        /// [`TestCa::issue_with`](crate::TestCa::issue_with)) and the PEM certificates to trust
        /// for clients.
        #[must_use]
        pub fn tls_with(mut self, identity: &$crate::TestIdentity, trusted_pem: &str) -> Self {
            $crate::server::set_tls(&mut self.settings, identity, trusted_pem);
            self
        }

        /// Whether the TLS port asks for client certificates (default
        /// [`ClientAuth::Want`](crate::ClientAuth::Want)). Call after [`tls`](Self::tls).
        #[must_use]
        pub fn tls_client_auth(mut self, client_auth: $crate::ClientAuth) -> Self {
            match self.settings.tls.as_mut() {
                Some(tls) => tls.client_auth = client_auth,
                None => self.settings.invalid = Some("tls_client_auth needs tls(...) first".into()),
            }
            self
        }

        /// Adds a SASL DIGEST-MD5 user: servers get a JAAS `Server` section with a
        /// `DigestLoginModule` listing its users, and ZooKeeper's SASL authentication provider,
        /// so clients may authenticate as these users and lock nodes may carry `sasl:<user>`
        /// ACLs. Clients without SASL are still served (ZooKeeper's default).
        #[must_use]
        pub fn sasl_user(mut self, user: &str, password: &str) -> Self {
            match $crate::server::check_sasl_user(user, password) {
                Ok(()) => self
                    .settings
                    .sasl_users
                    .push((user.to_owned(), password.to_owned())),
                Err(why) => self.settings.invalid = Some(why),
            }
            self
        }
    };
}
pub(crate) use settings_methods;

impl ZkServerBuilder {
    settings_methods!();

    /// Starts the server and waits until it serves.
    pub fn start(mut self) -> Result<ZkServer, TestingError> {
        if let Some(why) = self.settings.invalid.take() {
            return Err(TestingError::InvalidArgument(why));
        }
        let settings = Arc::new(self.settings);
        let mut attempt = 0;
        loop {
            attempt += 1;
            let secure_port = match settings.tls {
                Some(_) => Some(free_port()?),
                None => None,
            };
            let server = ZkServer::prepare(settings.clone(), Role::Standalone, free_port()?, secure_port)?;
            server.spawn()?;
            match server.wait_ready(Instant::now() + settings.start_timeout) {
                Ok(()) => return Ok(server),
                Err(e) if attempt < PORT_ATTEMPTS && server.lost_port_race() => {
                    tracing::debug!("retrying on a fresh port: {e}");
                }
                Err(e) => return Err(e),
            }
        }
    }
}
