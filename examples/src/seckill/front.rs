//! The front the demo's requests pass on their way to the service instances, as a gateway in
//! front of them would route: to any instance, or by item with a consistent hash.
//!
//! Routing by item is what lets a cached lock pay off: every buyer of an item reaches the same
//! instance, so that instance keeps the item's lock between sales (`--lock-cache`) and the
//! other instances never ask for it.

use std::hash::{DefaultHasher, Hash, Hasher};

/// How the front spreads requests over the instances (`--route`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Route {
    /// Each request to an instance picked at random; a repeated request (a double click) to
    /// another instance than the original's, so the two race across processes.
    #[default]
    Random,
    /// Every request for an item to one instance while that instance lives (a cart by its
    /// first item), as a gateway hashing the item id would. The hash is rendezvous hashing: an
    /// instance's death moves its own items to the others and leaves every other item where
    /// it was.
    ByItem,
}

impl Route {
    /// The name the command line and the benchmark's JSON use.
    pub fn name(self) -> &'static str {
        match self {
            Route::Random => "random",
            Route::ByItem => "by-item",
        }
    }

    /// The instance a request goes to, among those `alive` says still serve (`None` when
    /// none does). `item` is the request's item (a cart's first); `spread` is the instance a
    /// random route picked for it, taken as is when that one lives and otherwise the next
    /// live one after it.
    pub fn pick(self, item: i64, spread: usize, alive: &[bool]) -> Option<usize> {
        let n = alive.len();
        match self {
            Route::Random => (0..n).map(|k| (spread + k) % n).find(|&k| alive[k]),
            Route::ByItem => (0..n).filter(|&k| alive[k]).max_by_key(|&k| weight(item, k)),
        }
    }
}

/// Rendezvous weight of `item` on instance `k`. `DefaultHasher::new()` hashes with fixed keys,
/// so every run (and every process) routes an item alike.
fn weight(item: i64, k: usize) -> u64 {
    let mut hasher = DefaultHasher::new();
    (item, k).hash(&mut hasher);
    hasher.finish()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn by_item_sends_an_item_to_one_instance_and_spreads_the_items() {
        let alive = [true; 3];
        let mut per_instance = [0usize; 3];
        for item in 0..300 {
            let k = Route::ByItem.pick(item, 0, &alive).unwrap();
            for spread in 0..3 {
                assert_eq!(Route::ByItem.pick(item, spread, &alive), Some(k), "item {item}");
            }
            per_instance[k] += 1;
        }
        assert!(per_instance.iter().all(|&n| n >= 60), "{per_instance:?}");
    }

    #[test]
    fn by_item_moves_only_a_dead_instances_items() {
        let all = [true; 3];
        let without_1 = [true, false, true];
        for item in 0..300 {
            let before = Route::ByItem.pick(item, 0, &all).unwrap();
            let after = Route::ByItem.pick(item, 0, &without_1).unwrap();
            assert_ne!(after, 1);
            if before != 1 {
                assert_eq!(after, before, "item {item} moved although its instance lives");
            }
        }
    }

    #[test]
    fn random_takes_the_spread_pick_or_the_next_live_instance() {
        assert_eq!(Route::Random.pick(7, 2, &[true, true, true]), Some(2));
        assert_eq!(Route::Random.pick(7, 2, &[true, true, false]), Some(0));
        assert_eq!(Route::Random.pick(7, 0, &[false, false, true]), Some(2));
    }

    #[test]
    fn no_live_instance_is_no_pick() {
        assert_eq!(Route::Random.pick(1, 0, &[false, false]), None);
        assert_eq!(Route::ByItem.pick(1, 0, &[false, false]), None);
        assert_eq!(Route::Random.pick(1, 0, &[]), None);
    }
}
