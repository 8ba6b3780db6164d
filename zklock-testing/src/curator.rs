//! A real Apache Curator contender driven from Rust, for interoperability tests and benchmarks.
//!
//! [`CuratorPeer`] compiles `java/CuratorPeer.java` (once per source version, cached under the
//! cargo target directory or the temporary directory) against the Debian Curator jars, starts it as a child JVM and speaks
//! its line protocol: each lock gets an id, acquires run on a thread of their own inside the
//! JVM, and their outcomes arrive as [`PeerEvent`]s while the test goes on. Curator's leader
//! election (`LeaderLatch`) takes part the same way: each latch gets an id, and its
//! `isLeader`/`notLeader` calls arrive as [`PeerEvent::IsLeader`] and [`PeerEvent::NotLeader`]
//! (see [`CuratorPeer::leader_latch`]).
//!
//! ```no_run
//! # async fn demo() -> Result<(), zklock_testing::curator::PeerError> {
//! use std::time::Duration;
//! use zklock_testing::curator::CuratorPeer;
//!
//! let peer = CuratorPeer::start("127.0.0.1:2181").await?;
//! peer.mutex("a", "/zklock/orders").await?;
//! peer.acquire("a", Some(Duration::from_secs(5)))?;
//! let node = peer.wait_acquired("a", Duration::from_secs(10)).await?;
//! println!("Curator holds {node}");
//! peer.release("a").await?;
//! # Ok(()) }
//! ```
//!
//! The JVM is killed when the peer is dropped, and (Linux) when the process that started it
//! dies, so a panicking or killed test leaves no process behind.

