//! zklock's benchmark: zklock against Apache Curator (a Java peer on the Debian jars),
//! zookeeper-client's own lock recipe and the raw ZooKeeper floor, on the same server in the same
//! run; and the seckill service under zklock, PostgreSQL's advisory lock, a Redis lock and no
//! lock at all.
//!
//! ```text
//! ./scripts/bench.sh [--quick] [--out DIR] [--zk HOST:PORT] [--fsync] [--ensemble 3]
//! cargo run --release -p zklock-examples --example bench -- --quick
//! ```
//!
//! Measures (a) the uncontended acquire+release cycle, (b) cross-process contention,
//! (c) in-process contention, (d) watch notifications per release with many waiters queued
//! (the herd check, counted by the server), (e) the reentrant re-acquire cost and (f) per-key
//! locking: 64 tasks over 10 000 keys, and the memory a client keeps per distinct key, (d') the
//! scale curves ([`scale`]: handoff against the contenders on one lock, per-key locking against
//! the keys, latency and server memory against the sessions open), and (g) the seckill
//! service under each lock, zklock also cached and routed by item
//! ([`zklock_examples::seckill::bench`]). Writes a table to the
//! terminal and `DIR/results.json` plus `DIR/chart.svg`, `DIR/seckill.svg` and the scale
//! curves' `DIR/handoff.svg`, `DIR/keys.svg` and `DIR/sessions.svg`.

mod caching;
mod chart;
mod curator_side;
mod scale;
mod server;
mod stats;
mod targets;
mod workers;
mod zkclient_side;
mod zklock_side;

use std::path::PathBuf;
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::{Parser, Subcommand};
use serde_json::{json, Value};

use chart::Series;
use scale::ScalePlan;
use server::{Server, Settings};
use stats::{ratio, round, Summary};
use zklock_examples::seckill::bench::{seckill_section, Sale, SeckillPlan};
use zklock_examples::seckill::driver::Launcher;
use zklock_examples::seckill::service::{self, ServeArgs};
use zklock_side::{Phases, Sessions};

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// zklock vs Apache Curator vs the raw ZooKeeper floor.
#[derive(Parser, Debug)]
#[command(version, about)]
struct Args {
    /// A shorter run (about 4 minutes on 2 cores, against 20 for the full one) with fewer
    /// cycles, shorter windows and fewer points.
    #[arg(long)]
    quick: bool,
    /// Where results.json and chart.svg go.
    #[arg(long, default_value = "bench-out")]
    out: PathBuf,
    /// Measure an existing server instead of starting one (HOST:PORT[,HOST:PORT...]).
    /// The herd check needs `4lw.commands.whitelist` to include mntr, wchs and wchp.
    #[arg(long, value_name = "HOST:PORT")]
    zk: Option<String>,
    /// Start the server with forceSync=yes (fsync of the transaction log on every write).
    #[arg(long)]
    fsync: bool,
    /// tickTime of the server the bench starts, in milliseconds.
    #[arg(long, default_value_t = 2000)]
    tick_ms: u32,
    /// Start an ensemble of this many members on loopback instead of one standalone server;
    /// the clients talk to a follower, so every write is forwarded and needs a quorum.
    #[arg(long, value_name = "MEMBERS", conflicts_with = "zk")]
    ensemble: Option<usize>,
    /// Run only the seckill section: the seckill service under zklock, the database's advisory
    /// lock, a Redis lock and no lock (a conditional update), and the fault round. It starts
    /// servers of its own (ZooKeeper, PostgreSQL, Redis); --zk, --fsync, --tick-ms and
    /// --ensemble do not apply to it. With --quick it takes under a minute.
    #[arg(long)]
    seckill: bool,
    /// Run only the scale curves: handoff latency and notifications per release against the
    /// contenders on one lock (over 1 to 8 processes), per-key throughput and client memory
    /// against the distinct keys (1 to 1,000,000), and latency and server memory against the
    /// sessions open (up to 1,000); on the server --zk names or one it starts. About 3 minutes
    /// (with --quick, fewer points and shorter phases: under one).
    #[arg(long, conflicts_with = "seckill")]
    scale: bool,
    #[command(subcommand)]
    worker: Option<Worker>,
}

#[derive(Subcommand, Debug)]
enum Worker {
    /// One process of the cross-process contention run (started by the bench itself).
    #[command(hide = true)]
    Contend {
        connect: String,
        name: String,
        tasks: usize,
        start_ms: u64,
        end_ms: u64,
        /// Contend with zookeeper-client's lock recipe instead of zklock.
        #[arg(long)]
        zkclient: bool,
        /// Run zklock's sessions on this process's runtime (`LockClientBuilder::runtime`), as
        /// the recipe runs on it, instead of on the client's driver thread.
        #[arg(long, conflicts_with = "zkclient")]
        caller_runtime: bool,
    },
    /// The memory-per-key measurement, in a process of its own (started by the bench itself).
    #[command(hide = true)]
    Rss { connect: String, keys: usize },
    /// One process of a keys scale point (started by the bench itself).
    #[command(hide = true)]
    Keys {
        connect: String,
        keys: usize,
        tasks: usize,
        phase_ms: u64,
    },
    /// One process of a sessions scale point: opens COUNT sessions, a lock held in each, until
    /// its standard input closes (started by the bench itself).
    #[command(hide = true)]
    Sessions {
        connect: String,
        count: usize,
        prefix: String,
    },
    /// One process of a handoff scale point (started by the bench itself).
    #[command(hide = true)]
    Handoff {
        connect: String,
        name: String,
        tasks: usize,
        start_ms: u64,
        end_ms: u64,
    },
    /// One instance of the seckill service (started by the seckill section).
    #[command(hide = true)]
    SeckillServe(ServeArgs),
    /// Draws DIR/seckill.svg again from DIR/results.json (after a change to how it is drawn).
    SeckillChart { dir: PathBuf },
    /// Runs one section alone for SECONDS against a server you started, for a profiler
    /// (`perf record -g -- bench profile distinct 127.0.0.1:2181 20`); prints the rate and this
    /// process's CPU time per acquisition.
    Profile {
        #[arg(value_parser = ["uncontended", "floor", "cached", "cached-wait", "reentrant", "curator-reentrant", "distinct", "distinct-caller-runtime", "distinct-floor", "distinct-floor-list", "curator-distinct"])]
        section: String,
        connect: String,
        seconds: u64,
        /// Writes the library's DEBUG log to stderr, with microsecond timestamps: every request
        /// sent and answered on every session, for a per-step timeline of a round.
        #[arg(long)]
        trace: bool,
    },
}

/// Sizes of a run.
struct Plan {
    warmup: usize,
    cycles: usize,
    rounds: usize,
    window: Duration,
    in_process: Vec<usize>,
    cross_process: Vec<(usize, usize)>,
    headline_in_process: usize,
    headline_cross: (usize, usize),
    herd_waiters: usize,
    herd_releases: usize,
    reentrant_cycles: usize,
    /// Cycles of the cached re-acquire, and rounds of the remote contender behind a cached node.
    cached_cycles: usize,
    cached_wait_rounds: usize,
    /// Handoff bounds compared by the fairness section (the default bound is 16).
    fairness_bounds: Vec<u32>,
    fairness_tasks: usize,
    /// Tasks and keys of the per-key section (the seckill shape), and its rounds.
    distinct_tasks: usize,
    distinct_keys: usize,
    distinct_rounds: usize,
    /// Distinct names acquired in sequence by the memory-per-key section.
    rss_keys: usize,
    /// The seckill section.
    seckill: SeckillPlan,
    /// The scale curves.
    scale: ScalePlan,
}

