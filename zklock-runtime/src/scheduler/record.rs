//! The tick record of a singleton job: which tick was taken last, and how its run ended.
//!
//! It is the data of the job's znode (`<namespace>.jobs/<job>`, see [`super::store`]): one line
//! of `key=value` words, readable in `zkCli.sh`:
//!
//! ```text
//! tick=1718000000000 state=done session=0x1000a2b3c4d0001 version=12
//! ```

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
    /// Not run: the job was paused.
    Skipped,
    /// Not run: given up by the catch-up policy or the starting deadline.
    Missed,
    /// Aborted to make way for a later tick.
    Replaced,
    /// Not a run: an operator reset the job ([`reset_job`](super::reset_job)) when ZooKeeper's
    /// clock read `tick`; every tick up to then counts as taken, no later one as proven.
    Reset,
    /// Not a run: an operator removed the job ([`remove_job`](super::remove_job)) when
    /// ZooKeeper's clock read `tick`. The job's znode is left empty with this record until the
    /// server reaps it (it is a container node), so that a node still running the job, with a
    /// clock behind, does not run a tick again that ran before the removal.
    Removed,
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
            RunState::Skipped => "skipped",
            RunState::Missed => "missed",
            RunState::Replaced => "replaced",
            RunState::Reset => "reset",
            RunState::Removed => "removed",
            RunState::Other(state) => state,
        }
    }

    fn parse(word: &str) -> RunState {
        match word {
            "running" => RunState::Running,
            "done" => RunState::Done,
            "failed" => RunState::Failed,
            "lost" => RunState::Lost,
            "skipped" => RunState::Skipped,
            "missed" => RunState::Missed,
            "replaced" => RunState::Replaced,
            "reset" => RunState::Reset,
            "removed" => RunState::Removed,
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

    /// This record's run ended in `state`, written over znode version `over`. The version
    /// stamp is kept off when this record was not [`intact`](Self::intact) there (restored or
    /// edited): settling a run proves no more about the ticks than the record did.
    pub fn ended(&self, state: RunState, over: i32) -> TickRecord {
        let mut next = TickRecord::next(Some(self), self.tick, state, self.session, over);
        if !self.intact(over) {
            next.version = None;
        }
        next
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
                RunState::Skipped,
                RunState::Missed,
                RunState::Replaced,
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

        /// Node data is anyone's bytes: decoding answers a record, nothing, or a reason.
        #[test]
        fn any_bytes_decode_or_say_why(data in prop_oneof![
            any::<Vec<u8>>(),
            "((tick|state|session)=[-+0-9a-z]{0,20}|[=a-z]{0,6})( (tick|state|session)=[-+0-9a-z]{0,20}){0,3}"
                .prop_map(String::into_bytes),
        ]) {
            let decoded = TickRecord::decode(&data);
            match &decoded {
                Ok(Some(rec)) => prop_assert_eq!(TickRecord::decode(&rec.encode()), Ok(Some(rec.clone()))),
                Ok(None) => prop_assert!(std::str::from_utf8(&data).is_ok_and(|t| t.trim().is_empty())),
                Err(why) => prop_assert!(!why.is_empty()),
            }
        }

        /// A tick that is not a number makes the record unreadable, with the culprit named.
        #[test]
        fn a_value_of_the_wrong_type_is_named(rec in record(), tick in "[a-z.][!-~]{0,10}|[1-9][0-9]{19,29}", state in "[!-~]{1,10}") {
            let text = format!("tick={tick} state={}", rec.state.as_str());
            let decoded = TickRecord::decode(text.as_bytes());
            prop_assert!(decoded.as_ref().is_err_and(|why| why.contains(&tick)), "{:?}", decoded);
            // A state this version does not know is a later version's, kept as written.
            prop_assume!(!matches!(state.as_str(), "running" | "done" | "failed" | "lost" | "skipped" | "missed" | "replaced"));
            let text = format!("tick={} state={state}", rec.tick);
            let decoded = TickRecord::decode(text.as_bytes()).unwrap().unwrap();
            prop_assert_eq!(decoded.state, RunState::Other(state));
        }
    }
}
