//! One node's beats driven one by one, with clocks the tests set, against a real server: which
//! ticks run where, which are given up, what the record and history say afterwards, and what
//! operators' requests do.
//!
//! The clocks read an hour before the real time, so the ensemble's clock never finds a tick in
//! the future (except where a test means it to).

use std::collections::VecDeque;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use tokio::sync::Notify;
use zklock_testing::ZkServer;

use super::fire::fire;
use super::node::Shared;
use super::record::{RunState, TickRecord};
use super::store::RecordStore;
use super::ticks::MAX_CATCH_UP;
use super::{job_history, job_records, pause_job, resume_job, trigger_job, Outcome, Policy, SingletonJob};
use crate::client::LockClient;
use zookeeper_client as zk;

const SECOND: i64 = 1000;

/// Which node ran which tick, in the order the runs started.
type Log = Arc<Mutex<Vec<(usize, i64)>>>;

fn now_ms() -> i64 {
    SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_millis() as i64
}

/// A whole second an hour before now.
fn an_hour_ago() -> i64 {
    (now_ms() / SECOND - 3600) * SECOND
}

/// What a node's next run does (a run with nothing queued returns at once).
#[derive(Debug)]
enum Act {
    /// Waits until the test notifies the node's `release`.
    Hold,
    Fail(&'static str),
    Sleep(Duration),
}

/// The tick logged for a run an operator triggered.
const TRIGGERED: i64 = -1;

struct Node {
    shared: Arc<Shared>,
    /// What the node's clock reads, in ms since the epoch; [`REAL`] reads the real time plus
    /// the node's offset.
    at: Arc<AtomicI64>,
    /// What the next runs do, in order.
    acts: Arc<Mutex<VecDeque<Act>>>,
    release: Arc<Notify>,
}

const REAL: i64 = i64::MIN;

impl Node {
    async fn start(server: &ZkServer, index: usize, job: &str, policy: Policy, log: &Log) -> Node {
        Node::with_offset(server, index, job, policy, log, 0).await
    }

    /// A node whose clock, once set to [`REAL`], reads the real time plus `offset_ms`.
    async fn with_offset(
        server: &ZkServer,
        index: usize,
        job: &str,
        policy: Policy,
        log: &Log,
        offset_ms: i64,
    ) -> Node {
        Node::custom(server, index, job, log, offset_ms, "* * * * * *", |job| {
            job.policy(policy)
        })
        .await
    }

    /// A node of `job` on `schedule`, adjusted by `adjust`.
    async fn custom(
        server: &ZkServer,
        index: usize,
        job: &str,
        log: &Log,
        offset_ms: i64,
        schedule: &str,
        adjust: impl FnOnce(SingletonJob) -> SingletonJob,
    ) -> Node {
        let client = LockClient::builder(server.connect_string())
            .session_timeout(Duration::from_secs(4))
            .identity(format!("node-{index}"))
            .connect()
            .await
            .expect("connect");
        let at = Arc::new(AtomicI64::new(REAL));
        let acts: Arc<Mutex<VecDeque<Act>>> = Arc::default();
        let release = Arc::new(Notify::new());
        let clock = {
            let at = at.clone();
            move || {
                let ms = match at.load(Ordering::SeqCst) {
                    REAL => now_ms() + offset_ms,
                    ms => ms,
                };
                UNIX_EPOCH + Duration::from_millis(ms as u64)
            }
        };
        let run = {
            let (log, acts, release) = (log.clone(), acts.clone(), release.clone());
            move |run: super::JobRun| {
                let tick = match run.triggered() {
                    true => TRIGGERED,
                    false => run.tick().duration_since(UNIX_EPOCH).unwrap().as_millis() as i64,
                };
                log.lock().unwrap().push((index, tick));
                let (act, release) = (acts.lock().unwrap().pop_front(), release.clone());
                async move {
                    match act {
                        None => Ok(()),
                        Some(Act::Hold) => {
                            release.notified().await;
                            Ok(())
                        }
                        Some(Act::Fail(why)) => Err(why),
                        Some(Act::Sleep(time)) => {
                            tokio::time::sleep(time).await;
                            Ok(())
                        }
                    }
                }
            }
        };
        let job = SingletonJob::new_async(schedule, &client, job, run)
            .expect("valid job")
            .clock(clock);
        Node {
            shared: adjust(job).into_shared().expect("job"),
            at,
            acts,
            release,
        }
    }

    fn then(&self, act: Act) {
        self.acts.lock().unwrap().push_back(act);
    }

    /// Fires once with the clock at `ms`.
    async fn fire_at(&self, ms: i64) {
        self.at.store(ms, Ordering::SeqCst);
        fire(self.shared.clone()).await;
    }
}

async fn raw(server: &ZkServer) -> zk::Client {
    zk::Client::connector()
        .with_session_timeout(Duration::from_secs(4))
        .connect(&server.connect_string())
        .await
        .expect("connect raw client")
}

/// Deletes `path` and its children, as an operator's `deleteall` does.
async fn delete_tree(zk: &zk::Client, path: &str) {
    for child in zk.list_children(path).await.unwrap() {
        zk.delete(&format!("{path}/{child}"), None).await.unwrap();
    }
    zk.delete(path, None).await.unwrap();
}

fn record_path(job: &str) -> String {
    RecordStore::for_job("/zklock", job).path
}

async fn wait_until(what: &str, mut ready: impl FnMut() -> bool) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    while !ready() {
        assert!(tokio::time::Instant::now() < deadline, "timed out waiting until {what}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// A tick a node may take after a record written at `written_ms` (ZooKeeper's clock) that no
/// scheduler node wrote: past the ticks that record leaves in doubt. Waits until the real clock
/// reaches it, so that ZooKeeper's clock lets a node take it.
async fn tick_after_doubt(written_ms: i64) -> i64 {
    let tick = (written_ms / SECOND + 2) * SECOND;
    wait_until("the real clock reached the tick after the doubt", || now_ms() >= tick).await;
    tick
}

/// ZooKeeper's time of the latest write of the job's record.
async fn written(zk: &zk::Client, job: &str) -> i64 {
    zk.get_data(&record_path(job)).await.unwrap().1.mtime
}

/// The tick and outcome of each history entry, newest first.
fn outcomes(history: &[super::HistoryEntry]) -> Vec<(Option<i64>, Outcome)> {
    history.iter().map(|e| (e.tick, e.outcome.clone())).collect()
}

fn runs(log: &Log) -> Vec<(usize, i64)> {
    log.lock().unwrap().clone()
}

mod clocks;
mod decisions;
mod operators;
mod reports;
