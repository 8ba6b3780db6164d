//! The one error type of the crate.

use std::error::Error;
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

/// Everything that can go wrong while taking, holding or releasing a lock.
///
/// Match on the variant to decide what to do; every variant's message says what happened in
/// words a user can act on. An error caused by another one (an io error reading a TLS file, the
/// client library's error opening a session) returns it from
/// [`source()`](std::error::Error::source) rather than repeating its text, so a report that
/// walks the chain shows each cause once.
///
/// ```
/// use zklock_runtime::LockError;
///
/// fn retryable(err: &LockError) -> bool {
///     matches!(err, LockError::Timeout { .. } | LockError::Connection { .. } | LockError::SessionExpired)
/// }
/// assert!(retryable(&LockError::SessionExpired));
/// assert!(!retryable(&LockError::InvalidName { name: "".into(), reason: "it is empty" }));
/// ```
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum LockError {
    /// The lock was not granted within the caller's bound.
    #[error("timed out after {waited:?} waiting for lock `{name}`")]
    Timeout {
        /// The lock name as the caller gave it.
        name: String,
        /// How long the caller waited.
        waited: Duration,
    },
    /// The lock was held but can no longer be trusted: the session it was taken in expired,
    /// or the connection was down long enough that it may have.
    #[error("lock `{name}` was lost: {reason}")]
    Lost {
        /// The lock name.
        name: String,
        /// Why it is considered lost.
        reason: String,
    },
    /// The holder kept the lock past its `max_hold` bound
    /// ([`LockGuard::run_for`](crate::LockGuard::run_for), the attribute's `max_hold = …`):
    /// the work was stopped and the lock released. This guards against hung work; a crashed
    /// holder's lock is freed by its session ending, not by this bound.
    #[error("lock `{name}` was held past its max_hold of {max_hold:?}; the work under it was stopped")]
    MaxHoldExceeded {
        /// The lock name (for several locks held together, the first of them).
        name: String,
        /// The bound that was exceeded.
        max_hold: Duration,
    },
    /// Another process asked this holder to release the lock (revocation: `__REVOKE__` written
    /// into its node, see [`LockGuard::revoked`](crate::LockGuard::revoked)), and the work under
    /// it was stopped as configured (the attribute's `on_revoke = "abort"`). Unlike
    /// [`Lost`](Self::Lost), the lock was held soundly until the work stopped; it is released
    /// as the guard goes.
    #[error("lock `{name}` was revoked: another process asked for it, and the work under it was stopped")]
    Revoked {
        /// The lock name.
        name: String,
    },
    /// The ZooKeeper session ended while the operation was under way.
    #[error("the ZooKeeper session expired")]
    SessionExpired,
    /// No usable connection to the ZooKeeper ensemble.
    #[error("cannot reach ZooKeeper: {message}")]
    Connection {
        /// What was tried and what it came to.
        message: String,
        /// The error that made it fail, when there is one (the client library's, an io error).
        #[source]
        source: Option<ErrorSource>,
    },
    /// The ensemble refused this client's credentials (a wrong SASL password, or a user the
    /// servers do not know). Retrying does not help; fix the credentials.
    #[error("ZooKeeper authentication failed: {message}")]
    AuthFailed {
        /// Whose credentials were refused, and what to check.
        message: String,
        /// The error that made it fail, when there is one.
        #[source]
        source: Option<ErrorSource>,
    },
    /// A TLS connection to the ensemble cannot work as configured: the message names the
    /// certificate problem, or the port that does not speak (or does speak) TLS. Found by a
    /// handshake of the client's own while a session does not open. Retrying does not help.
    #[error("TLS connection to ZooKeeper failed: {message}")]
    Tls {
        /// The certificate problem, or the port's, for each server that showed one.
        message: String,
        /// The error that made it fail, when there is one.
        #[source]
        source: Option<ErrorSource>,
    },
    /// The client cannot be used any more: it was closed with
    /// [`LockClient::close`](crate::LockClient::close), or (should it ever happen) the thread its
    /// sessions run on stopped. The message says which; open a new client.
    #[error("the lock client is closed: {message}")]
    Closed {
        /// Why the client is closed.
        message: String,
        /// The error that closed it, when there is one.
        #[source]
        source: Option<ErrorSource>,
    },
    /// The lock name cannot be used.
    #[error("invalid lock name {name:?}: {reason}")]
    InvalidName {
        /// The rejected name.
        name: String,
        /// Why it was rejected.
        reason: &'static str,
    },
    /// A configuration value (session timeout, namespace, duration, ACL…) is unusable.
    #[error("invalid configuration: {message}")]
    InvalidConfig {
        /// Which value is unusable, and why.
        message: String,
        /// The error that made it unusable, when there is one (the io error of a file that
        /// cannot be read, the parser's error of PEM that does not parse).
        #[source]
        source: Option<ErrorSource>,
    },
    /// Clients disagree on a semaphore's lease count: leases are held under the count recorded
    /// with the semaphore, and this acquirer asked for another. Nothing was taken. Use the
    /// same count everywhere; to change it, let every holder release first (the first acquirer
    /// after that records its own count).
    #[error("semaphore `{name}` is held with {recorded} leases; this client asked for {asked}")]
    LeaseCountMismatch {
        /// The semaphore's name.
        name: String,
        /// The lease count this client asked for.
        asked: u32,
        /// The lease count the semaphore's current holders use.
        recorded: u32,
    },
    /// The server no longer has this holder's node: see
    /// [`LockGuard::ensure_held`](crate::LockGuard::ensure_held).
    #[error("lock `{name}` is not held by this holder")]
    NotHeld {
        /// The lock name.
        name: String,
    },
    /// A batch of fenced writes ([`LockGuard::fenced_write`](crate::LockGuard::fenced_write))
    /// was refused for one of its own operations (a node that exists, a bad version, an invalid
    /// path); nothing in the batch was applied, and the lock is still held.
    #[error("fenced write under lock `{name}` was not applied ({}): {source}", index.map_or("refused while the batch was built".to_owned(), |i| format!("operation {i} failed")))]
    WriteRejected {
        /// The lock name.
        name: String,
        /// Which of the caller's operations failed (from 0); `None` when it failed while the
        /// batch was being built.
        index: Option<usize>,
        /// The server's (or client library's) error for that operation.
        #[source]
        source: zookeeper_client::Error,
    },
    /// [`LockClient::revoke`](crate::LockClient::revoke) could not ask every holder: the
    /// server refused the request for some of their nodes (the node's ACL does not let this
    /// client write it, say). The holders in `asked` were asked all the same.
    #[error("could not ask every holder of lock `{name}` to release it: asked {asked:?}; not asked {refused:?}")]
    RevokeIncomplete {
        /// The lock name.
        name: String,
        /// The holder nodes that were asked.
        asked: Vec<String>,
        /// The holder nodes that were not asked, each with why (`<node>: <error>`).
        refused: Vec<String>,
    },
    /// ZooKeeper answered with an error this crate does not translate.
    #[error("ZooKeeper error on {op}: {source}")]
    ZooKeeper {
        /// The operation that failed (`create`, `delete`, …).
        op: &'static str,
        /// The server's (or client library's) error, with its code.
        #[source]
        source: zookeeper_client::Error,
    },
}

