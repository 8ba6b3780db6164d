//! The safety checker: a pure function from a [`History`] to a [`Report`].
//!
//! Properties checked, 1-3 for each lock name on its own (a multi-lock section holds both):
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
//! 5. **Availability.** After each fault the main lock was granted again, to a process the
//!    fault did not target, within the fault's stated bound.
//! 6. **Close under load.** After `close()` returned no node of its session was left; each
//!    task waiting on the closed client ended within the bound with `Closed` (or its own
//!    timeout, or a grant it was told it lost); each section held at the call and still
//!    running at the return saw the loss signal within the bound.
//! 7. **Multi-lock parts.** No multi-lock section was granted with a part already lost — its
//!    guard reporting loss at the grant, or a newer holder of that lock granted before it —
//!    outside a pause of its process; every write of a multi-lock section carried both
//!    tokens. A multi-lock wait cut by a session expiry ended in an error or a sound grant.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};

use serde::Serialize;

use super::history::{CloseRecord, FailureKind, FaultKind, History, Section, Token, WriteRecord, LOCK};
use super::operator::{check_operator_faults, OperatorChecks};

/// After a pause fault heals, grants of its process within this long are excused from rule 7
/// (the paused process may return a grant before it can see the loss).
const PAUSE_SLACK_NS: u64 = 1_000_000_000;

/// Two sections that overlapped in time, and whether (and how) that is explained.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Overlap {
    /// The lock both held.
    pub lock: String,
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
    /// The lock.
    pub lock: String,
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

/// What one `close()` under load came to.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CloseCheck {
    /// The process whose client was closed.
    pub process: usize,
    /// Tasks waiting on the client at the call.
    pub waiters: usize,
    /// Of those, how many ended as they should, within the bound.
    pub waiters_ended: usize,
    /// Sections held at the call and still running when `close()` returned.
    pub holders: usize,
    /// Of those, how many saw the loss signal within the bound.
    pub holders_saw_loss: usize,
    /// Nodes of the closed session left after `close()` returned.
    pub leftover_nodes: usize,
    /// What went wrong, one line each.
    pub violations: Vec<String>,
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
    /// `close()` calls under load, checked.
    pub closes: Vec<CloseCheck>,
    /// Broken close rules, over all of them.
    pub close_violations: usize,
    /// Multi-lock sections recorded.
    pub multi_sections: usize,
    /// Multi-lock sections granted with a part already lost, one line each.
    pub multi_granted_lost: Vec<String>,
    /// Writes of multi-lock sections that did not carry both tokens.
    pub multi_writes_unfenced: usize,
    /// Multi-lock waits cut by a session expiry (`multi_wait_expiry`) whose end is recorded.
    pub multi_waits_cut: usize,
    /// Of those, how many ended in an error or in a grant with every part sound.
    pub multi_waits_cut_sound: usize,
    /// Leaked contender nodes.
    pub leaked_nodes: usize,
    /// Per-fault availability.
    pub availability: Vec<Availability>,
    /// Faults after which the lock was not granted again within the bound.
    pub availability_violations: usize,
    /// The worst unavailability after a fault, in milliseconds.
    pub max_unavailable_ms: u64,
    /// Revocations and deleted holder nodes ([`super::operator`]).
    pub operator: OperatorChecks,
}

