//! Which ticks a beat runs: catch-up bound, skip policy, rewound records, clocks far ahead,
//! records of later versions, unconfirmed claims, dead runs.

use super::*;

/// Beats that come during a run longer than many periods add nothing; the first beat after it
/// decides by the clock then: it runs at most the catch-up bound of late ticks, counts the rest
/// as missed, and runs none of the stale ticks of the beats that came meanwhile.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_beat_after_a_long_run_keeps_the_catch_up_bound() {
    let server = ZkServer::start().unwrap();
    let log = Log::default();
    let node = Arc::new(Node::start(&server, 0, "long-run", Policy::OncePerTick, &log).await);
    let t = an_hour_ago();
    node.then(Act::Hold);
    node.at.store(t, Ordering::SeqCst);
    let first = tokio::spawn(fire(node.shared.clone()));
    wait_until("the first run started", || runs(&log).len() == 1).await;
    // The scheduler beats again a second later, while the run goes on: nothing to add.
    node.fire_at(t + SECOND).await;
    assert_eq!(runs(&log).len(), 1);
    // The run ends half a minute later; the next beat comes.
    node.at.store(t + 30 * SECOND, Ordering::SeqCst);
    node.release.notify_one();
    first.await.unwrap();
    node.fire_at(t + 30 * SECOND).await;

    let ran: Vec<i64> = runs(&log).iter().map(|(_, tick)| (tick - t) / SECOND).collect();
    let late: Vec<i64> = (30 - MAX_CATCH_UP as i64..=30).collect();
    assert_eq!(ran[0], 0);
    assert_eq!(&ran[1..], &late[..], "after the long run, only the latest ticks run");
    assert_eq!(
        node.shared.stats.missed(),
        29 - MAX_CATCH_UP as u64,
        "ticks 1 to 19 are counted as missed"
    );
}

/// Skip-policy nodes take ticks through the record like once-per-tick nodes: a node whose timer
/// fires after another node ran the tick skips it, whatever the policies of the two.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_skip_node_never_runs_a_tick_another_node_ran() {
    let server = ZkServer::start().unwrap();
    let log = Log::default();
    let once = Node::start(&server, 0, "mixed", Policy::OncePerTick, &log).await;
    let skip = Node::start(&server, 1, "mixed", Policy::Skip, &log).await;
    let other_skip = Node::start(&server, 2, "mixed", Policy::Skip, &log).await;
    let t = an_hour_ago();
    once.fire_at(t).await;
    skip.fire_at(t).await; // late timer: the tick already ran
    skip.fire_at(t + SECOND).await;
    once.fire_at(t + SECOND).await;
    other_skip.fire_at(t + SECOND).await;
    other_skip.fire_at(t + 2 * SECOND).await;
    skip.fire_at(t + 2 * SECOND).await;
    assert_eq!(runs(&log), vec![(0, t), (1, t + SECOND), (2, t + 2 * SECOND)]);
}

/// A tick no node ran (the once-per-tick node's lock wait ran out, say) and a skip node then
/// passed over is in the history as skipped, with the reason: it runs nowhere, but it is not
/// lost without a trace.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tick_a_skip_node_passes_over_is_in_the_history() {
    let server = ZkServer::start().unwrap();
    let log = Log::default();
    let once = Node::start(&server, 0, "passed", Policy::OncePerTick, &log).await;
    let skip = Node::start(&server, 1, "passed", Policy::Skip, &log).await;
    let t = an_hour_ago();
    once.fire_at(t).await;
    // Tick t+1 fires nowhere; the skip node's timer comes at t+2, the other node's late.
    skip.fire_at(t + 2 * SECOND).await;
    once.fire_at(t + SECOND).await;
    assert_eq!(runs(&log), vec![(0, t), (1, t + 2 * SECOND)]);
    let history = job_history(&once.shared.client, "passed").await.unwrap();
    assert_eq!(
        outcomes(&history),
        vec![
            (Some(t + 2 * SECOND), Outcome::Ok),
            (Some(t + SECOND), Outcome::Skipped),
            (Some(t), Outcome::Ok),
        ]
    );
    let reason = history[1].error.as_deref().unwrap_or_default();
    assert!(reason.contains("skip policy"), "the entry says why: {reason:?}");
}

