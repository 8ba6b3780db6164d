//! The error type of the test support.

use std::io;
use std::time::Duration;

/// Why a test server, ensemble or proxy could not do what was asked.
///
/// Errors about a server that did not come up carry the tail of its log, so a failing test shows
/// the server's own explanation.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TestingError {
    /// No ZooKeeper server jars were found: `ZOOKEEPER_HOME` is not set and Debian's
    /// `/usr/share/java/zookeeper.jar` is not there.
    #[error(
        "ZooKeeper server jars not found (looked for {searched}). Install them: on Debian or \
         Ubuntu, `apt-get install zookeeper` (it puts the jars in /usr/share/java and pulls in a \
         Java runtime); anywhere else, unpack an Apache ZooKeeper 3.8 release \
         (apache-zookeeper-3.8.x-bin.tar.gz) and set ZOOKEEPER_HOME to its directory. (In the \
         zklock repository, scripts/install-deps.sh installs everything its tests need.)"
    )]
    ServerNotInstalled {
        /// The places that were searched.
        searched: String,
    },
    /// `ZOOKEEPER_HOME` is set, but no ZooKeeper server jar is where a release or a source
    /// build keeps it. It is not ignored in favour of another installation: the user asked for
    /// this one.
    #[error(
        "ZOOKEEPER_HOME is set to {home}, but it holds no ZooKeeper server jar (looked for \
         {looked_for}). Point ZOOKEEPER_HOME at an unpacked Apache ZooKeeper 3.8 release (the \
         apache-zookeeper-3.8.x-bin.tar.gz one: its lib/ holds zookeeper-3.8.x.jar and the jars \
         it needs), or unset it to use Debian's packaged server (`apt-get install zookeeper`)."
    )]
    ZookeeperHomeWithoutJars {
        /// The value of `ZOOKEEPER_HOME`.
        home: String,
        /// The jar patterns that matched nothing.
        looked_for: String,
    },
    /// No `java` launcher was found, neither in `JAVA_HOME` nor on `PATH`.
    #[error(
        "no `java` launcher found: JAVA_HOME is {java_home}, and no directory of PATH holds \
         `java` (PATH={path}). ZooKeeper test servers run in a JVM: install Java (on Debian or \
         Ubuntu, `apt-get install default-jdk-headless`, which also has the `javac` the Curator \
         peer is compiled with; `default-jre-headless` is enough for servers alone) or set \
         JAVA_HOME to the directory of a JDK or JRE (the one holding bin/java). (In the zklock \
         repository, scripts/install-deps.sh installs everything its tests need.)"
    )]
    JavaNotFound {
        /// What `JAVA_HOME` was: `not set`, or the directory it names and why it did not do.
        java_home: String,
        /// The value of `PATH` that was searched.
        path: String,
    },
    /// No PostgreSQL server binaries (`initdb`, `postgres`) were found.
    #[error(
        "PostgreSQL server binaries (initdb, postgres) not found (looked in {searched}). Install \
         them (on Debian or Ubuntu, `apt-get install postgresql`) or set PG_BINDIR to the \
         directory holding initdb and postgres. (In the zklock repository, \
         scripts/install-deps.sh installs everything its tests need.)"
    )]
    PostgresNotInstalled {
        /// The places that were searched.
        searched: String,
    },
    /// No Redis server binary (`redis-server`) was found.
    #[error(
        "Redis server binary (redis-server) not found (looked at {searched}). Install it (on \
         Debian or Ubuntu, `apt-get install redis-server`) or set REDIS_SERVER to its path. (In \
         the zklock repository, scripts/install-deps.sh installs everything its tests need.)"
    )]
    RedisNotInstalled {
        /// The places that were searched.
        searched: String,
    },
    /// No Prometheus server binary (`prometheus`) was found.
    #[error(
        "Prometheus server binary (prometheus) not found (looked at {searched}). Install it (on \
         Debian or Ubuntu, `apt-get install prometheus`) or set PROMETHEUS to its path. (In the \
         zklock repository, scripts/install-deps.sh installs everything its tests need.)"
    )]
    PrometheusNotInstalled {
        /// The places that were searched.
        searched: String,
    },
    /// The tests run as root, which PostgreSQL refuses, and there is no unprivileged user to run
    /// the server as.
    #[error(
        "PostgreSQL refuses to run as root and there is no user `{user}` to run it as: run the \
         tests as an ordinary user, or create the user (on Debian or Ubuntu, \
         `apt-get install postgresql` creates it)"
    )]
    NoUnprivilegedUser {
        /// The user that was looked for.
        user: String,
    },
    /// A helper command (such as `psql`) ran and failed.
    #[error("{command} failed ({status}):\n{output}")]
    CommandFailed {
        /// The command.
        command: String,
        /// Its exit status.
        status: String,
        /// What it printed.
        output: String,
    },
    /// A server did not become ready in time.
    #[error("{what} did not become ready within {waited:?}; last log lines:\n{log_tail}")]
    StartTimeout {
        /// Which server.
        what: String,
        /// How long we waited.
        waited: Duration,
        /// The end of the server's log.
        log_tail: String,
    },
    /// A server process exited while we waited for it.
    #[error("{what} exited ({status}); last log lines:\n{log_tail}")]
    Exited {
        /// Which server.
        what: String,
        /// Its exit status.
        status: String,
        /// The end of the server's log.
        log_tail: String,
    },
    /// An ensemble did not reach a serving quorum in time.
    #[error("ensemble has no serving quorum after {waited:?}; members: {members}")]
    NoQuorum {
        /// How long we waited.
        waited: Duration,
        /// What each member said.
        members: String,
    },
    /// The operation needs a running server, and this one is stopped.
    #[error("{what} is not running")]
    NotRunning {
        /// Which server.
        what: String,
    },
    /// A caller passed an argument that cannot work (member index out of range, empty ensemble, ...).
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
    /// An I/O operation failed.
    #[error("{context}: {source}")]
    Io {
        /// What we were doing.
        context: String,
        /// The underlying error.
        #[source]
        source: io::Error,
    },
}

impl TestingError {
    pub(crate) fn io(context: impl Into<String>, source: io::Error) -> TestingError {
        TestingError::Io {
            context: context.into(),
            source,
        }
    }
}
