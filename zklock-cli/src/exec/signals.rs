//! The signals `zklock exec` passes on to CMD's process group.

use rustix::process::Signal;
use tokio::signal::unix::{signal, SignalKind};

use crate::{Failure, EXIT_FAILED};

/// The signals `zklock exec` passes on to CMD: SIGINT, SIGTERM, SIGHUP. Their default action
/// (ending this process) is replaced for as long as the process lives.
pub(crate) struct Signals {
    interrupt: tokio::signal::unix::Signal,
    terminate: tokio::signal::unix::Signal,
    hangup: tokio::signal::unix::Signal,
}

impl Signals {
    pub(crate) fn install() -> Result<Signals, Failure> {
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
    pub(crate) async fn next(&mut self) -> (Signal, &'static str) {
        tokio::select! {
            Some(()) = self.interrupt.recv() => (Signal::INT, "SIGINT"),
            Some(()) = self.terminate.recv() => (Signal::TERM, "SIGTERM"),
            Some(()) = self.hangup.recv() => (Signal::HUP, "SIGHUP"),
            else => std::future::pending().await,
        }
    }
}