/// What kind of failure a [`LockError`] is, for callers that decide by kind (retry, back off,
/// give up, alert) rather than by variant. See [`LockError::kind`].
///
/// ```
/// use zklock_runtime::{ErrorKind, LockError};
///
/// fn worth_retrying(err: &LockError) -> bool {
///     matches!(err.kind(), ErrorKind::Busy | ErrorKind::Unavailable)
/// }
/// assert!(worth_retrying(&LockError::SessionExpired));
/// assert!(!worth_retrying(&LockError::InvalidConfig { message: "no".into(), source: None }));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ErrorKind {
    /// Someone else holds the lock: it was not granted within the caller's bound. Retrying
    /// later may succeed. ([`LockError::Timeout`])
    Busy,
    /// ZooKeeper could not be reached, or the session ended under the operation. Retrying once
    /// the ensemble is back may succeed. ([`LockError::Connection`],
    /// [`LockError::SessionExpired`])
    Unavailable,
    /// A lock that was held can no longer be trusted; stop the work it protects.
    /// ([`LockError::Lost`], [`LockError::NotHeld`])
    Lost,
    /// The client is closed; open a new one. ([`LockError::Closed`])
    Closed,
    /// The request or the configuration is wrong; retrying the same thing will fail the same
    /// way. ([`LockError::InvalidName`], [`LockError::InvalidConfig`],
    /// [`LockError::LeaseCountMismatch`],
    /// [`LockError::AuthFailed`], [`LockError::Tls`])
    InvalidInput,
    /// Anything else: work stopped at its `max_hold` ([`LockError::MaxHoldExceeded`]) or on a
    /// revocation ([`LockError::Revoked`]), a fenced write refused for one of its operations
    /// ([`LockError::WriteRejected`]), a revocation that could not ask every holder
    /// ([`LockError::RevokeIncomplete`]), or a ZooKeeper error this crate does not translate
    /// ([`LockError::ZooKeeper`]).
    Other,
}

