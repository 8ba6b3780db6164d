//! A hold of the job's lock, as `hold.rs` makes it (the fenced writes, the runs and their
//! reports), and the ends a node owes, as `outbox.rs` writes them under a later hold.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::sleep;

use super::super::history::Outcome;
use super::super::plan;
use super::super::policy::Policy;
use super::super::record::{RunState, TickRecord};
use super::super::ticks::tick_time;
use super::ensemble::Ticket;
use super::ensemble::{Commit, Entry, Marker, WriteError};
use super::node::{lock, Ended, Handled, Node, Owed};

impl Node {
    /// outbox.rs `pay`.
    pub(super) async fn pay(&self, hold: &mut Hold<'_>, runs: &mut Vec<(String, bool)>) -> bool {
        let owed: Vec<Owed> = std::mem::take(&mut *lock(&self.owed));
        if owed.is_empty() {
            return true;
        }
        let mut record = None;
        let mut markers = Vec::new();
        for debt in &owed {
            hold.pending.push(debt.entry.clone());
            if let Some((tick, state, session)) = &debt.end {
                let shows = hold
                    .record
                    .as_ref()
                    .filter(|r| r.tick == *tick && r.state == RunState::Running && r.session == *session);
                if let (None, Some(claimed)) = (&record, shows) {
                    let mut ended = claimed.ended(state.clone(), hold.version);
                    if self.defects.owed_ends_stamp {
                        ended.version = hold.version.checked_add(1);
                    }
                    record = Some(ended);
                }
            }
            if let Some(run) = debt.marker.as_ref().and_then(|key| runs.iter().find(|(k, _)| k == key)) {
                markers.push(Marker::Close {
                    key: run.0.clone(),
                    alive: run.1,
                });
            }
        }
        match hold.commit(record, None, None, markers, false).await {
            Ok(_) => {
                runs.retain(|(key, _)| !owed.iter().any(|debt| debt.marker.as_deref() == Some(key.as_str())));
                true
            }
            Err(_) => {
                let mut again = lock(&self.owed);
                let later = std::mem::replace(&mut *again, owed);
                again.extend(later);
                false
            }
        }
    }

    /// outbox.rs `pay_later`.
    pub(super) async fn pay_later(self: Arc<Self>) {
        let mut pause = Duration::from_millis(100);
        loop {
            let empty = || lock(&self.owed).is_empty();
            if empty() {
                self.paying.store(false, Ordering::SeqCst);
                if empty() || self.paying.swap(true, Ordering::SeqCst) {
                    return;
                }
                continue;
            }
            let wait = self.wait_for_lock(self.ticks.tick_at(tick_time(self.local_ms())));
            let Some(ticket) = self.acquire(wait).await else {
                sleep(pause).await;
                pause = (pause * 2).min(Duration::from_secs(30));
                continue;
            };
            self.trip().await;
            let state = self.zk().read_state();
            let Ok(record) = state.record else {
                self.zk().release(ticket);
                continue;
            };
            let mut hold = Hold::over(&self, ticket, record, state.version);
            let mut runs = state.runs;
            let paid = self.pay(&mut hold, &mut runs).await;
            self.zk().release(ticket);
            if !paid {
                sleep(pause).await;
                pause = (pause * 2).min(Duration::from_secs(30));
            }
        }
    }
}

/// One hold of the job's lock (hold.rs `Hold`).
pub(super) struct Hold<'a> {
    pub node: &'a Arc<Node>,
    pub ticket: Ticket,
    /// When the record was last written by this hold.
    pub claimed_at: Option<i64>,
    pub record: Option<TickRecord>,
    pub version: i32,
    pub pending: Vec<Entry>,
}

