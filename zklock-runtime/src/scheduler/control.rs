//! What operators do to singleton jobs across the cluster, from code or from `zklock jobs`:
//! list them, read their history, pause, resume, trigger a run, reset, remove.
//!
//! Every action is a write to the job's znode or its children ([`super::store`]); the nodes
//! running the job see it at their next look (a watch tells them within about a second).

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};

use super::history::{self, HistoryEntry, Outcome};
use super::record::{RunState, TickRecord};
use super::store::{records_root, Commit, RecordStore, WriteError, HISTORY, PAUSED, SPEC, TRIGGER_PREFIX};
use super::ticks::Ticks;
use crate::client::LockClient;
use crate::error::LockError;
use zookeeper_client as zk;

/// The child a node whose registration differs from [`SPEC`] writes its own into.
pub(crate) const SPEC_CONFLICT: &str = "spec-conflict";

/// How a job was registered: its schedule, time zone and policy, as the newest node to run it
/// wrote them (a node that started after the registration was written replaces a differing
/// one). An older node that registers the job differently logs a warning and notes its own
/// registration beside it while it runs ([`JobRecord::conflict`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct JobSpec {
    /// The cron expression (seconds first).
    pub schedule: String,
    /// The IANA time zone its times are read in.
    pub time_zone: String,
    /// The overlap policy (`once_per_tick`, `buffer_one`, `replace`, `allow`, `skip`).
    pub policy: String,
    /// The identity of the node that wrote this.
    pub node: String,
}

impl JobSpec {
    /// Whether two registrations schedule the job alike (whoever wrote them).
    pub(crate) fn agrees_with(&self, other: &JobSpec) -> bool {
        (&self.schedule, &self.time_zone, &self.policy) == (&other.schedule, &other.time_zone, &other.policy)
    }
}

/// One singleton job as an operator sees it ([`job_records`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct JobRecord {
    /// The job's name (also the name of its lock).
    pub job: String,
    /// The last tick taken, in milliseconds since the Unix epoch; `None` before the first.
    pub tick_ms: Option<i64>,
    /// How that tick's run ended: `running`, `done`, `failed`, `lost`, `replaced` (made way
    /// for a later tick), or not run: `skipped` (paused) or `missed` (given up); or a state
    /// written by a later version. `unreadable` when the record cannot be parsed, `forbidden`
    /// when its ACL does not let this client read it, `none` before the first tick.
    pub state: String,
    /// The ZooKeeper session of the node that took the tick.
    pub session: Option<String>,
    /// When the record was last written, by ZooKeeper's clock (ms since the Unix epoch); 0 when
    /// it could not be read.
    pub written_ms: i64,
    /// Whether the job is paused.
    pub paused: bool,
    /// Run-now requests not yet taken by a node.
    pub triggers_pending: usize,
    /// How the newest run in the history ended.
    pub last_outcome: Option<Outcome>,
    /// How the job was registered, when a node has said so.
    pub spec: Option<JobSpec>,
    /// A registration that differs from `spec`, of a node still running that started before
    /// `spec` was written (the old version during a rolling deploy that changed the schedule).
    pub conflict: Option<JobSpec>,
    /// The next tick by `spec`'s schedule and time zone, in ms since the Unix epoch.
    pub next_fire_ms: Option<i64>,
}

impl JobRecord {
    fn new(job: String, state: &str) -> JobRecord {
        JobRecord {
            job,
            tick_ms: None,
            state: state.to_owned(),
            session: None,
            written_ms: 0,
            paused: false,
            triggers_pending: 0,
            last_outcome: None,
            spec: None,
            conflict: None,
            next_fire_ms: None,
        }
    }

    /// The record's fields from the job node's data and stat.
    pub(crate) fn read(job: String, data: &[u8], stat: &zk::Stat) -> JobRecord {
        let mut shown = match TickRecord::decode(data) {
            Ok(Some(record)) => JobRecord {
                tick_ms: Some(record.tick),
                session: record.session.map(|s| format!("{s:#x}")),
                ..JobRecord::new(job, record.state.as_str())
            },
            Ok(None) => JobRecord::new(job, "none"),
            Err(_) => JobRecord::new(job, "unreadable"),
        };
        shown.written_ms = stat.mtime;
        shown
    }
}