impl Plan {
    fn new(quick: bool) -> Plan {
        if quick {
            Plan {
                warmup: 300,
                cycles: 1500,
                rounds: 5,
                window: Duration::from_secs(3),
                in_process: vec![1, 4, 16],
                cross_process: vec![(2, 1), (2, 4)],
                headline_in_process: 16,
                headline_cross: (2, 4),
                herd_waiters: 200,
                herd_releases: 5,
                reentrant_cycles: 20_000,
                cached_cycles: 20_000,
                cached_wait_rounds: 20,
                fairness_bounds: vec![0, 4, 16],
                fairness_tasks: 4,
                distinct_tasks: 64,
                distinct_keys: 10_000,
                distinct_rounds: 1,
                rss_keys: 10_000,
                seckill: SeckillPlan::quick(),
                scale: ScalePlan::quick(),
            }
        } else {
            Plan {
                warmup: 1000,
                cycles: 10_000,
                rounds: 10,
                window: Duration::from_secs(10),
                in_process: vec![1, 2, 4, 8, 16, 32],
                cross_process: vec![(2, 1), (2, 4), (4, 4)],
                headline_in_process: 16,
                headline_cross: (2, 4),
                herd_waiters: 200,
                herd_releases: 20,
                reentrant_cycles: 200_000,
                cached_cycles: 200_000,
                cached_wait_rounds: 100,
                fairness_bounds: vec![0, 4, 16],
                fairness_tasks: 4,
                distinct_tasks: 64,
                distinct_keys: 10_000,
                distinct_rounds: 3,
                rss_keys: 100_000,
                seckill: SeckillPlan::full(),
                scale: ScalePlan::full(),
            }
        }
    }

    fn steps(&self) -> usize {
        3 + 3 * self.in_process.len()
            + 4 * self.cross_process.len()
            + self.fairness_bounds.len()
            + 6 * self.distinct_rounds
            + 2
            + 3
            + 1
            + 2
            + self.scale.steps()
    }
}

/// Progress on stderr: step k of n, elapsed time, what runs now.
struct Progress {
    started: Instant,
    step: usize,
    total: usize,
}

impl Progress {
    fn note(&self, what: &str) {
        eprintln!("        {:>5.1}s  {what}", self.started.elapsed().as_secs_f64());
    }

    fn step(&mut self, what: &str) {
        self.step += 1;
        eprintln!(
            "[{:>2}/{}] {:>5.1}s  {what}",
            self.step,
            self.total,
            self.started.elapsed().as_secs_f64()
        );
    }
}

fn main() -> Result<(), BoxError> {
    let args = Args::parse();
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    match args.worker {
        Some(Worker::Contend {
            ref connect,
            ref name,
            tasks,
            start_ms,
            end_ms,
            zkclient,
            caller_runtime,
        }) => runtime.block_on(async {
            let result = if zkclient {
                let client = zkclient_side::client(connect).await?;
                zkclient_side::contended(&client, &format!("/bench-zkclient/{name}"), tasks, start_ms, end_ms).await?
            } else {
                let sessions = if caller_runtime {
                    Sessions::CallerRuntime
                } else {
                    Sessions::OwnThread
                };
                let client = zklock_side::client_with(connect, sessions).await?;
                zklock_side::contended(&client, name, tasks, start_ms, end_ms).await?
            };
            println!("{result}");
            Ok(())
        }),
        Some(Worker::Rss { ref connect, keys }) => runtime.block_on(async {
            println!("{}", zklock_side::rss_growth(connect, keys).await?);
            Ok(())
        }),
        Some(Worker::Handoff {
            ref connect,
            ref name,
            tasks,
            start_ms,
            end_ms,
        }) => runtime.block_on(async {
            println!(
                "{}",
                scale::handoff::worker(connect, name, tasks, start_ms, end_ms).await?
            );
            Ok(())
        }),
        Some(Worker::Keys {
            ref connect,
            keys,
            tasks,
            phase_ms,
        }) => runtime.block_on(async {
            let phase = Duration::from_millis(phase_ms);
            println!("{}", scale::keys::worker(connect, keys, tasks, phase).await?);
            Ok(())
        }),
        Some(Worker::Sessions {
            ref connect,
            count,
            ref prefix,
        }) => runtime.block_on(scale::sessions::worker(connect, count, prefix)),
        Some(Worker::SeckillServe(ref serve)) => runtime.block_on(service::serve(serve.clone())),
        Some(Worker::SeckillChart { ref dir }) => {
            let results: Value = serde_json::from_slice(&std::fs::read(dir.join("results.json"))?)?;
            let svg = chart::seckill(&results["seckill"], &subtitle(&results));
            std::fs::write(dir.join("seckill.svg"), svg)?;
            Ok(())
        }
        Some(Worker::Profile {
            ref section,
            ref connect,
            seconds,
            trace,
        }) => {
            if trace {
                tracing_subscriber::fmt()
                    .with_max_level(tracing::Level::DEBUG)
                    .with_ansi(false)
                    .with_writer(std::io::stderr)
                    .init();
            }
            runtime.block_on(profile(section, connect, Duration::from_secs(seconds)))
        }
        None if args.seckill => runtime.block_on(run_seckill_only(args)),
        None if args.scale => runtime.block_on(run_scale_only(args)),
        None => runtime.block_on(run(args)),
    }
}