use std::collections::hash_map::DefaultHasher;
use std::collections::VecDeque;
use std::hash::{Hash, Hasher};
use std::io::{BufRead, BufReader, Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use tokio::sync::watch;

use crate::certs::TestCa;
use crate::class_sharing::ClassSharing;
use crate::java::{java_binary, spawn_tied_to_process, DEBIAN_NETTY_EXTRA_JARS};

mod latch;

pub use latch::LatchParticipant;

/// The peer's Java source, embedded so the cache key follows every edit.
const SOURCE: &str = include_str!("../java/CuratorPeer.java");

/// The peer's classes, as a jar: a JVM archives classes for sharing from jars only.
const PEER_JAR: &str = "curator-peer.jar";

/// Where the Debian packages put the jars.
const JAR_DIR: &str = "/usr/share/java";

/// Jars on the peer's class path; their manifests pull in guava, zookeeper and slf4j-api.
const JARS: [&str; 4] = [
    "curator-recipes.jar",
    "curator-framework.jar",
    "curator-client.jar",
    "slf4j-nop.jar",
];

const INSTALL_HINT: &str = "the Curator peer needs a JDK (javac) and the Apache Curator 5 jars in \
     /usr/share/java: on Debian or Ubuntu, apt-get install default-jdk-headless libcurator-recipes-java; \
     in the zklock repository, scripts/install-deps.sh installs them";

/// What can go wrong while driving the Curator peer.
#[derive(Debug, thiserror::Error)]
pub enum PeerError {
    /// A tool or jar the peer needs is not installed.
    #[error("{0} ({INSTALL_HINT})")]
    Missing(String),
    /// `javac` rejected the peer source.
    #[error("compiling the Curator peer failed: {0}")]
    Compile(String),
    /// Talking to the child process failed.
    #[error("Curator peer I/O: {0}")]
    Io(#[from] std::io::Error),
    /// The peer answered a command with an error.
    #[error("Curator peer error for {id}: {message}")]
    Peer {
        /// The lock id the error is about, or `-`.
        id: String,
        /// The peer's message.
        message: String,
    },
    /// Curator's own acquire timed out (the peer printed `TIMEOUT <id>`).
    #[error("Curator did not acquire {id} within its timeout")]
    NotAcquired {
        /// The lock id.
        id: String,
    },
    /// The expected answer did not arrive in time.
    #[error("no {what} from the Curator peer within {waited:?}")]
    NoAnswer {
        /// What was awaited.
        what: String,
        /// How long.
        waited: Duration,
    },
    /// The JVM exited.
    #[error("the Curator peer exited; its stderr ends with: {0}")]
    Exited(String),
}

/// Something the peer reported.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PeerEvent {
    /// `ACQUIRED <id> <node>`: Curator holds the lock; `node` is its contender node.
    Acquired {
        /// The lock id.
        id: String,
        /// Full path of Curator's node.
        node: String,
    },
    /// `TIMEOUT <id>`: Curator's acquire gave up.
    Timeout {
        /// The lock id.
        id: String,
    },
    /// `RELEASED <id>`.
    Released {
        /// The lock id.
        id: String,
    },
    /// `REVOKED <id>`: the revocation listener of mutex `id` (made revocable with
    /// [`CuratorPeer::make_revocable`]) was called: someone asked for its hold. It still holds.
    Revoked {
        /// The lock id.
        id: String,
    },
    /// `IS_LEADER <id>`: Curator called `isLeader()` on latch `id`'s listener; it leads now.
    IsLeader {
        /// The latch id.
        id: String,
    },
    /// `NOT_LEADER <id>`: Curator called `notLeader()` on latch `id`'s listener; it led and
    /// leads no more (it was closed, or lost its session or connection).
    NotLeader {
        /// The latch id.
        id: String,
    },
    /// `ERROR <id|-> <message>`.
    Error {
        /// The lock or latch id, or `-` for commands about neither.
        id: String,
        /// The message.
        message: String,
    },
    /// Any other line (`OK`, `CONNECTED`, `RESULT`, `PONG`, `CLOSED`, answers to latch queries,
    /// ...), verbatim.
    Line(String),
}

impl PeerEvent {
    fn parse(line: &str) -> PeerEvent {
        let mut words = line.splitn(3, ' ');
        let (tag, id, rest) = (words.next(), words.next(), words.next());
        match (tag, id) {
            (Some("ACQUIRED"), Some(id)) => PeerEvent::Acquired {
                id: id.to_owned(),
                node: rest.unwrap_or_default().to_owned(),
            },
            (Some("TIMEOUT"), Some(id)) => PeerEvent::Timeout { id: id.to_owned() },
            (Some("RELEASED"), Some(id)) => PeerEvent::Released { id: id.to_owned() },
            (Some("REVOKED"), Some(id)) => PeerEvent::Revoked { id: id.to_owned() },
            (Some("IS_LEADER"), Some(id)) => PeerEvent::IsLeader { id: id.to_owned() },
            (Some("NOT_LEADER"), Some(id)) => PeerEvent::NotLeader { id: id.to_owned() },
            (Some("ERROR"), Some(id)) => PeerEvent::Error {
                id: id.to_owned(),
                message: rest.unwrap_or_default().to_owned(),
            },
            _ => PeerEvent::Line(line.to_owned()),
        }
    }

    /// The lock or latch id the event is about, if any.
    pub fn id(&self) -> Option<&str> {
        match self {
            PeerEvent::Acquired { id, .. }
            | PeerEvent::Timeout { id }
            | PeerEvent::Released { id }
            | PeerEvent::Revoked { id }
            | PeerEvent::IsLeader { id }
            | PeerEvent::NotLeader { id }
            | PeerEvent::Error { id, .. } => Some(id),
            PeerEvent::Line(_) => None,
        }
    }
}

/// Which side of a Curator `InterProcessReadWriteLock` to acquire.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RwMode {
    /// `readLock()`.
    Read,
    /// `writeLock()`.
    Write,
}

/// Lines read from the JVM that no caller has taken yet, plus whether it has exited.
#[derive(Default)]
struct Inbox {
    events: VecDeque<PeerEvent>,
    exited: bool,
    stderr_tail: VecDeque<String>,
}

/// A running Curator JVM connected to one ZooKeeper ensemble (one Curator session).
///
/// Commands are cheap line writes; answers are collected by a reader thread, and the `wait_*`
/// methods pick the ones they are about, leaving other events for other waiters. Methods take
/// `&self`, so several tasks may wait on different ids at once.
pub struct CuratorPeer {
    child: Mutex<Child>,
    stdin: Mutex<ChildStdin>,
    inbox: Arc<Mutex<Inbox>>,
    arrivals: watch::Sender<u64>,
    session_id: OnceLock<String>,
    class_sharing: ClassSharing,
}

impl std::fmt::Debug for CuratorPeer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CuratorPeer")
            .field("session_id", &self.session_id)
            .finish_non_exhaustive()
    }
}

