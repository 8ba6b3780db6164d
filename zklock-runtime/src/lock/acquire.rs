//! The acquire path of a [`Lock`]: the orchestrator that calls down, in order, into
//!
//! 1. [`crate::engine::reentrancy`]: does the current call scope already hold this lock? Then re-enter.
//! 2. [`crate::engine::local_queue`]: wait for the front of this process's queue (exclusive locks), and
//!    take over a node the previous local holder handed on, if any.
//! 3. [`crate::engine::queue`]: the ZooKeeper recipe on one session, started over on a new session
//!    when one ends midway.
//! 4. [`crate::engine::guard`]: the hold and its guard.
//!
//! None of those modules calls back up into this one, into the lock handle or into the client.

use std::sync::Arc;
use std::time::{Duration, Instant};

use tracing::{debug, Instrument};

use crate::connection::session::Session;
use crate::connection::session::SessionStatus;
use crate::engine::cleanup::{delete_node, Cleanup};
use crate::engine::guard::{Holding, LockGuard};
use crate::engine::local_queue::{Turn, Warm};
use crate::engine::lock_delay::Vanished;
use crate::engine::own_node::OwnNode;
use crate::engine::queue::{self, Failed, Granted, Recipe};
use crate::engine::reentrancy::{self, Reentry};
use crate::engine::rules::{LockKind, LEASES_DIR, LEASE_NODE, LOCKS_DIR};
use crate::engine::token::FencingToken;
use crate::error::LockError;
use crate::lock::Lock;
use crate::recipes::semaphore::{self, Semaphore};
use crate::telemetry::gauges::{Held, Waiting};
use crate::telemetry::metrics::{CounterCache, Event, Timing};

/// The least time one acquisition gets for its round trips (and for opening a session, when
/// the client has none or its last one expired), however short the caller's timeout: a try
/// (`Duration::ZERO`) still needs one create-and-list round trip. A client whose session is cut
/// off gets none of it (see `acquire_within`).
const MIN_ATTEMPT_BUDGET: Duration = Duration::from_secs(2);

/// How often one acquisition starts over on a fresh session before giving up.
const MAX_SESSION_RESTARTS: u32 = 5;

impl Lock {
    /// The acquire path: reentrancy, then the local queue, then ZooKeeper.
    pub(crate) async fn acquire_within(&self, timeout: Option<Duration>) -> Result<LockGuard, LockError> {
        if let Some(reentered) = self.reenter() {
            return reentered;
        }
        // Boxed, so that this future stays a few words: a reentrant acquisition, answered
        // above, does not build or move the wait's state, which is most of its cost.
        Box::pin(self.wait_for_grant(timeout)).await
    }

    /// A reentrant acquisition, answered in place: `None` outside the scope of a hold it
    /// re-enters.
    #[inline]
    fn reenter(&self) -> Option<Result<LockGuard, LockError>> {
        let Reentry { hold, known_sound } = reentrancy::reentry(self.client.inner.id, &self.dir, self.kind)?;
        if let Err(closed) = self.client.check_open_in(hold.session.runtime_gone()) {
            return Some(Err(closed));
        }
        if !known_sound && hold.is_lost() {
            return Some(Err(hold.lost_error()));
        }
        let metrics = &self.client.inner.metrics;
        metrics.record_cached(Event::Reentered, self.labels(), &hold.reentries);
        let guard = LockGuard::reentered(hold);
        debug!(lock = %self.name, depth = guard.hold_count(), "reentrant acquire");
        Some(Ok(guard))
    }