impl Report {
    /// Whether every safety property held and the lock came back within bounds after every fault.
    pub fn passed(&self) -> bool {
        self.overlaps_unexplained == 0
            && self.token_violations == 0
            && self.stale_writes_accepted == 0
            && self.close_violations == 0
            && self.multi_granted_lost.is_empty()
            && self.multi_writes_unfenced == 0
            && self.multi_waits_cut_sound == self.multi_waits_cut
            && self.leaked_nodes == 0
            && self.incomplete_sections == 0
            && self.availability_violations == 0
            && self.operator.violations.is_empty()
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
        let mut groups: BTreeMap<(&str, Token, &str), Vec<&Overlap>> = BTreeMap::new();
        for o in &self.overlaps {
            groups
                .entry((o.lock.as_str(), o.earlier_token, o.earlier.as_str()))
                .or_default()
                .push(o);
        }
        for ((lock, token, earlier), group) in &groups {
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
                "    {earlier} [{token}] on {lock} overlapped {} newer section(s) (longest {worst:.1} ms) — {how}",
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
        let sum = |f: fn(&CloseCheck) -> usize| self.closes.iter().map(f).sum::<usize>();
        let _ = writeln!(
            s,
            "  clients closed under load: {}; waiters ended with Closed in time: {} of {}; holders told of loss: {} of {}; \
             nodes left after close(): {}; {} violation(s)",
            self.closes.len(),
            sum(|c| c.waiters_ended),
            sum(|c| c.waiters),
            sum(|c| c.holders_saw_loss),
            sum(|c| c.holders),
            sum(|c| c.leftover_nodes),
            self.close_violations
        );
        for v in self.closes.iter().flat_map(|c| &c.violations).take(10) {
            let _ = writeln!(s, "    {v}");
        }
        let _ = writeln!(
            s,
            "  multi-lock sections: {}; granted with a lost part: {}; writes without both tokens: {}; \
             waits cut by a session expiry: {}, of which ended soundly: {}",
            self.multi_sections,
            self.multi_granted_lost.len(),
            self.multi_writes_unfenced,
            self.multi_waits_cut,
            self.multi_waits_cut_sound
        );
        for v in self.multi_granted_lost.iter().take(10) {
            let _ = writeln!(s, "    {v}");
        }
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
        let op = &self.operator;
        let _ = writeln!(
            s,
            "  revocations that reached a holder: {}, of which ended its section: {}; deleted holder nodes whose \
             successor's grant was checked against the lock-delay: {}; {} violation(s)",
            op.revocations,
            op.revocations_honoured,
            op.lock_delays_checked,
            op.violations.len()
        );
        for v in op.violations.iter().take(10) {
            let _ = writeln!(s, "    {v}");
        }
        let _ = writeln!(s, "  verdict: {}", if self.passed() { "PASS" } else { "FAIL" });
        s
    }
}

/// A section as a holder of one lock: the section and its token for that lock.
#[derive(Debug, Clone, Copy)]
struct Held<'a> {
    s: &'a Section,
    token: Token,
}

/// The sections that held `lock`, with their tokens for it.
fn held_on<'a>(history: &'a History, lock: &str) -> Vec<Held<'a>> {
    history
        .sections
        .iter()
        .filter_map(|s| s.token_for(lock).map(|token| Held { s, token }))
        .collect()
}

/// When a section's work ended; the end of the run for one never reported ended.
fn end_of(history: &History, s: &Section) -> u64 {
    if s.complete {
        s.end_ns
    } else {
        history.ended_ns.max(s.end_ns)
    }
}

