//! Chaos run: many contenders in several processes against a 3-member ensemble, with faults
//! injected, a recorded history, and a safety checker (issues #8, #28).
//!
//! ```text
//! ./scripts/chaos.sh --duration 10m          # or:
//! cargo run --release -p zklock-examples --example chaos -- run --duration 10m
//! ```
//!
//! Prints a summary and, as its last line, a JSON object with `operations`, `faults`,
//! `overlaps_unexplained`, `stale_writes_accepted`, `leaked_nodes` and `max_unavailable_ms`.
//! Exits with status 1 when the checker finds a violation.
//!
//! `chaos jobs --duration 10m` runs the scheduler workload instead: node processes run one
//! singleton job every second while the node running it is killed or partitioned past its
//! session and the leader is killed; its last line is a JSON object with `runs`, `ticks`,
//! `duplicates`, `gaps`, `missed_reported`, `lost_reported` and `history_disagreements`.
//!
//! `chaos exec --duration 10m` runs the `zklock exec` workload: slots run `zklock exec` on one
//! lock again and again, their commands writing from a child process to one log, while the
//! holder is SIGKILLed, a waiter is SIGKILLed, the holder's node is deleted, a revocation is
//! requested and the holder is partitioned past its session; its last line is a JSON object
//! with `execs`, `grants`, `lines`, `faults`, `outcomes`, `overlaps` and `tokens_out_of_order`.
//! It runs the `zklock` binary beside this one (`cargo build --release -p zklock-cli`) or the
//! one `--zklock` names.
//!
//! `chaos leader --duration 10m` runs the leader-election workload: member processes serve one
//! election and the leader writes to a fenced register with its term's token while the leader
//! is killed, partitioned past its session, paused past it, or shut down gracefully, and the
//! ensemble's own leader is killed; its last line is a JSON object with `terms`,
//! `writes_accepted`, `stale_writes_accepted`, `overlaps_unexplained`, `liveness_violations`,
//! `passed` and more. `chaos leader-check FILE` checks the history such a run stored.

use std::path::PathBuf;
use std::time::Duration;

use clap::{Parser, Subcommand};

use zklock_examples::chaos;
use zklock_examples::chaos::runner::{run, ChildCommand, RunConfig};

#[derive(Debug, Parser)]
#[command(about = "Fault-injection run of zklock with a history checker")]
struct Cli {
    #[command(subcommand)]
    command: Option<Cmd>,
    #[command(flatten)]
    run: RunArgs,
}

#[derive(Debug, Subcommand)]
enum Cmd {
    /// Run the experiment (the default).
    Run(RunArgs),
    /// Check a history file written by an earlier run, without running anything.
    Check {
        /// The `--history` file of the run.
        history: PathBuf,
    },
    /// Internal: one contender process, configured through the environment.
    #[command(hide = true)]
    Contender,
    /// The scheduler workload: a singleton job on node processes under kills and partitions.
    Jobs(JobsArgs),
    /// Internal: one scheduler node process, configured through the environment.
    #[command(hide = true)]
    JobNode,
    /// The leader-election workload: members serve one election and the leader writes to a
    /// fenced register while leaders are killed, partitioned, paused and shut down.
    Leader(LeaderArgs),
    /// Check a history file written by an earlier `leader` run, without running anything.
    LeaderCheck {
        /// The `--history` file of the run.
        history: PathBuf,
    },
    /// Internal: one election member process, configured through the environment.
    #[command(hide = true)]
    LeaderMember,
    /// The `zklock exec` workload: commands under `zklock exec` write from a child process to
    /// one log while holders and waiters are killed, nodes deleted, holders revoked and
    /// partitioned.
    Exec(ExecArgs),
}

#[derive(Debug, Clone, clap::Args)]
struct ExecArgs {
    /// How long to keep injecting faults (at least one round of every kind).
    #[arg(long, default_value = "90s", value_parser = humantime::parse_duration)]
    duration: Duration,
    /// Slots, each running one `zklock exec` after another.
    #[arg(long, default_value_t = 3)]
    slots: usize,
    /// Session timeout of every `zklock exec` (at most 20 ticks).
    #[arg(long, default_value = "2s", value_parser = humantime::parse_duration)]
    session_timeout: Duration,
    /// Server tickTime.
    #[arg(long, default_value = "200ms", value_parser = humantime::parse_duration)]
    tick: Duration,
    /// Lock-delay every `zklock exec` gives the lock.
    #[arg(long, default_value = "1s", value_parser = humantime::parse_duration)]
    lock_delay: Duration,
    /// The `zklock` binary (default: the one beside this program's directory).
    #[arg(long)]
    zklock: Option<PathBuf>,
    /// Seed for the fault order and the commands' lengths (default: from the clock).
    #[arg(long)]
    seed: Option<u64>,
    /// No progress lines on stderr.
    #[arg(long)]
    quiet: bool,
}

