//! A cron job that runs on one node of a cluster per tick.
//!
//! Start it in several terminals against the same ZooKeeper; each tick, one of them runs the
//! job and the others say they skipped:
//!
//! ```text
//! cargo run -p zklock-examples --example singleton_job                       # starts a throw-away ZooKeeper, prints its address
//! cargo run -p zklock-examples --example singleton_job -- --zk 127.0.0.1:2181
//! cargo run -p zklock-examples --example singleton_job -- --zk 127.0.0.1:2181 --policy skip --work-ms 3000
//! ```
//!
//! Kill the terminal that is running the job (Ctrl-C, or `kill -9`): once its session expires,
//! the next tick runs in another one.

use std::time::{Duration, SystemTime};

use clap::{Parser, ValueEnum};
use zklock::scheduler::tokio_cron_scheduler::JobScheduler;
use zklock::scheduler::{JobSchedulerExt, Policy, SingletonJob};
use zklock::LockClient;

#[derive(Parser, Debug)]
#[command(about = "Run a cron job on one node of a cluster per tick")]
struct Args {
    /// ZooKeeper connect string shared by all terminals. Without it, a local throw-away server
    /// is started and its address printed for the other terminals.
    #[arg(long)]
    zk: Option<String>,
    /// once-per-tick: every tick runs exactly once in the cluster. skip: a node skips a fire
    /// while the job runs elsewhere (ShedLock's behaviour).
    #[arg(long, value_enum, default_value_t = PolicyArg::OncePerTick)]
    policy: PolicyArg,
    /// Cron schedule with seconds, in UTC.
    #[arg(long, default_value = "*/2 * * * * *")]
    schedule: String,
    /// The job name (validated like a lock name).
    #[arg(long, default_value = "singleton-demo")]
    name: String,
    /// How long one run of the job takes, in milliseconds.
    #[arg(long, default_value_t = 500)]
    work_ms: u64,
    /// Stop after this many fires seen on this node (default: run until killed).
    #[arg(long)]
    ticks: Option<u64>,
}

#[derive(Clone, Copy, Debug, ValueEnum)]
enum PolicyArg {
    OncePerTick,
    Skip,
}

fn clock_of(t: SystemTime) -> String {
    let secs = t
        .duration_since(SystemTime::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    format!("{:02}:{:02}:{:02} UTC", secs / 3600 % 24, secs / 60 % 60, secs % 60)
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args = Args::parse();
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
        PolicyArg::Skip => Policy::Skip,
    };
    let work = Duration::from_millis(args.work_ms);
    let me = node.clone();
    let job = SingletonJob::new_async(&args.schedule, &client, &args.name, move |run| {
        let me = me.clone();
        async move {
            println!(
                "[{me}] RUN   tick {} (fencing token {})",
                clock_of(run.tick()),
                run.fencing_token()
            );
            tokio::time::sleep(work).await;
        }
    })?
    .policy(policy);

    let scheduler = JobScheduler::new().await?;
    let (_, stats) = scheduler.add_singleton(job).await?;
    scheduler.start().await?;
    println!(
        "[{node}] job `{}` on `{}`, policy {:?}; Ctrl-C stops it",
        args.name, args.schedule, policy
    );

    // Report this node's skips and failures as the counters move, until Ctrl-C or SIGTERM.
    let mut stop = std::pin::pin!(zklock_examples::shutdown::stop_requested());
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
