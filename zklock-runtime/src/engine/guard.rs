//! The hold of a granted node ([`Holding`]: how it ends, hands over or is released) and its
//! owned guard ([`LockGuard`]). What tells work under it that it was lost is in
//! [`crate::engine::loss`].

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use futures_util::future::BoxFuture;
use tracing::{debug, warn};

use crate::connection::session::Session;
use crate::engine::cache;
use crate::engine::cleanup::{delete_node, Cleanup};
use crate::engine::clock::Stamp;
use crate::engine::local_queue::{Turn, Warm};
use crate::engine::loss::{deleted_reason, loss_reason, LossSignal};
use crate::engine::own_node::OwnNode;
use crate::engine::rules::LockKind;
use crate::engine::supervise::{supervise, MaxHold, OnLost, OnRevoke, Supervision};
use crate::engine::token::FencingToken;
use crate::error::LockError;
use crate::telemetry::gauges::Held;
use crate::telemetry::metrics::{CounterCache, Event, Labels, Metrics, Timing};

/// The identity of one client (and its clones) within this process: another client, even of
/// the same ensemble, is another holder, as another process would be.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) struct ClientId(u64);

impl ClientId {
    #[cfg(test)]
    pub(crate) fn for_model() -> ClientId {
        ClientId(0)
    }

    pub(crate) fn next() -> ClientId {
        static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
        ClientId(NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed))
    }
}

/// One grant of a lock, shared by the guards of a reentrant hold. Dropping the last guard drops
/// this, which ends the hold ([`Holding::end`]).
pub(crate) struct Holding {
    /// The client the hold was granted through; with `dir` and `kind`, the lock's identity.
    pub client: ClientId,
    pub session: Arc<Session>,
    pub name: Arc<str>,
    /// The lock directory and kind, which reentrancy matches on (with `client`).
    pub dir: Arc<str>,
    pub kind: LockKind,
    /// The contender node; empty once the hold has ended (handed over or deleted).
    pub node_path: String,
    pub token: FencingToken,
    pub losses_at_grant: u64,
    pub granted_at: Instant,
    /// The front of this process's queue for the lock (exclusive locks only), kept while held.
    pub turn: Option<Turn>,
    /// How many times in a row a node may be handed to the next task of this process.
    pub max_handoffs: u32,
    pub cleanup: Cleanup,
    pub metrics: Arc<Metrics>,
    /// The lock's name template, which its exported metrics are labelled with.
    pub template: Option<Arc<str>>,
    /// The exported counter of this hold's re-entries, registered with the first.
    pub reentries: CounterCache,
    /// This hold's view of the watch on `node_path`: deleted by someone else (a loss),
    /// revocation requested.
    pub own_node: OwnNode,
    /// The hold in this process's gauges, until it ends.
    pub held: Option<Held>,
    /// How long from the grant the node is kept however soon the hold ends
    /// ([`Lock::with_min_hold`](crate::Lock::with_min_hold)).
    pub min_hold: Option<Duration>,
    /// How long the node is kept idle for this process once the hold ends with nobody to hand
    /// it to ([`Lock::with_cache`](crate::Lock::with_cache)).
    pub cache: Option<Duration>,
    /// The `lock_hold` span, from the acquisition to the end of the hold: its `outcome` is
    /// recorded when the hold ends, and it closes when the last guard goes.
    pub span: tracing::Span,
}

impl Holding {
    pub(crate) fn is_lost(&self) -> bool {
        self.session.health().invalidates(self.losses_at_grant) || self.own_node.state().deleted
    }