/// Checks a history. Pure: same history, same report.
pub fn check(history: &History) -> Report {
    let sections = &history.sections;
    let mut locks: BTreeSet<&str> = BTreeSet::new();
    for (lock, second) in sections
        .iter()
        .map(|s| (&s.lock, &s.second))
        .chain(history.writes.iter().map(|w| (&w.lock, &w.second)))
    {
        locks.insert(lock);
        locks.extend(second.as_ref().map(|p| p.lock.as_str()));
    }

    // 1-3, lock by lock.
    let mut overlaps = Vec::new();
    let mut token_inversions = Vec::new();
    let mut token_violations = 0;
    let mut stale: HashSet<usize> = HashSet::new();
    for lock in &locks {
        let held = held_on(history, lock);
        overlaps.extend(lock_overlaps(history, lock, &held));
        let (inversions, violations) = token_order(lock, &held);
        token_inversions.extend(inversions);
        token_violations += violations;
        stale.extend(stale_writes(history, lock, &held));
    }
    let overlaps_unexplained = overlaps.iter().filter(|o| o.explanation.is_none()).count();

    // Tokens of the main lock across lock-dir recreation.
    let main = held_on(history, LOCK);
    let mut reaps_with_increasing_tokens = 0;
    for f in history
        .faults
        .iter()
        .filter(|f| f.kind == FaultKind::ReapDir && f.effective)
    {
        let before = main
            .iter()
            .filter(|h| h.s.granted_ns < f.injected_ns)
            .map(|h| h.token)
            .max();
        let after = main
            .iter()
            .filter(|h| h.s.granted_ns >= f.healed_ns)
            .map(|h| h.token)
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

    // 5. Availability of the main lock.
    let mut availability = Vec::new();
    let mut faults: BTreeMap<String, usize> = BTreeMap::new();
    let mut faults_ineffective = 0;
    for f in &history.faults {
        if !f.effective {
            faults_ineffective += 1;
            continue;
        }
        *faults.entry(f.kind.name().to_string()).or_default() += 1;
        let next = main
            .iter()
            .filter(|h| h.s.granted_ns >= f.measure_from_ns && Some(h.s.process) != f.target_process)
            .map(|h| h.s.granted_ns)
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

    // 6. Close under load.
    let closes: Vec<CloseCheck> = history.closes.iter().map(|c| check_close(history, c)).collect();
    let close_violations = closes.iter().map(|c| c.violations.len()).sum();

    // 7. Multi-lock parts.
    let multi: Vec<&Section> = sections.iter().filter(|s| s.second.is_some()).collect();
    let multi_granted_lost: Vec<String> = multi.iter().filter_map(|s| multi_grant_lost(history, s)).collect();
    // The writes of each client by (lock, token) they carry, so that a section finds its own
    // without a pass over all of its client's writes (a long run has millions).
    let mut carrying: HashMap<(&str, &str, Token), Vec<usize>> = HashMap::new();
    for (i, w) in history.writes.iter().enumerate() {
        carrying
            .entry((w.client.as_str(), w.lock.as_str(), w.token))
            .or_default()
            .push(i);
        if let Some(part) = &w.second {
            carrying
                .entry((w.client.as_str(), part.lock.as_str(), part.token))
                .or_default()
                .push(i);
        }
    }
    let mut multi_writes_unfenced = 0;
    for s in &multi {
        let second = s.second.as_ref().expect("a multi-lock section");
        let client = s.client.as_str();
        let first = carrying.get(&(client, s.lock.as_str(), s.token));
        let other = carrying.get(&(client, second.lock.as_str(), second.token));
        // A write carrying one of the section's two tokens and not the other.
        let (first, other) = (
            first.map_or(&[][..], Vec::as_slice),
            other.map_or(&[][..], Vec::as_slice),
        );
        let both = first.iter().filter(|i| other.contains(i)).count();
        multi_writes_unfenced += first.len() + other.len() - 2 * both;
    }
    let (mut multi_waits_cut, mut multi_waits_cut_sound) = (0, 0);
    for f in history
        .faults
        .iter()
        .filter(|f| f.effective && f.kind == FaultKind::MultiWaitExpiry)
    {
        let Some(client) = &f.target_client else { continue };
        match first_outcome(history, client, f.injected_ns) {
            None => {}
            Some(Outcome::Failed(_)) => {
                multi_waits_cut += 1;
                multi_waits_cut_sound += 1;
            }
            Some(Outcome::Granted(s)) => {
                multi_waits_cut += 1;
                if multi_grant_lost(history, s).is_none() {
                    multi_waits_cut_sound += 1;
                }
            }
        }
    }

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
        stale_writes_accepted: stale.len(),
        closes,
        close_violations,
        multi_sections: multi.len(),
        multi_granted_lost,
        multi_writes_unfenced,
        multi_waits_cut,
        multi_waits_cut_sound,
        leaked_nodes: history.leaked_nodes,
        availability,
        availability_violations,
        max_unavailable_ms,
        operator: check_operator_faults(history),
    }
}

/// Overlaps among the holders of `lock` (rule 1): sweep them by start.
fn lock_overlaps(history: &History, lock: &str, held: &[Held<'_>]) -> Vec<Overlap> {
    // Writes on this lock per (client, token).
    let mut writes_of: HashMap<(&str, Token), Vec<&WriteRecord>> = HashMap::new();
    for w in &history.writes {
        if let Some(token) = w.token_for(lock) {
            writes_of.entry((w.client.as_str(), token)).or_default().push(w);
        }
    }
    let mut by_start = held.to_vec();
    by_start.sort_by_key(|h| (h.s.start_ns, h.token));
    let mut overlaps = Vec::new();
    for (i, a) in by_start.iter().enumerate() {
        let a_end = end_of(history, a.s);
        for b in &by_start[i + 1..] {
            if b.s.start_ns >= a_end {
                break;
            }
            let b_end = end_of(history, b.s);
            let overlap_ns = a_end.min(b_end).saturating_sub(b.s.start_ns);
            let (earlier, newer) = if a.token <= b.token { (a, b) } else { (b, a) };
            overlaps.push(explain_overlap(lock, &writes_of, earlier, newer, overlap_ns));
        }
    }
    overlaps
}

/// Token order among the holders of `lock`, by grant time (rule 2): the inversions, and how
/// many of them (or duplicate tokens) are violations.
fn token_order(lock: &str, held: &[Held<'_>]) -> (Vec<TokenInversion>, usize) {
    let mut by_grant = held.to_vec();
    by_grant.sort_by_key(|h| (h.s.granted_ns, h.token));
    let mut inversions = Vec::new();
    let mut highest: Option<&Held<'_>> = None;
    for h in &by_grant {
        if let Some(top) = highest {
            if h.token <= top.token {
                let duplicate = h.token == top.token;
                inversions.push(TokenInversion {
                    lock: lock.to_string(),
                    first: top.s.client.clone(),
                    first_token: top.token,
                    later: h.s.client.clone(),
                    later_token: h.token,
                    explained: !duplicate && h.s.lost,
                });
            }
        }
        if highest.is_none_or(|top| h.token > top.token) {
            highest = Some(h);
        }
    }
    let mut tokens: Vec<Token> = held.iter().map(|h| h.token).collect();
    tokens.sort();
    let duplicates = tokens.windows(2).filter(|w| w[0] == w[1]).count();
    let violations = inversions.iter().filter(|t| !t.explained).count().max(duplicates);
    (inversions, violations)
}

/// Accepted writes that were stale on `lock` (rule 3), against the register's own order and
/// against section starts; as indexes into the history's writes.
fn stale_writes(history: &History, lock: &str, held: &[Held<'_>]) -> Vec<usize> {
    let mut starts: Vec<(u64, Token)> = held.iter().map(|h| (h.s.start_ns, h.token)).collect();
    starts.sort();
    let mut writes: Vec<(usize, &WriteRecord, Token)> = history
        .writes
        .iter()
        .enumerate()
        .filter_map(|(i, w)| w.token_for(lock).map(|t| (i, w, t)))
        .collect();
    writes.sort_by_key(|(_, w, _)| w.seq);
    let mut stale = Vec::new();
    let mut max_accepted: Option<Token> = None;
    let mut highest_started: Option<Token> = None;
    let mut next_start = 0;
    for (i, w, token) in writes {
        while next_start < starts.len() && starts[next_start].0 < w.at_ns {
            highest_started = highest_started.max(Some(starts[next_start].1));
            next_start += 1;
        }
        if w.accepted {
            let below_register = max_accepted.is_some_and(|m| token < m);
            let below_started = highest_started.is_some_and(|m| token < m);
            if below_register || below_started {
                stale.push(i);
            }
            max_accepted = max_accepted.max(Some(token));
        }
    }
    stale
}

fn explain_overlap(
    lock: &str,
    writes_of: &HashMap<(&str, Token), Vec<&WriteRecord>>,
    earlier: &Held<'_>,
    newer: &Held<'_>,
    overlap_ns: u64,
) -> Overlap {
    let (e, n) = (earlier.s, newer.s);
    let mut overlap = Overlap {
        lock: lock.to_string(),
        earlier: e.client.clone(),
        earlier_token: earlier.token,
        newer: n.client.clone(),
        newer_token: newer.token,
        overlap_ms: overlap_ns as f64 / 1e6,
        explanation: None,
        violation: None,
    };
    if earlier.token == newer.token {
        overlap.violation = Some("both holders had the same fencing token".into());
        return overlap;
    }
    if !e.complete {
        overlap.violation = Some("the earlier holder never reported the end of its section".into());
        return overlap;
    }
    if !e.lost {
        overlap.violation = Some("the earlier holder never saw the loss signal".into());
        return overlap;
    }
    let after: Vec<&WriteRecord> = writes_of
        .get(&(e.client.as_str(), earlier.token))
        .into_iter()
        .flatten()
        .copied()
        .filter(|w| w.at_ns > n.start_ns)
        .collect();
    let accepted = after.iter().filter(|w| w.accepted).count();
    if accepted > 0 {
        overlap.violation = Some(format!(
            "the register accepted {accepted} of its {} writes after the newer section began",
            after.len()
        ));
        return overlap;
    }
    let lost_how = match e.lost_ns {
        Some(at) if at <= n.start_ns => "saw the loss signal before the newer section began".to_string(),
        Some(at) => format!(
            "saw the loss signal {:.0} ms after the newer section began",
            (at - n.start_ns) as f64 / 1e6
        ),
        None => "saw the loss signal".to_string(),
    };
    overlap.explanation = Some(format!(
        "earlier holder {lost_how}; the register rejected all {} of its writes after the newer grant{}",
        after.len(),
        if e.misbehaving {
            " (it ignored the loss signal on purpose)"
        } else {
            ""
        }
    ));
    overlap
}

/// How a task's acquisition ended.
enum Outcome<'a> {
    Failed(&'a super::history::AcquireFailure),
    Granted(&'a Section),
}

/// The first acquisition of `client` that ended at or after `from`: the end of the wait it
/// was in then.
fn first_outcome<'a>(history: &'a History, client: &str, from: u64) -> Option<Outcome<'a>> {
    let failed = history
        .acquire_failures
        .iter()
        .filter(|f| f.client == client && f.at_ns >= from)
        .min_by_key(|f| f.at_ns);
    let granted = history
        .sections
        .iter()
        .filter(|s| s.client == client && s.granted_ns >= from)
        .min_by_key(|s| s.granted_ns);
    match (failed, granted) {
        (Some(f), Some(s)) if s.granted_ns < f.at_ns => Some(Outcome::Granted(s)),
        (Some(f), _) => Some(Outcome::Failed(f)),
        (None, Some(s)) => Some(Outcome::Granted(s)),
        (None, None) => None,
    }
}

/// One `close()` under load (rule 6).
fn check_close(history: &History, c: &CloseRecord) -> CloseCheck {
    let bound_ns = c.bound_ms * 1_000_000;
    let after_call = |at: u64| at.saturating_sub(c.called_ns) / 1_000_000;
    let p = c.process;
    let mut violations = Vec::new();
    if !c.leftover_nodes.is_empty() {
        violations.push(format!(
            "process {p}: {} node(s) of the closed session left after close() returned: {:?}",
            c.leftover_nodes.len(),
            c.leftover_nodes
        ));
    }
    let mut waiters_ended = 0;
    for w in &c.waiters {
        let problem = match first_outcome(history, &w.client, w.since_ns) {
            None => Some("never ended".to_string()),
            Some(Outcome::Failed(f)) if f.at_ns > c.called_ns + bound_ns => Some(format!(
                "ended {} ms after the close (bound {} ms): {}",
                after_call(f.at_ns),
                c.bound_ms,
                f.error
            )),
            Some(Outcome::Failed(f)) => {
                let own_timeout = f.kind == FailureKind::Timeout && f.at_ns >= w.deadline_ns;
                (f.kind != FailureKind::Closed && !own_timeout).then(|| {
                    format!(
                        "ended {} ms after the close with `{}` instead of Closed",
                        after_call(f.at_ns),
                        f.error
                    )
                })
            }
            Some(Outcome::Granted(s)) if s.granted_ns > c.called_ns + bound_ns => Some(format!(
                "was granted {} ms after the close (bound {} ms)",
                after_call(s.granted_ns),
                c.bound_ms
            )),
            Some(Outcome::Granted(s)) => (!s.lost).then(|| {
                format!(
                    "was granted [{}] on the closed client and never saw the loss signal",
                    s.token
                )
            }),
        };
        match problem {
            None => waiters_ended += 1,
            Some(problem) => violations.push(format!("process {p}: waiter {} {problem}", w.client)),
        }
    }
    let held: Vec<&Section> = history
        .sections
        .iter()
        .filter(|s| s.process == p && s.granted_ns <= c.called_ns && end_of(history, s) > c.returned_ns)
        .collect();
    let mut holders_saw_loss = 0;
    for s in &held {
        let told = s.lost && s.lost_ns.is_none_or(|at| at <= c.returned_ns + bound_ns);
        if told {
            holders_saw_loss += 1;
        } else {
            let how = match s.lost_ns {
                Some(at) if s.lost => format!(
                    "saw the loss signal {} ms after close() returned (bound {} ms)",
                    at.saturating_sub(c.returned_ns) / 1_000_000,
                    c.bound_ms
                ),
                _ => "never saw the loss signal".to_string(),
            };
            violations.push(format!(
                "process {p}: holder {} [{}] of the closed client {how}",
                s.client, s.token
            ));
        }
    }
    CloseCheck {
        process: p,
        waiters: c.waiters.len(),
        waiters_ended,
        holders: held.len(),
        holders_saw_loss,
        leftover_nodes: c.leftover_nodes.len(),
        violations,
    }
}

/// Why a multi-lock section was granted with a part already lost (rule 7), if it was: its guard
/// reported loss at the grant, or a newer holder of one of its locks had been granted before
/// it. Grants of a process just paused are excused: it may return one before it can see the
/// loss.
fn multi_grant_lost(history: &History, s: &Section) -> Option<String> {
    let second = s.second.as_ref()?;
    let paused = history.faults.iter().any(|f| {
        f.effective
            && f.kind == FaultKind::PauseHolder
            && f.target_process == Some(s.process)
            && (f.injected_ns..=f.healed_ns + PAUSE_SLACK_NS).contains(&s.granted_ns)
    });
    if paused {
        return None;
    }
    let mut why = Vec::new();
    if s.lost_at_grant {
        why.push("its guard reported a loss at the grant".to_string());
    }
    for (lock, token) in [(s.lock.as_str(), s.token), (second.lock.as_str(), second.token)] {
        let newer = history
            .sections
            .iter()
            .filter(|o| o.granted_ns < s.granted_ns)
            .filter_map(|o| o.token_for(lock).filter(|t| *t > token).map(|t| (o, t)))
            .min_by_key(|(o, _)| o.granted_ns);
        if let Some((o, t)) = newer {
            why.push(format!(
                "{lock} [{token}] was already held by {} [{t}], granted {} ms earlier",
                o.client,
                (s.granted_ns - o.granted_ns) / 1_000_000
            ));
        }
    }
    (!why.is_empty()).then(|| {
        format!(
            "{} (process {}) was granted {} [{}] + {} [{}] with a lost part: {}",
            s.client,
            s.process,
            s.lock,
            s.token,
            second.lock,
            second.token,
            why.join("; ")
        )
    })
}

/// Effective faults of the given kinds that caught their target process in a long section,
/// and of those, how many holders saw the loss signal (with `in_time`: before any other
/// process was granted the holder's lock after the fault).
fn caught_mid_section(history: &History, in_time: bool, kinds: impl Fn(FaultKind) -> bool) -> (usize, usize) {
    let mut caught = 0;
    let mut saw_loss = 0;
    for f in history.faults.iter().filter(|f| f.effective && kinds(f.kind)) {
        let hit = history.sections.iter().find(|s| {
            s.long && Some(s.process) == f.target_process && s.granted_ns <= f.injected_ns && s.end_ns > f.injected_ns
        });
        if let Some(hit) = hit {
            caught += 1;
            // The next grant, elsewhere, of a lock the holder held.
            let next_grant = history
                .sections
                .iter()
                .filter(|s| s.process != hit.process && s.granted_ns > f.injected_ns)
                .filter(|s| {
                    s.token_for(&hit.lock).is_some()
                        || hit.second.as_ref().is_some_and(|p| s.token_for(&p.lock).is_some())
                })
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
    use super::super::history::{AcquireFailure, FaultRecord, Part, Waiter, WriteRecord, LOCK_B};
    use super::*;

    const MS: u64 = 1_000_000;

    fn token(zxid: i64) -> Token {
        Token { zxid, generation: 0 }
    }

    fn section(client: &str, process: usize, zxid: i64, start_ms: u64, end_ms: u64) -> Section {
        Section {
            client: client.into(),
            process,
            lock: LOCK.into(),
            token: token(zxid),
            second: None,
            lost_at_grant: false,
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
            revoked: false,
        }
    }

    fn part(lock: &str, zxid: i64) -> Part {
        Part {
            lock: lock.into(),
            token: token(zxid),
        }
    }

    /// A multi-lock section holding the main lock with `a` and the second with `b`.
    fn multi_section(client: &str, process: usize, a: i64, b: i64, start_ms: u64, end_ms: u64) -> Section {
        Section {
            second: Some(part(LOCK_B, b)),
            ..section(client, process, a, start_ms, end_ms)
        }
    }

    /// Adds writes of a section on the main lock to the register log, one per entry of `at_ms`.
    fn writes(h: &mut History, client: &str, zxid: i64, at_ms: &[(u64, bool)]) {
        fenced_writes(h, client, part(LOCK, zxid), None, at_ms);
    }

    /// Adds writes with one token, or two (a multi-lock section's), to the register log.
    fn fenced_writes(h: &mut History, client: &str, first: Part, second: Option<Part>, at_ms: &[(u64, bool)]) {
        for &(at, accepted) in at_ms {
            let seq = h.writes.len() as u64;
            h.writes.push(WriteRecord {
                seq,
                at_ns: at * MS,
                client: client.into(),
                lock: first.lock.clone(),
                token: first.token,
                second: second.clone(),
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
            target_client: None,
            effective: true,
            successor_zxid: None,
            node_zxid: None,
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
            target_client: None,
            effective: true,
            successor_zxid: None,
            node_zxid: None,
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
            target_client: None,
            effective: true,
            successor_zxid: None,
            node_zxid: None,
            note: String::new(),
        });
        let told = |h: &History| {
            let r = check(h);
            (r.holders_isolated, r.holders_isolated_saw_loss)
        };
        assert_eq!(told(&h), (1, 0), "never told");
        // A grant of the second lock elsewhere is not a grant of the isolated holder's lock.
        h.sections.push(Section {
            lock: LOCK_B.into(),
            ..section("p2-b", 2, 25, 230, 240)
        });
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
            target_client: None,
            effective: true,
            successor_zxid: None,
            node_zxid: None,
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
    /// `clean()` plus a task alone on the second lock (p0-b, 150-205 ms) and a multi-lock
    /// section (p1-m, 310-400 ms) with both tokens on every write.
    fn with_multi() -> History {
        let mut h = clean();
        h.sections.push(Section {
            lock: LOCK_B.into(),
            ..section("p0-b", 0, 15, 150, 205)
        });
        fenced_writes(&mut h, "p0-b", part(LOCK_B, 15), None, &[(150, true), (200, true)]);
        h.sections.push(multi_section("p1-m", 1, 30, 31, 310, 400));
        fenced_writes(
            &mut h,
            "p1-m",
            part(LOCK, 30),
            Some(part(LOCK_B, 31)),
            &[(310, true), (350, true)],
        );
        h
    }

    #[test]
    fn a_clean_history_with_a_multi_lock_passes() {
        let report = check(&with_multi());
        assert!(report.passed(), "{}", report.summary());
        assert_eq!(report.multi_sections, 1);
    }

    #[test]
    fn an_overlap_on_the_second_lock_is_a_violation() {
        let mut h = with_multi();
        h.sections[2].end_ns = 320 * MS; // p0-b still on the second lock when p1-m starts
        let report = check(&h);
        assert_eq!(report.overlaps_unexplained, 1, "{}", report.summary());
        assert_eq!(report.overlaps[0].lock, LOCK_B);
        assert!(!report.passed());
    }

    #[test]
    fn a_stale_token_on_the_second_lock_is_caught_in_a_joint_write() {
        let mut h = with_multi();
        // A joint write whose main-lock token is current but whose second-lock token is older
        // than one the register accepted: a broken register let it through.
        fenced_writes(&mut h, "p2-m", part(LOCK, 40), Some(part(LOCK_B, 10)), &[(450, true)]);
        let report = check(&h);
        assert_eq!(report.stale_writes_accepted, 1, "{}", report.summary());
        assert!(!report.passed());
    }

    #[test]
    fn a_multi_lock_write_without_both_tokens_is_a_violation() {
        let mut h = with_multi();
        writes(&mut h, "p1-m", 30, &[(380, true)]);
        let report = check(&h);
        assert_eq!(report.multi_writes_unfenced, 1, "{}", report.summary());
        assert!(!report.passed());
    }

    #[test]
    fn a_multi_lock_granted_with_a_superseded_part_is_a_violation() {
        let mut h = with_multi();
        // p2-t0 held the main lock with a newer token before p1-m's grant: p1-m's main-lock
        // part (30) was lost when its acquire returned.
        h.sections.push(section("p2-t0", 2, 35, 302, 305));
        writes(&mut h, "p2-t0", 35, &[(302, true)]);
        h.sections[3].lost = true;
        h.writes.retain(|w| w.client != "p1-m");
        fenced_writes(&mut h, "p1-m", part(LOCK, 30), Some(part(LOCK_B, 31)), &[(310, false)]);
        let report = check(&h);
        assert_eq!(report.multi_granted_lost.len(), 1, "{}", report.summary());
        assert!(report.multi_granted_lost[0].contains("already held by p2-t0"));
        assert_eq!(
            report.overlaps_unexplained + report.stale_writes_accepted + report.token_violations,
            0
        );
        assert!(!report.passed());
        // Unless its process had just been paused.
        h.faults.push(FaultRecord {
            kind: FaultKind::PauseHolder,
            injected_ns: 250 * MS,
            healed_ns: 309 * MS,
            measure_from_ns: 250 * MS,
            bound_ms: 10_000,
            target_process: Some(1),
            target_client: None,
            effective: true,
            successor_zxid: None,
            node_zxid: None,
            note: String::new(),
        });
        assert!(check(&h).passed(), "{}", check(&h).summary());
    }

    #[test]
    fn a_multi_lock_whose_guard_is_lost_at_the_grant_is_a_violation() {
        let mut h = with_multi();
        h.sections[3].lost_at_grant = true;
        let report = check(&h);
        assert_eq!(report.multi_granted_lost.len(), 1, "{}", report.summary());
        assert!(!report.passed());
    }

    #[test]
    fn a_multi_lock_wait_cut_by_expiry_must_not_end_in_a_grant_with_a_lost_part() {
        let mut h = with_multi();
        h.faults.push(FaultRecord {
            kind: FaultKind::MultiWaitExpiry,
            injected_ns: 220 * MS,
            healed_ns: 300 * MS,
            measure_from_ns: 220 * MS,
            bound_ms: 10_000,
            target_process: Some(1),
            target_client: Some("p1-m".into()),
            effective: true,
            successor_zxid: None,
            node_zxid: None,
            note: String::new(),
        });
        let cut = |h: &History| {
            let r = check(h);
            (r.multi_waits_cut, r.multi_waits_cut_sound)
        };
        assert_eq!(cut(&h), (1, 1), "granted with both parts sound");
        assert!(check(&h).multi_granted_lost.is_empty());
        // p2-t0 held the main lock with a newer token before p1-m's grant: p1-m kept a part
        // lost while it waited.
        h.sections.push(section("p2-t0", 2, 35, 302, 305));
        h.sections[3].lost = true;
        assert_eq!(cut(&h), (1, 0), "granted with a lost part");
        assert_eq!(check(&h).multi_granted_lost.len(), 1);
        // The wait ending in an error is sound (the later grant is still judged on its own).
        h.acquire_failures.push(AcquireFailure {
            client: "p1-m".into(),
            process: 1,
            at_ns: 230 * MS,
            kind: FailureKind::Other,
            error: "lock `chaos` was lost".into(),
        });
        assert_eq!(cut(&h), (1, 1));
    }

    /// `clean()` with process 1's client closed at 250 ms (returning at 260 ms) while p1-t0
    /// held the lock (told at 262 ms) and p1-t1 waited (ended with `Closed` at 251 ms).
    fn with_close() -> History {
        let mut h = clean();
        h.sections[1].lost = true;
        h.sections[1].lost_ns = Some(262 * MS);
        h.closes.push(CloseRecord {
            process: 1,
            session: Some(0x100),
            called_ns: 250 * MS,
            returned_ns: 260 * MS,
            waiters: vec![Waiter {
                client: "p1-t1".into(),
                since_ns: 220 * MS,
                deadline_ns: 5220 * MS,
            }],
            holders: vec!["p1-t0".into()],
            leftover_nodes: Vec::new(),
            bound_ms: 100,
        });
        h.acquire_failures.push(AcquireFailure {
            client: "p1-t1".into(),
            process: 1,
            at_ns: 251 * MS,
            kind: FailureKind::Closed,
            error: "the lock client is closed".into(),
        });
        h
    }

    #[test]
    fn a_close_with_its_waiters_ended_and_its_holder_told_passes() {
        let report = check(&with_close());
        assert!(report.passed(), "{}", report.summary());
        let c = &report.closes[0];
        assert_eq!(
            (c.waiters, c.waiters_ended, c.holders, c.holders_saw_loss),
            (1, 1, 1, 1)
        );
    }

    #[test]
    fn nodes_of_a_closed_session_left_after_close_are_a_violation() {
        let mut h = with_close();
        h.closes[0].leftover_nodes = vec!["/zklock-chaos/chaos/_c_x-lock-0000000007".into()];
        let report = check(&h);
        assert_eq!(report.close_violations, 1);
        assert!(report.summary().contains("left after close() returned"));
        assert!(!report.passed());
    }

    #[test]
    fn a_waiter_of_a_closed_client_must_end_with_closed_within_the_bound() {
        let failed = |at_ms: u64, kind: FailureKind| {
            let mut h = with_close();
            h.acquire_failures[0].at_ns = at_ms * MS;
            h.acquire_failures[0].kind = kind;
            check(&h)
        };
        assert_eq!(failed(400, FailureKind::Closed).close_violations, 1, "too late");
        assert_eq!(failed(255, FailureKind::Timeout).close_violations, 1, "timed out early");
        assert_eq!(failed(255, FailureKind::Other).close_violations, 1, "another error");
        let mut h = with_close();
        h.acquire_failures.clear();
        let report = check(&h);
        assert_eq!(report.close_violations, 1, "never ended");
        assert!(!report.passed());
        // Its own deadline falling first is fine.
        let mut h = with_close();
        h.closes[0].waiters[0].deadline_ns = 254 * MS;
        h.acquire_failures[0].at_ns = 255 * MS;
        h.acquire_failures[0].kind = FailureKind::Timeout;
        assert!(check(&h).passed());
    }

    #[test]
    fn a_holder_of_a_closed_client_must_see_the_loss() {
        let mut h = with_close();
        h.sections[1].lost = false;
        h.sections[1].lost_ns = None;
        let report = check(&h);
        assert_eq!(report.close_violations, 1, "{}", report.summary());
        assert!(report.summary().contains("never saw the loss signal"));
        assert!(!report.passed());
        h.sections[1].lost = true;
        h.sections[1].lost_ns = Some(500 * MS);
        assert_eq!(check(&h).close_violations, 1, "told too late");
    }
}