/// A scheduler that fires twice within one tick (tokio-cron-scheduler can) runs it once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_skip_node_fired_twice_in_one_tick_runs_it_once() {
    let server = ZkServer::start().unwrap();
    let log = Log::default();
    let node = Node::start(&server, 0, "twice", Policy::Skip, &log).await;
    let t = an_hour_ago();
    node.fire_at(t).await;
    node.fire_at(t + 400).await;
    node.fire_at(t + SECOND).await;
    assert_eq!(runs(&log), vec![(0, t), (0, t + SECOND)]);
}

/// A node that missed ticks (its fires could not take the lock, say) does not run them late
/// when the record that would prove them untaken was deleted or rolled back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deleted_or_rolled_back_record_runs_no_tick_twice() {
    let server = ZkServer::start().unwrap();
    let zk = raw(&server).await;
    let log = Log::default();
    let a = Node::start(&server, 0, "rewound", Policy::OncePerTick, &log).await;
    let b = Node::start(&server, 1, "rewound", Policy::OncePerTick, &log).await;
    let t = an_hour_ago();
    a.fire_at(t).await;
    b.fire_at(t).await; // taken: b has handled up to t
    a.fire_at(t + SECOND).await;
    let (after_first, _) = zk.get_data(&record_path("rewound")).await.unwrap();
    a.fire_at(t + 2 * SECOND).await;
    a.fire_at(t + 3 * SECOND).await;
    // Rolled back to the record of t+1, byte for byte: b would run t+2 and t+3 again. The
    // ticks due when it was rolled back count as taken; b's next tick after them runs alone.
    zk.set_data(&record_path("rewound"), &after_first, None).await.unwrap();
    let u = tick_after_doubt(written(&zk, "rewound").await).await;
    b.fire_at(u).await;
    a.fire_at(u + SECOND).await;
    let history = job_history(&a.shared.client, "rewound").await.unwrap();
    assert!(
        history.iter().any(|e| e.outcome == Outcome::Missed && e.tick < Some(u)),
        "the ticks in doubt are in the history: {history:?}"
    );
    // Deleted: b has handled up to u and would run u+1 again.
    delete_tree(&zk, &record_path("rewound")).await;
    wait_until("the real clock reached u+2", || now_ms() >= u + 2 * SECOND).await;
    b.fire_at(u + 2 * SECOND).await;
    let at = |s: i64| t + s * SECOND;
    assert_eq!(
        runs(&log),
        vec![
            (0, at(0)),
            (0, at(1)),
            (0, at(2)),
            (0, at(3)),
            (1, u),
            (0, u + SECOND),
            (1, u + 2 * SECOND)
        ]
    );
}

/// A record restored while its tick was still running (a backup taken mid-run) proves no more
/// than a restored finished one: the node that settles it as lost does not run the ticks after
/// it, which ran already, and neither does a node after it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restored_running_record_runs_no_tick_twice() {
    let server = ZkServer::start().unwrap();
    let zk = raw(&server).await;
    let log = Log::default();
    let a = Arc::new(Node::start(&server, 0, "restored", Policy::OncePerTick, &log).await);
    let b = Node::start(&server, 1, "restored", Policy::OncePerTick, &log).await;
    let c = Node::start(&server, 2, "restored", Policy::OncePerTick, &log).await;
    let path = record_path("restored");
    let t = an_hour_ago();
    a.fire_at(t).await;
    b.fire_at(t).await; // taken: b has handled up to t
    c.fire_at(t).await; // and c too
                        // The backup is taken while a runs t+1.
    a.then(Act::Hold);
    a.at.store(t + SECOND, Ordering::SeqCst);
    let running = tokio::spawn(fire(a.shared.clone()));
    wait_until("a's run of t+1 started", || runs(&log).len() == 2).await;
    let (backup, _) = zk.get_data(&path).await.unwrap();
    let state = TickRecord::decode(&backup).unwrap().unwrap().state;
    assert_eq!(state, RunState::Running, "the backup shows the run going on");
    a.release.notify_one();
    running.await.unwrap();
    a.fire_at(t + 2 * SECOND).await;
    a.fire_at(t + 3 * SECOND).await;
    zk.set_data(&path, &backup, None).await.unwrap();
    let u = tick_after_doubt(written(&zk, "restored").await).await;
    b.fire_at(u).await;
    wait_until("the real clock reached u+1", || now_ms() >= u + SECOND).await;
    c.fire_at(u + SECOND).await;
    let at = |s: i64| t + s * SECOND;
    assert_eq!(
        runs(&log),
        vec![(0, at(0)), (0, at(1)), (0, at(2)), (0, at(3)), (1, u), (2, u + SECOND)]
    );
}

