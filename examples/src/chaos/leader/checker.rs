//! The leader workload's checker: a pure function from a [`LeaderHistory`] to a
//! [`LeaderReport`].

use std::collections::{BTreeMap, HashMap};

use serde::Serialize;

use super::{member_of, LeaderFault, LeaderFaultRecord, LeaderHistory, Term, TermEnd};
use crate::chaos::clock::ms_between;
use crate::chaos::history::{Token, WriteRecord};

/// How quickly a leader served again after one fault.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Recovery {
    /// The fault.
    pub kind: LeaderFault,
    /// Milliseconds from the injection to the first accepted write of a term other than the
    /// one the fault hit (`None`: there was none before the run ended).
    pub leader_after_ms: Option<u64>,
    /// The stated bound.
    pub bound_ms: u64,
}

/// The verdict on a leader run.
///
/// **Safety** (any of these fails the run):
/// - *stale writes accepted*: the register accepted a write whose token is lower than one it
///   had accepted before — two terms' writes interleaved, or a late writer got through after a
///   newer leader;
/// - *writes outside terms*: a member wrote with a token that is not one of its terms';
/// - *token violations*: a term whose token is not larger than that of every term gained
///   before it (two terms with one token included), unless its member was paused then;
/// - *overlaps unexplained*: a member was told it leads while another member's older term had
///   not yet ended (the older leader had not seen its loss), unless the older leader's process
///   was paused across the newer grant and saw the loss within a session timeout of continuing.
///
/// **Liveness**, reported apart: after every fault a leader wrote (and the register accepted
/// it) within the fault's bound — for a fault on the leader, a term other than the one the
/// fault hit (a new life of a killed member counts: it may well be first in the queue).
///
/// **Progress and effect**: the run wrote enough (ten accepted writes per fault, plus ten),
/// had a leader with accepted writes per leader-moving fault plus one, injected at least one
/// fault, and every fault did what it is for: a killed leader's term ended with the kill, a
/// partitioned or paused leader's term ended lost, a shut-down leader handed over, and each of
/// these was followed by a newer term (of another member while the leader was cut off or
/// paused); the ensemble served again after its leader was killed.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct LeaderReport {
    /// Terms recorded.
    pub terms: usize,
    /// Terms by how they ended (`lost`, `handed_over`, `killed`, `dropped`, `open`).
    pub terms_by_end: BTreeMap<String, usize>,
    /// Register writes attempted.
    pub writes: usize,
    /// Of those, accepted.
    pub writes_accepted: usize,
    /// Of those, refused.
    pub writes_refused: usize,
    /// Writes of late writers (after their term ended).
    pub late_writes: usize,
    /// Of those, accepted (before a newer leader wrote).
    pub late_writes_accepted: usize,
    /// Of those, refused (a newer leader had written).
    pub late_writes_refused: usize,
    /// Faults injected, by kind.
    pub faults: BTreeMap<String, usize>,
    /// Faults that did not have their effect, one line each.
    pub faults_ineffective: Vec<String>,
    /// What each fault came to, one line each, in order.
    pub fault_notes: Vec<String>,
    /// Accepted writes with a token lower than an earlier accepted one, one line each.
    pub stale_writes_accepted: Vec<String>,
    /// Writes with a token that is none of the writer's terms', one line each.
    pub writes_outside_terms: Vec<String>,
    /// Terms gained with a token not larger than an earlier term's, unexplained; duplicates.
    pub token_violations: Vec<String>,
    /// Terms gained with a lower token than an earlier term's, explained by a pause.
    pub token_inversions_explained: usize,
    /// Pairs of terms that overlapped in time.
    pub overlaps: usize,
    /// Of those, not explained by a pause, one line each.
    pub overlaps_unexplained: Vec<String>,
    /// Per-fault recovery.
    pub recoveries: Vec<Recovery>,
    /// Faults after which no other leader wrote within the bound.
    pub liveness_violations: usize,
    /// The longest time from a fault to another leader's accepted write, in milliseconds.
    pub max_leaderless_ms: u64,
    /// The longest time from a graceful hand-over to the next term, in milliseconds.
    pub max_handover_ms: Option<u64>,
    /// Why the run does not count as having made progress, one line each.
    pub progress_problems: Vec<String>,
}

