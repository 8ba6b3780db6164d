//! Lock-delay, opt-in per lock (Chubby's and Consul's): after a holder vanishes without
//! releasing (its session died, or an operator deleted its node), the lock stays unavailable
//! for a delay, so that the old holder's writes still in flight drain before a new holder
//! starts.
//!
//! ZooKeeper deletes a dead session's nodes by itself and says nothing of why a node went, so
//! a clean release says so: it sets its node's data to [`RELEASE_MARK`] and deletes it in one
//! transaction ([`crate::engine::cleanup::delete_node`] does, for nodes of locks with a delay,
//! gives-up included). A waiter's watch on the node ahead then fires for the data change, and
//! the next listing finds the node gone: marked. A watch that fires for the deletion itself is
//! unmarked, and the waiter, once its turn comes, waits out the delay counted from when it
//! learned of it.
//!
//! What it does not cover, written down in docs/safety.md ("Lock-delay"): a contender that
//! did not watch the vanished holder — it arrived after the node was gone, or the node went
//! between its listing and its watch (one round trip) — saw nothing and does not wait;
//! contenders that do not mark (Curator, zklock locks without a delay) make every waiter
//! behind them wait; and Curator's waiters never wait.

use std::time::{Duration, Instant};

use tracing::debug;

use crate::connection::session::Session;

/// What a clean release writes into its node just before deleting it, in one transaction.
pub(crate) const RELEASE_MARK: &[u8] = b"__RELEASED__";

/// The longest lock-delay a lock accepts.
pub(crate) const MAX_LOCK_DELAY: Duration = Duration::from_secs(3600);

/// Why waiting out a delay stopped short.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Interrupted {
    /// The waiter's session ended.
    SessionEnded,
    /// The waiter's deadline passed.
    TimedOut,
}

/// What one waiter knows about nodes that vanished ahead of it.
#[derive(Debug, Default)]
pub(crate) struct Vanished {
    /// When the waiter last learned of a node ahead of it that went without the mark.
    unmarked_at: Option<Instant>,
}

impl Vanished {
    /// A watched node ahead of `ours` (our contender node's path) went without the mark.
    /// Until our turn comes and the delay is over, our node's own removal (we give up, or are
    /// cancelled) is not marked either: the waiter behind us then waits the delay in turn,
    /// instead of walking in on a delay we did not finish.
    pub fn unmarked(&mut self, session: &Session, ours: &str) {
        self.unmarked_at = Some(Instant::now());
        session.unmark_deletion(ours);
    }

    /// Waits until `delay` has passed since the last unmarked vanish, if there was one, and
    /// marks `ours` again for its clean release; fails if the session ends or `deadline`
    /// passes first.
    pub async fn wait_out(
        &self,
        delay: Option<Duration>,
        session: &Session,
        deadline: Option<Instant>,
        ours: &str,
    ) -> Result<(), Interrupted> {
        let (Some(delay), Some(since)) = (delay, self.unmarked_at) else {
            return Ok(());
        };
        let until = since + delay;
        if Instant::now() < until {
            debug!(
                wait_ms = (until - Instant::now()).as_millis() as u64,
                "a holder ahead vanished without releasing; waiting out the lock-delay"
            );
            // A deadline before the delay's end stops the wait there.
            let stop = deadline.map_or(until, |d| d.min(until));
            tokio::select! {
                biased;
                _ = session.ended() => return Err(Interrupted::SessionEnded),
                _ = tokio::time::sleep_until(stop.into()) => {}
            }
            if stop < until {
                return Err(Interrupted::TimedOut);
            }
        }
        session.mark_deletion(ours);
        Ok(())
    }
}
