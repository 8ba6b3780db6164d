//! How a `zklock exec` ended, for `--status-file`: CMD's own exit code and zklock's (123-127,
//! 1-3) can be equal, so a wrapper that must tell them apart reads this instead of `$?`.

use std::io;
use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::process::ExitStatus;

use serde_json::json;

/// What became of CMD.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Outcome {
    /// zklock failed before CMD could run (bad arguments, ZooKeeper unreachable or refusing).
    Failed,
    /// The grant was not had within `--wait`; CMD did not run.
    NotAcquired,
    /// A signal ended the wait for the grant; CMD did not run.
    Interrupted,
    /// CMD could not be started (not found, not executable).
    NotStarted,
    /// CMD ran and ended by itself: the exit code is its own.
    Exited,
    /// The grant was lost (before CMD started, or while it ran, and CMD was stopped).
    Lost,
    /// A revocation was requested while CMD ran, and CMD was stopped.
    Revoked,
}

impl Outcome {
    fn as_str(self) -> &'static str {
        match self {
            Outcome::Failed => "failed",
            Outcome::NotAcquired => "not_acquired",
            Outcome::Interrupted => "interrupted",
            Outcome::NotStarted => "not_started",
            Outcome::Exited => "exited",
            Outcome::Lost => "lost",
            Outcome::Revoked => "revoked",
        }
    }
}

/// What `zklock exec` learned while it ran, filled in as it goes.
#[derive(Debug)]
pub(crate) struct Report {
    pub outcome: Outcome,
    /// How CMD ended, once it has.
    pub command: Option<ExitStatus>,
    /// The grant's fencing token, once granted.
    pub fencing_token: Option<String>,
}

impl Default for Report {
    fn default() -> Self {
        Report {
            outcome: Outcome::Failed,
            command: None,
            fencing_token: None,
        }
    }
}

impl Report {
    /// The report as one JSON object, with zklock's `exit_code` and its `message` (none when
    /// CMD's exit code is passed on unchanged).
    pub(crate) fn to_json(&self, exit_code: u8, message: Option<&str>) -> serde_json::Value {
        let command = self.command.map(|status| {
            json!({
                "exit_code": status.code(),
                "signal": status.signal(),
            })
        });
        json!({
            "outcome": self.outcome.as_str(),
            "exit_code": exit_code,
            "command": command,
            "fencing_token": self.fencing_token,
            "message": message,
        })
    }

    /// Writes the report into `path` whole: into a file beside it first, then renamed over it,
    /// so a reader never sees half of it.
    pub(crate) fn write(&self, path: &Path, exit_code: u8, message: Option<&str>) -> io::Result<()> {
        let mut text = self.to_json(exit_code, message).to_string();
        text.push('\n');
        let mut partial = path.as_os_str().to_owned();
        partial.push(".partial");
        std::fs::write(&partial, text)?;
        std::fs::rename(&partial, path)
    }
}

#[cfg(test)]
mod tests {
    use std::os::unix::process::ExitStatusExt;
    use std::process::ExitStatus;

    use super::{Outcome, Report};

    /// CMD's own 125 and zklock's 125 for a loss read differently.
    #[test]
    fn a_commands_exit_code_is_told_apart_from_zklocks() {
        let own = Report {
            outcome: Outcome::Exited,
            command: Some(ExitStatus::from_raw(125 << 8)),
            fencing_token: Some("t".into()),
        };
        let json = own.to_json(125, None);
        assert_eq!(json["outcome"], "exited");
        assert_eq!(json["command"]["exit_code"], 125);
        assert!(json["command"]["signal"].is_null());
        assert!(json["message"].is_null());

        let lost = Report {
            outcome: Outcome::Lost,
            command: Some(ExitStatus::from_raw(9)),
            fencing_token: Some("t".into()),
        };
        let json = lost.to_json(125, Some("lost"));
        assert_eq!(json["outcome"], "lost");
        assert!(json["command"]["exit_code"].is_null());
        assert_eq!(json["command"]["signal"], 9);
        assert_eq!(json["message"], "lost");

        let json = Report::default().to_json(3, Some("unreachable"));
        assert_eq!(json["outcome"], "failed");
        assert!(json["command"].is_null() && json["fencing_token"].is_null());
    }
}
