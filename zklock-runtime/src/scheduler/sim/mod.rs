//! A simulation of the whole scheduler protocol without real time: nodes with their own
//! clocks (minutes to hours off, drifting, stepped), policies and catch-up on one job, over an
//! in-memory ensemble, with pauses, crashes, session expiries, restored and emptied records,
//! operators' pauses, resumes, triggers, resets and removals at random points. Every seed is
//! checked against the promises in [`check`]; a failing seed is printed with what the world
//! did, and goes into [`REGRESSIONS`].
//!
//! Each node ([`node`]) makes its beats ([`fire`]) and holds ([`hold`]) as `fire.rs`, `hold.rs`
//! and `outbox.rs` do, step for step, deciding with the scheduler's own planner
//! ([`super::plan`]) and record format.
//! What it cannot show: anything about ZooKeeper itself (the tests against a real server do),
//! and a step of those files changed without the same change here.
//!
//! `ZKLOCK_SIM_SEEDS=N` runs N seeds instead of the default; `ZKLOCK_SIM_SEED=S` runs one.

mod check;
mod ensemble;
mod fire;
mod hold;
mod node;
mod world;

use node::Defects;
use world::Scenario;

/// Seeds past the default range that once broke a promise (`ZKLOCK_SIM_SEEDS` runs more): each
/// is run every time. The defects the simulation found while it was written are kept as
/// [`Defects`] instead, in `the_simulation_finds_each_old_defect`: a seed stands for its scenario
/// only while the scenario generator stays as it is.
const REGRESSIONS: &[u64] = &[];

/// The seeds CI runs.
const DEFAULT_SEEDS: u64 = 2_000;

/// Runs `seed`; the broken promises, with the scenario and what the world did.
fn try_seed(seed: u64, defects: Defects) -> Result<(), String> {
    let scenario = Scenario::of(seed, defects);
    let finished = world::run(&scenario);
    let broken = check::violations(&scenario, &finished);
    if broken.is_empty() {
        return Ok(());
    }
    let acts = timeline(&finished.journal, std::env::var_os("ZKLOCK_SIM_SEED").is_some());
    Err(format!(
        "seed {seed} broke {} promise(s):\n  {}\nscenario: {scenario:#?}\nwhat the world did:\n{}",
        broken.len(),
        broken.join("\n  "),
        acts.join("\n")
    ))
}

/// What the world did, by ZooKeeper's clock (ms since the start); with `all`, also every run
/// and every history entry.
fn timeline(journal: &ensemble::Journal, all: bool) -> Vec<String> {
    let at = |ms: i64| ms - ensemble::EPOCH;
    let mut lines: Vec<(i64, String)> = journal.acts.iter().map(|(t, what)| (at(*t), what.clone())).collect();
    if all {
        for s in &journal.starts {
            let what = match (&s.trigger, s.tick) {
                (Some(name), _) => name.clone(),
                (None, Some(tick)) => format!("tick {} (claimed at {})", at(tick), at(s.claimed)),
                _ => String::new(),
            };
            lines.push((at(s.at), format!("node {} starts run {} of {what}", s.node, s.run)));
        }
        for (t, e) in &journal.entries {
            let range = e.first.map(|f| format!("{}..", at(f))).unwrap_or_default();
            lines.push((
                at(*t),
                format!(
                    "  history: {range}{:?} {:?} run {:?} {:?} ({})",
                    e.tick.map(at),
                    e.outcome,
                    e.run,
                    e.trigger,
                    e.why
                ),
            ));
        }
    }
    lines.sort_by_key(|(t, _)| *t);
    lines
        .into_iter()
        .map(|(t, what)| format!("  {t:>7} ms  {what}"))
        .collect()
}