#[derive(Debug, Clone, clap::Args)]
struct LeaderArgs {
    /// How long to keep injecting faults (at least one round of every kind).
    #[arg(long, default_value = "90s", value_parser = humantime::parse_duration)]
    duration: Duration,
    /// Member processes.
    #[arg(long, default_value_t = 3)]
    members: usize,
    /// Session timeout of the members (at most 20 ticks).
    #[arg(long, default_value = "4s", value_parser = humantime::parse_duration)]
    session_timeout: Duration,
    /// Server tickTime.
    #[arg(long, default_value = "200ms", value_parser = humantime::parse_duration)]
    tick: Duration,
    /// Seed for the fault order of later rounds and the late writers (default: from the clock).
    #[arg(long)]
    seed: Option<u64>,
    /// Percentage of terms that leave a writer behind, writing with the old token for 2 s.
    #[arg(long, default_value_t = 25)]
    late_percent: u32,
    /// Where to write the history (one JSON document).
    #[arg(long, default_value = "target/chaos/leader-history.json")]
    history: PathBuf,
    /// No progress lines on stderr.
    #[arg(long)]
    quiet: bool,
}

#[derive(Debug, Clone, clap::Args)]
struct JobsArgs {
    /// How long to keep injecting faults (at least one round of every kind).
    #[arg(long, default_value = "90s", value_parser = humantime::parse_duration)]
    duration: Duration,
    /// Node processes.
    #[arg(long, default_value_t = 3)]
    nodes: usize,
    /// Session timeout of the nodes.
    #[arg(long, default_value = "4s", value_parser = humantime::parse_duration)]
    session_timeout: Duration,
    /// Server tickTime.
    #[arg(long, default_value = "200ms", value_parser = humantime::parse_duration)]
    tick: Duration,
    /// No progress lines on stderr.
    #[arg(long)]
    quiet: bool,
    /// Start the nodes with clocks off by minutes to hours, ahead and behind.
    #[arg(long)]
    skew: bool,
    /// Give the nodes different overlap policies (once-per-tick, skip, buffer-one).
    #[arg(long)]
    mixed: bool,
}

#[derive(Debug, Clone, clap::Args)]
struct RunArgs {
    /// How long to keep injecting faults (humantime, e.g. `90s`, `10m`); at least one round of
    /// every fault kind runs.
    #[arg(long, default_value = "90s", value_parser = humantime::parse_duration)]
    duration: Duration,
    /// Contender processes.
    #[arg(long, default_value_t = 3)]
    processes: usize,
    /// Contender tasks on the main lock per process (each process also runs one task on the
    /// second lock and one multi-lock task on both).
    #[arg(long, default_value_t = 3)]
    tasks: usize,
    /// Session timeout of the contenders (at most 20 ticks).
    #[arg(long, default_value = "4s", value_parser = humantime::parse_duration)]
    session_timeout: Duration,
    /// Server tickTime.
    #[arg(long, default_value = "200ms", value_parser = humantime::parse_duration)]
    tick: Duration,
    /// Seed for the fault order and the contenders' choices (default: from the clock).
    #[arg(long)]
    seed: Option<u64>,
    /// Percentage of critical sections that ignore the loss signal and keep writing.
    #[arg(long, default_value_t = 25)]
    misbehave_percent: u32,
    /// Lock-delay of the main lock (`0s`: none). With one, the checker also verifies that the
    /// waiter next in line when a holder's node is deleted waits it out.
    #[arg(long, default_value = "1s", value_parser = humantime::parse_duration)]
    lock_delay: Duration,
    /// Where to write the history (JSON lines).
    #[arg(long, default_value = "target/chaos/history.jsonl")]
    history: PathBuf,
    /// Short holds: sections (but the long ones faults ask for) only claim and end, a few
    /// milliseconds, so the lock passes along chains of local handoffs.
    #[arg(long)]
    short_holds: bool,
    /// Lock caching: the even-numbered processes keep an idle lock this long (e.g. `2s`),
    /// beside processes that do not.
    #[arg(long, value_parser = humantime::parse_duration)]
    cache: Option<Duration>,
    /// An Apache Curator contender (`InterProcessMutex`, a JVM) takes the main lock too, with
    /// short sections between the zklock processes' holds.
    #[arg(long)]
    curator: bool,
    /// No progress lines on stderr.
    #[arg(long)]
    quiet: bool,
}

