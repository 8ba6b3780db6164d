//! The safety checker: a pure function from a [`History`] to a [`Report`].
//!
//! Properties checked:
//!
//! 1. **Mutual exclusion, or fencing.** No two critical sections overlap in time unless the
//!    earlier holder (lower token) lost its lock — it saw the loss signal — and the register
//!    rejected every write it attempted after the newer holder's section began.
//! 2. **Token order.** Fencing tokens strictly increase in grant order. A section granted
//!    later than one with a higher token is explained only if its holder saw the loss signal
//!    (it was paused between its grant and noticing it). This spans lock-dir recreations.
//! 3. **No stale write accepted.** The register never accepted a write whose token was lower
//!    than one it had accepted before, nor a write made after a newer holder's section began.
//! 4. **No leaked node** after every contender exited.
//! 5. **Availability.** After each fault the lock was granted again, to a process the fault
//!    did not target, within the fault's stated bound.

use std::collections::{BTreeMap, HashMap};

use serde::Serialize;

use super::history::{FaultKind, History, Section, Token};

/// Two sections that overlapped in time, and whether (and how) that is explained.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Overlap {
    /// The earlier holder (lower token).
    pub earlier: String,
    /// Its token.
    pub earlier_token: Token,
    /// The newer holder.
    pub newer: String,
    /// Its token.
    pub newer_token: Token,
    /// How long both ran at once, in milliseconds.
    pub overlap_ms: f64,
    /// `Some(reason)` when explained by loss + fencing; `None` when not.
    pub explanation: Option<String>,
    /// Why it is not explained, when it is not.
    pub violation: Option<String>,
}

/// Token order broken between two grants.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TokenInversion {
    /// The section granted first (by the holders' clocks), with the higher token.
    pub first: String,
    /// Its token.
    pub first_token: Token,
    /// The section granted later with a token that is not higher.
    pub later: String,
    /// Its token.
    pub later_token: Token,
    /// Whether the later holder saw the loss signal (a paused, superseded grant).
    pub explained: bool,
}

/// How quickly the lock came back after one fault.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Availability {
    /// The fault.
    pub kind: FaultKind,
    /// Milliseconds from the fault's `measure_from` to the next grant (to the end of the run
    /// when there was none).
    pub unavailable_ms: u64,
    /// The stated bound.
    pub bound_ms: u64,
    /// Whether a grant happened at all.
    pub granted_again: bool,
}

/// The checker's verdict.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Report {
    /// Acquisitions attempted plus fenced writes attempted.
    pub operations: u64,
    /// Critical sections recorded.
    pub sections: usize,
    /// Of those, how many never reported their end.
    pub incomplete_sections: usize,
    /// Sections whose holder saw the loss signal.
    pub sections_lost: usize,
    /// Fenced writes attempted / rejected.
    pub writes: usize,
    /// Of those, rejected by the register.
    pub writes_rejected: usize,
    /// Faults by kind (only those that took effect).
    pub faults: BTreeMap<String, usize>,
    /// Faults that were attempted but did not take effect.
    pub faults_ineffective: usize,
    /// Every overlap found.
    pub overlaps: Vec<Overlap>,
    /// Overlaps without an explanation.
    pub overlaps_unexplained: usize,
    /// Token order breaks.
    pub token_inversions: Vec<TokenInversion>,
    /// Token order breaks without an explanation (and duplicate tokens).
    pub token_violations: usize,
    /// Reap faults after which tokens kept increasing across the recreated dir.
    pub reaps_with_increasing_tokens: usize,
    /// Partition and pause faults that caught their target mid-way through a long section.
    pub holders_cut_off: usize,
    /// Of those, how many holders saw the loss signal before they released.
    pub holders_cut_off_saw_loss: usize,
    /// Member-isolation faults that caught their target mid-way through a long section.
    pub holders_isolated: usize,
    /// Of those, how many holders were told of loss. The overlap check tells whether it came
    /// before anyone else was granted.
    pub holders_isolated_saw_loss: usize,
    /// Accepted writes that were stale.
    pub stale_writes_accepted: usize,
    /// Leaked contender nodes.
    pub leaked_nodes: usize,
    /// Per-fault availability.
    pub availability: Vec<Availability>,
    /// Faults after which the lock was not granted again within the bound.
    pub availability_violations: usize,
    /// The worst unavailability after a fault, in milliseconds.
    pub max_unavailable_ms: u64,
}

