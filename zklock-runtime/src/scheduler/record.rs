//! The tick record of a once-per-tick job: one persistent znode whose data says which tick was
//! taken last, and how its run ended.
//!
//! The record lives outside the lock namespace (`<namespace>.jobs/<job>` by default): a lock
//! directory is a container node that the server reaps when empty, and its children must be
//! contenders only. Its data is one line of `key=value` words, readable in `zkCli.sh`:
//!
//! ```text
//! tick=1718000000000 state=done session=0x1000a2b3c4d0001
//! ```
//!
//! Writes are fenced: a multi-operation checks that this node's lock contender node still exists
//! and that the record has the version read under the lock, so a node that lost the lock cannot
//! overwrite the record.

use crate::zk;

/// How the run of the recorded tick ended (as far as the node that took it could tell).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum RunState {
    /// Taken; the run started and has not reported back (or its node died).
    Running,
    /// The run finished successfully.
    Done,
    /// The run returned an error or panicked.
    Failed,
    /// The run's node lost the lock (or died) before the run reported back.
    Lost,
    /// A state written by a later version: kept as written, never a reason to stop.
    Other(String),
}

impl RunState {
    pub(crate) fn as_str(&self) -> &str {
        match self {
            RunState::Running => "running",
            RunState::Done => "done",
            RunState::Failed => "failed",
            RunState::Lost => "lost",
            RunState::Other(state) => state,
        }
    }

    fn parse(word: &str) -> RunState {
        match word {
            "running" => RunState::Running,
            "done" => RunState::Done,
            "failed" => RunState::Failed,
            "lost" => RunState::Lost,
            other => RunState::Other(other.to_owned()),
        }
    }
}

/// The content of the record.
///
/// The format's rule for versions: a reader skips keys it does not know and keeps states it
/// does not know, and a writer carries the words of unknown keys over unchanged into the record
/// it writes next ([`next`](Self::next)). So a key added later survives every older node, and
/// a key that describes one run must name the tick it belongs to, since a node that does not
/// know it leaves it in place while writing later ticks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct TickRecord {
    pub tick: i64,
    pub state: RunState,
    pub session: Option<i64>,
    /// The version of the znode this data was written at (`version=`). A record whose node
    /// has another version was written by something other than a scheduler node (an operator's
    /// edit, a restored backup): its tick is still honoured, but it does not prove which ticks
    /// after it are still untaken.
    pub version: Option<i32>,
    /// The words of keys this version does not know, in their order.
    pub other: Vec<String>,
}

impl TickRecord {
    /// The record to write over `previous` (read at znode version `over`): `tick` in `state`,
    /// taken by `session`, carrying over the keys this version does not know.
    pub fn next(
        previous: Option<&TickRecord>,
        tick: i64,
        state: RunState,
        session: Option<i64>,
        over: i32,
    ) -> TickRecord {
        TickRecord {
            tick,
            state,
            session,
            version: over.checked_add(1),
            other: previous.map(|p| p.other.clone()).unwrap_or_default(),
        }
    }

    /// Whether this data was written by a scheduler node as the node's current version.
    pub fn intact(&self, node_version: i32) -> bool {
        self.version == Some(node_version)
    }

    pub fn encode(&self) -> Vec<u8> {
        let mut text = format!("tick={} state={}", self.tick, self.state.as_str());
        if let Some(session) = self.session {
            text.push_str(&format!(" session={session:#x}"));
        }
        if let Some(version) = self.version {
            text.push_str(&format!(" version={version}"));
        }
        for word in &self.other {
            text.push(' ');
            text.push_str(word);
        }
        text.into_bytes()
    }

