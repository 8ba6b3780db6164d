//! What operators' requests do to the nodes running a job, and what the history keeps:
//! pause and resume, run-now requests, reset and removal, run outcomes, registrations that
//! differ, and time zones across daylight saving changes.

use super::*;
use crate::scheduler::{remove_job, reset_job, SchedulerError};

/// A paused job runs on no node; each paused tick is taken as skipped (one history entry, from
/// the first to the last, for the whole pause), and none of them is replayed after the resume.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_job_runs_nowhere_and_resumes_without_replaying() {
    let server = ZkServer::start().unwrap();
    let log = Log::default();
    let a = Node::start(&server, 0, "paused", Policy::OncePerTick, &log).await;
    let b = Node::start(&server, 1, "paused", Policy::Skip, &log).await;
    let t = an_hour_ago();
    a.fire_at(t).await;
    assert_eq!(pause_job(&a.shared.client, "paused").await.unwrap(), Some(true));
    assert_eq!(
        pause_job(&a.shared.client, "paused").await.unwrap(),
        Some(false),
        "paused already"
    );
    for second in 1..=3 {
        a.fire_at(t + second * SECOND).await;
        b.fire_at(t + second * SECOND).await;
    }
    let shown = job_records(&a.shared.client).await.unwrap();
    assert!(shown[0].paused);
    assert_eq!(shown[0].state, "skipped");
    assert!(resume_job(&b.shared.client, "paused").await.unwrap());
    assert!(
        !resume_job(&b.shared.client, "paused").await.unwrap(),
        "resumed already"
    );
    b.fire_at(t + 4 * SECOND).await;
    a.fire_at(t + 5 * SECOND).await;
    assert_eq!(runs(&log), vec![(0, t), (1, t + 4 * SECOND), (0, t + 5 * SECOND)]);
    let history = job_history(&a.shared.client, "paused").await.unwrap();
    assert_eq!(
        outcomes(&history),
        vec![
            (Some(t + 5 * SECOND), Outcome::Ok),
            (Some(t + 4 * SECOND), Outcome::Ok),
            (Some(t + 3 * SECOND), Outcome::Skipped),
            (Some(t), Outcome::Ok),
        ]
    );
    // One entry, widened at each paused beat, stands for every paused tick.
    assert_eq!(history[2].first_tick, Some(t + SECOND));
    assert_eq!(history[2].error.as_deref(), Some("paused"));
}

/// Beats both nodes, in turn, until a run-now request was run (a node's watch of the job's node
/// tells it of the request within moments), then some more: exactly one of them ran it.
async fn beat_until_served(nodes: [&Node; 2], at: i64, log: &Log) -> usize {
    let before = runs(log).len();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while runs(log).len() == before {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the request was not served: {:?}",
            runs(log)
        );
        for node in nodes {
            node.fire_at(at).await;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    for node in nodes {
        node.fire_at(at).await;
    }
    let ran = runs(log);
    assert_eq!(ran.len(), before + 1, "one run per request: {ran:?}");
    let (node, tick) = ran[before];
    assert_eq!(tick, TRIGGERED);
    node
}

/// A run-now request runs the job once, on one node, without a tick and without touching the
/// tick record, also while the job is paused; the request is gone afterwards.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_trigger_runs_once_on_one_node_also_while_paused() {
    let server = ZkServer::start().unwrap();
    let zk = raw(&server).await;
    let log = Log::default();
    let a = Node::start(&server, 0, "now", Policy::OncePerTick, &log).await;
    let b = Node::start(&server, 1, "now", Policy::OncePerTick, &log).await;
    let t = an_hour_ago();
    a.fire_at(t).await;
    b.fire_at(t).await; // both nodes have handled t: only a request makes them run now
    let tick_record = || async {
        zk.get_data(&record_path("now"))
            .await
            .map(|(data, stat)| (data, stat.mzxid))
            .unwrap()
    };
    let before = tick_record().await;
    let request = trigger_job(&a.shared.client, "now")
        .await
        .unwrap()
        .expect("a known job");
    assert!(request.starts_with("trigger-"), "{request}");
    assert_eq!(job_records(&a.shared.client).await.unwrap()[0].triggers_pending, 1);
    let first = beat_until_served([&a, &b], t, &log).await;
    assert_eq!(tick_record().await, before, "the tick record is untouched");
    assert_eq!(job_records(&a.shared.client).await.unwrap()[0].triggers_pending, 0);

    pause_job(&a.shared.client, "now").await.unwrap();
    trigger_job(&b.shared.client, "now").await.unwrap();
    let second = beat_until_served([&b, &a], t, &log).await;
    let history = job_history(&a.shared.client, "now").await.unwrap();
    assert_eq!(
        outcomes(&history),
        vec![(None, Outcome::Ok), (None, Outcome::Ok), (Some(t), Outcome::Ok)]
    );
    let node = |index: usize| format!("node-{index}");
    assert_eq!(
        (history[0].node.clone(), history[1].node.clone()),
        (node(second), node(first))
    );
}