impl Report {
    /// Whether every safety property held and the lock came back within bounds after every fault.
    pub fn passed(&self) -> bool {
        self.overlaps_unexplained == 0
            && self.token_violations == 0
            && self.stale_writes_accepted == 0
            && self.leaked_nodes == 0
            && self.incomplete_sections == 0
            && self.availability_violations == 0
    }

    /// The final machine-readable line.
    pub fn json_line(&self) -> String {
        serde_json::json!({
            "operations": self.operations,
            "faults": self.faults,
            "overlaps_unexplained": self.overlaps_unexplained,
            "stale_writes_accepted": self.stale_writes_accepted,
            "leaked_nodes": self.leaked_nodes,
            "max_unavailable_ms": self.max_unavailable_ms,
        })
        .to_string()
    }

    /// A human-readable summary.
    pub fn summary(&self) -> String {
        use std::fmt::Write as _;
        let mut s = String::new();
        let _ = writeln!(s, "chaos summary");
        let _ = writeln!(
            s,
            "  operations: {} ({} critical sections, {} with loss seen, {} incomplete; {} fenced writes, {} rejected)",
            self.operations,
            self.sections,
            self.sections_lost,
            self.incomplete_sections,
            self.writes,
            self.writes_rejected
        );
        let faults: Vec<String> = self.faults.iter().map(|(k, n)| format!("{k}={n}")).collect();
        let _ = writeln!(
            s,
            "  faults injected: {} ({} did not take effect)",
            faults.join(", "),
            self.faults_ineffective
        );
        let _ = writeln!(
            s,
            "  overlaps: {} ({} unexplained)",
            self.overlaps.len(),
            self.overlaps_unexplained
        );
        // One line per earlier holder: a paused holder overlaps every section granted while
        // it was frozen.
        let mut groups: BTreeMap<(Token, &str), Vec<&Overlap>> = BTreeMap::new();
        for o in &self.overlaps {
            groups.entry((o.earlier_token, o.earlier.as_str())).or_default().push(o);
        }
        for ((token, earlier), group) in &groups {
            let worst = group.iter().map(|o| o.overlap_ms).fold(0.0, f64::max);
            let unexplained: Vec<&&Overlap> = group.iter().filter(|o| o.explanation.is_none()).collect();
            let how = match unexplained.first() {
                Some(o) => format!(
                    "{} UNEXPLAINED, e.g. with {} [{}]: {}",
                    unexplained.len(),
                    o.newer,
                    o.newer_token,
                    o.violation.as_deref().unwrap_or("")
                ),
                None => format!(
                    "explained: {}",
                    group.last().and_then(|o| o.explanation.as_deref()).unwrap_or("")
                ),
            };
            let _ = writeln!(
                s,
                "    {earlier} [{token}] overlapped {} newer section(s) (longest {worst:.1} ms) — {how}",
                group.len()
            );
        }
        let _ = writeln!(
            s,
            "  token order: {} inversions ({} unexplained); tokens kept increasing across {} lock-dir recreations",
            self.token_inversions.len(),
            self.token_violations,
            self.reaps_with_increasing_tokens
        );
        let _ = writeln!(
            s,
            "  holders cut off mid-section by a partition or pause: {}, of which saw the loss signal: {}",
            self.holders_cut_off, self.holders_cut_off_saw_loss
        );
        let _ = writeln!(
            s,
            "  holders isolated with their member mid-section: {}, of which were told of loss before another grant: {}",
            self.holders_isolated, self.holders_isolated_saw_loss
        );
        let _ = writeln!(s, "  stale writes accepted: {}", self.stale_writes_accepted);
        let _ = writeln!(s, "  leaked nodes: {}", self.leaked_nodes);
        let mut by_kind: BTreeMap<&str, (u64, u64)> = BTreeMap::new();
        for a in &self.availability {
            let e = by_kind.entry(a.kind.name()).or_insert((0, a.bound_ms));
            e.0 = e.0.max(a.unavailable_ms);
        }
        let per_kind: Vec<String> = by_kind
            .iter()
            .map(|(k, (worst, bound))| format!("{k} {worst} ms (bound {bound} ms)"))
            .collect();
        let _ = writeln!(
            s,
            "  worst unavailability after a fault: {} ms; by kind: {}; {} over bound",
            self.max_unavailable_ms,
            per_kind.join(", "),
            self.availability_violations
        );
        let _ = writeln!(s, "  verdict: {}", if self.passed() { "PASS" } else { "FAIL" });
        s
    }
}

