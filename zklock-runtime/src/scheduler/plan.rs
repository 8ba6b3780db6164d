//! What a beat decides under the job's lock, as pure functions of what it knows: the record as
//! read, this node's clock and ZooKeeper's, the ticks it handled, the job's policy, catch-up
//! and starting deadline. Nothing here talks to ZooKeeper or reads a clock: the store reads and
//! writes ([`super::store`]), the hold carries the plan out ([`super::hold`]), and every
//! decision is tested here without a server.
//!
//! Two clocks meet in a beat. This node's clock maps the beat to a tick; ZooKeeper's clock
//! (the commit time of the session's latest write, plus the time since) bounds it: a node may
//! act at most [`CLOCK_AHEAD_LIMIT`] ahead of ZooKeeper. Every time a decision compares with a
//! tick (the tick to take, the ticks a record or a replace request can stand for, the starting
//! deadline) is read through that same bound, so a node whose clock runs ahead by any amount
//! decides as a node whose clock is right would.

use std::time::Duration;

use super::policy::{CatchUp, Policy};
use super::ticks::{due_ticks, past_deadline, tick_time, Missed, Ticks};

/// How far ahead of the ensemble's clock a tick may be and still be taken. A node whose clock
/// runs further ahead takes the ticks that are due by ZooKeeper's clock instead of its own, so
/// it cannot push the record past ticks the other nodes have yet to run.
pub(crate) const CLOCK_AHEAD_LIMIT: Duration = Duration::from_secs(1);

fn limit_ms() -> i64 {
    CLOCK_AHEAD_LIMIT.as_millis() as i64
}

/// The two clocks of a beat, in milliseconds since the Unix epoch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Clocks {
    /// This node's clock.
    pub local: i64,
    /// ZooKeeper's clock as the session last learnt it; `None` before its first write.
    pub server: Option<i64>,
}

impl Clocks {
    /// The time this node acts by: its own clock, but never more than [`CLOCK_AHEAD_LIMIT`]
    /// past ZooKeeper's.
    pub fn now(&self) -> i64 {
        match self.server {
            Some(server) => self.local.min(server.saturating_add(limit_ms())),
            None => self.local,
        }
    }
}

/// The latest tick that may be taken: `own` (this node's tick), unless ZooKeeper's clock says
/// it is more than [`CLOCK_AHEAD_LIMIT`] in the future; then the latest tick due by then.
pub(crate) fn takeable(ticks: &Ticks, own: i64, server: Option<i64>) -> Option<i64> {
    let Some(server) = server else {
        return Some(own);
    };
    let limit = server.saturating_add(limit_ms());
    if own <= limit {
        Some(own)
    } else {
        ticks.tick_at(tick_time(limit))
    }
}

/// The tick a claim of `claimed`, written when ZooKeeper's clock read `written`, can stand for:
/// `claimed` itself, unless it lies more than [`CLOCK_AHEAD_LIMIT`] after `written` (only a node
/// whose clock runs ahead writes that); then the latest tick due by then. Used for the tick
/// record (written at its `mtime`) and for replace requests (created at their `ctime`), so that
/// neither a record nor a request from a node ahead reaches past the ticks due when it was made.
pub(crate) fn credible(ticks: &Ticks, claimed: i64, written: i64) -> Option<i64> {
    let limit = written.saturating_add(limit_ms());
    if claimed <= limit {
        Some(claimed)
    } else {
        ticks.tick_at(tick_time(limit))
    }
}

/// The latest tick an unproven record (restored from a backup, edited by hand, a reset's or a
/// removal's tombstone) leaves in doubt: it was written when ZooKeeper's clock read `written`,
/// so any tick due by then (or up to [`CLOCK_AHEAD_LIMIT`] later, which a node ahead may take)
/// may have run before it was written, whatever tick the record names. Such ticks count as
/// taken: none runs twice.
pub(crate) fn in_doubt_up_to(ticks: &Ticks, written: i64) -> Option<i64> {
    ticks.tick_at(tick_time(written.saturating_add(limit_ms())))
}

/// What the record, as read, shows taken: the tick it can stand for ([`credible`]), and when
/// it was not written by a scheduler node (restored, edited, a tombstone, or cleared after
/// ticks were taken), the latest tick due when it was written ([`in_doubt_up_to`]), where that
/// is later.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Taken {
    pub credible: Option<i64>,
    pub in_doubt: Option<i64>,
}