impl CuratorPeer {
    /// Starts a peer and connects it with a 4 s session timeout.
    ///
    /// ```no_run
    /// # async fn demo() -> Result<(), zklock_testing::curator::PeerError> {
    /// let peer = zklock_testing::curator::CuratorPeer::start("127.0.0.1:2181").await?;
    /// # Ok(()) }
    /// ```
    pub async fn start(connect_string: &str) -> Result<CuratorPeer, PeerError> {
        Self::start_with(connect_string, Duration::from_secs(4)).await
    }

    /// Starts a peer and connects it with the given session timeout.
    pub async fn start_with(connect_string: &str, session_timeout: Duration) -> Result<CuratorPeer, PeerError> {
        Self::start_with_properties(connect_string, session_timeout, Vec::new()).await
    }

    /// Starts a peer whose JVM has these system properties, which is how a ZooKeeper Java
    /// client is configured for TLS ([`tls_properties`]) or SASL, and connects it.
    ///
    /// ```no_run
    /// # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
    /// use std::time::Duration;
    /// use zklock_testing::curator::{tls_properties, CuratorPeer};
    /// use zklock_testing::{TestCa, ZkServer};
    ///
    /// let ca = TestCa::new("test CA")?;
    /// let server = ZkServer::builder().tls(&ca).start()?;
    /// let connect = server.secure_connect_string().unwrap();
    /// let peer = CuratorPeer::start_with_properties(&connect, Duration::from_secs(4), tls_properties(&ca)).await?;
    /// # drop(peer); Ok(()) }
    /// ```
    pub async fn start_with_properties(
        connect_string: &str,
        session_timeout: Duration,
        properties: Vec<(String, String)>,
    ) -> Result<CuratorPeer, PeerError> {
        if connect_string.is_empty() || connect_string.contains(char::is_whitespace) {
            return Err(PeerError::Peer {
                id: "-".into(),
                message: format!("invalid connect string {connect_string:?}"),
            });
        }
        let classes = tokio::task::spawn_blocking(compiled_classes)
            .await
            .map_err(|e| PeerError::Compile(e.to_string()))??;
        let peer = tokio::task::spawn_blocking(move || Self::spawn(&classes, &properties))
            .await
            .map_err(|e| PeerError::Compile(e.to_string()))??;
        peer.send(&format!("connect {connect_string} {}", session_timeout.as_millis()))?;
        let line = peer
            .wait_line("CONNECTED", Duration::from_secs(60), |l| l.starts_with("CONNECTED "))
            .await?;
        let _ = peer.session_id.set(line.trim_start_matches("CONNECTED ").to_owned());
        Ok(peer)
    }

    fn spawn(classes: &Path, properties: &[(String, String)]) -> Result<CuratorPeer, PeerError> {
        let java = java_binary().map_err(|e| PeerError::Missing(e.to_string()))?;
        let classpath = class_path(classes);
        let class_sharing = ClassSharing::for_jvm(&java, &classpath, "CuratorPeer");
        let mut cmd = Command::new(java);
        cmd.arg("-Xss512k").arg("-XX:+UseSerialGC");
        cmd.args(class_sharing.jvm_args());
        for (key, value) in properties {
            cmd.arg(format!("-D{key}={value}"));
        }
        cmd.arg("-cp")
            .arg(classpath)
            .arg("CuratorPeer")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        // Killed by the kernel with this process, however it dies.
        let mut child = spawn_tied_to_process(cmd).map_err(|e| {
            if e.kind() == std::io::ErrorKind::NotFound {
                PeerError::Missing("`java` is not installed".into())
            } else {
                PeerError::Io(e)
            }
        })?;
        let stdin = child.stdin.take().expect("piped stdin");
        let stdout = child.stdout.take().expect("piped stdout");
        let stderr = child.stderr.take().expect("piped stderr");
        let inbox = Arc::new(Mutex::new(Inbox::default()));
        let (arrivals, _) = watch::channel(0u64);

        let (inbox_out, tx_out) = (inbox.clone(), arrivals.clone());
        std::thread::Builder::new()
            .name("curator-peer-stdout".into())
            .spawn(move || {
                for line in BufReader::new(stdout).lines() {
                    let Ok(line) = line else { break };
                    inbox_out
                        .lock()
                        .unwrap()
                        .events
                        .push_back(PeerEvent::parse(line.trim_end()));
                    tx_out.send_modify(|n| *n += 1);
                }
                inbox_out.lock().unwrap().exited = true;
                tx_out.send_modify(|n| *n += 1);
            })?;
        let inbox_err = inbox.clone();
        std::thread::Builder::new()
            .name("curator-peer-stderr".into())
            .spawn(move || {
                for line in BufReader::new(stderr).lines() {
                    let Ok(line) = line else { break };
                    let mut inbox = inbox_err.lock().unwrap();
                    inbox.stderr_tail.push_back(line);
                    if inbox.stderr_tail.len() > 20 {
                        inbox.stderr_tail.pop_front();
                    }
                }
            })?;
        Ok(CuratorPeer {
            child: Mutex::new(child),
            stdin: Mutex::new(stdin),
            inbox,
            arrivals,
            session_id: OnceLock::new(),
            class_sharing,
        })
    }

