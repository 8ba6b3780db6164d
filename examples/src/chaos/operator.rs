//! What an operator does to a lock's holder in a chaos run: asks it to release (revocation,
//! through `LockClient::revoke`), or deletes its node to clear a lock it seems stuck in.

use std::time::Duration;

use zklock::{zk, LockClient, RevokeOutcome};

use super::clock::now_ns;
use super::history::{FaultKind, History, Section, LOCK};

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// Asks the holders of `lock` (under `namespace`) to release it, from a client of its own.
pub async fn revoke(connect: &str, namespace: &str, lock: &str) -> Result<RevokeOutcome, BoxError> {
    let client = LockClient::builder(connect)
        .namespace(namespace)
        .session_timeout(Duration::from_secs(4))
        .connect()
        .await?;
    let outcome = client.revoke(lock).await;
    client.close().await;
    Ok(outcome?)
}

/// The contender nodes in `dir`, in queue order (after a `sync`, so the listing is as recent
/// as the leader's); empty when there is no such directory.
async fn queue(raw: &zk::Client, dir: &str) -> Result<Vec<String>, BoxError> {
    let _ = raw.sync(dir).await;
    let mut nodes = match raw.list_children(dir).await {
        Ok(nodes) => nodes,
        Err(zk::Error::NoNode) => return Ok(Vec::new()),
        Err(err) => return Err(err.into()),
    };
    nodes.sort_by_key(|n| sequence(n));
    Ok(nodes)
}

/// The creation zxid of `dir/node`, if it exists.
async fn czxid(raw: &zk::Client, dir: &str, node: &str) -> Result<Option<i64>, BoxError> {
    Ok(raw.check_stat(&format!("{dir}/{node}")).await?.map(|stat| stat.czxid))
}

/// The first node in `dir` (the mutex's holder) and its creation zxid; `None` when there is
/// none.
pub async fn holder_node(raw: &zk::Client, dir: &str) -> Result<Option<(String, i64)>, BoxError> {
    let Some(holder) = queue(raw, dir).await?.into_iter().next() else {
        return Ok(None);
    };
    let zxid = czxid(raw, dir, &holder).await?;
    Ok(zxid.map(|zxid| (format!("{dir}/{holder}"), zxid)))
}

/// A holder node deleted by [`delete_holder`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Deleted {
    /// The deleted node's path.
    pub node: String,
    /// Its creation zxid (the first token of its grants).
    pub zxid: Option<i64>,
    /// The creation zxid (the first token) of the node next in line, if there was one.
    pub successor_zxid: Option<i64>,
    /// When the delete was sent (before it, so nobody can hear of it earlier).
    pub sent_ns: u64,
}

/// Deletes the first node in `dir` (the mutex's holder), noting the node behind it; `None`
/// when the directory holds no node.
pub async fn delete_holder(raw: &zk::Client, dir: &str) -> Result<Option<Deleted>, BoxError> {
    let nodes = queue(raw, dir).await?;
    let Some(holder) = nodes.first() else {
        return Ok(None);
    };
    let successor_zxid = match nodes.get(1) {
        Some(next) => czxid(raw, dir, next).await?,
        None => None,
    };
    let zxid = czxid(raw, dir, holder).await?;
    let node = format!("{dir}/{holder}");
    let sent_ns = now_ns();
    match raw.delete(&node, None).await {
        Ok(()) => Ok(Some(Deleted {
            node,
            zxid,
            successor_zxid,
            sent_ns,
        })),
        // Released meanwhile: nothing was cleared.
        Err(zk::Error::NoNode) => Ok(None),
        Err(err) => Err(err.into()),
    }
}

/// How long after a revocation a section that runs on without having honoured it counts as
/// ignoring it: a short section may end on its own meanwhile, a long one lasts seconds more.
const HONOUR_WITHIN_NS: u64 = 2_000_000_000;

/// How long after a deletion or a revocation request its node may still be handed on inside
/// the holder's process: the node's watch is set 100 ms after its first grant and tells within a
/// round trip; the rest is room for a driver thread starved on a loaded 2-core machine (a grant
/// 1 002 ms after the deletion was seen there). A process that never hears keeps handing the
/// node on for its whole chain (thousands of grants, many seconds).
const STOPS_WITHIN_NS: u64 = 3_000_000_000;