async fn run(args: Args) -> Result<(), BoxError> {
    let plan = Plan::new(args.quick);
    let mut progress = Progress {
        started: Instant::now(),
        step: 0,
        total: plan.steps(),
    };
    std::fs::create_dir_all(&args.out)?;

    progress.step("starting ZooKeeper and compiling the Curator peer");
    let server = start_server(&args).await?;
    let connect = server.connect.clone();
    tokio::task::spawn_blocking(zklock::testing::curator::compiled_classes).await??;

    // (a) uncontended cycle, the three clients in interleaved rounds so that drift (server JIT,
    // other load on the machine) is shared fairly among them.
    progress.step("uncontended: warming up the server and the three clients");
    let floor_bench = zklock_side::Floor::new(&connect).await?;
    let mut listing_bench = zklock_side::Floor::new(&connect).await?;
    listing_bench.with_list = true;
    let zk_bench = zklock_side::Uncontended::new(&connect).await?;
    let cur_peer = curator_side::peer(&connect).await?;
    let zkc_bench = zkclient_side::Uncontended::new(&connect).await?;
    floor_bench.run(plan.warmup).await?;
    zk_bench.run(plan.warmup).await?;
    curator_side::uncontended(&cur_peer, plan.warmup).await?;
    listing_bench.run(plan.warmup).await?;
    zkc_bench.run(plan.warmup).await?;
    let mut samples: [(Vec<u64>, Duration); 5] = Default::default();
    // This process's CPU time (all threads) spent in each in-process client's cycles: what the
    // engine itself costs beside the floor's bare create and delete. (Curator's is in its JVM.)
    let mut cpu = [Duration::ZERO; 5];
    let per_round = plan.cycles / plan.rounds;
    for round in 0..plan.rounds {
        progress.note(&format!(
            "uncontended round {}/{}: floor, zklock, Curator, create+list+delete, zookeeper-client's recipe",
            round + 1,
            plan.rounds
        ));
        let before = process_cpu();
        let floor_run = floor_bench.run(per_round).await?;
        let after_floor = process_cpu();
        let zk_run = zk_bench.run(per_round).await?;
        let after_zk = process_cpu();
        let cur_run = curator_side::uncontended(&cur_peer, per_round).await?;
        let before_list = process_cpu();
        let list_run = listing_bench.run(per_round).await?;
        let before_zkc = process_cpu();
        let zkc_run = zkc_bench.run(per_round).await?;
        cpu[0] += after_floor.saturating_sub(before);
        cpu[1] += after_zk.saturating_sub(after_floor);
        cpu[3] += before_zkc.saturating_sub(before_list);
        cpu[4] += process_cpu().saturating_sub(before_zkc);
        for (i, (ns, took)) in [floor_run, zk_run, cur_run, list_run, zkc_run].into_iter().enumerate() {
            samples[i].0.extend(ns);
            samples[i].1 += took;
        }
    }
    drop((floor_bench, zk_bench, cur_peer, listing_bench, zkc_bench));
    let [floor, zk_unc, cur_unc, floor_list, zkc_unc] = samples.map(|(ns, took)| Summary::of(ns, took));

    // (c) in-process contention.
    let mut in_process = Vec::new();
    for &tasks in &plan.in_process {
        progress.step(&format!("in-process contention: zklock, {tasks} tasks"));
        let client = zklock_side::client(&connect).await?;
        let (start, end) = workers::window(Duration::from_millis(300), plan.window);
        let name = format!("bench-in-process-zklock-{tasks}");
        let z = zklock_side::contended(&client, &name, tasks, start, end).await?;
        drop(client);
        progress.step(&format!("in-process contention: Curator, {tasks} threads"));
        let peer = Arc::new(curator_side::peer(&connect).await?);
        let (start, end) = workers::window(Duration::from_millis(300), plan.window);
        let path = format!("/zklock/bench-in-process-curator-{tasks}");
        let c = curator_side::contended(&[peer], &path, tasks, start, end).await?;
        progress.step(&format!(
            "in-process contention: zookeeper-client's recipe, {tasks} tasks"
        ));
        let client = zkclient_side::client(&connect).await?;
        let (start, end) = workers::window(Duration::from_millis(300), plan.window);
        let dir = format!("/bench-zkclient/in-process-{tasks}");
        let k = zkclient_side::contended(&client, &dir, tasks, start, end).await?;
        drop(client);
        in_process.push(contention_entry(tasks, 1, tasks, [&[z], &c, &[k]], plan.window));
    }

    // (c') the price of local handoff in fairness: a remote contender's waits per bound.
    let mut fairness = Vec::new();
    for &bound in &plan.fairness_bounds {
        progress.step(&format!(
            "handoff fairness: {} local tasks and one remote contender, max_local_handoffs {bound}",
            plan.fairness_tasks
        ));
        let (start, end) = workers::window(Duration::from_millis(300), plan.window);
        fairness.push(zklock_side::handoff_fairness(&connect, bound, plan.fairness_tasks, start, end).await?);
    }

    // (f) per-key locking: many tasks over many keys, and memory per key.
    let distinct = per_key_section(&connect, &plan, &server, &mut progress).await?;
    progress.step(&format!("memory per key: {} distinct names in sequence", plan.rss_keys));
    let rss = rss_worker(&connect, plan.rss_keys).await?;

    // (b) cross-process contention.
    let mut cross_process = Vec::new();
    for &(procs, tasks) in &plan.cross_process {
        progress.step(&format!(
            "cross-process contention: zklock, {procs} processes x {tasks} tasks"
        ));
        let z = contend_in_processes(&connect, procs, tasks, plan.window, Contender::Zklock).await?;
        progress.step(&format!(
            "cross-process contention: zklock with its sessions on each process's runtime, {procs} processes x {tasks} tasks"
        ));
        let zr = contend_in_processes(&connect, procs, tasks, plan.window, Contender::ZklockCallerRuntime).await?;
        progress.step(&format!(
            "cross-process contention: Curator, {procs} JVMs x {tasks} threads"
        ));
        let mut peers = Vec::new();
        for _ in 0..procs {
            peers.push(Arc::new(curator_side::peer(&connect).await?));
        }
        let (start, end) = workers::window(Duration::from_millis(500), plan.window);
        let path = format!("/zklock/bench-cross-curator-{procs}x{tasks}");
        let c = curator_side::contended(&peers, &path, tasks, start, end).await?;
        drop(peers);
        progress.step(&format!(
            "cross-process contention: zookeeper-client's recipe, {procs} processes x {tasks} tasks"
        ));
        let k = contend_in_processes(&connect, procs, tasks, plan.window, Contender::Zkclient).await?;
        let mut entry = contention_entry(procs * tasks, procs, tasks, [&z, &c, &k], plan.window);
        with_caller_runtime_side(&mut entry, &zr, plan.window);
        cross_process.push(entry);
    }

    // (d) herd.
    progress.step(&format!("herd check: zklock, {} waiters", plan.herd_waiters));
    // One session per contender: waiters of one process share one node (zklock queues them
    // in process), so only separate sessions put W contenders into ZooKeeper's queue.
    let sessions = plan.herd_waiters + 1;
    let zk_herd = zklock_side::herd(&connect, plan.herd_waiters, sessions, plan.herd_releases).await?;
    progress.step(&format!("herd check: Curator, {} waiters", plan.herd_waiters));
    let cur_herd = curator_side::herd(&connect, plan.herd_waiters, plan.herd_releases).await?;

    // (d') how the costs grow: with the contenders on one lock, the keys, the sessions.
    let curves = scale::run(&server, &plan.scale, &workers::this_binary, &mut |what| {
        progress.step(what)
    })
    .await?;

    // (e) reentrancy.
    progress.step("reentrant re-acquire: zklock");
    let zk_re = zklock_side::reentrant(&connect, 1000, plan.reentrant_cycles).await?;
    progress.step("reentrant re-acquire: Curator");
    let cur_re = curator_side::reentrant(&connect, 1000, plan.reentrant_cycles).await?;

    // (e') lock caching: a grant from the cache, and a remote contender behind a cached node.
    progress.step("lock caching: cached re-acquire");
    let cached_re = caching::reacquire(&connect, plan.warmup, plan.cached_cycles).await?;
    progress.step(&format!(
        "lock caching: a remote contender behind a cached node, {} rounds",
        plan.cached_wait_rounds
    ));
    let cached_wait = caching::remote_wait(&connect, plan.cached_wait_rounds).await?;

    // (g) the seckill service under each lock.
    progress.step(&format!(
        "seckill: {} runs of {} requests, the fault round's included",
        plan.seckill.runs(),
        plan.seckill.requests()
    ));
    let seckill = seckill_in_steps(&plan.seckill, &progress).await?;

    // Report.
    let in_headline = find(&in_process, plan.headline_in_process, 1);
    let cross_headline = find(
        &cross_process,
        plan.headline_cross.0 * plan.headline_cross.1,
        plan.headline_cross.0,
    );
    let rate = |e: Option<&Value>, who: &str| e.and_then(|e| e[who]["acquisitions_per_sec"].as_f64()).unwrap_or(0.0);
    let ratios = json!({
        "uncontended_p50_zklock_vs_floor": ratio(zk_unc.p50_us, floor.p50_us),
        "uncontended_p99_zklock_vs_floor": ratio(zk_unc.p99_us, floor.p99_us),
        "uncontended_mean_zklock_vs_floor": ratio(zk_unc.mean_us, floor.mean_us),
        "uncontended_p50_zklock_vs_curator": ratio(zk_unc.p50_us, cur_unc.p50_us),
        "uncontended_p99_zklock_vs_curator": ratio(zk_unc.p99_us, cur_unc.p99_us),
        "uncontended_mean_zklock_vs_curator": ratio(zk_unc.mean_us, cur_unc.mean_us),
        "uncontended_p50_curator_vs_floor": ratio(cur_unc.p50_us, floor.p50_us),
        "uncontended_p50_zklock_vs_zkclient": ratio(zk_unc.p50_us, zkc_unc.p50_us),
        "uncontended_p99_zklock_vs_zkclient": ratio(zk_unc.p99_us, zkc_unc.p99_us),
        "uncontended_p50_zkclient_vs_floor": ratio(zkc_unc.p50_us, floor.p50_us),
        "uncontended_p50_zklock_vs_create_list_delete": ratio(zk_unc.p50_us, floor_list.p50_us),
        "uncontended_p50_create_list_delete_vs_floor": ratio(floor_list.p50_us, floor.p50_us),
        "cross_process_throughput_zklock_vs_curator": ratio(rate(cross_headline, "zklock"), rate(cross_headline, "curator")),
        "in_process_throughput_zklock_vs_curator": ratio(rate(in_headline, "zklock"), rate(in_headline, "curator")),
        "cross_process_throughput_zklock_vs_zkclient": ratio(rate(cross_headline, "zklock"), rate(cross_headline, "zkclient")),
        "cross_process_throughput_zklock_on_caller_runtime_vs_zkclient": ratio(rate(cross_headline, "zklock_on_caller_runtime"), rate(cross_headline, "zkclient")),
        "in_process_throughput_zklock_vs_zkclient": ratio(rate(in_headline, "zklock"), rate(in_headline, "zkclient")),
        "reentrant_cost_zklock_vs_curator": ratio(zk_re, cur_re),
        "cached_reacquire_rate_vs_floor": ratio(cached_re.per_sec, floor.per_sec),
        "cached_remote_wait_p50_vs_uncached_handoff": cached_wait["p50_cached_vs_uncached_handoff"].clone(),
        // The cold phase is the shape the target was set on (each key's first uses); in the warm
        // phase the ceiling for any lock is the bare create + delete floor.
        "distinct_keys_throughput_zklock_vs_curator": distinct["cold"]["zklock_vs_curator"].clone(),
        "distinct_keys_throughput_zklock_vs_zkclient": distinct["cold"]["zklock_vs_zkclient"].clone(),
        "distinct_keys_warm_throughput_zklock_vs_zkclient": distinct["warm"]["zklock_vs_zkclient"].clone(),
        "distinct_keys_throughput_zklock_vs_floor_with_listing": distinct["cold"]["zklock_vs_floor_with_listing"].clone(),
        "distinct_keys_throughput_floor_with_listing_vs_curator": distinct["cold"]["floor_with_listing_vs_curator"].clone(),
        "distinct_keys_warm_throughput_zklock_vs_curator": distinct["warm"]["zklock_vs_curator"].clone(),
        "distinct_keys_warm_throughput_zklock_vs_floor": distinct["warm"]["zklock_vs_floor"].clone(),
        "distinct_keys_warm_throughput_floor_vs_curator": distinct["warm"]["floor_vs_curator"].clone(),
    });
    let targets = targets::all(&targets::Figures {
        zklock: &zk_unc,
        curator: &cur_unc,
        zkclient: &zkc_unc,
        floor: &floor,
        ratios: &ratios,
        in_process: &in_process,
        cross_process: &cross_process,
        distinct: &distinct,
        rss: &rss,
        reentrant_ns: (zk_re, cur_re),
        cached_reacquire: &cached_re,
        cached_wait: &cached_wait,
        herd: (&zk_herd, &cur_herd),
        herd_waiters: plan.herd_waiters,
        seckill: &seckill,
    });
    // Asked now: right after start-up the server answers ruok but not yet mntr.
    let mut server_settings = server.settings.clone();
    server_settings["version"] = json!(server::server_version(&connect));
    let results = json!({
        "run": {
            "mode": if args.quick { "quick" } else { "full" },
            "seconds": round(progress.started.elapsed().as_secs_f64()),
            "headline_in_process_contenders": plan.headline_in_process,
            "headline_cross_process": format!("{} processes x {} tasks", plan.headline_cross.0, plan.headline_cross.1),
            "critical_section": "increment a shared counter",
        },
        "machine": machine(),
        "server": server_settings,
        "uncontended": {
            "warmup_cycles": plan.warmup,
            "zklock": zk_unc.to_json(),
            "curator": cur_unc.to_json(),
            "zkclient": zkc_unc.to_json(),
            "floor": floor.to_json(),
            "diagnostic_create_pipelined_list_delete": floor_list.to_json(),
            // Client CPU per cycle (µs, this process, all threads): the engine's own cost is
            // zklock's minus the floor's; the rest of a cycle's wall time is the server and the
            // network.
            "client_cpu_us_per_cycle": {
                "floor": cpu_per_cycle(cpu[0], plan.rounds * per_round),
                "zklock": cpu_per_cycle(cpu[1], plan.rounds * per_round),
                "create_pipelined_list_delete": cpu_per_cycle(cpu[3], plan.rounds * per_round),
                "zkclient": cpu_per_cycle(cpu[4], plan.rounds * per_round),
            },
        },
        "cross_process": cross_process,
        "in_process": in_process,
        "herd": { "zklock": zk_herd, "curator": cur_herd },
        "handoff_fairness": fairness,
        "distinct_keys": distinct,
        "rss": rss.clone(),
        "rss_growth_mb": rss["rss_growth_mb"].clone(),
        "reentrant": {
            "cycles": plan.reentrant_cycles,
            "zklock_ns_per_cycle": round(zk_re),
            "curator_ns_per_cycle": round(cur_re),
        },
        "caching": {
            "linger_s": 60,
            "reacquire": cached_re.to_json(),
            "remote_wait": cached_wait,
        },
        "seckill": seckill,
        "scale": curves,
        "ratios": ratios,
        "targets": targets,
    });
    let json_path = write_results(&args.out, &results)?;
    let svg_path = args.out.join("chart.svg");
    std::fs::write(
        &svg_path,
        chart_svg(
            &zk_unc,
            &cur_unc,
            &zkc_unc,
            &floor,
            &in_process,
            &cross_process,
            &results,
        ),
    )?;
    print_table(&results);
    scale::write_charts(&results["scale"], &subtitle(&results), &args.out)?;
    let seckill_svg = args.out.join("seckill.svg");
    std::fs::write(&seckill_svg, chart::seckill(&results["seckill"], &subtitle(&results)))?;
    eprintln!(
        "wrote {} and {} in {:.0}s",
        json_path.display(),
        svg_path.display(),
        progress.started.elapsed().as_secs_f64()
    );
    Ok(())
}