/// A node whose clock reads decades ahead takes the ticks due by ZooKeeper's clock, not its
/// own; and a record pushed far ahead by such a node (of an older version) stops no one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_clock_decades_ahead_neither_runs_future_ticks_nor_stops_the_job() {
    let server = ZkServer::start().unwrap();
    let zk = raw(&server).await;
    let log = Log::default();
    let decades = 75 * 365 * 86_400 * SECOND;
    let ahead = Node::with_offset(&server, 0, "future", Policy::OncePerTick, &log, decades).await;
    let right = Node::start(&server, 1, "future", Policy::OncePerTick, &log).await;
    ahead.fire_at(REAL).await;
    let ran = runs(&log);
    assert_eq!(ran.len(), 1, "the node ahead ran one tick: {ran:?}");
    assert!(
        ran[0].1 <= now_ms() + SECOND,
        "it ran a tick due now, not in {}",
        ran[0].1
    );
    // An older version's node wrote a tick of 2100; the record's write time gives it away.
    let year_2100 = 4_102_444_800 * SECOND;
    let stat = zk
        .set_data(
            &record_path("future"),
            format!("tick={year_2100} state=done").as_bytes(),
            None,
        )
        .await
        .unwrap();
    // The record counts for no tick past ZooKeeper's clock at its write (and the first tick
    // after may be taken anyway): the node with the right clock runs the tick after that
    // doubt. Fired at that tick, not at whatever second the real clock has reached, so how
    // many ticks came due meanwhile does not depend on the machine's speed.
    let u = tick_after_doubt(stat.mtime).await;
    right.fire_at(u).await;
    let ran = runs(&log);
    assert_eq!(
        ran.len(),
        2,
        "the node with the right clock still runs the job: {ran:?}"
    );
    assert_eq!(ran[1], (1, u), "{ran:?}");
    assert!(ran[1].1 > stat.mtime && ran[1].1 <= now_ms());
}

/// A record written by a later version, with a state and a key this version does not know, is
/// honoured (its tick is taken) and does not stop the job; its unknown key survives the rewrite.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_record_from_a_newer_version_is_honoured_and_its_keys_kept() {
    let server = ZkServer::start().unwrap();
    let zk = raw(&server).await;
    let log = Log::default();
    let node = Node::start(&server, 0, "newer", Policy::OncePerTick, &log).await;
    let t = an_hour_ago();
    let path = record_path("newer");
    node.fire_at(t - SECOND).await; // creates the record
    let (_, before) = zk.get_data(&path).await.unwrap();
    // Written as a scheduler node writes (stamped with the version it makes), by a newer one.
    let newer = format!(
        "tick={t} state=handed-over session=0x5 version={} shard=eu-1 note=kept",
        before.version + 1
    );
    let stat = zk
        .set_data(&path, newer.as_bytes(), Some(before.version))
        .await
        .unwrap();
    node.fire_at(t).await;
    node.fire_at(t + SECOND).await;
    assert_eq!(
        runs(&log),
        vec![(0, t - SECOND), (0, t + SECOND)],
        "t was taken by the newer node"
    );
    let (data, after) = zk.get_data(&path).await.unwrap();
    let record = TickRecord::decode(&data).unwrap().unwrap();
    assert_eq!((record.tick, &record.state), (t + SECOND, &RunState::Done));
    assert_eq!(record.other, vec!["shard=eu-1".to_owned(), "note=kept".to_owned()]);
    assert!(record.intact(after.version) && after.version > stat.version);
}

