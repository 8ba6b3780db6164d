//! A job's run history: the latest runs, newest first, kept in ZooKeeper beside the tick record
//! (`<namespace>.jobs/<job>/history`) as a JSON array, bounded in entries and in bytes.
//!
//! Entries are JSON objects; a node keeps the fields it does not know when it adds an entry, so
//! a later version may add fields. Only the node holding the job's lock writes the history,
//! in the same fenced multi-operation as the tick record.

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// How many runs a job's history keeps (the oldest go first).
pub(crate) const MAX_ENTRIES: usize = 50;

/// How large a job's history may grow, in bytes of JSON (ZooKeeper's default limit for a node
/// is 1 MiB).
pub(crate) const MAX_BYTES: usize = 64 * 1024;

/// How much of a run's error text is kept.
pub(crate) const MAX_ERROR_BYTES: usize = 1024;

/// How one run (or one tick that did not run) ended.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum Outcome {
    /// The run returned `()` or `Ok`.
    Ok,
    /// The run returned an error; its text is in [`HistoryEntry::error`].
    Failed,
    /// The run panicked.
    Panicked,
    /// The run outlasted the job's `max_hold` and was aborted.
    TimedOut,
    /// The run's node lost the job's lock (or died) before the run reported back.
    Lost,
    /// The run was aborted to make way for a later tick ([`Policy::Replace`](super::Policy::Replace)).
    Replaced,
    /// The tick did not run: the job was paused, or running already (see the error text).
    Skipped,
    /// Ticks given up without running anywhere: too late for the catch-up policy.
    Missed,
    /// An outcome written by a later version.
    #[serde(other)]
    Other,
}

/// One entry of a job's history ([`job_history`](super::job_history)).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct HistoryEntry {
    /// The scheduled tick, in milliseconds since the Unix epoch; `None` for a run an operator
    /// triggered.
    pub tick: Option<i64>,
    /// The identity of the node that ran it (its lock client's holder identity), or of the node
    /// that noticed a tick was missed or a run lost.
    pub node: String,
    /// When the run started (or the entry was made), by that node's clock, in ms since the
    /// Unix epoch.
    pub started: i64,
    /// How long the run took.
    pub duration_ms: u64,
    /// How it ended.
    pub outcome: Outcome,
    /// The run's error, cut to a bounded length; what was skipped or missed, and why.
    pub error: Option<String>,
    /// For an entry that stands for a run of ticks not run (missed, or passed over by the skip
    /// policy): the first of them; [`tick`](Self::tick) is the last.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub first_tick: Option<i64>,
}

impl HistoryEntry {
    pub(crate) fn new(tick: Option<i64>, node: &str, started: i64, duration_ms: u64, outcome: Outcome) -> HistoryEntry {
        HistoryEntry {
            tick,
            node: node.to_owned(),
            started,
            duration_ms,
            outcome,
            error: None,
            first_tick: None,
        }
    }

    /// Makes the entry stand for the ticks from `first` to its own.
    pub(crate) fn starting_at(mut self, first: i64) -> HistoryEntry {
        self.first_tick = Some(first);
        self
    }

    pub(crate) fn because(mut self, error: impl Into<String>) -> HistoryEntry {
        self.error = Some(cut(error.into(), MAX_ERROR_BYTES));
        self
    }
}

/// `text` cut to at most `max` bytes, on a character boundary, marked when cut.
fn cut(mut text: String, max: usize) -> String {
    if text.len() <= max {
        return text;
    }
    let mut end = max.saturating_sub(3);
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    text.truncate(end);
    text.push_str("...");
    text
}

/// The entries of a history node as written (unknown fields and all); empty for an empty or
/// unreadable node, which the next write replaces.
pub(crate) fn parse_raw(data: &[u8]) -> Vec<Value> {
    serde_json::from_slice::<Vec<Value>>(data).unwrap_or_default()
}