/// The launcher of seckill instances: this binary, as `seckill-serve`.
fn bench_launcher() -> Result<Box<Launcher>, BoxError> {
    let exe = std::env::current_exe()?;
    Ok(Box::new(move |args: &[String]| {
        let mut command = Command::new(&exe);
        command.arg("seckill-serve").args(args);
        command
    }))
}

/// Runs the seckill section, noting its runs as progress.
async fn seckill_in_steps(plan: &SeckillPlan, progress: &Progress) -> Result<Value, BoxError> {
    let launcher = bench_launcher()?;
    let mut note = |what: &str| progress.note(what);
    seckill_section(plan, &*launcher, &mut note).await
}

/// `--scale`: the scale curves alone, in results.json, handoff.svg, keys.svg and sessions.svg.
async fn run_scale_only(args: Args) -> Result<(), BoxError> {
    let plan = Plan::new(args.quick);
    let mut progress = Progress {
        started: Instant::now(),
        step: 0,
        total: 1 + plan.scale.steps(),
    };
    std::fs::create_dir_all(&args.out)?;
    progress.step("starting ZooKeeper");
    let server = start_server(&args).await?;
    let curves = scale::run(&server, &plan.scale, &workers::this_binary, &mut |what| {
        progress.step(what)
    })
    .await?;
    let mut server_settings = server.settings.clone();
    server_settings["version"] = json!(server::server_version(&server.connect));
    let results = json!({
        "run": {
            "mode": if args.quick { "quick, scale only" } else { "full, scale only" },
            "seconds": round(progress.started.elapsed().as_secs_f64()),
        },
        "machine": machine(),
        "server": server_settings,
        "scale": curves,
    });
    let json_path = write_results(&args.out, &results)?;
    scale::write_charts(&results["scale"], &subtitle(&results), &args.out)?;
    scale::print(&results["scale"]);
    eprintln!(
        "wrote {}, handoff.svg, keys.svg and sessions.svg in {:.0}s",
        json_path.display(),
        progress.started.elapsed().as_secs_f64()
    );
    Ok(())
}

/// Writes `results` as `DIR/results.json`; returns its path.
fn write_results(dir: &std::path::Path, results: &Value) -> Result<PathBuf, BoxError> {
    let path = dir.join("results.json");
    std::fs::write(&path, serde_json::to_string_pretty(results)? + "\n")?;
    Ok(path)
}

/// The server the run measures: the one --zk names, or one (or an ensemble) it starts.
async fn start_server(args: &Args) -> Result<Server, BoxError> {
    Ok(match &args.zk {
        Some(connect) => Server::external(connect),
        None => {
            let settings = Settings {
                tick_time_ms: args.tick_ms,
                force_sync: args.fsync,
            };
            let ensemble = args.ensemble;
            tokio::task::spawn_blocking(move || match ensemble {
                Some(size) => Server::ensemble(size, &settings),
                None => Server::start(&settings),
            })
            .await??
        }
    })
}