/// A claim whose answer never came, though the server applied it, is run by the node's next
/// fire (nobody else runs a tick the record shows taken); one that was not applied is offered
/// again like any tick.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unconfirmed_claim_is_settled_by_the_next_fire() {
    let server = ZkServer::start().unwrap();
    let zk = raw(&server).await;
    let log = Log::default();
    let node = Node::start(&server, 0, "unconfirmed", Policy::OncePerTick, &log).await;
    let path = record_path("unconfirmed");
    let t = an_hour_ago();
    node.fire_at(t).await;
    // The claim of t+1 that a lost answer left unconfirmed: applied on the server.
    let (data, stat) = zk.get_data(&path).await.unwrap();
    let previous = TickRecord::decode(&data).unwrap();
    let claim = TickRecord::next(
        previous.as_ref(),
        t + SECOND,
        RunState::Running,
        node.shared.client.session_id(),
        stat.version,
    );
    zk.set_data(&path, &claim.encode(), Some(stat.version)).await.unwrap();
    node.shared.serial.lock().await.unconfirmed = Some((claim, stat.version));
    node.fire_at(t + SECOND).await;
    // Not applied: the record stays at t+1 done.
    let (data, stat) = zk.get_data(&path).await.unwrap();
    let previous = TickRecord::decode(&data).unwrap();
    assert_eq!(
        previous.as_ref().map(|r| (r.tick, &r.state)),
        Some((t + SECOND, &RunState::Done))
    );
    let claim = TickRecord::next(
        previous.as_ref(),
        t + 2 * SECOND,
        RunState::Running,
        node.shared.client.session_id(),
        stat.version,
    );
    node.shared.serial.lock().await.unconfirmed = Some((claim, stat.version));
    node.fire_at(t + 2 * SECOND).await;
    let ticks: Vec<i64> = runs(&log).iter().map(|(_, tick)| (tick - t) / SECOND).collect();
    assert_eq!(ticks, vec![0, 1, 2]);
}

/// A run whose node died leaves the record `running`; the next node to hold the lock records it
/// as lost, and does not run that tick again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_whose_node_died_is_recorded_as_lost() {
    let server = ZkServer::start().unwrap();
    let zk = raw(&server).await;
    let log = Log::default();
    let node = Node::start(&server, 0, "orphan", Policy::OncePerTick, &log).await;
    let path = record_path("orphan");
    let t = an_hour_ago();
    node.fire_at(t - SECOND).await;
    let (_, stat) = zk.get_data(&path).await.unwrap();
    let dead = TickRecord::next(None, t, RunState::Running, Some(0x7f00_0000_0000_0001), stat.version);
    zk.set_data(&path, &dead.encode(), Some(stat.version)).await.unwrap();
    node.fire_at(t).await;
    assert_eq!(
        runs(&log),
        vec![(0, t - SECOND)],
        "the dead node's tick is not run again"
    );
    let shown = job_records(&node.shared.client).await.unwrap();
    assert_eq!(shown.len(), 1);
    assert_eq!((shown[0].tick_ms, shown[0].state.as_str()), (Some(t), "lost"));
    assert_eq!(shown[0].session.as_deref(), Some("0x7f00000000000001"));
}

/// The ticks `policy`/`catch_up` run when a fresh node starts five ticks after the last one
/// the record shows taken (the whole cluster was down meanwhile), and the missed count.
async fn after_downtime(job: &str, adjust: impl FnOnce(SingletonJob) -> SingletonJob) -> (Vec<i64>, u64) {
    let server = ZkServer::start().unwrap();
    let log = Log::default();
    let t = an_hour_ago();
    let before = Node::start(&server, 0, job, Policy::OncePerTick, &log).await;
    before.fire_at(t).await;
    let after = Node::custom(&server, 1, job, &log, 0, "* * * * * *", adjust).await;
    after.fire_at(t + 5 * SECOND).await;
    let ran = runs(&log).iter().skip(1).map(|(_, tick)| (tick - t) / SECOND).collect();
    (ran, after.shared.stats.missed())
}

