//! Where a singleton job's state lives in ZooKeeper, and the fenced writes that change it.
//!
//! Every job has one znode, `<namespace>.jobs/<job>`, outside the lock namespace (its children
//! are not contenders). It is a container node: it always has children while the job exists
//! (its `history`), and what a removal leaves (no children, a `removed` record) is reaped by
//! the server. Its data is the tick record ([`super::record`]); its children hold the rest
//! of the job's state, so that listing `<namespace>.jobs` lists jobs and nothing else:
//!
//! | child        | what it is                                                        | written by |
//! |--------------|-------------------------------------------------------------------|------------|
//! | `history`    | the latest runs, JSON ([`super::history`])                        | the lock holder |
//! | `paused`     | exists while the job is paused                                    | operators |
//! | `trigger-N`  | one request to run the job now (sequential)                       | operators; deleted by the node that runs it |
//! | `replace-N`  | a later tick asking the running run to make way (`Policy::Replace`); a tick past ZooKeeper's clock at its creation counts as the tick due then | nodes; deleted by the node that runs that tick or a later one |
//! | `spec`       | the schedule, time zone and policy of the newest rollout ([`super::registration`]) | the first node, then nodes started after it was written |
//! | `spec-conflict` | ephemeral: a differing registration of an older node still running | older nodes whose registration differs |
//! | `run-<key>`  | a run that went on without the record to speak for it: a tick's under `Policy::Allow` (key: the tick in ms), a run-now request's (key: `trigger-N`); data: `session=<id> node=<identity>` | the node that starts the run; deleted when its end is written, or as lost once its `alive-<key>` is gone |
//! | `alive-<key>` | ephemeral, beside `run-<key>`: the run's node still has the session it started the run in | the node that starts the run |
//!
//! The lock holder's writes are fenced: one multi-operation checks that its lock contender node
//! still exists (and the record its version), so a node that lost the lock changes nothing.

use std::time::Duration;

use serde_json::Value;

use super::history;
use super::plan;
use super::record::TickRecord;
use super::ticks::Ticks;
use crate::error::is_transient;
use zookeeper_client as zk;

/// The child that exists while a job is paused.
pub(crate) const PAUSED: &str = "paused";
/// The child holding a job's run history.
pub(crate) const HISTORY: &str = "history";
/// The prefix of run-now requests.
pub(crate) const TRIGGER_PREFIX: &str = "trigger-";
/// The prefix of requests that the running run make way for a later tick (`Policy::Replace`);
/// their data is `tick=<ms>`.
pub(crate) const REPLACE_PREFIX: &str = "replace-";
/// The child describing how the job was registered.
pub(crate) const SPEC: &str = "spec";
/// The prefix of a run's persistent marker ([`Marker`]).
pub(crate) const RUN_PREFIX: &str = "run-";
/// The prefix of a run's ephemeral marker, which lives as long as the session of its node.
pub(crate) const ALIVE_PREFIX: &str = "alive-";

/// A run that the tick record cannot speak for (a run under `Policy::Allow`, whose tick the
/// next claim writes over, or a run an operator asked for): it has a persistent `run-<key>`
/// child while it goes on, and an ephemeral `alive-<key>` beside it. A `run-` child without its
/// `alive-` child is a run whose node's session ended before it reported back: the next
/// holder of the lock records it as lost.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Marker {
    /// Creates `run-<key>` (with `data`) and `alive-<key>`.
    Open { key: String, data: String },
    /// Deletes `run-<key>`, and `alive-<key>` when `alive` (it exists: the run's node still
    /// has the session it started the run in).
    Close { key: String, alive: bool },
}

/// A `run-<key>` child as listed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct RunMarker {
    pub key: String,
    /// Whether `alive-<key>` was listed too.
    pub alive: bool,
}

/// The runs' markers among a job node's children.
pub(crate) fn run_markers(children: &[String]) -> Vec<RunMarker> {
    children
        .iter()
        .filter_map(|c| c.strip_prefix(RUN_PREFIX))
        .map(|key| RunMarker {
            key: key.to_owned(),
            alive: children.iter().any(|c| c.strip_prefix(ALIVE_PREFIX) == Some(key)),
        })
        .collect()
}

