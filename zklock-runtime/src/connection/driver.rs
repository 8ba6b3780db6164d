//! The thread a client's ZooKeeper sessions live on.
//!
//! The client library runs each session's connection as a tokio task, and the engine adds a
//! monitor task and background cleanups per session. On the caller's runtime those would die
//! with it, and with them the session: a client made in one `#[tokio::test]` (each has a
//! runtime of its own) would be dead in the next, and so would a default client installed once
//! for a whole suite. So every client runs its sessions on a small current-thread runtime on a
//! thread of its own, the driver, which lives as long as the client or any session, guard or
//! background job of it. The futures the caller awaits (acquire, release, …) run on the
//! caller's runtime, whichever it is; they talk to the driver through channels and wakers,
//! which work across runtimes, and use the caller's runtime only for their own timers.
//!
//! The cost: one mostly idle OS thread per client, and every request crosses from the caller's
//! thread to the driver's and its answer back: a thread wake-up each way, which on a small
//! machine is most of the client's CPU per acquisition (`docs/benchmarks.md`, "Where the time
//! goes"). A caller whose runtime outlives the client can spare that: with
//! [`LockClientBuilder::runtime`](crate::LockClientBuilder::runtime) the driver is that
//! runtime ([`Driver::on`]), and no thread is started.

use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::runtime::Handle;
use tokio::sync::oneshot;
use zookeeper_client as zk;

use crate::error::LockError;

/// How long a driver that is no longer needed lets its sessions' close requests go out before
/// its runtime stops.
const CLOSE_GRACE: Duration = Duration::from_secs(2);

/// Where a client's sessions run: a thread of the client's own, or the caller's runtime.
/// Dropping the last reference to a driver thread stops it, once the sessions it ran have
/// closed (or after [`CLOSE_GRACE`]).
pub(crate) struct Driver {
    handle: Handle,
    /// Sessions that ran here, so that stopping waits for their close requests to go out.
    sessions: Arc<Mutex<Vec<zk::StateWatcher>>>,
    stop: Option<oneshot::Sender<()>>,
}

impl Driver {
    /// Starts a driver thread.
    pub async fn start() -> Result<Arc<Driver>, LockError> {
        let (started, handle) = oneshot::channel();
        let (stop, stopped) = oneshot::channel::<()>();
        let sessions: Arc<Mutex<Vec<zk::StateWatcher>>> = Arc::default();
        let closing = sessions.clone();
        std::thread::Builder::new()
            .name("zklock-driver".into())
            .spawn(move || {
                let runtime = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
                    Ok(runtime) => runtime,
                    Err(err) => {
                        let _ = started.send(Err(err));
                        return;
                    }
                };
                let _ = started.send(Ok(runtime.handle().clone()));
                runtime.block_on(async move {
                    let _ = stopped.await;
                    let watchers = std::mem::take(&mut *closing.lock().unwrap_or_else(|e| e.into_inner()));
                    let all_closed =
                        futures_util::future::join_all(watchers.into_iter().map(|mut states| async move {
                            while !states.peek_state().is_terminated() {
                                states.changed().await;
                            }
                        }));
                    let _ = tokio::time::timeout(CLOSE_GRACE, all_closed).await;
                });
            })
            .map_err(|err| LockError::connection_from("cannot start the client's driver thread", err))?;
        let handle = handle
            .await
            .map_err(|_| LockError::connection("the client's driver thread ended at start"))?
            .map_err(|err| LockError::connection_from("cannot start the client's driver runtime", err))?;
        Ok(Arc::new(Driver {
            handle,
            sessions,
            stop: Some(stop),
        }))
    }

    /// A driver on the caller's `runtime`, which the caller keeps running for as long as the
    /// client: no thread of its own, nothing to stop.
    pub fn on(runtime: Handle) -> Arc<Driver> {
        Arc::new(Driver {
            handle: runtime,
            sessions: Arc::default(),
            stop: None,
        })
    }

    /// The driver's runtime, for tasks that must outlive the caller's.
    pub fn handle(&self) -> &Handle {
        &self.handle
    }

    /// Runs `work` on the driver and awaits its output from wherever the caller runs. Dropping
    /// the returned future stops `work`. Errs with why the driver did not run it to the end:
    /// its runtime shut down, or `work` panicked there (on a caller's runtime built without
    /// tokio's time driver, a timer panics).
    pub async fn run<T: Send + 'static>(&self, work: impl Future<Output = T> + Send + 'static) -> Result<T, String> {
        struct AbortOnDrop<T>(tokio::task::JoinHandle<T>);
        impl<T> Drop for AbortOnDrop<T> {
            fn drop(&mut self) {
                self.0.abort();
            }
        }
        let mut task = AbortOnDrop(self.handle.spawn(work));
        (&mut task.0).await.map_err(|err| match err.try_into_panic() {
            Ok(panic) => {
                let why = panic
                    .downcast_ref::<&str>()
                    .map(|s| (*s).to_owned())
                    .or_else(|| panic.downcast_ref::<String>().cloned())
                    .unwrap_or_else(|| "a panic".to_owned());
                format!(
                    "it could not run them ({why}); a runtime given to LockClientBuilder::runtime \
                     needs tokio's time driver (Builder::enable_time, or enable_all)"
                )
            }
            Err(_) => "it stopped".to_owned(),
        })
    }

    /// Notes a session opened on this driver, whose close stopping the driver waits for (a
    /// driver of its own thread; one on the caller's runtime keeps no list).
    pub fn adopt(&self, states: zk::StateWatcher) {
        if self.stop.is_none() {
            return;
        }
        let mut sessions = self.sessions.lock().unwrap_or_else(|e| e.into_inner());
        sessions.retain(|s| !s.peek_state().is_terminated());
        sessions.push(states);
    }
}

impl Drop for Driver {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
    }
}
