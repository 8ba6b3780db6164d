//! Counters a user can read from [`LockClient::metrics`](crate::LockClient::metrics), and,
//! with the `metrics` feature, the same events exported through the
//! [`metrics`](https://docs.rs/metrics) facade, so any exporter (Prometheus, StatsD, …) sees
//! them:
//!
//! | metric | type | what |
//! |---|---|---|
//! | `zklock_acquired_total` | counter | grants through ZooKeeper (handoffs included) |
//! | `zklock_reentered_total` | counter | reentrant grants |
//! | `zklock_handed_off_total` | counter | grants of a node handed over inside the process |
//! | `zklock_granted_from_cache_total` | counter | grants of a node kept idle in the process's lock cache (included in `zklock_handed_off_total`) |
//! | `zklock_granted_without_listing_total` | counter | grants proven first without a listing |
//! | `zklock_timed_out_total` | counter | acquisitions that gave up at their timeout |
//! | `zklock_lost_total` | counter | holds released after being reported lost |
//! | `zklock_released_total` | counter | holds released |
//! | `zklock_max_hold_exceeded_total` | counter | work stopped at its `max_hold` |
//! | `zklock_wait_seconds` | histogram | time from asking for a lock to its grant |
//! | `zklock_hold_seconds` | histogram | time from grant to release |
//!
//! Singleton jobs (feature `scheduler`) add, labelled `job_name` with the job's name (not
//! `job`, which Prometheus gives the scrape job), and their lock's metrics are labelled `lock`
//! with it:
//!
//! | metric | type | what |
//! |---|---|---|
//! | `zklock_job_runs_total` | counter | runs by `outcome` (`ok`, `failed`, `panicked`, `timed_out`, `lost`, `replaced`) |
//! | `zklock_job_skips_total` | counter | beats that found a new tick but ran nothing |
//! | `zklock_job_missed_total` | counter | ticks given up (catch-up policy, starting deadline) |
//! | `zklock_job_run_seconds` | histogram | how long runs took |
//! | `zklock_job_start_delay_seconds` | histogram | from a tick to its run's start, by this node's clock |
//! | `zklock_job_runs_in_progress` | gauge | runs on this node now |
//! | `zklock_job_last_run_timestamp_seconds` | gauge | when the last run on this node started (Unix time; 0: none yet) |
//! | `zklock_job_last_success_timestamp_seconds` | gauge | when the last run on this node that ended ok ended (0: none yet) |
//! | `zklock_job_next_tick_timestamp_seconds` | gauge | the next tick, as this node's beats see it |
//! | `zklock_job_period_seconds` | gauge | the gap between the next tick and the one after it |
//! | `zklock_job_paused` | gauge | 1 while the job is paused, as this node last read its record |
//!
//! What is held, waited for and leading now, and the sessions' state, are the gauges of
//! [`crate::telemetry::gauges`]. Every series of a lock is registered at 0 with its first wait, and
//! every series of a job when the job is made, so rates and alerts have them from the start.
//!
//! Labels: `kind` (`mutex`, `read`, `write`, `semaphore`, `leader`) and `lock`, the lock's name
//! *template* (`inventory:{sku}`: what the attribute was written with, or what
//! [`Lock::with_template`](crate::Lock::with_template) gave), never the filled-in name, so
//! per-key locks cannot blow up the number of series. Locks without a template are labelled
//! `lock="-"`.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::Duration;

#[derive(Default)]
pub(crate) struct Metrics {
    acquired: AtomicU64,
    reentered: AtomicU64,
    handed_off: AtomicU64,
    from_cache: AtomicU64,
    without_listing: AtomicU64,
    timed_out: AtomicU64,
    lost: AtomicU64,
    released: AtomicU64,
    max_hold_exceeded: AtomicU64,
}

/// Something that happened to a lock, counted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Event {
    Acquired,
    Reentered,
    HandedOff,
    FromCache,
    WithoutListing,
    TimedOut,
    Lost,
    Released,
    MaxHoldExceeded,
}

impl Event {
    /// Every event, so a lock's counters can be registered at 0 with its first wait
    /// ([`crate::telemetry::gauges::Waiting`]).
    #[cfg(feature = "metrics")]
    pub(crate) const ALL: [Event; 9] = [
        Event::Acquired,
        Event::Reentered,
        Event::HandedOff,
        Event::FromCache,
        Event::WithoutListing,
        Event::TimedOut,
        Event::Lost,
        Event::Released,
        Event::MaxHoldExceeded,
    ];

    #[cfg_attr(not(feature = "metrics"), allow(dead_code))]
    pub(crate) fn metric(self) -> &'static str {
        match self {
            Event::Acquired => "zklock_acquired_total",
            Event::Reentered => "zklock_reentered_total",
            Event::HandedOff => "zklock_handed_off_total",
            Event::FromCache => "zklock_granted_from_cache_total",
            Event::WithoutListing => "zklock_granted_without_listing_total",
            Event::TimedOut => "zklock_timed_out_total",
            Event::Lost => "zklock_lost_total",
            Event::Released => "zklock_released_total",
            Event::MaxHoldExceeded => "zklock_max_hold_exceeded_total",
        }
    }
}

/// A duration measured on a lock.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Timing {
    /// From asking for the lock to its grant.
    Wait,
    /// From the grant to the release.
    Hold,
}

