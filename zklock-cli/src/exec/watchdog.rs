//! The watchdog of a `zklock exec`: a second `zklock` process that leads CMD's process group and
//! kills that group when the `zklock exec` that started it is gone without saying it is done
//! ([`super::group`]). It needs no unwinding of the process it watches: the kernel closes the
//! pipe between them however that process ends.
//!
//! It is not a command: `zklock` runs as a watchdog only when started with [`ARG`] as its first
//! argument and [`ENV`] in its environment, as [`super::group::Group::start`] starts it.

use std::ffi::OsStr;
use std::io::{self, Read};
use std::path::PathBuf;
use std::process::ExitCode;

use rustix::process::{getpgrp, getpid, kill_process_group, Signal};

/// The first argument that makes `zklock` a watchdog.
pub(crate) const ARG: &str = "__exec-watchdog";
/// The variable that must be set as well, so that no mistyped command line starts one.
pub(crate) const ENV: &str = "ZKLOCK_EXEC_WATCHDOG";

/// The program to start as the watchdog: this one.
pub(crate) fn program() -> io::Result<PathBuf> {
    // The running binary even if its file was replaced (an upgrade) since it started.
    #[cfg(target_os = "linux")]
    if std::path::Path::new("/proc/self/exe").exists() {
        return Ok(PathBuf::from("/proc/self/exe"));
    }
    std::env::current_exe()
}

/// Whether this process was started as a watchdog.
pub(crate) fn asked(first_arg: Option<&OsStr>) -> bool {
    first_arg == Some(OsStr::new(ARG)) && std::env::var_os(ENV).is_some_and(|v| v == "1")
}

/// Runs the watchdog: waits on standard input; a byte means "stand down"; the end of input (the
/// `zklock exec` that started it is gone) kills the process group it leads, itself included.
pub(crate) fn run() -> ExitCode {
    // Only as the leader of its own group: otherwise the group is not CMD's.
    if getpgrp() != getpid() {
        eprintln!("zklock: {ARG} is started by `zklock exec`, not by hand");
        return ExitCode::from(2);
    }
    // The group's signals are meant for CMD: `zklock exec` passes SIGINT, SIGTERM and SIGHUP on
    // to the whole group, and the terminal sends its own there while the group has it.
    for signal in [
        libc::SIGINT,
        libc::SIGTERM,
        libc::SIGHUP,
        libc::SIGQUIT,
        libc::SIGTSTP,
        libc::SIGTTIN,
        libc::SIGTTOU,
        libc::SIGPIPE,
    ] {
        // SAFETY: SIG_IGN is a valid disposition for each of these signals; no handler runs.
        unsafe {
            libc::signal(signal, libc::SIG_IGN);
        }
    }
    let mut byte = [0u8; 1];
    let mut stdin = io::stdin().lock();
    loop {
        match stdin.read(&mut byte) {
            Ok(0) => break,
            Ok(_) => return ExitCode::SUCCESS,
            Err(err) if err.kind() == io::ErrorKind::Interrupted => continue,
            Err(_) => break,
        }
    }
    // `zklock exec` ended without standing us down: nothing of the group may run unlocked.
    let _ = kill_process_group(getpgrp(), Signal::KILL);
    ExitCode::FAILURE
}