/// Every way a run ends is kept in the history, newest first, with its error's text; a run
/// that outlasts `max_hold` is aborted and recorded as timed out. (A panicking run is in
/// `tests/scheduler.rs`: this binary holds the model tests, whose panic hook expects every
/// panic to happen inside a model run.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_history_keeps_how_each_run_ended() {
    let server = ZkServer::start().unwrap();
    let log = Log::default();
    let node = Node::custom(&server, 0, "outcomes", &log, 0, "* * * * * *", |job| {
        job.max_hold(Duration::from_millis(300))
    })
    .await;
    node.then(Act::Fail("disk full"));
    node.then(Act::Sleep(Duration::from_secs(30)));
    let t = an_hour_ago();
    for second in 0..3 {
        node.fire_at(t + second * SECOND).await;
    }
    let history = job_history(&node.shared.client, "outcomes").await.unwrap();
    assert_eq!(
        outcomes(&history),
        vec![
            (Some(t + 2 * SECOND), Outcome::Ok),
            (Some(t + SECOND), Outcome::TimedOut),
            (Some(t), Outcome::Failed),
        ]
    );
    assert_eq!(history[2].error.as_deref(), Some("disk full"));
    assert!(
        history[1].duration_ms >= 300 && history[1].duration_ms < 30_000,
        "{:?}",
        history[1]
    );
    assert!(history.iter().all(|e| e.node == "node-0"));
    let stats = node.shared.stats.snapshot();
    assert_eq!((stats.runs, stats.failures, stats.timed_out), (3, 2, 1));
    // The time spent running: at least the timed-out run's 300 ms bound, and not the 30 s it
    // would have slept.
    let run_ms = node.shared.stats.run_ms_total();
    assert!((300..30_000).contains(&run_ms), "{run_ms} ms");
    assert_eq!(
        stats.last_tick,
        Some(std::time::UNIX_EPOCH + Duration::from_millis((t + 2 * SECOND) as u64)),
        "the latest tick run"
    );
    // The record says how the latest tick ended; a timed-out one is a failed run.
    let shown = job_records(&node.shared.client).await.unwrap();
    assert_eq!(
        (shown[0].tick_ms, shown[0].state.as_str()),
        (Some(t + 2 * SECOND), "done")
    );
    assert_eq!(shown[0].last_outcome, Some(Outcome::Ok));
}