    /// Parses a record; `Ok(None)` for an empty node (no tick taken yet).
    pub fn decode(data: &[u8]) -> Result<Option<TickRecord>, String> {
        let text = std::str::from_utf8(data).map_err(|_| "the record is not UTF-8".to_owned())?;
        if text.trim().is_empty() {
            return Ok(None);
        }
        let mut tick = None;
        let mut state = RunState::Running;
        let mut session = None;
        let mut version = None;
        let mut other = Vec::new();
        for word in text.split_whitespace() {
            let (key, value) = word
                .split_once('=')
                .ok_or_else(|| format!("`{word}` is not key=value"))?;
            match key {
                "tick" => {
                    tick = Some(
                        value
                            .parse::<i64>()
                            .map_err(|_| format!("tick `{value}` is not a number"))?,
                    )
                }
                "state" => state = RunState::parse(value),
                "session" => {
                    // The id's 64 bits, as `encode` writes them: negative ids (from a server
                    // whose `myid` is 128 or more) have the top bit set.
                    session = u64::from_str_radix(value.trim_start_matches("0x"), 16)
                        .ok()
                        .map(|id| id as i64);
                }
                // Unparsable: the record is then simply not intact.
                "version" => version = value.parse::<i32>().ok(),
                _ => other.push(word.to_owned()),
            }
        }
        let tick = tick.ok_or_else(|| "the record has no tick".to_owned())?;
        Ok(Some(TickRecord {
            tick,
            state,
            session,
            version,
            other,
        }))
    }
}

impl RecordStore {
    /// After a write of `record` over `version` failed without a definite answer (the
    /// connection dropped: the multi-operation may or may not have been applied), finds out
    /// which: syncs and re-reads the record until the server answers, for at most `within`.
    /// `Some(stat)` when the record is at `version + 1` and is exactly `record` — which carries
    /// this session's id, so only our write can have put it there (the multi is atomic, so it
    /// also passed its lock check); `None` when it was not applied or cannot be told.
    pub async fn confirm(
        &self,
        zk: &zk::Client,
        record: &TickRecord,
        version: i32,
        within: std::time::Duration,
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
                Err(err) if crate::error::is_transient(&err) && tokio::time::Instant::now() < deadline => {
                    tokio::time::sleep(std::time::Duration::from_millis(100)).await;
                }
                Err(_) => return None,
            }
        }
    }
}

/// Why a fenced write did not happen.
#[derive(Debug)]
pub(crate) enum WriteError {
    /// Our contender node is gone or the record changed since we read it: we no longer hold
    /// the lock, or someone writes without it.
    Fenced,
    /// ZooKeeper could not be asked.
    ZooKeeper(zk::Error),
}

impl std::fmt::Display for WriteError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            WriteError::Fenced => {
                f.write_str("the lock node is gone or the record changed since it was read under the lock")
            }
            WriteError::ZooKeeper(e) => write!(f, "ZooKeeper: {e}"),
        }
    }
}

/// One job's tick record as an operator sees it ([`job_records`](super::job_records)).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[non_exhaustive]
pub struct JobRecord {
    /// The job's name (also the name of its lock).
    pub job: String,
    /// The last tick taken, in milliseconds since the Unix epoch; `None` before the first.
    pub tick_ms: Option<i64>,
    /// How that tick's run ended: `running`, `done`, `failed` or `lost` (or a state written by
    /// a later version); `unreadable` when the record cannot be parsed, `forbidden` when its ACL
    /// does not let this client read it, `none` before the first tick.
    pub state: String,
    /// The ZooKeeper session of the node that took the tick.
    pub session: Option<String>,
    /// When the record was last written, by ZooKeeper's clock (ms since the Unix epoch); 0 when
    /// it could not be read.
    pub written_ms: i64,
}

impl JobRecord {
    fn forbidden(job: String) -> JobRecord {
        JobRecord {
            job,
            tick_ms: None,
            state: "forbidden".to_owned(),
            session: None,
            written_ms: 0,
        }
    }

