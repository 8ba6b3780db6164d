//! Real ZooKeeper servers for tests, examples and your own test suites.
//!
//! Modelled on Apache Curator's `TestingServer` and `TestingCluster`: every server is a real
//! Apache ZooKeeper 3.8 JVM started from the installed jars (Debian's `zookeeper` package, or
//! `$ZOOKEEPER_HOME/lib`), on free loopback ports, with a temporary data directory and a short
//! tick (200 ms by default) so that session expiry takes about a second.
//!
//! - [`ZkServer`]: one standalone server; stop, kill, restart (same port and data), pause
//!   (SIGSTOP) and resume it; ask it four-letter words (`ruok`, `srvr`, `mntr`, `wchs`).
//! - [`ZkEnsemble`]: an N-member quorum; find the leader, kill or pause members, cut one member
//!   off from the others while its clients stay connected ([`ZkEnsemble::isolate`]), wait for a
//!   quorum again.
//! - Secured servers: [`ZkServerBuilder::tls`] serves TLS on a second, TLS-only port with
//!   certificates from a per-test [`TestCa`] (mutual TLS with [`ClientAuth::Need`]; a
//!   certificate of your own, e.g. expired or for another host, with [`IssueOptions`] and
//!   [`ZkServerBuilder::tls_with`]), and [`ZkServerBuilder::sasl_user`] adds SASL DIGEST-MD5
//!   users; ensembles take the same calls.
//! - [`PgServer`]: a throw-away PostgreSQL server (its own `initdb` cluster, no fsync) on a
//!   free loopback port, for code that keeps its data in a database; one empty database per
//!   test with [`PgServer::create_database`], SQL through [`PgServer::psql`].
//! - [`RedisServer`]: a throw-away Redis server (no persistence) on a free loopback port, to
//!   compare against a Redis lock; pause (SIGSTOP) and resume it.
//! - [`process`]: re-running the test binary as a child process, a closed port, and a
//!   command's output within a bound.
//! - [`FaultProxy`]: a TCP proxy between a client and a server that can drop all traffic
//!   (a partition), reset every connection, or add latency, switched at runtime.
//!
//! Servers, ensembles, [`PgServer`] and [`FaultProxy`] are synchronous (std threads and
//! processes, no async runtime needed), so they work from plain `#[test]`s and from
//! `#[tokio::test]`s alike; their calls block briefly (a start for seconds, while the JVM comes
//! up). [`curator::CuratorPeer`] is async: its calls are awaited on a tokio runtime. Servers die
//! with their handle — on drop, also while a test unwinds from a panic — and with the test
//! process, even when it is killed.
//!
//! The JVMs start from class-data-sharing archives that the first server, ensemble member or
//! Curator peer of each kind on the machine writes when it is stopped (in
//! `$CARGO_TARGET_DIR/jvm-class-archives`, else `zklock-testing-jvm-class-archives` in the
//! temporary directory): each later start then costs about a fifth less CPU. An archive that no
//! longer fits the installed JDK or jars is passed over, never an error.
//!
//! ```no_run
//! use std::time::Duration;
//! use zklock_testing::{FaultProxy, ZkServer};
//!
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! let server = ZkServer::builder()
//!     .system_property("znode.container.checkIntervalMs", "100") // reap empty lock dirs fast
//!     .start()?;
//! let proxy = FaultProxy::start(server.addr())?;
//! let client = zookeeper_client::Client::connector()
//!     .with_session_timeout(Duration::from_secs(2))
//!     .connect(&proxy.connect_string())
//!     .await?;
//! proxy.blackhole(); // the session expires about 2 s from now
//! # let _ = client;
//! # Ok(()) }
//! ```
//!
//! What it needs on the machine: a Java runtime (`java` from `JAVA_HOME` or `PATH`) and the
//! ZooKeeper 3.8 server jars, from Debian's or Ubuntu's `zookeeper` package
//! (`apt-get install zookeeper default-jdk-headless`) or from an unpacked Apache ZooKeeper
//! release named by `ZOOKEEPER_HOME`; for [`curator::CuratorPeer`] also `javac` and the
//! Curator jars (`libcurator-recipes-java`, `libslf4j-java`); for [`PgServer`] PostgreSQL's
//! `initdb` and `postgres` (`postgresql`, or `PG_BINDIR`); for [`RedisServer`] `redis-server`
//! (`redis-server`, or `REDIS_SERVER`); for [`PrometheusServer`] `prometheus` (`prometheus`, or
//! `PROMETHEUS`). When one is missing, starting fails
//! with an error that names the variables and places it looked at and what to install.

mod binaries;
mod certs;
mod class_sharing;
pub mod curator;
mod ensemble;
mod error;
mod four_letter;
mod java;
mod orphans;
mod ports;
mod postgres;
pub mod process;
mod prometheus;
mod proxy;
mod redis;
mod server;
mod startup;

pub use certs::{IssueOptions, TestCa, TestIdentity};
pub use ensemble::{ZkEnsemble, ZkEnsembleBuilder};
pub use error::TestingError;
pub use postgres::{PgServer, PgServerBuilder};
pub use prometheus::{PrometheusServer, PrometheusServerBuilder};
pub use proxy::{FaultProxy, ProxyMode};
pub use redis::RedisServer;
pub use server::{ClientAuth, ZkServer, ZkServerBuilder};