impl LeaderReport {
    /// No safety property broken.
    pub fn safe(&self) -> bool {
        self.stale_writes_accepted.is_empty()
            && self.writes_outside_terms.is_empty()
            && self.token_violations.is_empty()
            && self.overlaps_unexplained.is_empty()
    }

    /// A leader served again within the bound after every fault.
    pub fn live(&self) -> bool {
        self.liveness_violations == 0
    }

    /// Enough writes and terms, at least one fault, and every fault had its effect.
    pub fn made_progress(&self) -> bool {
        self.progress_problems.is_empty() && self.faults_ineffective.is_empty()
    }

    /// Safe, live, and a run that tested something.
    pub fn passed(&self) -> bool {
        self.safe() && self.live() && self.made_progress()
    }

    /// The verdict as one JSON line.
    pub fn json_line(&self) -> String {
        serde_json::json!({
            "terms": self.terms,
            "writes_accepted": self.writes_accepted,
            "writes_refused": self.writes_refused,
            "late_writes_refused": self.late_writes_refused,
            "faults": self.faults,
            "faults_ineffective": self.faults_ineffective.len(),
            "stale_writes_accepted": self.stale_writes_accepted.len(),
            "writes_outside_terms": self.writes_outside_terms.len(),
            "token_violations": self.token_violations.len(),
            "overlaps_unexplained": self.overlaps_unexplained.len(),
            "liveness_violations": self.liveness_violations,
            "max_leaderless_ms": self.max_leaderless_ms,
            "max_handover_ms": self.max_handover_ms,
            "passed": self.passed(),
        })
        .to_string()
    }

    /// A human-readable summary.
    pub fn summary(&self) -> String {
        use std::fmt::Write as _;
        let mut s = String::new();
        let list =
            |m: &BTreeMap<String, usize>| m.iter().map(|(k, n)| format!("{k}={n}")).collect::<Vec<_>>().join(", ");
        let _ = writeln!(s, "chaos leader summary");
        let _ = writeln!(s, "  terms: {} ({})", self.terms, list(&self.terms_by_end));
        let _ = writeln!(
            s,
            "  register writes: {} ({} accepted, {} refused); late writes after a term ended: {} ({} accepted before a newer leader wrote, {} refused)",
            self.writes,
            self.writes_accepted,
            self.writes_refused,
            self.late_writes,
            self.late_writes_accepted,
            self.late_writes_refused
        );
        let _ = writeln!(
            s,
            "  faults injected: {} ({} did not have their effect)",
            list(&self.faults),
            self.faults_ineffective.len()
        );
        for line in &self.faults_ineffective {
            let _ = writeln!(s, "    INEFFECTIVE {line}");
        }
        let _ = writeln!(s, "  safety:");
        let _ = writeln!(s, "    stale writes accepted: {}", self.stale_writes_accepted.len());
        let _ = writeln!(s, "    writes outside a term: {}", self.writes_outside_terms.len());
        let _ = writeln!(
            s,
            "    term tokens out of order: {} ({} explained by a pause)",
            self.token_violations.len(),
            self.token_inversions_explained
        );
        let _ = writeln!(
            s,
            "    terms overlapping in time: {} ({} unexplained; the rest an older leader paused past its session)",
            self.overlaps,
            self.overlaps_unexplained.len()
        );
        for line in self
            .stale_writes_accepted
            .iter()
            .chain(&self.writes_outside_terms)
            .chain(&self.token_violations)
            .chain(&self.overlaps_unexplained)
            .take(20)
        {
            let _ = writeln!(s, "    VIOLATION {line}");
        }
        let mut by_kind: BTreeMap<&str, (u64, u64)> = BTreeMap::new();
        for r in &self.recoveries {
            let e = by_kind.entry(r.kind.name()).or_insert((0, r.bound_ms));
            e.0 = e.0.max(r.leader_after_ms.unwrap_or(u64::MAX));
        }
        let per_kind: Vec<String> = by_kind
            .iter()
            .map(|(k, (worst, bound))| match *worst {
                u64::MAX => format!("{k} never (bound {bound} ms)"),
                w => format!("{k} {w} ms (bound {bound} ms)"),
            })
            .collect();
        let _ = writeln!(
            s,
            "  liveness: worst time from a fault to another leader's accepted write: {} ms; by kind: {}; {} over bound",
            self.max_leaderless_ms,
            per_kind.join(", "),
            self.liveness_violations
        );
        if let Some(ms) = self.max_handover_ms {
            let _ = writeln!(
                s,
                "  graceful hand-over: next term at most {ms} ms after the leader's body returned"
            );
        }
        let _ = writeln!(
            s,
            "  progress: {}",
            if self.progress_problems.is_empty() {
                "enough writes and terms".to_string()
            } else {
                self.progress_problems.join("; ")
            }
        );
        let _ = writeln!(
            s,
            "  verdict: {} (safety {}, liveness {}, progress {})",
            if self.passed() { "PASS" } else { "FAIL" },
            if self.safe() { "ok" } else { "VIOLATED" },
            if self.live() { "ok" } else { "VIOLATED" },
            if self.made_progress() { "ok" } else { "INSUFFICIENT" }
        );
        s
    }
}