fn zk_error(op: &'static str) -> impl FnOnce(zk::Error) -> LockError {
    move |err| LockError::zk(op, err)
}

async fn session_zk(client: &LockClient, op: &'static str) -> Result<std::sync::Arc<zk::Client>, LockError> {
    let session = client.session(None).await?;
    session.zk().map_err(zk_error(op))
}

fn store_of(client: &LockClient, job: &str) -> Result<RecordStore, LockError> {
    crate::name::validate_name(job)?;
    Ok(RecordStore::for_job(client.namespace(), job))
}

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

/// Every singleton job of `client`'s namespace: its last tick and how it ended, whether it is
/// paused, pending run-now requests, the newest run's outcome, its registration and next tick
/// (the `zklock jobs` command). A job whose node this client may not read is listed as
/// `forbidden`; the others are still listed.
///
/// # Cancel safety
///
/// Cancel safe: it only reads.
///
/// # Examples
///
/// ```no_run
/// # async fn demo(client: zklock_runtime::LockClient) -> Result<(), zklock_runtime::LockError> {
/// for job in zklock_runtime::scheduler::job_records(&client).await? {
///     println!("{}: tick {:?} {} paused={}", job.job, job.tick_ms, job.state, job.paused);
/// }
/// # Ok(()) }
/// ```
pub async fn job_records(client: &LockClient) -> Result<Vec<JobRecord>, LockError> {
    let zk = session_zk(client, "read job records").await?;
    let root = records_root(client.namespace());
    let mut jobs = match zk.list_children(&root).await {
        Ok(jobs) => jobs,
        Err(zk::Error::NoNode) => return Ok(Vec::new()),
        Err(err) => return Err(LockError::zk("list job records", err)),
    };
    jobs.sort();
    let reads = futures_util::future::join_all(
        jobs.iter()
            .map(|job| read_job(&zk, RecordStore::for_job(client.namespace(), job))),
    )
    .await;
    let mut records = Vec::with_capacity(jobs.len());
    for (job, read) in jobs.into_iter().zip(reads) {
        match read {
            Ok(Some(record)) => records.push(record),
            // Removed between the listing and the read.
            Ok(None) => {}
            // One job this client may not read (its ACL) is shown as such.
            Err(zk::Error::NoAuth) => records.push(JobRecord::new(job, "forbidden")),
            Err(err) => return Err(LockError::zk("read job records", err)),
        }
    }
    Ok(records)
}

async fn read_job(zk: &zk::Client, store: RecordStore) -> Result<Option<JobRecord>, zk::Error> {
    let job = store.path.rsplit('/').next().unwrap_or_default().to_owned();
    let (record, children, history, spec, conflict) = tokio::join!(
        zk.get_data(&store.path),
        zk.list_children(&store.path),
        zk.get_data(&store.child(HISTORY)),
        zk.get_data(&store.child(SPEC)),
        zk.get_data(&store.child(SPEC_CONFLICT)),
    );
    let (data, stat) = match record {
        Ok(read) => read,
        Err(zk::Error::NoNode) => return Ok(None),
        Err(err) => return Err(err),
    };
    if removed(&data, &stat) {
        return Ok(None);
    }
    let mut shown = JobRecord::read(job, &data, &stat);
    let children = children.unwrap_or_default();
    shown.paused = children.iter().any(|c| c == PAUSED);
    shown.triggers_pending = children.iter().filter(|c| c.starts_with(TRIGGER_PREFIX)).count();
    shown.last_outcome = history
        .ok()
        .and_then(|(data, _)| history::parse(&data).into_iter().next())
        .map(|entry| entry.outcome);
    let spec_of = |read: Result<(Vec<u8>, zk::Stat), zk::Error>| {
        read.ok()
            .and_then(|(data, _)| serde_json::from_slice::<JobSpec>(&data).ok())
    };
    shown.spec = spec_of(spec);
    shown.conflict = spec_of(conflict);
    shown.next_fire_ms = shown.spec.as_ref().and_then(|spec| {
        let zone = spec.time_zone.parse().ok()?;
        Ticks::parse(&spec.schedule).ok()?.in_zone(zone).after(now_ms())
    });
    Ok(Some(shown))
}

