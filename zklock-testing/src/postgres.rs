//! A throw-away PostgreSQL server in a child process: [`PgServer`] and its builder.
//!
//! The server binaries come from the installed PostgreSQL (Debian's `postgresql` package puts
//! them in `/usr/lib/postgresql/<version>/bin`), or from `$PG_BINDIR`. Each server gets its own
//! cluster, made by `initdb` in a temporary directory, and runs the `postgres` binary directly as
//! a child process, so that it can be stopped with a signal and dies with the test process.
//!
//! PostgreSQL refuses to run as root. When the tests run as root, `initdb` and `postgres` run as
//! the unprivileged `postgres` user (the Debian package creates it), which then owns the
//! temporary directory.

use std::ffi::CString;
use std::fs::{self, File};
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4, TcpStream};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Mutex, MutexGuard};
use std::thread;
use std::time::{Duration, Instant};

use tempfile::TempDir;

use super::error::TestingError;
use super::java::{spawn_tied_to_process, tail_of_file};
use super::ports::free_port;
use super::server::KEEP_DIRS_ENV;
use super::startup::wait_ready;

/// The superuser `initdb` creates; every connection logs in as this role, without a password.
const SUPERUSER: &str = "zklock";
/// Where Debian's `postgresql-<version>` packages put the server binaries, one directory per
/// major version.
const DEBIAN_ROOT: &str = "/usr/lib/postgresql";
/// A directory holding `initdb` and `postgres`, used instead of searching for them.
const BINDIR_ENV: &str = "PG_BINDIR";
/// The unprivileged user the server runs as when the tests run as root.
const RUN_AS_USER: &str = "postgres";
/// How long an immediate shutdown (SIGQUIT) may take before the postmaster is SIGKILLed.
const STOP_GRACE: Duration = Duration::from_secs(5);
/// How long a readiness probe may take.
const PROBE_TIMEOUT: Duration = Duration::from_millis(1000);
/// How many times a start is retried on a fresh port when another process took the port first.
const PORT_ATTEMPTS: usize = 3;
/// Lines of server log quoted in errors.
const LOG_LINES_IN_ERRORS: usize = 40;
/// What the postmaster logs once it accepts connections (`lc_messages` is `C`: `initdb
/// --locale=C` writes it into `postgresql.conf`).
const READY_LINE: &str = "database system is ready to accept connections";

/// A throw-away PostgreSQL server on a free loopback port, with its own cluster in a temporary
/// directory.
///
/// `initdb` creates the cluster (trust authentication, superuser `zklock`, UTF-8, locale `C`,
/// no fsync), then the `postgres` binary runs as a child process with durability switched off
/// (`fsync`, `synchronous_commit` and `full_page_writes` off) and small memory settings, listening
/// on `127.0.0.1` and on a Unix socket inside the temporary directory. Every process it starts
/// inherits this process's environment.
///
/// Dropping the handle shuts the server down (SIGQUIT, an immediate shutdown that also ends
/// every backend; SIGKILL if that takes more than 5 s) and removes the directory, also while a
/// test unwinds from a panic; if the whole test process dies, the kernel kills the postmaster with
/// it, and its backends exit as soon as they notice.
///
/// Starting takes about a second (mostly `initdb`) and blocks; from an async test, call it
/// through `tokio::task::spawn_blocking`. Tests can share one server and each use a database of
/// its own ([`create_database`](Self::create_database)), or start a server each.
///
/// When the tests run as root, `initdb` and `postgres` run as the system user `postgres`, which
/// then owns the temporary directory (so `TMPDIR` must be reachable for that user).
///
/// # Examples
///
/// ```no_run
/// use zklock_testing::PgServer;
///
/// let server = PgServer::start()?;
/// let url = server.create_database("shop")?; // postgres://zklock@127.0.0.1:PORT/shop
/// assert_eq!(server.psql("shop", "select 1 + 1")?, "2");
/// # let _ = url;
/// # Ok::<(), zklock_testing::TestingError>(())
/// ```
#[derive(Debug)]
pub struct PgServer {
    name: String,
    bin_dir: PathBuf,
    port: u16,
    dir: TempDir,
    process: Mutex<Option<Postmaster>>,
}

