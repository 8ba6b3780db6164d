//! `zklock jobs`: the singleton jobs of a namespace, their history, and what operators do to
//! them across the cluster (pause, resume, trigger, reset, remove).

use std::time::Duration;

use clap::Subcommand;
use serde_json::json;
use zklock_runtime::scheduler::{self, HistoryEntry, JobRecord, Outcome};
use zklock_runtime::{LockClient, LockError};

use crate::{age, now_ms, timestamp, Failure, EXIT_NO_SUCH_LOCK, EXIT_STILL_HELD};

/// What to do with the jobs (default: list them).
#[derive(Debug, Subcommand)]
pub(crate) enum JobsAction {
    /// Every job: last tick and how it ended, paused, pending requests, schedule, next tick.
    List,
    /// A job's latest runs, newest first: tick, node, start, duration, outcome, error.
    History {
        /// The job name.
        name: String,
        /// Show at most this many runs.
        #[arg(long, default_value_t = 50)]
        limit: usize,
    },
    /// Stop running the job on every node until `resume` (a run going on is not stopped).
    Pause {
        /// The job name.
        name: String,
        /// Make the job if no node has run it yet (to pause it before its first deploy);
        /// without it an unknown name is an error.
        #[arg(long)]
        create: bool,
    },
    /// Run the job again on its schedule; the ticks that passed while paused are not replayed.
    Resume {
        /// The job name.
        name: String,
    },
    /// Run the job once now, on one node (also while paused); the schedule is untouched.
    Trigger {
        /// The job name.
        name: String,
        /// Make the job if no node has run it yet (the request then waits for the first
        /// node); without it an unknown name is an error.
        #[arg(long)]
        create: bool,
    },
    /// Clear the job's tick record and history (under the job's lock).
    Reset {
        /// The job name.
        name: String,
        /// Confirm: without it nothing is changed.
        #[arg(long)]
        yes: bool,
        /// How long to wait for a run going on to end (for the job's lock); past it nothing is
        /// changed and the exit code is 6.
        #[arg(long, default_value = "10s", value_parser = humantime::parse_duration)]
        wait: Duration,
    },
    /// Delete everything the job keeps in ZooKeeper, for a job no node runs any more.
    Remove {
        /// The job name.
        name: String,
        /// Confirm: without it nothing is changed.
        #[arg(long)]
        yes: bool,
        /// How long to wait for a run going on to end (for the job's lock); past it nothing is
        /// changed and the exit code is 6.
        #[arg(long, default_value = "10s", value_parser = humantime::parse_duration)]
        wait: Duration,
    },
}

pub(crate) async fn run(client: &LockClient, action: &JobsAction, as_json: bool) -> Result<(), Failure> {
    match action {
        JobsAction::List => list(client, as_json).await,
        JobsAction::History { name, limit } => history(client, name, *limit, as_json).await,
        JobsAction::Pause { name, create } => {
            make(client, name, *create).await?;
            let changed = known(scheduler::pause_job(client, name).await?, "pause", name)?;
            say(
                as_json,
                json!({"job": name, "paused": true, "changed": changed}),
                || match changed {
                    true => format!("{name}: paused on every node"),
                    false => format!("{name}: was paused already"),
                },
            );
            Ok(())
        }
        JobsAction::Resume { name } => {
            let changed = scheduler::resume_job(client, name).await?;
            say(
                as_json,
                json!({"job": name, "paused": false, "changed": changed}),
                || match changed {
                    true => format!("{name}: resumed; it runs again from its next tick"),
                    false => format!("{name}: was not paused"),
                },
            );
            Ok(())
        }
        JobsAction::Trigger { name, create } => {
            make(client, name, *create).await?;
            let request = known(scheduler::trigger_job(client, name).await?, "trigger", name)?;
            say(as_json, json!({"job": name, "request": request}), || {
                format!("{name}: {request} made; one node runs the job once, as soon as it is idle")
            });
            Ok(())
        }
        JobsAction::Reset { name, yes, wait } => {
            confirmed(*yes, "reset", name)?;
            let existed = scheduler::reset_job(client, name, *wait)
                .await
                .map_err(|err| waited(err, "reset", name, *wait))?;
            found(existed, name)?;
            say(as_json, json!({"job": name, "reset": true}), || {
                format!("{name}: tick record and history cleared; its next tick runs as a first one")
            });
            Ok(())
        }
        JobsAction::Remove { name, yes, wait } => {
            confirmed(*yes, "remove", name)?;
            let existed = scheduler::remove_job(client, name, *wait)
                .await
                .map_err(|err| waited(err, "remove", name, *wait))?;
            found(existed, name)?;
            say(as_json, json!({"job": name, "removed": true}), || {
                format!("{name}: removed")
            });
            Ok(())
        }
    }
}

fn say(as_json: bool, value: serde_json::Value, text: impl FnOnce() -> String) {
    if as_json {
        println!("{value}");
    } else {
        println!("{}", text());
    }
}

fn confirmed(yes: bool, what: &str, name: &str) -> Result<(), Failure> {
    match yes {
        true => Ok(()),
        false => Err(Failure {
            code: 2,
            message: format!("`jobs {what} {name}` changes the job on every node; add --yes to confirm"),
        }),
    }
}

/// `jobs reset|remove`: the job's lock still held by someone else (a run going on, most
/// likely) when `--wait` ran out is exit code 6, with what to do; other errors keep theirs.
fn waited(err: LockError, what: &str, name: &str, wait: Duration) -> Failure {
    match err {
        LockError::Timeout { .. } => Failure {
            code: EXIT_STILL_HELD,
            message: format!(
                "`jobs {what} {name}`: the job's lock was still held after --wait {} (a run going on \
                 did not end); nothing was changed. Try again later or with a longer --wait",
                humantime::format_duration(wait)
            ),
        },
        other => other.into(),
    }
}

