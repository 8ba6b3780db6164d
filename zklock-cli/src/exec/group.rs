//! The process group `zklock exec` runs CMD in, so that whatever CMD starts (a background job of
//! a shell, the stages of a pipeline, a `psql` under bash) is signalled and stopped with it, and
//! dies with `zklock exec` however that ends.
//!
//! The group's leader is a watchdog ([`super::watchdog`]): a second `zklock` process that holds
//! the read end of a pipe whose write end only this process has. It ignores the signals passed
//! on to the group and waits for a byte on the pipe: a byte means "done, stand down"; the end of
//! the pipe means this process is gone (SIGKILL, the OOM killer, a crash: the kernel closes the
//! pipe whatever way a process ends), and the watchdog then kills the whole group. On Linux CMD
//! also gets `PR_SET_PDEATHSIG` = SIGKILL, for the case that the watchdog died first.
//!
//! The group is the unit: signals go to the group, and the grant is given up only once no
//! process of the group but the watchdog is left ([`Group::is_empty`]). A process that leaves the
//! group on purpose (`setsid`, `setpgid`: a daemon) escapes this, as it escapes a shell's job
//! control; so does one that another session's tooling moves elsewhere.

use std::io;
use std::os::fd::AsFd;
use std::process::Stdio;
use std::time::Duration;

use rustix::process::{getpgrp, kill_process_group, Pid, Signal};
use tokio::io::AsyncWriteExt;
use tokio::process::{Child, ChildStdin, Command};

use super::watchdog;

/// How often to look whether the group is empty yet: there is no event for "a process that is
/// not our child left the group".
pub(crate) const LOOK_EVERY: Duration = Duration::from_millis(10);

/// CMD's process group, led by the watchdog; the terminal's foreground group while it lives,
/// if this process had the terminal.
pub(crate) struct Group {
    pgid: Pid,
    watchdog: Child,
    /// The write end of the watchdog's pipe; dropping it unwritten makes the watchdog kill the
    /// group.
    lifeline: Option<ChildStdin>,
    /// The foreground group to give the terminal back to, if it was handed to the group.
    terminal: Option<Pid>,
}

impl Group {
    /// Starts the watchdog as the leader of a new process group and, if this process is in the
    /// terminal's foreground group, makes the new group the foreground group (so CMD can read
    /// the terminal, and the terminal's Ctrl-C reaches CMD).
    pub(crate) fn start() -> io::Result<Group> {
        let mut command = Command::new(watchdog::program()?);
        command
            .arg(watchdog::ARG)
            .env(watchdog::ENV, "1")
            .process_group(0)
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .kill_on_drop(false);
        let mut child = command.spawn()?;
        let pgid = child
            .id()
            .and_then(|id| Pid::from_raw(id as i32))
            .ok_or_else(|| io::Error::other("the watchdog has no pid"))?;
        let lifeline = child.stdin.take();
        let mut group = Group {
            pgid,
            watchdog: child,
            lifeline,
            terminal: None,
        };
        group.terminal = take_terminal(pgid);
        Ok(group)
    }

    /// Makes `command` start in the group; on Linux it also gets SIGKILL when this process ends.
    pub(crate) fn admit(&self, command: &mut Command) {
        command.process_group(self.pgid.as_raw_nonzero().get());
        #[cfg(target_os = "linux")]
        {
            let parent = rustix::process::getpid();
            // SAFETY: the closure runs in the forked child before exec and only makes two
            // system calls, which are async-signal-safe; it allocates nothing.
            unsafe {
                command.pre_exec(move || {
                    // The signal comes when the thread that forked exits: `zklock` forks CMD
                    // from its main thread (a current-thread runtime), which lives as long as
                    // the process.
                    rustix::process::set_parent_process_death_signal(Some(Signal::KILL))?;
                    if rustix::process::getppid() != Some(parent) {
                        // This process ended before the setting took effect.
                        return Err(io::Error::other("zklock exited while starting the command"));
                    }
                    Ok(())
                });
            }
        }
    }

    /// Sends `signal` to every process of the group (the watchdog ignores it). A stopped
    /// process is continued too, so that it can act on a SIGTERM.
    pub(crate) fn signal(&self, signal: Signal) {
        // Fails only when the group is empty.
        let _ = kill_process_group(self.pgid, signal);
        if signal != Signal::KILL && signal != Signal::CONT {
            let _ = kill_process_group(self.pgid, Signal::CONT);
        }
    }

    /// Whether no process of the group is alive but the watchdog (zombies do not count: they
    /// run nothing).
    pub(crate) fn is_empty(&self) -> bool {
        !has_members(self.pgid, self.watchdog_pid())
    }

