//! The node kept idle at the front of a local queue (lock caching, [`crate::engine::cache`]):
//! *parked* in the gate with the front's slot while no task of this process holds the lock,
//! taken at once by the next local acquirer, or handed to a queued one by the node's keeper.
//!
//! The gate's two locks (`kept` here, `waiting` for the queue) are never held together.

use std::sync::Arc;
use std::time::Instant;

use tokio::sync::{watch, OwnedMutexGuard};

use super::{Gate, Slot, Turn};
use crate::engine::around::Around;

/// What the gate knows of lock caching: the keeper of this process's node, and the node while
/// it is parked.
pub(super) struct Kept<W> {
    /// The keeper task watching the node; `None` when no node is kept.
    keeper: Option<Keeper>,
    /// The node and the front's slot, while nobody holds the lock here.
    parked: Option<Parked<W>>,
    /// Numbers the keepers, so that one that ended cannot act for its successor.
    keepers: u64,
}

/// The task watching a kept node ([`crate::engine::cache`]).
struct Keeper {
    id: u64,
    /// The node it keeps: a release of another node cannot be parked with it.
    node: String,
    /// The directory around the node, as the keeper's watch knows it.
    around: watch::Receiver<Around>,
    /// Whether the node is idle: parked, or out with the keeper to mark or unmark it.
    idle: bool,
}

/// A node parked at the front of the queue with the front's slot: the lock is held by no task
/// of this process, and no other process can have it.
pub(crate) struct Parked<W> {
    slot: OwnedMutexGuard<Slot<W>>,
    pub warm: W,
    /// When the last hold ended.
    pub since: Instant,
    /// Whether the node's data says it is idle (then a taker waits for the keeper, who writes
    /// it back first).
    pub marked: bool,
}

impl<W> Default for Kept<W> {
    fn default() -> Self {
        Kept {
            keeper: None,
            parked: None,
            keepers: 0,
        }
    }
}

impl<W> Turn<W> {
    /// The front's slot, kept with nobody at the front (a parked node).
    fn into_slot(mut self) -> OwnedMutexGuard<Slot<W>> {
        self.slot.take().expect("a turn has its slot until dropped")
    }
}

impl<W> Gate<W> {
    /// Whether a node is kept idle at the front now (parked, or out with its keeper).
    pub fn keeps_idle(&self) -> bool {
        self.kept.lock().keeper.as_ref().is_some_and(|k| k.idle)
    }

    /// Parks `warm`, the node at `node` whose hold behind `turn` just ended, if its keeper is
    /// still keeping it; gives both back otherwise (a first release, or a keeper that ended).
    pub fn park(self: &Arc<Self>, turn: Turn<W>, warm: W, node: &str) -> Result<(), (Turn<W>, W)> {
        // Taken out of the turn before the lock: the gate's two locks are never nested.
        let slot = turn.into_slot();
        let mut guard = self.kept.lock();
        let kept = &mut *guard;
        match kept.keeper.as_mut() {
            Some(keeper) if keeper.node == node && kept.parked.is_none() => {
                keeper.idle = true;
                kept.parked = Some(Parked {
                    slot,
                    warm,
                    since: Instant::now(),
                    marked: false,
                });
                drop(guard);
                // A task that queued after the release looked for one may have been missed by
                // the keeper, which found nothing parked then: tell it again.
                if self.has_waiters() {
                    self.arrived.send_modify(|n| *n = n.wrapping_add(1));
                }
                Ok(())
            }
            _ => {
                drop(guard);
                Err((self.turn_with(slot), warm))
            }
        }
    }

    /// Parks `warm` (at `node`, watched by `around`) under a new keeper; returns the keeper's
    /// number, which the keeper task passes to the calls below. A keeper before it is over.
    pub fn start_keeping(&self, turn: Turn<W>, warm: W, node: String, around: watch::Receiver<Around>) -> u64 {
        let slot = turn.into_slot();
        let mut kept = self.kept.lock();
        kept.keepers += 1;
        let id = kept.keepers;
        kept.keeper = Some(Keeper {
            id,
            node,
            around,
            idle: true,
        });
        let stale = kept.parked.replace(Parked {
            slot,
            warm,
            since: Instant::now(),
            marked: false,
        });
        debug_assert!(stale.is_none(), "a node was parked with nobody keeping it");
        id
    }

    /// Takes the parked node, for an acquirer of this process that found no queue: only when
    /// nobody waits for it, its data is not marked idle and the directory watch last saw the node
    /// alone. The caller holds the front from now on.
    pub fn take_idle(self: &Arc<Self>) -> Option<(Turn<W>, W)> {
        // Asked before the lock: the gate's two locks are never nested. A task that starts
        // waiting just after is served next, by this acquirer's release.
        if self.has_waiters() {
            return None;
        }
        let mut kept = self.kept.lock();
        let ready = kept.parked.as_ref().is_some_and(|p| !p.marked)
            && kept
                .keeper
                .as_ref()
                .is_some_and(|k| *k.around.borrow() == Around::Alone);
        if !ready {
            return None;
        }
        let parked = kept.parked.take()?;
        if let Some(keeper) = kept.keeper.as_mut() {
            keeper.idle = false;
        }
        drop(kept);
        Some((self.turn_with(parked.slot), parked.warm))
    }

    /// The parked node's time and mark, for keeper `id`; `None` while a task holds the lock.
    pub fn parked(&self, id: u64) -> Option<(Instant, bool)> {
        let kept = self.kept.lock();
        kept.keeper.as_ref().filter(|k| k.id == id)?;
        kept.parked.as_ref().map(|p| (p.since, p.marked))
    }

    /// Takes the parked node out for keeper `id`, to mark it, unmark it or hand it over; it
    /// stays idle (see [`repark`](Self::repark), [`hand_over_parked`](Self::hand_over_parked)).
    pub fn unpark(&self, id: u64) -> Option<Parked<W>> {
        let mut kept = self.kept.lock();
        kept.keeper.as_ref().filter(|k| k.id == id)?;
        kept.parked.take()
    }

    /// Puts back what [`unpark`](Self::unpark) took.
    pub fn repark(&self, parked: Parked<W>) {
        let stale = self.kept.lock().parked.replace(parked);
        debug_assert!(stale.is_none(), "two nodes parked at once");
    }

    /// Hands what [`unpark`](Self::unpark) took to the task waiting at the front.
    pub fn hand_over_parked(self: &Arc<Self>, parked: Parked<W>) {
        if let Some(keeper) = self.kept.lock().keeper.as_mut() {
            keeper.idle = false;
        }
        let mut turn = self.turn_with(parked.slot);
        turn.hand_over(parked.warm);
    }

    /// Keeper `id` is over: returns the parked node (with the front) for it to give up, if one
    /// is parked. From now on a release of the node deletes it or starts a new keeper.
    pub fn stop_keeping(self: &Arc<Self>, id: u64) -> Option<(Turn<W>, W)> {
        let mut kept = self.kept.lock();
        if kept.keeper.as_ref().is_some_and(|k| k.id == id) {
            kept.keeper = None;
            let parked = kept.parked.take()?;
            drop(kept);
            return Some((self.turn_with(parked.slot), parked.warm));
        }
        None
    }

    fn turn_with(self: &Arc<Self>, slot: OwnedMutexGuard<Slot<W>>) -> Turn<W> {
        Turn {
            gate: self.clone(),
            slot: Some(slot),
        }
    }
}