/// The entries of a history node this version can read, newest first.
pub(crate) fn parse(data: &[u8]) -> Vec<HistoryEntry> {
    parse_raw(data)
        .into_iter()
        .filter_map(|value| serde_json::from_value(value).ok())
        .collect()
}

/// The latest tick the history `raw` names (a run's, or the last of a range).
pub(crate) fn latest_tick(raw: &[Value]) -> Option<i64> {
    raw.iter().filter_map(|value| value.get("tick")?.as_i64()).max()
}

/// The history `raw` with `entries` added in front (the last of `entries` newest), cut to
/// [`MAX_ENTRIES`] and [`MAX_BYTES`].
pub(crate) fn prepend(mut raw: Vec<Value>, entries: &[HistoryEntry]) -> Vec<u8> {
    for entry in entries {
        if let Ok(value) = serde_json::to_value(entry) {
            raw.insert(0, value);
        }
    }
    raw.truncate(MAX_ENTRIES);
    loop {
        let bytes = serde_json::to_vec(&raw).unwrap_or_else(|_| b"[]".to_vec());
        if bytes.len() <= MAX_BYTES || raw.len() <= 1 {
            return bytes;
        }
        raw.pop();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(tick: i64) -> HistoryEntry {
        HistoryEntry::new(Some(tick), "node-a", tick, 5, Outcome::Ok)
    }

    #[test]
    fn entries_are_newest_first_and_bounded_in_number() {
        let mut data = b"[]".to_vec();
        for tick in 0..(MAX_ENTRIES as i64 + 7) {
            data = prepend(parse_raw(&data), &[entry(tick)]);
        }
        let kept = parse(&data);
        assert_eq!(kept.len(), MAX_ENTRIES);
        assert_eq!(kept[0].tick, Some(MAX_ENTRIES as i64 + 6));
        assert_eq!(kept.last().unwrap().tick, Some(7));
    }

    #[test]
    fn entries_are_bounded_in_bytes_and_errors_cut() {
        let long = "é".repeat(MAX_ERROR_BYTES);
        let failed = HistoryEntry::new(Some(1), "n", 1, 1, Outcome::Failed).because(long);
        let error = failed.error.clone().unwrap();
        assert!(error.len() <= MAX_ERROR_BYTES && error.ends_with("..."));
        // Entries of a later version with large fields: the oldest go until the bytes fit.
        let big: Vec<Value> = (0..20)
            .map(|i| serde_json::json!({"tick": i, "node": "n", "started": 0, "duration_ms": 0, "outcome": "ok", "error": null, "trace": "x".repeat(8 * 1024)}))
            .collect();
        let data = prepend(big, std::slice::from_ref(&failed));
        assert!(data.len() <= MAX_BYTES, "{} bytes", data.len());
        let kept = parse(&data);
        assert!(kept.len() < 21 && kept.len() > 1);
        assert_eq!(kept[0], failed, "the newest entry is kept");
        assert_eq!(kept[1].tick, Some(0), "then the newest of the older ones");
    }

    #[test]
    fn a_later_versions_fields_and_outcomes_survive() {
        let newer =
            br#"[{"tick":null,"node":"x","started":1,"duration_ms":0,"outcome":"deferred","error":null,"shard":7}]"#;
        let data = prepend(parse_raw(newer), &[entry(2)]);
        let raw = parse_raw(&data);
        assert_eq!(raw[1]["shard"], 7, "an unknown field is kept");
        let read = parse(&data);
        assert_eq!(read.len(), 2);
        assert_eq!(read[1].outcome, Outcome::Other);
        // Damaged data is replaced, never a reason to stop.
        assert!(parse(b"{not json").is_empty());
    }

    #[test]
    fn outcomes_are_written_in_snake_case() {
        let text = serde_json::to_string(&HistoryEntry::new(None, "n", 0, 0, Outcome::TimedOut)).unwrap();
        assert!(
            text.contains(r#""outcome":"timed_out""#) && text.contains(r#""tick":null"#),
            "{text}"
        );
    }
}
