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
//! history. With lock caching, a Curator contender ([`curator`]) takes the main lock beside
//! them, so cached nodes are given up to another library's contender too.
//!
//! The scheduler workload ([`jobs`]) runs a singleton job on node processes under kills,
//! partitions and leader kills and checks that no tick ran twice and none went unaccounted.
//!
//! The leader-election workload ([`leader`]) runs `Election::serve` in member processes, each
//! behind its own fault proxies; the leader writes to the fenced register with its term's
//! token while it is killed, partitioned past its session, paused past it, or shut down
//! gracefully, and while the ensemble's own leader is killed. Its checker
//! ([`leader::check_leader`], pure, with its own unit tests) finds a violation when the register
//! accepts a write with an older token than one it accepted, a member writes with a token that
//! is none of its terms', a term's token is not larger than every earlier term's, or a member is
//! told it leads before the previous leader's term ended (a leader paused past its session
//! excepted); liveness (another leader writes within a bound after each fault) and progress
//! (enough writes and terms, every fault with its effect) are reported apart.
//!
//! The `zklock exec` workload ([`exec`]) runs `zklock exec` processes on one lock whose
//! commands write from a child process to one log, while holders are SIGKILLed, waiters are
//! SIGKILLed, the holder's node is deleted, a revocation is requested and the holder is
//! partitioned past its session; a grant that writes after the next one began is a violation.
//!
//! Used by the `chaos` example (`./scripts/chaos.sh --duration 10m`; `chaos jobs`, `chaos
//! leader`, `chaos exec`) and by `examples/tests/chaos.rs`, `chaos_jobs.rs`, `chaos_leader.rs`
//! and `chaos_exec.rs` (the CI-sized runs).

pub mod checker;
pub mod clock;
pub mod contender;
pub mod curator;
pub mod exec;
pub mod history;
pub mod jobs;
pub mod leader;
pub mod operator;
pub mod register;
pub mod runner;