    fn watchdog_pid(&self) -> Option<Pid> {
        self.watchdog.id().and_then(|id| Pid::from_raw(id as i32))
    }

    /// Ends the group once it is empty: stands the watchdog down and gives the terminal back.
    pub(crate) async fn dismiss(mut self) {
        if let Some(mut lifeline) = self.lifeline.take() {
            // A failed write closes the pipe all the same, and the watchdog then kills a group
            // that is empty but for itself.
            let _ = lifeline.write_all(b"x").await;
        }
        let _ = self.watchdog.wait().await;
        self.give_terminal_back();
    }

    fn give_terminal_back(&mut self) {
        if let Some(foreground) = self.terminal.take() {
            give_terminal(foreground);
        }
    }
}

impl Drop for Group {
    /// Not dismissed (an early return, a panic): nothing of the group may outlive the grant.
    fn drop(&mut self) {
        if self.lifeline.is_some() {
            let _ = kill_process_group(self.pgid, Signal::KILL);
        }
        self.give_terminal_back();
    }
}

/// Hands the terminal on standard input to `group` if this process is in its foreground
/// group; the group to give it back to.
fn take_terminal(group: Pid) -> Option<Pid> {
    use std::io::IsTerminal;
    let stdin = io::stdin();
    if !stdin.is_terminal() {
        return None;
    }
    let foreground = rustix::termios::tcgetpgrp(stdin.as_fd()).ok()?;
    if foreground != getpgrp() {
        // Started in the background: CMD must not take the terminal from the foreground job.
        return None;
    }
    rustix::termios::tcsetpgrp(stdin.as_fd(), group).ok()?;
    Some(foreground)
}

/// Makes `group` the terminal's foreground group again. This process is in a background group
/// by then: the terminal would stop it with SIGTTOU unless the signal is blocked.
fn give_terminal(group: Pid) {
    // SAFETY: plain signal-mask calls on the current thread, with masks built here.
    unsafe {
        let mut ttou: libc::sigset_t = std::mem::zeroed();
        let mut before: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut ttou);
        libc::sigaddset(&mut ttou, libc::SIGTTOU);
        libc::pthread_sigmask(libc::SIG_BLOCK, &ttou, &mut before);
        let _ = rustix::termios::tcsetpgrp(io::stdin().as_fd(), group);
        libc::pthread_sigmask(libc::SIG_SETMASK, &before, std::ptr::null_mut());
    }
}

/// Whether a live process other than `except` is in group `pgid` (stops at the first).
#[cfg(target_os = "linux")]
fn has_members(pgid: Pid, except: Option<Pid>) -> bool {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return false;
    };
    let (pgid, except) = (pgid.as_raw_nonzero().get(), except.map(|p| p.as_raw_nonzero().get()));
    entries
        .filter_map(Result::ok)
        .filter_map(|entry| entry.file_name().to_str()?.parse::<i32>().ok())
        .filter(|&pid| Some(pid) != except)
        .any(|pid| {
            std::fs::read_to_string(format!("/proc/{pid}/stat"))
                .ok()
                .and_then(|stat| live_in_group(&stat))
                == Some(pgid)
        })
}

/// The process group of a live process from its `/proc/PID/stat` line; `None` for a zombie
/// (or a line that does not parse).
#[cfg(target_os = "linux")]
fn live_in_group(stat: &str) -> Option<i32> {
    // "pid (comm) state ppid pgrp ...": comm may hold spaces and parentheses, so fields count
    // from the last ')'.
    let mut fields = stat.get(stat.rfind(')')? + 1..)?.split_whitespace();
    let state = fields.next()?;
    let _ppid = fields.next()?;
    let pgrp = fields.next()?.parse().ok()?;
    (!matches!(state, "Z" | "X" | "x")).then_some(pgrp)
}

/// Elsewhere the group is not listed: what CMD left running is not found (and outlives the
/// grant); the watchdog still kills the group if this process dies.
#[cfg(not(target_os = "linux"))]
fn has_members(_pgid: Pid, _except: Option<Pid>) -> bool {
    false
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use super::live_in_group;

    #[test]
    fn a_stat_line_gives_the_group_of_a_live_process() {
        assert_eq!(live_in_group("42 (sh) S 1 40 40 0 -1 4194560"), Some(40));
        assert_eq!(live_in_group("42 (a (b) c) R 1 41 41 0"), Some(41));
        assert_eq!(live_in_group("42 (sh) Z 1 40 40 0"), None);
        assert_eq!(live_in_group("garbage"), None);
    }
}
