//! Deleting contender nodes: the one delete path every release takes (a guard dropped or
//! released, a handed-over node nobody claimed), background jobs, and the removal of
//! contenders whose acquisition was abandoned midway (timeout, cancellation, errors).
//!
//! Two rules from Curator's bug history shape this file:
//! - CURATOR-678: a delete that hits a connection loss is retried until the node is gone or
//!   the session is over; the node is never just forgotten.
//! - A contender whose create had no answer is found again by its protected `_c_<uuid>`
//!   prefix. The listing is sent on the same session after the create, and ZooKeeper answers a
//!   session's requests in order, so the listing sees the create if it happened at all.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};

use tokio::sync::{watch, Notify};
use tracing::{debug, warn};
use zookeeper_client as zk;

use crate::connection::session::Mark;
use crate::connection::session::{send_now, Answer, Session};
use crate::engine::lock_delay::RELEASE_MARK;
use crate::error::LockError;
use crate::error::{is_session_over, is_transient};

/// Tracks background cleanup jobs so [`LockClient::flush`](crate::LockClient::flush) can
/// wait for them.
#[derive(Clone, Default)]
pub(crate) struct Cleanup {
    state: Arc<State>,
}

struct State {
    pending: AtomicUsize,
    idle: Notify,
    abandoned: AtomicU64,
    /// How many [`Cleanup::flush`]es are under way: while any is, nodes kept idle
    /// ([`crate::engine::cache`]) are given up, so that a flush waits for their deletes too.
    evictions: watch::Sender<u64>,
}

impl Default for State {
    fn default() -> Self {
        State {
            pending: AtomicUsize::new(0),
            idle: Notify::new(),
            abandoned: AtomicU64::new(0),
            evictions: watch::channel(0).0,
        }
    }
}

impl Cleanup {
    pub fn new() -> Self {
        Self::default()
    }

    /// Runs `job` on the session's runtime, counted until it finishes, or until the runtime
    /// drops it unfinished (a runtime that shut down): either way [`flush`](Self::flush) stops
    /// waiting for it.
    pub fn spawn(&self, session: &Session, job: impl Future<Output = ()> + Send + 'static) {
        spawn_counted(session, self.count(), job);
    }

    /// Runs `job` inside the returned future, for a caller that awaits it (a release): no task
    /// of its own and no hop between tasks. If the returned future is dropped before `job`
    /// finishes, the rest of `job` goes on in the background as with [`spawn`](Self::spawn).
    /// Counted for [`flush`](Self::flush) either way.
    pub fn finish<T: Send + 'static>(
        &self,
        session: &Arc<Session>,
        job: impl Future<Output = T> + Send + 'static,
    ) -> Finishing<T> {
        Finishing {
            job: Some(Box::pin(job)),
            counted: Some(self.count()),
            session: session.clone(),
        }
    }

    /// Counts one job until the returned value drops.
    fn count(&self) -> Counted {
        self.state.pending.fetch_add(1, Ordering::SeqCst);
        Counted(self.state.clone())
    }

    /// Removes, in the background, the contender an abandoned acquisition may have left in
    /// `dir` (see [`remove_contender`]), and counts it.
    pub fn spawn_removal(&self, session: &Arc<Session>, dir: String, protect: String, node: Option<String>) {
        self.state.abandoned.fetch_add(1, Ordering::Relaxed);
        self.spawn(session, remove_contender(session.clone(), dir, protect, node));
    }

    /// How many abandoned acquisitions were cleaned up (or are being).
    pub fn abandoned(&self) -> u64 {
        self.state.abandoned.load(Ordering::Relaxed)
    }

    /// How many [`flush`](Self::flush)es are under way: while any is, nodes kept idle are
    /// given up.
    pub fn evictions(&self) -> watch::Receiver<u64> {
        self.state.evictions.subscribe()
    }

    /// Gives up the nodes kept idle (also those kept while this runs), and waits until every
    /// counted job has finished.
    pub async fn flush(&self) {
        /// Counts this flush as under way until it returns or is dropped.
        struct Flushing<'a>(&'a watch::Sender<u64>);
        impl Drop for Flushing<'_> {
            fn drop(&mut self) {
                self.0.send_modify(|n| *n -= 1);
            }
        }
        self.state.evictions.send_modify(|n| *n += 1);
        let _flushing = Flushing(&self.state.evictions);
        loop {
            let idle = self.state.idle.notified();
            tokio::pin!(idle);
            idle.as_mut().enable();
            if self.state.pending.load(Ordering::SeqCst) == 0 {
                return;
            }
            idle.await;
        }
    }
}

/// One job counted for [`Cleanup::flush`] while this lives.
struct Counted(Arc<State>);

impl Drop for Counted {
    fn drop(&mut self) {
        if self.0.pending.fetch_sub(1, Ordering::SeqCst) == 1 {
            self.0.idle.notify_waiters();
        }
    }
}

/// A job run by its awaiting caller ([`Cleanup::finish`]); dropped unfinished, it hands the
/// rest of the job to the session's runtime.
pub(crate) struct Finishing<T: Send + 'static> {
    job: Option<Pin<Box<dyn Future<Output = T> + Send>>>,
    counted: Option<Counted>,
    session: Arc<Session>,
}

impl<T: Send + 'static> Future for Finishing<T> {
    type Output = T;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<T> {
        let Some(job) = self.job.as_mut() else {
            panic!("`Finishing` polled after it completed");
        };
        let output = std::task::ready!(job.as_mut().poll(cx));
        self.job = None;
        self.counted = None;
        Poll::Ready(output)
    }
}