/// Ticks missed while no node ran the job are handled on start-up by the catch-up policy, from
/// the record: all of them (up to the limit), the latest once, or none; the rest are counted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ticks_missed_while_the_cluster_was_down_follow_the_catch_up_policy() {
    use crate::scheduler::CatchUp;
    assert_eq!(after_downtime("all", |job| job).await, (vec![1, 2, 3, 4, 5], 0));
    assert_eq!(
        after_downtime("some", |job| job.catch_up(CatchUp::RunAll { limit: 2 })).await,
        (vec![3, 4, 5], 2)
    );
    assert_eq!(
        after_downtime("once", |job| job.catch_up(CatchUp::RunOnce)).await,
        (vec![4, 5], 3)
    );
    assert_eq!(
        after_downtime("none", |job| job.catch_up(CatchUp::Skip)).await,
        (vec![5], 4)
    );
}

/// Starts a backlog on `node`: it ran `t`, and its beat at `t+4` has the late ticks t+1 to t+3
/// and its own to run; the run of t+1 holds until released. Returns the beat's task once that
/// run has started.
async fn backlog_started(node: &Arc<Node>, t: i64, log: &Log) -> tokio::task::JoinHandle<()> {
    node.fire_at(t).await;
    node.then(Act::Hold);
    node.at.store(t + 4 * SECOND, Ordering::SeqCst);
    let beat = tokio::spawn(fire(node.shared.clone()));
    wait_until("the backlog's first run started", || runs(log).len() == 2).await;
    beat
}

/// A pause that comes while a backlog of late ticks runs stops the backlog: no run starts after
/// the pause is made, and the beat's own tick is taken as skipped.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pause_during_a_backlog_starts_no_further_run() {
    let server = ZkServer::start().unwrap();
    let log = Log::default();
    let node = Arc::new(Node::start(&server, 0, "backlog-paused", Policy::OncePerTick, &log).await);
    let t = an_hour_ago();
    let beat = backlog_started(&node, t, &log).await;
    assert_eq!(
        pause_job(&node.shared.client, "backlog-paused").await.unwrap(),
        Some(true)
    );
    node.release.notify_one();
    beat.await.unwrap();
    let ticks: Vec<i64> = runs(&log).iter().map(|(_, tick)| (tick - t) / SECOND).collect();
    assert_eq!(ticks, vec![0, 1], "nothing ran after the pause");
    let shown = job_records(&node.shared.client).await.unwrap();
    assert_eq!(
        (shown[0].tick_ms, shown[0].state.as_str()),
        (Some(t + 4 * SECOND), "skipped")
    );
}

/// The starting deadline is judged when each tick of a backlog starts, not once for the whole
/// backlog: a tick whose deadline passed while an earlier one ran is given up.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_backlog_tick_whose_deadline_passed_during_an_earlier_run_is_missed() {
    let server = ZkServer::start().unwrap();
    let log = Log::default();
    let deadline = |job: SingletonJob| job.starting_deadline(Duration::from_secs(5));
    let node = Arc::new(Node::custom(&server, 0, "backlog-deadline", &log, 0, "* * * * * *", deadline).await);
    let t = an_hour_ago();
    let beat = backlog_started(&node, t, &log).await;
    // The run of t+1 ends at t+8: t+2 is more than 5 s late by then; t+3 and t+4 are not.
    node.at.store(t + 8 * SECOND, Ordering::SeqCst);
    node.release.notify_one();
    beat.await.unwrap();
    let ticks: Vec<i64> = runs(&log).iter().map(|(_, tick)| (tick - t) / SECOND).collect();
    assert_eq!(ticks, vec![0, 1, 3, 4]);
    assert_eq!(node.shared.stats.missed(), 1, "t+2 was given up");
}