/// Checks a history. Pure: same history, same report.
pub fn check(history: &History) -> Report {
    let sections = &history.sections;
    let end_of = |s: &Section| {
        if s.complete {
            s.end_ns
        } else {
            history.ended_ns.max(s.end_ns)
        }
    };

    // Writes per (client, token), in register order.
    let mut writes_of: HashMap<(&str, Token), Vec<usize>> = HashMap::new();
    for (i, w) in history.writes.iter().enumerate() {
        writes_of.entry((w.client.as_str(), w.token)).or_default().push(i);
    }

    // 1. Overlaps: sweep sections by start.
    let mut by_start: Vec<&Section> = sections.iter().collect();
    by_start.sort_by_key(|s| (s.start_ns, s.token));
    let mut overlaps = Vec::new();
    for (i, a) in by_start.iter().enumerate() {
        let a_end = end_of(a);
        for b in &by_start[i + 1..] {
            if b.start_ns >= a_end {
                break;
            }
            let b_end = end_of(b);
            let overlap_ns = a_end.min(b_end).saturating_sub(b.start_ns);
            let (earlier, newer) = if a.token <= b.token { (*a, *b) } else { (*b, *a) };
            overlaps.push(explain_overlap(history, &writes_of, earlier, newer, overlap_ns));
        }
    }
    let overlaps_unexplained = overlaps.iter().filter(|o| o.explanation.is_none()).count();

    // 2. Token order, by grant time.
    let mut by_grant: Vec<&Section> = sections.iter().collect();
    by_grant.sort_by_key(|s| (s.granted_ns, s.token));
    let mut token_inversions = Vec::new();
    let mut highest: Option<&Section> = None;
    for s in &by_grant {
        if let Some(h) = highest {
            if s.token <= h.token {
                let duplicate = s.token == h.token;
                token_inversions.push(TokenInversion {
                    first: h.client.clone(),
                    first_token: h.token,
                    later: s.client.clone(),
                    later_token: s.token,
                    explained: !duplicate && s.lost,
                });
            }
        }
        if highest.map_or(true, |h| s.token > h.token) {
            highest = Some(s);
        }
    }
    let mut tokens: Vec<Token> = sections.iter().map(|s| s.token).collect();
    tokens.sort();
    let duplicates = tokens.windows(2).filter(|w| w[0] == w[1]).count();
    let token_violations = token_inversions.iter().filter(|t| !t.explained).count().max(duplicates);

    // Tokens across lock-dir recreation.
    let mut reaps_with_increasing_tokens = 0;
    for f in history
        .faults
        .iter()
        .filter(|f| f.kind == FaultKind::ReapDir && f.effective)
    {
        let before = sections
            .iter()
            .filter(|s| s.granted_ns < f.injected_ns)
            .map(|s| s.token)
            .max();
        let after = sections
            .iter()
            .filter(|s| s.granted_ns >= f.healed_ns)
            .map(|s| s.token)
            .min();
        if let (Some(before), Some(after)) = (before, after) {
            if after > before {
                reaps_with_increasing_tokens += 1;
            }
        }
    }

    // Holders cut off by a partition or a pause while in a long section must learn of it. A
    // paused holder cannot hear of anything before it resumes; a partitioned one hears late
    // only if the loss-timing precondition is broken, which the overlap check then reports.
    let (holders_cut_off, holders_cut_off_saw_loss) = caught_mid_section(history, false, |k| {
        matches!(k, FaultKind::PartitionHolder | FaultKind::PauseHolder)
    });
    // A holder isolated with its member must hear of the loss before anyone else is granted.
    let (holders_isolated, holders_isolated_saw_loss) =
        caught_mid_section(history, true, |k| k == FaultKind::IsolateHolderMember);

    // 3. Stale writes: against the register's own order, and against section starts.
    let mut starts: Vec<(u64, Token)> = sections.iter().map(|s| (s.start_ns, s.token)).collect();
    starts.sort();
    let mut stale_writes_accepted = 0;
    let mut max_accepted: Option<Token> = None;
    let mut highest_started: Option<Token> = None;
    let mut next_start = 0;
    let mut writes: Vec<&super::history::WriteRecord> = history.writes.iter().collect();
    writes.sort_by_key(|w| w.seq);
    for w in writes {
        while next_start < starts.len() && starts[next_start].0 < w.at_ns {
            highest_started = highest_started.max(Some(starts[next_start].1));
            next_start += 1;
        }
        if w.accepted {
            let below_register = max_accepted.is_some_and(|m| w.token < m);
            let below_started = highest_started.is_some_and(|m| w.token < m);
            if below_register || below_started {
                stale_writes_accepted += 1;
            }
            max_accepted = max_accepted.max(Some(w.token));
        }
    }

    // 5. Availability.
    let mut availability = Vec::new();
    let mut faults: BTreeMap<String, usize> = BTreeMap::new();
    let mut faults_ineffective = 0;
    for f in &history.faults {
        if !f.effective {
            faults_ineffective += 1;
            continue;
        }
        *faults.entry(f.kind.name().to_string()).or_default() += 1;
        let next = sections
            .iter()
            .filter(|s| s.granted_ns >= f.measure_from_ns && Some(s.process) != f.target_process)
            .map(|s| s.granted_ns)
            .min();
        let (granted_again, at) = match next {
            Some(at) => (true, at),
            None => (false, history.ended_ns.max(f.measure_from_ns)),
        };
        availability.push(Availability {
            kind: f.kind,
            unavailable_ms: at.saturating_sub(f.measure_from_ns) / 1_000_000,
            bound_ms: f.bound_ms,
            granted_again,
        });
    }
    let availability_violations = availability
        .iter()
        .filter(|a| !a.granted_again || a.unavailable_ms > a.bound_ms)
        .count();
    let max_unavailable_ms = availability.iter().map(|a| a.unavailable_ms).max().unwrap_or(0);

    Report {
        operations: history.acquire_attempts + history.writes.len() as u64,
        sections: sections.len(),
        incomplete_sections: sections.iter().filter(|s| !s.complete).count(),
        sections_lost: sections.iter().filter(|s| s.lost).count(),
        writes: history.writes.len(),
        writes_rejected: history.writes.iter().filter(|w| !w.accepted).count(),
        faults,
        faults_ineffective,
        overlaps,
        overlaps_unexplained,
        token_inversions,
        token_violations,
        reaps_with_increasing_tokens,
        holders_cut_off,
        holders_cut_off_saw_loss,
        holders_isolated,
        holders_isolated_saw_loss,
        stale_writes_accepted,
        leaked_nodes: history.leaked_nodes,
        availability,
        availability_violations,
        max_unavailable_ms,
    }
}

