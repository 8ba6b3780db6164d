//! A node's beat, as `fire.rs` makes it: the tick due by the node's clock (capped by
//! ZooKeeper's), the job's lock by the policy, then under the lock what the scheduler's planner
//! decides ([`plan`]), carried out by a [`Hold`].

use std::sync::atomic::Ordering;
use std::sync::Arc;

use super::super::history::Outcome;
use super::super::plan::{self, Plan};
use super::super::policy::Policy;
use super::super::ticks::tick_time;
use super::ensemble::{Entry, Ticket};
use super::hold::Hold;
use super::node::{Handled, Node};

impl Node {
    /// A beat (fire.rs `fire`).
    pub async fn beat(self: Arc<Self>) {
        self.gate().await;
        let server_now = Some(self.zk().now());
        let now_tick = self
            .ticks
            .tick_at(tick_time(self.local_ms()))
            .and_then(|own| plan::takeable(&self.ticks, own, server_now));
        let Ok(mut handled) = self.serial.try_lock() else {
            if let Some(own) = now_tick.filter(|own| self.seen.fetch_max(*own, Ordering::SeqCst) < *own) {
                if self.setup.policy == Policy::Replace && own > self.running.load(Ordering::SeqCst) {
                    self.replace.notify_waiters();
                }
            }
            return;
        };
        if let Some(own) = now_tick {
            self.seen.fetch_max(own, Ordering::SeqCst);
        }
        let fresh =
            |handled: &Handled, tick: Option<i64>| tick.filter(|own| handled.last.is_none_or(|last| *own > last));
        let due = fresh(&handled, now_tick);
        let requested = self.zk().job.as_ref().is_some_and(|job| !job.triggers.is_empty());
        if due.is_none() && !requested {
            return;
        }
        let ticket = match self.setup.policy {
            Policy::Skip => match self.try_acquire().await {
                Some(ticket) => ticket,
                None => {
                    if let Some(own) = due {
                        handled.last = Some(own);
                    }
                    return;
                }
            },
            _ => {
                let wait = self.wait_for_lock(due);
                let free = match (self.setup.policy, due) {
                    (Policy::Replace, Some(own)) => self.take_or_replace(own).await,
                    _ => None,
                };
                let taken = match free {
                    Some(ticket) => Some(ticket),
                    None => self.acquire(wait).await,
                };
                match taken {
                    Some(ticket) => ticket,
                    None => return,
                }
            }
        };
        let own = fresh(&handled, self.ticks.tick_at(tick_time(self.local_ms())));
        let decided = self.under_lock(ticket, &mut handled, own).await;
        handled.last = handled.last.max(decided);
        self.zk().release(ticket);
    }

    pub(super) async fn take_or_replace(&self, own: i64) -> Option<Ticket> {
        if let Some(ticket) = self.try_acquire().await {
            return Some(ticket);
        }
        self.trip().await;
        let local = self.local_ms();
        let mut zk = self.zk();
        let asked = if self.defects.replace_uncapped {
            // As before the fix: the node's own tick by its own clock.
            self.ticks.tick_at(tick_time(local))
        } else {
            plan::takeable(&self.ticks, own, Some(zk.now()))
        };
        if let Some(asked) = asked {
            zk.ask_to_replace(asked);
        }
        None
    }

    /// The replace requests, with the tick each can stand for.
    pub(super) fn replace_requests(&self) -> Vec<i64> {
        let zk = self.zk();
        zk.replace_requests()
            .into_iter()
            .map(|(asked, ctime)| {
                if self.defects.replace_uncapped {
                    asked
                } else {
                    plan::credible(&self.ticks, asked, ctime).unwrap_or(asked)
                }
            })
            .collect()
    }

    pub(super) async fn replaced_after(&self, running: i64) {
        let mut changes = self.zk().changes();
        loop {
            if self.replace_requests().iter().any(|tick| *tick > running) {
                return;
            }
            if changes.changed().await.is_err() {
                return std::future::pending().await;
            }
        }
    }