impl PgServer {
    /// Starts a server with the default settings and waits until it accepts connections.
    ///
    /// # Errors
    ///
    /// [`TestingError::PostgresNotInstalled`] when no `initdb` and `postgres` are found (run
    /// `scripts/install-deps.sh`), [`TestingError::NoUnprivilegedUser`] when running as root
    /// and there is no `postgres` user, [`TestingError::Exited`] or
    /// [`TestingError::StartTimeout`] with the log when `initdb` or the server fails.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// let server = zklock_testing::PgServer::start()?;
    /// println!("PostgreSQL at {}", server.url());
    /// # Ok::<(), zklock_testing::TestingError>(())
    /// ```
    pub fn start() -> Result<PgServer, TestingError> {
        PgServer::builder().start()
    }

    /// A builder for a server with non-default settings.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// use std::time::Duration;
    /// let server = zklock_testing::PgServer::builder()
    ///     .config("max_connections", "200")
    ///     .config("log_statement", "all")
    ///     .start_timeout(Duration::from_secs(30))
    ///     .start()?;
    /// # Ok::<(), zklock_testing::TestingError>(())
    /// ```
    pub fn builder() -> PgServerBuilder {
        PgServerBuilder {
            bin_dir: None,
            config: Vec::new(),
            start_timeout: Duration::from_secs(60),
        }
    }

    /// The URL of the `postgres` database, as the superuser without a password:
    /// `postgres://zklock@127.0.0.1:PORT/postgres`.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// let server = zklock_testing::PgServer::start()?;
    /// assert!(server.url().ends_with("/postgres"));
    /// # Ok::<(), zklock_testing::TestingError>(())
    /// ```
    pub fn url(&self) -> String {
        self.database_url("postgres")
    }

    /// The URL of database `database` on this server (which may not exist yet; see
    /// [`create_database`](Self::create_database)).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// let server = zklock_testing::PgServer::start()?;
    /// let url = server.database_url("shop");
    /// assert_eq!(url, format!("postgres://zklock@127.0.0.1:{}/shop", server.port()));
    /// # Ok::<(), zklock_testing::TestingError>(())
    /// ```
    pub fn database_url(&self, database: &str) -> String {
        format!("postgres://{SUPERUSER}@127.0.0.1:{}/{database}", self.port)
    }

    /// Creates an empty database and returns its URL, so that tests sharing a server do not see
    /// each other's tables.
    ///
    /// # Errors
    ///
    /// [`TestingError::InvalidArgument`] unless `name` is 1 to 63 lowercase ASCII letters,
    /// digits and underscores, starting with a letter or underscore;
    /// [`TestingError::CommandFailed`] when the database exists already or the server does not
    /// answer.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// let server = zklock_testing::PgServer::start()?;
    /// let orders = server.create_database("orders_test")?;
    /// let stock = server.create_database("stock_test")?;
    /// assert_ne!(orders, stock);
    /// # Ok::<(), zklock_testing::TestingError>(())
    /// ```
    pub fn create_database(&self, name: &str) -> Result<String, TestingError> {
        let valid = (1..=63).contains(&name.len())
            && name
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_')
            && !name.as_bytes()[0].is_ascii_digit();
        if !valid {
            return Err(TestingError::InvalidArgument(format!(
                "{name:?} is not a plain database name (1 to 63 of a-z, 0-9 and _, not starting with a digit)"
            )));
        }
        self.psql("postgres", &format!("CREATE DATABASE \"{name}\""))?;
        Ok(self.database_url(name))
    }

