//! Class-data-sharing archives for the JVMs this crate starts, so that a server or Curator peer
//! maps the classes an earlier JVM of the same kind loaded instead of parsing and verifying them
//! again: about a fifth less CPU per start (0.58 instead of 0.75 CPU-s for a ZooKeeper server
//! here), which adds up over the hundreds of JVMs a test suite starts.
//!
//! Java 17 writes such an archive when a JVM started with `-XX:ArchiveClassesAtExit` exits
//! normally (a SIGTERM counts; a SIGKILL does not). So the first JVM of a kind (the same `java`,
//! class path and main class) on a machine claims the archive, runs with that option and, when
//! it is stopped, is given a SIGTERM and a few seconds instead of the SIGKILL; the archive is
//! then moved into place under a name derived from what it was built from. Every later JVM of
//! that kind starts with `-XX:SharedArchiveFile`. A JVM whose archive does not fit (a `java` or a
//! jar changed since) runs as if it had none (`-Xshare:auto`), and a claim whose JVM died without
//! writing the archive passes to the next JVM. Nothing here can keep a JVM from starting.

use std::collections::hash_map::DefaultHasher;
use std::fs;
use std::hash::{Hash, Hasher};
use std::io::{self, Write};
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::ExitStatus;
use std::time::{Duration, UNIX_EPOCH};

/// The archive a JVM of one kind starts from, or writes at exit.
#[derive(Debug)]
pub(crate) struct ClassSharing {
    /// Where the finished archive of this kind lives.
    archive: PathBuf,
    /// When this JVM writes the archive: the file it writes, moved to `archive` after it exits.
    dump: Option<PathBuf>,
    /// Whether the archive was there to map when the JVM started.
    mapped: bool,
}

impl ClassSharing {
    /// The archive for a JVM about to run `main_class` from `classpath` with the launcher `java`.
    pub(crate) fn for_jvm(java: &Path, classpath: &str, main_class: &str) -> ClassSharing {
        ClassSharing::for_jvm_in(&archive_dir(), java, classpath, main_class)
    }

    fn for_jvm_in(dir: &Path, java: &Path, classpath: &str, main_class: &str) -> ClassSharing {
        let archive = dir.join(format!("{}.jsa", kind_key(java, classpath, main_class)));
        let mapped = archive.is_file();
        let dump = if mapped { None } else { claim(dir, &archive) };
        ClassSharing { archive, dump, mapped }
    }

    /// The JVM options: map the archive, or write it at exit. JVM log output (a class path
    /// that no longer matches the archive, for one) goes to stderr, never stdout, which some
    /// JVMs here speak a protocol on.
    pub(crate) fn jvm_args(&self) -> Vec<String> {
        let mut args = vec![
            "-Xshare:auto".to_string(),
            "-Xlog:disable".to_string(),
            "-Xlog:all=warning:stderr".to_string(),
        ];
        if let Some(dump) = &self.dump {
            args.push(format!("-XX:ArchiveClassesAtExit={}", dump.display()));
        } else if self.mapped {
            args.push(format!("-XX:SharedArchiveFile={}", self.archive.display()));
        }
        args
    }

    /// Whether this JVM writes the archive at exit, and so should be stopped with a SIGTERM.
    pub(crate) fn is_dumping(&self) -> bool {
        self.dump.is_some()
    }

    /// After the JVM has exited with `status` (as its reaping `wait` returned it): moves the
    /// archive it wrote into place and gives up the claim. Only a JVM that exited on its own or
    /// by SIGTERM wrote a whole archive; one SIGKILLed while writing leaves a partial file,
    /// which is thrown away.
    pub(crate) fn finish(&mut self, status: &io::Result<ExitStatus>) {
        let Some(dump) = self.dump.take() else {
            return;
        };
        let completed = status.as_ref().is_ok_and(|s| s.signal() != Some(libc::SIGKILL));
        if completed && dump.is_file() {
            // Atomic within the directory: a JVM starting now sees the whole archive or none.
            let _ = fs::rename(&dump, &self.archive);
        }
        let _ = fs::remove_file(&dump);
        let _ = fs::remove_file(claim_path(&self.archive));
    }
}

impl Drop for ClassSharing {
    fn drop(&mut self) {
        // A JVM that was never waited for: its claim passes on (see `claim`), and no half-written
        // archive is left to be taken for a whole one.
        if let Some(dump) = self.dump.take() {
            let _ = fs::remove_file(dump);
            let _ = fs::remove_file(claim_path(&self.archive));
        }
    }
}