impl LockError {
    /// The kind of failure, for deciding what to do about it; see [`ErrorKind`].
    ///
    /// ```
    /// use zklock_runtime::{ErrorKind, LockError};
    /// let busy = LockError::Timeout { name: "ledger".into(), waited: std::time::Duration::ZERO };
    /// assert_eq!(busy.kind(), ErrorKind::Busy);
    /// ```
    pub fn kind(&self) -> ErrorKind {
        match self {
            LockError::Timeout { .. } => ErrorKind::Busy,
            LockError::Connection { .. } | LockError::SessionExpired => ErrorKind::Unavailable,
            LockError::Lost { .. } | LockError::NotHeld { .. } => ErrorKind::Lost,
            LockError::Closed { .. } => ErrorKind::Closed,
            LockError::InvalidName { .. }
            | LockError::InvalidConfig { .. }
            | LockError::LeaseCountMismatch { .. }
            | LockError::AuthFailed { .. }
            | LockError::Tls { .. } => ErrorKind::InvalidInput,
            LockError::MaxHoldExceeded { .. }
            | LockError::Revoked { .. }
            | LockError::WriteRejected { .. }
            | LockError::RevokeIncomplete { .. }
            | LockError::ZooKeeper { .. } => ErrorKind::Other,
        }
    }

    /// Builds the error for a ZooKeeper failure, mapping the session- and connection-level
    /// codes onto their own variants.
    pub(crate) fn zk(op: &'static str, source: zookeeper_client::Error) -> Self {
        use zookeeper_client::Error as E;
        match source {
            E::AuthFailed => LockError::auth_failed(format!("{op}: the session's credentials were refused")),
            source if is_session_over(&source) => LockError::SessionExpired,
            E::ConnectionLoss | E::NoHosts | E::Timeout | E::SessionMoved => LockError::connection_from(op, source),
            source => LockError::ZooKeeper { op, source },
        }
    }

    /// A [`Connection`](Self::Connection) error with no underlying error.
    pub(crate) fn connection(message: impl Into<String>) -> Self {
        LockError::Connection {
            message: message.into(),
            source: None,
        }
    }

    /// A [`Connection`](Self::Connection) error caused by `source`, which the message does not
    /// repeat.
    pub(crate) fn connection_from(message: impl Into<String>, source: impl Error + Send + Sync + 'static) -> Self {
        LockError::Connection {
            message: message.into(),
            source: Some(ErrorSource::new(source)),
        }
    }

    /// An [`AuthFailed`](Self::AuthFailed) error with no underlying error.
    pub(crate) fn auth_failed(message: impl Into<String>) -> Self {
        LockError::AuthFailed {
            message: message.into(),
            source: None,
        }
    }

    /// A [`Tls`](Self::Tls) error with no underlying error.
    #[cfg(feature = "tls")]
    pub(crate) fn tls(message: impl Into<String>) -> Self {
        LockError::Tls {
            message: message.into(),
            source: None,
        }
    }

    /// A [`Closed`](Self::Closed) error with no underlying error.
    pub(crate) fn closed(message: impl Into<String>) -> Self {
        LockError::Closed {
            message: message.into(),
            source: None,
        }
    }

    /// An [`InvalidConfig`](Self::InvalidConfig) error with no underlying error.
    pub(crate) fn invalid_config(message: impl Into<String>) -> Self {
        LockError::InvalidConfig {
            message: message.into(),
            source: None,
        }
    }

    /// An [`InvalidConfig`](Self::InvalidConfig) error caused by `source`, which the message
    /// does not repeat.
    pub(crate) fn invalid_config_from(message: impl Into<String>, source: impl Error + Send + Sync + 'static) -> Self {
        LockError::InvalidConfig {
            message: message.into(),
            source: Some(ErrorSource::new(source)),
        }
    }