/// `--seckill`: the seckill section alone, with its targets, in results.json and seckill.svg.
async fn run_seckill_only(args: Args) -> Result<(), BoxError> {
    let plan = Plan::new(args.quick);
    let mut progress = Progress {
        started: Instant::now(),
        step: 0,
        total: 1,
    };
    std::fs::create_dir_all(&args.out)?;
    progress.step(&format!(
        "seckill: {} runs of {} requests, the fault round's included",
        plan.seckill.runs(),
        plan.seckill.requests()
    ));
    let seckill = seckill_in_steps(&plan.seckill, &progress).await?;
    let results = json!({
        "run": {
            "mode": if args.quick { "quick, seckill only" } else { "full, seckill only" },
            "seconds": round(progress.started.elapsed().as_secs_f64()),
        },
        "machine": machine(),
        "seckill": seckill,
        "targets": targets::seckill_targets(&seckill),
    });
    let json_path = write_results(&args.out, &results)?;
    let svg_path = args.out.join("seckill.svg");
    std::fs::write(&svg_path, chart::seckill(&results["seckill"], &subtitle(&results)))?;
    print_seckill(&results["seckill"]);
    print_targets(&results["targets"]);
    eprintln!(
        "wrote {} and {} in {:.0}s",
        json_path.display(),
        svg_path.display(),
        progress.started.elapsed().as_secs_f64()
    );
    Ok(())
}

/// The seckill table.
fn print_seckill(s: &Value) {
    let settings = &s["settings"];
    println!();
    println!(
        "Seckill: {} items x {} units, {} requests a run, {} in flight, {} instances; median of {} rounds",
        settings["items"],
        settings["stock_per_item"],
        settings["requests_per_run"],
        settings["concurrency"],
        settings["instances"],
        settings["rounds"]
    );
    println!(
        "  {:<22} {:>9} {:>16} {:>8} {:>8} {:>9} {:>11} {:>13}",
        "lock", "req/s", "min..max", "p50 ms", "p99 ms", "oversold", "duplicates", "lost updates"
    );
    for sale in Sale::ALL {
        let lock = sale.name();
        let e = &s[&lock];
        println!(
            "  {:<22} {:>9} {:>16} {:>8} {:>8} {:>9} {:>11} {:>13}",
            lock,
            e["throughput_rps"].to_string(),
            format!("{}..{}", e["throughput_rps_min"], e["throughput_rps_max"]),
            e["p50_ms"].to_string(),
            e["p99_ms"].to_string(),
            e["oversold"].to_string(),
            e["duplicates"].to_string(),
            e["lost_updates"].to_string()
        );
    }
    println!("  Fault round (an instance killed, one frozen past the Redis TTL and the session timeout, the lock server frozen as long)");
    println!(
        "  {:<22} {:>9} {:>13} {:>11} {:>7} {:>12} {:>7}",
        "lock", "oversold", "lost updates", "duplicates", "fenced", "unavailable", "errors"
    );
    for (lock, e) in s["fault_round"].as_object().into_iter().flatten() {
        println!(
            "  {:<22} {:>9} {:>13} {:>11} {:>7} {:>12} {:>7}",
            lock,
            e["oversold"].to_string(),
            e["lost_updates"].to_string(),
            e["duplicates"].to_string(),
            e["fenced_rejections"].to_string(),
            e["unavailable_answers"].to_string(),
            e["error_answers"].to_string()
        );
    }
}

fn print_targets(targets: &Value) {
    println!();
    println!("Targets");
    for (name, t) in targets.as_object().into_iter().flatten() {
        println!(
            "  {:<52} {:>12} {:<34} {}",
            name,
            t["value"].to_string(),
            t["target"].as_str().unwrap_or(""),
            if t["met"].as_bool() == Some(true) {
                "met"
            } else {
                "NOT MET"
            }
        );
        if let Some(why) = t["why"].as_str() {
            println!("      why: {why}");
        }
    }
}

/// The `profile` worker: one section alone, with this process's CPU time per acquisition
/// (for `curator-distinct` that is only the bench's side; Curator runs in its own JVM). The
/// per-key sections run a cold and a warm phase of `length` each, as in the bench.
async fn profile(section: &str, connect: &str, length: Duration) -> Result<(), BoxError> {
    let cycles = |(cycles, took): (u64, Duration), cpu: Duration| {
        let each = cpu.as_secs_f64() * 1e6 / cycles.max(1) as f64;
        format!("{:.0}/s, {each:.1} µs", cycles as f64 / took.as_secs_f64())
    };
    let phases = Phases::after(Duration::from_millis(500), length);
    let per_key = |costed: Value| {
        let in_phase = |phase: &str| {
            let acquisitions = costed["acquisitions"][phase].as_f64().unwrap_or(0.0);
            let cpu = costed["client_cpu_us_per_acquisition"][phase].as_f64().unwrap_or(0.0);
            format!("{phase} {:.0}/s, {cpu:.1} µs", acquisitions / length.as_secs_f64())
        };
        format!("{}; {}", in_phase("cold"), in_phase("warm"))
    };
    let no_server = || None;
    let cpu_before = process_cpu();
    let report = match section {
        "uncontended" => {
            let bench = zklock_side::Uncontended::new(connect).await?;
            let run = repeat_for(length, || bench.run(100)).await?;
            cycles(run, process_cpu().saturating_sub(cpu_before))
        }
        "floor" => {
            let bench = zklock_side::Floor::new(connect).await?;
            let run = repeat_for(length, || bench.run(100)).await?;
            cycles(run, process_cpu().saturating_sub(cpu_before))
        }
        "cached-wait" => {
            let rounds = (length.as_secs_f64() * 20.0) as usize;
            let wait = caching::remote_wait(connect, rounds.max(5)).await?;
            format!(
                "a remote contender waits p50 {} µs behind a cached node, {} µs after an uncached release ({} x), and",
                wait["behind_cached_node"]["p50_us"],
                wait["uncached_handoff"]["p50_us"],
                wait["p50_cached_vs_uncached_handoff"]
            )
        }
        "reentrant" => {
            let cycles_in = (length.as_secs_f64() * 2_000_000.0) as usize;
            let ns = zklock_side::reentrant(connect, 1000, cycles_in.max(1000)).await?;
            format!("{ns:.0} ns per re-acquire + release, and")
        }
        "curator-reentrant" => {
            let cycles_in = (length.as_secs_f64() * 2_000_000.0) as usize;
            let ns = curator_side::reentrant(connect, 1000, cycles_in.max(1000)).await?;
            format!("Curator: {ns:.0} ns per re-acquire + release (its JVM's CPU is not this process's), and")
        }
        "cached" => {
            let cycles_in = (length.as_secs_f64() * 20_000.0) as usize;
            let run = caching::reacquire(connect, 1000, cycles_in.max(1000)).await?;
            let took = Duration::from_secs_f64(run.cycles as f64 / run.per_sec);
            format!(
                "{} (p50 {:.1} µs)",
                cycles((run.cycles as u64, took), process_cpu().saturating_sub(cpu_before)),
                run.p50_us
            )
        }
        "distinct" | "distinct-caller-runtime" => {
            let sessions = if section == "distinct" {
                Sessions::OwnThread
            } else {
                Sessions::CallerRuntime
            };
            // A namespace of this process's own, so that the cold phase is cold on a reused server.
            let run = zklock_side::distinct_keys(connect, std::process::id() as usize, 64, 10_000, phases, sessions);
            per_key(costed(run, phases, no_server, true).await?)
        }
        "curator-distinct" => {
            let peer = curator_side::peer(connect).await?;
            let run = curator_side::distinct_keys(&peer, std::process::id() as usize, 64, 10_000, phases);
            per_key(costed(run, phases, no_server, true).await?)
        }
        floor => {
            let bench = zklock_side::DistinctFloor::prepare(connect, 10_000).await?;
            let run = bench.run(64, floor == "distinct-floor-list", phases);
            per_key(costed(run, phases, no_server, true).await?)
        }
    };
    println!("{section}: {report} of this process's CPU each");
    Ok(())
}