/// Where the records of a client's jobs live (`<namespace>.jobs`).
pub(crate) fn records_root(namespace: &str) -> String {
    let ns = namespace.trim_end_matches('/');
    if ns.is_empty() {
        "/zklock.jobs".to_owned()
    } else {
        format!("{ns}.jobs")
    }
}

/// One job's znode.
#[derive(Debug, Clone)]
pub(crate) struct RecordStore {
    pub path: String,
}

/// What the lock holder reads at the start of a hold, in one round trip.
pub(crate) struct JobState {
    pub record: Result<Option<TickRecord>, String>,
    pub stat: zk::Stat,
    pub paused: bool,
    /// Pending run-now requests, oldest first.
    pub triggers: Vec<String>,
    /// The markers of runs the record cannot speak for ([`Marker`]).
    pub runs: Vec<RunMarker>,
    /// Whether replace requests ([`REPLACE_PREFIX`]) are waiting.
    pub replace_requests: bool,
    /// The history as written, newest first.
    pub history: Vec<Value>,
}

/// One fenced write of the lock holder.
#[derive(Default)]
pub(crate) struct Commit<'a> {
    /// The tick record's new data (empty: cleared) and the version it must still have.
    pub record: Option<(Vec<u8>, i32)>,
    /// The new history.
    pub history: Option<Vec<u8>>,
    /// A run-now request to take (delete): it must still be there.
    pub take: Option<&'a str>,
    /// Runs' markers to create or delete; each must (or must not) still be there.
    pub markers: Vec<Marker>,
    /// Fails the write while the job is paused: a tick's claim, so that no tick is taken after
    /// a pause was written, even by a hold that read the job's state just before it.
    pub unless_paused: bool,
}

/// Why a fenced write did not happen.
#[derive(Debug)]
pub(crate) enum WriteError {
    /// Our contender node is gone or the record changed since we read it: we no longer hold
    /// the lock, or someone writes without it.
    Fenced,
    /// The run-now request is gone: another node took it.
    Taken,
    /// A run's marker was not as read (another node settled it meanwhile): read again.
    Stale,
    /// The job was paused since its state was read ([`Commit::unless_paused`]).
    Paused,
    /// ZooKeeper could not be asked.
    ZooKeeper(zk::Error),
}

impl std::fmt::Display for WriteError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            WriteError::Fenced => {
                f.write_str("the lock node is gone or the record changed since it was read under the lock")
            }
            WriteError::Taken => f.write_str("the request was taken by another node"),
            WriteError::Stale => f.write_str("a run's marker changed since it was read"),
            WriteError::Paused => f.write_str("the job was paused since its state was read"),
            WriteError::ZooKeeper(e) => write!(f, "ZooKeeper: {e}"),
        }
    }
}

impl RecordStore {
    /// The znode of `job` for a client whose lock namespace is `namespace`.
    pub fn for_job(namespace: &str, job: &str) -> RecordStore {
        RecordStore {
            path: format!("{}/{job}", records_root(namespace)),
        }
    }

    /// The path of the job's child `name`.
    pub fn child(&self, name: &str) -> String {
        format!("{}/{name}", self.path)
    }

    /// Reads the record with its stat, the job's children and its history, creating the job's
    /// node and its history first where they do not exist.
    pub async fn read_state(&self, zk: &zk::Client, acls: zk::Acls<'_>) -> Result<JobState, zk::Error> {
        let history_path = self.child(HISTORY);
        loop {
            let (record, children, history) = tokio::join!(
                zk.get_data(&self.path),
                zk.list_children(&self.path),
                zk.get_data(&history_path)
            );
            let (data, stat) = match record {
                Ok(read) => read,
                Err(zk::Error::NoNode) => {
                    self.create(zk, acls).await?;
                    continue;
                }
                Err(e) => return Err(e),
            };
            let history = match history {
                Ok((data, _)) => history::parse_raw(&data),
                Err(zk::Error::NoNode) => {
                    let options = zk::CreateMode::Persistent.with_acls(acls);
                    match zk.create(&history_path, b"[]", &options).await {
                        Ok(_) | Err(zk::Error::NodeExists) => {}
                        // The job's node went away meanwhile: start over.
                        Err(zk::Error::NoNode) => continue,
                        Err(e) => return Err(e),
                    }
                    Vec::new()
                }
                Err(e) => return Err(e),
            };
            let mut children = match children {
                Ok(children) => children,
                Err(zk::Error::NoNode) => continue,
                Err(e) => return Err(e),
            };
            children.sort();
            return Ok(JobState {
                record: TickRecord::decode(&data),
                stat,
                paused: children.iter().any(|c| c == PAUSED),
                runs: run_markers(&children),
                replace_requests: children.iter().any(|c| c.starts_with(REPLACE_PREFIX)),
                triggers: children.into_iter().filter(|c| c.starts_with(TRIGGER_PREFIX)).collect(),
                history,
            });
        }
    }