/// `$CARGO_TARGET_DIR/jvm-class-archives` when tests run under cargo with a target dir set,
/// else `zklock-testing-jvm-class-archives` in the temporary directory.
fn archive_dir() -> PathBuf {
    match std::env::var_os("CARGO_TARGET_DIR") {
        Some(target) => PathBuf::from(target).join("jvm-class-archives"),
        None => std::env::temp_dir().join("zklock-testing-jvm-class-archives"),
    }
}

/// A name for what an archive depends on: the JDK behind `java` (its files' sizes and times),
/// every class path entry (its size and time: the JVM rejects an archive whose jars changed),
/// and the main class.
fn kind_key(java: &Path, classpath: &str, main_class: &str) -> String {
    let mut hasher = DefaultHasher::new();
    let java = fs::canonicalize(java).unwrap_or_else(|_| java.to_path_buf());
    java.hash(&mut hasher);
    // bin/java → the JDK's home, whose JVM library and module image the archive is built on.
    if let Some(home) = java.parent().and_then(Path::parent) {
        for file in ["lib/server/libjvm.so", "lib/modules", "release"] {
            stamp(&home.join(file)).hash(&mut hasher);
        }
    }
    for entry in classpath.split(':') {
        entry.hash(&mut hasher);
        stamp(Path::new(entry)).hash(&mut hasher);
    }
    main_class.hash(&mut hasher);
    let name: String = main_class
        .rsplit('.')
        .next()
        .unwrap_or(main_class)
        .chars()
        .filter(char::is_ascii_alphanumeric)
        .collect();
    format!("{name}-{:016x}", hasher.finish())
}

/// A file's size and modification time, `None` if it cannot be read.
fn stamp(path: &Path) -> Option<(u64, u128)> {
    let meta = fs::metadata(path).ok()?;
    let modified = meta.modified().ok()?.duration_since(UNIX_EPOCH).ok()?.as_nanos();
    Some((meta.len(), modified))
}

fn claim_path(archive: &Path) -> PathBuf {
    archive.with_extension("claim")
}

/// Claims the writing of `archive` for the JVM about to start, returning the file it should
/// write. A claim names the process that made it: one whose process is gone (it died before
/// its JVM exited) is taken over. `None` when another live process holds the claim or the
/// directory cannot be written: the JVM then runs without an archive.
fn claim(dir: &Path, archive: &Path) -> Option<PathBuf> {
    fs::create_dir_all(dir).ok()?;
    let claim = claim_path(archive);
    for _ in 0..2 {
        match fs::File::options().write(true).create_new(true).open(&claim) {
            Ok(mut file) => {
                let _ = write!(file, "{}", std::process::id());
                let dump = archive.with_extension(format!("{}.{}.tmp", std::process::id(), unique()));
                return Some(dump);
            }
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                let holder = fs::read_to_string(&claim)
                    .ok()
                    .and_then(|s| s.trim().parse::<i32>().ok());
                let stale = match holder {
                    Some(pid) => !process_alive(pid),
                    // No pid yet: being written this instant, or its writer died right then.
                    None => fs::metadata(&claim)
                        .and_then(|m| m.modified())
                        .map(|t| t.elapsed().unwrap_or_default() > Duration::from_secs(10))
                        .unwrap_or(true),
                };
                if !stale {
                    return None;
                }
                let _ = fs::remove_file(&claim);
            }
            Err(_) => return None,
        }
    }
    None
}

fn process_alive(pid: i32) -> bool {
    // SAFETY: signal 0 only checks that the process exists and may be signalled.
    pid > 0
        && (unsafe { libc::kill(pid, 0) } == 0 || std::io::Error::last_os_error().raw_os_error() == Some(libc::EPERM))
}

