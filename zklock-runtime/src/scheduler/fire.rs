//! What a node does on each beat of a singleton job: notice operators' requests, decide which
//! ticks are due, take them under the job's lock, run them, record how they ended.
//!
//! tokio-cron-scheduler calls [`fire`] once a second (the *beat*); the job's own schedule, in
//! its time zone, is read here ([`Ticks`]), so that a zone's offset changes are followed and a
//! run-now request is noticed within a second.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use futures_util::FutureExt;
use tracing::{debug, error, warn};

use super::history::{self, HistoryEntry, Outcome};
use super::hold::Hold;
use super::node::{ms_of, Handled, Shared};
use super::outbox;
use super::plan::{self, Plan};
use super::policy::Policy;
use super::registration::Job;
use super::store::{SPEC, TRIGGER_PREFIX};
use super::ticks::{show, Missed};
use crate::engine::guard::LockGuard;
use crate::error::LockError;
use zookeeper_client as zk;

/// Entry point of every beat.
pub(crate) async fn fire(shared: Arc<Shared>) {
    let _in_flight = shared.stats.fire_started();
    // This node's tick, but none past those due by ZooKeeper's clock (as last learnt): a node
    // whose clock runs ahead must not see a new tick, and stop its own run for it under
    // `Replace`, before the tick comes for the others.
    let server_now = shared.client.latest().and_then(|session| session.server_now_ms());
    shared.note_next_ticks();
    let now_tick = shared
        .ticks
        .tick_at(shared.clock.now())
        .and_then(|own| plan::takeable(&shared.ticks, own, server_now));
    // One beat at a time on this node: one under way (waiting for the lock, or running) reads
    // the clock again when it is done, so beats that come meanwhile have nothing to add. Under
    // the skip policy, a tick that comes while this node is still running is skipped.
    let Ok(mut handled) = shared.serial.try_lock() else {
        if let Some(own) = now_tick.filter(|own| shared.seen.fetch_max(*own, Ordering::SeqCst) < *own) {
            match shared.policy {
                Policy::Skip => {
                    shared.stats.skipped();
                    debug!(target: "zklock::scheduler", job = %shared.name, tick = %show(own), "skipped: the previous run is still going on this node");
                }
                Policy::Replace if own > shared.running.load(Ordering::SeqCst) => shared.replace.notify_waiters(),
                _ => {}
            }
        }
        return;
    };
    if let Some(own) = now_tick {
        shared.seen.fetch_max(own, Ordering::SeqCst);
    }
    let fresh = |handled: &Handled, tick: Option<i64>| tick.filter(|own| handled.last.is_none_or(|last| *own > last));
    let due = fresh(&handled, now_tick);
    let requested = look_for_requests(&shared, &mut handled).await;
    if due.is_none() && !requested {
        return;
    }
    let guard = match shared.policy {
        Policy::Skip => match shared.lock.try_acquire().await {
            Ok(Some(guard)) => guard,
            Ok(None) => {
                if let Some(own) = due {
                    shared.stats.skipped();
                    handled.last = Some(own);
                    debug!(target: "zklock::scheduler", job = %shared.name, tick = %show(own), "skipped: running on another node");
                }
                return;
            }
            Err(err) => {
                shared.stats.failed();
                warn!(target: "zklock::scheduler", job = %shared.name, error = %err, "could not try the job's lock");
                return;
            }
        },
        Policy::OncePerTick | Policy::BufferOne | Policy::Replace | Policy::Allow => {
            let wait = shared.wait_for_lock(due);
            let free = match (shared.policy, due) {
                (Policy::Replace, Some(own)) => take_or_replace(&shared, own).await,
                _ => None,
            };
            let taken = match free {
                Some(guard) => Ok(guard),
                None => shared.lock.acquire_timeout(wait).await,
            };
            match taken {
                Ok(guard) => guard,
                Err(LockError::Timeout { .. }) => {
                    if let Some(own) = due {
                        shared.stats.skipped();
                        debug!(target: "zklock::scheduler", job = %shared.name, tick = %show(own),
                            "skipped: the job's lock stayed busy for {wait:?}; a later beat offers the tick again");
                    }
                    return;
                }
                Err(err) => {
                    shared.stats.failed();
                    warn!(target: "zklock::scheduler", job = %shared.name, error = %err, "could not take the job's lock");
                    return;
                }
            }
        }
    };
    // The lock may have taken a while: decide by the clock now.
    let own = fresh(&handled, shared.ticks.tick_at(shared.clock.now()));
    let decided = under_lock(&shared, &guard, &mut handled, own).await;
    handled.last = handled.last.max(decided);
    drop(guard);
}

