//! `zklock exec` under faults, CI-sized: three slots run `zklock exec` on one lock again and
//! again, each command writing from a child process to one log, while the holding `zklock` is
//! SIGKILLed, a waiting one is SIGKILLed, the holder's node is deleted, a revocation is
//! requested and the holder is partitioned past its session (one round of each). No grant may
//! write after the next one began, and the grants' tokens must increase. The longer run is
//! `cargo build --release -p zklock-cli && cargo run --release -p zklock-examples --example
//! chaos -- exec --duration 10m`.

use std::path::PathBuf;
use std::time::Duration;

use zklock_examples::chaos::exec::{run_exec, ExecConfig, ExecFault};

/// The `zklock` binary of this build: `cargo test --workspace` builds it beside the test
/// binaries (target/<profile>/zklock, the tests being in target/<profile>/deps); built here when
/// only this package's tests were built.
fn zklock_binary() -> PathBuf {
    let exe = std::env::current_exe().expect("the test binary's path");
    let profile_dir = exe.parent().and_then(|deps| deps.parent()).expect("target/<profile>");
    let zklock = profile_dir.join("zklock");
    if !zklock.exists() {
        let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
        let status = std::process::Command::new(cargo)
            .args(["build", "-p", "zklock-cli", "--bin", "zklock"])
            .status()
            .expect("run cargo build");
        assert!(status.success(), "cargo build -p zklock-cli failed");
    }
    assert!(zklock.exists(), "no zklock binary at {}", zklock.display());
    zklock
}

#[test]
fn no_command_of_zklock_exec_runs_outside_its_lock_under_kills_deletes_revocations_and_partitions() {
    let config = ExecConfig {
        duration: Duration::ZERO, // one round: every fault kind once
        slots: 3,
        session_timeout: Duration::from_secs(2),
        tick_time: Duration::from_millis(200),
        lock_delay: Duration::from_secs(1),
        zklock: zklock_binary(),
        seed: zklock_examples::chaos::clock::now_ns(),
        verbose: true,
    };
    eprintln!("seed {}", config.seed);
    let report = run_exec(&config).expect("the run completes");
    eprintln!("{}", report.json_line());
    for kind in ExecFault::ALL {
        assert_eq!(
            report.faults.get(kind.name()),
            Some(&1),
            "{kind:?} was injected: {}",
            report.json_line()
        );
    }
    assert!(
        report.grants >= 5,
        "too few grants to mean anything: {}",
        report.json_line()
    );
    assert!(
        report.overlaps.is_empty(),
        "work outside its lock: {:?}",
        report.overlaps
    );
    assert!(
        report.tokens_out_of_order.is_empty(),
        "{:?}",
        report.tokens_out_of_order
    );
    assert!(report.passed());
}