impl<T: Send + 'static> Drop for Finishing<T> {
    fn drop(&mut self) {
        if let (Some(job), Some(counted)) = (self.job.take(), self.counted.take()) {
            spawn_counted(&self.session, counted, async move {
                job.await;
            });
        }
    }
}

/// Runs `job` on the session's runtime, counted until it finishes or the runtime drops it.
fn spawn_counted(session: &Session, counted: Counted, job: impl Future<Output = ()> + Send + 'static) {
    if session.runtime_gone() {
        return; // dropping `counted` uncounts the job; the session's nodes went with it
    }
    session.runtime.spawn(async move {
        let _counted = counted;
        job.await;
    });
}

/// The one way a contender node is deleted. The delete request goes on the wire before this
/// returns, so it is ordered ahead of anything the caller sends next on the session; the
/// returned future waits for the answer and retries through connection losses until the node
/// is gone or the session is over (either way the node no longer holds anything).
pub(crate) fn delete_node(
    session: &Arc<Session>,
    path: String,
) -> impl Future<Output = Result<(), LockError>> + Send + 'static {
    let mut mark = session.untrack(&path);
    let first = session.zk().map(|zk| send_delete(zk, &path, mark.as_ref()));
    let session = session.clone();
    async move {
        let mut outcome = match first {
            Ok(sent) => sent.await,
            Err(closed) => Err(closed),
        };
        // Only a delete acknowledged on the first try tells exactly how the lock dir changed.
        match outcome {
            Ok(()) => session.alone().deleted(&path),
            _ => session.alone().unsure(&path),
        }
        loop {
            match outcome {
                Ok(()) | Err(zk::Error::NoNode) => {
                    debug!(node = %path, "contender node deleted");
                    return Ok(());
                }
                // The session is over; the server deletes its ephemeral nodes.
                Err(err) if is_session_over(&err) => return Ok(()),
                Err(err) if is_transient(&err) => {
                    debug!(node = %path, %err, "delete interrupted; retrying once reconnected");
                    if !session.wait_to_retry().await {
                        return Ok(());
                    }
                }
                // The ACL lets us delete the node but not write it: delete it unmarked (the
                // waiter behind then waits out its lock-delay) rather than keep it.
                Err(zk::Error::NoAuth) if mark.is_some() => {
                    warn!(node = %path, "no WRITE permission on the node to mark its release; deleting it unmarked");
                    mark = None;
                }
                Err(err) => {
                    warn!(node = %path, %err, "cannot delete contender node");
                    return Err(LockError::zk("delete", err));
                }
            }
            outcome = match session.zk() {
                Ok(zk) => send_delete(zk, &path, mark.as_ref()).await,
                Err(closed) => Err(closed),
            };
        }
    }
}

type Deletion = Answer<Result<(), zk::Error>>;

/// Sends the delete of `path` now (before returning) and returns its answer to await. A
/// `mark`ed deletion sets the node's data to the clean-release mark first, in the same
/// transaction ([`crate::engine::lock_delay`]); it costs no extra round trip. A mark on the
/// condition that the node ahead still exists ([`Mark::WhileAhead`]) checks that node in the
/// same transaction too; if it is gone, the node is deleted unmarked instead.
fn send_delete(zk: Arc<zk::Client>, path: &str, mark: Option<&Mark>) -> Deletion {
    let Some(mark) = mark else {
        return Box::pin(zk.delete(path, None));
    };
    let path = path.to_owned();
    let ahead = match mark {
        Mark::Clean => None,
        Mark::WhileAhead(ahead) => Some(ahead.clone()),
    };
    send_now(Box::pin(async move {
        let mut batch = zk.new_multi_writer();
        if let Some(ahead) = &ahead {
            batch.add_check_version(ahead, -1)?;
        }
        batch.add_set_data(&path, RELEASE_MARK, None)?;
        batch.add_delete(&path, None)?;
        match batch.commit().await {
            Ok(_) => Ok(()),
            // The node ahead is gone, and how it went is not known here: ours goes unmarked,
            // so the waiter behind it waits out the delay rather than walk in on it.
            Err(zk::MultiWriteError::OperationFailed { index: 0, .. }) if ahead.is_some() => {
                zk.delete(&path, None).await
            }
            Err(err) => Err(err.into()),
        }
    }))
}

/// Removes the contender an abandoned acquisition may have left in `dir`: the node itself when
/// its name is known, otherwise whatever child carries the protected `_c_<uuid>` prefix.
async fn remove_contender(session: Arc<Session>, dir: String, protect: String, node: Option<String>) {
    if let Some(node) = node {
        let _ = delete_node(&session, format!("{dir}/{node}")).await;
        return;
    }
    loop {
        // `sync` first, pipelined: a create answered by another server must be seen here.
        let listed = match session.zk() {
            Ok(zk) => tokio::join!(zk.sync(&dir), zk.list_children(&dir)).1,
            Err(closed) => Err(closed),
        };
        match listed {
            Ok(children) => {
                if let Some(node) = children.into_iter().find(|c| c.starts_with(&protect)) {
                    let _ = delete_node(&session, format!("{dir}/{node}")).await;
                }
                return;
            }
            Err(zk::Error::NoNode) => return,
            Err(err) if is_session_over(&err) => return,
            Err(err) if is_transient(&err) => {
                if !session.wait_to_retry().await {
                    return;
                }
            }
            Err(err) => {
                warn!(%dir, %err, "cannot list lock dir to clean up an abandoned contender");
                return;
            }
        }
    }
}
