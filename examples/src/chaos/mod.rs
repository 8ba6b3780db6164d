//! A Jepsen-style safety check of zklock under faults (issue #8).
//!
//! The runner ([`runner`]) starts a 3-member ZooKeeper ensemble, a fenced register
//! ([`register`]) and several contender processes ([`contender`]) that take a mutex, a second
//! one, and both in a multi-lock, in a loop and write to the register under them, each through
//! its own fault proxies. It injects faults — leader kill, a holder partitioned until its
//! session expires, a holder's member isolated, a holder paused past its session timeout, a
//! client closed under load, a multi-lock waiter partitioned until its session expires, a
//! whole-ensemble restart, an idle period long enough for the lock dir to be reaped — and
//! records a history ([`history`]). The checker ([`checker`]) is a pure function of that
//! history.
//!
//! The scheduler workload ([`jobs`]) runs a singleton job on node processes under kills,
//! partitions and leader kills and checks that no tick ran twice and none went unaccounted.
//!
//! Used by the `chaos` example (`./scripts/chaos.sh --duration 10m`) and by
//! `examples/tests/chaos.rs` (the CI-sized run).

pub mod checker;
pub mod clock;
pub mod contender;
pub mod history;
pub mod jobs;
pub mod register;
pub mod runner;
