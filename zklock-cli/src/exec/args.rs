//! What `zklock exec` is told on its command line, and the checks that need no server.

use std::ffi::OsString;
use std::path::PathBuf;
use std::time::Duration;

use clap::Args;
use zklock_runtime::MAX_IDENTITY_LEN;

use crate::Failure;

/// The longest `--lock-delay` (as `Lock::with_lock_delay` takes).
const MAX_LOCK_DELAY: Duration = Duration::from_secs(3600);
/// The longest `--grace`: a day is already longer than any lock should be held by a command
/// that was asked to stop.
const MAX_GRACE: Duration = Duration::from_secs(24 * 3600);

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
    pub wait: Option<Duration>,
    /// Take one lease of the semaphore NAME that lets N holders in at once (N >= 1), instead
    /// of the mutex NAME.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
    pub semaphore: Option<u32>,
    /// Join the leader election group NAME (Curator's LeaderLatch layout) instead of taking
    /// the mutex NAME, and run CMD once this member leads; CMD is stopped if leadership is
    /// lost, and leadership is relinquished once CMD has exited.
    #[arg(long, conflicts_with = "semaphore")]
    pub leader: bool,
    /// With `--leader`: the participant id to join the group as, what its node holds and what
    /// the group's members list shows (default: `zklock-exec`).
    // A required `--leader` that conflicts with a given `--semaphore` counts as satisfied to
    // clap: the conflict is said here too.
    #[arg(long, value_name = "ID", requires = "leader", conflicts_with = "semaphore")]
    pub participant_id: Option<String>,
    /// Give the mutex NAME a lock-delay: after a holder vanishes without releasing (its
    /// process died), wait this long before running CMD, so the dead holder's writes in
    /// flight drain first. Give every contender of NAME the same value.
    #[arg(long, value_name = "DURATION", value_parser = humantime::parse_duration, conflicts_with_all = ["semaphore", "leader"])]
    pub lock_delay: Option<Duration>,
    /// How long CMD's process group has to exit after SIGTERM before it gets SIGKILL: when a
    /// revocation is requested, when the lock (or leadership) is at risk (capped then by how
    /// long the server may still keep the session), and for what CMD left running when it
    /// exited. A loss that may already have let another holder in (the lock's node deleted,
    /// the session ended) kills the group at once.
    #[arg(long, value_name = "DURATION", default_value = "10s", value_parser = humantime::parse_duration)]
    pub grace: Duration,
    /// Write how it ended into FILE as one JSON object, so a wrapper can tell CMD's own exit
    /// code from zklock's: `outcome` ("exited" when CMD ran and ended by itself, then
    /// `command.exit_code` or `command.signal` is CMD's), `exit_code` (zklock's), `command`,
    /// `fencing_token` and `message`.
    #[arg(long, value_name = "FILE")]
    pub status_file: Option<PathBuf>,
    /// The command to run under the lock, and its arguments (after `--`). It is run directly,
    /// not through a shell.
    #[arg(last = true, required = true, value_name = "CMD")]
    pub command: Vec<OsString>,
}

impl ExecArgs {
    /// Refuses what needs no server to refuse: a lock name the library does not take, a
    /// participant id it does not take.
    pub(crate) fn check(&self) -> Result<(), Failure> {
        zklock_runtime::validate_name(&self.name)?;
        if self.grace > MAX_GRACE {
            return Err(Failure {
                code: 2,
                message: "--grace takes at most 24h".into(),
            });
        }
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
    pub(crate) fn grant(&self) -> String {
        if self.leader {
            format!("leadership of group {:?}", self.name)
        } else {
            format!("lock {:?}", self.name)
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use clap::Parser;

    use crate::{Cli, Command};

    use super::ExecArgs;

    fn parse(args: &[&str]) -> Result<ExecArgs, clap::Error> {
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
        let args = parse(&["exec", "n", "--lock-delay", "1h", "--", "ls"]).unwrap();
        assert!(args.check().is_ok(), "the limit itself is taken");
        let args = parse(&["exec", "n", "--lock-delay", "2h", "--", "ls"]).unwrap();
        let failure = args.check().expect_err("2h was taken");
        assert_eq!(failure.code, 2, "{}", failure.message);
        assert!(failure.message.contains("--lock-delay"), "{}", failure.message);
    }

    /// A grace past a day is refused before any server is asked (a huge one would overflow the
    /// deadline it sets after a loss); a day is taken.
    #[test]
    fn the_grace_is_bounded() {
        for absurd in ["25h", "100years", "18446744073709551615s"] {
            let args = parse(&["exec", "n", "--grace", absurd, "--", "ls"]).unwrap();
            let failure = args.check().err().unwrap_or_else(|| panic!("{absurd} was taken"));
            assert_eq!(failure.code, 2, "{}", failure.message);
            assert!(failure.message.contains("--grace"), "{}", failure.message);
        }
        let args = parse(&["exec", "n", "--grace", "24h", "--", "ls"]).unwrap();
        assert!(args.check().is_ok());
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