/// Under [`Policy::Replace`]: the job's lock if it is free; otherwise asks the run going on to
/// make way for `own` (the caller then waits for the lock).
async fn take_or_replace(shared: &Shared, own: i64) -> Option<LockGuard> {
    if let Ok(Some(guard)) = shared.lock.try_acquire().await {
        return Some(guard);
    }
    let asked = async {
        let session = shared.client.session(None).await.ok()?;
        // Ask for no tick past those due by ZooKeeper's clock (readers cap it too, by the
        // request's creation time, for requests of nodes that do not).
        let own = plan::takeable(&shared.ticks, own, session.server_now_ms())?;
        let zk = session.zk().ok()?;
        shared
            .store
            .ask_to_replace(&zk, shared.client.inner.config.acls(), own)
            .await
            .ok()
    };
    if asked.await.is_some() {
        debug!(target: "zklock::scheduler", job = %shared.name, tick = %show(own), "the job is running: asked the run to make way");
    }
    None
}

/// Lists the job node's children again if they changed since the last look (or were never
/// looked at), and settles the job's registration when it is due ([`Registration`]); tells
/// whether run-now requests wait.
async fn look_for_requests(shared: &Shared, handled: &mut Handled) -> bool {
    let requests = &mut handled.requests;
    let changed = match requests.watch.as_mut() {
        Some(watch) => watch.as_mut().now_or_never().is_some(),
        None => true,
    };
    if !changed && !requests.registration.due(requests.has_spec) {
        return requests.triggers;
    }
    let Ok(session) = shared.client.session(None).await else {
        return requests.triggers;
    };
    let Ok(zk) = session.zk() else {
        return requests.triggers;
    };
    let acls = shared.client.inner.config.acls();
    if changed {
        requests.watch = None;
        let mut listed = zk.list_and_watch_children(&shared.store.path).await;
        if let Err(zk::Error::NoNode) = listed {
            // Not created yet (or removed): create it and look again.
            if let Err(err) = shared.store.create(&zk, acls).await {
                debug!(target: "zklock::scheduler", job = %shared.name, error = %err, "could not create the job's node");
            }
            listed = zk.list_and_watch_children(&shared.store.path).await;
        }
        match listed {
            Ok((children, watch)) => {
                requests.watch = Some(Box::pin(watch.changed()));
                requests.triggers = children.iter().any(|c| c.starts_with(TRIGGER_PREFIX));
                requests.has_spec = children.iter().any(|c| c == SPEC);
            }
            Err(err) => {
                debug!(target: "zklock::scheduler", job = %shared.name, error = %err, "could not list the job's requests");
                return requests.triggers;
            }
        }
    }
    if requests.registration.due(requests.has_spec) {
        let job = Job {
            name: &shared.name,
            spec: &shared.spec,
            store: &shared.store,
            session_id: shared.client.session_id(),
        };
        requests
            .registration
            .settle(&job, &zk, acls, session.server_now_ms())
            .await;
    }
    requests.triggers
}

/// The latest tick that may be taken now ([`plan::takeable`]); warns once when this node's
/// clock runs so far ahead of ZooKeeper's that its own tick may not be taken.
fn cap_by_server_clock(shared: &Shared, server_now: Option<i64>, own: i64) -> Option<i64> {
    let capped = plan::takeable(&shared.ticks, own, server_now);
    if capped != Some(own) && !shared.clock_ahead_reported.swap(true, Ordering::Relaxed) {
        warn!(target: "zklock::scheduler", job = %shared.name, tick = %show(own), server_time = ?server_now.map(show),
            "this node's clock is ahead of ZooKeeper's; it takes only ticks due by ZooKeeper's clock (sync the clocks)");
    }
    capped
}

/// Warns when the record claims a tick past what it can stand for ([`plan::credible`] by its
/// write time `written_ms`), as only a node with a clock far ahead writes.
fn warn_if_ahead(shared: &Shared, recorded: i64, taken: plan::Taken, written_ms: i64) {
    if taken.credible != Some(recorded) {
        warn!(target: "zklock::scheduler", job = %shared.name, recorded = %show(recorded), written = %show(written_ms),
            "the record claims a tick far ahead of when it was written (a node's clock ran ahead); honouring only the ticks due by then");
    }
}