/// What the operator faults showed, from the history alone.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct OperatorChecks {
    /// Revocations that reached a holder in a section.
    pub revocations: usize,
    /// Of those, sections that ended early for it.
    pub revocations_honoured: usize,
    /// Deleted holder nodes with a waiter behind them whose grant is recorded (with a
    /// lock-delay in force).
    pub lock_delays_checked: usize,
    /// Deleted or revoked holder nodes whose later grants were looked for.
    pub nodes_checked: usize,
    /// Broken rules, one line each: a section that ran on past a revocation, a waiter granted
    /// within the lock-delay after the holder's node was deleted, a deleted or revoked node
    /// granted again (handed to another task of its process) after the fault.
    pub violations: Vec<String>,
}

/// Checks the operator faults of `history`: every section a revocation reached ends early (or
/// had ended within 2 s of it anyway), and, with a lock-delay, the waiter that was
/// next in line when a holder's node was deleted is granted no earlier than the delay after.
pub fn check_operator_faults(history: &History) -> OperatorChecks {
    let mut checks = OperatorChecks::default();
    let holds_main = |s: &Section| s.lock == LOCK || s.second.as_ref().is_some_and(|p| p.lock == LOCK);
    for f in history.faults.iter().filter(|f| f.effective) {
        if let Some(zxid) = f.node_zxid {
            checks.nodes_checked += 1;
            let later = history
                .sections
                .iter()
                .filter(|s| s.lock == LOCK && s.token.zxid == zxid && s.granted_ns > f.injected_ns + STOPS_WITHIN_NS)
                .min_by_key(|s| s.granted_ns);
            if let Some(s) = later {
                checks.violations.push(format!(
                    "{} was granted node {zxid:#x} (generation {}) {} ms after it was {}",
                    s.client,
                    s.token.generation,
                    (s.granted_ns - f.injected_ns) / 1_000_000,
                    if f.kind == FaultKind::DeleteHolderNode {
                        "deleted"
                    } else {
                        "asked to release"
                    }
                ));
            }
        }
        match f.kind {
            FaultKind::RevokeHolder => {
                let Some(client) = &f.target_client else { continue };
                let reached = history
                    .sections
                    .iter()
                    .filter(|s| &s.client == client && holds_main(s) && s.granted_ns <= f.injected_ns)
                    .filter(|s| s.end_ns >= f.injected_ns)
                    .max_by_key(|s| s.granted_ns);
                let Some(s) = reached else { continue };
                checks.revocations += 1;
                if s.revoked {
                    checks.revocations_honoured += 1;
                } else if s.end_ns > f.injected_ns + HONOUR_WITHIN_NS && !s.lost {
                    checks.violations.push(format!(
                        "{client} [{}] ran {} ms past a revocation without ending its section",
                        s.token,
                        (s.end_ns - f.injected_ns) / 1_000_000
                    ));
                }
            }
            FaultKind::DeleteHolderNode if history.lock_delay_ms > 0 => {
                let Some(zxid) = f.successor_zxid else { continue };
                let delay_ns = history.lock_delay_ms * 1_000_000;
                let granted = history
                    .sections
                    .iter()
                    .filter(|s| s.lock == LOCK && s.token.zxid == zxid && s.token.generation == 0)
                    .map(|s| (s.client.as_str(), s.granted_ns))
                    .min_by_key(|(_, at)| *at);
                let Some((client, at)) = granted else { continue };
                checks.lock_delays_checked += 1;
                if at < f.injected_ns + delay_ns {
                    checks.violations.push(format!(
                        "{client} was granted {} ms after the holder's node was deleted, within the lock-delay of {} ms",
                        at.saturating_sub(f.injected_ns) / 1_000_000,
                        history.lock_delay_ms
                    ));
                }
            }
            _ => {}
        }
    }
    checks
}