    pub(crate) fn labels(&self) -> Labels<'_> {
        Labels {
            kind: self.kind.label(),
            template: self.template.as_ref(),
        }
    }

    /// Whether ending the hold should hand the node to the next task of this process: someone
    /// is waiting, the node has not used up its handoffs, the session is connected and vouched
    /// for (no pause of the process since the server last answered that could have let it
    /// expire) and was never reported lost since the grant, and nobody asked for the lock (a
    /// revoked node goes back to ZooKeeper's queue, where the revoker waits).
    fn can_hand_off(&self) -> bool {
        self.turn.as_ref().is_some_and(|t| t.has_waiters())
            && self.token.generation() < self.max_handoffs
            && self.session.vouched_for()
            && !self.is_lost()
            && !self.own_node.state().revoked
    }

    /// Whether ending the hold with nobody to hand the node to may keep it idle for this
    /// process (lock caching): as for a handoff, the hold is this process's queue front, its
    /// session is vouched for and was never reported lost, and nobody asked for the lock; and
    /// the token has a generation left.
    fn can_cache(&self) -> bool {
        self.cache.is_some()
            && self.turn.is_some()
            && self.token.generation() < u32::MAX
            && self.session.vouched_for()
            && !self.is_lost()
            && !self.own_node.state().revoked
    }

    pub(crate) fn loss_signal(&self) -> LossSignal {
        LossSignal::of_hold(
            &self.name,
            self.session.subscribe(),
            self.losses_at_grant,
            &self.node_path,
            self.own_node.subscribe(),
        )
    }

    /// A `max_hold` bound on work under this hold, counted from `since`.
    pub(crate) fn max_hold(&self, since: Stamp, bound: Duration) -> MaxHold<'_> {
        MaxHold {
            name: &self.name,
            metrics: &self.metrics,
            labels: self.labels(),
            since: since.to_instant(),
            bound,
        }
    }

    pub(crate) fn lost_error(&self) -> LockError {
        let health = self.session.health();
        let reason = if health.invalidates(self.losses_at_grant) {
            loss_reason(&health).to_owned()
        } else {
            deleted_reason(&self.node_path)
        };
        LockError::Lost {
            name: self.name.to_string(),
            reason,
        }
    }

    /// Whether someone asked for this hold to be released ([`LockGuard::revoked`]).
    pub(crate) fn is_revoked(&self) -> bool {
        self.own_node.state().revoked
    }

    /// Resolves once someone asks for this hold to be released.
    pub(crate) async fn revoked(&self) {
        let mut rx = self.own_node.subscribe();
        if rx.wait_for(|s| s.revoked).await.is_err() {
            std::future::pending::<()>().await;
        }
    }

    /// The error of work stopped because a revocation was requested.
    pub(crate) fn revoked_error(&self) -> LockError {
        LockError::Revoked {
            name: self.name.to_string(),
        }
    }

    /// Leaves this process's queue for the lock: ending the hold then deletes the node instead
    /// of handing it to the next local task, which contends in ZooKeeper meanwhile.
    pub(crate) fn leave_local_queue(&mut self) {
        self.turn = None;
    }

    /// Holds the write node from now on as the read side of its read/write lock (a downgrade
    /// that must keep its write node): reentrancy and metrics see a read hold, and this
    /// process's writers queue in ZooKeeper behind the node.
    pub(crate) fn become_read(&mut self) {
        self.leave_local_queue();
        self.kind = LockKind::Read;
        self.held = Some(Held::start(self.labels()));
    }

    /// Ends the hold, once: hands the node to the next local waiter, or sends its delete. Every
    /// release (drop, [`LockGuard::release`]) goes through here. Returns what is left to wait
    /// for: the rest of the deletion, or, when `confirm` is set, the handed-over node being
    /// taken by the waiter (or deleted, if the waiter gave up); `None` when nothing is.
    fn end(&mut self, confirm: bool) -> Option<Pending> {
        if self.node_path.is_empty() {
            return None;
        }
        let rest = self
            .min_hold
            .and_then(|min| min.checked_sub(self.granted_at.elapsed()))
            .filter(|rest| !rest.is_zero());
        if let Some(rest) = rest.filter(|_| !self.is_lost()) {
            return Some(self.put_off(rest, confirm));
        }
        self.held = None;
        let lost = self.is_lost();
        if lost {
            self.metrics.record(Event::Lost, self.labels());
            warn!(lock = %self.name, node = %self.node_path, "released a hold that had been lost");
        }
        self.metrics.record(Event::Released, self.labels());
        self.metrics
            .time(Timing::Hold, self.labels(), self.granted_at.elapsed());
        debug!(lock = %self.name, held_ms = self.granted_at.elapsed().as_millis() as u64, "lock released");
        let hand_off = self.can_hand_off();
        let cache = self.cache.filter(|_| !hand_off && self.can_cache());
        let outcome = match (lost, hand_off, cache) {
            (true, _, _) => "lost",
            (false, true, _) => "handed_off",
            (false, false, Some(_)) => "cached",
            (false, false, None) => "released",
        };
        self.span.record("outcome", outcome);
        let node_path = std::mem::take(&mut self.node_path);
        if hand_off && self.turn.is_some() {
            let (taken, outcome) = if confirm {
                let (tx, rx) = tokio::sync::oneshot::channel();
                (Some(tx), Some(rx))
            } else {
                (None, None)
            };
            // The node's watch goes on with it: a chain of holds is watched as one.
            let warm = self.warm(node_path, taken);
            if let Some(turn) = self.turn.as_mut() {
                turn.hand_over(warm);
            }
            // A dropped sender means the node went with its session.
            return outcome.map(|rx| -> Pending { Box::pin(async move { rx.await.unwrap_or(Ok(())) }) });
        }
        if let (Some(linger), Some(turn)) = (cache, self.turn.take()) {
            // Kept idle for this process: the front of its queue keeps the node (and its
            // watch) until a local acquirer takes it or it is given up.
            let warm = self.warm(node_path, None);
            cache::keep(turn, warm, linger, &self.cleanup);
            return None;
        }
        // Before the delete is sent: the deletion it causes is ours, not a loss.
        self.own_node.release();
        Some(Box::pin(delete_node(&self.session, node_path)))
    }
}