/// Under `BufferOne`, the ticks that come while the job runs collapse into one run right after
/// it; the others are recorded as missed, in the counters and the history.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn buffer_one_runs_one_buffered_tick_after_a_long_run() {
    let server = ZkServer::start().unwrap();
    let log = Log::default();
    let node = Arc::new(Node::start(&server, 0, "buffered", Policy::BufferOne, &log).await);
    let t = an_hour_ago();
    node.then(Act::Hold);
    node.at.store(t, Ordering::SeqCst);
    let first = tokio::spawn(fire(node.shared.clone()));
    wait_until("the first run started", || runs(&log).len() == 1).await;
    for second in 1..=3 {
        node.fire_at(t + second * SECOND).await;
    }
    node.at.store(t + 3 * SECOND + 500, Ordering::SeqCst);
    node.release.notify_one();
    first.await.unwrap();
    node.fire_at(t + 3 * SECOND + 500).await;
    node.fire_at(t + 4 * SECOND).await;
    let ticks: Vec<i64> = runs(&log).iter().map(|(_, tick)| (tick - t) / SECOND).collect();
    assert_eq!(ticks, vec![0, 3, 4]);
    assert_eq!(node.shared.stats.missed(), 2);
    let history = job_history(&node.shared.client, "buffered").await.unwrap();
    let missed = history
        .iter()
        .find(|e| e.outcome == Outcome::Missed)
        .expect("the missed ticks are in the history");
    assert_eq!(missed.tick, Some(t + 2 * SECOND));
    assert!(missed.error.as_deref().unwrap().starts_with("2 tick(s)"), "{missed:?}");
}

/// A tick not started within the starting deadline is given up, also the current one; the
/// record takes it as missed, so no other node runs it late.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ticks_past_the_starting_deadline_run_nowhere() {
    let server = ZkServer::start().unwrap();
    let log = Log::default();
    let deadline = |job: SingletonJob| job.starting_deadline(Duration::from_millis(1500));
    let every_five = "*/5 * * * * *";
    let a = Node::custom(&server, 0, "deadline", &log, 0, every_five, deadline).await;
    let b = Node::custom(&server, 1, "deadline", &log, 0, every_five, deadline).await;
    let t = an_hour_ago() / (5 * SECOND) * (5 * SECOND);
    a.fire_at(t).await;
    // Five ticks later: of the late ones, none is within 1.5 s; the current one runs.
    a.fire_at(t + 25 * SECOND).await;
    // The current tick seen 2 s late: given up, and taken as missed.
    a.fire_at(t + 32 * SECOND).await;
    let shown = job_records(&a.shared.client).await.unwrap();
    assert_eq!(
        (shown[0].tick_ms, shown[0].state.as_str()),
        (Some(t + 30 * SECOND), "missed")
    );
    b.fire_at(t + 32 * SECOND + 500).await;
    b.fire_at(t + 35 * SECOND).await;
    let ticks: Vec<i64> = runs(&log).iter().map(|(_, tick)| (tick - t) / SECOND).collect();
    assert_eq!(ticks, vec![0, 25, 35]);
    assert_eq!(a.shared.stats.missed(), 4 + 1, "ticks 5 to 20, then 30");
}

/// Under `Replace`, a later tick stops the run going on, on another node or on the same one,
/// and runs instead; the stopped run is recorded as replaced.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replace_stops_the_running_run_for_the_later_tick() {
    let server = ZkServer::start().unwrap();
    let log = Log::default();
    let a = Arc::new(Node::start(&server, 0, "latest", Policy::Replace, &log).await);
    let b = Arc::new(Node::start(&server, 1, "latest", Policy::Replace, &log).await);
    let t = an_hour_ago();
    // a's run of t would never end; b's tick t+1 takes over.
    a.then(Act::Hold);
    a.at.store(t, Ordering::SeqCst);
    let running = tokio::spawn(fire(a.shared.clone()));
    wait_until("a's run started", || runs(&log).len() == 1).await;
    b.at.store(t + SECOND, Ordering::SeqCst);
    let replacing = tokio::spawn(fire(b.shared.clone()));
    running.await.unwrap();
    replacing.await.unwrap();
    assert_eq!(runs(&log), vec![(0, t), (1, t + SECOND)]);

    // The same on one node: its own beat for t+3 stops its run of t+2.
    b.then(Act::Hold);
    b.at.store(t + 2 * SECOND, Ordering::SeqCst);
    let running = tokio::spawn(fire(b.shared.clone()));
    wait_until("b's run started", || runs(&log).len() == 3).await;
    b.fire_at(t + 3 * SECOND).await;
    running.await.unwrap();
    b.fire_at(t + 3 * SECOND).await;
    let ticks: Vec<i64> = runs(&log).iter().map(|(_, tick)| (tick - t) / SECOND).collect();
    assert_eq!(ticks, vec![0, 1, 2, 3]);
    let history = job_history(&a.shared.client, "latest").await.unwrap();
    let outcomes: Vec<(i64, Outcome)> = history
        .iter()
        .map(|e| ((e.tick.unwrap() - t) / SECOND, e.outcome.clone()))
        .collect();
    assert_eq!(
        outcomes,
        vec![
            (3, Outcome::Ok),
            (2, Outcome::Replaced),
            (1, Outcome::Ok),
            (0, Outcome::Replaced)
        ]
    );
    // Served requests are gone.
    let zk = raw(&server).await;
    let left: Vec<String> = zk.list_children(&record_path("latest")).await.unwrap();
    assert!(left.iter().all(|c| !c.starts_with("replace-")), "{left:?}");
}