/// The sequence number at the end of a contender node's name (names without one sort last).
fn sequence(node: &str) -> u64 {
    let digits = node.len() - node.trim_end_matches(|c: char| c.is_ascii_digit()).len();
    node[node.len() - digits..].parse().unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::super::history::{FaultRecord, Token};
    use super::*;

    const MS: u64 = 1_000_000;

    fn section(client: &str, zxid: i64, granted_ms: u64, end_ms: u64, revoked: bool) -> Section {
        Section {
            client: client.into(),
            process: 0,
            lock: LOCK.into(),
            token: Token { zxid, generation: 0 },
            second: None,
            lost_at_grant: false,
            granted_ns: granted_ms * MS,
            start_ns: granted_ms * MS,
            end_ns: end_ms * MS,
            lost: false,
            lost_ns: None,
            misbehaving: false,
            long: true,
            writes_attempted: 1,
            writes_rejected: 0,
            complete: true,
            revoked,
        }
    }

    fn fault(kind: FaultKind, at_ms: u64, client: &str, successor_zxid: Option<i64>) -> FaultRecord {
        let node_zxid = None;
        FaultRecord {
            kind,
            injected_ns: at_ms * MS,
            healed_ns: at_ms * MS,
            measure_from_ns: at_ms * MS,
            bound_ms: 10_000,
            target_process: Some(0),
            target_client: Some(client.into()),
            effective: true,
            successor_zxid,
            node_zxid,
            note: String::new(),
        }
    }

    #[test]
    fn a_section_that_runs_on_past_a_revocation_is_a_violation() {
        let mut history = History {
            sections: vec![section("p0-t0", 1, 0, 9_000, false)],
            faults: vec![fault(FaultKind::RevokeHolder, 1_000, "p0-t0", None)],
            ..History::default()
        };
        let checks = check_operator_faults(&history);
        assert_eq!((checks.revocations, checks.revocations_honoured), (1, 0));
        assert_eq!(checks.violations.len(), 1, "{checks:?}");
        history.sections[0].revoked = true;
        let checks = check_operator_faults(&history);
        assert_eq!((checks.revocations, checks.revocations_honoured), (1, 1));
        assert!(checks.violations.is_empty());
        // A short section that ended on its own right after the request is no violation.
        history.sections[0] = section("p0-t0", 1, 0, 1_500, false);
        assert!(check_operator_faults(&history).violations.is_empty());
    }

    #[test]
    fn a_successor_granted_within_the_lock_delay_is_a_violation() {
        let mut history = History {
            sections: vec![
                section("p0-t0", 1, 0, 2_000, false),
                section("p1-t0", 2, 1_400, 1_500, false),
            ],
            faults: vec![fault(FaultKind::DeleteHolderNode, 1_000, "p0-t0", Some(2))],
            lock_delay_ms: 1_000,
            ..History::default()
        };
        let checks = check_operator_faults(&history);
        assert_eq!(checks.lock_delays_checked, 1);
        assert_eq!(checks.violations.len(), 1, "{checks:?}");
        history.sections[1] = section("p1-t0", 2, 2_000, 2_100, false);
        let checks = check_operator_faults(&history);
        assert_eq!(checks.lock_delays_checked, 1);
        assert!(checks.violations.is_empty(), "{checks:?}");
        // Without a lock-delay nothing is checked.
        history.lock_delay_ms = 0;
        assert_eq!(check_operator_faults(&history).lock_delays_checked, 0);
    }

    /// A deleted (or revoked) node granted again inside its process well after the fault is a
    /// violation; its grants before the fault, or just after it, are not.
    #[test]
    fn a_deleted_node_handed_on_after_the_fault_is_a_violation() {
        let mut later = section("p0-t1", 7, 1_200, 1_210, false);
        later.token.generation = 3;
        let mut deleted = fault(FaultKind::DeleteHolderNode, 1_000, "p0-t0", None);
        deleted.node_zxid = Some(7);
        let mut history = History {
            sections: vec![section("p0-t0", 7, 0, 1_050, false), later],
            faults: vec![deleted],
            ..History::default()
        };
        let checks = check_operator_faults(&history);
        assert_eq!(checks.nodes_checked, 1);
        assert!(checks.violations.is_empty(), "within the bound: {checks:?}");
        history.sections[1].granted_ns = 4_500 * MS;
        let checks = check_operator_faults(&history);
        assert_eq!(checks.violations.len(), 1, "{checks:?}");
        assert!(checks.violations[0].contains("generation 3"), "{checks:?}");
    }

    #[test]
    fn sorts_by_the_sequence_suffix() {
        assert_eq!(sequence("_c_ab-lock-0000000012"), 12);
        assert_eq!(sequence("junk"), u64::MAX);
    }
}