impl Holding {
    /// The node of this ending hold, with its watch, for the next local holder.
    fn warm(&mut self, node_path: String, taken: Option<tokio::sync::oneshot::Sender<Result<(), LockError>>>) -> Warm {
        Warm::new(
            self.session.clone(),
            node_path,
            self.own_node.hand_over(),
            self.token,
            self.losses_at_grant,
            self.cleanup.clone(),
            taken,
        )
    }

    /// Ends the hold `rest` from now instead (its minimum hold), or once its session ends,
    /// whichever comes first: the node, its queue turn, its watch and its gauge go on to a
    /// hold of their own that the returned future ends; this one is left ended.
    fn put_off(&mut self, rest: Duration, confirm: bool) -> Pending {
        let mut kept = Holding {
            client: self.client,
            session: self.session.clone(),
            name: self.name.clone(),
            dir: self.dir.clone(),
            kind: self.kind,
            node_path: std::mem::take(&mut self.node_path),
            token: self.token,
            losses_at_grant: self.losses_at_grant,
            granted_at: self.granted_at,
            turn: self.turn.take(),
            max_handoffs: self.max_handoffs,
            cleanup: self.cleanup.clone(),
            metrics: self.metrics.clone(),
            template: self.template.clone(),
            reentries: CounterCache::default(),
            own_node: std::mem::replace(&mut self.own_node, OwnNode::detached()),
            held: self.held.take(),
            min_hold: None,
            cache: self.cache,
            span: std::mem::replace(&mut self.span, tracing::Span::none()),
        };
        debug!(lock = %kept.name, rest_ms = rest.as_millis() as u64, "released before its min_hold; kept until then");
        Box::pin(async move {
            let mut health = kept.session.subscribe();
            tokio::select! {
                () = tokio::time::sleep(rest) => {}
                _ = health.wait_for(|h| h.status.is_terminal()) => {}
            }
            match kept.end(confirm) {
                Some(pending) => pending.await,
                None => Ok(()),
            }
        })
    }
}

/// What is left of a release to wait for.
type Pending = std::pin::Pin<Box<dyn Future<Output = Result<(), LockError>> + Send>>;

impl Drop for Holding {
    fn drop(&mut self) {
        if let Some(deletion) = self.end(false) {
            self.cleanup.spawn(&self.session, async move {
                let _ = deletion.await;
            });
        }
    }
}

