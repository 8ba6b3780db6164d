//! Leader election under faults, CI-sized: three member processes serve one election through
//! fault proxies in front of a 3-member ensemble, and the leader writes to a fenced register
//! with its term's token, while the leader is shut down gracefully, killed, partitioned until
//! its session expires, paused past its session timeout, and the ensemble's own leader is
//! killed — one round, each fault once. Every term that ends leaves a writer behind that keeps
//! writing with the old token for two seconds; the register must refuse it once a newer leader
//! has written, and never accept a write with a token older than one it accepted; every term's token must be larger than every earlier term's, no
//! member may be told it leads before the previous leader's term ended (a paused leader
//! excepted), and a leader must write again within the bound after every fault. Each fault must
//! also be seen to have happened in the history. The longer run is
//! `cargo run --release -p zklock-examples --example chaos -- leader --duration 10m`.
//!
//! The checker's own unit tests (hand-made histories with violations) are the library's
//! (`src/chaos/leader.rs`).

use std::time::Duration;

use zklock_examples::chaos;
use zklock_examples::chaos::leader::{
    check_leader, member_main_from_env, read_leader_history, run_leader, LeaderConfig, LeaderFault, TermEnd, MEMBER_ENV,
};
use zklock_examples::chaos::runner::ChildCommand;

/// Name of the entry point the member processes re-execute this binary into.
const MEMBER_ENTRY: &str = "chaos_leader_member_process";

#[test]
fn one_leader_at_a_time_under_kill_partition_pause_failover_and_hand_over() {
    let program = std::env::current_exe().expect("the test binary's path");
    let history_path = std::env::temp_dir().join(format!("zklock-chaos-leader-{}.json", std::process::id()));
    let config = LeaderConfig {
        duration: Duration::ZERO, // one round: every fault kind once
        members: 3,
        session_timeout: Duration::from_secs(4),
        tick_time: Duration::from_millis(200),
        seed: chaos::clock::now_ns(),
        late_percent: 100, // every term that ends leaves a writer behind: fencing must stop it
        child: ChildCommand {
            program,
            args: zklock::testing::process::rerun_args(MEMBER_ENTRY).to_vec(),
        },
        history_path: Some(history_path.clone()),
        verbose: true,
    };
    let outcome = run_leader(&config).expect("the run completes");
    let (history, report) = (&outcome.history, &outcome.report);
    eprint!("{}", report.summary());
    for note in &report.fault_notes {
        eprintln!("  {note}");
    }
    eprintln!("{}", report.json_line());

    // Every fault was injected once and did what it is for, as the history shows it.
    for kind in LeaderFault::ALL {
        assert_eq!(report.faults.get(kind.name()), Some(&1), "{} was injected", kind.name());
    }
    assert!(report.faults_ineffective.is_empty(), "{:?}", report.faults_ineffective);
    let fault = |kind: LeaderFault| {
        history
            .faults
            .iter()
            .find(|f| f.kind == kind)
            .expect("the fault is in the history")
    };
    let ended = |kind: LeaderFault, how: TermEnd| {
        let f = fault(kind);
        let term = history
            .terms
            .iter()
            .find(|t| Some(t.token) == f.leader_token)
            .unwrap_or_else(|| panic!("{}: the leader's term is in the history", kind.name()));
        assert_eq!(Some(term.member), f.target, "{}: the term is the target's", kind.name());
        assert_eq!(term.end, how, "{}: how the leader's term ended", kind.name());
        let end = term.ended_ns.expect("an end");
        assert!(end >= f.injected_ns, "{}: the term ended after the fault", kind.name());
        // Another member, or a killed member's next life (it may be first in the queue).
        let successor = history
            .terms
            .iter()
            .filter(|t| t.gained_ns >= f.injected_ns)
            .min_by_key(|t| t.gained_ns)
            .unwrap_or_else(|| panic!("{}: a new term followed", kind.name()));
        assert!(successor.token > term.token, "{}: a newer token", kind.name());
        (f, end, successor.gained_ns)
    };
    let (f, end, _) = ended(LeaderFault::ShutdownLeader, TermEnd::HandedOver);
    assert!(end <= f.healed_ns, "hand-over before shutdown returned");
    ended(LeaderFault::KillLeader, TermEnd::Killed);
    let (f, end, next) = ended(LeaderFault::PartitionLeader, TermEnd::Lost);
    assert!(
        end <= f.healed_ns && next <= f.healed_ns,
        "the partitioned leader saw its loss, and another member led, while cut off"
    );
    let (f, end, next) = ended(LeaderFault::PauseLeader, TermEnd::Lost);
    assert!(
        next <= f.healed_ns && end >= f.healed_ns,
        "another member led while the leader was paused; it saw its loss after it continued"
    );
    assert!(fault(LeaderFault::EnsembleLeaderKill).carried_out);

    // It wrote, and the verdict is clean.
    assert!(report.terms >= 5, "too few terms: {}", report.json_line());
    assert!(
        report.writes_accepted >= 100,
        "too few accepted writes to mean anything: {}",
        report.json_line()
    );
    assert!(
        report.late_writes_refused > 0,
        "no late writer of an ended term was refused: {}",
        report.json_line()
    );
    assert!(report.stale_writes_accepted.is_empty(), "{}", report.summary());
    assert!(report.writes_outside_terms.is_empty(), "{}", report.summary());
    assert!(report.token_violations.is_empty(), "{}", report.summary());
    assert!(report.overlaps_unexplained.is_empty(), "{}", report.summary());
    assert!(report.safe(), "{}", report.summary());
    assert!(
        report.live(),
        "a leader did not come back in time\n{}",
        report.summary()
    );
    assert!(report.made_progress(), "{}", report.summary());
    assert!(report.passed());

    // The stored history gives the same verdict.
    let stored = read_leader_history(&history_path).expect("the history file reads back");
    assert_eq!(&check_leader(&stored), report);
    let _ = std::fs::remove_file(&history_path);
}

/// Not a test: the body of each member process the run above starts (it re-executes this
/// binary with `--ignored --exact chaos_leader_member_process` and its configuration in the
/// environment). Run alone, without that configuration, it fails rather than pass vacuously.
#[test]
#[ignore = "entry point of the member processes of the leader chaos test; run by it, not alone"]
fn chaos_leader_member_process() {
    assert!(
        std::env::var(MEMBER_ENV).is_ok(),
        "the entry point of the leader chaos test's member processes: run that test, not this"
    );
    std::process::exit(member_main_from_env());
}
