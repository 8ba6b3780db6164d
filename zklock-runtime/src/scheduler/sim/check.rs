//! The promises every simulated run must keep, read from what really happened ([`Journal`]):
//!
//! 1. no tick runs twice (but after the server reaped a removed job's node, see
//!    docs/scheduler.md);
//! 2. every tick due runs, or is in the history as missed, skipped or lost (a range entry
//!    counts for every tick in it), or was given up by an operator's reset or removal;
//! 3. no tick is claimed while the job is paused (from the moment the pause is written);
//! 4. every run-now request runs once, or the history says it was lost, or a removal took it;
//! 5. nothing is left that nobody will delete: no run marker without its run, no end still
//!    owed, no run-now or replace request left from before the quiet spell;
//! 6. the job makes progress in the quiet spell: some run ends by itself;
//! 7. no tick is given up by the starting deadline before it is that late by ZooKeeper's
//!    clock;
//! 8. every run's end reaches the history (unless a reset or removal cleared it meanwhile,
//!    or a restored record erased its claim: then the history names its tick as in doubt).

use std::collections::BTreeMap;

use super::super::history::Outcome;
use super::super::plan::CLOCK_AHEAD_LIMIT;
use super::super::ticks::{tick_time, Ticks};
use super::ensemble::{Entry, Start, EPOCH};
use super::world::{Finished, Scenario};

/// How long before the end a run or a tick is still allowed to be under way.
const SETTLING_MS: i64 = 15_000;