    /// The Curator session id, in hex as ZooKeeper's logs print it.
    pub fn session_id(&self) -> &str {
        self.session_id.get().map_or("", String::as_str)
    }

    /// Sends one raw protocol line (see `java/CuratorPeer.java`).
    pub fn send(&self, line: &str) -> Result<(), PeerError> {
        if line.contains('\n') {
            return Err(PeerError::Peer {
                id: "-".into(),
                message: "a command is one line".into(),
            });
        }
        let mut stdin = self.stdin.lock().unwrap();
        writeln!(stdin, "{line}").and_then(|_| stdin.flush())?;
        Ok(())
    }

    /// Creates an `InterProcessMutex` on `path` under the name `id`.
    pub async fn mutex(&self, id: &str, path: &str) -> Result<(), PeerError> {
        self.declare("mutex", id, path, "").await
    }

    /// Creates an `InterProcessReadWriteLock` on `path` under the name `id`.
    pub async fn rw_lock(&self, id: &str, path: &str) -> Result<(), PeerError> {
        self.declare("rwlock", id, path, "").await
    }

    /// Creates an `InterProcessSemaphoreV2` on `path` with `leases` leases under the name `id`.
    ///
    /// Each id is one contender holding at most one lease: [`acquire`](Self::acquire) asks for
    /// a lease, [`wait_acquired`](Self::wait_acquired) returns its node (under
    /// `<path>/leases/`), and [`release`](Self::release) returns it. Declare several ids on the
    /// same path (all with the same `leases`, as Curator expects) for several holders.
    ///
    /// ```no_run
    /// # async fn demo() -> Result<(), zklock_testing::curator::PeerError> {
    /// use std::time::Duration;
    /// use zklock_testing::curator::CuratorPeer;
    ///
    /// let peer = CuratorPeer::start("127.0.0.1:2181").await?;
    /// peer.semaphore("a", "/zklock/pool", 2).await?;
    /// peer.acquire("a", Some(Duration::from_secs(5)))?;
    /// let lease = peer.wait_acquired("a", Duration::from_secs(10)).await?;
    /// assert!(lease.starts_with("/zklock/pool/leases/"));
    /// peer.release("a").await?;
    /// # Ok(()) }
    /// ```
    pub async fn semaphore(&self, id: &str, path: &str, leases: u32) -> Result<(), PeerError> {
        self.declare("semaphore", id, path, &format!(" {leases}")).await
    }

    /// Sends `<kind> <id> <path><extra>` and waits for `OK <id>`.
    async fn declare(&self, kind: &str, id: &str, path: &str, extra: &str) -> Result<(), PeerError> {
        check_word(id)?;
        check_word(path)?;
        self.send(&format!("{kind} {id} {path}{extra}"))?;
        let ok = format!("OK {id}");
        self.wait_event(&format!("OK for {id}"), Duration::from_secs(30), |e| {
            matches!(e, PeerEvent::Line(l) if *l == ok) || matches!(e, PeerEvent::Error { id: i, .. } if i == id)
        })
        .await
        .and_then(fail_on_error)
        .map(drop)
    }

    /// Starts acquiring mutex `id`, or one lease of semaphore `id` (`None`: without bound).
    /// Returns at once; the outcome arrives as an event, see
    /// [`wait_acquired`](Self::wait_acquired).
    pub fn acquire(&self, id: &str, timeout: Option<Duration>) -> Result<(), PeerError> {
        check_word(id)?;
        self.send(&format!("acquire {id} {}", millis(timeout)))
    }

