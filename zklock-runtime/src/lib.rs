//! The lock engine behind `zklock`: ZooKeeper lock recipes with owned guards, fencing tokens,
//! reentrancy and a loss signal.
//!
//! Most users depend on the `zklock` facade crate and write `#[distributed_lock]`; this crate is
//! what the attribute expands to, and what you use directly for explicit guards.
//!
//! ```no_run
//! # async fn demo() -> Result<(), zklock_runtime::LockError> {
//! use std::time::Duration;
//! use zklock_runtime::LockClient;
//!
//! let client = LockClient::connect("127.0.0.1:2181").await?;
//! let lock = client.mutex("inventory:42")?;
//! let guard = lock.acquire_timeout(Duration::from_secs(10)).await?;
//! println!("holding with fencing token {}", guard.fencing_token());
//! guard.release().await?;
//! # Ok(()) }
//! ```
//!
//! # Where to look
//!
//! - `lock/`: the `Lock` handle (`mod.rs`) and the acquire path behind it (`acquire.rs`), the
//!   orchestrator that calls down, in order, into the core.
//! - `engine/`: the lock core. `queue.rs` (the ZooKeeper recipe every lock kind shares),
//!   `rules.rs` (the lock kinds and the rule each judges the queue by), `local_queue.rs`
//!   (in-process waiters and node handoff), `reentrancy.rs` (the call scope a hold re-enters
//!   in), `guard.rs` (the hold and its owned guard), `loss.rs` (the loss signal),
//!   `supervise.rs` (what stops work under a hold early: loss, revocation, `max_hold`), `own_node.rs` (the
//!   watch on a node held for a while, across local handoffs: deleted by someone else,
//!   revocation requested), `token.rs`
//!   (fencing tokens),
//!   `alone.rs` (the uncontended fast path), `cleanup.rs` (the one delete path).
//! - `recipes/`: built on the core, in Curator's layouts: `semaphore.rs` (leases),
//!   `multi.rs` (several locks taken together in one order), `leader.rs` (leader election,
//!   Curator's `LeaderLatch` layout) and `leader_service.rs` (a future kept running while
//!   leading).
//! - `connection/`: `connect_string.rs`, `secure.rs` (TLS, SASL, and telling a misconfigured
//!   connection from an unreachable one), `driver.rs`, `session.rs` (one session and its
//!   health); `client/` is the client services keep: `builder.rs` (its settings and their
//!   checks), `config.rs` (the settings as kept) and `sessions.rs` (the session it hands out).
//! - Below the engine: `node_data.rs` (what a contender node says about its holder: what
//!   zklock writes, what it reads back) and `telemetry/` (`metrics.rs`, the counters and
//!   histograms; `gauges.rs`, what is held, waited for and led now).
//! - `ops/`, above the client: `inspect.rs` (a lock's queue for operators) and `revoke.rs`
//!   (asking holders to release).
//! - `scheduler/` (feature `scheduler`): singleton cron jobs.
//!
//! Real servers for tests are in the `zklock-testing` crate.

#![warn(missing_docs)]

mod client;
mod connection;
mod downgrade;
mod engine;
mod error;
mod lock;
#[doc(hidden)]
pub mod macro_support;
mod name;
mod node_data;
mod ops;
mod recipes;
#[cfg(feature = "scheduler")]
pub mod scheduler;
mod telemetry;
#[cfg(test)]
mod test_server;

pub use client::builder::{LockClientBuilder, DEFAULT_TIMEOUT};
pub use client::LockClient;
#[cfg(feature = "tls")]
pub use connection::secure::TlsConfig;
pub use connection::session::SessionStatus;
pub use engine::alone::DEFAULT_FAST_PATH_DIRS;
pub use engine::guard::LockGuard;
pub use engine::loss::LossSignal;
pub use engine::reentrancy::{current_fencing_token, current_fencing_token_for, current_loss_signal};
pub use engine::rules::LockKind;
pub use engine::supervise::{OnLost, OnRevoke, Supervision};
pub use engine::token::{FencingToken, ParseTokenError};
pub use error::{ErrorKind, ErrorSource, LockError};
pub use lock::Lock;
pub use name::{validate_name, MAX_NAME_LEN};
pub use node_data::{ClientKind, ContenderData, MAX_IDENTITY_LEN};
pub use ops::inspect::{LockView, QueuedNode, RecipeKind, Side};
pub use ops::revoke::RevokeOutcome;
pub use recipes::leader::{Election, Leadership, Member};
pub use recipes::leader_service::{LeaderService, Leading, ServeOptions};
pub use recipes::multi::{MultiGuard, MultiLock};
pub use telemetry::metrics::MetricsSnapshot;

/// The ZooKeeper client crate this engine speaks through (zookeeper-client 0.11), for the parts of
/// zklock's API that take its types: ACLs ([`LockClientBuilder::acls`]) and fenced writes
/// ([`LockGuard::fenced_write`]). It is part of zklock's public API either way; the re-export
/// saves pinning the same version. A zookeeper-client release that breaks these types comes
/// with a zklock release that is breaking too (see the changelog's compatibility rules).
pub use zookeeper_client as zk;