/// A job with `min_hold` keeps its lock taken after a short run, until the bound has passed
/// since the grant: another node asking then finds it taken. `flush` waits the hold out.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn min_hold_keeps_the_jobs_lock_taken_after_a_short_run() {
    const MIN_HOLD: Duration = Duration::from_secs(5);
    let server = ZkServer::start().unwrap();
    let log = Log::default();
    let node = Node::custom(&server, 0, "lingering", &log, 0, "* * * * * *", |job| {
        job.min_hold(MIN_HOLD)
    })
    .await;
    let lock = node.shared.client.mutex("lingering").unwrap();
    let before = std::time::Instant::now();
    node.fire_at(an_hour_ago()).await;
    assert_eq!(runs(&log).len(), 1, "the tick ran");
    let locked = lock.is_locked().await.unwrap();
    // The grant came after `before`: a fire slower than the bound (a machine stalled for
    // seconds) may already have let the lock go, and then shows nothing either way.
    if before.elapsed() < MIN_HOLD {
        assert!(locked, "the job's lock was let go as soon as its short run ended");
    }
    node.shared.client.flush().await;
    assert!(!lock.is_locked().await.unwrap(), "the lock outlived its min_hold");
    assert!(
        before.elapsed() >= MIN_HOLD,
        "released {:?} after the fire began",
        before.elapsed()
    );

    let too_long = SingletonJob::new_async("* * * * * *", &node.shared.client, "lingering", |_run| async {})
        .unwrap()
        .min_hold(Duration::from_secs(7200));
    assert!(
        matches!(too_long.into_job(), Err(SchedulerError::InvalidOption(_))),
        "a min_hold over an hour was taken"
    );
}

/// A reset clears the record and the history: the next beat runs only its own tick. A removed
/// job leaves nothing behind, and a node still running it starts afresh.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reset_and_remove_clear_a_job() {
    let server = ZkServer::start().unwrap();
    let zk = raw(&server).await;
    let log = Log::default();
    let node = Node::start(&server, 0, "cleared", Policy::OncePerTick, &log).await;
    let client = node.shared.client.clone();
    let wait = Duration::from_secs(5);
    let t = an_hour_ago();
    node.fire_at(t).await;
    assert!(reset_job(&client, "cleared", wait).await.unwrap());
    assert!(job_history(&client, "cleared").await.unwrap().is_empty());
    assert_eq!(job_records(&client).await.unwrap()[0].state, "reset");
    // The next tick after the reset (by ZooKeeper's clock) runs, and no late tick before it.
    let after = tick_after_doubt(written(&zk, "cleared").await).await;
    node.fire_at(after).await;
    assert_eq!(runs(&log), vec![(0, t), (0, after)], "no late ticks after a reset");

    pause_job(&client, "cleared").await.unwrap();
    trigger_job(&client, "cleared").await.unwrap();
    assert!(remove_job(&client, "cleared", wait).await.unwrap());
    assert_removed(&zk, "cleared").await;
    assert!(job_records(&client).await.unwrap().is_empty());
    assert!(!remove_job(&client, "cleared", wait).await.unwrap(), "gone already");
    // Gone: pausing or triggering it changes nothing and says so.
    assert_eq!(pause_job(&client, "cleared").await.unwrap(), None);
    assert_eq!(trigger_job(&client, "cleared").await.unwrap(), None);
    assert_removed(&zk, "cleared").await;
    assert!(!reset_job(&client, "cleared", wait).await.unwrap());
    // A node runs the job afresh from its next tick after the removal.
    let fresh = Node::start(&server, 1, "cleared", Policy::OncePerTick, &log).await;
    let later = tick_after_doubt(written(&zk, "cleared").await).await;
    fresh.fire_at(later).await;
    assert_eq!(runs(&log).last(), Some(&(1, later)), "the job runs afresh");
    assert_eq!(job_records(&client).await.unwrap().len(), 1, "a job again");
}

/// What a removal leaves of a job: nothing, or its empty znode with a `removed` record.
async fn assert_removed(zk: &zk::Client, job: &str) {
    match zk.get_data(&record_path(job)).await {
        Err(zk::Error::NoNode) => {}
        Ok((data, stat)) => {
            assert_eq!(stat.num_children, 0, "nothing under a removed job");
            let record = TickRecord::decode(&data).unwrap().expect("a record");
            assert_eq!(record.state, RunState::Removed);
        }
        Err(err) => panic!("reading {job}: {err}"),
    }
}

