//! Nodes whose clocks run far ahead of ZooKeeper's: what they ask of other nodes and how they
//! judge a tick's lateness.

use super::*;

const HOUR: i64 = 3600 * SECOND;

/// Polls the children of `path` until one starts with `prefix`; its name and stat.
async fn child_appears(zk: &zk::Client, path: &str, prefix: &str) -> (String, zk::Stat) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        if let Ok(children) = zk.list_children(path).await {
            if let Some(name) = children.into_iter().find(|c| c.starts_with(prefix)) {
                let (_, stat) = zk.get_data(&format!("{path}/{name}")).await.unwrap();
                return (name, stat);
            }
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out waiting for a {prefix}* child of {path}"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Under `Replace`, a node whose clock runs an hour ahead asks the busy job to make way for
/// the tick due by ZooKeeper's clock, not for one an hour away: once a tick after the request
/// has run, the request is gone and later runs end normally instead of being stopped.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replace_request_from_a_clock_ahead_stops_no_later_run() {
    let server = ZkServer::start().unwrap();
    let zk = raw(&server).await;
    let log = Log::default();
    let job = "ahead-replace";
    let path = record_path(job);
    let replace = |job: SingletonJob| job.policy(Policy::Replace).lock_wait(Duration::from_secs(30));
    let ahead = Arc::new(Node::custom(&server, 0, job, &log, HOUR, "* * * * * *", replace).await);
    let right = Node::custom(&server, 1, job, &log, 0, "* * * * * *", replace).await;
    // Someone holds the job's lock when the node ahead beats: it asks for a replacement.
    let other = LockClient::builder(server.connect_string())
        .session_timeout(Duration::from_secs(4))
        .connect()
        .await
        .unwrap();
    let busy = other.mutex(job).unwrap().acquire().await.unwrap();
    let beat = tokio::spawn({
        let ahead = ahead.clone();
        async move { ahead.fire_at(REAL).await }
    });
    let (_, asked) = child_appears(&zk, &path, "replace-").await;
    busy.release().await.unwrap();
    beat.await.unwrap();
    let ran = runs(&log);
    assert_eq!(ran.len(), 1, "the node ahead ran once: {ran:?}");
    assert!(ran[0].1 <= now_ms() + SECOND, "it ran a tick due now, not {}", ran[0].1);

    // A tick of the node with the right clock, after the request was made: it runs to its end.
    // It must also come after the tick the node ahead ran: on a loaded machine that run starts
    // well after the request, and a tick it took is not run again.
    let after = asked.ctime.max(ran[0].1);
    wait_until(
        "the real clock passed the request and the tick run by two ticks",
        || now_ms() >= after + 2 * SECOND,
    )
    .await;
    right.then(Act::Sleep(Duration::from_millis(500)));
    right.fire_at(REAL).await;
    let ran = runs(&log);
    assert_eq!(ran.len(), 2, "the node with the right clock ran: {ran:?}");
    let history = job_history(&right.shared.client, job).await.unwrap();
    assert_eq!(
        (history[0].tick, &history[0].outcome),
        (Some(ran[1].1), &Outcome::Ok),
        "the run after the request is not replaced: {history:?}"
    );
    let left: Vec<String> = zk.list_children(&path).await.unwrap();
    assert!(
        left.iter().all(|c| !c.starts_with("replace-")),
        "the request is served and gone: {left:?}"
    );
}

/// A node whose clock runs an hour ahead takes the tick due by ZooKeeper's clock; the starting
/// deadline is judged by that clock too, so the tick it takes is on time and runs instead of
/// being recorded as missed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_clock_ahead_runs_its_ticks_within_the_starting_deadline() {
    let server = ZkServer::start().unwrap();
    let log = Log::default();
    let deadline = |job: SingletonJob| job.starting_deadline(Duration::from_millis(1500));
    let ahead = Node::custom(&server, 0, "ahead-deadline", &log, HOUR, "* * * * * *", deadline).await;
    ahead.fire_at(REAL).await;
    let ran = runs(&log);
    assert_eq!(ran.len(), 1, "the tick due by ZooKeeper's clock ran: {ran:?}");
    assert!(ran[0].1 <= now_ms() + SECOND, "a tick due now, not {}", ran[0].1);
    assert_eq!(ahead.shared.stats.missed(), 0, "no tick was given up");
}

/// Under `Replace`, a node whose clock runs ahead of ZooKeeper's does not stop its own run when
/// its clock reaches the next tick: the next tick comes by ZooKeeper's clock, as the tick the
/// run is for did. (Otherwise every run of a job longer than the skew is cut short.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_clock_ahead_does_not_cut_its_own_replace_run_short() {
    let server = ZkServer::start().unwrap();
    let log = Log::default();
    let job = "ahead-own-run";
    // Five seconds ahead on a ten-second schedule: from the middle of each period on, this
    // node's clock is in the next one while ZooKeeper's is not.
    let ahead = Arc::new(
        Node::custom(&server, 0, job, &log, 5 * SECOND, "*/10 * * * * *", |job| {
            job.policy(Policy::Replace)
        })
        .await,
    );
    wait_until("the real clock is at the start of a period", || {
        now_ms() % (10 * SECOND) < 2 * SECOND
    })
    .await;
    ahead.then(Act::Sleep(Duration::from_millis(7500)));
    let running = tokio::spawn({
        let ahead = ahead.clone();
        async move { ahead.fire_at(REAL).await }
    });
    wait_until("the run started", || runs(&log).len() == 1).await;
    let tick = runs(&log)[0].1;
    assert!(tick <= now_ms(), "the tick due by ZooKeeper's clock: {tick}");
    // Past the middle of the period: this node's clock reads the next tick; ZooKeeper's does
    // not, and the run has more than a second to go.
    wait_until("the node's clock is in the next period", || {
        now_ms() >= tick + 5 * SECOND + 500
    })
    .await;
    ahead.fire_at(REAL).await;
    running.await.unwrap();
    let history = job_history(&ahead.shared.client, job).await.unwrap();
    assert_eq!(
        (history[0].tick, &history[0].outcome),
        (Some(tick), &Outcome::Ok),
        "the run was not stopped by its own node: {history:?}"
    );
}
