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
    /// No ZooKeeper server jars were found.
    #[error(
        "ZooKeeper server jars not found (looked for {searched}); run scripts/install-deps.sh \
         (Debian package `zookeeper`) or set ZOOKEEPER_HOME to an unpacked Apache ZooKeeper release"
    )]
    ServerNotInstalled {
        /// The places that were searched.
        searched: String,
    },
    /// No `java` launcher was found.
    #[error(
        "no `java` found in JAVA_HOME or PATH; run scripts/install-deps.sh (Debian package \
         `openjdk-17-jdk-headless`)"
    )]
    JavaNotFound,
    /// No PostgreSQL server binaries (`initdb`, `postgres`) were found.
    #[error(
        "PostgreSQL server binaries (initdb, postgres) not found (looked in {searched}); run \
         scripts/install-deps.sh (Debian package `postgresql`) or set PG_BINDIR to the directory \
         holding them"
    )]
    PostgresNotInstalled {
        /// The places that were searched.
        searched: String,
    },
    /// The tests run as root, which PostgreSQL refuses, and there is no unprivileged user to run
    /// the server as.
    #[error(
        "PostgreSQL refuses to run as root and there is no user `{user}` to run it as; run \
         scripts/install-deps.sh (Debian package `postgresql` creates the user) or run the tests \
         as an ordinary user"
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
