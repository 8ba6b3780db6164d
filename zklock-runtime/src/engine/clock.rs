//! Stamps of when a guard was handed out, which `max_hold` counts from.
//!
//! A reentrant acquisition is answered in place in a few tens of nanoseconds, and reading the
//! precise monotonic clock (`Instant::now`) is a good part of that on a virtual machine (about
//! 18 ns where the coarse clock takes 4). So a re-entry is stamped from the kernel's coarse
//! monotonic clock: the same clock as of its last tick, never ahead of the precise one and
//! behind it by at most a tick or two (a few milliseconds). Elapsed time is always measured
//! by the precise clock, so a coarse stamp can only make a bound run out that much early,
//! never late: `max_hold` is about hung work, not about safety (see
//! [`crate::engine::supervise`]). A new grant, which has just waited for a round trip or a
//! handover, is stamped from the precise clock: its bound runs out neither early nor late.

use std::time::{Duration, Instant};

/// A reading of the monotonic clock (`CLOCK_MONOTONIC`), precise or coarse.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Stamp {
    nanos: u64,
}

impl Stamp {
    /// Now, from the precise clock.
    pub(crate) fn now() -> Stamp {
        Stamp {
            nanos: read(libc::CLOCK_MONOTONIC),
        }
    }

    /// Now, from the coarse clock: a few milliseconds early at most, never late. (Where the
    /// kernel has no coarse clock, the precise one.)
    pub(crate) fn coarse() -> Stamp {
        #[cfg(any(target_os = "linux", target_os = "android"))]
        let clock = libc::CLOCK_MONOTONIC_COARSE;
        #[cfg(not(any(target_os = "linux", target_os = "android")))]
        let clock = libc::CLOCK_MONOTONIC;
        Stamp { nanos: read(clock) }
    }

    /// Time since the stamp, by the precise clock: never less than the true time.
    pub(crate) fn elapsed(self) -> Duration {
        Duration::from_nanos(read(libc::CLOCK_MONOTONIC).saturating_sub(self.nanos))
    }

    /// The stamp as an [`Instant`], for deadlines: now, less the time elapsed since it.
    pub(crate) fn to_instant(self) -> Instant {
        let now = Instant::now();
        now.checked_sub(self.elapsed()).unwrap_or(now)
    }
}

/// Nanoseconds on `clock` (a monotonic clock: it cannot fail for a valid id and pointer).
fn read(clock: libc::clockid_t) -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: `ts` is a valid, writable timespec for the duration of the call.
    let rc = unsafe { libc::clock_gettime(clock, &mut ts) };
    debug_assert_eq!(rc, 0, "clock_gettime failed for a monotonic clock");
    (ts.tv_sec as u64)
        .saturating_mul(1_000_000_000)
        .saturating_add(ts.tv_nsec as u64)
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, Instant};

    use super::Stamp;

    /// Time since a stamp and since the `Instant`s read just before and just after it, each
    /// measured after the stamp's: `(since after, since the stamp, since before)`, 10 000 times.
    fn readings_around(stamp: fn() -> Stamp) -> impl Iterator<Item = (Duration, Duration, Duration)> {
        (0..10_000).map(move |_| {
            let before = Instant::now();
            let stamp = stamp();
            let after = Instant::now();
            (after.elapsed(), stamp.elapsed(), before.elapsed())
        })
    }

    /// Time measured from a coarse stamp is never short (the stamp is not ahead of the moment
    /// it was taken) and never long by more than the coarse clock's lag.
    #[test]
    fn a_coarse_stamp_is_never_late_and_only_a_few_milliseconds_early() {
        for (since_after, since_stamp, since_before) in readings_around(Stamp::coarse) {
            assert!(
                since_stamp >= since_after,
                "a stamp ahead of its moment: {since_stamp:?} < {since_after:?}"
            );
            assert!(
                since_stamp <= since_before + Duration::from_millis(50),
                "a stamp far behind its moment: {since_stamp:?} against {since_before:?}"
            );
        }
    }

    /// A precise stamp reads the same clock as `Instant`: time measured from it is neither
    /// short nor long by more than the readings around it.
    #[test]
    fn a_precise_stamp_matches_the_instants_around_it() {
        for (since_after, since_stamp, since_before) in readings_around(Stamp::now) {
            assert!(
                since_after <= since_stamp && since_stamp <= since_before,
                "{since_after:?} {since_stamp:?} {since_before:?}"
            );
        }
    }

    /// Elapsed time grows with the precise clock, not in the coarse clock's steps.
    #[test]
    fn elapsed_time_grows_between_two_readings() {
        let stamp = Stamp::coarse();
        let first = stamp.elapsed();
        std::thread::sleep(Duration::from_millis(5));
        let second = stamp.elapsed();
        assert!(second >= first + Duration::from_millis(5), "{first:?} then {second:?}");
    }
}