    /// A new holder: this process's queue, then ZooKeeper's, within `timeout`.
    async fn wait_for_grant(&self, timeout: Option<Duration>) -> Result<LockGuard, LockError> {
        self.client.check_open()?;
        let metrics = &self.client.inner.metrics;
        let started = Instant::now();
        let _waiting = Waiting::start(self.labels());
        // The hold's span covers the wait (its child, `acquire`) and the hold; the guard keeps
        // it until the hold ends.
        let hold_span = tracing::info_span!(
            "lock_hold",
            lock = %self.name,
            kind = ?self.kind,
            token = tracing::field::Empty,
            outcome = tracing::field::Empty,
        );
        let span = tracing::debug_span!(parent: &hold_span, "acquire", lock = %self.name, kind = ?self.kind);
        // A timeout too long to add to a clock is no deadline, not a panic.
        let deadline = timeout.and_then(|t| started.checked_add(t));
        let contend = self.queue_up(deadline).instrument(span.clone());
        let timed_out = || LockError::Timeout {
            name: self.name.to_string(),
            waited: started.elapsed(),
        };
        let unreachable = || {
            LockError::connection(format!(
                "not connected to ZooKeeper at {} (waited {:?}){}",
                self.client.inner.config.connect,
                started.elapsed(),
                self.client.inner.contact.clause()
            ))
        };
        // A client that can send now, or that will open a session for this acquisition (none
        // yet, or the last one expired), gets at least one round trip's worth of time however
        // short the timeout. A client whose session is cut off (or being opened by another
        // caller) gets no more than the caller's timeout, and a try (zero) is answered at once.
        let cut_off = match self.client.status() {
            SessionStatus::Suspended | SessionStatus::Lost => true,
            // Opening a session: a first one (nothing to wait behind), or another caller's.
            SessionStatus::Connecting => self.client.latest().is_some(),
            _ => false,
        };
        let result = match timeout {
            None => contend.await,
            Some(timeout) if timeout.is_zero() && cut_off => Err(Failed::Error(unreachable())),
            Some(timeout) => {
                let budget = if cut_off {
                    timeout
                } else {
                    timeout.max(MIN_ATTEMPT_BUDGET)
                };
                match tokio::time::timeout(budget, contend).await {
                    Ok(result) => result,
                    // The round trips themselves did not finish in time: say whether the
                    // ensemble was out of reach.
                    Err(_) if self.client.status().is_connected() => Err(Failed::Error(timed_out())),
                    Err(_) => Err(Failed::Error(unreachable())),
                }
            }
        };
        let mut result = result.map_err(|failed| match failed {
            Failed::TimedOut => timed_out(),
            Failed::SessionEnded => LockError::SessionExpired,
            Failed::Error(err) => err,
        });
        // The outcome, like every step, is told inside the span that names the lock.
        let _in_span = span.enter();
        match &mut result {
            Ok(guard) => {
                hold_span.record("token", tracing::field::display(guard.fencing_token()));
                if let Some(hold) = guard.sole_hold() {
                    hold.span = hold_span;
                }
                metrics.record(Event::Acquired, self.labels());
                metrics.time(Timing::Wait, self.labels(), started.elapsed());
                debug!(
                    lock = %self.name,
                    node = %guard.node_path(),
                    token = %guard.fencing_token(),
                    waited_ms = started.elapsed().as_millis() as u64,
                    "lock acquired"
                );
            }
            Err(LockError::Timeout { .. }) => {
                hold_span.record("outcome", "timed_out");
                metrics.record(Event::TimedOut, self.labels());
                debug!(lock = %self.name, waited_ms = started.elapsed().as_millis() as u64, "lock timed out");
            }
            Err(err) => {
                hold_span.record("outcome", "failed");
                debug!(lock = %self.name, %err, "acquire failed");
            }
        }
        result
    }

    /// Waits for the lock: a lease for a semaphore, otherwise the front of this process's queue
    /// (exclusive locks), taking over a node the previous local holder handed on, or else
    /// contending in ZooKeeper.
    async fn queue_up(&self, deadline: Option<Instant>) -> Result<LockGuard, Failed> {
        match self.kind {
            LockKind::Semaphore { leases } => self.lease(leases, deadline).await,
            _ => self.queue_locally(deadline).await,
        }
    }