/// Runs `batch` (a run of cycles returning their latencies) until `length` has passed; returns
/// the cycles run and the time taken.
async fn repeat_for<F, Fut>(length: Duration, mut batch: F) -> Result<(u64, Duration), BoxError>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<(Vec<u64>, Duration), BoxError>>,
{
    let started = Instant::now();
    let mut cycles = 0;
    while started.elapsed() < length {
        cycles += batch().await?.0.len() as u64;
    }
    Ok((cycles, started.elapsed()))
}

/// What the worker processes of a cross-process point contend with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Contender {
    /// zklock with its defaults: each client's sessions on a driver thread of its own.
    Zklock,
    /// zklock with its sessions on the worker's runtime, where the recipe runs its own.
    ZklockCallerRuntime,
    /// zookeeper-client's lock recipe.
    Zkclient,
}

/// Runs `procs` worker processes of this binary, each with `tasks` tasks on its own client of
/// `who`.
async fn contend_in_processes(
    connect: &str,
    procs: usize,
    tasks: usize,
    length: Duration,
    who: Contender,
) -> Result<Vec<Value>, BoxError> {
    // Room for the workers to start and open their sessions before the window opens.
    let (start, end) = workers::window(Duration::from_millis(2000), length);
    let (label, flag) = match who {
        Contender::Zklock => ("zklock", None),
        Contender::ZklockCallerRuntime => ("zklock-rt", Some("--caller-runtime")),
        Contender::Zkclient => ("zkclient", Some("--zkclient")),
    };
    let name = format!("bench-cross-{label}-{procs}x{tasks}");
    let mut workers = Vec::new();
    for _ in 0..procs {
        let mut args = vec!["contend".to_string(), connect.to_string(), name.clone()];
        args.extend([tasks.to_string(), start.to_string(), end.to_string()]);
        args.extend(flag.map(str::to_owned));
        workers.push(args);
    }
    workers::collect(workers::spawn(&workers::this_binary, &workers)?, label).await
}

/// Runs the memory-per-key measurement in a fresh process of this binary.
async fn rss_worker(connect: &str, keys: usize) -> Result<Value, BoxError> {
    let args = vec!["rss".to_string(), connect.to_string(), keys.to_string()];
    let mut answers = workers::collect(workers::spawn(&workers::this_binary, &[args])?, "memory").await?;
    answers.pop().ok_or_else(|| "the memory worker gave no answer".into())
}

/// The per-key section: zklock, Curator and the two raw floors, each through a cold and a warm
/// phase (see [`Phases`]), for `plan.distinct_rounds` rounds after a warm-up of the server. The
/// order alternates from round to round, so no contender always runs right after another (whose
/// containers the server may still be reaping); each figure is the median over the rounds.
/// Every round of zklock and Curator starts with directories of its own that do not exist yet.
async fn per_key_section(
    connect: &str,
    plan: &Plan,
    server: &Server,
    progress: &mut Progress,
) -> Result<Value, BoxError> {
    let (tasks, keys) = (plan.distinct_tasks, plan.distinct_keys);
    let phases = || Phases::after(Duration::from_millis(500), plan.window);
    let per_key_floor = zklock_side::DistinctFloor::prepare(connect, keys).await?;
    // Round 0 only warms the server up (its code paths for making and reaping directories, as
    // the uncontended section does for its own): otherwise whoever goes first in round 1 meets a
    // colder server than everyone after it.
    progress.note("distinct keys: warming up the server (zklock and Curator, not counted)");
    let short = Phases::after(Duration::from_millis(200), plan.window / 4);
    zklock_side::distinct_keys(connect, 0, tasks, keys, short, Sessions::OwnThread).await?;
    let peer = curator_side::peer(connect).await?;
    let short = Phases::after(Duration::from_millis(200), plan.window / 4);
    curator_side::distinct_keys(&peer, 0, tasks, keys, short).await?;
    drop(peer);
    let mut runs: [Vec<Value>; 6] = Default::default();
    for round in 1..=plan.distinct_rounds {
        let order = if round % 2 == 1 {
            [0, 5, 1, 4, 2, 3]
        } else {
            [4, 1, 5, 0, 3, 2]
        };
        for who in order {
            let what = [
                "zklock",
                "Curator",
                "raw floor",
                "raw floor with listing",
                "zookeeper-client's recipe",
                "zklock, sessions on the bench's runtime",
            ][who];
            progress.step(&format!(
                "distinct keys, round {round}/{}: {what}, {tasks} tasks over {keys} keys",
                plan.distinct_rounds
            ));
            let timing = phases();
            let run = match who {
                0 | 5 => {
                    let sessions = if who == 0 {
                        Sessions::OwnThread
                    } else {
                        Sessions::CallerRuntime
                    };
                    let run = zklock_side::distinct_keys(connect, round, tasks, keys, timing, sessions);
                    costed(run, timing, || server.cpu(), true).await?
                }
                1 => {
                    let peer = curator_side::peer(connect).await?;
                    let run = curator_side::distinct_keys(&peer, round, tasks, keys, timing);
                    costed(run, timing, || server.cpu(), false).await?
                }
                4 => {
                    let run = zkclient_side::distinct_keys(connect, round, tasks, keys, timing);
                    costed(run, timing, || server.cpu(), true).await?
                }
                _ => {
                    let run = per_key_floor.run(tasks, who == 3, timing);
                    costed(run, timing, || server.cpu(), true).await?
                }
            };
            runs[who].push(run);
        }
    }
    Ok(distinct_entry(&runs, plan.window))
}

/// Runs `run` (a per-key section) and, beside it, samples the CPU time each of its phases
/// cost: this process's when `client_here` (the contender runs in it), and the server's when
/// `server_cpu` can read it. Adds both per acquisition and phase to the run's answer.
async fn costed(
    run: impl std::future::Future<Output = Result<Value, BoxError>>,
    phases: Phases,
    server_cpu: impl Fn() -> Option<Duration>,
    client_here: bool,
) -> Result<Value, BoxError> {
    let sample = async {
        let mut at = Vec::new();
        for ms in [phases.begin_ms, phases.middle_ms, phases.end_ms] {
            tokio::time::sleep(Duration::from_millis(ms.saturating_sub(zklock_side::epoch_ms()))).await;
            at.push((process_cpu(), server_cpu()));
        }
        at
    };
    let (run, at) = tokio::join!(run, sample);
    let mut run = run?;
    let mut client = serde_json::Map::new();
    let mut server = serde_json::Map::new();
    for (phase, pair) in ["cold", "warm"].into_iter().zip(at.windows(2)) {
        let n = run["acquisitions"][phase].as_f64().unwrap_or(0.0).max(1.0);
        let per = |cpu: Option<Duration>| cpu.map(|c| round(c.as_secs_f64() * 1e6 / n));
        let (before, after) = (pair[0], pair[1]);
        client.insert(
            phase.into(),
            json!(per(client_here.then(|| after.0.saturating_sub(before.0)))),
        );
        server.insert(
            phase.into(),
            json!(per(after.1.zip(before.1).map(|(a, b)| a.saturating_sub(b)))),
        );
    }
    run["client_cpu_us_per_acquisition"] = Value::Object(client);
    run["server_cpu_us_per_acquisition"] = Value::Object(server);
    Ok(run)
}

