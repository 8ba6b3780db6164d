//! The in-process queue in front of the ZooKeeper queue, for exclusive locks.
//!
//! Tasks of one process that want the same exclusive lock line up here, in FIFO order, and only
//! the task at the front contends in ZooKeeper. When it releases while others are waiting here,
//! it hands its contender node to the next one instead of deleting it: that grant costs no round
//! trip, and its fencing token keeps the node's zxid with the next `generation`, so tokens still
//! strictly increase.
//!
//! Fairness across processes: one node is handed over at most `max_local_handoffs` times
//! (builder option, default [`DEFAULT_MAX_LOCAL_HANDOFFS`]), so a remote contender queued
//! behind it waits for at most that many grants plus one before the node is deleted and our
//! waiters queue in ZooKeeper again, behind it. With 0 the node is never handed over: every
//! grant goes through ZooKeeper in strict FIFO order, as with Curator. Within the process,
//! waiters are served in FIFO order.
//!
//! With lock caching, the front of the queue may also be held by no hold at all: a node kept
//! idle ([`crate::engine::cache`]) is *parked* in the gate with the front's slot. The next
//! local acquirer takes it at once, in its own task ([`Gate::take_idle`]); one that finds it
//! not ready (its data marked idle, its directory not known to be ours alone) queues behind it
//! as behind a holder, and the node's keeper, which learns of the arrival
//! ([`Gate::arrival`]), hands it over as a release does.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, Weak};

use crate::engine::model_lock::Lock;

use tokio::sync::{Mutex as AsyncMutex, OwnedMutexGuard};

use tokio::sync::{oneshot, watch};

use crate::connection::session::Session;
use crate::engine::around::Around;
use crate::engine::cleanup::{delete_node, Cleanup};
use crate::engine::lock_delay::Vanished;
use crate::engine::own_node::{NodeState, NodeWatch, OwnNode};
use crate::engine::rules::LockKind;
use crate::engine::token::FencingToken;
use crate::error::LockError;

mod parked;

use parked::Kept;

/// How many times in a row one contender node may be handed to the next task of this process
/// before it goes back to the end of the ZooKeeper queue, unless the builder says otherwise.
pub(crate) const DEFAULT_MAX_LOCAL_HANDOFFS: u32 = 16;

/// A node kept alive for the next local waiter. Dropping it unclaimed deletes the node.
pub(crate) struct Warm {
    pub session: Arc<Session>,
    /// `None` once claimed.
    node_path: Option<String>,
    /// The node's watch, which goes on from hold to hold; `None` once claimed.
    node: Option<NodeWatch>,
    /// The token of the grant that handed the node over.
    pub token: FencingToken,
    pub losses_at_grant: u64,
    cleanup: Cleanup,
    /// Told whether the node was taken (`Ok`) or what deleting it came to, for a release that
    /// waits for its outcome.
    taken: Option<oneshot::Sender<Result<(), LockError>>>,
    /// Whether the node was kept idle in the cache before this handover
    /// ([`crate::engine::cache`]), for the metrics.
    pub from_cache: bool,
}

/// A handed-over node taken by the next local holder.
pub(crate) struct Claimed {
    pub session: Arc<Session>,
    pub node_path: String,
    /// The new hold's view of the node's watch.
    pub own_node: OwnNode,
    /// The previous grant's token with the next generation.
    pub token: FencingToken,
    pub losses_at_grant: u64,
    /// Whether the node came out of the cache ([`Warm::from_cache`]).
    pub from_cache: bool,
}

impl Warm {
    pub fn new(
        session: Arc<Session>,
        node_path: String,
        node: Option<NodeWatch>,
        token: FencingToken,
        losses_at_grant: u64,
        cleanup: Cleanup,
        taken: Option<oneshot::Sender<Result<(), LockError>>>,
    ) -> Warm {
        Warm {
            session,
            node_path: Some(node_path),
            node,
            token,
            losses_at_grant,
            cleanup,
            taken,
            from_cache: false,
        }
    }

    /// The node's path; `None` once claimed.
    pub fn node_path(&self) -> Option<&str> {
        self.node_path.as_deref()
    }