    /// The queue path of mutexes and read/write locks: this process's queue (exclusive kinds),
    /// then ZooKeeper's.
    async fn queue_locally(&self, deadline: Option<Instant>) -> Result<LockGuard, Failed> {
        let Some(gate) = self.client.inner.gates.gate(&self.dir, self.kind) else {
            return self.contend(deadline, None).await;
        };
        // A node this process keeps idle, taken at once (lock caching).
        if let Some((turn, mut warm)) = gate.take_idle() {
            warm.from_cache = true;
            return self.take_over(turn, warm, deadline).await;
        }
        // Waiting behind a local holder ends early if the client closes meanwhile (the holder
        // may keep its guard, lost, for a long time).
        let mut status = self.client.watch_status();
        let closed = status.wait_for(|s| *s == SessionStatus::Closed);
        // Polled in this order: a free turn wins over a deadline that has already passed, so
        // `try_acquire` of a lock nobody here holds always gets to ask ZooKeeper.
        let mut turn = tokio::select! {
            biased;
            turn = gate.enter() => turn,
            _ = closed => {
                return Err(Failed::Error(self.client.check_open().err().unwrap_or(LockError::SessionExpired)));
            }
            _ = queue::deadline_passed(deadline) => return Err(Failed::TimedOut),
        };
        match turn.take_warm() {
            Some(warm) => self.take_over(turn, warm, deadline).await,
            None => self.contend(deadline, Some(turn)).await,
        }
    }

    /// Holds the node handed over by the previous local holder (or kept idle), at the front
    /// `turn`; one that can no longer be trusted is deleted as it drops, and we contend afresh.
    async fn take_over(&self, turn: Turn, warm: Warm, deadline: Option<Instant>) -> Result<LockGuard, Failed> {
        if let Some(claimed) = warm.claim() {
            self.client.inner.metrics.record(Event::HandedOff, self.labels());
            if claimed.from_cache {
                self.client.inner.metrics.record(Event::FromCache, self.labels());
            }
            return Ok(self.hold(
                claimed.session,
                claimed.node_path,
                claimed.own_node,
                claimed.token,
                claimed.losses_at_grant,
                Some(turn),
            ));
        }
        self.contend(deadline, Some(turn)).await
    }

    /// Attempts the recipe on successive sessions until one grants the lock or fails for good.
    async fn contend(&self, deadline: Option<Instant>, turn: Option<Turn>) -> Result<LockGuard, Failed> {
        let inner = &self.client.inner;
        let recipe = self.recipe();
        // A vanish learned on one session, or by the task ahead of us in this process's queue,
        // still has its lock-delay waited out here.
        let vanished = turn.as_ref().map_or_else(Vanished::default, Turn::vanished);
        let mut restarts = 0;
        loop {
            let session = self.client.session(None).await.map_err(Failed::Error)?;
            // Read before the attempt: a loss reported at any moment after this invalidates
            // what the attempt grants, so none can slip in between the grant and the reading.
            let losses = session.health().losses;
            let outcome = queue::attempt(&recipe, &*self.rule, &session, deadline, &vanished).await;
            let outcome = outcome.and_then(|granted| sound_grant(&inner.cleanup, &session, losses, granted));
            match outcome {
                Ok(granted) => {
                    if !granted.listed {
                        inner.metrics.record(Event::WithoutListing, self.labels());
                    }
                    let token = FencingToken::new(granted.czxid, 0);
                    let own_node = OwnNode::watch(&session, &granted.node_path);
                    return Ok(self.hold(session, granted.node_path, own_node, token, losses, turn));
                }
                Err(Failed::SessionEnded) => {
                    restarts += 1;
                    if deadline.is_some_and(|d| Instant::now() >= d) {
                        return Err(Failed::TimedOut);
                    }
                    if restarts > MAX_SESSION_RESTARTS {
                        return Err(Failed::SessionEnded);
                    }
                    debug!(lock = %self.name, "session ended while contending; starting over");
                }
                Err(failed) => return Err(failed),
            }
        }
    }

