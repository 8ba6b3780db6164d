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

/// The ticks after `floor` up to and including `own`, oldest first, at most
/// [`MAX_CATCH_UP`] of them before `own`; and the ticks given up when there were more: the
/// first, the last and how many (counted up to [`COUNT_MISSED_UP_TO`]).
pub(crate) fn due_ticks(ticks: &Ticks, floor: i64, own: i64) -> (Vec<i64>, Option<Missed>) {
    let mut due = vec![own];
    let mut missed = None;
    let mut at = own;
    while let Some(before) = ticks.before(at).filter(|b| *b > floor) {
        if due.len() > MAX_CATCH_UP {
            let first = ticks.after(floor).filter(|f| *f <= before).unwrap_or(before);
            let mut count = 1;
            let mut walk = first;
            while walk < before && count < COUNT_MISSED_UP_TO {
                match ticks.after(walk) {
                    Some(next) => walk = next,
                    None => break,
                }
                count += 1;
            }
            missed = Some(Missed {
                first,
                last: before,
                count,
            });
            break;
        }
        due.push(before);
        at = before;
    }
    due.reverse();
    (due, missed)
}

/// Ticks given up in one go.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Missed {
    pub first: i64,
    pub last: i64,
    pub count: u64,
}

/// How many ticks one fire may still run before its own: older ticks are given up (see the
/// [module docs](super#late-ticks)).
pub(crate) const MAX_CATCH_UP: usize = 10;

/// Given-up ticks are counted one by one up to this many (a schedule of seconds down for a day
/// gives up 86,400); past it the count says "at least".
const COUNT_MISSED_UP_TO: u64 = 100_000;

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

    const T: i64 = 1_700_000_000_000;

    #[test]
    fn due_ticks_are_every_tick_after_the_floor_oldest_first() {
        let ticks = Ticks::parse("* * * * * *").unwrap();
        assert_eq!(due_ticks(&ticks, T - 1000, T), (vec![T], None));
        assert_eq!(
            due_ticks(&ticks, T - 4000, T),
            (vec![T - 3000, T - 2000, T - 1000, T], None)
        );
        // A floor between ticks: the tick after it is due.
        assert_eq!(due_ticks(&ticks, T - 1500, T), (vec![T - 1000, T], None));
    }

    #[test]
    fn due_ticks_give_up_all_but_the_latest_ones_and_count_them() {
        let ticks = Ticks::parse("* * * * * *").unwrap();
        let limit = MAX_CATCH_UP as i64;
        // Exactly the limit of late ticks: all run.
        let (due, missed) = due_ticks(&ticks, T - (limit + 1) * 1000, T);
        assert_eq!(due.len(), MAX_CATCH_UP + 1);
        assert_eq!(missed, None);
        // One more: the oldest is given up.
        let (due, missed) = due_ticks(&ticks, T - (limit + 2) * 1000, T);
        assert_eq!(due.len(), MAX_CATCH_UP + 1);
        assert_eq!(due.first(), Some(&(T - limit * 1000)));
        assert_eq!(due.last(), Some(&T));
        let gone = T - (limit + 1) * 1000;
        assert_eq!(
            missed,
            Some(Missed {
                first: gone,
                last: gone,
                count: 1
            })
        );
        // A floor a day back costs no more than the limit, and every tick given up is counted.
        let (due, missed) = due_ticks(&ticks, T - 86_400_000, T);
        assert_eq!(due.len(), MAX_CATCH_UP + 1);
        let missed = missed.unwrap();
        assert_eq!((missed.first, missed.last), (T - 86_399_000, T - (limit + 1) * 1000));
        assert_eq!(missed.count, 86_399 - limit as u64);
        // A year back: the count stops at its bound instead of walking every second.
        let (_, missed) = due_ticks(&ticks, T - 365 * 86_400_000, T);
        assert_eq!(missed.unwrap().count, COUNT_MISSED_UP_TO);
    }
}