fn seeds() -> Vec<u64> {
    if let Some(one) = std::env::var("ZKLOCK_SIM_SEED").ok().and_then(|s| s.parse().ok()) {
        return vec![one];
    }
    let count = std::env::var("ZKLOCK_SIM_SEEDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(DEFAULT_SEEDS);
    (0..count).collect()
}

/// How long one seed may take before the run counts as hung (a seed takes tens of
/// milliseconds).
const SEED_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(60);

/// Runs `seeds` with `defects` on every core; the reports of the first `enough` failing
/// seeds, in seed order. Panics, naming the seeds under way, when no seed finishes within
/// [`SEED_TIMEOUT`]: a simulation that hangs fails instead of stalling the suite.
fn failures(seeds: &[u64], defects: Defects, enough: usize) -> Vec<String> {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::{mpsc, Arc};
    let threads = std::thread::available_parallelism().map_or(2, |n| n.get());
    let seeds: Arc<Vec<u64>> = Arc::new(seeds.to_vec());
    let stop = Arc::new(AtomicBool::new(false));
    let (tx, rx) = mpsc::channel::<(u64, Option<Result<(), String>>)>();
    for k in 0..threads {
        let (seeds, stop, tx) = (seeds.clone(), stop.clone(), tx.clone());
        std::thread::spawn(move || {
            for seed in seeds.iter().skip(k).step_by(threads) {
                if stop.load(Ordering::Relaxed) {
                    return;
                }
                let _ = tx.send((*seed, None));
                let _ = tx.send((*seed, Some(try_seed(*seed, defects))));
            }
        });
    }
    drop(tx);
    let mut under_way = std::collections::BTreeSet::new();
    let mut found = Vec::new();
    loop {
        match rx.recv_timeout(SEED_TIMEOUT) {
            Ok((seed, None)) => {
                under_way.insert(seed);
            }
            Ok((seed, Some(result))) => {
                under_way.remove(&seed);
                if let Err(report) = result {
                    found.push((seed, report));
                    if found.len() >= enough {
                        stop.store(true, Ordering::Relaxed);
                    }
                }
            }
            Err(mpsc::RecvTimeoutError::Disconnected) => break,
            Err(mpsc::RecvTimeoutError::Timeout) => {
                stop.store(true, Ordering::Relaxed);
                panic!("no seed finished within {SEED_TIMEOUT:?}: one of {under_way:?} hangs (run it alone with ZKLOCK_SIM_SEED)");
            }
        }
    }
    found.sort_by_key(|(seed, _)| *seed);
    found.into_iter().map(|(_, report)| report).collect()
}

/// The same seed, run twice, does the same: a failing seed can be replayed and kept.
#[test]
fn a_seed_replays_exactly() {
    for seed in [1, 2] {
        let scenario = Scenario::of(seed, Defects::default());
        let once = timeline(&world::run(&scenario).journal, true);
        let again = timeline(&world::run(&scenario).journal, true);
        assert!(once.len() > 50, "seed {seed} did too little to compare: {once:?}");
        assert_eq!(once, again, "seed {seed} ran differently twice");
    }
}

#[test]
fn every_seed_keeps_every_promise() {
    let seeds: Vec<u64> = REGRESSIONS.iter().copied().chain(seeds()).collect();
    let failures = failures(&seeds, Defects::default(), 3);
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}

/// Each defect issue #42 named (points 1 to 8), put back into the simulated nodes as main had
/// it, breaks a promise within a few hundred seeds: the simulation would have found it. So does
/// each defect the simulation itself found, put back alone: a regression of any of the fixes is
/// caught here, not only by a lucky seed. Prints the first seed that shows each, and what it
/// broke.
#[test]
fn the_simulation_finds_each_old_defect() {
    let none = Defects::default();
    let defects: [(&str, Defects); 16] = [
        (
            "1 replace requests uncapped",
            Defects {
                replace_uncapped: true,
                stale_requests_kept: true,
                ..none
            },
        ),
        (
            "2 settled before judged",
            Defects {
                settle_before_proven: true,
                ..none
            },
        ),
        (
            "3 deadline by the local clock",
            Defects {
                deadline_by_local_clock: true,
                ..none
            },
        ),
        (
            "4 backlog without reread",
            Defects {
                backlog_without_reread: true,
                claims_ignore_pause: true,
                ..none
            },
        ),
        (
            "5 skip passes silently",
            Defects {
                skip_passes_silently: true,
                ..none
            },
        ),
        (
            "6 no run markers",
            Defects {
                no_run_markers: true,
                ..none
            },
        ),
        (
            "7 ends not owed",
            Defects {
                ends_not_owed: true,
                ..none
            },
        ),
        (
            "8 no tombstones",
            Defects {
                no_tombstones: true,
                ..none
            },
        ),
        (
            "claims ignore the pause",
            Defects {
                claims_ignore_pause: true,
                ..none
            },
        ),
        (
            "a paused stretch names its first tick only",
            Defects {
                paused_stretch_unnamed: true,
                ..none
            },
        ),
        (
            "a doubt written only with a claim",
            Defects {
                doubt_only_with_a_claim: true,
                ..none
            },
        ),
        (
            "owed ends stamp restored records",
            Defects {
                owed_ends_stamp: true,
                ..none
            },
        ),
        (
            "orphans settled by policy",
            Defects {
                orphans_by_policy: true,
                ..none
            },
        ),
        (
            "ticks handled before their entry is written",
            Defects {
                handled_before_written: true,
                ..none
            },
        ),
        (
            "takes whose answer was lost dropped",
            Defects {
                lost_takes_dropped: true,
                ..none
            },
        ),
        (
            "stale replace requests kept",
            Defects {
                stale_requests_kept: true,
                ..none
            },
        ),
    ];
    let seeds: Vec<u64> = (0..DEFECT_SEEDS).collect();
    let mut missed = Vec::new();
    for (name, defect) in defects {
        match failures(&seeds, defect, 1).first() {
            Some(report) => println!(
                "defect {name}: {}",
                report.lines().take(2).collect::<Vec<_>>().join(" / ")
            ),
            None => missed.push(name),
        }
    }
    assert!(missed.is_empty(), "no seed of {DEFECT_SEEDS} found: {missed:?}");
}

/// How many seeds a put-back defect gets to show itself.
const DEFECT_SEEDS: u64 = 1_000;
