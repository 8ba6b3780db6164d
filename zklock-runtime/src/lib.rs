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
//! Where to look: `lock.rs` (the acquire path, which calls down into the others in order),
//! `reentrancy.rs` (the call scope a hold re-enters in), `local_queue.rs` (in-process waiters
//! and node handoff), `queue.rs` (the ZooKeeper recipe every lock kind shares), `rules.rs`
//! (mutex and read/write rules), `semaphore.rs` (leases, in Curator's semaphore layout),
//! `multi.rs` (several locks
//! taken together in one order), `guard.rs` (owned guards, the loss signal, `max_hold`), `token.rs` (fencing tokens), `cleanup.rs` (the
//! one delete path, abandoned contenders), `session.rs`, `connect.rs` and `client.rs`
//! (sessions, connect strings, configuration, closing), `secure.rs` (TLS and SASL settings, and
//! telling a misconfigured connection from an unreachable one). Real servers for tests are in the
//! `zklock-testing` crate.

#![warn(missing_docs)]

mod alone;
mod cleanup;
mod client;
mod connect;
mod driver;
mod error;
mod guard;
mod holder;
mod inspect;
#[cfg(test)]
mod interleavings;
mod local_queue;
mod lock;
#[doc(hidden)]
pub mod macro_support;
mod metrics;
mod model_lock;
mod multi;
mod name;
mod queue;
mod reentrancy;
mod rules;
#[cfg(feature = "scheduler")]
pub mod scheduler;
mod secure;
mod semaphore;
mod session;
mod token;

pub use alone::DEFAULT_FAST_PATH_DIRS;
pub use client::{LockClient, LockClientBuilder};
pub use error::{ErrorKind, LockError};
pub use guard::{LockGuard, LossSignal, OnLost};
pub use holder::{ClientKind, ContenderData, MAX_IDENTITY_LEN};
pub use inspect::{LockView, QueueChanged, QueuedNode, RecipeKind, Side};
pub use lock::{Lock, LockKind};
pub use metrics::MetricsSnapshot;
pub use multi::{MultiGuard, MultiLock};
pub use name::{validate_name, MAX_NAME_LEN};
#[allow(deprecated)]
pub use reentrancy::fencing_token;
pub use reentrancy::{current_fencing_token, current_fencing_token_for, current_loss_signal};
#[cfg(feature = "tls")]
pub use secure::TlsConfig;
pub use session::SessionStatus;
pub use token::{FencingToken, ParseTokenError};

/// Re-export of the ZooKeeper client crate this engine speaks through, for ACLs and raw access.
pub use zookeeper_client as zk;
