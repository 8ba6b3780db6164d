//! Cron schedules as a sequence of ticks: which tick a moment belongs to, and its neighbours.
//!
//! A schedule is read the way `Job::new_async` of tokio-cron-scheduler reads it (six or seven
//! fields, seconds first), in a time zone (UTC unless the job names another). Ticks are kept as
//! milliseconds since the Unix epoch, which is also how they are stored in ZooKeeper.
//!
//! Daylight saving time, by the kind of schedule (every node computes alike):
//!
//! - A *fixed-time* schedule (its hour field names some hours, like `0 30 2 * * *`) follows
//!   croner's forward search: a local time that does not exist on the spring-forward day runs
//!   at the first moment after the gap, and a local time that occurs twice on the fall-back day
//!   runs at the first of the two only (Vixie cron's rule for fixed-time jobs).
//! - An *interval* schedule (its hour field is `*`, like `0 */15 * * * *`) runs by the clock on
//!   the wall: through the repeated hour it runs in both passes, so "every 15 minutes" stays
//!   every 15 minutes of real time (no 75-minute gap), and across the skipped hour it goes on
//!   at the first matching time after the jump.
//!
//! Every question here (the tick at a moment, the tick before another) is answered from the
//! forward sequence, so the ticks are the same set whichever way they are walked, and the tick
//! after a moment is always later than the moment.

use std::time::{Duration, SystemTime};

use chrono::{DateTime, FixedOffset, Offset, Utc};
use chrono_tz::Tz;
use croner::parser::{CronParser, Seconds};
use croner::Cron;

/// A parsed cron schedule in a time zone.
#[derive(Clone)]
pub(crate) struct Ticks {
    cron: Cron,
    zone: Tz,
    /// Whether the hour field matches every hour: an interval schedule, which runs by the clock
    /// on the wall through a repeated hour (see the module docs).
    every_hour: bool,
}

impl Ticks {
    /// Parses `schedule` with the same rules tokio-cron-scheduler applies to `Job::new_async`;
    /// its times are read in UTC until [`in_zone`](Self::in_zone).
    pub fn parse(schedule: &str) -> Result<Ticks, String> {
        let cron = CronParser::builder()
            .seconds(Seconds::Required)
            .dom_and_dow(true)
            .build()
            .parse(schedule)
            .map_err(|e| e.to_string())?;
        // Seconds, minutes, hours: the third field.
        let hours = schedule.split_whitespace().nth(2).unwrap_or("");
        let every_hour = matches!(hours, "*" | "*/1" | "0-23" | "0-23/1");
        Ok(Ticks {
            cron,
            zone: Tz::UTC,
            every_hour,
        })
    }

    /// The same schedule with its times read in `zone`.
    pub fn in_zone(self, zone: Tz) -> Ticks {
        Ticks { zone, ..self }
    }

    fn local(&self, ms: i64) -> Option<DateTime<Tz>> {
        DateTime::<Utc>::from_timestamp_millis(ms).map(|t| t.with_timezone(&self.zone))
    }

    /// The zone's offset from UTC at `ms`.
    fn offset_at(&self, ms: i64) -> Option<FixedOffset> {
        Some(self.local(ms)?.offset().fix())
    }

    /// The first moment after `from` and at or before `to` whose offset differs from `from`'s
    /// (to the second), if `to`'s does.
    fn offset_change(&self, from: i64, to: i64) -> Option<i64> {
        let before = self.offset_at(from)?;
        if self.offset_at(to)? == before {
            return None;
        }
        let (mut low, mut high) = (from, to);
        while high - low > 1000 {
            let middle = low + (high - low) / 2000 * 1000;
            if self.offset_at(middle)? == before {
                low = middle;
            } else {
                high = middle;
            }
        }
        Some(high)
    }

    /// The first tick after `ms`: the sequence itself.
    fn next_after(&self, ms: i64) -> Option<i64> {
        // Whole seconds, the schedule's resolution: croner keeps a fraction it is given.
        let second = ms.div_euclid(1000).checked_mul(1000)?;
        if self.every_hour {
            self.next_on_the_wall(second)
        } else {
            self.next_by_local_time(second)
        }
    }

