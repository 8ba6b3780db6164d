//! Lock caching (opt-in, [`Lock::with_cache`](crate::Lock::with_cache)): when the last hold of
//! this process ends and nobody else is known to want the lock, its node is kept for up to a
//! linger time instead of deleted, so that the next acquisition in this process is granted
//! without a request to ZooKeeper (as GFS2's glocks and Lustre's LDLM keep a lock on the node
//! that used it last until another node asks).
//!
//! The idle node is kept by the front of this process's queue for the lock
//! ([`Turn`]), which the linger holds in place of a hold; local acquirers queue behind it as
//! behind a holder. The linger hands the node to the first of them, as a release hands it to
//! the next local waiter ([`Warm`], the next generation of the token), but only while
//! - the directory's watch ([`crate::engine::around`]) vouches that the node still exists and
//!   no other contender is in the directory;
//! - the node's own watch knows of no deletion or revocation, and the session is vouched for
//!   and was never reported lost since the grant ([`Warm::claim`] checks these again).
//!
//! It gives the node up (deletes it, marked as a clean release) when another contender
//! appears in the directory (of any process, zklock's or Curator's), when the node is deleted
//! or a revocation is asked for, when the linger time runs out, when the session is lost or
//! closed, or when [`LockClient::flush`](crate::LockClient::flush) asks for it. A remote
//! contender therefore waits for one watch notification and one delete, plus at most the hold
//! that a local acquirer took before the notification arrived.
//!
//! For operators (`zklock show`), a node idle for [`MARK_IDLE_AFTER`] is marked so in its data
//! ([`node_data::mark_idle`]), on the version the linger read, so that a revocation written
//! meanwhile is never overwritten. Before such a node is handed to a taker, its data is written
//! back on the version the mark made; if that fails (a revocation, a lost session), the node is
//! given up instead. Quick re-acquisitions write nothing; a taker after a marked idle time
//! pays one round trip.

use std::time::Duration;

use tracing::debug;
use zookeeper_client as zk;

use crate::engine::around::Around;
use crate::engine::cleanup::Cleanup;
use crate::engine::local_queue::{Turn, Warm};
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

/// Keeps `warm`, the node of a hold that just ended, for up to `linger` for the next local
/// acquirer queued behind `turn`; gives it up otherwise. Runs in the background, counted by
/// `cleanup` (a flush gives it up and waits for the delete).
pub(crate) fn keep(turn: Turn, warm: Warm, linger: Duration, cleanup: &Cleanup) {
    let session = warm.session.clone();
    turn.set_cached(true);
    cleanup.spawn(&session, linger_then_hand_over(turn, warm, linger, cleanup.clone()));
}

async fn linger_then_hand_over(mut turn: Turn, mut warm: Warm, linger: Duration, cleanup: Cleanup) {
    let handed_over = wait_for_a_taker(&turn, &mut warm, linger, &cleanup).await;
    turn.set_cached(false);
    if handed_over {
        // The taker finds it in the slot when this turn drops; if it gave up meanwhile, the
        // turn's drop deletes the node.
        warm.from_cache = true;
        turn.hand_over(warm);
    } else {
        drop(warm); // deletes the node (marked, for a lock with a lock-delay)
    }
    drop(turn);
}

/// Whether a local acquirer came while the node could still be trusted (`true`), or the node
/// must be given up.
async fn wait_for_a_taker(turn: &Turn, warm: &mut Warm, linger: Duration, cleanup: &Cleanup) -> bool {
    let (Some(mut around), Some(mut node)) = (warm.watch_around(), warm.node_state()) else {
        return false;
    };
    let session = warm.session.clone();
    let losses_at_grant = warm.losses_at_grant;
    let mut health = session.subscribe();
    let mut evictions = cleanup.evictions();
    let idle_since_ms = node_data::now_ms();
    // One timer per linger: first the moment to mark the node idle (unless the linger ends
    // before it), then the linger's end.
    let started = tokio::time::Instant::now();
    let expires_at = started + linger;
    let timer = tokio::time::sleep_until((started + MARK_IDLE_AFTER).min(expires_at));
    tokio::pin!(timer);
    let mut mark = None;
    loop {
        if *evictions.borrow_and_update() > 0 {
            return false; // a flush is under way
        }
        let known = *node.borrow_and_update();
        if known.deleted || known.revoked || known.released {
            return false;
        }
        let h = *health.borrow_and_update();
        if h.status.is_terminal() || h.invalidates(losses_at_grant) {
            return false;
        }
        // Copied out, so the watch's read lock is not held while the gate's lock is taken.
        let state = *around.borrow_and_update();
        match state {
            Around::Crowded => return false,
            Around::Alone if turn.has_waiters() => match mark.take() {
                None => return true,
                // Checked again once the data is back: the taker may have left meanwhile.
                Some(idle) => {
                    if unmark(warm, idle).await {
                        continue;
                    }
                    return false;
                }
            },
            Around::Alone | Around::Unknown => {}
        }
        tokio::select! {
            () = &mut timer => {
                if timer.deadline() >= expires_at {
                    return false;
                }
                mark = mark_idle(warm, idle_since_ms).await;
                timer.as_mut().reset(expires_at);
            }
            changed = evictions.changed() => if changed.is_err() { return false },
            changed = around.changed() => if changed.is_err() { return false },
            changed = node.changed() => if changed.is_err() { return false },
            changed = health.changed() => if changed.is_err() { return false },
            () = turn.arrival() => {}
        }
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