fn main() {
    let cli = Cli::parse();
    let args = match cli.command {
        Some(Cmd::Contender) => std::process::exit(chaos::contender::main_from_env()),
        Some(Cmd::JobNode) => std::process::exit(chaos::jobs::node_main_from_env()),
        Some(Cmd::Jobs(args)) => std::process::exit(run_jobs(&args)),
        Some(Cmd::Check { history }) => std::process::exit(recheck(&history)),
        Some(Cmd::LeaderMember) => std::process::exit(chaos::leader::member_main_from_env()),
        Some(Cmd::Leader(args)) => std::process::exit(run_leader(&args)),
        Some(Cmd::LeaderCheck { history }) => std::process::exit(recheck_leader(&history)),
        Some(Cmd::Exec(args)) => std::process::exit(run_exec(&args)),
        Some(Cmd::Run(args)) => args,
        None => cli.run,
    };
    if args.processes < 2 || args.tasks == 0 || args.misbehave_percent > 100 {
        eprintln!("chaos: need --processes >= 2, --tasks >= 1, --misbehave-percent <= 100");
        std::process::exit(2);
    }
    let program = match std::env::current_exe() {
        Ok(p) => p,
        Err(e) => {
            eprintln!("chaos: cannot find my own executable: {e}");
            std::process::exit(2);
        }
    };
    let seed = args.seed.unwrap_or_else(chaos::clock::now_ns);
    let config = RunConfig {
        duration: args.duration,
        processes: args.processes,
        tasks_per_process: args.tasks,
        session_timeout: args.session_timeout,
        tick_time: args.tick,
        seed,
        misbehave_percent: args.misbehave_percent,
        lock_delay: args.lock_delay,
        short_holds: args.short_holds,
        cache: args.cache,
        curator: args.curator,
        child: ChildCommand {
            program,
            args: vec!["contender".into()],
        },
        history_path: Some(args.history),
        verbose: !args.quiet,
    };
    eprintln!(
        "chaos: duration {:?}, {} processes x {} tasks, session timeout {:?}, tick {:?}, seed {seed}",
        config.duration, config.processes, config.tasks_per_process, config.session_timeout, config.tick_time
    );
    let outcome = match run(&config) {
        Ok(o) => o,
        Err(e) => {
            eprintln!("chaos: the run failed: {e}");
            std::process::exit(2);
        }
    };
    print!("{}", outcome.report.summary());
    println!("  faults in order:");
    for f in &outcome.history.faults {
        println!("    {:<17} {}", f.kind.name(), f.note);
    }
    if !outcome.history.leaked_node_names.is_empty() {
        println!("  leaked: {:?}", outcome.history.leaked_node_names);
    }
    println!(
        "  bound on unavailability after a fault: 2 x session timeout + lock-delay + 10 s = {} ms",
        config.availability_bound().as_millis()
    );
    println!("{}", outcome.report.json_line());
    if !outcome.report.passed() {
        std::process::exit(1);
    }
}

fn run_exec(args: &ExecArgs) -> i32 {
    if args.slots < 2 {
        eprintln!("chaos exec: need --slots >= 2");
        return 2;
    }
    // target/<profile>/examples/chaos -> target/<profile>/zklock
    let beside = std::env::current_exe()
        .ok()
        .and_then(|exe| Some(exe.parent()?.parent()?.join("zklock")));
    let Some(zklock) = args.zklock.clone().or(beside) else {
        eprintln!("chaos exec: cannot find the zklock binary; name it with --zklock");
        return 2;
    };
    let seed = args.seed.unwrap_or_else(chaos::clock::now_ns);
    let config = chaos::exec::ExecConfig {
        duration: args.duration,
        slots: args.slots,
        session_timeout: args.session_timeout,
        tick_time: args.tick,
        lock_delay: args.lock_delay,
        zklock,
        seed,
        verbose: !args.quiet,
    };
    eprintln!(
        "chaos exec: duration {:?}, {} slots, seed {seed}",
        config.duration, config.slots
    );
    let report = match chaos::exec::run_exec(&config) {
        Ok(report) => report,
        Err(e) => {
            eprintln!("chaos exec: the run failed: {e}");
            return 2;
        }
    };
    for violation in report.overlaps.iter().chain(&report.tokens_out_of_order) {
        println!("  violation: {violation}");
    }
    println!("{}", report.json_line());
    i32::from(!report.passed())
}

