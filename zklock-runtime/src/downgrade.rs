//! Downgrading a write lock to a read lock without letting a writer in between.
//!
//! Curator's way (take the read lock while holding the write lock, then release the write
//! lock) admits a writer that queued meanwhile: the read node is created behind it, and once
//! the write node goes, that writer is first in line while the downgraded holder still reads.
//! Here the read node is created with the directory listed in the same round trip, and:
//!
//! - no writer between the write node and the new read node: the write node is deleted. The
//!   read node is held from then on by the read rule (no writer ahead), readers queued behind
//!   the write node are admitted beside it, and writers arriving later queue behind it.
//! - a writer queued in between: the read node is withdrawn and the write node is kept, now
//!   held as a read hold. No reader is admitted early, but no writer gets in either, and the
//!   queued writer keeps its turn after this holder's.
//!
//! The orchestrator's own operation ([`Lock`] and its guard); it calls down into the queue
//! recipe and the hold.

use tracing::{debug, warn};

use crate::engine::guard::LockGuard;
use crate::engine::own_node::OwnNode;
use crate::engine::queue::{Contending, Failed};
use crate::engine::rules::{queue_order, LockKind, WRITE_NODE};
use crate::engine::token::FencingToken;
use crate::error::LockError;
use crate::lock::Lock;

impl Lock {
    /// Turns `guard`, a hold of this write lock, into a hold of its read side, without a
    /// moment in which the lock is free: no writer can take it in between. On success `guard`
    /// is a read guard (kind [`LockKind::Read`]); readers waiting behind it are then admitted,
    /// unless a writer had queued before the downgrade, in which case they wait for this
    /// holder as before (see docs/guide.md, "Downgrading a write lock").
    ///
    /// Interoperates with Curator's `InterProcessReadWriteLock`: its readers and writers see
    /// an ordinary read node (or the write node kept).
    ///
    /// Errors, with `guard` unchanged: [`LockError::InvalidConfig`] when `self` is not a write
    /// lock, `guard` is not a hold of it taken through the same client, or other guards share
    /// the hold (a reentrant acquisition; downgrade the outermost guard once the others are
    /// gone). [`LockError::Lost`] when the hold had been lost, or was lost while the read node
    /// was being made, and [`LockError::SessionExpired`] or a connection error when the read
    /// node could not be made; the write hold stays as it was. Once `guard` has become the
    /// read hold, `downgrade` returns `Ok`: a loss reported after that is the read hold's, told
    /// by the guard as any loss.
    ///
    /// # Cancel safety
    ///
    /// Dropped before it finishes, `guard` is still the write hold and a read node that was
    /// created is removed in the background. Once the write node's delete is sent (the last
    /// step), `guard` is already the read hold, and the delete goes on in the background.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn demo(client: zklock_runtime::LockClient) -> Result<(), zklock_runtime::LockError> {
    /// let config = client.write_lock("config")?;
    /// let mut guard = config.acquire().await?;
    /// // ... write the new configuration ...
    /// config.downgrade(&mut guard).await?;
    /// // ... readers may read it now; no writer has changed it since ...
    /// guard.release().await?;
    /// # Ok(()) }
    /// ```
    pub async fn downgrade(&self, guard: &mut LockGuard) -> Result<(), LockError> {
        self.check_downgrade(guard)?;
        if guard.is_lost() {
            return Err(guard.lost().await);
        }
        let read = self.side(LockKind::Read);
        let recipe = read.recipe();
        let session = guard.hold.session.clone();
        let created = Contending::create(&recipe, &session).await;
        let (contending, granted, children) = created.map_err(|failed| match failed {
            Failed::Error(err) => err,
            Failed::SessionEnded | Failed::TimedOut => LockError::SessionExpired,
        })?;
        let queue = queue_order(children);
        let write_name = guard.node_path().rsplit('/').next().unwrap_or_default();
        let at = |name: &str| queue.iter().position(|c| c.name == name);
        let (Some(write_at), Some(read_at)) = (at(write_name), at(contending.name())) else {
            // Our write node is gone (its session ended, or it was deleted): the hold is lost,
            // and the read node, if it is still there, goes as `contending` drops.
            debug!(lock = %self.name(), "write node missing while downgrading");
            return Err(guard.hold.lost_error());
        };
        let writer_between = queue[write_at + 1..read_at].iter().any(|c| c.name.contains(WRITE_NODE));
        let Some(hold) = guard.sole_hold() else {
            // Referenced from elsewhere (a scope running it): nothing changed; the read node
            // goes as `contending` drops.
            return Err(LockError::invalid_config(format!(
                "cannot downgrade `{}`: the hold is in use elsewhere (a scope running under it)",
                self.name()
            )));
        };
        // The last look before the guard changes: a hold lost while the read node was made
        // (its session reported lost, its node deleted) fails here, with the guard as it was;
        // the read node goes as `contending` drops.
        if hold.is_lost() {
            return Err(hold.lost_error());
        }
        if writer_between {
            // Keep the write node; the read node goes as `contending` drops.
            debug!(lock = %self.name(), "a writer queued meanwhile; keeping the write node as the read hold");
            hold.become_read();
            return Ok(());
        }
        // The write node is deleted, never handed to a local writer while we read.
        hold.leave_local_queue();
        let losses = hold.losses_at_grant;
        contending.disarm();
        let token = FencingToken::new(granted.czxid, 0);
        let own_node = OwnNode::watch(&session, &granted.node_path);
        let write = std::mem::replace(
            guard,
            read.hold(session, granted.node_path, own_node, token, losses, None),
        );
        debug!(lock = %self.name(), node = %guard.node_path(), "downgraded to a read hold");
        // The guard is the read hold from here on, so nothing that follows is an error of the
        // downgrade: a loss reported since the look above is the read hold's too (same session,
        // same count), and a delete the server refuses is logged by the delete; the write node
        // then stays ahead of the read node until the session ends, holding back writers only.
        if let Err(err) = write.start_release().await {
            if !matches!(err, LockError::Lost { .. }) {
                warn!(lock = %self.name(), %err, "downgraded, but the write node could not be deleted");
            }
        }
        Ok(())
    }

    /// The misuses [`downgrade`](Self::downgrade) refuses before touching anything.
    fn check_downgrade(&self, guard: &LockGuard) -> Result<(), LockError> {
        let refuse = |why: &str| {
            Err(LockError::invalid_config(format!(
                "cannot downgrade `{}`: {why}",
                self.name()
            )))
        };
        if self.kind() != LockKind::Write {
            return refuse("downgrade is called on the write lock whose guard it is");
        }
        let hold = &guard.hold;
        if hold.kind != LockKind::Write || *hold.dir != *self.path() || hold.client != self.client_id() {
            return refuse("the guard is not a hold of this write lock taken through this client");
        }
        if guard.hold_count() > 1 {
            return refuse("other guards share the hold (a reentrant acquisition)");
        }
        Ok(())
    }
}