    /// Runs `sql` in database `database` with `psql` as the superuser, and returns what it
    /// printed: unaligned, without headers or a row count, one row per line, columns separated
    /// by `|`, with the final newline removed.
    ///
    /// # Errors
    ///
    /// [`TestingError::CommandFailed`] with `psql`'s messages when a statement fails or the
    /// server cannot be reached.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// let server = zklock_testing::PgServer::start()?;
    /// server.psql("postgres", "CREATE TABLE t (n int); INSERT INTO t VALUES (1), (2)")?;
    /// assert_eq!(server.psql("postgres", "SELECT n FROM t ORDER BY n")?, "1\n2");
    /// # Ok::<(), zklock_testing::TestingError>(())
    /// ```
    pub fn psql(&self, database: &str, sql: &str) -> Result<String, TestingError> {
        let psql = self.bin_dir.join("psql");
        let mut command = Command::new(if psql.is_file() { psql } else { PathBuf::from("psql") });
        command
            .args(["-X", "-q", "-A", "-t", "-v", "ON_ERROR_STOP=1", "-h", "127.0.0.1"])
            .args(["-p", &self.port.to_string(), "-U", SUPERUSER, "-d", database, "-c", sql])
            .env("PGCONNECT_TIMEOUT", "10")
            .env_remove("PGOPTIONS")
            .stdin(Stdio::null());
        let what = format!("psql -d {database} -c {sql:?}");
        // One statement of a test: a minute means it waits on something that will not come.
        let output = crate::process::output_within(&mut command, std::time::Duration::from_secs(60))
            .map_err(|e| TestingError::io(format!("run {what}"), e))?;
        let stdout = String::from_utf8_lossy(&output.stdout);
        if !output.status.success() {
            return Err(TestingError::CommandFailed {
                command: what,
                status: output.status.to_string(),
                output: format!("{}{stdout}", String::from_utf8_lossy(&output.stderr)),
            });
        }
        Ok(stdout.strip_suffix('\n').unwrap_or(&stdout).to_string())
    }

    /// The TCP port the server listens on (on 127.0.0.1).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// let server = zklock_testing::PgServer::start()?;
    /// assert!(server.url().contains(&format!(":{}/", server.port())));
    /// # Ok::<(), zklock_testing::TestingError>(())
    /// ```
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The server's TCP address, `127.0.0.1:PORT`, e.g. for a
    /// [`FaultProxy`](super::FaultProxy) in front of it.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// let server = zklock_testing::PgServer::start()?;
    /// let proxy = zklock_testing::FaultProxy::start(server.addr())?;
    /// # let _ = proxy;
    /// # Ok::<(), zklock_testing::TestingError>(())
    /// ```
    pub fn addr(&self) -> SocketAddr {
        SocketAddr::V4(SocketAddrV4::new(Ipv4Addr::LOCALHOST, self.port))
    }

    /// The superuser every URL logs in as (`zklock`; trust authentication, no password).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// let server = zklock_testing::PgServer::start()?;
    /// assert_eq!(server.user(), "zklock");
    /// # Ok::<(), zklock_testing::TestingError>(())
    /// ```
    pub fn user(&self) -> &str {
        SUPERUSER
    }

