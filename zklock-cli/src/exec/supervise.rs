//! CMD under its grant: waits for it while passing signals on to its process group, stops the
//! group when the grant is lost or revoked, and stops whatever CMD left running in the group
//! when it exits, so that the grant is given up only when nothing of CMD runs any more.

use std::io;
use std::os::unix::process::ExitStatusExt;
use std::process::ExitStatus;
use std::time::Duration;

use rustix::process::Signal;
use tokio::process::Child;
use tokio::time::Instant;
use zklock_runtime::{LockClient, LockError, SessionStatus};

use super::group::{Group, LOOK_EVERY};
use super::held::Held;
use super::report::{Outcome, Report};
use super::signals::Signals;
use crate::{Failure, EXIT_FAILED, EXIT_LOCK_LOST, EXIT_REVOKED};

/// How long the group may take to go after SIGKILL (a process in uninterruptible sleep dies
/// when it wakes) before the grant is given up anyway, with a warning.
const AFTER_KILL: Duration = Duration::from_secs(10);

/// What the grant-holder is told while CMD runs.
pub(crate) struct Watch<'a> {
    pub client: &'a LockClient,
    pub held: &'a Held,
    /// `lock "NAME"` or `leadership of group "NAME"`, for messages.
    pub grant: &'a str,
    pub grace: Duration,
}

/// Why CMD is being stopped.
enum Stop {
    Lost(LockError),
    Revoked,
}

/// Waits for CMD to exit, passing signals on to its group; stops the group when the grant is
/// lost, or when another process asks for it (revocation). Returns once CMD has been reaped
/// and nothing of its group is left.
pub(crate) async fn supervise(
    child: &mut Child,
    group: &Group,
    watch: &Watch<'_>,
    signals: &mut Signals,
    report: &mut Report,
) -> Result<u8, Failure> {
    let lost = watch.held.lost();
    tokio::pin!(lost);
    let revoked = watch.held.revoked();
    tokio::pin!(revoked);
    // Loss first: a command that exits as the grant is lost counts as stopped, since it may
    // have done its last work after the loss.
    let why = loop {
        tokio::select! {
            biased;
            err = &mut lost => break Stop::Lost(err),
            () = &mut revoked => break Stop::Revoked,
            status = child.wait() => {
                let status = status.map_err(|err| Failure {
                    code: EXIT_FAILED,
                    message: format!("waiting for the command failed: {err}"),
                })?;
                report.command = Some(status);
                report.outcome = Outcome::Exited;
                return leftovers(group, watch, signals, report, exit_code(status)).await;
            }
            (signal, _) = signals.next() => group.signal(signal),
        }
    };

    let (code, because, grace) = match why {
        Stop::Lost(err) => {
            report.outcome = Outcome::Lost;
            let left = time_left(watch.client, watch.grace);
            eprintln!("zklock: {err}; {}", stopping("the command", left));
            (EXIT_LOCK_LOST, "lost", left)
        }
        Stop::Revoked => {
            report.outcome = Outcome::Revoked;
            eprintln!(
                "zklock: {} was revoked: another process asked for it; {}",
                watch.grant,
                stopping("the command", watch.grace)
            );
            (EXIT_REVOKED, "revoked", watch.grace)
        }
    };
    let stopped = stop_group(group, Some(child), grace, watch, signals).await;
    let how = match stopped.status {
        Some(Ok(status)) => {
            report.command = Some(status);
            match (status.code(), status.signal()) {
                (Some(code), _) => format!("it exited with code {code}"),
                (None, Some(9)) if stopped.killed => "it was killed".to_owned(),
                (None, Some(signal)) => format!("it died of signal {signal}"),
                (None, None) => format!("it ended: {status}"),
            }
        }
        Some(Err(err)) => format!("waiting for it failed: {err}"),
        None => "it had ended".to_owned(),
    };
    Err(Failure {
        code,
        message: format!("the command was stopped because {} was {because}; {how}", watch.grant),
    })
}

/// CMD has exited with `code`: stops what it left running in its group (a background job, the
/// rest of a pipeline), SIGTERM and then SIGKILL after the grace, before the grant is given up.
/// A loss meanwhile makes the outcome a loss.
async fn leftovers(
    group: &Group,
    watch: &Watch<'_>,
    signals: &mut Signals,
    report: &mut Report,
    code: Result<u8, Failure>,
) -> Result<u8, Failure> {
    if group.is_empty() {
        return code;
    }
    eprintln!(
        "zklock: the command exited and left processes running in its process group; {}",
        stopping("them", watch.grace)
    );
    let stopped = stop_group(group, None, watch.grace, watch, signals).await;
    match stopped.lost {
        Some(err) => {
            report.outcome = Outcome::Lost;
            Err(Failure {
                code: EXIT_LOCK_LOST,
                message: format!("{err}; it was lost while what the command left running was being stopped"),
            })
        }
        None => code,
    }
}