    /// A fixed-time schedule's next tick: croner's forward search in the zone. In the second
    /// pass of a repeated hour croner answers with the first pass's moment, behind `second`;
    /// the schedule ran then, so the next tick comes after the repeated hour.
    fn next_by_local_time(&self, second: i64) -> Option<i64> {
        let search = |from: i64, inclusive: bool| {
            self.cron
                .find_next_occurrence(&self.local(from)?, inclusive)
                .ok()
                .map(|t| t.timestamp_millis())
        };
        let next = search(second, false)?;
        if next > second {
            return Some(next);
        }
        // `second` is in the repeated hour's second pass, `next` in its first: the repeated
        // hour ends as long after the change of offset as the offset fell.
        let change = self.offset_change(next, second)?;
        let fell = self.offset_at(next)?.local_minus_utc() - self.offset_at(second)?.local_minus_utc();
        let end = change.checked_add(i64::from(fell.max(0)) * 1000)?;
        search(end.max(second + 1000), true).filter(|t| *t > second)
    }

    /// An interval schedule's next tick: the first moment after `second` whose time on the wall
    /// (in the offset in force then) matches. Searched in the offset in force at `second`;
    /// when the offset changes before the answer, searched again from the change.
    fn next_on_the_wall(&self, second: i64) -> Option<i64> {
        let mut from = second;
        let mut inclusive = false;
        // One change of offset between two ticks, two for a schedule sparse enough to span a
        // whole summer.
        for _ in 0..4 {
            let offset = self.offset_at(from)?;
            let start = DateTime::<Utc>::from_timestamp_millis(from)?.with_timezone(&offset);
            let next = self
                .cron
                .find_next_occurrence(&start, inclusive)
                .ok()?
                .timestamp_millis();
            match self.offset_change(from, next) {
                None => return Some(next),
                Some(change) => {
                    from = change;
                    inclusive = true;
                }
            }
        }
        None
    }

    /// The latest tick at or before `ms` (`inclusive`) or strictly before it. Croner's backward
    /// search may answer a moment the forward search never yields (around a DST change), so it
    /// only finds a starting point two ticks back, from which the forward search walks up.
    fn latest(&self, ms: i64, inclusive: bool) -> Option<i64> {
        let back = |at: i64, inclusive: bool| {
            self.cron
                .find_previous_occurrence(&self.local(at)?, inclusive)
                .ok()
                .map(|t| t.timestamp_millis())
        };
        let start = back(ms, inclusive)?;
        // A second before the starting point, so that it is yielded itself if it is a tick.
        let mut at = back(start, false).unwrap_or(start).saturating_sub(1000);
        if at >= ms {
            // A local time that occurs twice, taken at its second pass: start before the
            // repeated hour instead (offsets change by two hours at the most).
            at = ms.saturating_sub(2 * 3600 * 1000);
        }
        let within = |t: i64| if inclusive { t <= ms } else { t < ms };
        let mut latest = None;
        while let Some(next) = self.next_after(at).filter(|t| within(*t)) {
            latest = Some(next);
            at = next;
        }
        latest
    }

    /// The latest tick at or before `now`: the tick a fire seen at `now` belongs to.
    pub fn tick_at(&self, now: SystemTime) -> Option<i64> {
        // Cron resolution is one second: drop the fraction, or the moment itself would match.
        let now: DateTime<Utc> = now.into();
        self.latest(now.timestamp().checked_mul(1000)?, true)
    }

    /// The tick before `tick`.
    pub fn before(&self, tick: i64) -> Option<i64> {
        self.latest(tick, false)
    }

    /// The tick after `tick`.
    pub fn after(&self, tick: i64) -> Option<i64> {
        self.next_after(tick)
    }

    /// The gap between `tick` and the next tick (the period, for regular schedules).
    pub fn period_after(&self, tick: i64) -> Option<Duration> {
        let next = self.after(tick)?;
        u64::try_from(next - tick).ok().map(Duration::from_millis)
    }
}