    /// The directory of the server's binaries (`initdb`, `postgres`, and beside them, with
    /// Debian's packages, `psql`, `pg_dump` and the other client programs).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// let server = zklock_testing::PgServer::start()?;
    /// let dump = std::process::Command::new(server.bin_dir().join("pg_dump"))
    ///     .arg(server.url())
    ///     .output()?;
    /// # let _ = dump;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn bin_dir(&self) -> &Path {
        &self.bin_dir
    }

    /// The pid of the postmaster while it runs.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// let server = zklock_testing::PgServer::start()?;
    /// assert!(server.pid().is_some());
    /// # Ok::<(), zklock_testing::TestingError>(())
    /// ```
    pub fn pid(&self) -> Option<u32> {
        let mut process = self.process();
        let p = process.as_mut()?;
        p.exit_status().is_none().then(|| p.child.id())
    }

    /// Whether the postmaster is alive.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// let server = zklock_testing::PgServer::start()?;
    /// server.stop();
    /// assert!(!server.is_running());
    /// # Ok::<(), zklock_testing::TestingError>(())
    /// ```
    pub fn is_running(&self) -> bool {
        self.pid().is_some()
    }

    /// Shuts the server down at once (SIGQUIT, an immediate shutdown; SIGKILL after 5 s), so
    /// that clients see the database go away. The directory stays until the handle is dropped.
    /// Stopping a stopped server does nothing.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// let server = zklock_testing::PgServer::start()?;
    /// server.stop(); // connections to server.url() are refused from now on
    /// # Ok::<(), zklock_testing::TestingError>(())
    /// ```
    pub fn stop(&self) {
        if let Some(mut p) = self.process().take() {
            p.shut_down(STOP_GRACE);
        }
    }

    /// The directory holding the cluster (`data/`), the Unix socket, and the logs of `initdb`
    /// (`initdb.log`) and of the server (`server.log`). Removed when the server is dropped,
    /// unless `ZKLOCK_TESTING_KEEP_DIRS` is set.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// let server = zklock_testing::PgServer::start()?;
    /// assert!(server.dir().join("data/PG_VERSION").is_file());
    /// # Ok::<(), zklock_testing::TestingError>(())
    /// ```
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// The last `lines` lines of the server's log.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// let server = zklock_testing::PgServer::start()?;
    /// assert!(server.log_tail(10).contains("ready to accept connections"));
    /// # Ok::<(), zklock_testing::TestingError>(())
    /// ```
    pub fn log_tail(&self, lines: usize) -> String {
        tail_of_file(&self.log_path(), lines)
    }

    fn data_dir(&self) -> PathBuf {
        self.dir.path().join("data")
    }

    fn log_path(&self) -> PathBuf {
        self.dir.path().join("server.log")
    }

    fn process(&self) -> MutexGuard<'_, Option<Postmaster>> {
        self.process.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Starts `postgres` on `self.port` and waits until it accepts connections.
    fn run(
        &self,
        settings: &[(String, String)],
        run_as: Option<&RunAs>,
        deadline: Instant,
    ) -> Result<(), TestingError> {
        let log = self.log_path();
        let log_start = fs::metadata(&log).map(|m| m.len()).unwrap_or(0);
        let mut command = Command::new(self.bin_dir.join("postgres"));
        command
            .arg("-D")
            .arg(self.data_dir())
            .args(["-p", &self.port.to_string()])
            .arg("-k")
            .arg(self.dir.path());
        for (key, value) in settings {
            command.arg("-c").arg(format!("{key}={value}"));
        }
        let child = spawn_logged(command, run_as, self.dir.path(), &log)?;
        *self.process() = Some(Postmaster { child });

        wait_ready(
            &self.name,
            deadline,
            Duration::from_millis(20),
            || self.process().as_mut().and_then(Postmaster::exit_status),
            || {
                log_since(&log, log_start).contains(READY_LINE)
                    && TcpStream::connect_timeout(&self.addr(), PROBE_TIMEOUT).is_ok()
            },
            || self.log_tail(LOG_LINES_IN_ERRORS),
        )
    }

    /// Whether the server's last start failed because its port was taken.
    fn lost_port_race(&self) -> bool {
        let log = tail_of_file(&self.log_path(), 40);
        log.contains("Address already in use") || log.contains("could not create any TCP/IP sockets")
    }
}

impl Drop for PgServer {
    fn drop(&mut self) {
        // Stop before the directory is removed.
        self.stop();
    }
}

/// Settings for a [`PgServer`]; from [`PgServer::builder`].
///
/// # Examples
///
/// ```no_run
/// let server = zklock_testing::PgServer::builder()
///     .config("log_min_duration_statement", "0") // log every statement with its duration
///     .start()?;
/// # Ok::<(), zklock_testing::TestingError>(())
/// ```
#[derive(Debug, Clone)]
pub struct PgServerBuilder {
    bin_dir: Option<PathBuf>,
    config: Vec<(String, String)>,
    start_timeout: Duration,
}

impl PgServerBuilder {
    /// Takes `initdb`, `postgres` and `psql` from this directory instead of searching `$PG_BINDIR`,
    /// `/usr/lib/postgresql/<newest version>/bin`, `pg_config --bindir` and `PATH`.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// let server = zklock_testing::PgServer::builder()
    ///     .bin_dir("/usr/lib/postgresql/15/bin")
    ///     .start()?;
    /// # Ok::<(), zklock_testing::TestingError>(())
    /// ```
    #[must_use]
    pub fn bin_dir(mut self, dir: impl Into<PathBuf>) -> Self {
        self.bin_dir = Some(dir.into());
        self
    }

