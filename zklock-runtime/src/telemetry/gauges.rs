//! What is going on now, exported as gauges (feature `metrics`): the locks this process holds
//! and waits for, the oldest hold and the nearest `max_hold` deadline of each lock, leadership,
//! and the state of its clients' sessions. The counters and histograms of what happened are in
//! [`crate::telemetry::metrics`]; the table of every name is in docs/operations.md.
//!
//! Each gauge is driven by a value that lives exactly as long as what it counts ([`Held`],
//! [`Waiting`], [`Deadline`], [`SessionGauge`]): dropping it, on any path (release, cancel,
//! panic), takes its part back out. Without the feature these values are empty and cost
//! nothing.
//!
//! | metric | type | labels | what |
//! |---|---|---|---|
//! | `zklock_locks_held` | gauge | `kind`, `lock` | holds this process has now (a reentrant hold counts once) |
//! | `zklock_lock_waiters` | gauge | `kind`, `lock` | acquisitions of this process waiting now |
//! | `zklock_oldest_hold_start_timestamp_seconds` | gauge | `kind`, `lock` | when the oldest current hold was granted (Unix time); 0 when none is held |
//! | `zklock_max_hold_deadline_timestamp_seconds` | gauge | `kind`, `lock` | the nearest `max_hold` deadline of work running under a hold now (Unix time); 0 when none |
//! | `zklock_leader` | gauge | `group` | leaderships of the group this process holds (1 while it leads, 0 while it only competes) |
//! | `zklock_sessions` | gauge | `state` | this process's open clients per session state |
//! | `zklock_session_state` | gauge | | the worst state among them: 0 connected, 1 connecting, 2 suspended, 3 lost, 4 expired |
//! | `zklock_session_disconnects_total` | counter | | connections lost (a connected client became suspended or lost) |
//! | `zklock_session_expiries_total` | counter | | sessions that expired under a client |
//!
//! The `lock` label is the name *template*, as for the counters: per-key locks of one template
//! share one series.

use std::time::Instant;

use crate::connection::session::SessionStatus;
use crate::telemetry::metrics::Labels;

/// A hold of this process, counted in `zklock_locks_held` (and `zklock_leader`) and, by its
/// grant time, in `zklock_oldest_hold_start_timestamp_seconds`, until dropped.
#[must_use]
pub(crate) struct Held {
    #[cfg(feature = "metrics")]
    _entry: export::Entry,
}

impl Held {
    pub fn start(labels: Labels<'_>) -> Held {
        #[cfg(feature = "metrics")]
        return Held {
            _entry: export::Entry::add(export::Set::Held, labels, export::unix_ms_now()),
        };
        #[cfg(not(feature = "metrics"))]
        {
            let _ = labels;
            Held {}
        }
    }
}

/// An acquisition waiting, counted in `zklock_lock_waiters` until dropped. The first wait for
/// a lock also registers its counters at 0, so rates over them have a series from the start.
#[must_use]
pub(crate) struct Waiting {
    #[cfg(feature = "metrics")]
    key: export::Key,
}

impl Waiting {
    pub fn start(labels: Labels<'_>) -> Waiting {
        #[cfg(feature = "metrics")]
        {
            let key = export::Key::of(labels);
            export::register_lock(&key);
            key.gauge("zklock_lock_waiters").increment(1.0);
            Waiting { key }
        }
        #[cfg(not(feature = "metrics"))]
        {
            let _ = labels;
            Waiting {}
        }
    }
}

#[cfg(feature = "metrics")]
impl Drop for Waiting {
    fn drop(&mut self) {
        self.key.gauge("zklock_lock_waiters").decrement(1.0);
    }
}

/// Work under a hold with a `max_hold` bound ending at `end`, counted in
/// `zklock_max_hold_deadline_timestamp_seconds` until dropped: a body that cannot be stopped
/// (blocking code) keeps its passed deadline there for an alert to see.
#[must_use]
pub(crate) struct Deadline {
    #[cfg(feature = "metrics")]
    _entry: export::Entry,
}