/// Proof of holding a lock. Owned (`Send + 'static`): keep it across `.await`s, move it into
/// another task, store it in a struct.
///
/// Dropping the guard releases the lock without blocking: the delete request is sent at once
/// and retried in the background through connection losses (see
/// [`LockClient::flush`](crate::LockClient::flush) to wait for it). Use
/// [`release`](Self::release) to release and learn the outcome.
///
/// A reentrant acquisition (inside [`scope`](Self::scope) or a `#[distributed_lock]` body)
/// returns another guard for the same hold; the hold ends when the last of them goes.
///
/// ```no_run
/// # async fn demo(client: zklock_runtime::LockClient) -> Result<(), zklock_runtime::LockError> {
/// let guard = client.mutex("ledger")?.acquire().await?;
/// let token = guard.fencing_token();
/// tokio::select! {
///     err = guard.lost() => return Err(err),
///     _ = write_with_token(token) => {}
/// }
/// guard.release().await?;
/// # Ok(()) }
/// # async fn write_with_token(_: zklock_runtime::FencingToken) {}
/// ```
#[must_use = "the lock is released as soon as the guard is dropped"]
pub struct LockGuard {
    pub(crate) hold: Arc<Holding>,
    /// When this guard was handed out (for a reentrant guard: when it re-entered), which
    /// `max_hold` counts from.
    pub(crate) acquired_at: Stamp,
}

impl fmt::Debug for LockGuard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LockGuard")
            .field("name", &self.hold.name)
            .field("node", &self.hold.node_path)
            .field("token", &self.hold.token)
            .field("hold_count", &self.hold_count())
            .finish()
    }
}

impl LockGuard {
    /// The guard of a new grant: `max_hold` counts from now, as the precise clock reads it.
    pub(crate) fn new(hold: Arc<Holding>) -> LockGuard {
        LockGuard {
            hold,
            acquired_at: Stamp::now(),
        }
    }

    /// Another guard of a hold the caller re-enters, answered in place: `max_hold` counts from
    /// now as the coarse clock reads it (a few milliseconds early at most), which costs a
    /// quarter of a precise reading on this path of a few tens of nanoseconds.
    #[inline]
    pub(crate) fn reentered(hold: Arc<Holding>) -> LockGuard {
        LockGuard {
            hold,
            acquired_at: Stamp::coarse(),
        }
    }

    /// The lock name this guard holds.
    pub fn name(&self) -> &str {
        &self.hold.name
    }

    /// The full path of this hold's contender node.
    pub fn node_path(&self) -> &str {
        &self.hold.node_path
    }

    /// The fencing token of this grant; pass it to the resource the lock protects.
    pub fn fencing_token(&self) -> FencingToken {
        self.hold.token
    }

    /// How many guards share this hold (reentrant depth).
    pub fn hold_count(&self) -> usize {
        Arc::strong_count(&self.hold)
    }

    /// This guard's hold, when no other guard shares it.
    pub(crate) fn sole_hold(&mut self) -> Option<&mut Holding> {
        Arc::get_mut(&mut self.hold)
    }

    /// The handle of the session this lock is held in, for writes fenced by its node.
    pub(crate) fn zk(&self) -> Result<Arc<zookeeper_client::Client>, zookeeper_client::Error> {
        self.hold.session.zk()
    }

    /// The ensemble's clock now, estimated from the session this lock is held in
    /// ([`Session::server_now_ms`]).
    // Only singleton jobs ask (feature `scheduler`).
    #[cfg_attr(not(feature = "scheduler"), allow(dead_code))]
    pub(crate) fn server_now_ms(&self) -> Option<i64> {
        self.hold.session.server_now_ms()
    }

    /// Whether the hold can no longer be trusted (see [`lost`](Self::lost)).
    pub fn is_lost(&self) -> bool {
        self.hold.is_lost()
    }

    /// A signal that can be awaited apart from the guard.
    pub fn loss_signal(&self) -> LossSignal {
        self.hold.loss_signal()
    }