/// The promises `finished` breaks, one line each.
pub(super) fn violations(scenario: &Scenario, finished: &Finished) -> Vec<String> {
    let journal = &finished.journal;
    let ticks = Ticks::parse(scenario.schedule).expect("a valid schedule");
    let mut found = Vec::new();
    let entries: Vec<&Entry> = journal.entries.iter().map(|(_, e)| e).collect();
    let last_due = finished.end - SETTLING_MS;

    // 1. No tick runs twice.
    let mut by_tick: BTreeMap<i64, Vec<&Start>> = BTreeMap::new();
    for start in journal.starts.iter().filter(|s| s.trigger.is_none()) {
        by_tick.entry(start.tick.expect("a tick run")).or_default().push(start);
    }
    for (tick, starts) in &by_tick {
        // A removed job's node the server reaped leaves nothing to tell a node whose clock is
        // behind by more than the reap interval that its tick ran (docs/scheduler.md).
        let reaped_between = |a: &Start, b: &Start| journal.reaped.iter().any(|at| a.at < *at && *at < b.at);
        let excused = starts.windows(2).all(|pair| reaped_between(pair[0], pair[1]));
        if starts.len() > 1 && !excused {
            let who: Vec<String> = starts
                .iter()
                .map(|s| format!("node {} at {}", s.node, s.at - EPOCH))
                .collect();
            found.push(format!(
                "1: tick {} ran {} times: {}",
                tick - EPOCH,
                starts.len(),
                who.join(", ")
            ));
        }
    }

    // 2. Every due tick is run or named.
    let covered = |tick: i64| {
        by_tick.contains_key(&tick)
            || entries.iter().any(|e| match (e.first, e.tick) {
                _ if e.why == "in doubt, open" => e.tick >= Some(tick),
                (Some(first), Some(last)) => first <= tick && tick <= last,
                (None, Some(t)) => t == tick && e.outcome != Outcome::Ok,
                _ => false,
            })
            || journal.cleared.iter().any(|(at, before, _)| {
                before.is_none_or(|before| before < tick) && tick <= at + CLOCK_AHEAD_LIMIT.as_millis() as i64
            })
    };
    let mut tick = ticks.tick_at(tick_time(EPOCH + 2_000)).and_then(|t| ticks.after(t));
    let mut uncovered = Vec::new();
    while let Some(t) = tick.filter(|t| *t <= last_due) {
        if !covered(t) {
            uncovered.push(t - EPOCH);
        }
        tick = ticks.after(t);
    }
    if !uncovered.is_empty() {
        found.push(format!(
            "2: {} tick(s) neither ran nor are in the history: {:?}",
            uncovered.len(),
            &uncovered[..uncovered.len().min(12)]
        ));
    }

    // 3. Nothing claimed while paused.
    for start in journal.starts.iter().filter(|s| s.trigger.is_none()) {
        let paused = journal
            .pauses
            .iter()
            .find(|(from, to)| *from <= start.claimed && to.is_none_or(|to| start.claimed < to));
        if let Some((from, _)) = paused {
            found.push(format!(
                "3: node {} claimed tick {} at {}, after the pause of {}",
                start.node,
                start.tick.unwrap_or_default() - EPOCH,
                start.claimed - EPOCH,
                from - EPOCH
            ));
        }
    }

    // 4. Every run-now request runs once or is reported.
    for (name, created) in &journal.triggers {
        let runs = journal
            .starts
            .iter()
            .filter(|s| s.trigger.as_ref() == Some(name))
            .count();
        let lost = entries
            .iter()
            .any(|e| e.outcome == Outcome::Lost && e.trigger.as_ref() == Some(name) && e.run.is_none());
        let removed = journal.cleared.iter().any(|(at, _, removal)| *removal && at >= created);
        let pending = finished.job.as_ref().is_some_and(|job| job.triggers.contains(name));
        if runs > 1 {
            found.push(format!("4: request {name} ran {runs} times"));
        } else if pending {
            found.push(format!("4: request {name} was never taken"));
        } else if runs == 0 && !lost && !removed {
            found.push(format!("4: request {name} vanished without a run or a trace"));
        }
    }

    // 5. Nothing left behind.
    if let Some(job) = &finished.job {
        for (key, owner) in &job.runs {
            let live = owner.is_some_and(|owner| finished.alive_sessions.contains(&owner));
            if !live {
                found.push(format!("5: run marker {key} outlived its run"));
            }
        }
    }
    if let Some(job) = &finished.job {
        let old = job
            .replace
            .values()
            .filter(|(_, ctime)| *ctime < finished.quiet_from)
            .count();
        if old > 0 {
            found.push(format!(
                "5: {old} replace request(s) from before the quiet spell are still there"
            ));
        }
    }
    if let Some(since) = finished.owed.filter(|since| *since < last_due) {
        found.push(format!(
            "5: a run's end owed since {} is still not written at the end",
            since - EPOCH
        ));
    }

    // 6. Progress while quiet.
    let paused_at_end = journal.pauses.last().is_some_and(|(_, to)| to.is_none());
    let quiet_end = |e: &Entry| {
        e.run.is_some()
            && matches!(e.outcome, Outcome::Ok | Outcome::Failed)
            && e.tick.is_some_and(|t| t >= finished.quiet_from)
    };
    if !paused_at_end && !entries.iter().any(|e| quiet_end(e)) {
        found.push("6: no run ended by itself in the quiet spell".to_owned());
    }

    // 7. The starting deadline, by ZooKeeper's clock.
    for (deadline, at, first, last) in &journal.deadline_misses {
        let oldest_allowed = at - deadline + CLOCK_AHEAD_LIMIT.as_millis() as i64;
        if *last >= oldest_allowed {
            found.push(format!(
                "7: ticks {}..{} given up at {} with a {deadline} ms starting deadline",
                first - EPOCH,
                last - EPOCH,
                at - EPOCH
            ));
        }
    }

    // 8. Every run's end is written.
    for start in journal.starts.iter().filter(|s| s.at < last_due) {
        let ended = entries.iter().any(|e| {
            e.run == Some(start.run)
                || (e.outcome == Outcome::Lost
                    && e.run.is_none()
                    && ((start.tick.is_some() && e.tick == start.tick)
                        || (start.trigger.is_some() && e.trigger == start.trigger)))
        });
        // A reset or a removal after the run started clears the history its end belongs in;
        // a record restored over a run's claim erases what would tell its end, and the history
        // names its tick as in doubt instead.
        let cleared = journal.cleared.iter().any(|(at, _, _)| *at > start.at);
        let in_doubt = start.tick.is_some_and(|tick| {
            journal.entries.iter().any(|(at, e)| {
                let from = if e.why == "in doubt, open" {
                    Some(i64::MIN)
                } else {
                    e.first.filter(|_| e.why == "in doubt")
                };
                *at > start.at && from.is_some_and(|first| first <= tick) && e.tick >= Some(tick)
            })
        });
        if !ended && !cleared && !in_doubt {
            let what = match (&start.trigger, start.tick) {
                (Some(name), _) => format!("request {name}"),
                (None, Some(tick)) => format!("tick {}", tick - EPOCH),
                _ => "a run".to_owned(),
            };
            found.push(format!(
                "8: the end of node {}'s run of {what} is not in the history",
                start.node
            ));
        }
    }
    found
}