impl Deadline {
    pub fn start(labels: Labels<'_>, end: Instant) -> Deadline {
        #[cfg(feature = "metrics")]
        {
            let left = end.saturating_duration_since(Instant::now());
            let at = export::unix_ms_now().saturating_add(left.as_millis() as u64);
            Deadline {
                _entry: export::Entry::add(export::Set::Deadlines, labels, at),
            }
        }
        #[cfg(not(feature = "metrics"))]
        {
            let _ = (labels, end);
            Deadline {}
        }
    }
}

/// Registers the leadership gauge of `group` at 0, so a group whose candidates all wait shows
/// as leaderless rather than as no series.
pub(crate) fn candidate(group: &str) {
    #[cfg(feature = "metrics")]
    metrics::gauge!("zklock_leader", "group" => group.to_owned()).increment(0.0);
    #[cfg(not(feature = "metrics"))]
    let _ = group;
}

/// One client's place in `zklock_sessions` and `zklock_session_state`; it leaves them when
/// dropped (the client is gone) or closed.
pub(crate) struct SessionGauge {
    #[cfg(feature = "metrics")]
    state: std::sync::Mutex<SessionStatus>,
}

impl SessionGauge {
    /// A client that is opening its first session.
    pub fn new() -> SessionGauge {
        #[cfg(feature = "metrics")]
        {
            export::session_moved(None, export::counted(SessionStatus::Connecting));
            SessionGauge {
                state: std::sync::Mutex::new(SessionStatus::Connecting),
            }
        }
        #[cfg(not(feature = "metrics"))]
        SessionGauge {}
    }

    /// The client's status is now `to`.
    pub fn set(&self, to: SessionStatus) {
        #[cfg(feature = "metrics")]
        {
            let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
            let from = std::mem::replace(&mut *state, to);
            if from != to {
                export::session_moved(export::counted(from), export::counted(to));
                let cut = matches!(to, SessionStatus::Suspended | SessionStatus::Lost);
                if from == SessionStatus::Connected && cut {
                    metrics::counter!("zklock_session_disconnects_total").increment(1);
                }
                if to == SessionStatus::Expired {
                    metrics::counter!("zklock_session_expiries_total").increment(1);
                }
            }
        }
        #[cfg(not(feature = "metrics"))]
        let _ = to;
    }
}

#[cfg(feature = "metrics")]
impl Drop for SessionGauge {
    fn drop(&mut self) {
        self.set(SessionStatus::Closed);
    }
}

#[cfg(feature = "metrics")]
mod export {
    use std::collections::{BTreeMap, HashMap, HashSet};
    use std::sync::{Arc, Mutex, OnceLock};
    use std::time::SystemTime;

    use crate::connection::session::SessionStatus;
    use crate::telemetry::metrics::{lock_label, Event, Labels};

    /// The labels of one lock's series: its kind and name template (`None`: `-`).
    #[derive(Clone, PartialEq, Eq, Hash)]
    pub struct Key {
        kind: &'static str,
        template: Option<Arc<str>>,
    }

    impl Key {
        pub fn of(labels: Labels<'_>) -> Key {
            Key {
                kind: labels.kind,
                template: labels.template.cloned(),
            }
        }

        fn lock(&self) -> metrics::SharedString {
            lock_label(self.template.as_ref())
        }

        pub fn gauge(&self, name: &'static str) -> metrics::Gauge {
            metrics::gauge!(name, "kind" => self.kind, "lock" => self.lock())
        }

        fn counter(&self, name: &'static str) -> metrics::Counter {
            metrics::counter!(name, "kind" => self.kind, "lock" => self.lock())
        }
    }

    /// Registers every counter of the lock at 0, once per process.
    pub fn register_lock(key: &Key) {
        static SEEN: OnceLock<Mutex<HashSet<Key>>> = OnceLock::new();
        let seen = SEEN.get_or_init(Default::default);
        if !seen.lock().unwrap_or_else(|e| e.into_inner()).insert(key.clone()) {
            return;
        }
        for event in Event::ALL {
            key.counter(event.metric()).increment(0);
        }
        for name in [
            "zklock_locks_held",
            "zklock_lock_waiters",
            "zklock_oldest_hold_start_timestamp_seconds",
            "zklock_max_hold_deadline_timestamp_seconds",
        ] {
            key.gauge(name).increment(0.0);
        }
    }

