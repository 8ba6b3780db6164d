//! Noticing that the session may have expired while this process was not running.
//!
//! The client library learns that a session expired only from the server, after it connects
//! again. A process that was paused (`SIGSTOP`, a VM frozen for a snapshot or a migration, a
//! driver thread starved of CPU) for longer than the session timeout comes back still reading
//! its session as connected, and would go on granting what it needs no server for: a node
//! handed to the next task of the process ([`crate::engine::local_queue`]). The session's
//! ephemeral nodes may be gone by then, and another process may hold the lock.
//!
//! The pulse is a beat the session's driver task records every [`Pulse::every`]. A grant that
//! asks no server first checks [`Pulse::steady`]: the last beat is recent, and no gap between
//! two beats (a pause) was left unconfirmed. A gap longer than a third of the session timeout
//! puts the session in doubt until a write sent after the gap is answered (a `multi` of one
//! `check`): then the leader has seen the session alive after the pause. A read would not do:
//! a follower answers it from its own view, also while it is cut off from a quorum that has
//! expired the session. (The library sends a ping after 3/20 of the
//! timeout without traffic, so a session can expire only after a silence of about 17/20 of it;
//! a third is well inside that.) Meanwhile grants go through ZooKeeper, whose answer
//! (or refusal, for an expired session) is the truth.
//!
//! The beat runs on the driver's thread, beside the connection: when the driver cannot run,
//! neither can the client library's connection, and the beat stops with it.

use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::time::MissedTickBehavior;

/// The beat of one session's driver.
#[derive(Debug)]
pub(crate) struct Pulse {
    /// What the times below count from.
    origin: Instant,
    /// The last beat, in ms since `origin`.
    beat_ms: AtomicU64,
    /// When the latest unconfirmed gap was seen (ms since `origin`, at least 1); 0 when none.
    doubt_since_ms: AtomicU64,
    /// Whether a confirming request is on its way.
    asking: AtomicBool,
    /// How often the driver beats.
    pub every: Duration,
    /// The longest silence between beats that leaves the session trusted.
    gap: Duration,
}

impl Pulse {
    /// The pulse of a session with `session_timeout`: a beat every tenth of it (between 10 and
    /// 250 ms), in doubt after a silence of a third of it.
    pub fn new(session_timeout: Duration) -> Pulse {
        let every = (session_timeout / 10).clamp(Duration::from_millis(10), Duration::from_millis(250));
        Pulse {
            origin: Instant::now(),
            beat_ms: AtomicU64::new(0),
            doubt_since_ms: AtomicU64::new(0),
            asking: AtomicBool::new(false),
            every,
            gap: (session_timeout / 3).max(every * 2),
        }
    }

    fn now_ms(&self) -> u64 {
        self.origin.elapsed().as_millis() as u64
    }

    /// Whether the session may be trusted without asking the server: beaten within the gap,
    /// and no gap left unconfirmed.
    pub fn steady(&self) -> bool {
        self.steady_at(self.now_ms())
    }

    fn steady_at(&self, now_ms: u64) -> bool {
        // The beat first: a beat that ended a gap is stored after the doubt it raised.
        let beat = self.beat_ms.load(Ordering::SeqCst);
        let doubt = self.doubt_since_ms.load(Ordering::SeqCst);
        now_ms.saturating_sub(beat) <= self.gap.as_millis() as u64 && doubt == 0
    }

    /// Records a beat at `now_ms`; a gap since the last one puts the session in doubt.
    fn beat_at(&self, now_ms: u64) {
        let last = self.beat_ms.load(Ordering::SeqCst);
        if now_ms.saturating_sub(last) > self.gap.as_millis() as u64 {
            self.doubt_since_ms.store(now_ms.max(1), Ordering::SeqCst);
        }
        self.beat_ms.store(now_ms, Ordering::SeqCst);
    }

    fn in_doubt(&self) -> bool {
        self.doubt_since_ms.load(Ordering::SeqCst) != 0
    }

    /// A request sent at `sent_ms` was answered: the server saw the session alive after every
    /// gap seen before it was sent. A gap seen later stays in doubt.
    fn confirm(&self, sent_ms: u64) {
        let doubt = self.doubt_since_ms.load(Ordering::SeqCst);
        if doubt != 0 && doubt <= sent_ms {
            let _ = self
                .doubt_since_ms
                .compare_exchange(doubt, 0, Ordering::SeqCst, Ordering::SeqCst);
        }
    }
}