/// A removal keeps the time it happened: a node whose clock runs behind, still running the
/// job, finds a tick that ran before the removal taken instead of running it again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tick_run_before_a_remove_is_not_run_again_by_a_node_behind() {
    let server = ZkServer::start().unwrap();
    let log = Log::default();
    let ahead = Node::start(&server, 0, "removed-behind", Policy::OncePerTick, &log).await;
    let behind = Node::start(&server, 1, "removed-behind", Policy::OncePerTick, &log).await;
    let t = an_hour_ago();
    ahead.fire_at(t).await;
    assert!(
        remove_job(&ahead.shared.client, "removed-behind", Duration::from_secs(5))
            .await
            .unwrap()
    );
    behind.fire_at(t).await;
    assert_eq!(runs(&log), vec![(0, t)], "tick t ran once");
}

/// A removed job whose nodes are gone leaves nothing behind: the server reaps its znode.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_removed_job_leaves_nothing_behind() {
    let server = ZkServer::builder()
        .system_property("znode.container.checkIntervalMs", "100")
        .start()
        .unwrap();
    let zk = raw(&server).await;
    let log = Log::default();
    let node = Node::start(&server, 0, "reaped", Policy::OncePerTick, &log).await;
    node.fire_at(an_hour_ago()).await;
    let client = node.shared.client.clone();
    drop(node);
    assert!(remove_job(&client, "reaped", Duration::from_secs(5)).await.unwrap());
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    while zk.check_stat(&record_path("reaped")).await.unwrap().is_some() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the removed job's znode was never reaped"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// A reset keeps the time it happened: a node whose clock runs behind, firing a tick that
/// ran before the reset, finds it taken instead of running it again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tick_run_before_a_reset_is_not_run_again_by_a_node_behind() {
    let server = ZkServer::start().unwrap();
    let log = Log::default();
    let ahead = Node::start(&server, 0, "reset-behind", Policy::OncePerTick, &log).await;
    let behind = Node::start(&server, 1, "reset-behind", Policy::OncePerTick, &log).await;
    let t = an_hour_ago();
    ahead.fire_at(t).await;
    assert!(reset_job(&ahead.shared.client, "reset-behind", Duration::from_secs(5))
        .await
        .unwrap());
    behind.fire_at(t).await;
    assert_eq!(runs(&log), vec![(0, t)], "tick t ran once");
}

/// A rolling deploy that changes a job's schedule: the node started later (the new version)
/// replaces the registration; the old node, still running, notes its own beside it and
/// operators see both; the note goes with the old node's session; and a removed job is
/// registered again by the node that runs it next.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_newest_rollout_is_registered_and_an_old_node_is_noted_while_it_runs() {
    let server = ZkServer::start().unwrap();
    let log = Log::default();
    let berlin: chrono_tz::Tz = "Europe/Berlin".parse().unwrap();
    let old = Node::custom(&server, 0, "deploy", &log, 0, "0 */5 * * * *", |job| job).await;
    old.fire_at(REAL).await;
    let registered = |records: &[crate::scheduler::JobRecord]| {
        let shown = &records[0];
        let spec = shown
            .spec
            .as_ref()
            .map(|s| (s.schedule.clone(), s.time_zone.clone(), s.node.clone()));
        let conflict = shown
            .conflict
            .as_ref()
            .map(|s| (s.schedule.clone(), s.time_zone.clone(), s.node.clone()));
        (spec, conflict)
    };
    let five = || Some(("0 */5 * * * *".to_owned(), "UTC".to_owned(), "node-0".to_owned()));
    let ten = || {
        Some((
            "0 */10 * * * *".to_owned(),
            "Europe/Berlin".to_owned(),
            "node-1".to_owned(),
        ))
    };
    assert_eq!(
        registered(&job_records(&old.shared.client).await.unwrap()),
        (five(), None)
    );

    // The new node starts once ZooKeeper's clock has passed the registration's write time.
    let zk = raw(&server).await;
    let spec_path = format!("{}/spec", record_path("deploy"));
    let written = zk.check_stat(&spec_path).await.unwrap().expect("registered").mtime;
    wait_until("the clock passed the registration", || now_ms() > written + 1).await;
    let new = Node::custom(&server, 1, "deploy", &log, 0, "0 */10 * * * *", |job| {
        job.time_zone(berlin)
    })
    .await;
    new.fire_at(REAL).await;
    new.fire_at(REAL).await;
    assert_eq!(
        registered(&job_records(&new.shared.client).await.unwrap()),
        (ten(), None),
        "the new node's registration replaced the old one"
    );
    old.fire_at(REAL).await;
    let both = job_records(&new.shared.client).await.unwrap();
    assert_eq!(
        registered(&both),
        (ten(), five()),
        "the old node noted itself beside it"
    );
    let next = both[0].next_fire_ms.expect("the next tick by the newest registration");
    assert!(next > now_ms() && next <= now_ms() + 600 * SECOND && next % (600 * SECOND) == 0);
    // Looking again changes nothing: neither node writes over the other.
    new.fire_at(REAL).await;
    old.fire_at(REAL).await;
    assert_eq!(
        registered(&job_records(&new.shared.client).await.unwrap()),
        (ten(), five())
    );

    // The old version stops: its note goes with its session.
    old.shared.client.close().await;
    assert_eq!(
        registered(&job_records(&new.shared.client).await.unwrap()),
        (ten(), None)
    );

    // An operator removes the job; the node that runs it registers it again.
    assert!(remove_job(&new.shared.client, "deploy", Duration::from_secs(5))
        .await
        .unwrap());
    new.fire_at(REAL).await;
    new.fire_at(REAL).await;
    assert_eq!(
        registered(&job_records(&new.shared.client).await.unwrap()),
        (ten(), None)
    );
}

