//! The singleton job program (`cargo run -p zklock-examples --example singleton_job`): a cron
//! job that runs on one node of a cluster per tick. Here, as a library, so the metrics
//! end-to-end test runs the very program as its processes.

use std::time::{Duration, SystemTime};

use clap::{Parser, ValueEnum};
use zklock::scheduler::tokio_cron_scheduler::JobScheduler;
use zklock::scheduler::{JobSchedulerExt, Policy, SingletonJob};
use zklock::LockClient;

use crate::metrics::serve_metrics;

/// The program's options.
#[derive(Parser, Debug)]
#[command(about = "Run a cron job on one node of a cluster per tick")]
pub struct Args {
    /// ZooKeeper connect string shared by all terminals. Without it, a local throw-away server
    /// is started and its address printed for the other terminals.
    #[arg(long)]
    zk: Option<String>,
    /// What a tick does when the job is running: once-per-tick (it runs after, every tick runs
    /// once), buffer-one (the ticks that came during a run run once after it), replace (it
    /// stops the run and runs instead), allow (runs overlap), skip (it is skipped: ShedLock's
    /// behaviour).
    #[arg(long, alias = "overlap", value_enum, default_value_t = PolicyArg::OncePerTick)]
    policy: PolicyArg,
    /// Cron schedule with seconds.
    #[arg(long, default_value = "*/2 * * * * *")]
    schedule: String,
    /// The IANA time zone the schedule is read in.
    #[arg(long, default_value = "UTC")]
    tz: zklock::scheduler::chrono_tz::Tz,
    /// Abort a run that takes longer than this (e.g. `2s`), and record it as timed out.
    #[arg(long, value_parser = humantime::parse_duration)]
    max_hold: Option<Duration>,
    /// The job name (validated like a lock name).
    #[arg(long, default_value = "singleton-demo")]
    name: String,
    /// How long one run of the job takes, in milliseconds.
    #[arg(long, default_value_t = 500)]
    work_ms: u64,
    /// Stop after this many fires seen on this node (default: run until killed).
    #[arg(long)]
    ticks: Option<u64>,
    /// Serve this node's metrics (Prometheus text, zklock's among them) at
    /// `http://ADDR/metrics` (e.g. `127.0.0.1:9101`; port 0 picks a free one, printed).
    #[arg(long, value_name = "ADDR")]
    metrics: Option<std::net::SocketAddr>,
}

#[derive(Clone, Copy, Debug, ValueEnum)]
enum PolicyArg {
    OncePerTick,
    BufferOne,
    Replace,
    Allow,
    Skip,
}

fn clock_of(t: SystemTime) -> String {
    let secs = t
        .duration_since(SystemTime::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    format!("{:02}:{:02}:{:02} UTC", secs / 3600 % 24, secs / 60 % 60, secs % 60)
}

/// Runs the program with `args` until it is stopped (Ctrl-C, SIGTERM) or has seen `--ticks`
/// fires.
pub async fn run(args: Args) -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    let _metrics = match args.metrics {
        Some(addr) => Some(serve_metrics(addr).await?),
        None => None,
    };
    let node = format!("node-{}", std::process::id());

    // Keep the embedded server alive for the whole run; it stops when `main` returns.
    let (_server, connect) = match args.zk.clone() {
        Some(connect) => (None, connect),
        None => {
            let server = zklock::testing::ZkServer::start()?;
            let connect = server.connect_string();
            println!("started a throw-away ZooKeeper at {connect}; in other terminals run:");
            println!("  cargo run -p zklock-examples --example singleton_job -- --zk {connect}");
            (Some(server), connect)
        }
    };

    let client = LockClient::builder(&connect)
        .session_timeout(Duration::from_secs(4))
        .connect()
        .await?;
    let policy = match args.policy {
        PolicyArg::OncePerTick => Policy::OncePerTick,
        PolicyArg::BufferOne => Policy::BufferOne,
        PolicyArg::Replace => Policy::Replace,
        PolicyArg::Allow => Policy::Allow,
        PolicyArg::Skip => Policy::Skip,
    };
    let work = Duration::from_millis(args.work_ms);
    let me = node.clone();
    let job = SingletonJob::new_async(&args.schedule, &client, &args.name, move |run| {
        let me = me.clone();
        async move {
            let what = match run.triggered() {
                true => "on request".to_owned(),
                false => format!("tick {}", clock_of(run.tick())),
            };
            println!("[{me}] RUN   {what} (fencing token {})", run.fencing_token());
            tokio::time::sleep(work).await;
        }
    })?
    .policy(policy)
    .time_zone(args.tz);
    let job = match args.max_hold {
        Some(max) => job.max_hold(max),
        None => job,
    };

    let scheduler = JobScheduler::new().await?;
    let (_, stats) = scheduler.add_singleton(job).await?;
    scheduler.start().await?;
    println!(
        "[{node}] job `{}` on `{}` ({}), policy {:?}; Ctrl-C stops it",
        args.name, args.schedule, args.tz, policy
    );

    // Report this node's skips and failures as the counters move, until Ctrl-C or SIGTERM.
    let mut stop = std::pin::pin!(crate::shutdown::stop_requested());
    let mut last = stats.snapshot();
    loop {
        tokio::select! {
            _ = tokio::time::sleep(Duration::from_millis(100)) => {}
            _ = &mut stop => break,
        }
        let now = stats.snapshot();
        if now.skips > last.skips {
            match (policy, now.last_recorded_tick) {
                (Policy::OncePerTick, Some(tick)) => {
                    println!("[{node}] skip  (tick {} ran on another node)", clock_of(tick))
                }
                _ => println!("[{node}] skip  (the job is running on another node)"),
            }
        }
        if now.failures > last.failures || now.lost > last.lost {
            println!("[{node}] {} failed, {} lost so far", now.failures, now.lost);
        }
        last = now;
        let fires = last.runs + last.skips + last.failures;
        if args.ticks.is_some_and(|n| fires >= n) {
            break;
        }
    }
    let mut scheduler = scheduler;
    scheduler.shutdown().await?;
    // Closing ends this node's ZooKeeper session at once, so a job it held is free for the
    // other nodes now, not after the session timeout.
    client.close().await;
    let s = stats.snapshot();
    println!(
        "[{node}] done: {} runs, {} skips, {} failures, {} lost",
        s.runs, s.skips, s.failures, s.lost
    );
    Ok(())
}
