//! `zklock exec`: runs a command while holding a lock (or a lease of a semaphore, or the
//! leadership of an election group), and stops the command when that is lost or revoked
//! (another process asked for it: exit code 123, next to 125 for a loss).
//!
//! The command runs in a process group of its own ([`group`]), led by a watchdog that kills the
//! group if this process dies without unwinding; if this process has the terminal, the group
//! gets it while the command runs. Its standard streams are this process's. SIGINT, SIGTERM and
//! SIGHUP sent to `zklock exec` are passed on to the group, and `zklock exec` ends with the
//! command's outcome ([`mod@supervise`]). The lock is released (the leadership relinquished) once
//! the command has exited and nothing is left of its group, before `zklock exec` exits.
//!
//! - [`args`]: the command line; [`held`]: the grant; [`group`] and [`watchdog`]: the process
//!   group; [`mod@supervise`]: CMD under its grant; [`signals`]: what is passed on; [`report`]: the
//!   `--status-file`.

pub(crate) mod args;
mod group;
mod held;
pub(crate) mod report;
mod signals;
mod supervise;
pub(crate) mod watchdog;

use std::ffi::OsStr;
use std::io;
use std::time::Duration;

use tokio::process::{Child, Command};
use zklock_runtime::{LockClient, LockError};

use self::args::ExecArgs;
use self::group::Group;
use self::held::Held;
use self::report::{Outcome, Report};
use self::signals::Signals;
use self::supervise::{supervise, Watch};
use crate::{Failure, EXIT_CANNOT_EXECUTE, EXIT_FAILED, EXIT_LOCK_LOST, EXIT_NOT_ACQUIRED, EXIT_NOT_FOUND};

/// Runs `zklock exec`: takes the lock (or leadership), runs CMD under it, gives it up. Returns
/// the exit code: CMD's own, or what it died of; [`Failure`] for every way CMD did not run or
/// was stopped. `patience` (the `--timeout`) bounds the wait for the release's answer. What
/// happened goes into `report` as it happens.
pub(crate) async fn run(
    client: &LockClient,
    args: &ExecArgs,
    patience: Duration,
    report: &mut Report,
) -> Result<u8, Failure> {
    let grant = args.grant();
    let mut signals = Signals::install()?;
    let held = tokio::select! {
        held = acquire(client, args) => held.inspect_err(|failure| {
            if failure.code == EXIT_NOT_ACQUIRED {
                report.outcome = Outcome::NotAcquired;
            }
        })?,
        (signal, signal_name) = signals.next() => {
            report.outcome = Outcome::Interrupted;
            return Err(Failure {
                code: 128 + signal.as_raw() as u8,
                message: format!("{signal_name} while waiting for {grant}; the command did not run"),
            });
        }
    };
    report.fencing_token = Some(held.fencing_token().to_string());
    if held.is_lost() {
        report.outcome = Outcome::Lost;
        let err = held.lost().await;
        release(held, &grant, patience).await;
        return Err(Failure {
            code: EXIT_LOCK_LOST,
            message: format!("{grant} was lost before the command started ({err}); it did not run"),
        });
    }
    let group = match Group::start() {
        Ok(group) => group,
        Err(err) => {
            release(held, &grant, patience).await;
            return Err(Failure {
                code: EXIT_FAILED,
                message: format!("cannot start the command's process group: {err}; the command did not run"),
            });
        }
    };
    let mut child = match spawn(args, &held, &group) {
        Ok(child) => child,
        Err(failure) => {
            report.outcome = Outcome::NotStarted;
            group.dismiss().await;
            release(held, &grant, patience).await;
            return Err(failure);
        }
    };
    let watch = Watch {
        client,
        held: &held,
        grant: &grant,
        grace: args.grace,
    };
    let outcome = supervise(&mut child, &group, &watch, &mut signals, report).await;
    group.dismiss().await;
    release(held, &grant, patience).await;
    outcome
}