impl<'a> Hold<'a> {
    /// hold.rs `Hold::over`.
    pub(super) fn over(node: &'a Arc<Node>, ticket: Ticket, record: Option<TickRecord>, version: i32) -> Hold<'a> {
        Hold {
            node,
            ticket,
            claimed_at: None,
            record,
            version,
            pending: Vec::new(),
        }
    }

    pub(super) async fn commit(
        &mut self,
        record: Option<TickRecord>,
        entry: Option<Entry>,
        take: Option<&str>,
        markers: Vec<Marker>,
        unless_paused: bool,
    ) -> Result<Option<(i32, i64)>, WriteError> {
        self.node.trip().await;
        let mut entries = std::mem::take(&mut self.pending);
        entries.extend(entry);
        let commit = Commit {
            record: record.clone().map(|r| (r, self.version)),
            entries,
            take: take.map(str::to_owned),
            markers,
            unless_paused,
        };
        let answer_lost = self.node.chance(self.node.weather.transient);
        let applied_anyway = answer_lost && self.node.chance(0.5);
        if answer_lost && !applied_anyway {
            return Err(WriteError::Transient);
        }
        let written = self.node.zk().commit(self.ticket, commit)?;
        if answer_lost {
            return Err(WriteError::Transient);
        }
        if let (Some(record), Some((version, mtime))) = (record, written) {
            self.record = Some(record);
            self.version = version;
            self.claimed_at = Some(mtime);
        }
        Ok(written)
    }

    pub(super) fn markers_on(&self) -> bool {
        !self.node.defects.no_run_markers
    }

    pub(super) async fn run_requested(&mut self, name: &str) -> bool {
        let node = self.node;
        let markers = if self.markers_on() {
            vec![Marker::Open(name.to_owned())]
        } else {
            Vec::new()
        };
        match self.commit(None, None, Some(name), markers, false).await {
            Ok(_) => {}
            Err(WriteError::Taken) => return true,
            Err(WriteError::Transient) if node.defects.lost_takes_dropped => return false,
            Err(WriteError::Transient) => {
                // hold.rs: the take's marker tells whether it was applied.
                node.trip().await;
                let session = self.ticket.session;
                let zk = node.zk();
                let took = zk.alive(session)
                    && zk
                        .job
                        .as_ref()
                        .is_some_and(|job| job.runs.get(name) == Some(&Some(session)));
                if !took {
                    return false;
                }
            }
            Err(_) => return false,
        }
        if node.is_lost(self.ticket) {
            let mut entry = node.entry(None, Outcome::Lost, "taken, lock lost before it ran");
            entry.trigger = Some(name.to_owned());
            node.owe(entry, None, Some(name.to_owned()));
            return false;
        }
        let run = node.started(None, Some(name.to_owned()), None);
        let ended = node.execute(node.lost(self.ticket), std::future::pending()).await;
        self.report(None, ended, Some(name), run).await.is_some()
    }

    pub(super) async fn report(
        &mut self,
        tick: Option<i64>,
        ended: Ended,
        marker: Option<&str>,
        run: u64,
    ) -> Option<RunState> {
        let node = self.node;
        let (state, mut entry) = node.tally(tick, &ended, run);
        entry.trigger = marker.filter(|_| tick.is_none()).map(str::to_owned);
        let claim = tick.and_then(|tick| self.record.as_ref().filter(|r| r.tick == tick).cloned());
        let owe = |state: RunState, entry: Entry| {
            let end = claim.as_ref().map(|c| (c.tick, state, c.session));
            node.owe(entry, end, marker.map(str::to_owned));
        };
        let Some(state) = state else {
            owe(RunState::Lost, entry);
            return None;
        };
        let record = claim.as_ref().map(|c| c.ended(state.clone(), self.version));
        let markers = marker
            .filter(|_| self.markers_on())
            .map(|key| Marker::Close {
                key: key.to_owned(),
                alive: true,
            })
            .into_iter()
            .collect();
        match self.commit(record, Some(entry.clone()), None, markers, false).await {
            Ok(_) => Some(state),
            Err(_) => {
                owe(state, entry);
                None
            }
        }
    }

    pub(super) async fn settle_orphan(&mut self, runs: &[(String, bool)]) -> bool {
        let node = self.node;
        let marker = |tick: i64| runs.iter().find(|(key, _)| *key == tick.to_string());
        let by_policy = node.defects.orphans_by_policy;
        let orphan = self.record.as_ref().filter(|r| {
            r.state == RunState::Running
                && if by_policy {
                    node.setup.policy != Policy::Allow
                } else {
                    !marker(r.tick).is_some_and(|(_, alive)| *alive)
                }
        });
        let Some(orphan) = orphan else {
            return true;
        };
        let mut lost = orphan.ended(RunState::Lost, self.version);
        if node.defects.settle_before_proven {
            lost.version = self.version.checked_add(1);
        }
        let entry = (by_policy || marker(orphan.tick).is_none())
            .then(|| node.entry(Some(orphan.tick), Outcome::Lost, "never reported back"));
        self.commit(Some(lost), entry, None, Vec::new(), false).await.is_ok()
    }

    pub(super) async fn settle_dead_runs(&mut self, runs: &[(String, bool)]) -> bool {
        let node = self.node;
        let dead: Vec<&(String, bool)> = runs.iter().filter(|(_, alive)| !alive).collect();
        if dead.is_empty() {
            return true;
        }
        for (key, _) in &dead {
            let tick = key.parse::<i64>().ok();
            let mut entry = node.entry(tick, Outcome::Lost, "its node's session ended first");
            entry.trigger = tick.is_none().then(|| key.clone());
            self.pending.push(entry);
        }
        let markers = dead
            .iter()
            .map(|(key, _)| Marker::Close {
                key: key.clone(),
                alive: false,
            })
            .collect();
        self.commit(None, None, None, markers, false).await.is_ok()
    }

    pub(super) async fn take_missed(&mut self, tick: i64) -> bool {
        let missed = TickRecord::next(
            self.record.as_ref(),
            tick,
            RunState::Missed,
            self.node.record_session(),
            self.version,
        );
        self.commit(Some(missed), None, None, Vec::new(), false).await.is_ok()
    }

    /// hold.rs `skip_paused`: one entry per paused stretch, widened while it is the newest.
    pub(super) async fn skip_paused(&mut self, first: i64, own: i64) -> bool {
        let skipped = TickRecord::next(
            self.record.as_ref(),
            own,
            RunState::Skipped,
            self.node.record_session(),
            self.version,
        );
        if self.node.defects.paused_stretch_unnamed {
            let already = self.record.as_ref().is_some_and(|r| r.state == RunState::Skipped);
            let entry = (!already).then(|| self.node.entry(Some(own), Outcome::Skipped, "paused"));
            return self.commit(Some(skipped), entry, None, Vec::new(), false).await.is_ok();
        }
        let stretch = {
            let zk = self.node.zk();
            let head = zk.job.as_ref().and_then(|job| job.history.last().cloned());
            self.record
                .as_ref()
                .filter(|r| r.state == RunState::Skipped)
                .and(head)
                .filter(|head| head.why == "paused" && head.tick == self.record.as_ref().map(|r| r.tick))
                .map(|head| head.first.unwrap_or(own))
        };
        let mut entry = self.node.entry(Some(own), Outcome::Skipped, "paused");
        entry.first = Some(stretch.unwrap_or(first));
        self.commit(Some(skipped), Some(entry), None, Vec::new(), false)
            .await
            .is_ok()
    }

    /// Claims and runs `tick`: (taken, go on).
    pub(super) async fn run_tick(&mut self, tick: i64, handled: &mut Handled) -> (bool, bool) {
        let claim = TickRecord::next(
            self.record.as_ref(),
            tick,
            RunState::Running,
            self.node.record_session(),
            self.version,
        );
        if !self.claim(&claim, handled).await {
            return (false, false);
        }
        (true, self.run_claimed(claim).await)
    }

    pub(super) async fn claim(&mut self, claim: &TickRecord, handled: &mut Handled) -> bool {
        let node = self.node;
        let pending = self.pending.clone();
        let markers = match node.setup.policy {
            Policy::Allow if self.markers_on() => vec![Marker::Open(claim.tick.to_string())],
            _ => Vec::new(),
        };
        let unless_paused = !node.defects.claims_ignore_pause;
        match self
            .commit(Some(claim.clone()), None, None, markers, unless_paused)
            .await
        {
            Ok(_) => true,
            Err(WriteError::Transient) => {
                // hold.rs `claim`: confirm by reading the record again.
                node.trip().await;
                let (alive, job) = {
                    let zk = node.zk();
                    (zk.alive(self.ticket.session), zk.job.clone())
                };
                let read = job.filter(|_| alive).map(|job| (job.record(), job.version, job.mtime));
                match read {
                    Some((Ok(Some(record)), version, mtime)) if record == *claim && version == self.version + 1 => {
                        self.record = Some(claim.clone());
                        self.version = version;
                        self.claimed_at = Some(mtime);
                        true
                    }
                    // Not applied, or not known: the next hold of this node looks again.
                    _ => {
                        handled.unconfirmed = Some((claim.clone(), self.version));
                        self.pending = pending;
                        false
                    }
                }
            }
            Err(_) => {
                self.pending = pending;
                false
            }
        }
    }

    pub(super) async fn run_claimed(&mut self, claim: TickRecord) -> bool {
        let (node, ticket, tick) = (self.node, self.ticket, claim.tick);
        if node.is_lost(ticket) {
            return false;
        }
        if node.setup.policy == Policy::Replace {
            node.trip().await;
            let ticks = node.ticks.clone();
            let uncapped = node.defects.replace_uncapped;
            node.zk().clear_replaced(|asked, ctime| {
                let stands_for = if uncapped {
                    asked
                } else {
                    plan::credible(&ticks, asked, ctime).unwrap_or(asked)
                };
                stands_for <= tick
            });
        }
        let run = node.started(Some(tick), None, self.claimed_at);
        if node.setup.policy == Policy::Allow {
            let owner = node.clone();
            let session = claim.session;
            node.spawn(async move {
                let ended = owner.execute(std::future::pending(), std::future::pending()).await;
                let (state, entry) = owner.tally(Some(tick), &ended, run);
                let end = (tick, state.unwrap_or(RunState::Failed), session);
                let marker = (!owner.defects.no_run_markers).then(|| tick.to_string());
                owner.owe(entry, Some(end), marker);
            });
            return true;
        }
        let replaced = async {
            if node.setup.policy == Policy::Replace {
                tokio::select! {
                    biased;
                    () = node.replace.notified() => {}
                    () = node.replaced_after(tick) => {}
                }
            } else {
                std::future::pending::<()>().await;
            }
        };
        node.running.store(tick, Ordering::SeqCst);
        let ended = node.execute(node.lost(ticket), replaced).await;
        node.running.store(i64::MIN, Ordering::SeqCst);
        let made_way = ended.outcome == Outcome::Replaced;
        self.report(Some(tick), ended, None, run).await.is_some() && !made_way
    }
}