/// Checks a leader history. Pure: same history, same report.
pub fn check_leader(h: &LeaderHistory) -> LeaderReport {
    let mut r = LeaderReport {
        terms: h.terms.len(),
        writes: h.writes.len(),
        ..LeaderReport::default()
    };
    for t in &h.terms {
        let end = serde_json::to_value(t.end)
            .ok()
            .and_then(|v| v.as_str().map(str::to_owned));
        *r.terms_by_end.entry(end.unwrap_or_default()).or_default() += 1;
    }

    // The register's log, replayed: an accepted write never carries a lower token than one
    // accepted before it.
    let mut writes: Vec<&WriteRecord> = h.writes.iter().collect();
    writes.sort_by_key(|w| w.seq);
    let mut highest: Option<&WriteRecord> = None;
    for w in &writes {
        let late = w.kind == "late";
        r.late_writes += usize::from(late);
        if !w.accepted {
            r.writes_refused += 1;
            r.late_writes_refused += usize::from(late);
            continue;
        }
        r.writes_accepted += 1;
        r.late_writes_accepted += usize::from(late);
        match highest {
            Some(top) if w.token < top.token => r.stale_writes_accepted.push(format!(
                "write #{} ({}) of {} with token {} accepted after write #{} of {} with the newer token {}",
                w.seq, w.kind, w.client, w.token, top.seq, top.client, top.token
            )),
            Some(top) if w.token == top.token && w.client != top.client => r.stale_writes_accepted.push(format!(
                "write #{} of {} accepted with token {}, which {} wrote with before",
                w.seq, w.client, w.token, top.client
            )),
            _ => highest = Some(w),
        }
    }

    // Every write carries a token of one of its writer's terms.
    let mut tokens_of: HashMap<usize, Vec<Token>> = HashMap::new();
    for t in &h.terms {
        tokens_of.entry(t.member).or_default().push(t.token);
    }
    for w in &writes {
        let own = member_of(&w.client)
            .and_then(|m| tokens_of.get(&m))
            .is_some_and(|tokens| tokens.contains(&w.token));
        if !own {
            r.writes_outside_terms.push(format!(
                "write #{} ({}, {}) of {} with token {}, which is none of its terms'",
                w.seq,
                w.kind,
                if w.accepted { "accepted" } else { "refused" },
                w.client,
                w.token
            ));
        }
    }

    // Was `member` paused at `at`? (The window of a pause fault on it.)
    let slack = h.session_timeout_ms * 1_000_000;
    let pause_over = |member: usize, at: u64| {
        h.faults
            .iter()
            .filter(|f| f.kind == LeaderFault::PauseLeader && f.target == Some(member))
            .find(|f| f.injected_ns <= at && at <= f.healed_ns)
    };

    // Term tokens grow in the order the terms were gained.
    let mut by_gain: Vec<&Term> = h.terms.iter().collect();
    by_gain.sort_by_key(|t| t.gained_ns);
    let mut seen: HashMap<Token, &Term> = HashMap::new();
    let mut top: Option<&Term> = None;
    for t in &by_gain {
        if let Some(other) = seen.insert(t.token, t) {
            r.token_violations.push(format!(
                "m{} (life {}, term {}) and m{} (life {}, term {}) both led with token {}",
                other.member, other.life, other.term, t.member, t.life, t.term, t.token
            ));
            continue;
        }
        match top {
            Some(prev) if t.token < prev.token => {
                // A member paused after it was told it leads reports the term late.
                if pause_over(t.member, t.gained_ns).is_some() {
                    r.token_inversions_explained += 1;
                } else {
                    r.token_violations.push(format!(
                        "m{} gained a term with token {} after m{} had gained one with the newer token {}",
                        t.member, t.token, prev.member, prev.token
                    ));
                }
            }
            _ => top = Some(t),
        }
    }

    // No member is told it leads while an older term has not ended, unless the older leader
    // was paused across that grant and heard of its loss soon after it continued.
    for a in &h.terms {
        for b in &h.terms {
            if b.token <= a.token || b.gained_ns >= h.end_of(a) || b.gained_ns < a.gained_ns {
                continue;
            }
            r.overlaps += 1;
            let explained = pause_over(a.member, b.gained_ns).is_some_and(|p| h.end_of(a) <= p.healed_ns + slack);
            if !explained {
                r.overlaps_unexplained.push(format!(
                    "m{} was told it leads (token {}) {} ms before m{}'s term (token {}) ended ({:?})",
                    b.member,
                    b.token,
                    ms_between(b.gained_ns, h.end_of(a)),
                    a.member,
                    a.token,
                    a.end
                ));
            }
        }
    }

    // What each fault came to, and how soon another leader served.
    let mut leader_moving_faults = 0;
    for f in &h.faults {
        *r.faults.entry(f.kind.name().to_string()).or_default() += 1;
        leader_moving_faults += usize::from(f.kind.targets_leader());
        let (effective, note, handover) = fault_effect(h, f);
        if !effective {
            r.faults_ineffective.push(format!("{}: {note}", f.kind.name()));
        }
        r.fault_notes.push(format!("{:<21} {note}", f.kind.name()));
        if let Some(ms) = handover {
            r.max_handover_ms = Some(r.max_handover_ms.unwrap_or(0).max(ms));
        }
        // A fault on the leader is over once another term writes; any leader will do otherwise.
        let served = writes
            .iter()
            .filter(|w| w.accepted && w.kind != "late" && w.at_ns >= f.injected_ns)
            .find(|w| !f.kind.targets_leader() || Some(w.token) != f.leader_token);
        let leader_after_ms = served.map(|w| ms_between(f.injected_ns, w.at_ns));
        let after = leader_after_ms.unwrap_or_else(|| ms_between(f.injected_ns, h.ended_ns));
        r.max_leaderless_ms = r.max_leaderless_ms.max(after);
        if leader_after_ms.is_none_or(|ms| ms > f.bound_ms) {
            r.liveness_violations += 1;
        }
        r.recoveries.push(Recovery {
            kind: f.kind,
            leader_after_ms,
            bound_ms: f.bound_ms,
        });
    }

    // Progress.
    let steady_writes = writes.iter().filter(|w| w.accepted && w.kind != "late").count();
    let wanted = 10 * (h.faults.len() + 1);
    if steady_writes < wanted {
        r.progress_problems.push(format!(
            "{steady_writes} accepted leader writes, fewer than {wanted} (ten per fault, plus ten)"
        ));
    }
    let mut tokens_written: Vec<Token> = writes.iter().filter(|w| w.accepted).map(|w| w.token).collect();
    tokens_written.sort();
    tokens_written.dedup();
    if tokens_written.len() < leader_moving_faults + 1 {
        r.progress_problems.push(format!(
            "{} terms with accepted writes, fewer than {} (one per fault on the leader, plus one)",
            tokens_written.len(),
            leader_moving_faults + 1
        ));
    }
    if h.faults.is_empty() {
        r.progress_problems.push("no fault was injected".into());
    }
    r
}