/// "sending X SIGTERM, and SIGKILL in D if ..." or "sending X SIGKILL at once".
fn stopping(what: &str, grace: Duration) -> String {
    if grace.is_zero() {
        format!("sending {what} (its whole process group) SIGKILL at once: another holder may already be in")
    } else {
        format!(
            "sending {what} (its whole process group) SIGTERM, and SIGKILL in {} if it has not exited",
            humantime::format_duration(grace)
        )
    }
}

/// How long the group may go on after the grant was lost: nothing when another holder may
/// already be in (the grant's node was deleted, the session ended, or came back after being
/// reported lost), else, while the connection is down, what is left before the server may
/// expire the session, capped by `grace`. The server expires it a session timeout after it
/// last heard from this client; the client library notices a silent connection within 2/5
/// of the timeout, and the loss is reported `loss_after` later.
fn time_left(client: &LockClient, grace: Duration) -> Duration {
    match client.status() {
        SessionStatus::Suspended | SessionStatus::Lost => {
            let (Some(timeout), Some(loss_after)) = (client.session_timeout(), client.loss_after()) else {
                return Duration::ZERO;
            };
            (timeout * 3 / 5).saturating_sub(loss_after).min(grace)
        }
        _ => Duration::ZERO,
    }
}

/// What stopping the group came to.
struct Stopped {
    /// CMD's status, if it was still running when the stop began.
    status: Option<io::Result<ExitStatus>>,
    /// Whether SIGKILL was sent.
    killed: bool,
    /// A loss of the grant while the group was being stopped.
    lost: Option<LockError>,
}

/// Stops the group: SIGTERM, then SIGKILL once `grace` has passed (at once for no grace); a
/// loss of the grant meanwhile shortens the grace to what is left of the lock's life. Waits
/// until `child` (if given) is reaped and the group is empty, passing signals on meanwhile.
async fn stop_group(
    group: &Group,
    mut child: Option<&mut Child>,
    grace: Duration,
    watch: &Watch<'_>,
    signals: &mut Signals,
) -> Stopped {
    let mut stopped = Stopped {
        status: None,
        killed: grace.is_zero(),
        lost: None,
    };
    group.signal(if stopped.killed { Signal::KILL } else { Signal::TERM });
    // `grace` is at most a day (`--grace` is checked), so this cannot overflow.
    let term_at = Instant::now();
    let mut kill_at = term_at + grace;
    // Once SIGKILL is sent, the group has AFTER_KILL to go.
    let mut given_up_at = stopped.killed.then(|| term_at + AFTER_KILL);
    let mut watch_loss = !watch.held.is_lost();
    let lost = watch.held.lost();
    tokio::pin!(lost);
    loop {
        let running = child.is_some() && stopped.status.is_none();
        if !running && group.is_empty() {
            return stopped;
        }
        if given_up_at.is_some_and(|at| Instant::now() >= at) {
            eprintln!(
                "zklock: processes of the command's group are still alive {} after SIGKILL; giving up the grant anyway",
                humantime::format_duration(AFTER_KILL)
            );
            return stopped;
        }
        tokio::select! {
            status = async { child.as_mut().expect("running").wait().await }, if running => {
                stopped.status = Some(status);
            }
            () = tokio::time::sleep(LOOK_EVERY), if !running => {}
            () = tokio::time::sleep_until(kill_at), if !stopped.killed => {
                stopped.killed = true;
                given_up_at = Some(Instant::now() + AFTER_KILL);
                // Whole milliseconds: the grace as given, or as a loss shortened it.
                let waited = Duration::from_millis(kill_at.duration_since(term_at).as_millis() as u64);
                eprintln!(
                    "zklock: the command did not exit within {} of SIGTERM; sending its process group SIGKILL",
                    humantime::format_duration(waited)
                );
                group.signal(Signal::KILL);
            }
            err = &mut lost, if watch_loss => {
                watch_loss = false;
                let left = time_left(watch.client, watch.grace);
                kill_at = kill_at.min(Instant::now() + left);
                eprintln!("zklock: {err}; SIGKILL in {} at the latest", humantime::format_duration(left));
                stopped.lost = Some(err);
            }
            (signal, _) = signals.next() => group.signal(signal),
        }
    }
}

/// CMD's exit code, or 128 + the signal it died of.
fn exit_code(status: ExitStatus) -> Result<u8, Failure> {
    match (status.code(), status.signal()) {
        // Exit codes are 0..=255 on Unix.
        (Some(code), _) => Ok(code as u8),
        (None, Some(signal)) => Ok(128u8.wrapping_add(signal as u8)),
        (None, None) => Err(Failure {
            code: EXIT_FAILED,
            message: format!("the command ended without an exit code: {status}"),
        }),
    }
}
