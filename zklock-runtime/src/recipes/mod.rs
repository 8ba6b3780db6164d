//! Recipes built on the lock core, in Curator's node layouts so that Curator clients on the
//! same paths take part: the semaphore's leases ([`semaphore`], whose steps the orchestrator in
//! [`crate::lock`] calls for `LockKind::Semaphore`) and several locks taken together
//! ([`multi`], built on [`Lock`](crate::Lock) handles).

pub(crate) mod multi;
pub(crate) mod semaphore;