/// The ticks two nodes of a daily 02:30 job in Europe/Berlin run, beating in turn every quarter
/// of an hour for three days from `start` (UTC).
async fn three_nights(job: &str, start: i64) -> Vec<i64> {
    let server = ZkServer::start().unwrap();
    let log = Log::default();
    let berlin: chrono_tz::Tz = "Europe/Berlin".parse().unwrap();
    let nodes = [
        Node::custom(&server, 0, job, &log, 0, "0 30 2 * * *", |job| job.time_zone(berlin)).await,
        Node::custom(&server, 1, job, &log, 0, "0 30 2 * * *", |job| job.time_zone(berlin)).await,
    ];
    for quarter in 0..(3 * 24 * 4) {
        nodes[quarter % 2]
            .fire_at(start + quarter as i64 * 15 * 60 * SECOND)
            .await;
    }
    runs(&log).into_iter().map(|(_, tick)| tick).collect()
}

/// A daily 02:30 in Europe/Berlin, on two nodes whose clocks go through both daylight saving
/// days: it runs once on the spring-forward day (at 03:00 local) and once, not twice, on the
/// fall-back day, whichever node fires.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_zoned_daily_job_runs_once_on_both_dst_days_across_nodes() {
    use chrono::TimeZone;
    let berlin: chrono_tz::Tz = "Europe/Berlin".parse().unwrap();
    let local = |mo: u32, d: u32, h: u32, mi: u32| {
        berlin
            .with_ymd_and_hms(2026, mo, d, h, mi, 0)
            .earliest()
            .unwrap()
            .timestamp_millis()
    };
    // From midnight local before each change day; the first beat runs the day before's tick.
    let spring = three_nights("dst-spring", local(3, 29, 0, 0)).await;
    assert_eq!(
        spring,
        vec![
            local(3, 28, 2, 30),
            local(3, 29, 3, 0), // 02:30 does not exist: the first moment after the gap
            local(3, 30, 2, 30),
            local(3, 31, 2, 30),
        ]
    );
    let autumn = three_nights("dst-autumn", local(10, 25, 0, 0)).await;
    assert_eq!(
        autumn,
        vec![
            local(10, 24, 2, 30),
            local(10, 25, 2, 30), // the first of the two 02:30s, only
            local(10, 26, 2, 30),
            local(10, 27, 2, 30),
        ]
    );
}
