//! The clock every process of a chaos run stamps its events with.
//!
//! `CLOCK_MONOTONIC` is one clock for the whole host: readings taken in different processes on
//! one machine are directly comparable, which `std::time::Instant` does not expose as a number.

/// Nanoseconds on the host's `CLOCK_MONOTONIC`.
pub fn now_ns() -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: clock_gettime writes into the timespec we own; CLOCK_MONOTONIC always exists on Linux.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    assert_eq!(rc, 0, "clock_gettime(CLOCK_MONOTONIC) failed");
    (ts.tv_sec as u64) * 1_000_000_000 + ts.tv_nsec as u64
}

/// Milliseconds between two readings of [`now_ns`] (0 when `later` is earlier).
pub fn ms_between(earlier: u64, later: u64) -> u64 {
    later.saturating_sub(earlier) / 1_000_000
}