/// The ticks after `floor` up to and including `own`, oldest first, at most `late` of them
/// before `own`; and the ticks given up when there were more: the first, the last and how many
/// (counted up to [`COUNT_MISSED_UP_TO`]).
pub(crate) fn due_ticks(ticks: &Ticks, floor: i64, own: i64, late: usize) -> (Vec<i64>, Option<Missed>) {
    let mut due = vec![own];
    let mut missed = None;
    let mut at = own;
    while let Some(before) = ticks.before(at).filter(|b| *b > floor) {
        if due.len() > late {
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

/// Moves the due ticks older than `oldest` (the starting deadline) to the missed ones.
pub(crate) fn past_deadline(due: &mut Vec<i64>, missed: &mut Option<Missed>, oldest: i64) {
    let late = due.iter().take_while(|tick| **tick < oldest).count();
    if late == 0 {
        return;
    }
    let (first, last) = (due[0], due[late - 1]);
    due.drain(..late);
    *missed = Some(match missed.take() {
        Some(earlier) => Missed {
            first: earlier.first,
            last,
            count: earlier.count + late as u64,
        },
        None => Missed {
            first,
            last,
            count: late as u64,
        },
    });
}

/// How many late ticks a beat runs at most by default ([`CatchUp::RunAll`]): older ones are
/// given up (see the [module docs](super#late-ticks)).
///
/// [`CatchUp::RunAll`]: super::CatchUp::RunAll
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
        assert_eq!(due_ticks(&ticks, T - 1000, T, MAX_CATCH_UP), (vec![T], None));
        assert_eq!(
            due_ticks(&ticks, T - 4000, T, MAX_CATCH_UP),
            (vec![T - 3000, T - 2000, T - 1000, T], None)
        );
        // A floor between ticks: the tick after it is due.
        assert_eq!(due_ticks(&ticks, T - 1500, T, MAX_CATCH_UP), (vec![T - 1000, T], None));
    }

    #[test]
    fn due_ticks_give_up_all_but_the_latest_ones_and_count_them() {
        let ticks = Ticks::parse("* * * * * *").unwrap();
        let limit = MAX_CATCH_UP as i64;
        // Exactly the limit of late ticks: all run.
        let (due, missed) = due_ticks(&ticks, T - (limit + 1) * 1000, T, MAX_CATCH_UP);
        assert_eq!(due.len(), MAX_CATCH_UP + 1);
        assert_eq!(missed, None);
        // One more: the oldest is given up.
        let (due, missed) = due_ticks(&ticks, T - (limit + 2) * 1000, T, MAX_CATCH_UP);
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
        let (due, missed) = due_ticks(&ticks, T - 86_400_000, T, MAX_CATCH_UP);
        assert_eq!(due.len(), MAX_CATCH_UP + 1);
        let missed = missed.unwrap();
        assert_eq!((missed.first, missed.last), (T - 86_399_000, T - (limit + 1) * 1000));
        assert_eq!(missed.count, 86_399 - limit as u64);
        // A year back: the count stops at its bound instead of walking every second.
        let (_, missed) = due_ticks(&ticks, T - 365 * 86_400_000, T, MAX_CATCH_UP);
        assert_eq!(missed.unwrap().count, COUNT_MISSED_UP_TO);
    }

    #[test]
    fn fewer_late_ticks_and_a_deadline_give_up_more() {
        let ticks = Ticks::parse("* * * * * *").unwrap();
        // None late: only the fire's own tick; every earlier one is missed.
        let (due, missed) = due_ticks(&ticks, T - 5000, T, 0);
        assert_eq!(
            (due, missed),
            (
                vec![T],
                Some(Missed {
                    first: T - 4000,
                    last: T - 1000,
                    count: 4
                })
            )
        );
        // One late: the latest of them.
        let (due, missed) = due_ticks(&ticks, T - 5000, T, 1);
        assert_eq!(
            (due, missed),
            (
                vec![T - 1000, T],
                Some(Missed {
                    first: T - 4000,
                    last: T - 2000,
                    count: 3
                })
            )
        );
        // A deadline after the given-up ones adds the due ticks before it.
        let (mut due, mut missed) = due_ticks(&ticks, T - 5000, T, 2);
        past_deadline(&mut due, &mut missed, T - 1500);
        assert_eq!(
            (due, missed),
            (
                vec![T - 1000, T],
                Some(Missed {
                    first: T - 4000,
                    last: T - 2000,
                    count: 3
                })
            )
        );
        // A deadline past every due tick leaves nothing to run.
        let (mut due, mut missed) = due_ticks(&ticks, T - 3000, T, 10);
        past_deadline(&mut due, &mut missed, T + 1);
        assert_eq!(
            (due, missed),
            (
                vec![],
                Some(Missed {
                    first: T - 2000,
                    last: T,
                    count: 3
                })
            )
        );
    }

    /// Milliseconds of a local time in `zone`, taking the first when it occurs twice.
    fn local_ms(zone: Tz, y: i32, mo: u32, d: u32, h: u32, mi: u32) -> i64 {
        use chrono::TimeZone;
        zone.with_ymd_and_hms(y, mo, d, h, mi, 0)
            .earliest()
            .unwrap()
            .timestamp_millis()
    }

    /// Every tick from `from` to `to`, walked forward, and the same walked back from `to`.
    fn walk(ticks: &Ticks, from: i64, to: i64) -> (Vec<i64>, Vec<i64>) {
        let mut forward = Vec::new();
        let mut at = from;
        while let Some(next) = ticks.after(at).filter(|t| *t <= to) {
            forward.push(next);
            at = next;
        }
        let mut backward = Vec::new();
        let mut at = ticks.tick_at(tick_time(to));
        while let Some(tick) = at.filter(|t| *t > from) {
            backward.push(tick);
            at = ticks.before(tick);
        }
        backward.reverse();
        (forward, backward)
    }

    #[test]
    fn a_daily_local_time_runs_once_on_both_dst_change_days() {
        let berlin: Tz = "Europe/Berlin".parse().unwrap();
        let ticks = Ticks::parse("0 30 2 * * *").unwrap().in_zone(berlin);
        // Spring forward (2026-03-29, 02:00 -> 03:00): 02:30 does not exist; it runs once,
        // at 03:00 local (01:00 UTC).
        let (forward, backward) = walk(
            &ticks,
            local_ms(berlin, 2026, 3, 28, 0, 0),
            local_ms(berlin, 2026, 3, 31, 0, 0),
        );
        assert_eq!(forward, backward, "walked either way, the same ticks");
        assert_eq!(
            forward,
            vec![
                local_ms(berlin, 2026, 3, 28, 2, 30),
                local_ms(berlin, 2026, 3, 29, 3, 0),
                local_ms(berlin, 2026, 3, 30, 2, 30),
            ]
        );
        // Fall back (2026-10-25, 03:00 -> 02:00): 02:30 happens twice; it runs once, at the
        // first (00:30 UTC).
        let (forward, backward) = walk(
            &ticks,
            local_ms(berlin, 2026, 10, 24, 0, 0),
            local_ms(berlin, 2026, 10, 27, 0, 0),
        );
        assert_eq!(forward, backward, "walked either way, the same ticks");
        assert_eq!(
            forward,
            vec![
                local_ms(berlin, 2026, 10, 24, 2, 30),
                local_ms(berlin, 2026, 10, 25, 2, 30),
                local_ms(berlin, 2026, 10, 26, 2, 30),
            ]
        );
        assert_eq!(local_ms(berlin, 2026, 10, 25, 2, 30), 1_792_888_200_000, "00:30 UTC");
        // A moment in the repeated hour belongs to the day's one tick.
        let second_half_hour = local_ms(berlin, 2026, 10, 25, 2, 30) + 3_600_000 + 60_000;
        assert_eq!(
            ticks.tick_at(tick_time(second_half_hour)),
            Some(local_ms(berlin, 2026, 10, 25, 2, 30))
        );
    }

    const MINUTE: i64 = 60_000;
    /// 2026-10-25 01:00 UTC: Berlin falls back from 03:00 CEST to 02:00 CET.
    const FALL_BACK_UTC: i64 = 1_792_890_000_000;
    /// 2026-03-29 01:00 UTC: Berlin springs forward from 02:00 CET to 03:00 CEST.
    const SPRING_FORWARD_UTC: i64 = 1_774_746_000_000;

    /// An interval schedule (every hour matches) runs by the clock on the wall, through both
    /// passes of the repeated hour: every 15 minutes of real time, no 75-minute gap. Across the
    /// skipped spring hour it goes on 15 minutes after its last tick, too.
    #[test]
    fn an_interval_schedule_runs_through_both_passes_of_the_repeated_hour() {
        let berlin: Tz = "Europe/Berlin".parse().unwrap();
        let ticks = Ticks::parse("0 */15 * * * *").unwrap().in_zone(berlin);
        for change in [FALL_BACK_UTC, SPRING_FORWARD_UTC] {
            let (from, to) = (change - 150 * MINUTE, change + 150 * MINUTE);
            let (forward, backward) = walk(&ticks, from, to);
            assert_eq!(forward, backward, "walked either way, the same ticks");
            let every_quarter: Vec<i64> = (1..=20).map(|q| from + q * 15 * MINUTE).collect();
            assert_eq!(forward, every_quarter, "every 15 minutes of real time around {change}");
            // Every moment belongs to the quarter it is in, and the next tick is ahead of it.
            for minute in 0..300 {
                let at = from + minute * MINUTE + 7_000;
                let tick = ticks.tick_at(tick_time(at)).unwrap();
                assert_eq!(tick, at - (at - from) % (15 * MINUTE), "the tick at {at}");
                assert!(ticks.after(at).unwrap() > at, "a next tick in the past at {at}");
            }
        }
    }

    /// A fixed-time schedule (some hours only) runs once in the repeated hour, in its first
    /// pass; a moment in the second pass belongs to the first pass's last tick, and the next
    /// tick is always ahead.
    #[test]
    fn a_fixed_time_schedule_runs_once_in_the_repeated_hour_and_its_next_tick_is_ahead() {
        let berlin: Tz = "Europe/Berlin".parse().unwrap();
        let ticks = Ticks::parse("0 */20 2 * * *").unwrap().in_zone(berlin);
        let (forward, backward) = walk(&ticks, FALL_BACK_UTC - 3 * 60 * MINUTE, FALL_BACK_UTC + 3 * 60 * MINUTE);
        assert_eq!(forward, backward, "walked either way, the same ticks");
        let first_pass: Vec<i64> = [0, 20, 40]
            .iter()
            .map(|m| FALL_BACK_UTC - 60 * MINUTE + m * MINUTE)
            .collect();
        assert_eq!(forward, first_pass, "02:00, 02:20 and 02:40 CEST only");
        for minute in 0..60 {
            let at = FALL_BACK_UTC + minute * MINUTE + 7_000;
            assert_eq!(ticks.tick_at(tick_time(at)), Some(first_pass[2]), "the tick at {at}");
            let next = ticks.after(at).unwrap();
            assert!(next > at, "a next tick in the past at {at}: {next}");
            assert_eq!(
                next,
                first_pass[0] + 24 * 60 * MINUTE + 60 * MINUTE,
                "02:00 CET the next day"
            );
        }
    }

    #[test]
    fn a_zone_moves_the_ticks_by_its_offset() {
        let new_york: Tz = "America/New_York".parse().unwrap();
        let utc = Ticks::parse("0 0 9 * * *").unwrap();
        let local = utc.clone().in_zone(new_york);
        let now = tick_time(local_ms(new_york, 2026, 7, 1, 12, 0));
        // 09:00 in New York in July is 13:00 UTC; at 12:00 local the day's tick has passed.
        assert_eq!(local.tick_at(now), Some(local_ms(new_york, 2026, 7, 1, 9, 0)));
        assert_eq!(utc.tick_at(now), Some(local_ms(new_york, 2026, 7, 1, 5, 0)));
    }
}