    pub fn unix_ms_now() -> u64 {
        SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as u64)
    }

    /// Which multiset of times an [`Entry`] is in.
    #[derive(Clone, Copy, PartialEq, Eq, Hash)]
    pub enum Set {
        /// Grant times of current holds: the oldest is exported, the count is the holds.
        Held,
        /// `max_hold` deadlines of running work: the nearest is exported.
        Deadlines,
    }

    /// Times (Unix ms, with how many share each) of one lock's holds or deadlines.
    type Times = BTreeMap<u64, u32>;

    fn sets() -> &'static Mutex<HashMap<(Set, Key), Times>> {
        static SETS: OnceLock<Mutex<HashMap<(Set, Key), Times>>> = OnceLock::new();
        SETS.get_or_init(Default::default)
    }

    /// One time in one lock's set, until dropped.
    pub struct Entry {
        set: Set,
        key: Key,
        at: u64,
    }

    impl Entry {
        pub fn add(set: Set, labels: Labels<'_>, at: u64) -> Entry {
            let key = Key::of(labels);
            register_lock(&key);
            let mut sets = sets().lock().unwrap_or_else(|e| e.into_inner());
            let times = sets.entry((set, key.clone())).or_default();
            *times.entry(at).or_default() += 1;
            publish(set, &key, times);
            Entry { set, key, at }
        }
    }

    impl Drop for Entry {
        fn drop(&mut self) {
            let mut sets = sets().lock().unwrap_or_else(|e| e.into_inner());
            let Some(times) = sets.get_mut(&(self.set, self.key.clone())) else {
                return;
            };
            if let Some(count) = times.get_mut(&self.at) {
                *count -= 1;
                if *count == 0 {
                    times.remove(&self.at);
                }
            }
            publish(self.set, &self.key, times);
        }
    }

    /// Sets the gauges of `times`; called with the sets locked, so the last write is the
    /// latest state.
    fn publish(set: Set, key: &Key, times: &Times) {
        let first = times.keys().next().map_or(0.0, |ms| *ms as f64 / 1000.0);
        match set {
            Set::Held => {
                let held: u32 = times.values().sum();
                key.gauge("zklock_locks_held").set(f64::from(held));
                key.gauge("zklock_oldest_hold_start_timestamp_seconds").set(first);
                if key.kind == "leader" {
                    metrics::gauge!("zklock_leader", "group" => key.lock()).set(f64::from(held));
                }
            }
            Set::Deadlines => key.gauge("zklock_max_hold_deadline_timestamp_seconds").set(first),
        }
    }

    /// The states `zklock_sessions` counts, worst last: `zklock_session_state` is the index of
    /// the worst one any open client is in.
    const STATES: [(SessionStatus, &str); 5] = [
        (SessionStatus::Connected, "connected"),
        (SessionStatus::Connecting, "connecting"),
        (SessionStatus::Suspended, "suspended"),
        (SessionStatus::Lost, "lost"),
        (SessionStatus::Expired, "expired"),
    ];

    /// The index of `status` in [`STATES`]; `None` for a closed client, which is not counted.
    pub fn counted(status: SessionStatus) -> Option<usize> {
        STATES.iter().position(|(s, _)| *s == status)
    }

    /// A client left the state `from` (`None`: it is new) for `to` (`None`: it is gone).
    pub fn session_moved(from: Option<usize>, to: Option<usize>) {
        // Under one lock, so the worst state written last is the latest.
        static CLIENTS: Mutex<[i64; 5]> = Mutex::new([0; 5]);
        static ONCE: OnceLock<()> = OnceLock::new();
        ONCE.get_or_init(|| {
            metrics::counter!("zklock_session_disconnects_total").increment(0);
            metrics::counter!("zklock_session_expiries_total").increment(0);
            for (_, name) in STATES {
                metrics::gauge!("zklock_sessions", "state" => name).increment(0.0);
            }
        });
        let mut clients = CLIENTS.lock().unwrap_or_else(|e| e.into_inner());
        for (index, change) in [(from, -1), (to, 1)] {
            if let Some(index) = index {
                clients[index] += change;
                metrics::gauge!("zklock_sessions", "state" => STATES[index].1).set(clients[index] as f64);
            }
        }
        let worst = (0..STATES.len()).rev().find(|i| clients[*i] > 0).unwrap_or(0);
        metrics::gauge!("zklock_session_state").set(worst as f64);
    }
}