/// The latest runs of `job`, newest first (at most 50): tick, node, start, duration, outcome,
/// error. Empty for a job that never ran.
///
/// # Cancel safety
///
/// Cancel safe: it only reads.
///
/// # Examples
///
/// ```no_run
/// # async fn demo(client: zklock_runtime::LockClient) -> Result<(), zklock_runtime::LockError> {
/// for run in zklock_runtime::scheduler::job_history(&client, "nightly-report").await? {
///     println!("{:?} on {}: {:?} in {} ms", run.tick, run.node, run.outcome, run.duration_ms);
/// }
/// # Ok(()) }
/// ```
pub async fn job_history(client: &LockClient, job: &str) -> Result<Vec<HistoryEntry>, LockError> {
    let store = store_of(client, job)?;
    let zk = session_zk(client, "read job history").await?;
    match zk.get_data(&store.child(HISTORY)).await {
        Ok((data, _)) => Ok(history::parse(&data)),
        Err(zk::Error::NoNode) => Ok(Vec::new()),
        Err(err) => Err(LockError::zk("read job history", err)),
    }
}

/// Pauses `job` on every node: no tick of it runs anywhere until [`resume_job`]; each tick that
/// passes meanwhile is recorded as skipped (once) and never replayed. A run already going is
/// not stopped; run-now requests are still served. Returns whether the job was running before
/// (`false`: it was paused already), or `None` when there is no job of that name (no node has
/// run it, and [`create_job`] did not make it): nothing is changed then, so a mistyped name
/// leaves no job behind.
///
/// # Cancel safety
///
/// Dropped before it returns, the job may or may not be paused; calling it again settles it.
///
/// # Examples
///
/// ```no_run
/// # async fn demo(client: zklock_runtime::LockClient) -> Result<(), zklock_runtime::LockError> {
/// use zklock_runtime::scheduler::{pause_job, resume_job};
/// if pause_job(&client, "nightly-report").await?.is_none() {
///     eprintln!("no such job");
/// }
/// // ... maintenance ...
/// resume_job(&client, "nightly-report").await?;
/// # Ok(()) }
/// ```
pub async fn pause_job(client: &LockClient, job: &str) -> Result<Option<bool>, LockError> {
    let store = store_of(client, job)?;
    let zk = session_zk(client, "pause job").await?;
    if !exists(&zk, &store, "pause job").await? {
        return Ok(None);
    }
    let acls = client.inner.config.acls();
    let note = format!("by={} at={}", client.identity().replace(' ', "_"), now_ms());
    let options = zk::CreateMode::Persistent.with_acls(acls);
    match zk.create(&store.child(PAUSED), note.as_bytes(), &options).await {
        Ok(_) => Ok(Some(true)),
        Err(zk::Error::NodeExists) => Ok(Some(false)),
        Err(zk::Error::NoNode) => Ok(None),
        Err(err) => Err(LockError::zk("pause job", err)),
    }
}

