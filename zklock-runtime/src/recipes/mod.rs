//! Recipes built on the lock core, in Curator's node layouts so that Curator clients on the
//! same paths take part: the semaphore's leases ([`semaphore`], whose steps the orchestrator in
//! [`crate::lock`] calls for `LockKind::Semaphore`), several locks taken together ([`multi`])
//! and leader election ([`leader`], with the loop that keeps a future running while leading in
//! [`leader_service`]), the last two built on [`Lock`](crate::Lock) handles.

pub(crate) mod leader;
pub(crate) mod leader_service;
pub(crate) mod multi;
pub(crate) mod semaphore;