    /// The ZooKeeper error code behind this error, if there is one.
    ///
    /// ```
    /// use zklock_runtime::LockError;
    /// assert_eq!(LockError::SessionExpired.zookeeper_error(), None);
    /// ```
    pub fn zookeeper_error(&self) -> Option<&zookeeper_client::Error> {
        match self {
            LockError::ZooKeeper { source, .. } | LockError::WriteRejected { source, .. } => Some(source),
            _ => None,
        }
    }
}

/// The error underneath a [`LockError`]: the io error of a TLS file that cannot be read, the
/// client library's error of a session that cannot be opened, the parser's error of PEM that
/// does not parse.
///
/// It stands for the error it holds. [`LockError::source`](std::error::Error::source) returns
/// that error itself (not this wrapper), so walking the chain reaches it and `downcast_ref`
/// finds its type; the wrapper also dereferences to it. It displays (and debug-prints) as
/// that error.
///
/// ```
/// use std::error::Error;
/// use zklock_runtime::LockError;
///
/// /// The io error behind `err`, if there is one.
/// fn io_cause(err: &LockError) -> Option<&std::io::Error> {
///     std::iter::successors(err.source(), |&e| e.source()).find_map(|e| e.downcast_ref())
/// }
/// # #[cfg(feature = "tls")]
/// # {
/// let err = zklock_runtime::TlsConfig::ca_file("/nonexistent/ca.pem").unwrap_err();
/// assert_eq!(io_cause(&err).map(std::io::Error::kind), Some(std::io::ErrorKind::NotFound));
/// if let LockError::InvalidConfig { source: Some(source), .. } = &err {
///     assert!(source.is::<std::io::Error>());
/// }
/// # }
/// ```
///
/// Two are equal when they display the same text: [`LockError`] is `Eq` (tests compare errors
/// with `assert_eq!`), and errors in general cannot be compared, so the text, which is what a
/// reader of the error sees, is what is compared.
//
// Not an `Error` itself, on purpose. The `source()` thiserror derives for `LockError` calls a
// method on the field that, for a type that is not an error, is found through `Deref`: it then
// returns the held error itself, whose type a caller can downcast to. A wrapper that implemented
// `Error` would stand in the chain in the held error's place, where no
// `downcast_ref::<std::io::Error>()` finds it. (Should thiserror stop looking through `Deref`,
// the build fails; the chain does not change silently.)
#[derive(Clone)]
pub struct ErrorSource(Arc<dyn Error + Send + Sync + 'static>);

impl ErrorSource {
    /// Wraps `err`.
    pub(crate) fn new(err: impl Error + Send + Sync + 'static) -> Self {
        ErrorSource(Arc::new(err))
    }
}

impl std::ops::Deref for ErrorSource {
    type Target = dyn Error + Send + Sync + 'static;

    fn deref(&self) -> &Self::Target {
        &*self.0
    }
}

impl fmt::Display for ErrorSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&self.0, f)
    }
}

impl fmt::Debug for ErrorSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&self.0, f)
    }
}

impl PartialEq for ErrorSource {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.0, &other.0) || self.0.to_string() == other.0.to_string()
    }
}

impl Eq for ErrorSource {}

/// Whether a request failed because its session is over for good (expired, closed, or refused
/// authentication): nothing sent on it can succeed any more, and the server deletes its
/// ephemeral nodes by itself. The one test for "this session is over".
///
/// `SessionMoved` is not among them: the server says it when a request reached it over a
/// connection the session has since left for another server. The session lives on, and so do
/// its nodes; the request is retried on the new connection ([`is_transient`]), as Curator's
/// retry loop does.
pub(crate) fn is_session_over(err: &zookeeper_client::Error) -> bool {
    use zookeeper_client::Error as E;
    matches!(err, E::SessionExpired | E::ClientClosed | E::AuthFailed)
}