/// What the exported metrics are labelled with.
#[derive(Debug, Clone, Copy)]
#[cfg_attr(not(feature = "metrics"), allow(dead_code))]
pub(crate) struct Labels<'a> {
    /// The `kind` label: [`LockKind::label`](crate::engine::rules::LockKind::label).
    pub kind: &'static str,
    /// Shared, so exporting it clones a pointer, not the text.
    pub template: Option<&'a std::sync::Arc<str>>,
}

impl Metrics {
    fn counter(&self, event: Event) -> &AtomicU64 {
        match event {
            Event::Acquired => &self.acquired,
            Event::Reentered => &self.reentered,
            Event::HandedOff => &self.handed_off,
            Event::FromCache => &self.from_cache,
            Event::WithoutListing => &self.without_listing,
            Event::TimedOut => &self.timed_out,
            Event::Lost => &self.lost,
            Event::Released => &self.released,
            Event::MaxHoldExceeded => &self.max_hold_exceeded,
        }
    }

    /// Counts `event`, here and in the exported metrics.
    pub fn record(&self, event: Event, labels: Labels<'_>) {
        self.counter(event).fetch_add(1, Relaxed);
        #[cfg(feature = "metrics")]
        export::count(event.metric(), labels);
        #[cfg(not(feature = "metrics"))]
        let _ = labels;
    }

    /// Counts `event` like [`record`](Self::record), exporting it through the handle `cache`
    /// keeps: for an event counted again and again under the same labels (the re-entries of
    /// one hold), whose exported key would otherwise be built and looked up every time.
    #[inline]
    pub fn record_cached(&self, event: Event, labels: Labels<'_>, cache: &CounterCache) {
        self.counter(event).fetch_add(1, Relaxed);
        #[cfg(feature = "metrics")]
        cache.count(event, labels);
        #[cfg(not(feature = "metrics"))]
        let _ = (labels, cache);
    }

    /// Records a wait or hold time in the exported metrics (nothing without the feature).
    pub fn time(&self, timing: Timing, labels: Labels<'_>, took: Duration) {
        #[cfg(feature = "metrics")]
        export::time(timing, labels, took);
        #[cfg(not(feature = "metrics"))]
        let _ = (timing, labels, took);
    }

    /// The counters, with the count of abandoned acquisitions the cleanup keeps.
    pub fn snapshot(&self, abandoned: u64) -> MetricsSnapshot {
        MetricsSnapshot {
            acquired: self.acquired.load(Relaxed),
            reentered: self.reentered.load(Relaxed),
            handed_off: self.handed_off.load(Relaxed),
            granted_from_cache: self.from_cache.load(Relaxed),
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
    /// Grants of a node the process's lock cache kept idle after the previous hold
    /// ([`Lock::with_cache`](crate::Lock::with_cache); included in `handed_off`).
    pub granted_from_cache: u64,
    /// Grants proven first in the queue without listing the lock directory (included in
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

/// The `lock` label of a lock's series: its name template, `-` without one.
#[cfg(feature = "metrics")]
pub(crate) fn lock_label(template: Option<&std::sync::Arc<str>>) -> metrics::SharedString {
    match template {
        Some(template) => metrics::SharedString::from(template.clone()),
        None => metrics::SharedString::const_str("-"),
    }
}

/// The exported counter of one event under one set of labels, registered with its first count
/// and reused by the next ones under the same event and labels (others are counted the
/// ordinary way). Meant to live no longer than what it counts for (a hold): a handle
/// registered before a recorder was installed counts nowhere, and is dropped with its owner.
#[derive(Default)]
pub(crate) struct CounterCache {
    #[cfg(feature = "metrics")]
    slot: std::sync::OnceLock<CachedCounter>,
}

#[cfg(feature = "metrics")]
struct CachedCounter {
    event: Event,
    kind: &'static str,
    template: Option<std::sync::Arc<str>>,
    counter: metrics::Counter,
}

#[cfg(feature = "metrics")]
impl CounterCache {
    fn count(&self, event: Event, labels: Labels<'_>) {
        let cached = self.slot.get_or_init(|| CachedCounter {
            event,
            kind: labels.kind,
            template: labels.template.cloned(),
            counter: export::counter(event.metric(), labels),
        });
        let same_labels = cached.event == event
            && cached.kind == labels.kind
            && cached.template.as_deref() == labels.template.map(|t| &**t);
        if same_labels {
            cached.counter.increment(1);
        } else {
            export::count(event.metric(), labels);
        }
    }
}

#[cfg(feature = "metrics")]
mod export {
    use super::{lock_label, Labels, Timing};

    fn lock(labels: &Labels<'_>) -> metrics::SharedString {
        lock_label(labels.template)
    }

    pub fn counter(metric: &'static str, labels: Labels<'_>) -> metrics::Counter {
        metrics::counter!(metric, "kind" => labels.kind, "lock" => lock(&labels))
    }

    pub fn count(metric: &'static str, labels: Labels<'_>) {
        counter(metric, labels).increment(1);
    }

    pub fn time(timing: Timing, labels: Labels<'_>, took: std::time::Duration) {
        let metric = match timing {
            Timing::Wait => "zklock_wait_seconds",
            Timing::Hold => "zklock_hold_seconds",
        };
        metrics::histogram!(metric, "kind" => labels.kind, "lock" => lock(&labels)).record(took.as_secs_f64());
    }
}