    /// Resolves with [`LockError::Lost`] once the lock can no longer be trusted: the session
    /// expired, or the connection has been down for the client's `loss_after`, well before
    /// the server could expire the session and grant the lock elsewhere; or the hold's node was
    /// deleted by someone else (an operator clearing the lock), which the hold learns from a
    /// watch on its node as long as its session stays connected. Pending otherwise.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: it only watches; dropping it changes nothing.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn demo(client: zklock_runtime::LockClient) -> Result<(), zklock_runtime::LockError> {
    /// let guard = client.mutex("ledger")?.acquire().await?;
    /// tokio::select! {
    ///     err = guard.lost() => return Err(err), // stop writing
    ///     _ = tokio::time::sleep(std::time::Duration::from_secs(1)) => {}
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn lost(&self) -> LockError {
        self.loss_signal().lost().await
    }

    /// Runs `fut` inside this hold's [scope](Self::scope) and stops it if the hold is lost:
    /// `fut` is dropped at its next `.await` and the result is [`LockError::Lost`]. The guard
    /// stays with the caller; drop or [`release`](Self::release) it afterwards.
    ///
    /// A `fut` that finishes in the same poll as the loss is reported as lost, so an unsafe
    /// result is never taken for a safe one.
    ///
    /// # Cancel safety
    ///
    /// Dropping the returned future drops `fut`; the hold itself is unaffected.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn demo(client: zklock_runtime::LockClient) -> Result<(), zklock_runtime::LockError> {
    /// let guard = client.mutex("ledger")?.acquire().await?;
    /// let token = guard.fencing_token();
    /// let written = guard.run(async move { write_with(token).await }).await?;
    /// guard.release().await?;
    /// # let _ = written; Ok(()) }
    /// # async fn write_with(_: zklock_runtime::FencingToken) -> u32 { 1 }
    /// ```
    pub async fn run<F: Future>(&self, fut: F) -> Result<F::Output, LockError> {
        self.run_with(Supervision::default(), fut).await
    }

    /// Like [`run`](Self::run), and also stops `fut` once this guard has been held for
    /// `max_hold` (counted from its acquisition; for a reentrant guard, from its re-entry as
    /// the system's coarse clock reads it, a few milliseconds early at most, never late):
    /// the result is then [`LockError::MaxHoldExceeded`]. This bounds hung work, as lock4j's
    /// `expire`, ShedLock's `lockAtMostFor` or Redisson's `leaseTime` do. It is not what frees
    /// the lock of a crashed holder: that is the end of its ZooKeeper session, whatever the
    /// bound.
    ///
    /// Work that never reaches an `.await` (a blocking loop) cannot be stopped by this or by
    /// any other future-based bound.
    ///
    /// # Cancel safety
    ///
    /// Dropping the returned future drops `fut`; the hold itself is unaffected.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn demo(client: zklock_runtime::LockClient) -> Result<(), zklock_runtime::LockError> {
    /// use std::time::Duration;
    /// use zklock_runtime::LockError;
    ///
    /// let guard = client.mutex("nightly-export")?.acquire().await?;
    /// match guard.run_for(Duration::from_secs(30), export()).await {
    ///     Ok(rows) => println!("exported {rows} rows"),
    ///     Err(LockError::MaxHoldExceeded { .. }) => println!("export hung; stopped it"),
    ///     Err(err) => return Err(err),
    /// }
    /// drop(guard); // releases the lock
    /// # Ok(()) }
    /// # async fn export() -> u64 { 0 }
    /// ```
    pub async fn run_for<F: Future>(&self, max_hold: Duration, fut: F) -> Result<F::Output, LockError> {
        self.run_with(Supervision::default().max_hold(max_hold), fut).await
    }

