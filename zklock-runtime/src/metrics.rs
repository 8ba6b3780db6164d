//! Counters a user can read from [`LockClient::metrics`](crate::LockClient::metrics).

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

#[derive(Default)]
pub(crate) struct Metrics {
    pub acquired: AtomicU64,
    pub reentered: AtomicU64,
    pub handed_off: AtomicU64,
    pub without_listing: AtomicU64,
    pub timed_out: AtomicU64,
    pub lost: AtomicU64,
    pub released: AtomicU64,
    pub max_hold_exceeded: AtomicU64,
}

impl Metrics {
    pub fn bump(counter: &AtomicU64) {
        counter.fetch_add(1, Relaxed);
    }

    /// The counters, with the count of abandoned acquisitions the cleanup keeps.
    pub fn snapshot(&self, abandoned: u64) -> MetricsSnapshot {
        MetricsSnapshot {
            acquired: self.acquired.load(Relaxed),
            reentered: self.reentered.load(Relaxed),
            handed_off: self.handed_off.load(Relaxed),
            granted_without_listing: self.without_listing.load(Relaxed),
            timed_out: self.timed_out.load(Relaxed),
            lost: self.lost.load(Relaxed),
            released: self.released.load(Relaxed),
            max_hold_exceeded: self.max_hold_exceeded.load(Relaxed),
            abandoned,
        }
    }
}

/// A point-in-time copy of a client's counters.
///
/// ```no_run
/// # async fn demo(client: zklock_runtime::LockClient) {
/// let m = client.metrics();
/// println!("acquired {} (reentrant {}), timed out {}, lost {}", m.acquired, m.reentered, m.timed_out, m.lost);
/// # }
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct MetricsSnapshot {
    /// Locks granted through ZooKeeper (reentrant grants not included).
    pub acquired: u64,
    /// Reentrant grants served without a round trip.
    pub reentered: u64,
    /// Grants served by handing a held node to the next waiting task of this process
    /// (included in `acquired`).
    pub handed_off: u64,
    /// Grants proven uncontended without listing the lock directory (included in
    /// `acquired`; see `docs/safety.md`, "Skipping the listing").
    pub granted_without_listing: u64,
    /// Acquisitions that gave up at their timeout.
    pub timed_out: u64,
    /// Holds that were reported lost.
    pub lost: u64,
    /// Holds whose node was released.
    pub released: u64,
    /// Work stopped because it held its lock past its `max_hold` bound.
    pub max_hold_exceeded: u64,
    /// Acquisitions dropped or failed midway whose contender node was cleaned up.
    pub abandoned: u64,
}