impl Taken {
    /// Judges a record that names `tick` (`None`: the record is empty), written when
    /// ZooKeeper's clock read `written`. `proven`: written by a scheduler node at the znode's
    /// current version. `ever_written`: the znode's data was set since it was created (a
    /// record emptied by hand says as little as a restored one).
    pub fn judge(ticks: &Ticks, tick: Option<i64>, written: i64, proven: bool, ever_written: bool) -> Taken {
        let credible = tick.and_then(|tick| credible(ticks, tick, written));
        let in_doubt = if proven || (tick.is_none() && !ever_written) {
            None
        } else {
            in_doubt_up_to(ticks, written).filter(|last| Some(*last) > credible)
        };
        Taken { credible, in_doubt }
    }

    /// The latest tick taken, as far as anyone can tell.
    pub fn up_to(&self) -> Option<i64> {
        self.credible.max(self.in_doubt)
    }

    /// The ticks in doubt, first and last: those after the credible tick (or, when the record
    /// was emptied and names none, after `named`, the latest tick the history names) up to
    /// [`in_doubt`](Self::in_doubt). The first is `None` when nothing names a tick: every
    /// tick up to the last is in doubt.
    pub fn doubt(&self, ticks: &Ticks, named: Option<i64>) -> Option<(Option<i64>, i64)> {
        let last = self.in_doubt?;
        let Some(known) = self.credible.or(named) else {
            return Some((None, last));
        };
        let first = ticks.after(known).filter(|first| *first <= last).unwrap_or(last);
        Some((Some(first), last))
    }
}

/// What a beat knows when it decides which ticks to run.
#[derive(Clone)]
pub(crate) struct Beat<'a> {
    pub ticks: &'a Ticks,
    pub policy: Policy,
    pub catch_up: CatchUp,
    pub starting_deadline: Option<Duration>,
    pub clocks: Clocks,
    /// The tick to take now ([`takeable`]), later than every tick this node handled.
    pub own: i64,
    /// The latest tick this node is done with.
    pub since: Option<i64>,
    /// The latest tick the record shows taken ([`Taken::up_to`]): the tick it can stand for,
    /// or for a record not written by a scheduler node, the ticks due when it was written; `None`
    /// with no record. Every tick after it is untaken: whoever takes one rewrites the record.
    pub recorded: Option<i64>,
    pub paused: bool,
}

/// What a beat does under the lock.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Plan {
    /// The record shows `own` taken already: nothing to run.
    Taken { recorded: i64 },
    /// The job is paused: `own` is taken as skipped.
    Paused,
    /// Runs `due` in order, gives up `missed` and records `passed` as skipped; the node is
    /// done up to `floor` at least.
    Run {
        due: Vec<i64>,
        missed: Option<Missed>,
        /// Under [`Policy::Skip`]: the untaken ticks between the record and the own tick, which
        /// came while the job's lock was busy. Nobody will run them; the history says so.
        passed: Option<Missed>,
        floor: Option<i64>,
    },
}

/// Decides which ticks a beat runs and which it gives up.
///
/// Ticks at or before the record were taken; ticks at or before `since` were handled here; the
/// ticks in between are late, and run as the policy and catch-up say. With no record at all
/// (a new job), only the own tick is due. A skip-policy beat runs only its own tick, and names
/// the untaken ticks it passes over so that they are in the history, not nowhere. The starting
/// deadline is judged by [`Clocks::now`], the time the tick was chosen by.
pub(crate) fn plan(beat: &Beat<'_>) -> Plan {
    let own = beat.own;
    if let Some(recorded) = beat.recorded.filter(|recorded| *recorded >= own) {
        return Plan::Taken { recorded };
    }
    if beat.paused {
        return Plan::Paused;
    }
    let (since, late) = match beat.policy {
        Policy::OncePerTick | Policy::Allow => (beat.since, beat.catch_up.late()),
        Policy::BufferOne | Policy::Replace => (beat.since, 0),
        Policy::Skip => (None, 0),
    };
    // A node's first beat (`since` is none) catches up from the record alone.
    let floor = match beat.recorded {
        Some(recorded) => since.max(Some(recorded)),
        None => since.max(beat.ticks.before(own)),
    };
    let (mut due, mut missed) = match floor {
        Some(floor) => due_ticks(beat.ticks, floor, own, late),
        // The schedule has no tick before `own`: `own` is its first.
        None => (vec![own], None),
    };
    let passed = if beat.policy == Policy::Skip {
        missed.take()
    } else {
        None
    };
    if let Some(deadline) = beat.starting_deadline {
        let oldest = beat.clocks.now().saturating_sub(deadline.as_millis() as i64);
        past_deadline(&mut due, &mut missed, oldest);
    }
    Plan::Run {
        due,
        missed,
        passed,
        floor,
    }
}

