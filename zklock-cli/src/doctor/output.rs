//! What `doctor` prints: one line per check (and the advice under it), or one JSON object.

use serde_json::json;

/// How a check came out; the order is the severity.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Status {
    Pass,
    Warn,
    Fail,
}

impl Status {
    pub fn as_str(self) -> &'static str {
        match self {
            Status::Pass => "pass",
            Status::Warn => "warn",
            Status::Fail => "fail",
        }
    }
}

/// One check: what it looked at, what it found, and what to change (none when nothing should).
#[derive(Debug, Clone)]
pub struct Check {
    pub name: &'static str,
    pub status: Status,
    pub found: String,
    pub advice: Option<String>,
}

impl Check {
    pub fn pass(name: &'static str, found: impl Into<String>) -> Check {
        Check {
            name,
            status: Status::Pass,
            found: found.into(),
            advice: None,
        }
    }

    pub fn warn(name: &'static str, found: impl Into<String>, advice: impl Into<String>) -> Check {
        Check {
            name,
            status: Status::Warn,
            found: found.into(),
            advice: Some(advice.into()),
        }
    }

    pub fn fail(name: &'static str, found: impl Into<String>, advice: impl Into<String>) -> Check {
        Check {
            name,
            status: Status::Fail,
            found: found.into(),
            advice: Some(advice.into()),
        }
    }

    /// The same check with a pass turned into a warning, for a check whose inputs were partly
    /// unreadable: `note` says what was missing, `advice` how to let the doctor read it.
    pub fn at_least_warn(mut self, note: &str, advice: &str) -> Check {
        if self.status == Status::Pass {
            self.status = Status::Warn;
        }
        self.found = format!("{}; {note}", self.found);
        self.advice = Some(match self.advice.take() {
            Some(mine) => format!("{mine}; {advice}"),
            None => advice.to_owned(),
        });
        self
    }
}

/// The worst status of `checks` (pass when there are none).
pub fn worst(checks: &[Check]) -> Status {
    checks.iter().map(|c| c.status).max().unwrap_or(Status::Pass)
}

/// Prints the checks as text, or as `{"checks": [...], "status": worst}`.
pub fn print(target: &str, namespace: &str, checks: &[Check], as_json: bool) {
    let status = worst(checks);
    if as_json {
        let checks: Vec<_> = checks
            .iter()
            .map(|c| {
                json!({
                    "name": c.name,
                    "status": c.status.as_str(),
                    "found": c.found,
                    "advice": c.advice,
                })
            })
            .collect();
        println!("{}", json!({ "checks": checks, "status": status.as_str() }));
        return;
    }
    println!("zklock doctor: {target}, namespace {namespace}");
    let width = checks.iter().map(|c| c.name.len()).max().unwrap_or(0);
    for check in checks {
        println!("{}  {:<width$}  {}", check.status.as_str(), check.name, check.found);
        if let Some(advice) = &check.advice {
            println!("      {:<width$}  change: {advice}", "");
        }
    }
    let count = |s: Status| checks.iter().filter(|c| c.status == s).count();
    println!(
        "{}: {} passed, {} warned, {} failed",
        status.as_str(),
        count(Status::Pass),
        count(Status::Warn),
        count(Status::Fail)
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_worst_status_wins_and_a_partial_pass_is_a_warning() {
        let checks = [Check::pass("a", "fine"), Check::warn("b", "meh", "fix b")];
        assert_eq!(worst(&checks), Status::Warn);
        assert_eq!(worst(&[]), Status::Pass);
        let partial = Check::pass("c", "fine so far").at_least_warn("conf unread", "allow conf");
        assert_eq!(partial.status, Status::Warn);
        assert_eq!(partial.found, "fine so far; conf unread");
        assert_eq!(partial.advice.as_deref(), Some("allow conf"));
        let failed = Check::fail("d", "bad", "fix d").at_least_warn("conf unread", "allow conf");
        assert_eq!(failed.status, Status::Fail);
        assert_eq!(failed.advice.as_deref(), Some("fix d; allow conf"));
    }
}