fn run_jobs(args: &JobsArgs) -> i32 {
    if args.nodes < 2 {
        eprintln!("chaos jobs: need --nodes >= 2");
        return 2;
    }
    let program = match std::env::current_exe() {
        Ok(p) => p,
        Err(e) => {
            eprintln!("chaos jobs: cannot find my own executable: {e}");
            return 2;
        }
    };
    let config = chaos::jobs::JobsConfig {
        duration: args.duration,
        nodes: args.nodes,
        session_timeout: args.session_timeout,
        tick_time: args.tick,
        child: ChildCommand {
            program,
            args: vec!["job-node".into()],
        },
        verbose: !args.quiet,
        skew: args.skew,
        mixed: args.mixed,
    };
    match chaos::jobs::run_jobs(&config) {
        Ok(report) => {
            println!("{}", report.json_line());
            if report.passed() {
                0
            } else {
                1
            }
        }
        Err(e) => {
            eprintln!("chaos jobs: the run failed: {e}");
            2
        }
    }
}

fn run_leader(args: &LeaderArgs) -> i32 {
    if args.members < 2 || args.late_percent > 100 {
        eprintln!("chaos leader: need --members >= 2 and --late-percent <= 100");
        return 2;
    }
    let program = match std::env::current_exe() {
        Ok(p) => p,
        Err(e) => {
            eprintln!("chaos leader: cannot find my own executable: {e}");
            return 2;
        }
    };
    let seed = args.seed.unwrap_or_else(chaos::clock::now_ns);
    let config = chaos::leader::LeaderConfig {
        duration: args.duration,
        members: args.members,
        session_timeout: args.session_timeout,
        tick_time: args.tick,
        seed,
        late_percent: args.late_percent,
        child: ChildCommand {
            program,
            args: vec!["leader-member".into()],
        },
        history_path: Some(args.history.clone()),
        verbose: !args.quiet,
    };
    eprintln!(
        "chaos leader: duration {:?}, {} members, session timeout {:?}, tick {:?}, late writers {}%, seed {seed}",
        config.duration, config.members, config.session_timeout, config.tick_time, config.late_percent
    );
    let outcome = match chaos::leader::run_leader(&config) {
        Ok(o) => o,
        Err(e) => {
            eprintln!("chaos leader: the run failed: {e}");
            return 2;
        }
    };
    print_leader_report(&outcome.report);
    println!(
        "  bound on a fault to another leader's accepted write: 2 x session timeout + 10 s = {} ms",
        config.leader_bound().as_millis()
    );
    println!("{}", outcome.report.json_line());
    i32::from(!outcome.report.passed())
}

fn print_leader_report(report: &chaos::leader::LeaderReport) {
    print!("{}", report.summary());
    println!("  faults in order:");
    for note in &report.fault_notes {
        println!("    {note}");
    }
}

fn recheck_leader(path: &std::path::Path) -> i32 {
    match chaos::leader::read_leader_history(path) {
        Ok(history) => {
            let report = chaos::leader::check_leader(&history);
            print_leader_report(&report);
            println!("{}", report.json_line());
            i32::from(!report.passed())
        }
        Err(e) => {
            eprintln!("chaos leader: cannot read {}: {e}", path.display());
            2
        }
    }
}

fn recheck(path: &std::path::Path) -> i32 {
    match chaos::runner::read_history(path) {
        Ok(history) => {
            let report = chaos::checker::check(&history);
            print!("{}", report.summary());
            println!("{}", report.json_line());
            if report.passed() {
                0
            } else {
                1
            }
        }
        Err(e) => {
            eprintln!("chaos: cannot read {}: {e}", path.display());
            2
        }
    }
}
