//! `zklock exec`: runs a command while holding a lock (or a lease of a semaphore, or the
//! leadership of an election group), and stops the command when that is lost or revoked
//! (another process asked for it: exit code 123, next to 125 for a loss).
//!
//! The command is a child of this process and stays in its process group, so an interactive
//! command keeps its terminal; its standard streams are this process's. SIGINT, SIGTERM and
//! SIGHUP sent to `zklock exec` are passed on to it, and `zklock exec` ends with its outcome.
//! The lock is released (the leadership relinquished) once the command has exited, before
//! `zklock exec` exits.

use std::ffi::{OsStr, OsString};
use std::io;
use std::os::unix::process::ExitStatusExt;
use std::process::ExitStatus;
use std::time::Duration;

use clap::Args;
use rustix::process::{kill_process, Pid, Signal};
use tokio::process::{Child, Command};
use tokio::signal::unix::{signal, SignalKind};
use tokio::time::Instant;
use zklock_runtime::{FencingToken, Leadership, LockClient, LockError, LockGuard, MAX_IDENTITY_LEN};

use crate::{
    Failure, EXIT_CANNOT_EXECUTE, EXIT_FAILED, EXIT_LOCK_LOST, EXIT_NOT_ACQUIRED, EXIT_NOT_FOUND, EXIT_REVOKED,
};

/// The longest `--lock-delay` (as `Lock::with_lock_delay` takes).
const MAX_LOCK_DELAY: Duration = Duration::from_secs(3600);

/// `zklock exec NAME [--wait D] [--semaphore N | --leader [--participant-id ID] | --lock-delay D]
/// [--grace D] -- CMD ARGS...`
#[derive(Debug, Args)]
pub(crate) struct ExecArgs {
    /// The lock name (as given to the library, e.g. `nightly-report`); with `--leader`, the
    /// election group's.
    pub name: String,
    /// How long to wait for the lock (or leadership): `0` tries once; without it, waits as
    /// long as it takes. Not acquired in time: exit code 124, and CMD does not run.
    #[arg(long, value_name = "DURATION", value_parser = humantime::parse_duration)]
    wait: Option<Duration>,
    /// Take one lease of the semaphore NAME that lets N holders in at once (N >= 1), instead
    /// of the mutex NAME.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
    semaphore: Option<u32>,
    /// Join the leader election group NAME (Curator's LeaderLatch layout) instead of taking
    /// the mutex NAME, and run CMD once this member leads; CMD is stopped if leadership is
    /// lost, and leadership is relinquished once CMD has exited.
    #[arg(long, conflicts_with = "semaphore")]
    leader: bool,
    /// With `--leader`: the participant id to join the group as, what its node holds and what
    /// the group's members list shows (default: `zklock-exec`).
    // A required `--leader` that conflicts with a given `--semaphore` counts as satisfied to
    // clap: the conflict is said here too.
    #[arg(long, value_name = "ID", requires = "leader", conflicts_with = "semaphore")]
    participant_id: Option<String>,
    /// Give the mutex NAME a lock-delay: after a holder vanishes without releasing (its
    /// process died), wait this long before running CMD, so the dead holder's writes in
    /// flight drain first. Give every contender of NAME the same value.
    #[arg(long, value_name = "DURATION", value_parser = humantime::parse_duration, conflicts_with_all = ["semaphore", "leader"])]
    lock_delay: Option<Duration>,
    /// When the lock (or leadership) is lost while CMD runs, how long CMD has to exit after
    /// SIGTERM before it gets SIGKILL.
    #[arg(long, value_name = "DURATION", default_value = "10s", value_parser = humantime::parse_duration)]
    grace: Duration,
    /// The command to run under the lock, and its arguments (after `--`). It is run directly,
    /// not through a shell.
    #[arg(last = true, required = true, value_name = "CMD")]
    command: Vec<OsString>,
}

impl ExecArgs {
    /// Refuses what needs no server to refuse: a lock name the library does not take, a
    /// participant id it does not take.
    pub(crate) fn check(&self) -> Result<(), Failure> {
        zklock_runtime::validate_name(&self.name)?;
        if self.lock_delay.is_some_and(|d| d > MAX_LOCK_DELAY) {
            return Err(Failure {
                code: 2,
                message: "--lock-delay takes at most 1h".into(),
            });
        }
        if let Some(id) = &self.participant_id {
            if id.is_empty() || id.len() > MAX_IDENTITY_LEN {
                return Err(Failure {
                    code: 2,
                    message: format!("--participant-id takes 1 to {MAX_IDENTITY_LEN} bytes, got {}", id.len()),
                });
            }
        }
        Ok(())
    }