    /// Creates the job's (empty) node and its parents. The job's node is a container: a
    /// removed job's node, left without children ([`super::record::RunState::Removed`]), is
    /// reaped by the server.
    pub async fn create(&self, zk: &zk::Client, acls: zk::Acls<'_>) -> Result<(), zk::Error> {
        let options = zk::CreateMode::Persistent.with_acls(acls);
        let mut at = 0;
        while let Some(next) = self.path[at + 1..].find('/') {
            at += 1 + next;
            match zk.create(&self.path[..at], b"", &options).await {
                Ok(_) | Err(zk::Error::NodeExists) => {}
                Err(e) => return Err(e),
            }
        }
        let container = zk::CreateMode::Container.with_acls(acls);
        match zk.create(&self.path, b"", &container).await {
            Ok(_) | Err(zk::Error::NodeExists) => Ok(()),
            Err(e) => Err(e),
        }
    }

    /// Applies `commit` if our lock node `lock_node` still exists (and the record still has the
    /// version given, and the request to take is still there); returns the record's new stat
    /// when the record was written (its version, and its `mtime`: the ensemble's commit time).
    pub async fn commit(
        &self,
        zk: &zk::Client,
        acls: zk::Acls<'_>,
        lock_node: &str,
        commit: Commit<'_>,
    ) -> Result<Option<zk::Stat>, WriteError> {
        let mut multi = zk.new_multi_writer();
        multi.add_check_version(lock_node, -1).map_err(WriteError::ZooKeeper)?;
        // A multi cannot check that a node is absent; creating it and deleting it again does.
        let pause_check = usize::from(commit.unless_paused) * 2;
        if commit.unless_paused {
            let paused = self.child(PAUSED);
            let persistent = zk::CreateMode::Persistent.with_acls(acls);
            multi
                .add_create(&paused, &[], &persistent)
                .map_err(WriteError::ZooKeeper)?;
            multi.add_delete(&paused, None).map_err(WriteError::ZooKeeper)?;
        }
        let data = commit.record;
        if let Some((data, version)) = &data {
            multi
                .add_set_data(&self.path, data, Some(*version))
                .map_err(WriteError::ZooKeeper)?;
        }
        let history_path = self.child(HISTORY);
        if let Some(history) = &commit.history {
            multi
                .add_set_data(&history_path, history, None)
                .map_err(WriteError::ZooKeeper)?;
        }
        let take_index = 1 + pause_check + usize::from(data.is_some()) + usize::from(commit.history.is_some());
        let take = commit.take.map(|name| self.child(name));
        if let Some(take) = &take {
            multi.add_delete(take, None).map_err(WriteError::ZooKeeper)?;
        }
        let markers_from = take_index + usize::from(take.is_some());
        let persistent = zk::CreateMode::Persistent.with_acls(acls);
        let ephemeral = zk::CreateMode::Ephemeral.with_acls(acls);
        for marker in &commit.markers {
            match marker {
                Marker::Open { key, data } => {
                    multi
                        .add_create(&self.child(&format!("{RUN_PREFIX}{key}")), data.as_bytes(), &persistent)
                        .map_err(WriteError::ZooKeeper)?;
                    multi
                        .add_create(&self.child(&format!("{ALIVE_PREFIX}{key}")), &[], &ephemeral)
                        .map_err(WriteError::ZooKeeper)?;
                }
                Marker::Close { key, alive } => {
                    multi
                        .add_delete(&self.child(&format!("{RUN_PREFIX}{key}")), None)
                        .map_err(WriteError::ZooKeeper)?;
                    if *alive {
                        multi
                            .add_delete(&self.child(&format!("{ALIVE_PREFIX}{key}")), None)
                            .map_err(WriteError::ZooKeeper)?;
                    }
                }
            }
        }
        match multi.commit().await {
            Ok(results) if data.is_some() => match results.into_iter().nth(1 + pause_check) {
                Some(zk::MultiWriteResult::SetData { stat }) => Ok(Some(stat)),
                _ => Err(WriteError::ZooKeeper(zk::Error::UnexpectedError(
                    "multi-operation answered without the set-data result".into(),
                ))),
            },
            Ok(_) => Ok(None),
            Err(zk::MultiWriteError::OperationFailed {
                source: zk::Error::NodeExists,
                index: 1,
            }) if commit.unless_paused => Err(WriteError::Paused),
            Err(zk::MultiWriteError::OperationFailed {
                source: zk::Error::NoNode,
                index,
            }) if take.is_some() && index == take_index => Err(WriteError::Taken),
            Err(zk::MultiWriteError::OperationFailed {
                source: zk::Error::NoNode | zk::Error::NodeExists,
                index,
            }) if index >= markers_from => Err(WriteError::Stale),
            Err(zk::MultiWriteError::OperationFailed {
                source: zk::Error::NoNode | zk::Error::BadVersion,
                ..
            }) => Err(WriteError::Fenced),
            Err(e) => Err(WriteError::ZooKeeper(e.into())),
        }
    }