/// Whether a fault had its effect, a line on what happened, and for a graceful hand-over the
/// milliseconds from the leader's body returning to the next term.
fn fault_effect(h: &LeaderHistory, f: &LeaderFaultRecord) -> (bool, String, Option<u64>) {
    let ms = |ns: u64| ms_between(f.injected_ns, ns);
    if !f.carried_out {
        return (false, format!("not carried out: {}", f.note), None);
    }
    let term = f.leader_token.and_then(|t| h.terms.iter().find(|x| x.token == t));
    // The first term after the fault: another member's, or a killed member's next life.
    let next = h
        .terms
        .iter()
        .filter(|t| t.gained_ns >= f.injected_ns)
        .min_by_key(|t| t.gained_ns);
    let next_text = match next {
        Some(n) if f.target == Some(n.member) => format!(
            "m{} led again in life {} (token {}) after {} ms",
            n.member,
            n.life,
            n.token,
            ms(n.gained_ns)
        ),
        Some(n) => format!("m{} led (token {}) after {} ms", n.member, n.token, ms(n.gained_ns)),
        None => "nobody led afterwards".to_string(),
    };
    if f.kind == LeaderFault::EnsembleLeaderKill {
        let kept = term.is_some_and(|t| h.end_of(t) >= f.healed_ns);
        let leader = match (term, kept) {
            (Some(t), true) => format!("m{} kept leading (token {}) through the failover", t.member, t.token),
            (Some(t), false) => format!("m{}'s term ended {:?}; {next_text}", t.member, t.end),
            (None, _) => "no election leader was known at the kill".to_string(),
        };
        return (true, format!("{}; {leader}", f.note), None);
    }
    let Some(term) = term else {
        return (
            false,
            format!("no term with the leader's token {:?} recorded", f.leader_token),
            None,
        );
    };
    let who = format!("m{} (token {})", term.member, term.token);
    let ended = term.ended_ns.filter(|&e| e >= f.injected_ns);
    let next_during = next.filter(|n| n.gained_ns <= f.healed_ns);
    match f.kind {
        LeaderFault::KillLeader => {
            let ok = term.end == TermEnd::Killed && next.is_some();
            (ok, format!("{who} killed while leading; {next_text}"), None)
        }
        LeaderFault::PartitionLeader => {
            let lost = term.end == TermEnd::Lost && ended.is_some_and(|e| e <= f.healed_ns);
            let ok = lost && next_during.is_some();
            let seen = match ended {
                Some(e) => format!("ended {:?} after {} ms", term.end, ms(e)),
                None => format!("did not end after the cut ({:?})", term.end),
            };
            let note = format!("{who} cut off for {} ms: its term {seen}; {next_text}", ms(f.healed_ns));
            (ok, note, None)
        }
        LeaderFault::PauseLeader => {
            let ok = term.end == TermEnd::Lost && ended.is_some() && next_during.is_some();
            let seen = match ended {
                Some(e) if e >= f.healed_ns => {
                    format!("ended {:?} {} ms after SIGCONT", term.end, ms_between(f.healed_ns, e))
                }
                Some(e) => format!("ended {:?} {} ms after SIGSTOP", term.end, ms(e)),
                None => format!("did not end after the pause ({:?})", term.end),
            };
            (
                ok,
                format!("{who} paused for {} ms; {next_text}; its term {seen}", ms(f.healed_ns)),
                None,
            )
        }
        LeaderFault::ShutdownLeader => {
            let handed = term.end == TermEnd::HandedOver && ended.is_some_and(|e| e <= f.healed_ns);
            let handover = match (ended, next) {
                (Some(e), Some(n)) if n.gained_ns >= e => Some(ms_between(e, n.gained_ns)),
                _ => None,
            };
            let ok = handed && handover.is_some();
            let note = match handover {
                Some(ho) => format!(
                    "{who} shut down, ended {:?}; {next_text}, {ho} ms after the hand-over",
                    term.end
                ),
                None => format!("{who} shut down, ended {:?}; {next_text}", term.end),
            };
            (ok, note, handover)
        }
        LeaderFault::EnsembleLeaderKill => unreachable!("handled above"),
    }
}