fn explain_overlap(
    history: &History,
    writes_of: &HashMap<(&str, Token), Vec<usize>>,
    earlier: &Section,
    newer: &Section,
    overlap_ns: u64,
) -> Overlap {
    let mut overlap = Overlap {
        earlier: earlier.client.clone(),
        earlier_token: earlier.token,
        newer: newer.client.clone(),
        newer_token: newer.token,
        overlap_ms: overlap_ns as f64 / 1e6,
        explanation: None,
        violation: None,
    };
    if earlier.token == newer.token {
        overlap.violation = Some("both holders had the same fencing token".into());
        return overlap;
    }
    if !earlier.complete {
        overlap.violation = Some("the earlier holder never reported the end of its section".into());
        return overlap;
    }
    if !earlier.lost {
        overlap.violation = Some("the earlier holder never saw the loss signal".into());
        return overlap;
    }
    let after: Vec<&super::history::WriteRecord> = writes_of
        .get(&(earlier.client.as_str(), earlier.token))
        .into_iter()
        .flatten()
        .map(|&i| &history.writes[i])
        .filter(|w| w.at_ns > newer.start_ns)
        .collect();
    let accepted = after.iter().filter(|w| w.accepted).count();
    if accepted > 0 {
        overlap.violation = Some(format!(
            "the register accepted {accepted} of its {} writes after the newer section began",
            after.len()
        ));
        return overlap;
    }
    let lost_how = match earlier.lost_ns {
        Some(at) if at <= newer.start_ns => "saw the loss signal before the newer section began".to_string(),
        Some(at) => format!(
            "saw the loss signal {:.0} ms after the newer section began",
            (at - newer.start_ns) as f64 / 1e6
        ),
        None => "saw the loss signal".to_string(),
    };
    overlap.explanation = Some(format!(
        "earlier holder {lost_how}; the register rejected all {} of its writes after the newer grant{}",
        after.len(),
        if earlier.misbehaving {
            " (it ignored the loss signal on purpose)"
        } else {
            ""
        }
    ));
    overlap
}