    /// Asks the run going on (on any node) to make way for `tick` ([`REPLACE_PREFIX`]).
    pub async fn ask_to_replace(&self, zk: &zk::Client, acls: zk::Acls<'_>, tick: i64) -> Result<(), zk::Error> {
        let options = zk::CreateMode::PersistentSequential.with_acls(acls);
        zk.create(&self.child(REPLACE_PREFIX), format!("tick={tick}").as_bytes(), &options)
            .await
            .map(|_| ())
    }

    /// The replace requests among `children`, with the tick each can stand for: the tick it
    /// asks for (unreadable: 0), but none past the ticks due by ZooKeeper's clock when it was
    /// created ([`plan::credible`]), so that a request of a node whose clock runs ahead neither
    /// stops every run until its clock's tick comes nor outlives the runs that serve it.
    async fn replace_requests(&self, zk: &zk::Client, ticks: &Ticks, children: &[String]) -> Vec<(String, i64)> {
        let paths: Vec<String> = children
            .iter()
            .filter(|c| c.starts_with(REPLACE_PREFIX))
            .map(|c| self.child(c))
            .collect();
        let reads = futures_util::future::join_all(paths.iter().map(|path| zk.get_data(path))).await;
        paths
            .into_iter()
            .zip(reads)
            .filter_map(|(path, read)| {
                let (data, stat) = read.ok()?;
                let asked = String::from_utf8(data)
                    .ok()
                    .and_then(|text| text.strip_prefix("tick=").and_then(|t| t.trim().parse().ok()))
                    .unwrap_or(0);
                Some((path, plan::credible(ticks, asked, stat.ctime).unwrap_or(asked)))
            })
            .collect()
    }

    /// Resolves once a request asks to replace a run of a tick before `running` (requests of
    /// that tick or earlier are stale and ignored); never, when the job's node cannot be
    /// watched.
    pub async fn replaced_after(&self, zk: &zk::Client, ticks: &Ticks, running: i64) {
        loop {
            let Ok((children, watch)) = zk.list_and_watch_children(&self.path).await else {
                return std::future::pending().await;
            };
            let requests = self.replace_requests(zk, ticks, &children).await;
            if requests.iter().any(|(_, tick)| *tick > running) {
                return;
            }
            watch.changed().await;
        }
    }