#[cfg(test)]
mod tests {
    use super::super::{participant, read_leader_history, write_leader_history, GROUP};
    use super::*;

    const MS: u64 = 1_000_000;

    fn tok(zxid: i64) -> Token {
        Token { zxid, generation: 0 }
    }

    fn term(member: usize, zxid: i64, gained_ms: u64, ended_ms: u64, end: TermEnd) -> Term {
        Term {
            member,
            life: 0,
            term: zxid as u64,
            token: tok(zxid),
            gained_ns: gained_ms * MS,
            ended_ns: Some(ended_ms * MS),
            end,
        }
    }

    fn write(h: &mut LeaderHistory, member: usize, zxid: i64, at_ms: u64, kind: &str, accepted: bool) {
        let seq = h.writes.len() as u64;
        h.writes.push(WriteRecord {
            seq,
            at_ns: at_ms * MS,
            client: participant(member),
            lock: GROUP.into(),
            token: tok(zxid),
            second: None,
            kind: kind.into(),
            accepted,
        });
    }

    /// Accepted writes of `member` with `zxid`, one every 100 ms over `[from_ms, to_ms)`.
    fn writes(h: &mut LeaderHistory, member: usize, zxid: i64, from_ms: u64, to_ms: u64) {
        let mut at = from_ms;
        while at < to_ms {
            write(h, member, zxid, at, if at == from_ms { "claim" } else { "write" }, true);
            at += 100;
        }
    }