/// Takes the lock, or leads the group, waiting as `--wait` says.
async fn acquire(client: &LockClient, args: &ExecArgs) -> Result<Held, Failure> {
    let acquired = if args.leader {
        let mut election = client.election(&args.name)?;
        if let Some(id) = &args.participant_id {
            election = election.with_participant_id(id.as_str())?;
        }
        let leadership = match args.wait {
            None => election.lead().await.map(Some),
            Some(wait) if wait.is_zero() => election.try_lead().await,
            Some(wait) => in_time(election.lead_timeout(wait).await),
        };
        leadership?.map(Held::Leader)
    } else {
        let lock = match args.semaphore {
            Some(leases) => client.semaphore(&args.name, leases)?,
            None => client
                .mutex(&args.name)?
                .with_lock_delay(args.lock_delay.unwrap_or_default())?,
        };
        let guard = match args.wait {
            None => lock.acquire().await.map(Some),
            Some(wait) if wait.is_zero() => lock.try_acquire().await,
            Some(wait) => in_time(lock.acquire_timeout(wait).await),
        };
        guard?.map(Held::Lock)
    };
    acquired.ok_or_else(|| Failure {
        code: EXIT_NOT_ACQUIRED,
        message: format!(
            "{} was not acquired within {}; the command did not run",
            args.grant(),
            humantime::format_duration(args.wait.unwrap_or_default())
        ),
    })
}

/// A bounded wait's outcome: `None` when the bound passed first.
fn in_time<T>(outcome: Result<T, LockError>) -> Result<Option<T>, LockError> {
    match outcome {
        Err(LockError::Timeout { .. }) => Ok(None),
        other => other.map(Some),
    }
}

/// Starts CMD in `group`, with the standard streams of this process and the grant in its
/// environment.
fn spawn(args: &ExecArgs, held: &Held, group: &Group) -> Result<Child, Failure> {
    let (program, rest) = args.command.split_first().ok_or_else(|| Failure {
        code: 2,
        message: "no command given after --".into(),
    })?;
    let mut command = Command::new(program);
    command
        .args(rest)
        .env("ZKLOCK_LOCK_NAME", &args.name)
        .env("ZKLOCK_FENCING_TOKEN", held.fencing_token().to_string())
        .env("ZKLOCK_NODE", held.node_path());
    match held.participant_id() {
        Some(id) => command.env("ZKLOCK_PARTICIPANT_ID", id),
        // An outer `zklock exec --leader`'s would be taken for this grant's.
        None => command.env_remove("ZKLOCK_PARTICIPANT_ID"),
    };
    group.admit(&mut command);
    command.spawn().map_err(|err| not_started(program, err))
}

/// The exit code and message for a command that could not be started.
fn not_started(program: &OsStr, err: io::Error) -> Failure {
    let program = program.to_string_lossy();
    match err.kind() {
        io::ErrorKind::NotFound => Failure {
            code: EXIT_NOT_FOUND,
            message: format!("{program}: command not found ({err})"),
        },
        _ => Failure {
            code: EXIT_CANNOT_EXECUTE,
            message: format!("{program}: cannot execute ({err})"),
        },
    }
}

/// Releases the grant (`grant` names it), waiting at most `patience` for the server's answer;
/// says on stderr when that went wrong. The exit code stays CMD's.
async fn release(held: Held, grant: &str, patience: Duration) {
    let lost = held.is_lost();
    match tokio::time::timeout(patience, held.release()).await {
        Ok(Ok(())) => {}
        // Reported already.
        Ok(Err(LockError::Lost { .. })) if lost => {}
        Ok(Err(err)) => eprintln!("zklock: releasing {grant}: {}", crate::with_causes(&err)),
        Err(_) => eprintln!(
            "zklock: the release of {grant} was not confirmed within {}; ZooKeeper deletes its node when \
             the session ends",
            humantime::format_duration(patience)
        ),
    }
}