/// Effective faults of the given kinds that caught their target process in a long section,
/// and of those, how many holders saw the loss signal (with `in_time`: before any other
/// process was granted the lock after the fault).
fn caught_mid_section(history: &History, in_time: bool, kinds: impl Fn(FaultKind) -> bool) -> (usize, usize) {
    let mut caught = 0;
    let mut saw_loss = 0;
    for f in history.faults.iter().filter(|f| f.effective && kinds(f.kind)) {
        let hit = history.sections.iter().find(|s| {
            s.long && Some(s.process) == f.target_process && s.granted_ns <= f.injected_ns && s.end_ns > f.injected_ns
        });
        if let Some(hit) = hit {
            caught += 1;
            let next_grant = history
                .sections
                .iter()
                .filter(|s| s.process != hit.process && s.granted_ns > f.injected_ns)
                .map(|s| s.granted_ns)
                .min();
            let told = hit.lost
                && (!in_time
                    || match (hit.lost_ns, next_grant) {
                        (Some(lost), Some(next)) => lost < next,
                        (Some(_), None) => true,
                        (None, _) => false,
                    });
            if told {
                saw_loss += 1;
            }
        }
    }
    (caught, saw_loss)
}

#[cfg(test)]
mod tests {
    use super::super::history::{FaultRecord, WriteRecord};
    use super::*;

    const MS: u64 = 1_000_000;

    fn token(zxid: i64) -> Token {
        Token { zxid, generation: 0 }
    }

    fn section(client: &str, process: usize, zxid: i64, start_ms: u64, end_ms: u64) -> Section {
        Section {
            client: client.into(),
            process,
            token: token(zxid),
            granted_ns: start_ms * MS - MS / 2,
            start_ns: start_ms * MS,
            end_ns: end_ms * MS,
            lost: false,
            lost_ns: None,
            misbehaving: false,
            long: false,
            writes_attempted: 0,
            writes_rejected: 0,
            complete: true,
        }
    }