/// The session's beat, run on its driver beside the monitor for as long as the session lives:
/// beats every [`Pulse::every`] and, while in doubt, sends `ask()` (a request in the session,
/// one at a time; `None` when none can be sent), whose `true` answer clears the doubts seen
/// before it was sent. Never returns.
pub(crate) async fn keep_beating<F, A>(pulse: Arc<Pulse>, ask: F)
where
    F: Fn() -> Option<A>,
    A: Future<Output = bool> + Send + 'static,
{
    let mut ticks = tokio::time::interval(pulse.every);
    ticks.set_missed_tick_behavior(MissedTickBehavior::Delay);
    loop {
        ticks.tick().await;
        pulse.beat_at(pulse.now_ms());
        if !pulse.in_doubt() || pulse.asking.swap(true, Ordering::SeqCst) {
            continue;
        }
        let sent = pulse.now_ms();
        let Some(asked) = ask() else {
            pulse.asking.store(false, Ordering::SeqCst);
            continue;
        };
        let pulse = pulse.clone();
        tokio::spawn(async move {
            if asked.await {
                pulse.confirm(sent);
            }
            pulse.asking.store(false, Ordering::SeqCst);
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pulse() -> Pulse {
        // A beat every 100 ms, in doubt after 333 ms of silence.
        Pulse::new(Duration::from_secs(1))
    }

    #[test]
    fn regular_beats_keep_the_session_steady() {
        let p = pulse();
        for t in (0..2000).step_by(100) {
            p.beat_at(t);
            assert!(p.steady_at(t + 50), "at {t} ms");
        }
    }

    #[test]
    fn a_silence_longer_than_the_gap_is_unsteady_before_the_next_beat() {
        let p = pulse();
        for t in (0..=1000).step_by(100) {
            p.beat_at(t);
        }
        assert!(p.steady_at(1333));
        // The process was paused: the grant runs before the driver beats again.
        assert!(!p.steady_at(1334));
        // A beat exactly one gap after the last one is not a gap; one a millisecond later is.
        p.beat_at(1333);
        assert!(p.steady_at(1334));
        p.beat_at(1667);
        assert!(!p.steady_at(1668));
    }

    /// The beat asks the server only while in doubt, once per doubt, and a `true` answer ends
    /// the doubt: no further requests while the beats stay regular.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_beat_asks_the_server_only_while_in_doubt() {
        use std::sync::atomic::AtomicUsize;
        // A beat every 250 ms, in doubt only after 10 s without one.
        let pulse = Arc::new(Pulse::new(Duration::from_secs(30)));
        let asked = Arc::new(AtomicUsize::new(0));
        let beating = tokio::spawn(keep_beating(pulse.clone(), {
            let asked = asked.clone();
            move || {
                asked.fetch_add(1, Ordering::SeqCst);
                Some(async { true })
            }
        }));
        // Waits until the driver has recorded `n` more beats (each a later `beat_ms`), so the
        // checks below follow beats that ran, not a stretch of time.
        let beats_of = |n: u32| {
            let pulse = pulse.clone();
            async move {
                let deadline = Instant::now() + Duration::from_secs(20);
                let mut last = pulse.beat_ms.load(Ordering::SeqCst);
                let mut seen = 0;
                while seen < n {
                    assert!(Instant::now() < deadline, "{seen} of {n} beats in 20 s");
                    tokio::time::sleep(Duration::from_millis(10)).await;
                    let now = pulse.beat_ms.load(Ordering::SeqCst);
                    if now != last {
                        (last, seen) = (now, seen + 1);
                    }
                }
            }
        };
        beats_of(4).await;
        assert_eq!(asked.load(Ordering::SeqCst), 0, "asked without a doubt");
        assert!(pulse.steady());

        // A gap seen long ago: the next beat asks, the answer clears it.
        pulse.doubt_since_ms.store(1, Ordering::SeqCst);
        assert!(!pulse.steady());
        let deadline = Instant::now() + Duration::from_secs(20);
        while !pulse.steady() {
            assert!(Instant::now() < deadline, "the doubt was never cleared");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        beats_of(4).await;
        assert_eq!(asked.load(Ordering::SeqCst), 1, "one request per doubt");
        beating.abort();
    }

    #[test]
    fn the_beat_after_a_gap_leaves_the_session_in_doubt_until_confirmed() {
        let p = pulse();
        p.beat_at(900);
        p.beat_at(1000);
        // The driver resumed first and beat: the gap is remembered.
        p.beat_at(5000);
        assert!(!p.steady_at(5001));
        p.beat_at(5100);
        assert!(!p.steady_at(5101), "beats alone do not clear a doubt");
        // An answer to a request sent before the gap proves nothing about the session after it.
        p.confirm(4999);
        assert!(!p.steady_at(5102));
        p.confirm(5050);
        assert!(p.steady_at(5150));
    }

    #[test]
    fn a_confirmation_does_not_clear_a_later_gap() {
        let p = pulse();
        p.beat_at(0);
        p.beat_at(1000); // gap seen at 1000
        let sent = 1010;
        p.beat_at(3000); // a second gap, seen while the first one's request is on its way
        p.confirm(sent);
        assert!(!p.steady_at(3001));
        p.confirm(3005);
        assert!(p.steady_at(3010));
    }

    /// A stall of the driver shorter than the session timeout: the session survives, but while
    /// the driver is stalled past the gap it is not vouched for, and once it runs again the
    /// server's answer to the pulse's request vouches for it again, in the same session.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_short_stall_is_doubted_until_the_server_answers_again() {
        use crate::test_server::{setup, stall_driver, Setup};
        let Setup {
            server: _server,
            client,
            ..
        } = setup(Duration::from_secs(4)).await;
        // A request first, so the session exists.
        client
            .mutex("stall")
            .unwrap()
            .acquire()
            .await
            .unwrap()
            .release()
            .await
            .unwrap();
        let session = client.latest().unwrap();
        assert!(session.vouched_for());
        let stalled = stall_driver(&session).await;
        let until = |vouched: bool| {
            let session = session.clone();
            async move {
                let deadline = Instant::now() + Duration::from_secs(20);
                while session.vouched_for() != vouched {
                    assert!(Instant::now() < deadline, "never vouched_for() == {vouched}");
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
            }
        };
        // Past a third of the 4 s timeout without a beat.
        until(false).await;
        stalled.thaw();
        until(true).await;
        assert_eq!(
            client.latest().unwrap().id,
            session.id,
            "the session survived the stall"
        );
    }

    #[test]
    fn short_timeouts_keep_the_gap_above_two_beats() {
        let p = Pulse::new(Duration::from_millis(60));
        assert_eq!(p.every, Duration::from_millis(10));
        assert_eq!(p.gap, Duration::from_millis(20));
        let p = Pulse::new(Duration::from_secs(30));
        assert_eq!(p.every, Duration::from_millis(250));
        assert_eq!(p.gap, Duration::from_secs(10));
    }
}