/// The per-key section's entry: per phase, each contender's median rate and CPU over the
/// rounds (`runs`: zklock, Curator, floor, floor with listing, zookeeper-client's recipe, zklock
/// with its sessions on the bench's runtime), the ratios of the medians, and every round's
/// figures.
fn distinct_entry(runs: &[Vec<Value>; 6], phase: Duration) -> Value {
    let mut entry = json!({
        "tasks": runs[0][0]["threads"],
        "keys": runs[0][0]["keys"],
        "phase_s": phase.as_secs_f64(),
        "rounds": runs[0].len(),
    });
    for name in ["cold", "warm"] {
        let rate = |v: &Value| round(v["acquisitions"][name].as_f64().unwrap_or(0.0) / phase.as_secs_f64());
        let median = |values: Vec<Option<f64>>| {
            let mut known: Vec<f64> = values.into_iter().flatten().collect();
            known.sort_by(f64::total_cmp);
            known.get(known.len() / 2).copied()
        };
        let row = |rounds: &[Value]| {
            let cpu = |which: &str| median(rounds.iter().map(|v| v[which][name].as_f64()).collect());
            json!({
                "acquisitions_per_sec": median(rounds.iter().map(|v| Some(rate(v))).collect()),
                "client_cpu_us_per_acquisition": cpu("client_cpu_us_per_acquisition"),
                "server_cpu_us_per_acquisition": cpu("server_cpu_us_per_acquisition"),
                "per_round_acquisitions_per_sec": rounds.iter().map(rate).collect::<Vec<_>>(),
            })
        };
        let rows = runs.each_ref().map(|r| row(r));
        let [z, c, f, fl, k, zr] = rows
            .each_ref()
            .map(|r| r["acquisitions_per_sec"].as_f64().unwrap_or(0.0));
        let [zklock, curator, floor, floor_with_listing, zkclient, zklock_caller_runtime] = rows;
        entry[name] = json!({
            "zklock": zklock,
            "zklock_on_caller_runtime": zklock_caller_runtime,
            "zklock_on_caller_runtime_vs_floor": ratio(zr, f),
            "zklock_on_caller_runtime_vs_zkclient": ratio(zr, k),
            "zklock_on_caller_runtime_vs_curator": ratio(zr, c),
            "curator": curator,
            "zkclient": zkclient,
            "floor": floor,
            "floor_with_listing": floor_with_listing,
            "zklock_vs_curator": ratio(z, c),
            "zklock_vs_zkclient": ratio(z, k),
            "zklock_vs_floor": ratio(z, f),
            "zklock_vs_floor_with_listing": ratio(z, fl),
            "floor_vs_curator": ratio(f, c),
            "floor_with_listing_vs_curator": ratio(fl, c),
        });
    }
    entry
}

/// A contention point: each contender's summed figures (`runs`: zklock, Curator,
/// zookeeper-client's recipe, one answer per process) and zklock's ratios to its peers.
fn contention_entry(contenders: usize, procs: usize, per_proc: usize, runs: [&[Value]; 3], window: Duration) -> Value {
    let [z, c, k] = runs.map(|runs| contention_side(runs, window));
    json!({
        "contenders": contenders,
        "processes": procs,
        "per_process": per_proc,
        "window_s": window.as_secs_f64(),
        "zklock_vs_curator": ratio(rate(&z), rate(&c)),
        "zklock_vs_zkclient": ratio(rate(&z), rate(&k)),
        "zklock": z,
        "curator": c,
        "zkclient": k,
    })
}

/// One contender's side of a contention point: its acquisitions over all its processes.
fn contention_side(runs: &[Value], window: Duration) -> Value {
    let total: u64 = runs.iter().filter_map(|r| r["acquisitions"].as_u64()).sum();
    let overlaps: u64 = runs.iter().filter_map(|r| r["overlaps"].as_u64()).sum();
    json!({
        "acquisitions": total,
        "acquisitions_per_sec": round(total as f64 / window.as_secs_f64()),
        "overlaps_seen": overlaps,
        "per_process": runs,
    })
}

fn rate(side: &Value) -> f64 {
    side["acquisitions_per_sec"].as_f64().unwrap_or(0.0)
}

/// Adds to a cross-process `entry` the side of zklock with its sessions on each worker
/// process's runtime, and its ratios to the peers.
fn with_caller_runtime_side(entry: &mut Value, runs: &[Value], window: Duration) {
    let side = contention_side(runs, window);
    entry["zklock_on_caller_runtime_vs_curator"] = json!(ratio(rate(&side), rate(&entry["curator"])));
    entry["zklock_on_caller_runtime_vs_zkclient"] = json!(ratio(rate(&side), rate(&entry["zkclient"])));
    entry["zklock_on_caller_runtime"] = side;
}

fn find(entries: &[Value], contenders: usize, procs: usize) -> Option<&Value> {
    entries
        .iter()
        .find(|e| e["contenders"].as_u64() == Some(contenders as u64) && e["processes"].as_u64() == Some(procs as u64))
}

fn machine() -> Value {
    let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let model = cpuinfo
        .lines()
        .find_map(|l| l.strip_prefix("model name"))
        .map(|l| l.trim_start_matches([' ', '\t', ':']).to_owned());
    let mem_kb = std::fs::read_to_string("/proc/meminfo").ok().and_then(|m| {
        m.lines()
            .find_map(|l| l.strip_prefix("MemTotal:"))
            .and_then(|v| v.split_whitespace().next()?.parse::<u64>().ok())
    });
    let java = Command::new("java")
        .arg("-version")
        .output()
        .ok()
        .and_then(|o| String::from_utf8_lossy(&o.stderr).lines().next().map(str::to_owned));
    json!({
        "cpu": model,
        "cores": std::thread::available_parallelism().map(|n| n.get()).ok(),
        "memory_gib": mem_kb.map(|k| round(k as f64 / 1024.0 / 1024.0)),
        "kernel": std::fs::read_to_string("/proc/sys/kernel/osrelease").ok().map(|s| s.trim().to_owned()),
        "java": java,
        "curator": "Debian libcurator-recipes-java (InterProcessMutex)",
    })
}

fn chart_svg(
    zk: &Summary,
    cur: &Summary,
    zkc: &Summary,
    floor: &Summary,
    in_process: &[Value],
    cross: &[Value],
    results: &Value,
) -> String {
    // Leave out the slowest 0.5 % so one outlier does not squash the distribution.
    let cdf = |s: &Summary| -> Vec<(f64, f64)> {
        s.cdf
            .iter()
            .filter(|(f, _)| *f <= 0.995)
            .map(|&(f, v)| (v, f))
            .collect()
    };
    let latency = vec![
        Series {
            label: "zklock".into(),
            color: "#d62728",
            dashed: false,
            points: cdf(zk),
        },
        Series {
            label: "Curator".into(),
            color: "#1f77b4",
            dashed: false,
            points: cdf(cur),
        },
        Series {
            label: "zookeeper-client recipe".into(),
            color: "#2ca02c",
            dashed: false,
            points: cdf(zkc),
        },
        Series {
            label: "raw floor".into(),
            color: "#555555",
            dashed: true,
            points: cdf(floor),
        },
    ];
    let points = |entries: &[Value], who: &str| -> Vec<(f64, f64)> {
        entries
            .iter()
            .filter_map(|e| Some((e["contenders"].as_f64()?, e[who]["acquisitions_per_sec"].as_f64()?)))
            .collect()
    };
    let throughput = vec![
        Series {
            label: "zklock, in-process".into(),
            color: "#d62728",
            dashed: false,
            points: points(in_process, "zklock"),
        },
        Series {
            label: "Curator, in-process".into(),
            color: "#1f77b4",
            dashed: false,
            points: points(in_process, "curator"),
        },
        Series {
            label: "zklock, cross-process".into(),
            color: "#d62728",
            dashed: true,
            points: points(cross, "zklock"),
        },
        Series {
            label: "Curator, cross-process".into(),
            color: "#1f77b4",
            dashed: true,
            points: points(cross, "curator"),
        },
        Series {
            label: "zookeeper-client, in-process".into(),
            color: "#2ca02c",
            dashed: false,
            points: points(in_process, "zkclient"),
        },
        Series {
            label: "zookeeper-client, cross-process".into(),
            color: "#2ca02c",
            dashed: true,
            points: points(cross, "zkclient"),
        },
    ];
    chart::render(&latency, &throughput, &subtitle(results))
}

/// The charts' subtitle: the server, the machine, the run.
fn subtitle(results: &Value) -> String {
    let server = &results["server"];
    let zk = if server.is_object() {
        format!(
            "ZooKeeper {} ({}) tickTime={} ms forceSync={}; ",
            server["version"].as_str().unwrap_or("?"),
            server["mode"].as_str().unwrap_or("standalone"),
            server["tickTime_ms"],
            server["forceSync"].as_str().unwrap_or("?"),
        )
    } else {
        String::new()
    };
    format!(
        "{zk}{} cores; {} run",
        results["machine"]["cores"],
        results["run"]["mode"].as_str().unwrap_or("?"),
    )
}

