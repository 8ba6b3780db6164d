//! Server directories left behind by test processes that ended without dropping their server:
//! a server kept in a `static` (its drop never runs), or a test binary that was killed. The
//! server process itself dies with its test process (see `java.rs`); its directory would stay
//! in the temporary directory for good. So each directory names its owner process in a file,
//! and starting a server removes the directories of the same kind whose owner is gone.
//!
//! A directory without the file is never touched: one kept on purpose
//! (`ZKLOCK_TESTING_KEEP_DIRS`), one being made right now, or one of another tool.

use std::fs;
use std::path::Path;

/// The file in a server directory that names the process the directory belongs to.
const OWNER_FILE: &str = "owner.pid";

/// Marks `dir` as this process's, for [`sweep`] to remove once the process is gone.
pub(crate) fn claim(dir: &Path) {
    // Best effort: an unmarked directory is only never swept.
    let _ = fs::write(dir.join(OWNER_FILE), std::process::id().to_string());
}

/// Removes the directories in the temporary directory whose names start with `prefix` and
/// whose owner process is gone. Errors are ignored: sweeping never stops a server from
/// starting.
pub(crate) fn sweep(prefix: &str) {
    let Ok(entries) = fs::read_dir(std::env::temp_dir()) else {
        return;
    };
    for entry in entries.flatten() {
        if !entry.file_name().to_string_lossy().starts_with(prefix) {
            continue;
        }
        let path = entry.path();
        let owner = fs::read_to_string(path.join(OWNER_FILE))
            .ok()
            .and_then(|pid| pid.trim().parse::<libc::pid_t>().ok());
        if owner.is_some_and(|pid| pid > 0 && !alive(pid)) {
            let _ = fs::remove_dir_all(&path);
        }
    }
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

    /// A directory under `prefix` owned by `owner` (none: no owner file).
    fn dir(prefix: &str, owner: Option<u32>) -> std::path::PathBuf {
        let dir = tempfile::Builder::new().prefix(prefix).tempdir().unwrap().keep();
        fs::create_dir(dir.join("data")).unwrap();
        if let Some(pid) = owner {
            fs::write(dir.join(OWNER_FILE), pid.to_string()).unwrap();
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
        let orphan = dir(&prefix, Some(gone));
        let ours = dir(&prefix, Some(std::process::id()));
        let unmarked = dir(&prefix, None);
        sweep(&prefix);
        assert!(!orphan.exists(), "the directory of a process that is gone stays");
        assert!(ours.exists(), "a live process's directory was removed");
        assert!(unmarked.exists(), "a directory without an owner was removed");
        for dir in [ours, unmarked] {
            fs::remove_dir_all(dir).unwrap();
        }
    }
}
