//! Who holds what in this process, so the same logical holder can re-enter without a round trip.
//!
//! The logical holder is the tokio task (by [`tokio::task::Id`]); code running directly inside
//! `block_on` (such as `#[tokio::main]` or `#[tokio::test]` bodies) has no task, and is
//! identified by its thread, which a `block_on` future never leaves. A guard moved to another
//! task still counts as held by the task that acquired it.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, Weak};

use crate::guard::Holding;

/// The identity of a logical holder.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum Holder {
    Task(tokio::task::Id),
    Thread(std::thread::ThreadId),
}

impl Holder {
    pub fn current() -> Holder {
        match tokio::task::try_id() {
            Some(id) => Holder::Task(id),
            None => Holder::Thread(std::thread::current().id()),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) struct HoldKey {
    pub dir: String,
    pub kind: crate::LockKind,
    pub holder: Holder,
}

/// The registry of live holds, by key. Entries are weak: the guards own the hold.
#[derive(Default)]
pub(crate) struct Holds {
    map: Mutex<HashMap<HoldKey, Weak<Holding>>>,
}

impl Holds {
    /// The live hold for `key`, if any.
    pub fn get(&self, key: &HoldKey) -> Option<Arc<Holding>> {
        let map = self.map.lock().unwrap_or_else(|e| e.into_inner());
        map.get(key).and_then(Weak::upgrade)
    }

    pub fn insert(&self, key: HoldKey, holding: &Arc<Holding>) {
        let mut map = self.map.lock().unwrap_or_else(|e| e.into_inner());
        map.insert(key, Arc::downgrade(holding));
    }

    /// Forgets `key` if it still points at a dead hold (a newer hold may have replaced it).
    pub fn remove_dead(&self, key: &HoldKey) {
        let mut map = self.map.lock().unwrap_or_else(|e| e.into_inner());
        if map.get(key).is_some_and(|w| w.strong_count() == 0) {
            map.remove(key);
        }
    }
}