    /// Sets a server parameter (`postgres -c key=value`), after and over the defaults
    /// (`fsync=off`, `shared_buffers=16MB`, `max_connections=100`, ...).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// let server = zklock_testing::PgServer::builder()
    ///     .config("default_transaction_isolation", "serializable")
    ///     .start()?;
    /// # Ok::<(), zklock_testing::TestingError>(())
    /// ```
    #[must_use]
    pub fn config(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        self.config.push((key.into(), value.into()));
        self
    }

    /// How long `initdb` and the start may take together before the start fails with the log
    /// tail. Default 60 s.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// use std::time::Duration;
    /// let server = zklock_testing::PgServer::builder()
    ///     .start_timeout(Duration::from_secs(120)) // a slow CI machine
    ///     .start()?;
    /// # Ok::<(), zklock_testing::TestingError>(())
    /// ```
    #[must_use]
    pub fn start_timeout(mut self, timeout: Duration) -> Self {
        self.start_timeout = timeout;
        self
    }

    /// Creates the cluster, starts the server and waits until it accepts connections.
    ///
    /// # Errors
    ///
    /// As [`PgServer::start`].
    ///
    /// # Examples
    ///
    /// ```no_run
    /// let server = zklock_testing::PgServer::builder().start()?;
    /// # let _ = server;
    /// # Ok::<(), zklock_testing::TestingError>(())
    /// ```
    pub fn start(self) -> Result<PgServer, TestingError> {
        let deadline = Instant::now() + self.start_timeout;
        let bin_dir = find_bin_dir(self.bin_dir.as_deref())?;
        let run_as = run_as()?;
        let dir = tempfile::Builder::new()
            .prefix("zklock-pg-")
            .disable_cleanup(std::env::var_os(KEEP_DIRS_ENV).is_some())
            .tempdir()
            .map_err(|e| TestingError::io("create a temporary PostgreSQL directory", e))?;
        if let Some(user) = &run_as {
            std::os::unix::fs::chown(dir.path(), Some(user.uid), Some(user.gid))
                .map_err(|e| TestingError::io(format!("hand {} to user {}", dir.path().display(), user.name), e))?;
        }
        init_cluster(&bin_dir, dir.path(), run_as.as_ref(), deadline)?;

        let mut settings: Vec<(String, String)> = [
            ("listen_addresses", "127.0.0.1"),
            // A throw-away cluster has nothing to keep.
            ("fsync", "off"),
            ("synchronous_commit", "off"),
            ("full_page_writes", "off"),
            ("shared_buffers", "16MB"),
            ("max_connections", "100"),
            ("max_wal_size", "256MB"),
            // Dynamic shared memory in files under data/, removed with the directory, instead
            // of segments in /dev/shm that a killed server would leave behind.
            ("dynamic_shared_memory_type", "mmap"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
        // Shown in the process titles of the server's backends (`postgres: <cluster_name>:
        // ...`), whose environment is overwritten by those titles: it carries the marker of a
        // test run, so the survivors of one can be found.
        let cluster_name = match std::env::var("ZKLOCK_TEST_RUN") {
            Ok(marker) if !marker.is_empty() => format!("zklock-testing/{marker}"),
            _ => "zklock-testing".to_string(),
        };
        settings.push(("cluster_name".to_string(), cluster_name));
        settings.extend(self.config);

        let mut server = PgServer {
            name: String::new(),
            bin_dir,
            port: 0,
            dir,
            process: Mutex::new(None),
        };
        let mut attempt = 0;
        loop {
            attempt += 1;
            server.port = free_port()?;
            server.name = format!("PostgreSQL server 127.0.0.1:{}", server.port);
            match server.run(&settings, run_as.as_ref(), deadline) {
                Ok(()) => return Ok(server),
                Err(e) if attempt < PORT_ATTEMPTS && server.lost_port_race() => {
                    server.stop();
                    tracing::debug!("retrying on a fresh port: {e}");
                }
                Err(e) => return Err(e),
            }
        }
    }
}

/// The postmaster process. Shut down on drop.
#[derive(Debug)]
struct Postmaster {
    child: Child,
}

impl Postmaster {
    /// `Some(description)` once the process has exited.
    fn exit_status(&mut self) -> Option<String> {
        match self.child.try_wait() {
            Ok(Some(status)) => Some(status.to_string()),
            Ok(None) => None,
            Err(e) => Some(format!("unknown ({e})")),
        }
    }

    /// SIGQUIT (immediate shutdown: the postmaster ends its backends, waits for them and
    /// exits), then SIGKILL if it has not exited within `grace`.
    fn shut_down(&mut self, grace: Duration) {
        if self.exit_status().is_some() {
            return;
        }
        // SAFETY: plain syscall on a pid we own and have not reaped yet.
        unsafe { libc::kill(self.child.id() as libc::pid_t, libc::SIGQUIT) };
        if wait_until(&mut self.child, Instant::now() + grace).is_none() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

impl Drop for Postmaster {
    fn drop(&mut self) {
        self.shut_down(STOP_GRACE);
    }
}

/// The user the server processes run as when this process runs as root.
#[derive(Debug, Clone)]
struct RunAs {
    name: String,
    uid: u32,
    gid: u32,
}

/// `None` when the server can run as the current user; the `postgres` user when running as
/// root, which PostgreSQL refuses.
fn run_as() -> Result<Option<RunAs>, TestingError> {
    // SAFETY: geteuid cannot fail and has no side effects.
    if unsafe { libc::geteuid() } != 0 {
        return Ok(None);
    }
    match lookup_user(RUN_AS_USER) {
        Some((uid, gid)) if uid != 0 => Ok(Some(RunAs {
            name: RUN_AS_USER.to_string(),
            uid,
            gid,
        })),
        _ => Err(TestingError::NoUnprivilegedUser {
            user: RUN_AS_USER.to_string(),
        }),
    }
}

/// The uid and primary gid of the user `name`.
fn lookup_user(name: &str) -> Option<(u32, u32)> {
    let name = CString::new(name).ok()?;
    let mut buf = vec![0 as libc::c_char; 16 * 1024];
    // SAFETY: passwd is plain old data; getpwnam_r fills it (with pointers into buf, which we
    // do not use after buf is dropped) and writes the result pointer.
    unsafe {
        let mut entry: libc::passwd = std::mem::zeroed();
        let mut result: *mut libc::passwd = std::ptr::null_mut();
        let rc = libc::getpwnam_r(name.as_ptr(), &mut entry, buf.as_mut_ptr(), buf.len(), &mut result);
        (rc == 0 && !result.is_null()).then_some((entry.pw_uid, entry.pw_gid))
    }
}

/// The directory holding `initdb` and `postgres`: `explicit`, else `$PG_BINDIR`, else the newest
/// `/usr/lib/postgresql/<version>/bin`, else `pg_config --bindir`, else the `PATH` entry holding
/// `initdb`.
fn find_bin_dir(explicit: Option<&Path>) -> Result<PathBuf, TestingError> {
    let has_server = |dir: &Path| dir.join("initdb").is_file() && dir.join("postgres").is_file();
    let not_found = |searched: String| TestingError::PostgresNotInstalled { searched };
    if let Some(dir) = explicit {
        return if has_server(dir) {
            Ok(dir.to_path_buf())
        } else {
            Err(not_found(dir.display().to_string()))
        };
    }
    if let Some(dir) = std::env::var_os(BINDIR_ENV).filter(|d| !d.is_empty()) {
        let dir = PathBuf::from(dir);
        return if has_server(&dir) {
            Ok(dir)
        } else {
            Err(not_found(format!("{} ({BINDIR_ENV})", dir.display())))
        };
    }
    let mut versions: Vec<(Vec<u32>, PathBuf)> = fs::read_dir(DEBIAN_ROOT)
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|entry| {
            let name = entry.file_name().to_string_lossy().into_owned();
            let version: Option<Vec<u32>> = name.split('.').map(|part| part.parse().ok()).collect();
            Some((version?, entry.path().join("bin")))
        })
        .filter(|(_, bin)| has_server(bin))
        .collect();
    versions.sort();
    if let Some((_, bin)) = versions.pop() {
        return Ok(bin);
    }
    if let Ok(output) = Command::new("pg_config").arg("--bindir").stderr(Stdio::null()).output() {
        let dir = PathBuf::from(String::from_utf8_lossy(&output.stdout).trim());
        if output.status.success() && has_server(&dir) {
            return Ok(dir);
        }
    }
    let path = std::env::var_os("PATH").unwrap_or_default();
    if let Some(dir) = std::env::split_paths(&path).find(|dir| has_server(dir)) {
        return Ok(dir);
    }
    Err(not_found(format!(
        "{DEBIAN_ROOT}/*/bin, `pg_config --bindir` and PATH; {BINDIR_ENV} is not set"
    )))
}

/// Runs `initdb` for a cluster in `dir/data`, with its output in `dir/initdb.log`.
fn init_cluster(bin_dir: &Path, dir: &Path, run_as: Option<&RunAs>, deadline: Instant) -> Result<(), TestingError> {
    let log = dir.join("initdb.log");
    let mut command = Command::new(bin_dir.join("initdb"));
    command
        .arg("-D")
        .arg(dir.join("data"))
        .args(["-U", SUPERUSER, "-A", "trust", "-E", "UTF8", "--locale=C"])
        .args(["--no-sync", "--no-instructions"]);
    let began = Instant::now();
    let mut child = spawn_logged(command, run_as, dir, &log)?;
    let what = format!("initdb in {}", dir.display());
    let status = match wait_until(&mut child, deadline) {
        Some(status) => status,
        None => {
            let _ = child.kill();
            let _ = child.wait();
            return Err(TestingError::StartTimeout {
                what,
                waited: began.elapsed(),
                log_tail: tail_of_file(&log, LOG_LINES_IN_ERRORS),
            });
        }
    };
    if status.success() {
        return Ok(());
    }
    Err(TestingError::Exited {
        what,
        status: status.to_string(),
        log_tail: tail_of_file(&log, LOG_LINES_IN_ERRORS),
    })
}

/// Spawns `command` in `cwd` as `run_as` (or the current user), with stdout and stderr appended
/// to `log`, tied to this process so that it dies with it.
fn spawn_logged(mut command: Command, run_as: Option<&RunAs>, cwd: &Path, log: &Path) -> Result<Child, TestingError> {
    let open = |e| TestingError::io(format!("open log file {}", log.display()), e);
    let log_file = File::options().create(true).append(true).open(log).map_err(open)?;
    let log_err = log_file.try_clone().map_err(open)?;
    command
        .current_dir(cwd)
        .stdin(Stdio::null())
        .stdout(Stdio::from(log_file))
        .stderr(Stdio::from(log_err));
    if let Some(user) = run_as {
        // The death signal is set after the switch (std runs pre_exec hooks after setuid),
        // so the switch does not clear it.
        command.uid(user.uid).gid(user.gid);
    }
    let program = command.get_program().to_string_lossy().into_owned();
    spawn_tied_to_process(command).map_err(|e| TestingError::io(format!("spawn {program}"), e))
}

/// Waits for `child` until `deadline`; `None` if it still runs then.
fn wait_until(child: &mut Child, deadline: Instant) -> Option<ExitStatus> {
    loop {
        match child.try_wait() {
            Ok(Some(status)) => return Some(status),
            Ok(None) if Instant::now() < deadline => thread::sleep(Duration::from_millis(10)),
            Ok(None) => return None,
            Err(_) => return child.wait().ok(),
        }
    }
}

/// What was appended to the log at `path` after its first `start` bytes.
fn log_since(path: &Path, start: u64) -> String {
    let bytes = fs::read(path).unwrap_or_default();
    let start = (start as usize).min(bytes.len());
    String::from_utf8_lossy(&bytes[start..]).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_explicit_directory_without_the_binaries_is_reported() {
        let err = find_bin_dir(Some(Path::new("/nonexistent/bin"))).expect_err("nothing there");
        let message = err.to_string();
        assert!(message.contains("/nonexistent/bin"), "{message}");
        assert!(message.contains("scripts/install-deps.sh"), "{message}");
    }

    #[test]
    fn the_log_is_read_from_an_offset() {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("log");
        fs::write(&path, "old line\nnew line\n").expect("write");
        assert_eq!(log_since(&path, 9), "new line\n");
        assert_eq!(log_since(&path, 1000), "");
        assert_eq!(log_since(&dir.path().join("missing"), 0), "");
    }
}