/// A number no other claim of this process has used.
fn unique() -> u64 {
    use std::sync::atomic::{AtomicU64, Ordering};
    static NEXT: AtomicU64 = AtomicU64::new(0);
    NEXT.fetch_add(1, Ordering::Relaxed)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::java::{java_binary, server_classpath};
    use std::process::Command;

    /// Prints the server's version and exits: a JVM of the server's class path that ends on its
    /// own, as a stopped server does.
    const VERSION_MAIN: &str = "org.apache.zookeeper.version.VersionInfoMain";

    fn run(java: &Path, classpath: &str, sharing: &ClassSharing, extra: &[&str]) -> std::process::Output {
        Command::new(java)
            .args(sharing.jvm_args())
            .args(extra)
            .arg("-cp")
            .arg(classpath)
            .arg(VERSION_MAIN)
            .output()
            .expect("java runs")
    }

    #[test]
    fn a_kind_is_archived_by_its_first_jvm_and_mapped_by_the_next() {
        let dir = tempfile::tempdir().expect("temp dir");
        let java = java_binary().expect("java is installed");
        let classpath = server_classpath().expect("the ZooKeeper jars are installed");

        let mut first = ClassSharing::for_jvm_in(dir.path(), &java, &classpath, VERSION_MAIN);
        assert!(first.is_dumping(), "nothing was archived yet: {first:?}");
        let out = run(&java, &classpath, &first, &[]);
        assert!(out.status.success(), "{out:?}");
        first.finish(&Ok(out.status));
        assert!(first.archive.is_file(), "the first JVM's archive is in place");
        assert!(!claim_path(&first.archive).exists(), "the claim is given up");

        let second = ClassSharing::for_jvm_in(dir.path(), &java, &classpath, VERSION_MAIN);
        assert!(!second.is_dumping());
        assert!(
            second
                .jvm_args()
                .iter()
                .any(|a| a.starts_with("-XX:SharedArchiveFile=")),
            "{second:?}"
        );
        // `-Xshare:on` makes a JVM that cannot map the archive fail instead of running without.
        let out = run(&java, &classpath, &second, &["-Xshare:on"]);
        assert!(out.status.success(), "the archive maps: {out:?}");
        assert!(
            String::from_utf8_lossy(&out.stdout).contains("Apache ZooKeeper"),
            "{out:?}"
        );
    }

    #[test]
    fn a_claim_of_a_live_process_is_left_alone_and_a_dead_ones_is_taken_over() {
        let dir = tempfile::tempdir().expect("temp dir");
        let java = Path::new("/nonexistent/bin/java");
        let claim_file = dir.path().join(format!("{}.claim", kind_key(java, "", "Main")));

        fs::write(&claim_file, std::process::id().to_string()).expect("claim");
        let other = ClassSharing::for_jvm_in(dir.path(), java, "", "Main");
        assert!(!other.is_dumping(), "this process holds the claim: {other:?}");
        assert!(
            !other.jvm_args().iter().any(|a| a.starts_with("-XX:")),
            "no archive to map or write: {other:?}"
        );
        drop(other);
        assert!(claim_file.exists(), "a JVM that did not claim leaves the claim alone");

        let mut gone = Command::new("true").spawn().expect("spawn true");
        gone.wait().expect("wait");
        fs::write(&claim_file, gone.id().to_string()).expect("claim");
        let taker = ClassSharing::for_jvm_in(dir.path(), java, "", "Main");
        assert!(taker.is_dumping(), "the dead process's claim passes on: {taker:?}");
        assert_eq!(fs::read_to_string(&claim_file).unwrap(), std::process::id().to_string());
    }

    #[test]
    fn a_jvm_killed_while_writing_leaves_no_archive_and_frees_the_claim() {
        let dir = tempfile::tempdir().expect("temp dir");
        let java = Path::new("/nonexistent/bin/java");
        let mut sharing = ClassSharing::for_jvm_in(dir.path(), java, "", "Main");
        let dump = sharing.dump.clone().expect("the first JVM writes");
        fs::write(&dump, b"half an archive").expect("partial dump");
        sharing.finish(&Ok(ExitStatus::from_raw(libc::SIGKILL)));
        assert!(!sharing.archive.exists(), "a partial archive is never put in place");
        assert!(!dump.exists(), "the partial file is removed");
        assert!(!claim_path(&sharing.archive).exists(), "the claim is given up");
        assert!(ClassSharing::for_jvm_in(dir.path(), java, "", "Main").is_dumping());
    }

    #[test]
    fn a_changed_jar_is_another_kind() {
        let dir = tempfile::tempdir().expect("temp dir");
        let jar = dir.path().join("app.jar");
        fs::write(&jar, b"one").expect("jar");
        let java = Path::new("/nonexistent/bin/java");
        let classpath = jar.display().to_string();
        let before = kind_key(java, &classpath, "Main");
        assert_eq!(before, kind_key(java, &classpath, "Main"), "the key is stable");
        assert_ne!(before, kind_key(java, &classpath, "Other"));
        fs::write(&jar, b"two, longer").expect("jar");
        assert_ne!(before, kind_key(java, &classpath, "Main"));
    }
}