    /// Follows what is known of the node (deleted, revoked); `None` once claimed.
    pub fn node_state(&self) -> Option<watch::Receiver<NodeState>> {
        self.node.as_ref().map(NodeWatch::subscribe)
    }

    /// Follows what the directory around the node holds (the node's [`DirWatch`], started the
    /// first time); `None` once claimed.
    ///
    /// [`DirWatch`]: crate::engine::around::DirWatch
    pub fn watch_around(&mut self) -> Option<watch::Receiver<Around>> {
        let path = self.node_path.as_deref()?;
        Some(self.node.as_mut()?.watch_around(&self.session, path))
    }

    /// Takes the node over for the next grant, if it can still be trusted (the session is
    /// connected, was not reported lost since the node was granted, and this process was not
    /// paused long enough since for it to expire unnoticed: [`Session::vouched_for`]; and the
    /// node's watch knows of no deletion or revocation); otherwise drops it, which deletes it,
    /// and the next grant goes through ZooKeeper.
    pub fn claim(mut self) -> Option<Claimed> {
        if !self.session.vouched_for() || self.session.health().invalidates(self.losses_at_grant) {
            return None;
        }
        let own_node = self.node.take()?.hold()?;
        let claimed = Claimed {
            session: self.session.clone(),
            own_node,
            node_path: self.node_path.take()?,
            token: self.token.next_generation(),
            losses_at_grant: self.losses_at_grant,
            from_cache: self.from_cache,
        };
        if let Some(taken) = self.taken.take() {
            let _ = taken.send(Ok(()));
        }
        Some(claimed)
    }
}

impl Drop for Warm {
    fn drop(&mut self) {
        let Some(path) = self.node_path.take() else { return };
        // Given up before its delete is sent: the deletion is ours.
        drop(self.node.take());
        let taken = self.taken.take();
        if !self.session.is_usable() {
            return; // the node went with its session (a dropped `taken` says so)
        }
        let deletion = delete_node(&self.session, path);
        self.cleanup.spawn(&self.session, async move {
            let outcome = deletion.await;
            if let Some(taken) = taken {
                let _ = taken.send(outcome);
            }
        });
    }
}

/// What the front of the local queue owns: possibly a node handed over by the previous holder
/// (a [`Warm`] node; the model tests hand over tokens of their own).
pub(crate) struct Slot<W = Warm> {
    warm: Option<W>,
}

impl<W> Default for Slot<W> {
    fn default() -> Self {
        Slot { warm: None }
    }
}

/// The local queue for one exclusive lock.
///
/// A handed-over node must never be left in the slot with nobody queued to take it (it would
/// block other processes, and a release waiting for it to be taken would wait for ever). Two
/// parties can find the queue empty: the holder leaving the front, and the last waiter giving
/// up. Both decide under `waiting`'s lock, and the holder leaves the front inside it, so
/// whichever comes second sees the other's move and drops the node.
pub(crate) struct Gate<W = Warm> {
    slot: Arc<AsyncMutex<Slot<W>>>,
    /// How many tasks wait for the front of the queue.
    waiting: Lock<usize>,
    /// What the tasks that contended in ZooKeeper for the lock learned of holders that vanished
    /// ahead of them: the next one to contend waits out the same lock-delay.
    vanished: Vanished,
    /// Counts the tasks that started waiting, for the keeper of a node parked at the front
    /// ([`crate::engine::cache`]). A watch, not a `Notify`: a keeper that has ended but not
    /// yet noticed must not take an arrival meant for its successor.
    arrived: watch::Sender<u64>,
    /// The node kept idle at the front, and who keeps it ([`crate::engine::cache`]).
    kept: Lock<Kept<W>>,
}

impl<W> Default for Gate<W> {
    fn default() -> Self {
        Gate {
            slot: Arc::default(),
            waiting: Lock::default(),
            vanished: Vanished::default(),
            arrived: watch::Sender::new(0),
            kept: Lock::default(),
        }
    }
}

/// The front of a local queue: held for as long as the lock is held in this process.
pub(crate) struct Turn<W = Warm> {
    gate: Arc<Gate<W>>,
    /// `None` only while dropping.
    slot: Option<OwnedMutexGuard<Slot<W>>>,
}

