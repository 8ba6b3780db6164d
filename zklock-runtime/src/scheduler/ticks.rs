//! Cron schedules as a sequence of ticks: which tick a moment belongs to, and its neighbours.
//!
//! Ticks are the schedule's fire times in UTC, the way `Job::new_async` of tokio-cron-scheduler
//! reads a schedule (six or seven fields, seconds first). They are kept as milliseconds since the
//! Unix epoch, which is also how they are stored in ZooKeeper.

use std::time::{Duration, SystemTime};

use chrono::{DateTime, Utc};
use croner::parser::{CronParser, Seconds};
use croner::Cron;

/// A parsed cron schedule.
#[derive(Clone)]
pub(crate) struct Ticks {
    cron: Cron,
}

impl Ticks {
    /// Parses `schedule` with the same rules tokio-cron-scheduler applies to `Job::new_async`.
    pub fn parse(schedule: &str) -> Result<Ticks, String> {
        let cron = CronParser::builder()
            .seconds(Seconds::Required)
            .dom_and_dow(true)
            .build()
            .parse(schedule)
            .map_err(|e| e.to_string())?;
        Ok(Ticks { cron })
    }

    /// The latest tick at or before `now`: the tick a fire seen at `now` belongs to.
    pub fn tick_at(&self, now: SystemTime) -> Option<i64> {
        // Cron resolution is one second: drop the fraction, or the moment itself would match.
        let now: DateTime<Utc> = now.into();
        let now = DateTime::<Utc>::from_timestamp(now.timestamp(), 0)?;
        self.cron
            .find_previous_occurrence(&now, true)
            .ok()
            .map(|t| t.timestamp_millis())
    }

    /// The tick before `tick`.
    pub fn before(&self, tick: i64) -> Option<i64> {
        let at = DateTime::<Utc>::from_timestamp_millis(tick)?;
        self.cron
            .find_previous_occurrence(&at, false)
            .ok()
            .map(|t| t.timestamp_millis())
    }

    /// The tick after `tick`.
    pub fn after(&self, tick: i64) -> Option<i64> {
        let at = DateTime::<Utc>::from_timestamp_millis(tick)?;
        self.cron
            .find_next_occurrence(&at, false)
            .ok()
            .map(|t| t.timestamp_millis())
    }

    /// The gap between `tick` and the next tick (the period, for regular schedules).
    pub fn period_after(&self, tick: i64) -> Option<Duration> {
        let next = self.after(tick)?;
        u64::try_from(next - tick).ok().map(Duration::from_millis)
    }
}

/// A tick as a point in time.
pub(crate) fn tick_time(tick: i64) -> SystemTime {
    match u64::try_from(tick) {
        Ok(ms) => SystemTime::UNIX_EPOCH + Duration::from_millis(ms),
        Err(_) => SystemTime::UNIX_EPOCH,
    }
}

/// A tick in RFC 3339 form, for logs.
pub(crate) fn show(tick: i64) -> String {
    DateTime::<Utc>::from_timestamp_millis(tick)
        .map(|t| t.to_rfc3339_opts(chrono::SecondsFormat::Millis, true))
        .unwrap_or_else(|| tick.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn maps_a_moment_to_the_tick_at_or_before_it() {
        let ticks = Ticks::parse("*/5 * * * * *").unwrap();
        let at = |ms: u64| SystemTime::UNIX_EPOCH + Duration::from_millis(ms);
        assert_eq!(ticks.tick_at(at(1_700_000_004_999)), Some(1_700_000_000_000));
        assert_eq!(ticks.tick_at(at(1_700_000_005_000)), Some(1_700_000_005_000));
        let every_second = Ticks::parse("* * * * * *").unwrap();
        assert_eq!(every_second.tick_at(at(1_700_000_005_731)), Some(1_700_000_005_000));
        assert_eq!(every_second.before(1_700_000_005_000), Some(1_700_000_004_000));
        assert_eq!(ticks.before(1_700_000_005_000), Some(1_700_000_000_000));
        assert_eq!(ticks.after(1_700_000_005_000), Some(1_700_000_010_000));
        assert_eq!(ticks.period_after(1_700_000_005_000), Some(Duration::from_secs(5)));
    }

    #[test]
    fn rejects_a_bad_schedule_with_a_reason() {
        let err = Ticks::parse("every tuesday").err().unwrap();
        assert!(!err.is_empty());
        assert!(Ticks::parse("0 0 * * *").is_err(), "seconds are required");
    }
}
