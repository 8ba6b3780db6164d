//! The scheduler under faults, CI-sized: three node processes run one singleton job every
//! second through fault proxies in front of a 3-member ensemble, with clocks off ZooKeeper's
//! (one right, one 37 minutes ahead, one 23 minutes behind) and three overlap policies
//! (once-per-tick, skip, buffer-one), while the node running the job is killed, then
//! partitioned until its session expires, the tick record is restored from a backup taken at
//! the start of the round, and the leader is killed. No tick may run twice, every tick between
//! the first and the last run must have run or been reported given up, skipped or lost (that
//! tick itself, not a count), and the job's history must agree with the runs seen. The longer
//! run is `cargo run --release -p zklock-examples --example chaos -- jobs --duration 10m --skew
//! --mixed`.

use std::time::Duration;

use zklock_examples::chaos::jobs::{node_main_from_env, run_jobs, JobsConfig};
use zklock_examples::chaos::runner::ChildCommand;

/// Name of the entry point the node processes re-execute this binary into.
const NODE_ENTRY: &str = "chaos_job_node_process";

#[test]
fn no_tick_runs_twice_or_unaccounted_under_skewed_clocks_mixed_policies_kills_partitions_restores_and_leader_loss() {
    let program = std::env::current_exe().expect("the test binary's path");
    let config = JobsConfig {
        duration: Duration::ZERO, // one round: every fault kind once
        nodes: 3,
        session_timeout: Duration::from_secs(4),
        tick_time: Duration::from_millis(200),
        child: ChildCommand {
            program,
            args: zklock::testing::process::rerun_args(NODE_ENTRY).to_vec(),
        },
        verbose: true,
        skew: true,
        mixed: true,
    };
    let report = run_jobs(&config).expect("the run completes");
    eprintln!("{}", report.json_line());
    for kind in ["kill_runner", "partition_runner", "restore_record", "leader_kill"] {
        assert_eq!(report.faults.get(kind), Some(&1), "{kind} was injected");
    }
    assert!(
        report.ticks >= 20,
        "too few ticks to mean anything: {}",
        report.json_line()
    );
    assert!(report.duplicates.is_empty(), "ticks ran twice: {:?}", report.duplicates);
    assert!(
        report.unexplained_gaps.is_empty(),
        "ticks ran nowhere without a word: {:?} in {}",
        report.unexplained_gaps,
        report.json_line()
    );
    assert!(
        report.history_disagreements.is_empty(),
        "{:?}",
        report.history_disagreements
    );
    assert!(report.passed());
}

/// Not a test: the body of each node process the run above starts (it re-executes this binary
/// with `--ignored --exact chaos_job_node_process` and its configuration in the environment).
/// Run alone, without that configuration, it fails rather than pass vacuously.
#[test]
#[ignore = "entry point of the node processes of the chaos test; run by it, not alone"]
fn chaos_job_node_process() {
    assert!(
        std::env::var("ZKLOCK_CHAOS_NODE").is_ok(),
        "the entry point of the chaos test's node processes: run that test, not this"
    );
    std::process::exit(node_main_from_env());
}