    fn fault(
        kind: LeaderFault,
        injected_ms: u64,
        healed_ms: u64,
        target: Option<usize>,
        zxid: i64,
    ) -> LeaderFaultRecord {
        LeaderFaultRecord {
            kind,
            injected_ns: injected_ms * MS,
            healed_ns: healed_ms * MS,
            bound_ms: 18_000,
            target,
            leader_token: Some(tok(zxid)),
            carried_out: true,
            note: String::new(),
        }
    }

    /// m0 leads from 0 s and hands over at 10 s; m1 leads until SIGKILLed at 20 s; m2 leads
    /// until partitioned at 30 s (loss at 32.6 s); m0 leads until paused at 40 s (expired,
    /// m1 leads at 44.5 s, SIGCONT at 47 s, m0 hears at 47.1 s); the ensemble leader dies at 55 s
    /// and m1 keeps leading until 70 s.
    fn clean() -> LeaderHistory {
        let mut h = LeaderHistory {
            session_timeout_ms: 4000,
            ended_ns: 70_000 * MS,
            ..LeaderHistory::default()
        };
        h.terms = vec![
            term(0, 10, 0, 10_000, TermEnd::HandedOver),
            term(1, 20, 10_050, 20_000, TermEnd::Killed),
            term(2, 30, 24_500, 32_600, TermEnd::Lost),
            term(0, 40, 34_700, 47_100, TermEnd::Lost),
            term(1, 50, 44_500, 70_000, TermEnd::HandedOver),
        ];
        writes(&mut h, 0, 10, 0, 10_000);
        write(&mut h, 0, 10, 10_000, "done", true);
        writes(&mut h, 1, 20, 10_050, 20_000);
        // m0's late writer, refused: m1 has claimed.
        write(&mut h, 0, 10, 10_100, "late", false);
        writes(&mut h, 2, 30, 24_500, 32_600);
        writes(&mut h, 0, 40, 34_700, 40_000);
        writes(&mut h, 1, 50, 44_500, 70_000);
        // The paused leader's write in flight when it continued, refused: m1 has claimed.
        write(&mut h, 0, 40, 47_050, "write", false);
        h.writes.sort_by_key(|w| w.at_ns);
        for (i, w) in h.writes.iter_mut().enumerate() {
            w.seq = i as u64;
        }
        h.faults = vec![
            fault(LeaderFault::ShutdownLeader, 9_900, 10_020, Some(0), 10),
            fault(LeaderFault::KillLeader, 20_000, 20_000, Some(1), 20),
            fault(LeaderFault::PartitionLeader, 30_000, 34_800, Some(2), 30),
            fault(LeaderFault::PauseLeader, 40_000, 47_000, Some(0), 40),
            fault(LeaderFault::EnsembleLeaderKill, 55_000, 58_000, None, 50),
        ];
        h
    }