/// Makes `job` known to operators before any node has run it: creates its znode (the nodes
/// that run the job later use it as theirs), so that [`pause_job`] and [`trigger_job`] accept
/// its name, for pausing a job before its first deploy, say. Returns whether it was created
/// (`false`: it existed).
///
/// # Cancel safety
///
/// Dropped before it returns, the job may or may not exist; calling it again settles it.
///
/// # Examples
///
/// ```no_run
/// # async fn demo(client: zklock_runtime::LockClient) -> Result<(), zklock_runtime::LockError> {
/// use zklock_runtime::scheduler::{create_job, pause_job};
/// create_job(&client, "new-report").await?;
/// pause_job(&client, "new-report").await?;
/// # Ok(()) }
/// ```
pub async fn create_job(client: &LockClient, job: &str) -> Result<bool, LockError> {
    let store = store_of(client, job)?;
    let zk = session_zk(client, "create job").await?;
    if exists(&zk, &store, "create job").await? {
        return Ok(false);
    }
    store
        .create(&zk, client.inner.config.acls())
        .await
        .map_err(zk_error("create job"))?;
    // What a removal left: the history makes it a job again (and keeps the server from
    // reaping it); its record still stands for the ticks before the removal.
    let options = zk::CreateMode::Persistent.with_acls(client.inner.config.acls());
    match zk.create(&store.child(HISTORY), b"[]", &options).await {
        Ok(_) | Err(zk::Error::NodeExists) => Ok(true),
        Err(err) => Err(LockError::zk("create job", err)),
    }
}

/// Resumes a job paused with [`pause_job`]: its next tick runs as usual; the ticks that passed
/// while it was paused are not replayed. Returns whether it was paused.
///
/// # Cancel safety
///
/// Dropped before it returns, the job may or may not be resumed; calling it again settles it.
///
/// # Examples
///
/// ```no_run
/// # async fn demo(client: zklock_runtime::LockClient) -> Result<(), zklock_runtime::LockError> {
/// let was_paused = zklock_runtime::scheduler::resume_job(&client, "nightly-report").await?;
/// # Ok(()) }
/// ```
pub async fn resume_job(client: &LockClient, job: &str) -> Result<bool, LockError> {
    let store = store_of(client, job)?;
    let zk = session_zk(client, "resume job").await?;
    match zk.delete(&store.child(PAUSED), None).await {
        Ok(()) => Ok(true),
        Err(zk::Error::NoNode) => Ok(false),
        Err(err) => Err(LockError::zk("resume job", err)),
    }
}

/// Asks for one run of `job` now, on exactly one node that runs the job (within about a second
/// when the job is idle; after the current run otherwise), also while the job is paused. The run
/// does not touch the schedule's tick record; its history entry has no tick. Returns the
/// request's name (`trigger-<n>`); it disappears once a node takes it. Returns `None`, and asks
/// for nothing, when there is no job of that name (no node has run it, and [`create_job`] did
/// not make it): a request under a mistyped name would wait forever.
///
/// # Cancel safety
///
/// Not cancel safe: dropped after its request was sent, the run may still be made, and calling
/// it again asks for a second one. `zklock jobs` shows pending requests.
///
/// # Examples
///
/// ```no_run
/// # async fn demo(client: zklock_runtime::LockClient) -> Result<(), zklock_runtime::LockError> {
/// let request = zklock_runtime::scheduler::trigger_job(&client, "nightly-report").await?;
/// # Ok(()) }
/// ```
pub async fn trigger_job(client: &LockClient, job: &str) -> Result<Option<String>, LockError> {
    let store = store_of(client, job)?;
    let zk = session_zk(client, "trigger job").await?;
    if !exists(&zk, &store, "trigger job").await? {
        return Ok(None);
    }
    let acls = client.inner.config.acls();
    let note = format!("by={} at={}", client.identity().replace(' ', "_"), now_ms());
    let options = zk::CreateMode::PersistentSequential.with_acls(acls);
    match zk.create(&store.child(TRIGGER_PREFIX), note.as_bytes(), &options).await {
        Ok((_, sequence)) => Ok(Some(format!("{TRIGGER_PREFIX}{sequence}"))),
        Err(zk::Error::NoNode) => Ok(None),
        Err(err) => Err(LockError::zk("trigger job", err)),
    }
}

