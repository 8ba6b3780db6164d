//! Where a node reads the time when it maps a fire to a tick.

use std::time::{Duration, SystemTime};

/// The clock a singleton job reads to decide which scheduled tick a fire belongs to.
///
/// Production code keeps the default [`SystemClock`]. Tests inject a skewed clock
/// ([`OffsetClock`]) to show that the once-per-tick policy does not depend on nodes agreeing on
/// the time; any `Fn() -> SystemTime` closure is a clock too.
///
/// ```
/// use std::time::{Duration, SystemTime};
/// use zklock_runtime::scheduler::{Clock, OffsetClock, SystemClock};
///
/// let ahead = OffsetClock::ahead(Duration::from_millis(700));
/// assert!(ahead.now() > SystemClock.now());
/// let fixed = || SystemTime::UNIX_EPOCH;
/// assert_eq!(fixed.now(), SystemTime::UNIX_EPOCH);
/// ```
pub trait Clock: Send + Sync + 'static {
    /// The current wall-clock time as this node sees it.
    fn now(&self) -> SystemTime;
}

/// The operating system's wall clock.
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> SystemTime {
        SystemTime::now()
    }
}

/// The system clock shifted by a fixed offset: a node whose clock runs ahead or behind.
///
/// ```
/// use std::time::Duration;
/// use zklock_runtime::scheduler::OffsetClock;
///
/// let behind = OffsetClock::behind(Duration::from_millis(700));
/// assert_eq!(format!("{behind:?}"), "OffsetClock(-700ms)");
/// ```
#[derive(Clone, Copy)]
pub struct OffsetClock {
    ahead: bool,
    by: Duration,
}

impl OffsetClock {
    /// A clock that reads `by` later than the system clock.
    pub fn ahead(by: Duration) -> Self {
        OffsetClock { ahead: true, by }
    }

    /// A clock that reads `by` earlier than the system clock.
    pub fn behind(by: Duration) -> Self {
        OffsetClock { ahead: false, by }
    }
}

impl std::fmt::Debug for OffsetClock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let sign = if self.ahead { "+" } else { "-" };
        write!(f, "OffsetClock({sign}{}ms)", self.by.as_millis())
    }
}

impl Clock for OffsetClock {
    fn now(&self) -> SystemTime {
        let now = SystemTime::now();
        if self.ahead {
            now + self.by
        } else {
            now.checked_sub(self.by).unwrap_or(SystemTime::UNIX_EPOCH)
        }
    }
}

impl<F> Clock for F
where
    F: Fn() -> SystemTime + Send + Sync + 'static,
{
    fn now(&self) -> SystemTime {
        self()
    }
}