    /// Adds the register log of a section: claim at start, one write per entry of `more`.
    fn writes(h: &mut History, client: &str, zxid: i64, at_ms: &[(u64, bool)]) {
        for &(at, accepted) in at_ms {
            let seq = h.writes.len() as u64;
            h.writes.push(WriteRecord {
                seq,
                at_ns: at * MS,
                client: client.into(),
                token: token(zxid),
                kind: "write".into(),
                accepted,
            });
        }
        h.writes.sort_by_key(|w| w.at_ns);
        for (i, w) in h.writes.iter_mut().enumerate() {
            w.seq = i as u64;
        }
    }

    fn clean() -> History {
        let mut h = History {
            ended_ns: 1000 * MS,
            acquire_attempts: 2,
            ..History::default()
        };
        h.sections.push(section("p0-t0", 0, 10, 100, 200));
        h.sections.push(section("p1-t0", 1, 20, 210, 300));
        writes(&mut h, "p0-t0", 10, &[(100, true), (150, true)]);
        writes(&mut h, "p1-t0", 20, &[(210, true), (250, true)]);
        h
    }

    #[test]
    fn a_clean_history_passes() {
        let report = check(&clean());
        assert!(report.passed(), "{}", report.summary());
        assert_eq!(report.operations, 6);
        assert!(report.overlaps.is_empty());
    }

    #[test]
    fn an_overlap_without_loss_is_a_violation() {
        let mut h = clean();
        h.sections[0].end_ns = 260 * MS; // still running when p1 started at 210
        let report = check(&h);
        assert_eq!(report.overlaps.len(), 1);
        assert_eq!(report.overlaps_unexplained, 1);
        assert!(!report.passed());
        assert!(report.summary().contains("never saw the loss signal"));
    }

    #[test]
    fn an_overlap_with_loss_and_every_later_write_rejected_is_explained() {
        let mut h = clean();
        h.sections[0].end_ns = 260 * MS;
        h.sections[0].lost = true;
        h.sections[0].lost_ns = Some(270 * MS);
        writes(&mut h, "p0-t0", 10, &[(255, false)]);
        let report = check(&h);
        assert_eq!(report.overlaps.len(), 1);
        assert_eq!(report.overlaps_unexplained, 0, "{}", report.summary());
        assert_eq!(report.stale_writes_accepted, 0);
        assert!(report.passed());
    }

    #[test]
    fn an_overlap_where_the_stale_holder_got_a_write_in_is_a_violation() {
        let mut h = clean();
        h.sections[0].end_ns = 260 * MS;
        h.sections[0].lost = true;
        writes(&mut h, "p0-t0", 10, &[(255, true)]); // a broken register let it through
        let report = check(&h);
        assert_eq!(report.overlaps_unexplained, 1);
        assert_eq!(report.stale_writes_accepted, 1);
        assert!(!report.passed());
    }

    #[test]
    fn a_stale_write_after_the_section_is_caught_even_without_overlap() {
        let mut h = clean();
        writes(&mut h, "p0-t0", 10, &[(400, true)]);
        let report = check(&h);
        assert_eq!(report.overlaps_unexplained, 0);
        assert_eq!(report.stale_writes_accepted, 1);
        assert!(!report.passed());
    }

    #[test]
    fn tokens_that_go_backwards_in_grant_order_are_a_violation() {
        let mut h = clean();
        h.sections[1].token = token(5); // granted after p0's token 10, but lower
        let report = check(&h);
        assert_eq!(report.token_violations, 1, "{}", report.summary());
        assert!(!report.passed());
        // Unless the late grant was a superseded one whose holder learned it lost the lock.
        h.sections[1].lost = true;
        let report = check(&h);
        assert_eq!(report.token_violations, 0);
    }

    #[test]
    fn a_duplicate_token_is_a_violation() {
        let mut h = clean();
        h.sections[1].token = token(10);
        h.sections[1].lost = true;
        assert_eq!(check(&h).token_violations, 1);
    }