/// Puts the history entries for the ticks a beat leaves unrun ([`plan::gaps`]) into the
/// hold's next write; returns the last of those given up or passed over (in doubt they are
/// taken already).
fn name_gaps(
    hold: &mut Hold<'_>,
    taken: &plan::Taken,
    written: i64,
    passed: Option<&Missed>,
    missed: Option<&Missed>,
) -> Option<i64> {
    let shared = hold.shared;
    let mut given_up = None;
    for gap in plan::gaps(&shared.ticks, taken, written, named(hold), passed, missed) {
        if gap.why == plan::Why::GaveUp {
            shared.stats.gave_up(gap.count);
        }
        if !matches!(gap.why, plan::Why::InDoubt { .. }) {
            given_up = given_up.max(Some(gap.last));
        }
        hold.pending.push(gap_entry(shared, &gap));
    }
    given_up
}

/// The latest tick the history names: where a doubt starts when the record was emptied
/// ([`plan::Taken::doubt`]).
fn named(hold: &Hold<'_>) -> Option<i64> {
    history::latest_tick(&hold.history)
}

/// The history entry for a run of ticks not run ([`plan::gaps`]), with the reason, and a log
/// line.
fn gap_entry(shared: &Shared, gap: &plan::Gap) -> HistoryEntry {
    let (first, last, count) = (show(gap.first), show(gap.last), gap.count);
    let (outcome, reason) = match gap.why {
        plan::Why::InDoubt { written, open } => {
            let which = if open {
                format!("the ticks up to {last}")
            } else {
                format!("the ticks from {first} to {last}")
            };
            warn!(target: "zklock::scheduler", job = %shared.name, %first, %last, open,
                "the tick record was restored or edited: ticks up to last may have run before; none is run now");
            let entry = shared.entry(Some(gap.last), Outcome::Missed).because(format!(
                "the tick record was restored or edited at {}: whether {which} ran before is unknown; none is run again",
                show(written)
            ));
            return if open { entry } else { entry.starting_at(gap.first) };
        }
        plan::Why::Passed => {
            debug!(target: "zklock::scheduler", job = %shared.name, %first, %last, count,
                "skipped: ticks that came while the job's lock was busy (skip policy)");
            (Outcome::Skipped, format!(
                "{count} tick(s) from {first} to {last} came while the job's lock was busy and are not run (skip policy)"
            ))
        }
        plan::Why::GaveUp => {
            warn!(target: "zklock::scheduler", job = %shared.name, %first, %last, count,
                "missed: giving up ticks from first to last (catch-up policy or starting deadline)");
            (
                Outcome::Missed,
                format!(
                    "{count} tick(s) from {first} to {last} given up (catch-up policy {:?}, starting deadline {:?})",
                    shared.catch_up, shared.starting_deadline
                ),
            )
        }
    };
    shared
        .entry(Some(gap.last), outcome)
        .starting_at(gap.first)
        .because(reason)
}