    /// Runs `fut` inside this hold's [scope](Self::scope), stopped as `supervision` says: on a
    /// loss ([`OnLost::Abort`], the default: [`LockError::Lost`]), on a revocation request
    /// ([`OnRevoke::Abort`]: [`LockError::Revoked`]), or once the guard has been held for its
    /// `max_hold` ([`LockError::MaxHoldExceeded`]). The guard-side twin of a
    /// `#[distributed_lock]` function's `on_lost`, `on_revoke` and `max_hold`; [`run`](Self::run)
    /// and [`run_for`](Self::run_for) are its two common cases.
    ///
    /// A `fut` that finishes in the same poll as a loss is reported as lost.
    ///
    /// # Cancel safety
    ///
    /// Dropping the returned future drops `fut`; the hold itself is unaffected.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn demo(client: zklock_runtime::LockClient) -> Result<(), zklock_runtime::LockError> {
    /// use zklock_runtime::{LockError, OnRevoke, Supervision};
    ///
    /// let guard = client.mutex("reindex")?.acquire().await?;
    /// match guard.run_with(Supervision::default().on_revoke(OnRevoke::Abort), reindex()).await {
    ///     Ok(()) => println!("done"),
    ///     Err(LockError::Revoked { .. }) => println!("another process asked for the lock; stopped"),
    ///     Err(err) => return Err(err),
    /// }
    /// # Ok(()) }
    /// # async fn reindex() {}
    /// ```
    pub async fn run_with<F: Future>(&self, supervision: Supervision, fut: F) -> Result<F::Output, LockError> {
        let bound = supervision
            .max_hold
            .map(|bound| self.hold.max_hold(self.acquired_at, bound));
        let lost = (supervision.on_lost == OnLost::Abort).then(|| self.lost());
        let revoked = (supervision.on_revoke == OnRevoke::Abort).then_some(async {
            self.revoked().await;
            self.hold.revoked_error()
        });
        supervise(self.scope(fut), lost, revoked, bound).await
    }

    /// Whether another process asked this holder to release the lock (see
    /// [`revoked`](Self::revoked)).
    pub fn is_revoked(&self) -> bool {
        self.hold.is_revoked()
    }

    /// Resolves once another process asks this holder to release the lock: it wrote
    /// `__REVOKE__` into the hold's node, as [`LockClient::revoke`](crate::LockClient::revoke),
    /// `zklock revoke` and Curator's `Revoker.attemptRevoke` do. Pending otherwise, and for
    /// good once the hold has ended.
    ///
    /// Revocation is a request, not enforcement: the lock stays held until this holder
    /// releases it; what to do (finish quickly, stop, ignore it) is the holder's choice, as
    /// with Curator's `RevocationListener`. [`run`](Self::run) does not stop on it; the
    /// attribute does with `on_revoke = "abort"`. A revoked hold is not handed to another task
    /// of this process on release: its node is deleted, so the revoker's turn comes.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: it only watches, and a revocation is sticky, so a later call still sees one
    /// that happened meanwhile.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn demo(client: zklock_runtime::LockClient) -> Result<(), zklock_runtime::LockError> {
    /// let guard = client.mutex("ledger")?.acquire().await?;
    /// tokio::select! {
    ///     () = guard.revoked() => println!("asked to let go; releasing early"),
    ///     _ = tokio::time::sleep(std::time::Duration::from_secs(60)) => {}
    /// }
    /// guard.release().await?;
    /// # Ok(()) }
    /// ```
    pub async fn revoked(&self) {
        self.hold.revoked().await
    }

    /// Asks the server whether the hold is still in place: the contender node exists and
    /// belongs to the live session. One round trip; useful right before an important write.
    ///
    /// Errors: [`LockError::Lost`] when the hold was already reported lost (also when the
    /// hold's watch on its node has told of its deletion), [`LockError::NotHeld`] when the node
    /// is gone or owned by another session (an operator deleted it, or the session ended), a connection error when the server cannot be asked.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: it only reads.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn demo(client: zklock_runtime::LockClient) -> Result<(), zklock_runtime::LockError> {
    /// let guard = client.mutex("ledger")?.acquire().await?;
    /// guard.ensure_held().await?;
    /// # Ok(()) }
    /// ```
    pub async fn ensure_held(&self) -> Result<(), LockError> {
        if self.is_lost() {
            return Err(self.lost().await);
        }
        // `sync` first, pipelined in the same round trip, so a server that lags the one the
        // node was created or deleted on cannot answer from the past.
        let checked = match self.hold.session.zk() {
            Ok(zk) => tokio::join!(zk.sync(&self.hold.node_path), zk.check_stat(&self.hold.node_path)).1,
            Err(closed) => Err(closed),
        };
        match checked {
            Ok(Some(stat)) if stat.ephemeral_owner == self.hold.session.id => Ok(()),
            Ok(_) => Err(LockError::NotHeld {
                name: self.hold.name.to_string(),
            }),
            Err(err) => Err(LockError::zk("exists", err)),
        }
    }