    /// Starts acquiring the read or write side of read/write lock `id`.
    pub fn acquire_rw(&self, id: &str, mode: RwMode, timeout: Option<Duration>) -> Result<(), PeerError> {
        check_word(id)?;
        let mode = match mode {
            RwMode::Read => "read",
            RwMode::Write => "write",
        };
        self.send(&format!("acquire {id} {mode} {}", millis(timeout)))
    }

    /// Waits up to `within` for the outcome of an acquire of `id`; returns Curator's node path.
    pub async fn wait_acquired(&self, id: &str, within: Duration) -> Result<String, PeerError> {
        let event = self
            .wait_event(&format!("acquire outcome for {id}"), within, |e| {
                e.id() == Some(id) && !matches!(e, PeerEvent::Released { .. } | PeerEvent::Revoked { .. })
            })
            .await
            .and_then(fail_on_error)?;
        match event {
            PeerEvent::Acquired { node, .. } => Ok(node),
            _ => Err(PeerError::NotAcquired { id: id.to_owned() }),
        }
    }

    /// The next event about `id` (a lock or a latch) within `within`, or `None` if nothing
    /// happened to it. Use it to check that a contender is still waiting, or that a latch has
    /// not become leader.
    pub async fn poll_event(&self, id: &str, within: Duration) -> Result<Option<PeerEvent>, PeerError> {
        match self
            .wait_event(&format!("event for {id}"), within, |e| e.id() == Some(id))
            .await
        {
            Ok(e) => Ok(Some(e)),
            Err(PeerError::NoAnswer { .. }) => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Releases lock `id` (or returns semaphore `id`'s lease) on the thread that acquired it and
    /// waits for the confirmation.
    pub async fn release(&self, id: &str) -> Result<(), PeerError> {
        check_word(id)?;
        self.send(&format!("release {id}"))?;
        self.wait_event(&format!("release of {id}"), Duration::from_secs(30), |e| {
            matches!(e, PeerEvent::Released { id: i } if i == id)
                || matches!(e, PeerEvent::Error { id: i, .. } if i == id)
        })
        .await
        .and_then(fail_on_error)
        .map(drop)
    }

    /// Makes mutex `id` revocable (Curator's `makeRevocable`; call it before acquiring): a
    /// revocation of its hold then shows as [`PeerEvent::Revoked`], see
    /// [`wait_revoked`](Self::wait_revoked).
    pub async fn make_revocable(&self, id: &str) -> Result<(), PeerError> {
        check_word(id)?;
        self.send(&format!("revocable {id}"))?;
        let ok = format!("OK {id}");
        self.wait_event(&format!("OK for revocable {id}"), Duration::from_secs(30), |e| {
            matches!(e, PeerEvent::Line(l) if *l == ok) || matches!(e, PeerEvent::Error { id: i, .. } if i == id)
        })
        .await
        .and_then(fail_on_error)
        .map(drop)
    }

    /// Waits up to `within` for mutex `id`'s revocation listener to be called.
    pub async fn wait_revoked(&self, id: &str, within: Duration) -> Result<(), PeerError> {
        self.wait_event(
            &format!("revocation of {id}"),
            within,
            |e| matches!(e, PeerEvent::Revoked { id: i } if i == id),
        )
        .await
        .map(drop)
    }

    /// Asks the holder of `node_path` to release it, as Curator does it
    /// (`Revoker.attemptRevoke`: `__REVOKE__` written into the node).
    pub async fn revoke(&self, node_path: &str) -> Result<(), PeerError> {
        check_word(node_path)?;
        self.send(&format!("revoke {node_path}"))?;
        let sent = format!("REVOKE_SENT {node_path}");
        self.wait_event(&format!("revoke of {node_path}"), Duration::from_secs(30), |e| {
            matches!(e, PeerEvent::Line(l) if *l == sent) || matches!(e, PeerEvent::Error { id, .. } if id == "-")
        })
        .await
        .and_then(fail_on_error)
        .map(drop)
    }

    /// Runs one of the peer's `bench-*` commands and returns the JSON text after `RESULT`.
    pub async fn bench(&self, command: &str, within: Duration) -> Result<String, PeerError> {
        if !command.starts_with("bench-") {
            return Err(PeerError::Peer {
                id: "-".into(),
                message: format!("not a bench command: {command}"),
            });
        }
        self.send(command)?;
        let event = self
            .wait_event("bench RESULT", within, |e| {
                matches!(e, PeerEvent::Line(l) if l.starts_with("RESULT "))
                    || matches!(e, PeerEvent::Error { id, .. } if id == "-")
            })
            .await
            .and_then(fail_on_error)?;
        match event {
            PeerEvent::Line(l) => Ok(l["RESULT ".len()..].to_owned()),
            _ => unreachable!("fail_on_error passes only non-errors"),
        }
    }

    async fn wait_line(&self, what: &str, within: Duration, pred: impl Fn(&str) -> bool) -> Result<String, PeerError> {
        let event = self
            .wait_event(what, within, |e| match e {
                PeerEvent::Line(l) => pred(l),
                PeerEvent::Error { id, .. } => id == "-",
                _ => false,
            })
            .await
            .and_then(fail_on_error)?;
        match event {
            PeerEvent::Line(l) => Ok(l),
            _ => unreachable!("fail_on_error passes only non-errors"),
        }
    }

    /// Takes the first collected event matching `pred`, waiting up to `within` for one.
    async fn wait_event(
        &self,
        what: &str,
        within: Duration,
        pred: impl Fn(&PeerEvent) -> bool,
    ) -> Result<PeerEvent, PeerError> {
        let deadline = tokio::time::Instant::now() + within;
        let mut arrivals = self.arrivals.subscribe();
        loop {
            {
                let mut inbox = self.inbox.lock().unwrap();
                if let Some(pos) = inbox.events.iter().position(&pred) {
                    return Ok(inbox.events.remove(pos).expect("position is in range"));
                }
                if inbox.exited {
                    let tail: Vec<_> = inbox.stderr_tail.iter().cloned().collect();
                    return Err(PeerError::Exited(tail.join(" | ")));
                }
            }
            match tokio::time::timeout_at(deadline, arrivals.changed()).await {
                Ok(Ok(())) => {}
                Ok(Err(_)) => unreachable!("the sender lives in self"),
                Err(_) => {
                    return Err(PeerError::NoAnswer {
                        what: what.to_owned(),
                        waited: within,
                    })
                }
            }
        }
    }
}

impl Drop for CuratorPeer {
    fn drop(&mut self) {
        let _ = self.send("quit");
        let child = self.child.get_mut().unwrap_or_else(|poisoned| poisoned.into_inner());
        // Give Curator a moment to close its session (deleting its nodes), then make sure. The
        // JVM that writes the class archive (class_sharing.rs) gets longer: it writes at exit.
        let grace = if self.class_sharing.is_dumping() {
            Duration::from_secs(10)
        } else {
            Duration::from_millis(500)
        };
        let deadline = std::time::Instant::now() + grace;
        while std::time::Instant::now() < deadline {
            if let Ok(Some(_)) = child.try_wait() {
                break;
            }
            std::thread::sleep(Duration::from_millis(25));
        }
        let _ = child.kill();
        self.class_sharing.finish(&child.wait());
    }
}

fn fail_on_error(event: PeerEvent) -> Result<PeerEvent, PeerError> {
    match event {
        PeerEvent::Error { id, message } => Err(PeerError::Peer { id, message }),
        other => Ok(other),
    }
}

fn check_word(word: &str) -> Result<(), PeerError> {
    if word.is_empty() || word.contains(char::is_whitespace) {
        Err(PeerError::Peer {
            id: "-".into(),
            message: format!("{word:?} must be one non-empty word"),
        })
    } else {
        Ok(())
    }
}

fn millis(timeout: Option<Duration>) -> i64 {
    timeout.map_or(-1, |d| d.as_millis().min(i64::MAX as u128) as i64)
}

/// The class path for running the peer: the jar of its compiled classes plus the Debian jars
/// (with the Netty jars a TLS client needs, where installed).
pub fn class_path(classes: &Path) -> String {
    let mut parts = vec![classes.join(PEER_JAR).display().to_string()];
    parts.extend(JARS.iter().map(|j| format!("{JAR_DIR}/{j}")));
    parts.extend(
        DEBIAN_NETTY_EXTRA_JARS
            .iter()
            .filter(|jar| Path::new(jar).is_file())
            .map(|jar| jar.to_string()),
    );
    parts.join(":")
}

/// The JVM properties that make a ZooKeeper Java client (and so Curator) connect over TLS,
/// trusting `ca`: the Netty client socket (the only one that speaks TLS), `client.secure`, and
/// a PEM trust store. For [`CuratorPeer::start_with_properties`].
pub fn tls_properties(ca: &TestCa) -> Vec<(String, String)> {
    [
        ("zookeeper.client.secure", "true".to_string()),
        (
            "zookeeper.clientCnxnSocket",
            "org.apache.zookeeper.ClientCnxnSocketNetty".to_string(),
        ),
        (
            "zookeeper.ssl.trustStore.location",
            ca.cert_file().display().to_string(),
        ),
        ("zookeeper.ssl.trustStore.type", "PEM".to_string()),
    ]
    .into_iter()
    .map(|(key, value)| (key.to_string(), value))
    .collect()
}

/// Compiles the peer once per source version and returns the directory of its classes (one
/// jar, `curator-peer.jar`; [`class_path`] names it).
///
/// The result is cached in `<target>/curator-peer/<hash>/`; concurrent builds from parallel
/// tests or processes each compile into a private directory and rename it into place, so a
/// reader never sees a half-written cache.
pub fn compiled_classes() -> Result<PathBuf, PeerError> {
    static CLASSES: OnceLock<PathBuf> = OnceLock::new();
    if let Some(dir) = CLASSES.get() {
        return Ok(dir.clone());
    }
    for jar in JARS {
        let path = Path::new(JAR_DIR).join(jar);
        if !path.exists() {
            return Err(PeerError::Missing(format!(
                "{} not found (Debian packages libcurator-recipes-java, libslf4j-java)",
                path.display()
            )));
        }
    }
    let mut hasher = DefaultHasher::new();
    SOURCE.hash(&mut hasher);
    JARS.hash(&mut hasher);
    PEER_JAR.hash(&mut hasher);
    let root = cache_root();
    let dir = root.join(format!("{:016x}", hasher.finish()));
    if !dir.join(PEER_JAR).exists() {
        std::fs::create_dir_all(&root)?;
        let scratch = root.join(format!(
            "build-{}-{}",
            std::process::id(),
            uuid::Uuid::new_v4().simple()
        ));
        let result = compile_into(&scratch);
        let outcome = result.and_then(|()| match std::fs::rename(&scratch, &dir) {
            Ok(()) => Ok(()),
            // Someone else finished first; theirs is as good as ours.
            Err(_) if dir.join(PEER_JAR).exists() => Ok(()),
            Err(e) => Err(PeerError::Io(e)),
        });
        let _ = std::fs::remove_dir_all(&scratch);
        outcome?;
    }
    Ok(CLASSES.get_or_init(|| dir).clone())
}

fn compile_into(scratch: &Path) -> Result<(), PeerError> {
    let src_dir = scratch.join("src");
    let classes = scratch.join("classes");
    std::fs::create_dir_all(&src_dir)?;
    let source = src_dir.join("CuratorPeer.java");
    std::fs::write(&source, SOURCE)?;
    run_jdk_tool(
        Command::new("javac")
            .arg("-nowarn")
            .arg("-d")
            .arg(&classes)
            .arg("-cp")
            .arg(class_path(Path::new(".")))
            .arg(&source),
    )?;
    run_jdk_tool(
        Command::new("jar")
            .arg("--create")
            .arg("--file")
            .arg(scratch.join(PEER_JAR))
            .arg("-C")
            .arg(&classes)
            .arg("."),
    )?;
    std::fs::remove_dir_all(&src_dir)?;
    std::fs::remove_dir_all(&classes)?;
    Ok(())
}

/// Runs `javac` or `jar`: seconds for one small file; minutes mean the tool hangs, and it is
/// killed and named.
fn run_jdk_tool(command: &mut Command) -> Result<(), PeerError> {
    let tool = command.get_program().to_string_lossy().into_owned();
    let output =
        crate::process::output_within(command.stdin(Stdio::null()), Duration::from_secs(300)).map_err(|e| {
            if e.kind() == std::io::ErrorKind::NotFound {
                PeerError::Missing(format!(
                    "`{tool}` is not installed (Debian package default-jdk-headless)"
                ))
            } else {
                PeerError::Io(e)
            }
        })?;
    if !output.status.success() {
        let mut text = String::new();
        let _ = (&output.stderr[..]).read_to_string(&mut text);
        return Err(PeerError::Compile(format!("{tool}: {text}")));
    }
    Ok(())
}

/// `$CARGO_TARGET_DIR/curator-peer` when cargo says where its target directory is, otherwise a
/// directory under the system's temporary directory (a published crate's own directory is
/// read-only, so the cache never lives next to the source).
fn cache_root() -> PathBuf {
    match std::env::var_os("CARGO_TARGET_DIR") {
        Some(target) => PathBuf::from(target).join("curator-peer"),
        None => std::env::temp_dir().join("zklock-testing-curator-peer"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_peer_lines() {
        assert_eq!(
            PeerEvent::parse("ACQUIRED a /zklock/x/_c_1-lock-0000000001"),
            PeerEvent::Acquired {
                id: "a".into(),
                node: "/zklock/x/_c_1-lock-0000000001".into()
            }
        );
        assert_eq!(PeerEvent::parse("TIMEOUT b"), PeerEvent::Timeout { id: "b".into() });
        assert_eq!(
            PeerEvent::parse("ERROR - no lock with id z"),
            PeerEvent::Error {
                id: "-".into(),
                message: "no lock with id z".into()
            }
        );
        assert_eq!(PeerEvent::parse("OK a"), PeerEvent::Line("OK a".into()));
        assert_eq!(PeerEvent::parse("IS_LEADER l"), PeerEvent::IsLeader { id: "l".into() });
        assert_eq!(
            PeerEvent::parse("NOT_LEADER l"),
            PeerEvent::NotLeader { id: "l".into() }
        );
        assert_eq!(PeerEvent::parse("IS_LEADER"), PeerEvent::Line("IS_LEADER".into()));
        assert_eq!(PeerEvent::NotLeader { id: "l".into() }.id(), Some("l"));
        assert_eq!(PeerEvent::parse("ACQUIRED"), PeerEvent::Line("ACQUIRED".into()));
    }

    #[test]
    fn rejects_words_with_spaces() {
        assert!(check_word("a b").is_err());
        assert!(check_word("").is_err());
        assert!(check_word("/zklock/x").is_ok());
    }

    #[test]
    fn compiles_the_peer_into_the_cache() {
        let dir = compiled_classes().expect("javac and the Curator jars are installed");
        assert!(dir.join(PEER_JAR).exists());
        // A second call is served from the cache.
        assert_eq!(compiled_classes().unwrap(), dir);
    }

    /// `semaphore` / `acquire` / `release` against a real server: two leases go to the first
    /// two contenders, the third times out until one is returned.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn semaphore_grants_at_most_max_leases() {
        let server = crate::ZkServer::start().expect("start ZooKeeper");
        let peer = CuratorPeer::start(&server.connect_string())
            .await
            .expect("start the Curator peer");
        let soon = Duration::from_secs(20);
        for id in ["a", "b", "c"] {
            peer.semaphore(id, "/sem/x", 2).await.expect("declare semaphore");
        }
        let mut held = Vec::new();
        for id in ["a", "b"] {
            peer.acquire(id, Some(Duration::from_secs(10))).unwrap();
            let node = peer.wait_acquired(id, soon).await.expect("a lease is free");
            assert!(node.starts_with("/sem/x/leases/"), "{id} got {node}");
            held.push(node);
        }
        assert_ne!(held[0], held[1]);

        peer.acquire("c", Some(Duration::from_millis(300))).unwrap();
        match peer.wait_acquired("c", soon).await {
            Err(PeerError::NotAcquired { id }) => assert_eq!(id, "c"),
            other => panic!("both leases are taken, yet c got {other:?}"),
        }

        peer.release("a").await.expect("return a's lease");
        peer.acquire("c", Some(Duration::from_secs(10))).unwrap();
        let node = peer.wait_acquired("c", soon).await.expect("a's lease is free again");
        assert!(
            node.starts_with("/sem/x/leases/") && !held.contains(&node),
            "c got {node}"
        );

        // One lease per id: a second acquire while holding is refused, not queued.
        peer.acquire("c", Some(Duration::from_millis(300))).unwrap();
        assert!(matches!(
            peer.wait_acquired("c", soon).await,
            Err(PeerError::Peer { id, .. }) if id == "c"
        ));
        peer.release("b").await.unwrap();
        peer.release("c").await.unwrap();
    }
}
