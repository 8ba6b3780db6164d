//! The lock core: one contender queue in ZooKeeper and the parts that decide who holds what.
//!
//! Every lock kind is the same queue ([`queue`]) judged by a different rule ([`rules`]):
//! contenders append ephemeral sequential nodes to the lock directory, and each waits only for
//! the node its rule names. In front of it, [`local_queue`] lines up the tasks of this process
//! (exclusive kinds) and hands a node from one local holder to the next; [`reentrancy`] lets a
//! body re-enter a hold it runs under; [`guard`] is the hold itself and its guard, [`loss`]
//! what tells work under it that it was lost, [`supervise`] what stops that work early (a
//! loss, a revocation, `max_hold`);
//! [`own_node`] the watch on a held node, across the holds it is handed through (deleted by
//! someone else, revocation asked); [`cache`] keeps an idle node for this process (opt-in lock
//! caching) while [`around`] watches its directory for anyone else; [`token`] is the fencing
//! token a grant carries and [`clock`] the stamp `max_hold` counts from. [`alone`] is the
//! uncontended fast path and [`cleanup`] the one path by which contender nodes are deleted.
//!
//! Nothing here reaches up into the orchestrator ([`crate::lock`]), the recipes built on it, or
//! the client: they call down, and hand in what the core needs (a session, a deadline, a rule).

pub(crate) mod alone;
pub(crate) mod around;
pub(crate) mod cache;
pub(crate) mod cleanup;
pub(crate) mod clock;
mod fenced;
pub(crate) mod guard;
#[cfg(test)]
mod interleavings;
pub(crate) mod local_queue;
pub(crate) mod lock_delay;
pub(crate) mod loss;
pub(crate) mod model_lock;
pub(crate) mod own_node;
pub(crate) mod queue;
pub(crate) mod reentrancy;
pub(crate) mod rules;
pub(crate) mod supervise;
pub(crate) mod token;