impl<W> Turn<W> {
    /// Takes the node the previous holder handed over, if any.
    pub fn take_warm(&mut self) -> Option<W> {
        self.slot.as_mut()?.warm.take()
    }

    /// Leaves `warm` for the next local holder.
    pub fn hand_over(&mut self, warm: W) {
        if let Some(slot) = self.slot.as_mut() {
            slot.warm = Some(warm);
        }
    }

    /// Whether another task of this process is waiting for the lock.
    pub fn has_waiters(&self) -> bool {
        self.gate.has_waiters()
    }

    /// The gate this turn is the front of.
    pub fn gate(&self) -> &Arc<Gate<W>> {
        &self.gate
    }

    /// What this process's contenders for the lock learned of holders that vanished ahead of
    /// them, shared by every task of the queue.
    pub fn vanished(&self) -> Vanished {
        self.gate.vanished.clone()
    }
}

impl<W> Drop for Turn<W> {
    fn drop(&mut self) {
        let waiting = self.gate.waiting.lock();
        let mut slot = self.slot.take();
        if *waiting == 0 {
            if let Some(slot) = slot.as_mut() {
                slot.warm = None; // nobody left to take it: delete it
            }
        }
        drop(slot); // leave the front while still holding `waiting`
        drop(waiting);
    }
}

impl<W> Gate<W> {
    fn waiting(&self) -> usize {
        *self.waiting.lock()
    }

    /// Whether another task of this process is waiting for the lock.
    pub fn has_waiters(&self) -> bool {
        self.waiting() > 0
    }

    /// Follows the tasks that start waiting: after `borrow_and_update`, check
    /// [`has_waiters`](Self::has_waiters), then wait for `changed`; no arrival is missed
    /// between the check and the wait.
    pub fn arrivals(&self) -> watch::Receiver<u64> {
        self.arrived.subscribe()
    }

    /// A node is kept in the slot while nobody waits for it and nobody is at the front to
    /// decide about it: the state the gate must never be in. Judged under `waiting`'s lock, as
    /// the gate's own decisions are.
    #[cfg(test)]
    pub fn stranded(&self) -> bool {
        let waiting = self.waiting.lock();
        *waiting == 0 && self.slot.try_lock().is_ok_and(|slot| slot.warm.is_some())
    }

    /// Nobody waits and no node is kept in the slot (the model tests' end state).
    #[cfg(test)]
    pub fn is_idle(&self) -> bool {
        self.waiting() == 0 && self.slot.try_lock().is_ok_and(|slot| slot.warm.is_none())
    }