/// Under one hold of the job's lock: serves run-now requests, settles what the record says
/// about earlier runs, then runs in order every tick after `handled.last` up to `own` that
/// nobody took yet (only `own` when the record cannot prove which earlier ticks are untaken),
/// as [`plan::plan`] decides.
///
/// Returns the latest tick this node is done with (run, found taken, or given up), or `None`
/// when it could not decide anything; ticks after the returned one are offered again later.
async fn under_lock(shared: &Arc<Shared>, guard: &LockGuard, handled: &mut Handled, own: Option<i64>) -> Option<i64> {
    let fail = |what: &str, err: &dyn std::fmt::Display| {
        shared.stats.failed();
        warn!(target: "zklock::scheduler", job = %shared.name, error = %err, "{what}");
    };
    let zk = match guard.zk() {
        Ok(zk) => zk,
        Err(err) => {
            fail("no ZooKeeper session for the tick record", &err);
            return None;
        }
    };
    let state = match shared.store.read_state(&zk, shared.client.inner.config.acls()).await {
        Ok(state) => state,
        Err(err) => {
            fail("could not read the tick record", &err);
            return None;
        }
    };
    shared.stats.saw_paused(state.paused);
    let record = match state.record {
        Ok(record) => record,
        Err(reason) => {
            shared.stats.failed();
            error!(target: "zklock::scheduler", job = %shared.name, path = %shared.store.path, %reason,
                "the tick record is unreadable; not running (fix it, or reset the job: `zklock jobs reset`)");
            return None;
        }
    };
    // Whether the record was written by a scheduler node (else the ticks due when it was
    // written are in doubt) is judged on the record as read, before this hold writes over it.
    let proven = record.as_ref().is_some_and(|r| r.intact(state.stat.version));
    let mut hold = Hold::over(shared, guard, &zk, record, state.stat.version, state.history);

    // What this node owes first (so that its own runs are not taken for dead ones), then
    // the runs whose node's session ended before they reported back.
    let mut runs = state.runs;
    if !outbox::pay(&mut hold, &mut runs).await {
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
    // Earlier runs: our own claim whose answer was lost, or someone's run that never reported.
    if !hold.settle_earlier_runs(handled.unconfirmed.take(), &runs).await {
        return None;
    }
    if state.replace_requests {
        hold.clear_stale_replace_requests(state.stat.mtime).await;
    }

    let own = cap_by_server_clock(shared, guard.server_now_ms(), own)?;
    let (mut paused, mut written) = (state.paused, state.stat.mtime);
    let mut ever_written = state.stat.version > 0;
    let (mut proven, mut first) = (proven, true);
    // The latest tick this hold is done with.
    let mut done = None;
    // One tick at a time: between the runs of a backlog the state is read again and the plan
    // made again, so a pause or a starting deadline that passed during a run is honoured.
    loop {
        let tick = hold.record.as_ref().map(|record| record.tick);
        let taken = plan::Taken::judge(&shared.ticks, tick, written, proven, ever_written);
        if let Some(tick) = tick {
            shared.stats.saw_recorded(tick);
            warn_if_ahead(shared, tick, taken, written);
        }
        let beat = plan::Beat {
            ticks: &shared.ticks,
            policy: shared.policy,
            catch_up: shared.catch_up,
            starting_deadline: shared.starting_deadline,
            clocks: plan::Clocks {
                local: ms_of(shared.clock.now()),
                server: guard.server_now_ms(),
            },
            own,
            since: handled.last.max(done),
            recorded: taken.up_to(),
            paused,
        };
        let (due, missed, passed, floor) = match plan::plan(&beat) {
            Plan::Taken { recorded } => {
                // Taken only in doubt: the doubt goes into the history once, with a record
                // that now proves the ticks up to it taken.
                if let Some(last) = taken.in_doubt {
                    name_gaps(&mut hold, &taken, written, None, None);
                    if !hold.take_missed(last).await {
                        return done;
                    }
                }
                if first {
                    shared.stats.skipped();
                    debug!(target: "zklock::scheduler", job = %shared.name, tick = %show(own), recorded = %show(recorded), "skipped: tick already taken");
                }
                return Some(own);
            }
            Plan::Paused => {
                name_gaps(&mut hold, &taken, written, None, None);
                let first = taken
                    .up_to()
                    .and_then(|up_to| shared.ticks.after(up_to))
                    .filter(|first| *first <= own);
                // Unwritten, the paused tick is offered again.
                let skipped = hold.skip_paused(first.unwrap_or(own), own).await;
                return if skipped { Some(own) } else { done };
            }
            Plan::Run {
                due,
                missed,
                passed,
                floor,
            } => (due, missed, passed, floor),
        };
        done = done.max(floor);
        let given_up = name_gaps(&mut hold, &taken, written, passed.as_ref(), missed.as_ref());
        // The ticks given up count as done only once their history entry is written (with the
        // next claim, or the missed record): otherwise a later beat names them again.
        let Some(&next) = due.first() else {
            // Nothing runs: take the last missed tick, so that no node runs it.
            if let Some(last) = missed.map(|m| m.last) {
                if hold.take_missed(last).await {
                    done = done.max(given_up);
                }
            }
            return done;
        };
        let ran = hold.run_tick(next, handled).await;
        if ran.taken {
            done = done.max(given_up).max(Some(next));
        }
        if !ran.go_on || due.len() == 1 {
            return done;
        }
        let Some(state) = hold.reread().await else {
            return done;
        };
        paused = state.paused;
        written = state.stat.mtime;
        ever_written = state.stat.version > 0;
        proven = hold.record.as_ref().is_some_and(|r| r.intact(hold.version));
        first = false;
    }
}
