//! One scheduler node of the simulation: a process running one job, with its own clock, its
//! session and its tasks, the lock as it sees it, and what it owes. Its beats ([`super::fire`])
//! and holds ([`super::hold`]) follow `fire.rs`, `hold.rs` and `outbox.rs` step for step; a
//! pause of the process is possible at every step ([`Node::gate`]).
//!
//! [`Defects`] puts back, one by one, the defects issue #42 named (points 1 to 8), so that a
//! test can show the simulation finds each.

use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use tokio::sync::{watch, Notify};
use tokio::time::{sleep, sleep_until, Instant};

use super::super::history::Outcome;
use super::super::policy::{CatchUp, Policy};
use super::super::record::{RunState, TickRecord};
use super::super::ticks::Ticks;
use super::ensemble::{Ensemble, Entry, Session, Start, Ticket, Zk};

/// The old behaviours a test can put back.
#[derive(Debug, Default, Clone, Copy)]
pub(super) struct Defects {
    /// 1: replace requests carry the node's own tick, uncapped, and are read as written.
    pub replace_uncapped: bool,
    /// 2: an orphaned record is settled with a version stamp before `proven` is judged.
    pub settle_before_proven: bool,
    /// 3: the starting deadline is judged by the node's own clock.
    pub deadline_by_local_clock: bool,
    /// 4: a backlog runs without reading the job's state again between runs (and, as then, a
    /// claim does not fail while the job is paused).
    pub backlog_without_reread: bool,
    /// 5: a skip beat records nothing of the ticks it passes over.
    pub skip_passes_silently: bool,
    /// 6: runs under `Allow` and run-now requests carry no run markers.
    pub no_run_markers: bool,
    /// 7: ends that cannot be written at once are dropped, not owed.
    pub ends_not_owed: bool,
    /// 8: reset and remove clear the record instead of leaving a tombstone.
    pub no_tombstones: bool,
    // Found by this simulation and fixed in the change that added it:
    /// A tick's claim does not fail while the job is paused.
    pub claims_ignore_pause: bool,
    /// A paused stretch names only its first tick.
    pub paused_stretch_unnamed: bool,
    /// A doubt is written only with a claim (not when it makes the own tick taken, nor while
    /// paused).
    pub doubt_only_with_a_claim: bool,
    /// An owed end written over a restored record stamps it.
    pub owed_ends_stamp: bool,
    /// Orphans are settled by the settling node's policy, not by the run's marker.
    pub orphans_by_policy: bool,
    /// Ticks given up or paused count as handled before their entry is written.
    pub handled_before_written: bool,
    /// A take of a run-now request whose answer was lost is given up.
    pub lost_takes_dropped: bool,
    /// Only runs under `Replace` delete replace requests.
    pub stale_requests_kept: bool,
}

/// How a node is set up.
#[derive(Debug, Clone, Copy)]
pub(super) struct Setup {
    pub policy: Policy,
    pub catch_up: CatchUp,
    pub deadline: Option<Duration>,
    /// How far its clock is off ZooKeeper's at the start, and how fast it drifts (ppm).
    pub offset_ms: i64,
    pub drift_ppm: i64,
}

/// The knobs of the world a node reads.
#[derive(Debug, Clone, Copy)]
pub(super) struct Weather {
    /// The chance that a write's answer is lost (it may or may not be applied).
    pub transient: f64,
    /// The longest run.
    pub longest_run_ms: u64,
}

#[derive(Default)]
pub(super) struct Handled {
    pub last: Option<i64>,
    pub unconfirmed: Option<(TickRecord, i32)>,
}

pub(super) struct Owed {
    /// When it became owed.
    pub at: i64,
    pub entry: Entry,
    pub end: Option<(i64, RunState, Option<i64>)>,
    pub marker: Option<String>,
}

/// How a run's body ended.
pub(super) struct Ended {
    pub outcome: Outcome,
}