    /// Deletes the replace requests for `tick` or earlier: they are served (a run of `tick`
    /// started under `Policy::Replace`), or stale (the record shows `tick` taken, and a run
    /// ignores requests for its own tick or earlier).
    pub async fn clear_replaced_up_to(&self, zk: &zk::Client, ticks: &Ticks, tick: i64) {
        let Ok(children) = zk.list_children(&self.path).await else {
            return;
        };
        let served: Vec<String> = self
            .replace_requests(zk, ticks, &children)
            .await
            .into_iter()
            .filter(|(_, asked)| *asked <= tick)
            .map(|(path, _)| path)
            .collect();
        for result in futures_util::future::join_all(served.iter().map(|path| zk.delete(path, None))).await {
            match result {
                Ok(()) | Err(zk::Error::NoNode) => {}
                Err(err) => {
                    tracing::debug!(target: "zklock::scheduler", path = %self.path, error = %err, "could not clear a replace request")
                }
            }
        }
    }

    /// After the take of the run-now request `key` failed without a definite answer, finds out
    /// whether it was applied: the take created `alive-<key>` in `session` in the same
    /// multi-operation, so that node, owned by `session`, is there only if it was. `None` when
    /// the server cannot tell now (the marker then speaks for the run: when the session ends,
    /// the next holder records it as lost).
    pub async fn took(&self, zk: &zk::Client, key: &str, session: i64) -> Option<bool> {
        let path = self.child(&format!("{ALIVE_PREFIX}{key}"));
        let (_, stat) = tokio::join!(zk.sync(&path), zk.check_stat(&path));
        match stat {
            Ok(stat) => Some(stat.is_some_and(|stat| stat.ephemeral_owner == session)),
            Err(_) => None,
        }
    }

