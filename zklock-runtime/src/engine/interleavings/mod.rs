//! Model checks of the in-process parts that decide who holds what, run under shuttle's
//! scheduler: every test runs its tasks many times, each time in another interleaving (chosen
//! at random, and by PCT, which favours the rare orders that expose ordering bugs), with
//! cancellation at chosen awaits. A deadlock fails the run as surely as a broken assertion.
//!
//! Why shuttle and not loom: the code under test is async and built on tokio's `Mutex`,
//! `oneshot` and task-local storage, which work on any executor. Shuttle runs those futures
//! on an executor of its own and chooses which task runs at every await; loom would need
//! every primitive replaced by its own. What shuttle does not explore is preemption inside a
//! `std::sync::Mutex` critical section; in the local queue those sections never await and
//! are short, and the model treats them as atomic, which they are with respect to each other.
//!
//! - The local queue and its handoff ([`crate::engine::local_queue`]): at most one local holder at a
//!   time; a released node goes to a waiter or is deleted, never left in the slot with nobody
//!   to take it, also when waiters give up or a turn is dropped at once; a release that waits
//!   for its node to be taken always hears back. The holders release as
//!   [`Holding::end`](crate::engine::guard) does: hand over when someone waits, else delete.
//! - Lock caching ([`crate::engine::cache`]): a node kept idle by the front of the local queue,
//!   local acquirers (some giving up), and a contender of another process whose arrival the
//!   node's directory watch learns some steps late. Never two holders; a local holder's node
//!   is always first in the directory; the other process always gets its turn; every node
//!   made is deleted exactly once, and none is left in the gate.
//! - The reentrancy scope ([`crate::engine::reentrancy`]): only code inside a scope sees it, whatever
//!   the interleaving: not sibling futures, not other tasks, and a scope future takes the
//!   scope of where it runs. (Not modelled: a task spawned from inside a scope. Shuttle may
//!   run another task within the `spawn` call itself, in the middle of the spawner's poll,
//!   which tokio never does; `tests/lock_reentrancy.rs` covers spawning on tokio.)

mod cache;
mod local_queue;
mod reentrancy;

/// Interleavings per test and scheduler; the whole suite of models runs in a few seconds.
const ITERATIONS: usize = 3_000;