    fn read(job: String, data: &[u8], stat: &zk::Stat) -> JobRecord {
        let (tick_ms, state, session) = match TickRecord::decode(data) {
            Ok(Some(record)) => (
                Some(record.tick),
                record.state.as_str().to_owned(),
                record.session.map(|s| format!("{s:#x}")),
            ),
            Ok(None) => (None, "none".to_owned(), None),
            Err(_) => (None, "unreadable".to_owned(), None),
        };
        JobRecord {
            job,
            tick_ms,
            state,
            session,
            written_ms: stat.mtime,
        }
    }
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

/// Reads every job record under `root`, sorted by job name.
pub(crate) async fn read_all(zk: &zk::Client, root: &str) -> Result<Vec<JobRecord>, zk::Error> {
    let mut jobs = match zk.list_children(root).await {
        Ok(jobs) => jobs,
        Err(zk::Error::NoNode) => return Ok(Vec::new()),
        Err(err) => return Err(err),
    };
    jobs.sort();
    let reads = futures_util::future::join_all(jobs.iter().map(|job| zk.get_data(&format!("{root}/{job}")))).await;
    let mut records = Vec::with_capacity(jobs.len());
    for (job, read) in jobs.into_iter().zip(reads) {
        match read {
            Ok((data, stat)) => records.push(JobRecord::read(job, &data, &stat)),
            // Deleted between the listing and the read.
            Err(zk::Error::NoNode) => {}
            // One record this client may not read (its ACL) is shown as such; the rest are
            // still listed.
            Err(zk::Error::NoAuth) => records.push(JobRecord::forbidden(job)),
            Err(err) => return Err(err),
        }
    }
    Ok(records)
}

/// Where one job's record lives.
#[derive(Debug, Clone)]
pub(crate) struct RecordStore {
    pub path: String,
}

impl RecordStore {
    /// The record of `job` for a client whose lock namespace is `namespace`.
    pub fn for_job(namespace: &str, job: &str) -> RecordStore {
        RecordStore {
            path: format!("{}/{job}", records_root(namespace)),
        }
    }

    /// Reads the record with its version, creating the (empty) node and its parents first if
    /// it does not exist.
    pub async fn read(
        &self,
        zk: &zk::Client,
        acls: zk::Acls<'_>,
    ) -> Result<(Result<Option<TickRecord>, String>, zk::Stat), zk::Error> {
        loop {
            match zk.get_data(&self.path).await {
                Ok((data, stat)) => return Ok((TickRecord::decode(&data), stat)),
                Err(zk::Error::NoNode) => self.create(zk, acls).await?,
                Err(e) => return Err(e),
            }
        }
    }

    async fn create(&self, zk: &zk::Client, acls: zk::Acls<'_>) -> Result<(), zk::Error> {
        let options = zk::CreateMode::Persistent.with_acls(acls);
        let mut at = 0;
        while let Some(next) = self.path[at + 1..].find('/') {
            at += 1 + next;
            match zk.create(&self.path[..at], b"", &options).await {
                Ok(_) | Err(zk::Error::NodeExists) => {}
                Err(e) => return Err(e),
            }
        }
        match zk.create(&self.path, b"", &options).await {
            Ok(_) | Err(zk::Error::NodeExists) => Ok(()),
            Err(e) => Err(e),
        }
    }

    /// Writes `record` if our lock node `lock_node` still exists and the record still has
    /// `version`; returns the new version.
    pub async fn write(
        &self,
        zk: &zk::Client,
        lock_node: &str,
        record: &TickRecord,
        version: i32,
    ) -> Result<i32, WriteError> {
        self.write_stat(zk, lock_node, record, version)
            .await
            .map(|stat| stat.version)
    }