    #[test]
    fn a_clean_history_passes() {
        let r = check_leader(&clean());
        assert!(r.passed(), "{}\n{r:#?}", r.summary());
        assert_eq!(r.overlaps, 1, "the paused leader overlaps its successor");
        assert_eq!(r.max_handover_ms, Some(50));
        assert_eq!(r.writes_refused, 2);
        assert!(
            r.fault_notes.iter().any(|n| n.contains("kept leading")),
            "{:?}",
            r.fault_notes
        );
    }

    #[test]
    fn an_accepted_write_with_an_older_token_is_a_violation() {
        let mut h = clean();
        // The paused leader's in-flight write got through after m1 had claimed.
        let w = h
            .writes
            .iter_mut()
            .find(|w| w.token == tok(40) && !w.accepted)
            .expect("the refused write");
        w.accepted = true;
        let r = check_leader(&h);
        assert_eq!(r.stale_writes_accepted.len(), 1, "{r:#?}");
        assert!(!r.safe() && !r.passed());
    }

    #[test]
    fn a_late_write_accepted_after_a_newer_leader_wrote_is_a_violation() {
        let mut h = clean();
        let at = h.writes.iter().position(|w| w.kind == "late").expect("a late write");
        h.writes[at].accepted = true;
        let r = check_leader(&h);
        assert_eq!(r.stale_writes_accepted.len(), 1, "{r:#?}");
        assert_eq!(r.late_writes_accepted, 1);
        assert!(!r.safe());
    }

    #[test]
    fn two_members_writing_with_one_token_is_a_violation() {
        let mut h = clean();
        let seq = h.writes.len() as u64;
        h.writes.push(WriteRecord {
            seq,
            client: participant(2),
            ..h.writes.last().expect("writes").clone()
        });
        let r = check_leader(&h);
        assert!(!r.stale_writes_accepted.is_empty(), "{r:#?}");
        assert_eq!(r.writes_outside_terms.len(), 1, "m2 has no term with m1's token");
        assert!(!r.safe());
    }

    #[test]
    fn a_write_without_a_term_is_a_violation() {
        let mut h = clean();
        write(&mut h, 2, 99, 69_000, "write", false);
        let r = check_leader(&h);
        assert_eq!(r.writes_outside_terms.len(), 1, "{r:#?}");
        assert!(r.stale_writes_accepted.is_empty());
        assert!(!r.safe());
    }

    #[test]
    fn a_term_with_an_older_token_than_an_earlier_term_is_a_violation() {
        let mut h = clean();
        // m2's term at 24.5 s with a token below m1's from 10 s.
        h.terms[2].token = tok(15);
        for w in h.writes.iter_mut().filter(|w| w.token == tok(30)) {
            w.token = tok(15);
        }
        let r = check_leader(&h);
        assert_eq!(r.token_violations.len(), 1, "{r:#?}");
        assert!(!r.safe());
    }

    #[test]
    fn two_terms_with_one_token_are_a_violation() {
        let mut h = clean();
        h.terms[2].token = tok(20);
        let r = check_leader(&h);
        assert!(r.token_violations.iter().any(|v| v.contains("both led")), "{r:#?}");
        assert!(!r.safe());
    }

    #[test]
    fn a_leader_told_of_its_loss_after_the_next_grant_is_a_violation() {
        let mut h = clean();
        // The partitioned m2 heard of its loss only after m0 was told it leads.
        h.terms[2].ended_ns = Some(35_000 * MS);
        let r = check_leader(&h);
        assert_eq!(r.overlaps_unexplained.len(), 1, "{r:#?}");
        assert!(!r.safe());
    }

    #[test]
    fn a_paused_leader_must_hear_of_its_loss_soon_after_it_continues() {
        let mut h = clean();
        h.terms[3].ended_ns = Some(52_000 * MS); // 5 s after SIGCONT, past the 4 s session
        let r = check_leader(&h);
        assert_eq!(r.overlaps_unexplained.len(), 1, "{r:#?}");
        // The same overlap without the pause fault that explains it.
        let mut h = clean();
        h.faults.retain(|f| f.kind != LeaderFault::PauseLeader);
        let r = check_leader(&h);
        assert_eq!(r.overlaps_unexplained.len(), 1, "{r:#?}");
    }