/// A replace request for a tick another policy's node took is stale: the next holder deletes
/// it, whatever its policy, so it does not stay when no node under `Replace` runs again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stale_replace_request_is_deleted_by_the_next_holder_of_any_policy() {
    let server = ZkServer::start().unwrap();
    let log = Log::default();
    let a = Node::start(&server, 0, "stale", Policy::OncePerTick, &log).await;
    let t = an_hour_ago();
    a.fire_at(t).await;
    // As a node under `Replace` asks while the lock is busy with the run of t.
    let zk = raw(&server).await;
    let request = format!("{}/replace-", record_path("stale"));
    zk.create(
        &request,
        format!("tick={t}").as_bytes(),
        &zk::CreateMode::PersistentSequential.with_acls(zk::Acls::anyone_all()),
    )
    .await
    .unwrap();
    a.fire_at(t + SECOND).await;
    let left: Vec<String> = zk.list_children(&record_path("stale")).await.unwrap();
    assert!(left.iter().all(|c| !c.starts_with("replace-")), "{left:?}");
    assert_eq!(runs(&log), vec![(0, t), (0, t + SECOND)]);
}

/// Under `Allow`, a tick runs when it comes although the run of an earlier one is still going;
/// each tick still runs once, and each run's end is recorded once it has ended.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn allow_overlaps_runs_and_still_runs_each_tick_once() {
    let server = ZkServer::start().unwrap();
    let log = Log::default();
    let a = Node::start(&server, 0, "overlap", Policy::Allow, &log).await;
    let b = Node::start(&server, 1, "overlap", Policy::Allow, &log).await;
    let t = an_hour_ago();
    a.then(Act::Hold);
    a.fire_at(t).await; // returns while its run goes on
    b.fire_at(t).await; // taken already
    b.fire_at(t + SECOND).await;
    a.fire_at(t + SECOND).await;
    assert_eq!(
        runs(&log),
        vec![(0, t), (1, t + SECOND)],
        "t + 1 ran while t was still running"
    );
    // Each end is written under the lock once its run has ended: b's first, then a's.
    let ends = |count: usize| {
        let client = a.shared.client.clone();
        async move {
            let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
            loop {
                let history = job_history(&client, "overlap").await.unwrap();
                if history.len() == count {
                    return history;
                }
                assert!(
                    tokio::time::Instant::now() < deadline,
                    "{count} end(s) written: {history:?}"
                );
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
    };
    ends(1).await;
    a.release.notify_one();
    let history = ends(2).await;
    let mut ended: Vec<(i64, Outcome)> = history
        .iter()
        .map(|e| ((e.tick.unwrap() - t) / SECOND, e.outcome.clone()))
        .collect();
    ended.sort_by_key(|(tick, _)| *tick);
    assert_eq!(ended, vec![(0, Outcome::Ok), (1, Outcome::Ok)]);
    assert_eq!(history[0].tick, Some(t), "the long run ended last");
    let shown = job_records(&a.shared.client).await.unwrap();
    assert_eq!((shown[0].tick_ms, shown[0].state.as_str()), (Some(t + SECOND), "done"));
}