    /// What CMD runs under, for messages: `lock "NAME"` or `leadership of group "NAME"`.
    fn grant(&self) -> String {
        if self.leader {
            format!("leadership of group {:?}", self.name)
        } else {
            format!("lock {:?}", self.name)
        }
    }
}

/// What CMD runs under: a grant with a fencing token and a node, that can be lost and is
/// given up once CMD has exited. A lock guard (a mutex, or a semaphore's lease), or the
/// leadership of an election group.
enum Held {
    Lock(LockGuard),
    Leader(Leadership),
}

impl Held {
    fn fencing_token(&self) -> FencingToken {
        match self {
            Held::Lock(guard) => guard.fencing_token(),
            Held::Leader(leadership) => leadership.fencing_token(),
        }
    }

    fn node_path(&self) -> &str {
        match self {
            Held::Lock(guard) => guard.node_path(),
            Held::Leader(leadership) => leadership.node_path(),
        }
    }

    /// The participant id a leader joined its group as; `None` for a lock.
    fn participant_id(&self) -> Option<&str> {
        match self {
            Held::Lock(_) => None,
            Held::Leader(leadership) => Some(leadership.participant_id()),
        }
    }

    fn is_lost(&self) -> bool {
        match self {
            Held::Lock(guard) => guard.is_lost(),
            Held::Leader(leadership) => !leadership.is_leader(),
        }
    }

    /// Resolves once the grant can no longer be trusted; pending otherwise.
    async fn lost(&self) -> LockError {
        match self {
            Held::Lock(guard) => guard.lost().await,
            Held::Leader(leadership) => leadership.lost().await,
        }
    }

    /// Resolves once another process asks for the lock (revocation); pending otherwise, and
    /// always for a leader (an election group cannot be revoked).
    async fn revoked(&self) {
        match self {
            Held::Lock(guard) => guard.revoked().await,
            Held::Leader(_) => std::future::pending().await,
        }
    }

    /// Gives the grant up and waits for the outcome.
    async fn release(self) -> Result<(), LockError> {
        match self {
            Held::Lock(guard) => guard.release().await,
            Held::Leader(leadership) => leadership.relinquish().await,
        }
    }
}