    /// Like [`write`](Self::write), returning the record's new stat (its version, and its
    /// `mtime`: the ensemble's commit time of the write).
    pub async fn write_stat(
        &self,
        zk: &zk::Client,
        lock_node: &str,
        record: &TickRecord,
        version: i32,
    ) -> Result<zk::Stat, WriteError> {
        let data = record.encode();
        let mut multi = zk.new_multi_writer();
        multi.add_check_version(lock_node, -1).map_err(WriteError::ZooKeeper)?;
        multi
            .add_set_data(&self.path, &data, Some(version))
            .map_err(WriteError::ZooKeeper)?;
        match multi.commit().await {
            Ok(results) => match results.into_iter().nth(1) {
                Some(zk::MultiWriteResult::SetData { stat }) => Ok(stat),
                _ => Err(WriteError::ZooKeeper(zk::Error::UnexpectedError(
                    "multi-operation answered without the set-data result".into(),
                ))),
            },
            Err(zk::MultiWriteError::OperationFailed {
                source: zk::Error::NoNode | zk::Error::BadVersion,
                ..
            }) => Err(WriteError::Fenced),
            Err(e) => Err(WriteError::ZooKeeper(e.into())),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn a_record_survives_encoding() {
        let rec = TickRecord {
            tick: 1_718_000_000_000,
            state: RunState::Failed,
            session: Some(0x1000a2b3c4d0001),
            version: Some(7),
            other: vec!["zone=Europe/Berlin".into()],
        };
        assert_eq!(
            String::from_utf8(rec.encode()).unwrap(),
            "tick=1718000000000 state=failed session=0x1000a2b3c4d0001 version=7 zone=Europe/Berlin"
        );
        assert_eq!(TickRecord::decode(&rec.encode()), Ok(Some(rec)));
        assert_eq!(TickRecord::decode(b""), Ok(None));
    }

    #[test]
    fn a_damaged_record_is_an_error_not_a_panic() {
        assert!(TickRecord::decode(b"tick=abc").is_err());
        assert!(TickRecord::decode(b"state=done").is_err());
        assert!(TickRecord::decode(b"garbage").is_err());
        assert!(TickRecord::decode(&[0xff, 0xfe]).is_err());
    }

    /// What a later version writes does not stop this one: an unknown state is kept as written,
    /// unknown keys are carried into the next record, and the version stamp says whether the
    /// data is the node's current version.
    #[test]
    fn a_later_versions_record_is_read_and_carried_over() {
        let newer = TickRecord::decode(b"tick=5 state=paused session=0x1 version=3 owner=ops until=9")
            .unwrap()
            .unwrap();
        assert_eq!(newer.state, RunState::Other("paused".into()));
        assert!(newer.intact(3) && !newer.intact(4));
        let next = TickRecord::next(Some(&newer), 6, RunState::Running, Some(2), 3);
        assert_eq!(
            String::from_utf8(next.encode()).unwrap(),
            "tick=6 state=running session=0x2 version=4 owner=ops until=9"
        );
        assert!(next.intact(4));
        // Hand-written, or a version that had no stamp: honoured, never intact.
        let plain = TickRecord::decode(b"tick=5 state=done").unwrap().unwrap();
        assert!(!plain.intact(0) && !plain.intact(1));
        assert!(!TickRecord::decode(b"tick=5 version=x").unwrap().unwrap().intact(0));
    }

    /// A claim whose multi-operation was applied but whose answer was lost (a connection drop
    /// during failover) is recognised from the record itself; a record someone else wrote, or
    /// one written again since, is not taken for ours.
    #[tokio::test]
    async fn an_applied_claim_whose_answer_was_lost_is_recognised() {
        let server = zklock_testing::ZkServer::start().unwrap();
        let zk = zk::Client::connector()
            .with_session_timeout(std::time::Duration::from_secs(4))
            .connect(&server.connect_string())
            .await
            .unwrap();
        let store = RecordStore::for_job("/zklock", "ambiguous");
        let (_, stat) = store.read(&zk, zk::Acls::anyone_all()).await.unwrap();
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

    /// A server whose `myid` is 128 or more hands out negative session ids (the id is in the top
    /// byte); a claim of such a session must still be recognised by `confirm`.
    #[test]
    fn a_negative_session_survives_encoding() {
        for session in [-1, 0x8100_0a2b_3c4d_0001_u64 as i64] {
            let rec = TickRecord::next(None, 0, RunState::Running, Some(session), 0);
            assert_eq!(TickRecord::decode(&rec.encode()), Ok(Some(rec)));
        }
    }

    fn state() -> impl Strategy<Value = RunState> {
        prop_oneof![
            prop::sample::select(vec![
                RunState::Running,
                RunState::Done,
                RunState::Failed,
                RunState::Lost,
            ]),
            "[a-z][a-z_-]{0,10}".prop_map(|s| RunState::parse(&s)),
        ]
    }

    fn record() -> impl Strategy<Value = TickRecord> {
        let other = prop::collection::vec(("[a-z_]{1,8}", "[!-~]{0,8}"), 0..3).prop_map(|words| {
            words
                .into_iter()
                .filter(|(k, _)| !matches!(k.as_str(), "tick" | "state" | "session" | "version"))
                .map(|(k, v)| format!("{k}={v}"))
                .collect()
        });
        (any::<i64>(), state(), any::<Option<i64>>(), any::<Option<i32>>(), other).prop_map(
            |(tick, state, session, version, other)| TickRecord {
                tick,
                state,
                session,
                version,
                other,
            },
        )
    }

    /// `key=value` words of keys this version does not know, each with where it goes.
    fn unknown_words() -> impl Strategy<Value = Vec<(String, prop::sample::Index)>> {
        let key = "[a-z_]{1,10}".prop_filter("a known key", |k| {
            !matches!(k.as_str(), "tick" | "state" | "session" | "version")
        });
        let word = (key, "[!-~]{0,12}").prop_map(|(k, v)| format!("{k}={v}"));
        prop::collection::vec((word, any::<prop::sample::Index>()), 0..4)
    }

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
        #[test]
        fn every_record_survives_encoding(rec in record()) {
            prop_assert_eq!(TickRecord::decode(&rec.encode()), Ok(Some(rec)));
        }

        /// A later version's keys, anywhere in the line and with any spacing, are kept in their
        /// order and change nothing else.
        #[test]
        fn unknown_keys_are_kept(rec in record(), extra in unknown_words(), gap in "[ \t\n]{1,3}") {
            let encoded = String::from_utf8(rec.encode()).unwrap();
            let mut words: Vec<String> = encoded.split(' ').map(str::to_owned).collect();
            for (word, at) in extra {
                words.insert(at.index(words.len() + 1), word);
            }
            let known = |w: &String| ["tick=", "state=", "session=", "version="].iter().any(|k| w.starts_with(k));
            let expected = TickRecord {
                other: words.iter().filter(|w| !known(w)).cloned().collect(),
                ..rec
            };
            prop_assert_eq!(TickRecord::decode(words.join(&gap).as_bytes()), Ok(Some(expected)));
        }

        /// Node data is anyone's bytes: decoding answers a record, nothing, or a reason; and an
        /// operator's listing shows one of the known states, never fails.
        #[test]
        fn any_bytes_decode_or_say_why(data in prop_oneof![
            any::<Vec<u8>>(),
            "((tick|state|session)=[-+0-9a-z]{0,20}|[=a-z]{0,6})( (tick|state|session)=[-+0-9a-z]{0,20}){0,3}"
                .prop_map(String::into_bytes),
        ], mtime: i64) {
            let decoded = TickRecord::decode(&data);
            match &decoded {
                Ok(Some(rec)) => prop_assert_eq!(TickRecord::decode(&rec.encode()), Ok(Some(rec.clone()))),
                Ok(None) => prop_assert!(std::str::from_utf8(&data).is_ok_and(|t| t.trim().is_empty())),
                Err(why) => prop_assert!(!why.is_empty()),
            }
            let shown = JobRecord::read("job".into(), &data, &stat(mtime));
            let expected = match &decoded {
                Ok(Some(rec)) => rec.state.as_str(),
                Ok(None) => "none",
                Err(_) => "unreadable",
            };
            prop_assert_eq!(shown.state, expected);
            prop_assert_eq!(shown.tick_ms, decoded.ok().flatten().map(|rec| rec.tick));
            prop_assert_eq!(shown.written_ms, mtime);
        }

        /// A tick that is not a number makes the record unreadable, with the culprit named.
        #[test]
        fn a_value_of_the_wrong_type_is_named(rec in record(), tick in "[a-z.][!-~]{0,10}|[1-9][0-9]{19,29}", state in "[!-~]{1,10}") {
            let text = format!("tick={tick} state={}", rec.state.as_str());
            let decoded = TickRecord::decode(text.as_bytes());
            prop_assert!(decoded.as_ref().is_err_and(|why| why.contains(&tick)), "{:?}", decoded);
            // A state this version does not know is a later version's, kept as written.
            prop_assume!(!matches!(state.as_str(), "running" | "done" | "failed" | "lost"));
            let text = format!("tick={} state={state}", rec.tick);
            let decoded = TickRecord::decode(text.as_bytes()).unwrap().unwrap();
            prop_assert_eq!(decoded.state, RunState::Other(state));
        }
    }

    #[test]
    fn records_live_beside_the_lock_namespace() {
        assert_eq!(RecordStore::for_job("/zklock", "report").path, "/zklock.jobs/report");
        assert_eq!(RecordStore::for_job("/apps/locks/", "r").path, "/apps/locks.jobs/r");
        assert_eq!(RecordStore::for_job("/", "r").path, "/zklock.jobs/r");
    }
}
