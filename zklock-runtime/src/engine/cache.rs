//! Lock caching (opt-in, [`Lock::with_cache`](crate::Lock::with_cache)): when the last hold of
//! this process ends and nobody else is known to want the lock, its node is kept for up to a
//! linger time instead of deleted, so that the next acquisition in this process is granted
//! without a request to ZooKeeper (as GFS2's glocks and Lustre's LDLM keep a lock on the node
//! that used it last until another node asks).
//!
//! The idle node is *parked* at the front of this process's queue for the lock (with the
//! front's slot: [`Gate::park`]). The next local acquirer takes it at once, in its own task
//! and without a message to anyone ([`Gate::take_idle`]), and it becomes the next generation of
//! the token as a handover does ([`Warm`]); that takes
//! - the directory's watch ([`crate::engine::around`]) vouching that the node still exists and
//!   no other contender is in the directory;
//! - the node's own watch knowing of no deletion or revocation, and the session vouched for
//!   and never reported lost since the grant ([`Warm::claim`] checks these).
//!
//! One keeper task per kept node watches it from the first release that keeps it until it is
//! given up, across every grant from the cache in between: it gives the node up (deletes it,
//! marked as a clean release) when another contender appears in the directory (of any
//! process, zklock's or Curator's), when the node is deleted or a revocation is asked for,
//! when the linger time since the last release runs out, when the session is lost or closed,
//! or when [`LockClient::flush`](crate::LockClient::flush) asks for it. A node given up while a
//! task holds it is deleted by that task's release. A remote contender therefore waits for one
//! watch notification and one delete, plus at most the hold that a local acquirer took before
//! the notification arrived. The keeper also serves an acquirer that queued instead of taking
//! the node at once (it came while the node was not parked, or not ready): it hands the node
//! over as a release does.
//!
//! For operators (`zklock show`), a node idle for [`MARK_IDLE_AFTER`] is marked so in its data
//! ([`node_data::mark_idle`]), on the version the keeper read, so that a revocation written
//! meanwhile is never overwritten. Before such a node is handed to a taker, its data is written
//! back on the version the mark made; if that fails (a revocation, a lost session), the node is
//! given up instead. Quick re-acquisitions write nothing; a taker after a marked idle time
//! pays one round trip.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;
use tokio::time::Instant;
use tracing::debug;
use zookeeper_client as zk;

use crate::engine::around::Around;
use crate::engine::cleanup::Cleanup;
use crate::engine::local_queue::{Gate, Turn, Warm};
use crate::engine::own_node::NodeState;
use crate::node_data;

/// The longest linger accepted: an hour, as for the lock-delay and `min_hold`.
pub(crate) const MAX_LINGER: Duration = Duration::from_secs(3600);

/// How long a kept node stays idle before its data says so.
pub(crate) const MARK_IDLE_AFTER: Duration = Duration::from_secs(1);

/// The idle mark on a kept node: the data to write back, and the version the mark made.
struct IdleMark {
    original: Vec<u8>,
    version: i32,
}

/// Keeps `warm`, the node of a hold that just ended at the front `turn`, for up to `linger` for
/// the next local acquirer: parks it with its keeper, or starts one. The keeper runs in the
/// background, counted by `cleanup` (a flush gives the node up and waits for the delete).
pub(crate) fn keep(turn: Turn, warm: Warm, linger: Duration, cleanup: &Cleanup) {
    let gate = turn.gate().clone();
    let Some(node) = warm.node_path().map(str::to_owned) else {
        return;
    };
    let (turn, mut warm) = match gate.park(turn, warm, &node) {
        Ok(()) => return,
        Err(not_kept) => not_kept,
    };
    let (Some(around), Some(state)) = (warm.watch_around(), warm.node_state()) else {
        drop(warm); // deletes the node
        return;
    };
    let watches = Watches {
        around: around.clone(),
        node: state,
        health: warm.session.subscribe(),
        evictions: cleanup.evictions(),
        arrivals: gate.arrivals(),
    };
    let session = warm.session.clone();
    let losses_at_grant = warm.losses_at_grant;
    let id = gate.start_keeping(turn, warm, node, around);
    let keeper = Keeper {
        gate,
        id,
        linger,
        losses_at_grant,
    };
    cleanup.spawn(&session, keeper.run(watches));
}

/// What a keeper follows.
struct Watches {
    around: watch::Receiver<Around>,
    node: watch::Receiver<NodeState>,
    health: watch::Receiver<crate::connection::session::Health>,
    evictions: watch::Receiver<u64>,
    /// Local acquirers that queued for the node.
    arrivals: watch::Receiver<u64>,
}

/// The task that keeps one node for its process, from the release that first kept it until it
/// is given up.
struct Keeper {
    gate: Arc<Gate>,
    id: u64,
    linger: Duration,
    losses_at_grant: u64,
}

/// What the keeper does next, judged on what its watches and the gate say.
enum Next {
    GiveUp,
    HandOver,
    Mark,
    Sleep,
}