    /// Releases the hold and waits for the outcome. When other guards share the hold (a
    /// reentrant acquisition), only this guard's share ends and the result is `Ok`. Otherwise
    /// the node is handed to the next task of this process that waits for the lock, and this
    /// waits until that task has taken it (or, if it gave up meanwhile, until the node is
    /// deleted); or the node is deleted and this waits until it is gone or its session has
    /// ended. `Ok` means: no holder of this grant is left.
    ///
    /// Errors: [`LockError::Lost`] when the hold had been reported lost before the release (the
    /// node is still deleted if the session lives); a ZooKeeper error when the server refused
    /// the delete.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: if this future is dropped midway, the deletion goes on in the background
    /// ([`LockClient::flush`](crate::LockClient::flush) waits for it).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn demo(client: zklock_runtime::LockClient) -> Result<(), zklock_runtime::LockError> {
    /// let guard = client.mutex("ledger")?.acquire().await?;
    /// // ... fenced writes ...
    /// guard.release().await?; // Err(Lost) if the hold could not be trusted any more
    /// # Ok(()) }
    /// ```
    pub async fn release(self) -> Result<(), LockError> {
        self.start_release().await
    }

    /// Ends the hold now (hands the node on, or sends its delete) and returns what is left:
    /// waiting for the taker or for the delete's answer, retried through connection losses.
    /// The returned future does that work itself; dropped before it is done, the rest goes on
    /// in the background. [`release`](Self::release) awaits it at once; a multi-lock starts all
    /// its releases before awaiting them together.
    #[inline]
    pub(crate) fn start_release(self) -> Release {
        // One atomic step for a share of a reentrant hold: `into_inner` answers the last
        // owner only, however many shares end at once. Ending a share sends nothing, and
        // returns a future of one empty word.
        let Some(mut hold) = Arc::into_inner(self.hold) else {
            return Release(None);
        };
        let lost = hold.is_lost().then(|| hold.lost_error());
        let pending = hold.end(true);
        let (cleanup, session) = (hold.cleanup.clone(), hold.session.clone());
        // Leave this process's queue for the lock before waiting: the next local holder can
        // only take a handed-over node once this hold is gone.
        drop(hold);
        // Awaited by the caller; dropped midway, the deletion still finishes in the background.
        let outcome = pending.map(|pending| cleanup.finish(&session, pending));
        // Nothing to wait for (a node the cache keeps, a hold already ended) and nothing to
        // report: no allocation on the cached re-acquire path either.
        if lost.is_none() && outcome.is_none() {
            return Release(None);
        }
        Release(Some(Box::pin(async move {
            let deleted = match outcome {
                Some(outcome) => outcome.await,
                None => Ok(()),
            };
            match lost {
                Some(err) => Err(err),
                None => deleted,
            }
        })))
    }
}

/// What is left of a release once [`LockGuard::start_release`] has ended the hold's share:
/// nothing for a share of a reentrant hold, else the wait for the node's handover or deletion
/// and the loss found on release.
#[must_use = "a release's outcome is known only once it is awaited"]
pub(crate) struct Release(Option<BoxFuture<'static, Result<(), LockError>>>);

impl Future for Release {
    type Output = Result<(), LockError>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        match &mut self.0 {
            Some(rest) => rest.as_mut().poll(cx),
            None => Poll::Ready(Ok(())),
        }
    }
}