/// Clears `job`'s tick record and history, under the job's lock (waiting at most `wait` for a
/// run to end): the next tick runs as a first tick would, no late ticks are run from before the
/// reset. The record keeps the time of the reset (state `reset`), so that a tick due before it
/// is not run again by a node whose clock runs behind. Pause and pending run-now requests are
/// kept. Returns whether the job existed.
///
/// # Cancel safety
///
/// Dropped before it returns, the record may or may not be cleared (the job's lock is let go
/// either way); calling it again settles it.
///
/// # Examples
///
/// ```no_run
/// # async fn demo(client: zklock_runtime::LockClient) -> Result<(), zklock_runtime::LockError> {
/// use std::time::Duration;
/// zklock_runtime::scheduler::reset_job(&client, "nightly-report", Duration::from_secs(10)).await?;
/// # Ok(()) }
/// ```
pub async fn reset_job(client: &LockClient, job: &str, wait: Duration) -> Result<bool, LockError> {
    let store = store_of(client, job)?;
    let zk = session_zk(client, "reset job").await?;
    if !exists(&zk, &store, "reset job").await? {
        return Ok(false);
    }
    let guard = client.mutex(job)?.acquire_timeout(wait).await?;
    let state = store
        .read_state(&zk, client.inner.config.acls())
        .await
        .map_err(zk_error("reset job"))?;
    // Not cleared: a tombstone of the reset, the time it happened by ZooKeeper's clock as its
    // tick, without a version stamp. A node whose clock runs behind cannot run a tick again
    // that was run before the reset, and no late tick is run from before it.
    let tombstone = guard.server_now_ms().map(|now| {
        let mut record = TickRecord::next(None, now, RunState::Reset, client.session_id(), state.stat.version);
        record.version = None;
        record.encode()
    });
    let commit = Commit {
        record: Some((tombstone.unwrap_or_default(), state.stat.version)),
        history: Some(b"[]".to_vec()),
        take: None,
        markers: Vec::new(),
        unless_paused: false,
    };
    let done = store
        .commit(&zk, client.inner.config.acls(), guard.node_path(), commit)
        .await;
    guard.release().await?;
    match done {
        Ok(_) => Ok(true),
        Err(WriteError::ZooKeeper(err)) => Err(LockError::zk("reset job", err)),
        Err(err) => Err(LockError::connection(format!("reset job: {err}"))),
    }
}

/// Deletes everything `job` keeps in ZooKeeper (tick record, history, pause, requests,
/// registration), under the job's lock (waiting at most `wait`), for a job no node runs any
/// more. What is left is the job's empty znode with a record of the removal's time (by
/// ZooKeeper's clock), which the server reaps (a container node; `znode.container.checkIntervalMs`,
/// a minute by default): a node still running the job starts afresh at its next tick after the
/// removal, and does not run a tick again that ran before it, even with a clock behind. Returns whether it existed;
/// an error when it could not be deleted (requests kept coming between the listing and the
/// delete, or a child has children of its own that this does not delete).
///
/// # Cancel safety
///
/// Dropped before it returns, the job may or may not be removed (the job's lock is let go
/// either way); calling it again settles it.
///
/// # Examples
///
/// ```no_run
/// # async fn demo(client: zklock_runtime::LockClient) -> Result<(), zklock_runtime::LockError> {
/// use std::time::Duration;
/// zklock_runtime::scheduler::remove_job(&client, "retired-job", Duration::from_secs(10)).await?;
/// # Ok(()) }
/// ```
pub async fn remove_job(client: &LockClient, job: &str, wait: Duration) -> Result<bool, LockError> {
    let store = store_of(client, job)?;
    let zk = session_zk(client, "remove job").await?;
    if !exists(&zk, &store, "remove job").await? {
        return Ok(false);
    }
    let guard = client.mutex(job)?.acquire_timeout(wait).await?;
    let tombstone = guard.server_now_ms().map(|now| {
        let mut record = TickRecord::next(None, now, RunState::Removed, client.session_id(), 0);
        record.version = None;
        record.encode()
    });
    let outcome = delete_job_tree(&zk, &store, guard.node_path(), tombstone).await;
    guard.release().await?;
    outcome.map(|()| true)
}