    /// Under one hold of the lock (fire.rs `under_lock`).
    pub(super) async fn under_lock(
        self: &Arc<Self>,
        ticket: Ticket,
        handled: &mut Handled,
        own: Option<i64>,
    ) -> Option<i64> {
        self.trip().await;
        let state = self.zk().read_state();
        let record = state.record.ok()?;
        let mut proven = record.as_ref().is_some_and(|r| r.intact(state.version));
        let mut hold = Hold::over(self, ticket, record, state.version);
        let mut runs = state.runs;
        if !self.pay(&mut hold, &mut runs).await {
            return None;
        }
        if !hold.settle_dead_runs(&runs).await {
            return None;
        }
        for request in &state.triggers {
            if !hold.run_requested(request).await {
                return None;
            }
        }
        let own = own?;
        if let Some((claim, over)) = handled.unconfirmed.take() {
            if hold.record.as_ref() == Some(&claim) && hold.version == over + 1 {
                hold.claimed_at = Some(state.mtime);
                if !hold.run_claimed(claim).await {
                    return None;
                }
            }
        }
        if !hold.settle_orphan(&runs).await {
            return None;
        }
        if let Some(record) = hold.record.as_ref().filter(|_| !self.defects.stale_requests_kept) {
            if let Some(taken) = plan::credible(&self.ticks, record.tick, state.mtime) {
                self.trip().await;
                let ticks = self.ticks.clone();
                self.zk()
                    .clear_replaced(|asked, ctime| plan::credible(&ticks, asked, ctime).unwrap_or(asked) <= taken);
            }
        }
        if self.defects.settle_before_proven {
            proven = hold.record.as_ref().is_some_and(|r| r.intact(hold.version));
        }
        let server = Some(self.zk().now());
        let own = plan::takeable(&self.ticks, own, server)?;
        let (mut paused, mut written, mut ever_written) = (state.paused, state.mtime, state.version > 0);
        let mut done = None;
        loop {
            let tick = hold.record.as_ref().map(|r| r.tick);
            let taken = plan::Taken::judge(&self.ticks, tick, written, proven, ever_written);
            let clocks = plan::Clocks {
                local: self.local_ms(),
                server: if self.defects.deadline_by_local_clock {
                    None
                } else {
                    Some(self.zk().now())
                },
            };
            let beat = plan::Beat {
                ticks: &self.ticks,
                policy: self.setup.policy,
                catch_up: self.setup.catch_up,
                starting_deadline: self.setup.deadline,
                clocks,
                own,
                since: handled.last.max(done),
                recorded: taken.up_to(),
                paused,
            };
            let planned = plan::plan(&beat);
            let (due, missed, passed, floor) = match planned {
                Plan::Taken { .. } => {
                    let in_doubt = taken.in_doubt.filter(|_| !self.defects.doubt_only_with_a_claim);
                    if let Some(last) = in_doubt {
                        for gap in plan::gaps(&self.ticks, &taken, written, self.named(), None, None) {
                            hold.pending.push(self.gap_entry(&gap));
                        }
                        if !hold.take_missed(last).await && !self.defects.handled_before_written {
                            return done;
                        }
                    }
                    return Some(own);
                }
                Plan::Paused => {
                    if !self.defects.doubt_only_with_a_claim {
                        for gap in plan::gaps(&self.ticks, &taken, written, self.named(), None, None) {
                            hold.pending.push(self.gap_entry(&gap));
                        }
                    }
                    let first = taken
                        .up_to()
                        .and_then(|up_to| self.ticks.after(up_to))
                        .filter(|first| *first <= own);
                    let skipped = hold.skip_paused(first.unwrap_or(own), own).await;
                    return if skipped || self.defects.handled_before_written {
                        Some(own)
                    } else {
                        done
                    };
                }
                Plan::Run {
                    due,
                    missed,
                    passed,
                    floor,
                } => (due, missed, passed, floor),
            };
            self.note_deadline_misses(&beat, &due);
            done = done.max(floor);
            let passed = if self.defects.skip_passes_silently {
                None
            } else {
                passed
            };
            let mut given_up = None;
            for gap in plan::gaps(
                &self.ticks,
                &taken,
                written,
                self.named(),
                passed.as_ref(),
                missed.as_ref(),
            ) {
                if !matches!(gap.why, plan::Why::InDoubt { .. }) {
                    given_up = given_up.max(Some(gap.last));
                }
                hold.pending.push(self.gap_entry(&gap));
            }
            if self.defects.handled_before_written {
                done = done.max(given_up);
            }
            let Some(&next) = due.first() else {
                if let Some(last) = missed.map(|m| m.last) {
                    if hold.take_missed(last).await {
                        done = done.max(given_up);
                    }
                }
                return done;
            };
            let ran = hold.run_tick(next, handled).await;
            if ran.0 {
                done = done.max(given_up).max(Some(next));
            }
            if !ran.1 || due.len() == 1 {
                return done;
            }
            if self.defects.backlog_without_reread {
                continue;
            }
            self.trip().await;
            let state = self.zk().read_state();
            let Ok(record) = state.record else {
                return done;
            };
            hold.record = record;
            hold.version = state.version;
            paused = state.paused;
            written = state.mtime;
            ever_written = state.version > 0;
            proven = hold.record.as_ref().is_some_and(|r| r.intact(hold.version));
        }
    }

    /// fire.rs `gap_entry`.
    pub(super) fn gap_entry(&self, gap: &plan::Gap) -> Entry {
        let (outcome, why) = match gap.why {
            plan::Why::InDoubt { open: true, .. } => (Outcome::Missed, "in doubt, open"),
            plan::Why::InDoubt { .. } => (Outcome::Missed, "in doubt"),
            plan::Why::Passed => (Outcome::Skipped, "passed over"),
            plan::Why::GaveUp => (Outcome::Missed, "given up"),
        };
        let mut entry = self.entry(Some(gap.last), outcome, why);
        entry.first = Some(gap.first);
        entry
    }

    /// fire.rs `named`: the latest tick the history names.
    pub(super) fn named(&self) -> Option<i64> {
        let zk = self.zk();
        zk.job
            .as_ref()
            .and_then(|job| job.history.iter().filter_map(|e| e.tick).max())
    }

    /// Notes the ticks this beat gives up because of the starting deadline alone.
    pub(super) fn note_deadline_misses(&self, beat: &plan::Beat<'_>, due: &[i64]) {
        if beat.starting_deadline.is_none() {
            return;
        }
        let without = plan::Beat {
            starting_deadline: None,
            ..beat.clone()
        };
        let Plan::Run { due: would, .. } = plan::plan(&without) else {
            return;
        };
        let given_up: Vec<i64> = would.into_iter().filter(|tick| !due.contains(tick)).collect();
        if let (Some(first), Some(last)) = (given_up.first(), given_up.last()) {
            let deadline = beat.starting_deadline.map_or(0, |d| d.as_millis() as i64);
            let mut zk = self.zk();
            let now = zk.now();
            zk.journal.deadline_misses.push((deadline, now, *first, *last));
        }
    }
}