pub(super) struct Node {
    pub id: usize,
    pub setup: Setup,
    pub(super) ticks: Ticks,
    pub(super) zk: Zk,
    pub(super) defects: Defects,
    pub(super) weather: Weather,
    pub(super) session: Mutex<Session>,
    pub offset_ms: Mutex<i64>,
    pub frozen_until: Mutex<Option<Instant>>,
    pub(super) serial: tokio::sync::Mutex<Handled>,
    pub(super) seen: AtomicI64,
    pub(super) running: AtomicI64,
    pub(super) replace: Notify,
    pub(super) owed: Mutex<Vec<Owed>>,
    pub(super) paying: AtomicBool,
    pub(super) rng: Mutex<StdRng>,
    /// Set when the process dies: every task of it stops at once.
    pub(super) dead: watch::Sender<bool>,
}

pub(super) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Node {
    pub fn start(
        id: usize,
        setup: Setup,
        ticks: Ticks,
        zk: Zk,
        defects: Defects,
        weather: Weather,
        seed: u64,
    ) -> Arc<Node> {
        let session = lock(&zk).open_session();
        Arc::new(Node {
            id,
            setup,
            ticks,
            zk,
            defects,
            weather,
            session: Mutex::new(session),
            offset_ms: Mutex::new(setup.offset_ms),
            frozen_until: Mutex::new(None),
            serial: tokio::sync::Mutex::new(Handled::default()),
            seen: AtomicI64::new(i64::MIN),
            running: AtomicI64::new(i64::MIN),
            replace: Notify::new(),
            owed: Mutex::new(Vec::new()),
            paying: AtomicBool::new(false),
            rng: Mutex::new(StdRng::seed_from_u64(seed)),
            dead: watch::channel(false).0,
        })
    }

    pub(super) fn zk(&self) -> MutexGuard<'_, Ensemble> {
        lock(&self.zk)
    }

    /// Runs `work` as a task of this process: it stops when the process dies.
    pub fn spawn(self: &Arc<Self>, work: impl Future<Output = ()> + Send + 'static) {
        let mut dead = self.dead.subscribe();
        tokio::spawn(async move {
            tokio::select! {
                biased;
                _ = dead.wait_for(|dead| *dead) => {}
                () = work => {}
            }
        });
    }

    /// The process dies: its tasks stop; its session ends when the server notices.
    pub fn kill(&self) -> Session {
        self.dead.send_replace(true);
        *lock(&self.session)
    }

    /// Since when the oldest end still owed is owed.
    pub fn owes_since(&self) -> Option<i64> {
        lock(&self.owed).iter().map(|owed| owed.at).min()
    }

    pub fn session_id(&self) -> Session {
        *lock(&self.session)
    }

    /// This node's clock, in ms.
    pub fn local_ms(&self) -> i64 {
        let now = self.zk().now();
        let drift = (now - super::ensemble::EPOCH) * self.setup.drift_ppm / 1_000_000;
        now + *lock(&self.offset_ms) + drift
    }

    pub(super) fn random(&self, upto: u64) -> u64 {
        lock(&self.rng).random_range(0..=upto)
    }

    pub(super) fn chance(&self, p: f64) -> bool {
        p > 0.0 && lock(&self.rng).random_bool(p)
    }

    /// Waits while the process is paused.
    pub(super) async fn gate(&self) {
        loop {
            let until = *lock(&self.frozen_until);
            match until {
                Some(until) if until > Instant::now() => sleep_until(until).await,
                _ => return,
            }
        }
    }

    /// One round trip's worth of time, and the pause of the process, if any.
    pub(super) async fn trip(&self) {
        sleep(Duration::from_millis(self.random(8))).await;
        self.gate().await;
    }

    /// The session, opening a new one when the server expired it (as the client reconnects).
    pub(super) fn session(&self) -> Session {
        let mut session = lock(&self.session);
        let mut zk = self.zk();
        if !zk.alive(*session) {
            *session = zk.open_session();
        }
        *session
    }

    pub(super) fn record_session(&self) -> Option<i64> {
        Some(self.session_id() as i64)
    }

    pub(super) fn entry(&self, tick: Option<i64>, outcome: Outcome, why: &'static str) -> Entry {
        Entry {
            tick,
            first: None,
            outcome,
            run: None,
            trigger: None,
            why,
        }
    }

    /// Waits for the lock up to `wait`.
    pub(super) async fn acquire(&self, wait: Duration) -> Option<Ticket> {
        self.trip().await;
        let session = self.session();
        let ticket = self.zk().enqueue(session)?;
        let deadline = Instant::now() + wait;
        let mut changes = self.zk().changes();
        loop {
            {
                let mut zk = self.zk();
                if zk.granted(ticket) {
                    return Some(ticket);
                }
                if !zk.alive(session) {
                    return None;
                }
            }
            tokio::select! {
                biased;
                _ = changes.changed() => {}
                () = sleep_until(deadline) => {
                    self.zk().release(ticket);
                    return None;
                }
            }
        }
    }

    /// Takes the lock only when nobody holds it or waits for it.
    pub(super) async fn try_acquire(&self) -> Option<Ticket> {
        self.trip().await;
        let session = self.session();
        let mut zk = self.zk();
        if zk.busy() {
            return None;
        }
        let ticket = zk.enqueue(session)?;
        zk.granted(ticket).then_some(ticket)
    }

    pub(super) fn is_lost(&self, ticket: Ticket) -> bool {
        !self.zk().holds(ticket)
    }

    pub(super) async fn lost(&self, ticket: Ticket) {
        let mut changes = self.zk().changes();
        while !self.is_lost(ticket) {
            if changes.changed().await.is_err() {
                return std::future::pending().await;
            }
        }
    }

    pub(super) fn wait_for_lock(&self, own: Option<i64>) -> Duration {
        own.and_then(|own| self.ticks.period_after(own))
            .unwrap_or(Duration::from_secs(60))
    }

    /// Notes an end this node could not write (node.rs `owe`).
    pub(super) fn owe(
        self: &Arc<Self>,
        entry: Entry,
        end: Option<(i64, RunState, Option<i64>)>,
        marker: Option<String>,
    ) {
        if self.defects.ends_not_owed {
            return;
        }
        let at = self.zk().now();
        lock(&self.owed).push(Owed { at, entry, end, marker });
        if !self.paying.swap(true, Ordering::SeqCst) {
            let node = self.clone();
            self.spawn(async move { node.pay_later().await });
        }
    }

    /// A run's body: ends by itself, or when the lock is lost, or when it makes way.
    pub(super) async fn execute(&self, lost: impl Future<Output = ()>, replaced: impl Future<Output = ()>) -> Ended {
        let longest = if self.zk().quiet {
            100
        } else {
            self.weather.longest_run_ms
        };
        let took = Duration::from_millis(self.random(longest));
        let fails = self.chance(0.1);
        let outcome = tokio::select! {
            biased;
            () = lost => Outcome::Lost,
            () = replaced => Outcome::Replaced,
            () = sleep(took) => if fails { Outcome::Failed } else { Outcome::Ok },
        };
        self.gate().await;
        Ended { outcome }
    }

    /// Notes a run's body starting; `claimed`: when its tick was claimed.
    pub(super) fn started(&self, tick: Option<i64>, trigger: Option<String>, claimed: Option<i64>) -> u64 {
        let mut zk = self.zk();
        let run = zk.next_seq();
        let at = zk.now();
        zk.record_start(Start {
            run,
            node: self.id,
            tick,
            trigger,
            at,
            claimed: claimed.unwrap_or(at),
        });
        run
    }

    pub(super) fn tally(&self, tick: Option<i64>, ended: &Ended, run: u64) -> (Option<RunState>, Entry) {
        let state = match ended.outcome {
            Outcome::Ok => Some(RunState::Done),
            Outcome::Lost => None,
            Outcome::Replaced => Some(RunState::Replaced),
            _ => Some(RunState::Failed),
        };
        let mut entry = self.entry(tick, ended.outcome.clone(), "ended");
        entry.run = Some(run);
        (state, entry)
    }
}