/// Runs `zklock exec`: takes the lock (or leadership), runs CMD under it, gives it up. Returns
/// the exit code: CMD's own, or what it died of; [`Failure`] for every way CMD did not run or
/// was stopped. `patience` (the `--timeout`) bounds the wait for the release's answer.
pub(crate) async fn run(client: &LockClient, args: &ExecArgs, patience: Duration) -> Result<u8, Failure> {
    let grant = args.grant();
    let mut signals = Signals::install()?;
    let held = tokio::select! {
        held = acquire(client, args) => held?,
        (signal, signal_name) = signals.next() => {
            return Err(Failure {
                code: 128 + signal.as_raw() as u8,
                message: format!("{signal_name} while waiting for {grant}; the command did not run"),
            });
        }
    };
    if held.is_lost() {
        let err = held.lost().await;
        release(held, &grant, patience).await;
        return Err(Failure {
            code: EXIT_LOCK_LOST,
            message: format!("{grant} was lost before the command started ({err}); it did not run"),
        });
    }
    let mut child = match spawn(args, &held) {
        Ok(child) => child,
        Err(failure) => {
            release(held, &grant, patience).await;
            return Err(failure);
        }
    };
    let outcome = supervise(&mut child, &held, &mut signals, args).await;
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

/// Starts CMD with the standard streams of this process and the grant in its environment.
fn spawn(args: &ExecArgs, held: &Held) -> Result<Child, Failure> {
    let (program, rest) = args.command.split_first().ok_or_else(|| Failure {
        code: 2,
        message: "no command given after --".into(),
    })?;
    let mut command = Command::new(program);
    command
        .args(rest)
        .env("ZKLOCK_LOCK_NAME", &args.name)
        .env("ZKLOCK_FENCING_TOKEN", held.fencing_token().to_string())
        .env("ZKLOCK_NODE", held.node_path())
        // Only if this process ends before the command (a panic): not left running unlocked.
        .kill_on_drop(true);
    match held.participant_id() {
        Some(id) => command.env("ZKLOCK_PARTICIPANT_ID", id),
        // An outer `zklock exec --leader`'s would be taken for this grant's.
        None => command.env_remove("ZKLOCK_PARTICIPANT_ID"),
    };
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

/// Why CMD is being stopped.
enum Stop {
    Lost(LockError),
    Revoked,
}

/// Waits for CMD to exit, passing signals on to it; stops it when the lock (or leadership) is
/// lost, or when another process asks for it (revocation).
async fn supervise(child: &mut Child, held: &Held, signals: &mut Signals, args: &ExecArgs) -> Result<u8, Failure> {
    let lost = held.lost();
    tokio::pin!(lost);
    let revoked = held.revoked();
    tokio::pin!(revoked);
    // Loss first: a command that exits as the grant is lost counts as stopped, since it may
    // have done its last work after the loss.
    let stop = loop {
        tokio::select! {
            biased;
            err = &mut lost => break Stop::Lost(err),
            () = &mut revoked => break Stop::Revoked,
            status = child.wait() => return exit_code(status),
            (signal, _) = signals.next() => pass_on(child, signal),
        }
    };
    let (code, why) = match stop {
        Stop::Lost(err) => (EXIT_LOCK_LOST, err.to_string()),
        Stop::Revoked => (
            EXIT_REVOKED,
            format!("{} was revoked: another process asked for it", args.grant()),
        ),
    };

    let grace = humantime::format_duration(args.grace);
    eprintln!("zklock: {why}; sending the command SIGTERM, and SIGKILL in {grace} if it has not exited");
    pass_on(child, Signal::TERM);
    let deadline = Instant::now() + args.grace;
    let mut killed = false;
    let status = loop {
        tokio::select! {
            status = child.wait() => break status,
            (signal, _) = signals.next() => pass_on(child, signal),
            () = tokio::time::sleep_until(deadline), if !killed => {
                killed = true;
                eprintln!("zklock: the command did not exit within {grace} of SIGTERM; sending it SIGKILL");
                let _ = child.start_kill();
            }
        }
    };
    let how = match status {
        Ok(status) => match (status.code(), status.signal()) {
            (Some(code), _) => format!("it exited with code {code}"),
            (None, Some(9)) if killed => "it was killed".to_owned(),
            (None, Some(signal)) => format!("it died of signal {signal}"),
            (None, None) => format!("it ended: {status}"),
        },
        Err(err) => format!("waiting for it failed: {err}"),
    };
    let because = match code {
        EXIT_REVOKED => "revoked",
        _ => "lost",
    };
    Err(Failure {
        code,
        message: format!("the command was stopped because {} was {because}; {how}", args.grant()),
    })
}

/// CMD's exit code, or 128 + the signal it died of.
fn exit_code(status: io::Result<ExitStatus>) -> Result<u8, Failure> {
    let status = status.map_err(|err| Failure {
        code: EXIT_FAILED,
        message: format!("waiting for the command failed: {err}"),
    })?;
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

/// Sends `signal` to CMD, unless it has been reaped already (its pid may then be another's).
fn pass_on(child: &Child, signal: Signal) {
    if let Some(pid) = child.id().and_then(|id| Pid::from_raw(id as i32)) {
        // Only fails when the process is gone, which its wait reports.
        let _ = kill_process(pid, signal);
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
        Ok(Err(err)) => eprintln!("zklock: releasing {grant}: {err}"),
        Err(_) => eprintln!(
            "zklock: the release of {grant} was not confirmed within {}; ZooKeeper deletes its node when \
             the session ends",
            humantime::format_duration(patience)
        ),
    }
}

/// The signals `zklock exec` passes on to CMD: SIGINT, SIGTERM, SIGHUP. Their default action
/// (ending this process) is replaced for as long as the process lives.
struct Signals {
    interrupt: tokio::signal::unix::Signal,
    terminate: tokio::signal::unix::Signal,
    hangup: tokio::signal::unix::Signal,
}

impl Signals {
    fn install() -> Result<Signals, Failure> {
        let listen = |kind: SignalKind| {
            signal(kind).map_err(|err| Failure {
                code: EXIT_FAILED,
                message: format!("cannot listen for signals: {err}"),
            })
        };
        Ok(Signals {
            interrupt: listen(SignalKind::interrupt())?,
            terminate: listen(SignalKind::terminate())?,
            hangup: listen(SignalKind::hangup())?,
        })
    }

    /// The next signal received, with its name.
    ///
    /// Cancel safe: a signal received meanwhile is reported by the next call.
    async fn next(&mut self) -> (Signal, &'static str) {
        tokio::select! {
            Some(()) = self.interrupt.recv() => (Signal::INT, "SIGINT"),
            Some(()) = self.terminate.recv() => (Signal::TERM, "SIGTERM"),
            Some(()) = self.hangup.recv() => (Signal::HUP, "SIGHUP"),
            else => std::future::pending().await,
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use clap::Parser;

    use crate::{Cli, Command};

    fn parse(args: &[&str]) -> Result<super::ExecArgs, clap::Error> {
        let cli = Cli::try_parse_from([&["zklock"], args].concat())?;
        match cli.command {
            Command::Exec(args) => Ok(args),
            other => panic!("not exec: {other:?}"),
        }
    }

    /// Everything after `--` is the command's, its own options included; zklock's options come
    /// before it, global ones too.
    #[test]
    fn the_command_is_everything_after_the_dashes() {
        let args = parse(&[
            "exec",
            "--wait",
            "0",
            "n",
            "--timeout",
            "1s",
            "--",
            "ls",
            "--wait",
            "--",
            "-l",
        ])
        .unwrap();
        assert_eq!(args.name, "n");
        assert_eq!(args.wait, Some(Duration::ZERO));
        assert_eq!((args.semaphore, args.grace), (None, Duration::from_secs(10)));
        assert_eq!(args.command, ["ls", "--wait", "--", "-l"]);

        let args = parse(&["exec", "n", "--semaphore", "3", "--grace", "1m", "--", "sh"]).unwrap();
        assert_eq!((args.semaphore, args.grace), (Some(3), Duration::from_secs(60)));
        assert_eq!(args.wait, None);
        assert!(!args.leader);
        assert_eq!(args.grant(), r#"lock "n""#);

        let args = parse(&["exec", "n", "--participant-id", "node-a", "--leader", "--", "sh"]).unwrap();
        assert!(args.leader);
        assert_eq!(args.participant_id.as_deref(), Some("node-a"));
        assert_eq!(args.grant(), r#"leadership of group "n""#);
        assert_eq!(
            parse(&["exec", "n", "--leader", "--", "sh"]).unwrap().participant_id,
            None
        );
    }

    #[test]
    fn a_command_a_lease_and_durations_are_required_to_make_sense() {
        for bad in [
            &["exec", "n", "--"][..],
            &["exec", "n", "ls"],
            &["exec", "--", "ls"],
            &["exec", "n", "--semaphore", "0", "--", "ls"],
            &["exec", "n", "--semaphore", "-1", "--", "ls"],
            &["exec", "n", "--wait", "soon", "--", "ls"],
            &["exec", "n", "--grace", "", "--", "ls"],
            &["exec", "n", "--leader", "--semaphore", "2", "--", "ls"],
            &["exec", "n", "--participant-id", "x", "--", "ls"],
            &["exec", "n", "--semaphore", "2", "--participant-id", "x", "--", "ls"],
            &["exec", "n", "--semaphore", "2", "--lock-delay", "1s", "--", "ls"],
            &["exec", "n", "--leader", "--lock-delay", "1s", "--", "ls"],
            &["exec", "n", "--lock-delay", "later", "--", "ls"],
        ] {
            let err = parse(bad).map(|_| ()).expect_err(&format!("{bad:?} was taken"));
            assert_eq!(err.exit_code(), 2, "{bad:?}: {err}");
        }
    }

    /// A lock-delay is taken for the mutex, and one past the library's limit is a usage error
    /// before any server is asked.
    #[test]
    fn a_lock_delay_is_for_the_mutex_and_bounded() {
        let args = parse(&["exec", "n", "--lock-delay", "5s", "--", "ls"]).unwrap();
        assert_eq!(args.lock_delay, Some(Duration::from_secs(5)));
        assert!(args.check().is_ok());
        let args = parse(&["exec", "n", "--lock-delay", "2h", "--", "ls"]).unwrap();
        let failure = args.check().expect_err("2h was taken");
        assert_eq!(failure.code, 2, "{}", failure.message);
        assert!(failure.message.contains("--lock-delay"), "{}", failure.message);
    }

    /// A participant id the library would refuse is a usage error before any server is asked.
    #[test]
    fn a_participant_id_must_fit_a_node() {
        let too_long = "p".repeat(zklock_runtime::MAX_IDENTITY_LEN + 1);
        for bad in ["", too_long.as_str()] {
            let args = parse(&["exec", "n", "--leader", "--participant-id", bad, "--", "ls"]).unwrap();
            let failure = args.check().err().unwrap_or_else(|| panic!("{bad:?} was taken"));
            assert_eq!(failure.code, 2, "{}", failure.message);
            assert!(failure.message.contains("--participant-id"), "{}", failure.message);
        }
        let longest = "p".repeat(zklock_runtime::MAX_IDENTITY_LEN);
        let args = parse(&["exec", "n", "--leader", "--participant-id", &longest, "--", "ls"]).unwrap();
        assert!(args.check().is_ok());
    }
}