impl Keeper {
    async fn run(self, mut w: Watches) {
        let timer = tokio::time::sleep(Duration::ZERO);
        tokio::pin!(timer);
        let mut mark: Option<IdleMark> = None;
        loop {
            let (next, wake_at) = self.decide(&mut w);
            match next {
                Next::GiveUp => return self.give_up(),
                Next::HandOver => {
                    let Some(mut parked) = self.gate.unpark(self.id) else {
                        continue;
                    };
                    if let Some(idle) = mark.take() {
                        // Checked again once the data is back: the taker may have left.
                        let unmarked = unmark(&parked.warm, idle).await;
                        parked.marked = false;
                        self.gate.repark(parked);
                        if !unmarked {
                            return self.give_up();
                        }
                        continue;
                    }
                    parked.warm.from_cache = true;
                    self.gate.hand_over_parked(parked);
                    continue;
                }
                Next::Mark => {
                    let Some(mut parked) = self.gate.unpark(self.id) else {
                        continue;
                    };
                    let since_ms = node_data::now_ms().saturating_sub(parked.since.elapsed().as_millis() as u64);
                    mark = mark_idle(&parked.warm, since_ms).await;
                    // Marked or not, it is not marked again before its next release.
                    parked.marked = true;
                    self.gate.repark(parked);
                    continue;
                }
                Next::Sleep => timer.as_mut().reset(wake_at),
            }
            tokio::select! {
                () = &mut timer => {}
                changed = w.evictions.changed() => if changed.is_err() { return self.give_up() },
                changed = w.around.changed() => if changed.is_err() { return self.give_up() },
                changed = w.node.changed() => if changed.is_err() { return self.give_up() },
                changed = w.health.changed() => if changed.is_err() { return self.give_up() },
                changed = w.arrivals.changed() => if changed.is_err() { return self.give_up() },
            }
        }
    }

    /// What to do now, and when to look again if nothing happens meanwhile.
    fn decide(&self, w: &mut Watches) -> (Next, Instant) {
        let now = Instant::now();
        if *w.evictions.borrow_and_update() > 0 {
            return (Next::GiveUp, now); // a flush is under way
        }
        let known = *w.node.borrow_and_update();
        if known.deleted || known.revoked || known.released {
            return (Next::GiveUp, now);
        }
        let h = *w.health.borrow_and_update();
        if h.status.is_terminal() || h.invalidates(self.losses_at_grant) {
            return (Next::GiveUp, now);
        }
        w.arrivals.borrow_and_update();
        // Copied out, so the watch's read lock is not held while the gate's lock is taken.
        let around = *w.around.borrow_and_update();
        if around == Around::Crowded {
            return (Next::GiveUp, now);
        }
        // A task holds the node: its release parks it again. Looking again this often, the
        // keeper always looks once between that release and the moment the mark or the
        // linger's end is due.
        let Some((since, marked)) = self.gate.parked(self.id) else {
            return (Next::Sleep, now + self.linger.min(MARK_IDLE_AFTER));
        };
        let since = Instant::from_std(since);
        let expires_at = since + self.linger;
        if now >= expires_at {
            return (Next::GiveUp, now);
        }
        if around == Around::Alone && self.gate.has_waiters() {
            return (Next::HandOver, now);
        }
        let mark_at = since + MARK_IDLE_AFTER;
        if marked || mark_at >= expires_at {
            (Next::Sleep, expires_at)
        } else if now >= mark_at {
            (Next::Mark, now)
        } else {
            (Next::Sleep, mark_at)
        }
    }

    /// Ends the keeping: deletes the node if it is parked (marked as a clean release, for a
    /// lock with a lock-delay), else leaves it to the task that holds it, whose release deletes
    /// it or keeps it anew.
    fn give_up(&self) {
        if let Some((turn, warm)) = self.gate.stop_keeping(self.id) {
            drop(warm);
            drop(turn);
        }
        debug!(keeper = self.id, "kept node given up");
    }
}

/// Marks the kept node idle since `since_ms` in its data, on the version read just before;
/// `None` if that failed (the node changed or went meanwhile, which its watch reports).
async fn mark_idle(warm: &Warm, since_ms: u64) -> Option<IdleMark> {
    let path = warm.node_path()?;
    let zk = warm.session.zk().ok()?;
    let written = async {
        let (original, stat) = zk.get_data(path).await?;
        let Some(marked) = node_data::mark_idle(&original, since_ms) else {
            return Ok(None);
        };
        let stat = zk.set_data(path, &marked, Some(stat.version)).await?;
        Ok::<_, zk::Error>(Some(IdleMark {
            original,
            version: stat.version,
        }))
    };
    written
        .await
        .inspect_err(|err| debug!(node = %path, %err, "cannot mark the kept node idle"))
        .ok()
        .flatten()
}

/// Writes the kept node's data back as it was before `idle` marked it; whether it worked (a
/// revocation written over the mark makes it fail, and the node is given up).
async fn unmark(warm: &Warm, idle: IdleMark) -> bool {
    let (Some(path), Ok(zk)) = (warm.node_path(), warm.session.zk()) else {
        return false;
    };
    zk.set_data(path, &idle.original, Some(idle.version))
        .await
        .inspect_err(|err| debug!(node = %path, %err, "the kept node's data changed while idle; giving it up"))
        .is_ok()
}