    /// A semaphore lease ([`crate::recipes::semaphore`]): the mutex over acquirers, then a lease node
    /// in the session the mutex is held in; the mutex is given up as soon as the lease is held.
    async fn lease(&self, leases: u32, deadline: Option<Instant>) -> Result<LockGuard, Failed> {
        let inner = &self.client.inner;
        let mut mutex = Lock::at(
            self.client.clone(),
            self.name.clone(),
            format!("{}/{}", self.dir, LOCKS_DIR),
            LockKind::Mutex,
        );
        mutex.template = self.template.clone();
        let leases_dir = format!("{}/{}", self.dir, LEASES_DIR);
        let recipe = Recipe {
            dir: &leases_dir,
            node_name: LEASE_NODE,
            acls: inner.config.acls(),
            cleanup: &inner.cleanup,
            skip_listing_when_alone: false,
            holder: &inner.config.holder,
            template: self.template.as_deref(),
            participant: None,
            lock_delay: None,
        };
        let mut restarts = 0;
        loop {
            let acquirers = mutex.queue_locally(deadline).await?;
            let session = acquirers.hold.session.clone();
            // The acquirers' mutex was sound at its grant; a loss from then on voids the lease.
            let losses = acquirers.hold.losses_at_grant;
            let semaphore = Semaphore {
                name: &self.name,
                dir: &self.dir,
                leases,
            };
            let outcome = semaphore::take_lease(&recipe, &semaphore, &session, deadline).await;
            match outcome.and_then(|granted| sound_grant(&inner.cleanup, &session, losses, granted)) {
                Ok(granted) => {
                    drop(acquirers);
                    let token = FencingToken::new(granted.czxid, 0);
                    let own_node = OwnNode::watch(&session, &granted.node_path);
                    return Ok(self.hold(session, granted.node_path, own_node, token, losses, None));
                }
                Err(Failed::SessionEnded) if restarts < MAX_SESSION_RESTARTS => {
                    restarts += 1;
                    debug!(lock = %self.name, "session ended while waiting for a lease; starting over");
                }
                Err(failed) => return Err(failed),
            }
        }
    }

    /// The hold of `node_path`, granted in `session`, watched through `own_node` (a node granted
    /// just now: [`OwnNode::watch`]; one handed over: the watch it came with).
    pub(crate) fn hold(
        &self,
        session: Arc<Session>,
        node_path: String,
        own_node: OwnNode,
        token: FencingToken,
        losses_at_grant: u64,
        turn: Option<Turn>,
    ) -> LockGuard {
        let inner = &self.client.inner;
        session.track(&node_path);
        LockGuard::new(Arc::new(Holding {
            client: inner.id,
            session,
            name: self.name.clone(),
            dir: self.dir.clone(),
            kind: self.kind,
            node_path,
            token,
            losses_at_grant,
            granted_at: Instant::now(),
            turn,
            max_handoffs: inner.config.max_local_handoffs,
            cleanup: inner.cleanup.clone(),
            metrics: inner.metrics.clone(),
            template: self.template.clone(),
            reentries: CounterCache::default(),
            own_node,
            min_hold: self.min_hold,
            cache: self.cache,
            held: Some(Held::start(self.labels())),
            span: tracing::Span::none(),
        }))
    }
}

/// Keeps a grant only if its session has not been reported lost (or closed, or expired) since
/// `losses` was read, before the attempt that made it. A grant that is not sound is given up
/// (its node deleted) and counts as a session that ended: the caller starts over, on this
/// session once it is trusted again or on a new one, and a closed client answers `Closed`.
fn sound_grant(cleanup: &Cleanup, session: &Arc<Session>, losses: u64, granted: Granted) -> Result<Granted, Failed> {
    if !session.health().invalidates(losses) {
        return Ok(granted);
    }
    debug!(node = %granted.node_path, "granted in a session reported lost meanwhile; giving it up");
    let deletion = delete_node(session, granted.node_path);
    cleanup.spawn(session, async move {
        let _ = deletion.await;
    });
    Err(Failed::SessionEnded)
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, Instant};

    use zklock_testing::ZkServer;

    use crate::client::LockClient;

    /// A deadline that has passed before the local queue is even looked at must not beat a
    /// free turn: a try of a lock nobody holds goes on to ZooKeeper and is granted.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_passed_deadline_does_not_beat_a_free_turn() {
        let zk = ZkServer::start().expect("start ZooKeeper (run scripts/install-deps.sh)");
        let client = LockClient::connect(&zk.connect_string()).await.unwrap();
        let lock = client.mutex("passed-deadline").unwrap();
        tokio::time::sleep(Duration::from_millis(60)).await; // the timer is past the deadlines below
        for round in 0..100 {
            let passed = Instant::now().checked_sub(Duration::from_millis(50));
            match lock.queue_up(passed).await {
                Ok(guard) => guard.release().await.unwrap(),
                Err(_) => panic!("round {round}: a free lock was refused for a deadline that had passed"),
            }
        }
    }
}
