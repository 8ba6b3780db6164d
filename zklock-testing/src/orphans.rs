//! Server directories left behind by test processes that ended without dropping their server:
//! a server kept in a `static` (its drop never runs), or a test binary that was killed. The
//! server process itself dies with its test process (see `java.rs`); its directory would stay
//! in the temporary directory for good. So each directory names its owner process in a file,
//! and starting a server removes the directories of the same kind whose owner is gone.
//!
//! A directory without the file is never touched: one kept on purpose
//! (`ZKLOCK_TESTING_KEEP_DIRS`), one being made right now, or one of another tool. Nor is one
//! of a process in another PID namespace (a container sharing the temporary directory), whose
//! process id means nothing here.

use std::fs;
use std::path::Path;

/// The file in a server directory that names the process the directory belongs to.
const OWNER_FILE: &str = "owner.pid";

/// Marks `dir` as this process's, for [`sweep`] to remove once the process is gone.
pub(crate) fn claim(dir: &Path) {
    // Best effort: an unmarked directory is only never swept.
    if let Some(namespace) = pid_namespace() {
        let _ = fs::write(dir.join(OWNER_FILE), owner_line(std::process::id(), &namespace));
    }
}

/// What the owner file says: the process id and the PID namespace it is an id in.
fn owner_line(pid: u32, namespace: &str) -> String {
    format!("{pid} {namespace}")
}

/// This process's PID namespace (`pid:[4026531836]`); `None` where `/proc` does not say.
fn pid_namespace() -> Option<String> {
    let link = fs::read_link("/proc/self/ns/pid").ok()?;
    Some(link.to_string_lossy().into_owned())
}

/// Removes the directories in the temporary directory whose names start with `prefix` and
/// whose owner process is gone. Errors are ignored: sweeping never stops a server from
/// starting.
pub(crate) fn sweep(prefix: &str) {
    let (Some(namespace), Ok(entries)) = (pid_namespace(), fs::read_dir(std::env::temp_dir())) else {
        return;
    };
    for entry in entries.flatten() {
        if !entry.file_name().to_string_lossy().starts_with(prefix) {
            continue;
        }
        let path = entry.path();
        let owner = fs::read_to_string(path.join(OWNER_FILE))
            .ok()
            .and_then(|line| owner_in(&line, &namespace));
        if owner.is_some_and(|pid| !alive(pid)) {
            let _ = fs::remove_dir_all(&path);
        }
    }
}

/// The owner's process id, if `line` names one in `namespace`.
fn owner_in(line: &str, namespace: &str) -> Option<libc::pid_t> {
    let (pid, theirs) = line.trim().split_once(' ')?;
    let pid = pid.parse::<libc::pid_t>().ok().filter(|&pid| pid > 0)?;
    (theirs == namespace).then_some(pid)
}

/// Whether a process with this id exists (a zombie counts, so its directory waits).
fn alive(pid: libc::pid_t) -> bool {
    // SAFETY: signal 0 sends nothing; kill only checks that the process exists.
    let answer = unsafe { libc::kill(pid, 0) };
    answer == 0 || std::io::Error::last_os_error().raw_os_error() == Some(libc::EPERM)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A directory under `prefix` whose owner file says `owner` (none: no owner file).
    fn dir(prefix: &str, owner: Option<String>) -> std::path::PathBuf {
        let dir = tempfile::Builder::new().prefix(prefix).tempdir().unwrap().keep();
        fs::create_dir(dir.join("data")).unwrap();
        if let Some(line) = owner {
            fs::write(dir.join(OWNER_FILE), line).unwrap();
        }
        dir
    }

    #[test]
    fn directories_of_processes_that_are_gone_are_swept_and_no_others() {
        let gone = {
            let mut child = std::process::Command::new("true").spawn().unwrap();
            let pid = child.id();
            child.wait().unwrap();
            pid
        };
        // A prefix of this test's own, so that no other test's directories are in play.
        let prefix = format!("zklock-sweep-test-{}-", std::process::id());
        let here = pid_namespace().expect("Linux names its PID namespaces");
        let orphan = dir(&prefix, Some(owner_line(gone, &here)));
        let ours = dir(&prefix, Some(owner_line(std::process::id(), &here)));
        let elsewhere = dir(&prefix, Some(owner_line(gone, "pid:[1]")));
        let unmarked = dir(&prefix, None);
        sweep(&prefix);
        assert!(!orphan.exists(), "the directory of a process that is gone stays");
        assert!(ours.exists(), "a live process's directory was removed");
        assert!(elsewhere.exists(), "a directory of another PID namespace was removed");
        assert!(unmarked.exists(), "a directory without an owner was removed");
        for dir in [ours, elsewhere, unmarked] {
            fs::remove_dir_all(dir).unwrap();
        }
    }
}
