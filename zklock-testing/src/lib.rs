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
//!   certificates from a per-test [`TestCa`] (mutual TLS with [`ClientAuth::Need`]), and
//!   [`ZkServerBuilder::sasl_user`] adds SASL DIGEST-MD5 users; ensembles take the same calls.
//! - [`PgServer`]: a throw-away PostgreSQL server (its own `initdb` cluster, no fsync) on a
//!   free loopback port, for code that keeps its data in a database; one empty database per
//!   test with [`PgServer::create_database`], SQL through [`PgServer::psql`].
//! - [`process`]: re-running the test binary as a child process, and a closed port.
//! - [`FaultProxy`]: a TCP proxy between a client and a server that can drop all traffic
//!   (a partition), reset every connection, or add latency, switched at runtime.
//!
//! Everything is synchronous (std threads and processes), so it works from plain `#[test]`s and
//! from `#[tokio::test]`s alike. Servers die with their handle — on drop, also while a test
//! unwinds from a panic — and with the test process, even when it is killed.
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
//! When the server jars, `java` or the PostgreSQL binaries are missing, starting a server fails
//! with an error that says to run `scripts/install-deps.sh`.

mod certs;
pub mod curator;
mod ensemble;
mod error;
mod four_letter;
mod java;
mod ports;
mod postgres;
pub mod process;
mod proxy;
mod server;

pub use certs::{TestCa, TestIdentity};
pub use ensemble::{ZkEnsemble, ZkEnsembleBuilder};
pub use error::TestingError;
pub use postgres::{PgServer, PgServerBuilder};
pub use proxy::{FaultProxy, ProxyMode};
pub use server::{ClientAuth, ZkServer, ZkServerBuilder};