    /// After a write of `record` over `version` failed without a definite answer (the
    /// connection dropped: the multi-operation may or may not have been applied), finds out
    /// which: syncs and re-reads the record until the server answers, for at most `within`.
    /// `Some(stat)` when the record is at `version + 1` and is exactly `record`, which carries
    /// this session's id, so only our write can have put it there (the multi is atomic, so it
    /// also passed its lock check); `None` when it was not applied or cannot be told.
    pub async fn confirm(
        &self,
        zk: &zk::Client,
        record: &TickRecord,
        version: i32,
        within: Duration,
    ) -> Option<zk::Stat> {
        let deadline = tokio::time::Instant::now() + within;
        loop {
            let (_, read) = tokio::join!(zk.sync(&self.path), zk.get_data(&self.path));
            match read {
                Ok((data, stat)) => {
                    let ours = stat.version == version + 1
                        && TickRecord::decode(&data).ok().flatten().as_ref() == Some(record);
                    return ours.then_some(stat);
                }
                Err(err) if is_transient(&err) && tokio::time::Instant::now() < deadline => {
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
                Err(_) => return None,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::record::RunState;
    use super::*;

    /// A plain session on `server`, for reading and writing a job's znodes by hand.
    async fn connect(server: &zklock_testing::ZkServer) -> zk::Client {
        zk::Client::connector()
            .with_session_timeout(std::time::Duration::from_secs(4))
            .connect(&server.connect_string())
            .await
            .unwrap()
    }

    /// A claim whose multi-operation was applied but whose answer was lost (a connection drop
    /// during failover) is recognised from the record itself; a record someone else wrote, or
    /// one written again since, is not taken for ours.
    #[tokio::test]
    async fn an_applied_claim_whose_answer_was_lost_is_recognised() {
        let server = zklock_testing::ZkServer::start().unwrap();
        let zk = connect(&server).await;
        let store = RecordStore::for_job("/zklock", "ambiguous");
        let stat = store.read_state(&zk, zk::Acls::anyone_all()).await.unwrap().stat;
        let version = stat.version;
        let ours = TickRecord::next(
            None,
            1_718_000_000_000,
            RunState::Running,
            Some(zk.session_id().0),
            version,
        );
        let within = std::time::Duration::from_secs(5);
        // Not applied: the record is still at `version`.
        assert!(store.confirm(&zk, &ours, version, within).await.is_none());
        // Applied (the write went through; only its answer is missing).
        zk.set_data(&store.path, &ours.encode(), Some(version)).await.unwrap();
        let stat = store
            .confirm(&zk, &ours, version, within)
            .await
            .expect("recognised as ours");
        assert_eq!(stat.version, version + 1);
        // Another session's claim of the same tick is not ours.
        let theirs = TickRecord {
            session: Some(zk.session_id().0 + 1),
            ..ours.clone()
        };
        assert!(store.confirm(&zk, &theirs, version, within).await.is_none());
        // Written again since: not the version our write would have made.
        zk.set_data(&store.path, &ours.encode(), None).await.unwrap();
        assert!(store.confirm(&zk, &ours, version, within).await.is_none());
    }

    /// A tick's claim fails while `paused` exists, however recently it was written, and
    /// leaves no `paused` behind when it succeeds; other writes go through a pause. The take of
    /// a run-now request is recognised from its `alive-` marker.
    #[tokio::test]
    async fn a_claim_fails_while_the_job_is_paused_and_a_take_is_recognised_by_its_marker() {
        let server = zklock_testing::ZkServer::start().unwrap();
        let zk = connect(&server).await;
        let acls = zk::Acls::anyone_all();
        let store = RecordStore::for_job("/zklock", "pausable");
        let version = store.read_state(&zk, acls).await.unwrap().stat.version;
        // Stands in for the writer's lock node: the commit's fence.
        let lock_node = "/zklock.jobs/pausable-lock";
        zk.create(lock_node, b"", &zk::CreateMode::Ephemeral.with_acls(acls))
            .await
            .unwrap();
        let session = zk.session_id().0;
        let claim = |tick: i64, over: i32| TickRecord::next(None, tick, RunState::Running, Some(session), over);
        let commit = |record: TickRecord, over: i32, unless_paused: bool| Commit {
            record: Some((record.encode(), over)),
            history: None,
            take: None,
            markers: Vec::new(),
            unless_paused,
        };
        let stat = store
            .commit(&zk, acls, lock_node, commit(claim(1_000, version), version, true))
            .await
            .unwrap()
            .expect("the record was written");
        assert_eq!(stat.version, version + 1);
        let children = zk.list_children(&store.path).await.unwrap();
        assert!(
            !children.iter().any(|c| c == PAUSED),
            "no pause left behind: {children:?}"
        );

        zk.create(&store.child(PAUSED), b"", &zk::CreateMode::Persistent.with_acls(acls))
            .await
            .unwrap();
        let refused = store
            .commit(
                &zk,
                acls,
                lock_node,
                commit(claim(2_000, stat.version), stat.version, true),
            )
            .await;
        assert!(matches!(refused, Err(WriteError::Paused)), "{refused:?}");
        let state = store.read_state(&zk, acls).await.unwrap();
        assert_eq!(state.stat.version, stat.version, "nothing was written");
        assert!(state.paused, "the pause is kept");
        let skipped = TickRecord::next(None, 2_000, RunState::Skipped, Some(session), stat.version);
        store
            .commit(&zk, acls, lock_node, commit(skipped, stat.version, false))
            .await
            .expect("a write that is not a claim goes through a pause");

        // The take of `trigger-1` with its marker: recognised for this session only.
        let trigger = format!("{TRIGGER_PREFIX}1");
        zk.create(&store.child(&trigger), b"", &zk::CreateMode::Persistent.with_acls(acls))
            .await
            .unwrap();
        assert_eq!(store.took(&zk, &trigger, session).await, Some(false), "not taken yet");
        let take = Commit {
            record: None,
            history: None,
            take: Some(&trigger),
            markers: vec![Marker::Open {
                key: trigger.clone(),
                data: String::new(),
            }],
            unless_paused: false,
        };
        store.commit(&zk, acls, lock_node, take).await.unwrap();
        assert_eq!(store.took(&zk, &trigger, session).await, Some(true));
        assert_eq!(
            store.took(&zk, &trigger, session + 1).await,
            Some(false),
            "another session's"
        );
    }

    #[test]
    fn records_live_beside_the_lock_namespace() {
        assert_eq!(RecordStore::for_job("/zklock", "report").path, "/zklock.jobs/report");
        assert_eq!(RecordStore::for_job("/apps/locks/", "r").path, "/apps/locks.jobs/r");
        assert_eq!(RecordStore::for_job("/", "r").path, "/zklock.jobs/r");
    }
}