fn found(existed: bool, name: &str) -> Result<(), Failure> {
    match existed {
        true => Ok(()),
        false => Err(Failure {
            code: EXIT_NO_SUCH_LOCK,
            message: format!("no job {name:?} in this namespace"),
        }),
    }
}

/// With `--create`, makes the job known before acting on it.
async fn make(client: &LockClient, name: &str, create: bool) -> Result<(), Failure> {
    if create {
        scheduler::create_job(client, name).await?;
    }
    Ok(())
}

/// The answer of an action on a job, or "no such job" when the name is unknown (a typo, most
/// likely: an action on it would create a job no node runs).
fn known<T>(answer: Option<T>, what: &str, name: &str) -> Result<T, Failure> {
    answer.ok_or_else(|| Failure {
        code: EXIT_NO_SUCH_LOCK,
        message: format!(
            "no job {name:?} in this namespace (no node has run it); check the name with `zklock jobs`, \
             or add --create to {what} it before any node runs it"
        ),
    })
}

fn outcome_name(outcome: &Outcome) -> String {
    serde_json::to_value(outcome)
        .ok()
        .and_then(|v| v.as_str().map(str::to_owned))
        .unwrap_or_else(|| "other".to_owned())
}

async fn list(client: &LockClient, as_json: bool) -> Result<(), Failure> {
    let records = scheduler::job_records(client).await?;
    if as_json {
        println!("{}", serde_json::to_string(&records).unwrap_or_default());
        return Ok(());
    }
    if records.is_empty() {
        println!(
            "no singleton jobs under {}.jobs",
            client.namespace().trim_end_matches('/')
        );
        return Ok(());
    }
    println!(
        "{:<24} {:<25} {:<9} {:<10} {:<7} {:<25} SCHEDULE",
        "JOB", "LAST TICK", "STATE", "LAST RUN", "PAUSED", "NEXT TICK"
    );
    for r in &records {
        println!("{}", list_line(r));
        if let Some(conflict) = &r.conflict {
            println!(
                "  ! node {} registers it as {:?} in {} ({}): it runs on both schedules",
                conflict.node, conflict.schedule, conflict.time_zone, conflict.policy
            );
        }
    }
    Ok(())
}

fn list_line(r: &JobRecord) -> String {
    let schedule = r.spec.as_ref().map_or_else(
        || "-".to_owned(),
        |s| format!("{} {} {}", s.schedule, s.time_zone, s.policy),
    );
    let pending = match r.triggers_pending {
        0 => String::new(),
        n => format!("  ({n} run-now request(s) pending)"),
    };
    format!(
        "{:<24} {:<25} {:<9} {:<10} {:<7} {:<25} {schedule}{pending}",
        r.job,
        r.tick_ms.map_or_else(|| "-".to_owned(), timestamp),
        r.state,
        r.last_outcome.as_ref().map_or_else(|| "-".to_owned(), outcome_name),
        if r.paused { "yes" } else { "no" },
        r.next_fire_ms.map_or_else(|| "-".to_owned(), timestamp),
    )
}

async fn history(client: &LockClient, name: &str, limit: usize, as_json: bool) -> Result<(), Failure> {
    let mut runs = scheduler::job_history(client, name).await?;
    runs.truncate(limit);
    if as_json {
        println!("{}", serde_json::to_string(&runs).unwrap_or_default());
        return Ok(());
    }
    if runs.is_empty() {
        println!("{name}: no runs recorded");
        return Ok(());
    }
    println!(
        "{:<25} {:<24} {:<14} {:<9} {:<10} ERROR",
        "TICK", "NODE", "STARTED", "TOOK", "OUTCOME"
    );
    for run in &runs {
        println!("{}", history_line(run));
    }
    Ok(())
}

fn history_line(run: &HistoryEntry) -> String {
    format!(
        "{:<25} {:<24} {:<14} {:<9} {:<10} {}",
        run.tick.map_or_else(|| "(triggered)".to_owned(), timestamp),
        run.node,
        format!(
            "{} ago",
            age(Duration::from_millis(now_ms().saturating_sub(run.started).max(0) as u64))
        ),
        age(Duration::from_millis(run.duration_ms)),
        outcome_name(&run.outcome),
        range_and_error(run),
    )
}

/// The last column: for an entry that stands for a run of ticks, where the run began, then the
/// error or the reason.
fn range_and_error(run: &HistoryEntry) -> String {
    let error = run.error.as_deref().unwrap_or("");
    match run.first_tick.filter(|first| Some(*first) != run.tick) {
        Some(first) => format!("(from {}) {error}", timestamp(first)),
        None => error.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(json: serde_json::Value) -> HistoryEntry {
        serde_json::from_value(json).unwrap()
    }

    /// An entry that stands for a run of ticks shows where the run began; one tick shows none.
    #[test]
    fn a_range_entry_shows_its_first_tick() {
        let base = serde_json::json!({
            "tick": 1_790_000_060_000_i64, "node": "n", "started": 0, "duration_ms": 0,
            "outcome": "skipped", "error": "paused",
        });
        let mut ranged = base.clone();
        ranged["first_tick"] = 1_790_000_040_000_i64.into();
        assert_eq!(
            range_and_error(&entry(ranged)),
            format!("(from {}) paused", timestamp(1_790_000_040_000))
        );
        let mut same = base.clone();
        same["first_tick"] = 1_790_000_060_000_i64.into();
        assert_eq!(range_and_error(&entry(same)), "paused");
        assert_eq!(range_and_error(&entry(base)), "paused");
    }
}
