//! Lock-delay, opt-in per lock (Chubby's and Consul's): after a holder vanishes without
//! releasing (its session died, or an operator deleted its node), the lock stays unavailable
//! for a delay, so that the old holder's writes still in flight drain before a new holder
//! starts.
//!
//! ZooKeeper deletes a dead session's nodes by itself and says nothing of why a node went, so
//! a clean release says so: it sets its node's data to [`RELEASE_MARK`] and deletes it in one
//! transaction ([`crate::engine::cleanup::delete_node`] does, for nodes of locks with a delay).
//! A waiter's watch on the node ahead then fires for the data change, and the next listing
//! finds the node gone: marked. A watch that fires for the deletion itself is unmarked, and
//! the waiter, once its turn comes, waits out the delay counted from when it learned of it.
//!
//! What is marked ([`Mark`]): a hold's release always; a waiter that gives up only while the
//! node it waits for still exists (checked in the same transaction), so that a waiter that
//! gives up before it read of an unmarked vanish ahead of it does not pass the lock on early;
//! and nothing of a waiter that knows of an unmarked vanish it has not waited out. What the
//! contenders of one lock in this process learned ([`Vanished`]) is shared by the tasks of its
//! local queue and kept across the session restarts of one acquisition: the next local waiter
//! to contend, or the same one on a new session, waits out the same delay.
//!
//! What it does not cover, written down in docs/safety.md ("Lock-delay"): a contender that
//! did not watch the vanished holder — it arrived after the node was gone, or the node went
//! between its listing and its watch (one round trip) — saw nothing and does not wait;
//! contenders that do not mark (Curator, zklock locks without a delay) make every waiter
//! behind them wait; and Curator's waiters never wait.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tracing::debug;

use crate::connection::session::{Mark, Session};

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

/// What the contenders of one lock in this process know about nodes that vanished ahead of
/// them: shared by the tasks of an exclusive lock's local queue, and by the attempts of one
/// acquisition on successive sessions. Clones share it.
#[derive(Debug, Clone, Default)]
pub(crate) struct Vanished {
    /// When one of them last learned of a node ahead of it that went without the mark.
    unmarked_at: Arc<Mutex<Option<Instant>>>,
}

impl Vanished {
    fn unmarked_at(&self) -> Option<Instant> {
        *self.unmarked_at.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Whether an unmarked vanish is known whose `delay` has not passed yet.
    fn pending(&self, delay: Duration) -> bool {
        self.unmarked_at().is_some_and(|at| Instant::now() < at + delay)
    }

    /// Our node `ours` waits for the node `ahead` (full paths), in a lock with `delay`: should
    /// we give up, our node's removal is marked only while `ahead` still exists, and not at all
    /// while an unmarked vanish is known that was not waited out.
    pub fn waiting_for(&self, delay: Option<Duration>, session: &Session, ours: &str, ahead: &str) {
        let Some(delay) = delay else { return };
        if self.pending(delay) {
            session.unmark_deletion(ours);
        } else {
            session.mark_deletion(ours, Mark::WhileAhead(ahead.to_owned()));
        }
    }

    /// A watched node ahead of `ours` (our contender node's path) went without the mark.
    /// Until the delay is over, our node's own removal (we give up, or are cancelled) is not
    /// marked: the waiter behind us then waits the delay in turn, instead of walking in on a
    /// delay we did not finish.
    pub fn unmarked(&self, session: &Session, ours: &str) {
        *self.unmarked_at.lock().unwrap_or_else(|e| e.into_inner()) = Some(Instant::now());
        session.unmark_deletion(ours);
    }

    /// Waits until `delay` has passed since the last unmarked vanish, if there was one; fails
    /// if the session ends or `deadline` passes first.
    pub async fn wait_out(
        &self,
        delay: Option<Duration>,
        session: &Session,
        deadline: Option<Instant>,
    ) -> Result<(), Interrupted> {
        let (Some(delay), Some(since)) = (delay, self.unmarked_at()) else {
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
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, Instant};

    use zklock_testing::ZkServer;

    use crate::client::LockClient;
    use crate::test_server::{setup, stall_driver, Setup};

    /// The paths `session` watches, from the server's `wchc` report.
    fn watched_by(server: &ZkServer, session: i64) -> Vec<String> {
        let report = tokio::task::block_in_place(|| server.four_letter_word("wchc")).expect("wchc answers");
        let mut watched = Vec::new();
        let mut ours = false;
        for line in report.lines() {
            match line.strip_prefix('\t') {
                Some(path) if ours => watched.push(path.trim().to_owned()),
                Some(_) => {}
                None => ours = u64::from_str_radix(line.trim().trim_start_matches("0x"), 16) == Ok(session as u64),
            }
        }
        watched
    }

    /// Waits (bounded) until `session` watches `node`.
    async fn until_watching(server: &ZkServer, session: i64, node: &str, who: &str) {
        let deadline = Instant::now() + Duration::from_secs(20);
        while !watched_by(server, session).iter().any(|w| w == node) {
            assert!(Instant::now() < deadline, "{who} never waited on {node}");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// The first waiter's process is paused (its driver thread blocked) when the holder's node
    /// is deleted, so the deletion's event waits unread, and the first waiter gives up
    /// meanwhile. Its removal must not be marked clean: the node ahead of it went unmarked,
    /// and the second waiter, who watched only the first, must wait the delay.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_waiter_giving_up_before_it_read_the_vanish_ahead_passes_the_delay_on() {
        let Setup {
            server,
            client: holder,
            view,
        } = setup(Duration::from_secs(4)).await;
        let connect = |_: ()| {
            LockClient::builder(server.connect_string())
                .session_timeout(Duration::from_secs(4))
                .connect()
        };
        let (first, second) = (connect(()).await.unwrap(), connect(()).await.unwrap());
        let delay = Duration::from_secs(3);
        let lock = |c: &LockClient| c.mutex("ld-unread").unwrap().with_lock_delay(delay).unwrap();
        let guard = lock(&holder).acquire().await.unwrap();
        let held = guard.node_path().to_owned();
        let quitter = tokio::spawn({
            let lock = lock(&first);
            async move { lock.acquire_timeout(Duration::from_secs(20)).await }
        });
        let first_session = first.latest().unwrap();
        until_watching(&server, first_session.id, &held, "the first waiter").await;
        let dir = lock(&holder).path().to_owned();
        let queue = view.list_children(&dir).await.unwrap();
        let first_node = format!("{dir}/{}", queue.iter().find(|n| !held.ends_with(n.as_str())).unwrap());
        let next = tokio::spawn({
            let lock = lock(&second);
            async move { lock.acquire_timeout(Duration::from_secs(20) + 2 * delay).await }
        });
        let second_session = second.latest().unwrap().id;
        until_watching(&server, second_session, &first_node, "the second waiter").await;

        let paused = stall_driver(&first_session).await;
        let deleted_at = Instant::now();
        view.delete(&held, None).await.unwrap();
        // Gives up before its process could read the deletion.
        quitter.abort();
        assert!(quitter.await.unwrap_err().is_cancelled());
        paused.thaw();
        let next = tokio::time::timeout(Duration::from_secs(20) + 2 * delay, next)
            .await
            .expect("the second waiter was never answered")
            .unwrap()
            .expect("granted after the delay");
        let waited = deleted_at.elapsed();
        assert!(
            waited >= delay,
            "granted {waited:?} after the holder vanished, within the {delay:?} delay"
        );
        drop((guard, next));
    }
}