/// Whether a request failed because of the connection rather than the server's answer: the
/// request may or may not have been applied, and retrying once reconnected is the cure. The
/// client library reports a dropped connection as `ConnectionLoss`, and an idle or broken one
/// with a custom message; a throttled request is also worth a retry.
pub(crate) fn is_transient(err: &zookeeper_client::Error) -> bool {
    use zookeeper_client::Error as E;
    matches!(
        err,
        E::ConnectionLoss
            | E::SessionMoved
            | E::Timeout
            | E::NoHosts
            | E::Throttled
            | E::Custom(_)
            | E::UnexpectedError(_)
            | E::UnmarshalError { .. }
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use zookeeper_client::Error as E;

    /// A moved session is alive: a release that meets `SessionMoved` must retry, not take the
    /// node for gone with its session (it would linger, held by nobody who knows).
    #[test]
    fn a_moved_session_is_retried_not_taken_for_over() {
        assert!(!is_session_over(&E::SessionMoved));
        assert!(is_transient(&E::SessionMoved));
        assert!(!matches!(
            LockError::zk("delete", E::SessionMoved),
            LockError::SessionExpired
        ));
    }

    /// The error's message followed by each cause in its `source()` chain, joined by ": ".
    fn with_causes(err: &dyn Error) -> String {
        let mut text = err.to_string();
        let mut cause = err.source();
        while let Some(err) = cause {
            text = format!("{text}: {err}");
            cause = err.source();
        }
        text
    }

    /// The io error of a file that cannot be read is the error's source, reachable by walking
    /// the chain and downcasting, and its text is shown once: by the source, not the message.
    #[test]
    fn an_io_error_is_the_source_and_shown_once() {
        let missing = std::env::temp_dir().join("zklock-no-such-dir/ca.pem");
        let io = std::fs::read_to_string(&missing).unwrap_err();
        let io_text = io.to_string();
        let err = LockError::invalid_config_from(format!("cannot read the TLS CA file {}", missing.display()), io);

        let found = std::iter::successors(err.source(), |&e| e.source())
            .find_map(|e| e.downcast_ref::<std::io::Error>())
            .expect("the io error is in the source chain");
        assert_eq!(found.kind(), std::io::ErrorKind::NotFound);
        assert_eq!(
            err.to_string(),
            format!(
                "invalid configuration: cannot read the TLS CA file {}",
                missing.display()
            )
        );
        assert!(!err.to_string().contains(&io_text), "{err}");
        let full = with_causes(&err);
        assert_eq!(full.matches(&io_text).count(), 1, "{full}");
        assert!(full.ends_with(&format!("ca.pem: {io_text}")), "{full}");
    }

    /// The same through the TLS settings' own file read.
    #[cfg(feature = "tls")]
    #[test]
    fn an_unreadable_tls_file_keeps_its_io_error_as_the_source() {
        let missing = std::env::temp_dir().join("zklock-no-such-dir/ca.pem");
        let err = crate::TlsConfig::ca_file(&missing).unwrap_err();
        assert!(
            matches!(&err, LockError::InvalidConfig { source: Some(_), .. }),
            "{err:?}"
        );
        let io = err
            .source()
            .and_then(|e| e.downcast_ref::<std::io::Error>())
            .expect("the source is the io error itself");
        assert_eq!(io.kind(), std::io::ErrorKind::NotFound);
        assert!(!err.to_string().contains(&io.to_string()), "{err}");
        assert_eq!(with_causes(&err), format!("{err}: {io}"));
    }

    /// Errors compare by what they say: a clone, and the same failure built twice, are equal;
    /// another cause is not.
    #[test]
    fn errors_with_sources_compare_by_their_text() {
        let refused = || std::io::Error::new(std::io::ErrorKind::ConnectionRefused, "refused");
        let err = LockError::connection_from("cannot open a session to zk1:2181", refused());
        assert_eq!(err, err.clone());
        assert_eq!(
            err,
            LockError::connection_from("cannot open a session to zk1:2181", refused())
        );
        assert_ne!(err, LockError::connection("cannot open a session to zk1:2181"));
        let other = std::io::Error::new(std::io::ErrorKind::TimedOut, "timed out");
        assert_ne!(
            err,
            LockError::connection_from("cannot open a session to zk1:2181", other)
        );
    }

    /// A connection-level ZooKeeper error stays reachable as the source, with its code.
    #[test]
    fn a_connection_loss_is_the_source_of_the_connection_error() {
        let err = LockError::zk("create", E::ConnectionLoss);
        assert!(
            matches!(&err, LockError::Connection { message, .. } if message == "create"),
            "{err:?}"
        );
        let source = err.source().and_then(|e| e.downcast_ref::<E>());
        assert_eq!(source, Some(&E::ConnectionLoss));
        assert_eq!(
            with_causes(&err),
            format!("cannot reach ZooKeeper: create: {}", E::ConnectionLoss)
        );
    }

    #[test]
    fn an_expired_session_is_over_and_not_retried() {
        for err in [E::SessionExpired, E::ClientClosed, E::AuthFailed] {
            assert!(is_session_over(&err), "{err:?}");
            assert!(!is_transient(&err), "{err:?}");
        }
    }
}