/// CPU time this process has used so far, user and system, all threads.
fn process_cpu() -> Duration {
    let mut usage = std::mem::MaybeUninit::<libc::rusage>::zeroed();
    // SAFETY: getrusage writes a rusage into the pointer it is given, which is valid for it.
    let usage = unsafe {
        if libc::getrusage(libc::RUSAGE_SELF, usage.as_mut_ptr()) != 0 {
            return Duration::ZERO;
        }
        usage.assume_init()
    };
    let time = |t: libc::timeval| Duration::new(t.tv_sec.max(0) as u64, (t.tv_usec.max(0) as u32) * 1000);
    time(usage.ru_utime) + time(usage.ru_stime)
}

fn cpu_per_cycle(cpu: Duration, cycles: usize) -> f64 {
    round(cpu.as_secs_f64() * 1e6 / cycles.max(1) as f64)
}

fn print_table(r: &Value) {
    let u = &r["uncontended"];
    println!();
    println!("Uncontended acquire+release cycle");
    println!(
        "  {:<10} {:>10} {:>10} {:>10} {:>12}",
        "", "p50 µs", "p99 µs", "mean µs", "cycles/s"
    );
    for who in ["zklock", "curator", "zkclient", "floor"] {
        let s = &u[who];
        println!(
            "  {:<10} {:>10} {:>10} {:>10} {:>12}",
            who,
            s["p50_us"].to_string(),
            s["p99_us"].to_string(),
            s["mean_us"].to_string(),
            s["cycles_per_sec"].to_string()
        );
    }
    let cpu = &u["client_cpu_us_per_cycle"];
    println!(
        "  client CPU per cycle (this process): zklock {} µs, floor {} µs",
        cpu["zklock"], cpu["floor"]
    );
    for (title, key) in [
        ("In-process contention (one process, T tasks / threads)", "in_process"),
        (
            "Cross-process contention (P processes x T tasks / threads)",
            "cross_process",
        ),
    ] {
        println!();
        println!("{title}");
        println!(
            "  {:<12} {:>14} {:>14} {:>8} {:>16} {:>8}",
            "P x T", "zklock acq/s", "Curator acq/s", "ratio", "zk-client acq/s", "ratio"
        );
        for e in r[key].as_array().into_iter().flatten() {
            println!(
                "  {:<12} {:>14} {:>14} {:>8} {:>16} {:>8}",
                format!("{} x {}", e["processes"], e["per_process"]),
                e["zklock"]["acquisitions_per_sec"].to_string(),
                e["curator"]["acquisitions_per_sec"].to_string(),
                e["zklock_vs_curator"].to_string(),
                e["zkclient"]["acquisitions_per_sec"].to_string(),
                e["zklock_vs_zkclient"].to_string()
            );
            if let Some(rt) = e["zklock_on_caller_runtime"]["acquisitions_per_sec"].as_f64() {
                println!(
                    "  {:<12} {:>14} {:>14} {:>8} {:>16} {:>8}",
                    "  (runtime)",
                    rt,
                    "",
                    e["zklock_on_caller_runtime_vs_curator"].to_string(),
                    "",
                    e["zklock_on_caller_runtime_vs_zkclient"].to_string()
                );
            }
        }
    }
    println!();
    println!("Herd check (server-counted watch notifications per release)");
    for who in ["zklock", "curator"] {
        let h = &r["herd"][who];
        println!(
            "  {:<8} W={} per release {} (watches set before: {})",
            who, h["waiters"], h["notifications_per_release"], h["watches_before_first_release"]
        );
    }
    println!(
        "  zklock per release to other sessions {}, to the releasing session (its own-node watch) {}",
        r["herd"]["zklock"]["notifications_to_other_sessions_per_release"],
        r["herd"]["zklock"]["notifications_to_the_releasing_session_per_release"]
    );
    scale::print(&r["scale"]);
    println!();
    println!("Handoff fairness (local tasks of one client vs one remote contender)");
    println!(
        "  {:>18} {:>16} {:>14} {:>16} {:>16}",
        "max_local_handoffs", "local acq/s", "remote grants", "remote wait p50", "remote wait max"
    );
    for f in r["handoff_fairness"].as_array().into_iter().flatten() {
        let ms = |v: &Value| v.as_f64().map_or("-".to_string(), |v| format!("{v:.1} ms"));
        println!(
            "  {:>18} {:>16.0} {:>14} {:>16} {:>16}",
            f["max_local_handoffs"].to_string(),
            f["local_acquisitions_per_sec"].as_f64().unwrap_or(0.0),
            f["remote_grants"].to_string(),
            ms(&f["remote_wait_p50_ms"]),
            ms(&f["remote_wait_max_ms"])
        );
    }
    let d = &r["distinct_keys"];
    println!();
    println!(
        "Distinct keys ({} tasks / threads over {} keys), two phases of {} s each, median of {} rounds",
        d["tasks"], d["keys"], d["phase_s"], d["rounds"]
    );
    for (phase, what) in [
        ("cold", "each key's directory made and first seen"),
        ("warm", "the same keys again"),
    ] {
        let p = &d[phase];
        println!(
            "  {phase} ({what}): zklock / Curator {}, zklock / floor {}",
            p["zklock_vs_curator"], p["zklock_vs_floor"]
        );
        println!(
            "    {:<30} {:>10} {:>22} {:>22}   per round",
            "", "acq/s", "client CPU µs / acq", "server CPU µs / acq"
        );
        for (label, key) in [
            ("zklock", "zklock"),
            ("zklock, caller's runtime", "zklock_on_caller_runtime"),
            ("Curator", "curator"),
            ("zookeeper-client's recipe", "zkclient"),
            ("floor: create + delete", "floor"),
            ("floor: create ‖ list + delete", "floor_with_listing"),
        ] {
            let e = &p[key];
            println!(
                "    {label:<30} {:>10} {:>22} {:>22}   {}",
                e["acquisitions_per_sec"],
                e["client_cpu_us_per_acquisition"]
                    .as_f64()
                    .map_or("(its JVM)".into(), |v| v.to_string()),
                e["server_cpu_us_per_acquisition"]
                    .as_f64()
                    .map_or("-".into(), |v| v.to_string()),
                e["per_round_acquisitions_per_sec"],
            );
        }
    }
    let m = &r["rss"];
    println!(
        "Memory per key: {} distinct names in {:.0} s; RSS {:.1} -> {:.1} MB (growth {:.2} MB)",
        m["keys"],
        m["seconds"].as_f64().unwrap_or(0.0),
        m["rss_before_mb"].as_f64().unwrap_or(0.0),
        m["rss_after_mb"].as_f64().unwrap_or(0.0),
        m["rss_growth_mb"].as_f64().unwrap_or(0.0)
    );
    let re = &r["reentrant"];
    println!();
    println!(
        "Reentrant re-acquire+release: zklock {} ns, Curator {} ns",
        re["zklock_ns_per_cycle"], re["curator_ns_per_cycle"]
    );
    let c = &r["caching"];
    let w = &c["remote_wait"];
    println!(
        "Lock caching: cached re-acquire+release {} cycles/s (p50 {} µs, {} x the floor); a remote contender behind a cached node waits p50 {} µs, after an uncached release {} µs ({} x)",
        c["reacquire"]["cycles_per_sec"],
        c["reacquire"]["p50_us"],
        r["ratios"]["cached_reacquire_rate_vs_floor"],
        w["behind_cached_node"]["p50_us"],
        w["uncached_handoff"]["p50_us"],
        w["p50_cached_vs_uncached_handoff"]
    );
    print_seckill(&r["seckill"]);
    print_targets(&r["targets"]);
    let s = &r["server"];
    println!();
    println!(
        "Server: ZooKeeper {} ({}) tickTime={} ms forceSync={} ({})",
        s["version"].as_str().unwrap_or("?"),
        s["mode"].as_str().unwrap_or("?"),
        s["tickTime_ms"],
        s["forceSync"].as_str().unwrap_or("?"),
        if s["started_by_bench"] == true {
            "started by the bench"
        } else {
            "external"
        }
    );
}