    #[test]
    fn leaked_nodes_and_incomplete_sections_fail_the_run() {
        let mut h = clean();
        h.leaked_nodes = 1;
        assert!(!check(&h).passed());
        let mut h = clean();
        h.sections[1].complete = false;
        assert!(!check(&h).passed());
    }

    #[test]
    fn availability_is_measured_from_the_fault_and_ignores_the_target() {
        let mut h = clean();
        h.sections.push(section("p1-t1", 1, 30, 600, 650));
        h.sections.push(section("p0-t1", 0, 40, 900, 950));
        h.faults.push(FaultRecord {
            kind: FaultKind::PauseHolder,
            injected_ns: 500 * MS,
            healed_ns: 550 * MS,
            measure_from_ns: 500 * MS,
            bound_ms: 300,
            target_process: Some(1),
            effective: true,
            note: String::new(),
        });
        let report = check(&h);
        // p1's grant at 600 does not count (p1 was the target); p0's at 900 does.
        assert_eq!(report.max_unavailable_ms, 400 - 1);
        assert_eq!(report.availability_violations, 1);
        assert_eq!(report.faults.get("pause_holder"), Some(&1));
        h.faults[0].bound_ms = 1000;
        assert!(check(&h).passed());
    }

    #[test]
    fn a_holder_cut_off_mid_section_is_checked_for_the_loss_signal() {
        let mut h = clean();
        h.sections[1].long = true;
        h.faults.push(FaultRecord {
            kind: FaultKind::PartitionHolder,
            injected_ns: 220 * MS,
            healed_ns: 400 * MS,
            measure_from_ns: 220 * MS,
            bound_ms: 10_000,
            target_process: Some(1),
            effective: true,
            note: String::new(),
        });
        let report = check(&h);
        assert_eq!((report.holders_cut_off, report.holders_cut_off_saw_loss), (1, 0));
        h.sections[1].lost = true;
        let report = check(&h);
        assert_eq!((report.holders_cut_off, report.holders_cut_off_saw_loss), (1, 1));
    }

    #[test]
    fn a_holder_isolated_with_its_member_must_hear_of_loss_before_the_next_grant() {
        let mut h = clean();
        // p1-t0 holds from 210 to 300 ms; p0 is granted again at 400 ms.
        h.sections[1].long = true;
        h.sections.push(section("p0-t1", 0, 30, 400, 450));
        h.faults.push(FaultRecord {
            kind: FaultKind::IsolateHolderMember,
            injected_ns: 220 * MS,
            healed_ns: 380 * MS,
            measure_from_ns: 220 * MS,
            bound_ms: 10_000,
            target_process: Some(1),
            effective: true,
            note: String::new(),
        });
        let told = |h: &History| {
            let r = check(h);
            (r.holders_isolated, r.holders_isolated_saw_loss)
        };
        assert_eq!(told(&h), (1, 0), "never told");
        h.sections[1].lost = true;
        h.sections[1].lost_ns = Some(420 * MS);
        assert_eq!(told(&h), (1, 0), "told after p0's grant");
        h.sections[1].lost_ns = Some(290 * MS);
        assert_eq!(told(&h), (1, 1), "told in time");
    }

    #[test]
    fn tokens_across_a_reaped_dir_are_checked() {
        let mut h = clean();
        h.faults.push(FaultRecord {
            kind: FaultKind::ReapDir,
            injected_ns: 201 * MS,
            healed_ns: 205 * MS,
            measure_from_ns: 205 * MS,
            bound_ms: 1000,
            target_process: None,
            effective: true,
            note: String::new(),
        });
        let report = check(&h);
        assert_eq!(report.reaps_with_increasing_tokens, 1);
        assert!(report.passed());
        // A recreated dir whose tokens restarted low is caught as an inversion.
        h.sections[1].token = token(1);
        let report = check(&h);
        assert_eq!(report.reaps_with_increasing_tokens, 0);
        assert!(!report.passed());
    }
}