/// Why a run of ticks is not run ([`Gap`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Why {
    /// Due when an unproven record was written at `written`: they may have run before it.
    /// `open`: nothing names where they start, so every tick up to the last is meant.
    InDoubt { written: i64, open: bool },
    /// Passed over under [`Policy::Skip`]: they came while the job's lock was busy.
    Passed,
    /// Given up by the catch-up policy or the starting deadline.
    GaveUp,
}

/// A run of ticks a beat does not run, for one history entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Gap {
    pub first: i64,
    pub last: i64,
    /// How many ticks, counted up to [`super::ticks::COUNT_MISSED_UP_TO`] (0: not counted).
    pub count: u64,
    pub why: Why,
}

/// The runs of ticks a beat leaves unrun and must name in the history, oldest first: those in
/// doubt ([`Taken::doubt`]; `named`: the latest tick the history names), those its plan
/// passes over and those it gives up.
pub(crate) fn gaps(
    ticks: &Ticks,
    taken: &Taken,
    written: i64,
    named: Option<i64>,
    passed: Option<&Missed>,
    missed: Option<&Missed>,
) -> Vec<Gap> {
    let doubt = taken.doubt(ticks, named).map(|(first, last)| Gap {
        first: first.unwrap_or(last),
        last,
        count: 0,
        why: Why::InDoubt {
            written,
            open: first.is_none(),
        },
    });
    let range = |m: &Missed, why| Gap {
        first: m.first,
        last: m.last,
        count: m.count,
        why,
    };
    doubt
        .into_iter()
        .chain(passed.map(|m| range(m, Why::Passed)))
        .chain(missed.map(|m| range(m, Why::GaveUp)))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    const T: i64 = 1_700_000_000_000;
    const S: i64 = 1000;
    const HOUR: i64 = 3600 * S;

    fn every_second() -> Ticks {
        Ticks::parse("* * * * * *").unwrap()
    }

    #[test]
    fn the_time_a_node_acts_by_is_its_clock_capped_by_zookeepers() {
        let cases = [
            // (local, server, now)
            (T, None, T),
            (T, Some(T), T),
            (T - HOUR, Some(T), T - HOUR),
            (T + 900, Some(T), T + 900),
            (T + S, Some(T), T + S),
            (T + HOUR, Some(T), T + S),
            (i64::MAX, Some(T), T + S),
        ];
        for (local, server, now) in cases {
            let clocks = Clocks { local, server };
            assert_eq!(clocks.now(), now, "{clocks:?}");
        }
    }

    #[test]
    fn a_tick_is_takeable_up_to_a_second_past_zookeepers_clock() {
        let ticks = every_second();
        let cases = [
            // (own, server, takeable)
            (T, None, Some(T)),
            (T + HOUR, None, Some(T + HOUR)),
            (T, Some(T), Some(T)),
            (T + S, Some(T), Some(T + S)),
            (T + 2 * S, Some(T), Some(T + S)),
            (T + HOUR, Some(T + 300), Some(T + S)),
            (T - HOUR, Some(T), Some(T - HOUR)),
        ];
        for (own, server, expected) in cases {
            assert_eq!(takeable(&ticks, own, server), expected, "own {own} server {server:?}");
        }
    }

    /// A record or a replace request stands for its own tick unless it was made more than a
    /// second before that tick by ZooKeeper's clock; then for the ticks due when it was made.
    #[test]
    fn a_claim_stands_for_no_tick_after_its_write_time() {
        let ticks = every_second();
        let five = Ticks::parse("*/5 * * * * *").unwrap();
        let cases = [
            // (schedule, claimed, written, credible)
            (&ticks, T, T, Some(T)),
            (&ticks, T, T + HOUR, Some(T)),
            (&ticks, T + S, T, Some(T + S)),
            (&ticks, T + 2 * S, T, Some(T + S)),
            (&ticks, T + HOUR, T + 300, Some(T + S)),
            (&five, T + HOUR, T + 300, Some(T)),
            (&five, T + HOUR, T + 4 * S + 300, Some(T + 5 * S)),
            // An unreadable request counts as tick 0: it asks for nothing.
            (&ticks, 0, T, Some(0)),
        ];
        for (schedule, claimed, written, expected) in cases {
            assert_eq!(credible(schedule, claimed, written), expected, "{claimed} at {written}");
        }
    }

    /// A restored or edited record leaves every tick due when it was written in doubt (a
    /// second of ZooKeeper's clock ahead included), whatever tick it names.
    #[test]
    fn an_unproven_record_leaves_the_ticks_due_when_it_was_written_in_doubt() {
        let ticks = every_second();
        let five = Ticks::parse("*/5 * * * * *").unwrap();
        assert_eq!(in_doubt_up_to(&ticks, T), Some(T + S));
        assert_eq!(in_doubt_up_to(&ticks, T + 300), Some(T + S));
        assert_eq!(in_doubt_up_to(&five, T + 300), Some(T));
        assert_eq!(in_doubt_up_to(&five, T + 4 * S + 300), Some(T + 5 * S));
    }

    fn beat(ticks: &Ticks) -> Beat<'_> {
        Beat {
            ticks,
            policy: Policy::OncePerTick,
            catch_up: CatchUp::default(),
            starting_deadline: None,
            clocks: Clocks {
                local: T,
                server: Some(T),
            },
            own: T,
            since: None,
            recorded: None,
            paused: false,
        }
    }

    fn run(due: &[i64], floor: Option<i64>) -> Plan {
        Plan::Run {
            due: due.iter().map(|d| T + d * S).collect(),
            missed: None,
            passed: None,
            floor: floor.map(|f| T + f * S),
        }
    }

    #[test]
    fn a_beat_runs_the_untaken_ticks_the_record_proves() {
        let ticks = every_second();
        let at = |s: i64| Some(T + s * S);
        let cases: Vec<(&str, Beat<'_>, Plan)> = vec![
            (
                "taken already",
                Beat {
                    recorded: at(0),
                    ..beat(&ticks)
                },
                Plan::Taken { recorded: T },
            ),
            (
                "taken by a later tick",
                Beat {
                    recorded: at(3),
                    ..beat(&ticks)
                },
                Plan::Taken { recorded: T + 3 * S },
            ),
            (
                "paused",
                Beat {
                    recorded: at(-1),
                    paused: true,
                    ..beat(&ticks)
                },
                Plan::Paused,
            ),
            (
                "the next tick",
                Beat {
                    recorded: at(-1),
                    ..beat(&ticks)
                },
                run(&[0], Some(-1)),
            ),
            (
                "a proven record: the late ticks too",
                Beat {
                    recorded: at(-3),
                    since: at(-5),
                    ..beat(&ticks)
                },
                run(&[-2, -1, 0], Some(-3)),
            ),
            (
                "a first beat catches up from a proven record",
                Beat {
                    recorded: at(-3),
                    ..beat(&ticks)
                },
                run(&[-2, -1, 0], Some(-3)),
            ),
            (
                "handled here already",
                Beat {
                    recorded: at(-3),
                    since: at(-2),
                    ..beat(&ticks)
                },
                run(&[-1, 0], Some(-2)),
            ),
            (
                "no record: only the own tick",
                Beat {
                    since: at(-5),
                    ..beat(&ticks)
                },
                run(&[0], Some(-1)),
            ),
            (
                "buffer one: no late ticks",
                Beat {
                    recorded: at(-3),
                    policy: Policy::BufferOne,
                    ..beat(&ticks)
                },
                Plan::Run {
                    due: vec![T],
                    missed: Some(Missed {
                        first: T - 2 * S,
                        last: T - S,
                        count: 2,
                    }),
                    passed: None,
                    floor: at(-3),
                },
            ),
            (
                "skip: the own tick only, and the ticks it passes named",
                Beat {
                    recorded: at(-3),
                    policy: Policy::Skip,
                    ..beat(&ticks)
                },
                Plan::Run {
                    due: vec![T],
                    missed: None,
                    passed: Some(Missed {
                        first: T - 2 * S,
                        last: T - S,
                        count: 2,
                    }),
                    floor: at(-3),
                },
            ),
            (
                "skip beside a node that handled ticks: the record, not the node, names them",
                Beat {
                    recorded: at(-3),
                    since: at(-1),
                    policy: Policy::Skip,
                    ..beat(&ticks)
                },
                Plan::Run {
                    due: vec![T],
                    missed: None,
                    passed: Some(Missed {
                        first: T - 2 * S,
                        last: T - S,
                        count: 2,
                    }),
                    floor: at(-3),
                },
            ),
        ];
        for (what, beat, expected) in cases {
            assert_eq!(plan(&beat), expected, "{what}");
        }
    }

    /// A record that was restored, edited or emptied by hand, whatever it shows (`running`
    /// included), counts every tick due when it was written as taken, in doubt: those are named
    /// in the history, not run. The ticks after it were due when nobody wrote the record, so
    /// nobody took them: they run as late ticks do.
    #[test]
    fn an_unproven_record_holds_the_ticks_due_when_written_in_doubt_and_runs_the_later_ones() {
        let ticks = every_second();
        let at = |s: i64| Some(T + s * S);
        let written = T - 3 * S - 300;
        let restored = Taken::judge(&ticks, at(-10), written, false, true);
        assert_eq!(
            restored,
            Taken {
                credible: at(-10),
                in_doubt: at(-3)
            }
        );
        assert_eq!(restored.up_to(), at(-3));
        let unproven = Beat {
            recorded: restored.up_to(),
            since: at(-5),
            ..beat(&ticks)
        };
        assert_eq!(plan(&unproven), run(&[-2, -1, 0], Some(-3)));
        assert_eq!(
            gaps(&ticks, &restored, written, at(-5), None, None),
            vec![Gap {
                first: T - 9 * S,
                last: T - 3 * S,
                count: 0,
                why: Why::InDoubt { written, open: false }
            }]
        );
        // Written by a scheduler node at the znode's version: no doubt.
        let proven = Taken::judge(&ticks, at(-10), written, true, true);
        assert_eq!(proven.in_doubt, None);
        assert_eq!(proven.up_to(), at(-10));
        // Emptied after ticks were taken: in doubt from after the latest tick the history names.
        let emptied = Taken::judge(&ticks, None, written, false, true);
        assert_eq!(emptied.up_to(), at(-3));
        assert_eq!(emptied.doubt(&ticks, at(-6)), Some((at(-5), T - 3 * S)));
        // ... and when nothing names a tick, every tick up to the last.
        assert_eq!(emptied.doubt(&ticks, None), Some((None, T - 3 * S)));
        // A new job's empty record: nothing in doubt, only the own tick runs.
        let new = Taken::judge(&ticks, None, written, false, false);
        assert_eq!(new.up_to(), None);
        let first = Beat {
            recorded: new.up_to(),
            since: at(-5),
            ..beat(&ticks)
        };
        assert_eq!(plan(&first), run(&[0], Some(-1)));
    }

    /// The starting deadline is judged by the time the tick was chosen by: a node an hour
    /// ahead of ZooKeeper takes the tick due by ZooKeeper's clock, which is on time.
    #[test]
    fn the_starting_deadline_is_judged_by_the_clock_the_tick_was_taken_by() {
        let ticks = every_second();
        let deadline = Some(Duration::from_millis(1500));
        let at = |s: i64| Some(T + s * S);
        let cases = [
            // (local, server, own, recorded, expected due, missed)
            (T + HOUR, Some(T), T, at(-1), vec![T], None),
            (T + HOUR + 400, Some(T + 400), T + S, at(0), vec![T + S], None),
            (T + 500, Some(T), T, at(-1), vec![T], None),
            // Truly late, by either clock: given up.
            (T + 2 * S, Some(T + 2 * S), T, at(-1), vec![], Some((T, T, 1))),
            (T + 2 * S, None, T, at(-1), vec![], Some((T, T, 1))),
            // Late ticks past the deadline are given up, by ZooKeeper's clock too.
            (T + HOUR, Some(T), T, at(-4), vec![T], Some((T - 3 * S, T - S, 3))),
        ];
        for (local, server, own, recorded, due, missed) in cases {
            let beat = Beat {
                clocks: Clocks { local, server },
                own,
                recorded,
                starting_deadline: deadline,
                ..beat(&ticks)
            };
            let Plan::Run {
                due: ran, missed: gone, ..
            } = plan(&beat)
            else {
                panic!("local {local} server {server:?} own {own} runs");
            };
            let gone = gone.map(|m| (m.first, m.last, m.count));
            assert_eq!((ran, gone), (due, missed), "local {local} server {server:?} own {own}");
        }
    }
}