/// Deletes the job's children in one multi-operation fenced by our lock node `lock_node`,
/// and leaves the job's node (a container) with the `tombstone` record for the server to
/// reap, so that a node whose clock runs behind sees the ticks before the removal as taken;
/// without a tombstone (ZooKeeper's clock unknown), deletes the job's node too. A request created between the listing and the
/// delete makes the multi fail: lists again, [`REMOVE_ATTEMPTS`] times at most, then answers
/// the last failure.
async fn delete_job_tree(
    zk: &zk::Client,
    store: &RecordStore,
    lock_node: &str,
    tombstone: Option<Vec<u8>>,
) -> Result<(), LockError> {
    let mut last = zk::Error::NotEmpty;
    for _ in 0..REMOVE_ATTEMPTS {
        let children = match zk.list_children(&store.path).await {
            Ok(children) => children,
            // Removed meanwhile.
            Err(zk::Error::NoNode) => return Ok(()),
            Err(err) => return Err(LockError::zk("remove job", err)),
        };
        let mut multi = zk.new_multi_writer();
        let mut add = || -> Result<(), zk::Error> {
            multi.add_check_version(lock_node, -1)?;
            for child in &children {
                multi.add_delete(&store.child(child), None)?;
            }
            match tombstone.as_deref() {
                Some(tombstone) => multi.add_set_data(&store.path, tombstone, None),
                None => multi.add_delete(&store.path, None),
            }
        };
        add().map_err(zk_error("remove job"))?;
        match multi.commit().await {
            Ok(_) => return Ok(()),
            Err(zk::MultiWriteError::OperationFailed {
                source: source @ (zk::Error::NotEmpty | zk::Error::NoNode),
                ..
            }) => last = source,
            Err(err) => return Err(LockError::zk("remove job", err.into())),
        }
    }
    Err(LockError::zk("remove job", last))
}

/// How many times [`remove_job`] lists and deletes before it gives up.
const REMOVE_ATTEMPTS: usize = 5;

/// Whether the job's znode exists and is not what [`remove_job`] left of it (a record saying
/// `removed`, no children), which the server reaps.
async fn exists(zk: &zk::Client, store: &RecordStore, op: &'static str) -> Result<bool, LockError> {
    match zk.get_data(&store.path).await {
        Ok((data, stat)) => Ok(!removed(&data, &stat)),
        Err(zk::Error::NoNode) => Ok(false),
        Err(err) => Err(LockError::zk(op, err)),
    }
}

/// Whether a job's znode is what [`remove_job`] left of it.
fn removed(data: &[u8], stat: &zk::Stat) -> bool {
    stat.num_children == 0
        && TickRecord::decode(data)
            .ok()
            .flatten()
            .is_some_and(|r| r.state == RunState::Removed)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn stat(mtime: i64) -> zk::Stat {
        zk::Stat {
            czxid: 1,
            mzxid: 2,
            pzxid: 1,
            ctime: 0,
            mtime,
            version: 3,
            cversion: 0,
            aversion: 0,
            ephemeral_owner: 0,
            data_length: 0,
            num_children: 0,
        }
    }

    proptest! {
        /// Node data is anyone's bytes: an operator's listing shows the record's state, `none`
        /// or `unreadable`, and never fails.
        #[test]
        fn any_bytes_are_shown(data in prop_oneof![
            any::<Vec<u8>>(),
            "((tick|state|session)=[-+0-9a-z]{0,20}|[=a-z]{0,6})( (tick|state|session)=[-+0-9a-z]{0,20}){0,3}"
                .prop_map(String::into_bytes),
        ], mtime: i64) {
            let decoded = TickRecord::decode(&data);
            let shown = JobRecord::read("job".into(), &data, &stat(mtime));
            let expected = match &decoded {
                Ok(Some(rec)) => rec.state.as_str().to_owned(),
                Ok(None) => "none".to_owned(),
                Err(_) => "unreadable".to_owned(),
            };
            prop_assert_eq!(shown.state, expected);
            prop_assert_eq!(shown.tick_ms, decoded.ok().flatten().map(|rec| rec.tick));
            prop_assert_eq!(shown.written_ms, mtime);
        }
    }
}