    /// Waits for the front of the queue. Cancel safe: a dropped wait leaves the queue.
    pub async fn enter(self: Arc<Self>) -> Turn<W> {
        /// Leaves the count of waiters; a waiter that gives up last also deletes a node that
        /// was kept for it, unless someone is at the front of the queue (who decides then).
        struct Waiting<'a, W>(&'a Gate<W>);
        impl<W> Drop for Waiting<'_, W> {
            fn drop(&mut self) {
                let mut waiting = self.0.waiting.lock();
                *waiting -= 1;
                if *waiting == 0 {
                    if let Ok(mut slot) = self.0.slot.try_lock() {
                        slot.warm = None;
                    }
                }
            }
        }
        *self.waiting.lock() += 1;
        self.arrived.send_modify(|n| *n = n.wrapping_add(1));
        let waiting = Waiting(&self);
        let slot = self.slot.clone().lock_owned().await;
        *self.waiting.lock() -= 1;
        std::mem::forget(waiting);
        Turn {
            gate: self,
            slot: Some(slot),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct GateKey {
    dir: String,
    kind: LockKind,
}

/// The client's local queues, one per exclusive lock in use. Entries are weak, so per-key locks
/// do not accumulate: dead entries are swept as the map grows.
#[derive(Default)]
pub(crate) struct Gates {
    map: Mutex<GateMap>,
}

#[derive(Default)]
struct GateMap {
    gates: HashMap<GateKey, Weak<Gate>>,
    sweep_at: usize,
}

impl Gates {
    /// Whether this process keeps an idle node of the lock of `kind` in `dir` now (lock
    /// caching); `false` for a lock it never queued for.
    pub fn is_cached(&self, dir: &str, kind: LockKind) -> bool {
        let key = GateKey {
            dir: dir.to_owned(),
            kind,
        };
        let map = self.map.lock().unwrap_or_else(|e| e.into_inner());
        let gate = map.gates.get(&key).and_then(Weak::upgrade);
        drop(map);
        gate.is_some_and(|gate| gate.keeps_idle())
    }

    /// The local queue for `dir`, if locks of `kind` use one (exclusive kinds do).
    pub fn gate(&self, dir: &str, kind: LockKind) -> Option<Arc<Gate>> {
        if !matches!(kind, LockKind::Mutex | LockKind::Write) {
            return None;
        }
        let key = GateKey {
            dir: dir.to_owned(),
            kind,
        };
        let mut map = self.map.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(gate) = map.gates.get(&key).and_then(Weak::upgrade) {
            return Some(gate);
        }
        if map.gates.len() >= map.sweep_at {
            map.gates.retain(|_, gate| gate.strong_count() > 0);
            map.sweep_at = (map.gates.len() * 2).max(64);
        }
        let gate = Arc::new(Gate::default());
        map.gates.insert(key, Arc::downgrade(&gate));
        Some(gate)
    }
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, Instant};

    use futures_util::FutureExt;

    use crate::engine::guard::LockGuard;
    use crate::error::LockError;
    use crate::lock::Lock;
    use crate::test_server::{setup, stall_driver, Setup};

    /// An acquisition of `lock` (held by another task of this process), queued in the process
    /// behind the holder by its first poll before it is spawned.
    fn queue_behind(lock: &Lock) -> tokio::task::JoinHandle<Result<LockGuard, LockError>> {
        let mut waiting = Box::pin({
            let lock = lock.clone();
            async move { lock.acquire().await }
        });
        assert!((&mut waiting).now_or_never().is_none(), "the lock is held");
        tokio::spawn(waiting)
    }

    /// A process that was not running for longer than its session timeout (here its driver
    /// thread, where the connection lives, is blocked: to the session that is a paused process)
    /// still reads its session as connected. The server expired the session meanwhile and
    /// deleted the holder's node; a release must not hand that node to the task queued behind
    /// it. The waiter may get the lock only through ZooKeeper, in a session the server knows.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_paused_process_hands_no_node_over_in_a_session_that_may_have_expired() {
        let Setup {
            server: _server,
            client,
            view,
        } = setup(Duration::from_secs(1)).await;
        let lock = client.mutex("paused").unwrap();
        let holder = lock.acquire().await.unwrap();
        let node = holder.node_path().to_owned();
        let waiter = queue_behind(&lock);

        // Pause the driver until told, and wait for the server to expire the session.
        let session = client.latest().unwrap();
        let paused = stall_driver(&session).await;
        let deadline = Instant::now() + Duration::from_secs(20);
        while view.check_stat(&node).await.unwrap().is_some() {
            assert!(Instant::now() < deadline, "the server never expired the paused session");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        assert!(
            session.health().status.is_connected(),
            "the paused process cannot know yet"
        );

        let handed_off = client.metrics().handed_off;
        let released = tokio::spawn(holder.release());
        paused.thaw();
        let guard = tokio::time::timeout(Duration::from_secs(20), waiter)
            .await
            .expect("the waiter is answered once the process runs again")
            .unwrap()
            .expect("the waiter gets the lock through ZooKeeper, in a new session");
        assert_eq!(
            client.metrics().handed_off,
            handed_off,
            "the node of the expired session was handed over"
        );
        let stat = view.check_stat(guard.node_path()).await.unwrap();
        assert!(
            stat.is_some_and(|s| s.ephemeral_owner != session.id),
            "granted {} in the expired session (the old node was {node})",
            guard.node_path()
        );
        let _ = released.await.unwrap();
        drop(guard);
    }

    /// The holder's client talks only to a follower, which is cut off from the quorum but keeps
    /// its clients for `syncLimit` (10 s here). Once the quorum has expired the session, the
    /// process is paused (its driver blocked) for longer than the pulse's gap and shorter than
    /// the client library's own silence limit, so the pulse is in doubt when it runs again on
    /// a connection that still looks healthy. The follower would answer a read from its own
    /// view; the pulse must not take that for the server vouching for the session, and so no
    /// node may be handed over: the session is never vouched for again, the waiter is not
    /// handed the node the quorum deleted, and it gets the lock in a new session once the
    /// follower is back.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn an_isolated_follower_cannot_vouch_for_a_session_the_quorum_expired() {
        use zklock_testing::ZkEnsemble;

        use crate::client::LockClient;

        let ensemble = ZkEnsemble::builder(3)
            .tick_time(Duration::from_millis(200))
            .sync_limit(50)
            .partitionable()
            .start()
            .expect("the ensemble starts");
        let leader = ensemble.wait_for_quorum(Duration::from_secs(60)).unwrap();
        let follower = (0..ensemble.len()).find(|&i| i != leader).unwrap();
        let quorum: Vec<String> = (0..ensemble.len())
            .filter(|&i| i != follower)
            .map(|i| ensemble.members()[i].connect_string())
            .collect();
        let client = LockClient::builder(ensemble.members()[follower].connect_string())
            .session_timeout(Duration::from_secs(4))
            .connect()
            .await
            .unwrap();
        let view = zookeeper_client::Client::connector()
            .with_session_timeout(Duration::from_secs(4))
            .connect(&quorum.join(","))
            .await
            .unwrap();
        let lock = client.mutex("isolated-pulse").unwrap();
        let holder = lock.acquire().await.unwrap();
        let node = holder.node_path().to_owned();
        let waiter = queue_behind(&lock);
        let session = client.latest().unwrap();
        assert!(quorum_has(&view, &node).await, "the quorum has the holder's node");

        ensemble.isolate(follower).unwrap();
        let deadline = Instant::now() + Duration::from_secs(20);
        while quorum_has(&view, &node).await {
            assert!(Instant::now() < deadline, "the quorum never expired the session");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        assert!(session.vouched_for(), "the follower keeps the client connected");
        // Paused right after an answer: 1.45 s of silence is past the pulse's gap (a third of
        // the 4 s session) and short of the library's limit (2/5 of it).
        session.zk().unwrap().check_stat("/").await.unwrap();
        let paused = stall_driver(&session).await;
        tokio::time::sleep(Duration::from_millis(1450)).await;
        paused.thaw();
        let deadline = Instant::now() + Duration::from_secs(30);
        while session.health().status.is_connected() {
            assert!(
                !session.vouched_for(),
                "the session was vouched for after the quorum expired it (node {node} is gone)"
            );
            assert!(Instant::now() < deadline, "the follower never dropped the client");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        let released = tokio::spawn(holder.release());
        ensemble.heal(follower).unwrap();
        let guard = tokio::time::timeout(Duration::from_secs(30), waiter)
            .await
            .expect("the waiter is answered once the follower is back")
            .unwrap()
            .expect("the waiter gets the lock in a new session");
        assert_ne!(guard.node_path(), node, "the waiter was handed the expired node");
        // A read is answered from the view's server, which may not have applied the grant's
        // create yet: catch it up with the leader first.
        view.sync(guard.node_path()).await.unwrap();
        let owner = view
            .check_stat(guard.node_path())
            .await
            .unwrap()
            .map(|s| s.ephemeral_owner);
        assert!(
            owner.is_some_and(|owner| owner != session.id),
            "granted {} outside a live session (its owner: {owner:?}, the expired session: {})",
            guard.node_path(),
            session.id
        );
        assert_eq!(client.metrics().handed_off, 0, "a node was handed over");
        let _ = released.await.unwrap();
    }

    /// Whether the quorum has `path`, read from `view`'s server once it has caught up with the
    /// leader. Without the sync, a member that has not yet applied the create answers "no such
    /// node", which reads like the node's session having expired.
    async fn quorum_has(view: &zookeeper_client::Client, path: &str) -> bool {
        view.sync(path).await.unwrap();
        view.check_stat(path).await.unwrap().is_some()
    }
}