    #[test]
    fn no_leader_after_a_fault_is_a_liveness_failure_not_a_safety_one() {
        // m2 wrote 4.5 s after the kill: over a 1 s bound.
        let mut h = clean();
        h.faults[1].bound_ms = 1000;
        let r = check_leader(&h);
        assert!(r.safe(), "{r:#?}");
        assert_eq!(r.liveness_violations, 1, "{r:#?}");
        assert!(!r.live() && !r.passed());
        // Nobody wrote after the ensemble's leader died.
        let mut h = clean();
        h.writes.retain(|w| w.at_ns < 55_000 * MS);
        let r = check_leader(&h);
        assert!(r.safe(), "{r:#?}");
        assert_eq!(r.liveness_violations, 1, "{r:#?}");
        assert_eq!(r.recoveries[4].leader_after_ms, None);
        assert!(!r.passed());
    }

    #[test]
    fn a_killed_leader_started_again_may_lead_next() {
        // m1 is killed at 20 s and started again; its new life joined before the others
        // queued again (they had given up their places), so it leads next: that is recovery.
        let mut h = clean();
        h.terms[2].member = 1;
        h.terms[2].life = 1;
        for w in h.writes.iter_mut().filter(|w| w.token == tok(30)) {
            w.client = participant(1);
        }
        h.faults[2].target = Some(1);
        let r = check_leader(&h);
        assert!(r.passed(), "{}\n{r:#?}", r.summary());
        assert_eq!(r.recoveries[1].leader_after_ms, Some(4500));
        assert!(
            r.fault_notes[1].contains("m1 led again in life 1"),
            "{:?}",
            r.fault_notes
        );
        // Its old term writing on does not count.
        let mut h = clean();
        h.writes.retain(|w| w.token != tok(30));
        write(&mut h, 1, 20, 21_000, "write", true);
        h.writes.sort_by_key(|w| w.at_ns);
        let r = check_leader(&h);
        assert_eq!(
            r.recoveries[1].leader_after_ms,
            Some(14_700),
            "m0's claim at 34.7 s, not m1's write"
        );
    }

    #[test]
    fn a_run_without_writes_or_faults_made_no_progress() {
        let mut h = clean();
        h.writes.clear();
        let r = check_leader(&h);
        assert!(r.safe());
        assert!(!r.made_progress() && !r.passed(), "{r:#?}");
        let mut h = clean();
        h.faults.clear();
        let r = check_leader(&h);
        assert!(r.progress_problems.iter().any(|p| p.contains("no fault")), "{r:#?}");
        assert!(!r.passed());
    }

    #[test]
    fn a_fault_without_its_effect_is_reported() {
        // The partitioned leader never saw its loss: its term ended by hand-over instead.
        let mut h = clean();
        h.terms[2].end = TermEnd::HandedOver;
        let r = check_leader(&h);
        assert_eq!(r.faults_ineffective.len(), 1, "{r:#?}");
        assert!(r.faults_ineffective[0].starts_with("partition_leader"));
        assert!(!r.made_progress());
        // A kill that found no leader.
        let mut h = clean();
        h.faults[1].carried_out = false;
        let r = check_leader(&h);
        assert!(
            r.faults_ineffective.iter().any(|f| f.starts_with("kill_leader")),
            "{r:#?}"
        );
        // A pause during which nobody else led (the session did not expire).
        let mut h = clean();
        h.faults[3].healed_ns = 44_000 * MS;
        let r = check_leader(&h);
        assert!(
            r.faults_ineffective.iter().any(|f| f.starts_with("pause_leader")),
            "{r:#?}"
        );
    }

    #[test]
    fn a_history_reads_back_as_written() {
        let h = clean();
        let path = std::env::temp_dir().join(format!("zklock-leader-history-{}.json", std::process::id()));
        write_leader_history(&path, &h).expect("written");
        let back = read_leader_history(&path).expect("read");
        let _ = std::fs::remove_file(&path);
        assert_eq!(back, h);
    }
}
