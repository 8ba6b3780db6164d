//! Seckill (flash sale): an inventory service whose buy path runs under
//! `#[distributed_lock("seckill:{item_id}")]`, and a demo that shows what the lock prevents.
//!
//! ```text
//! cargo run --release -p zklock-examples --example seckill -- demo                   # with the lock
//! cargo run --release -p zklock-examples --example seckill -- demo --unsafe-no-lock  # without it
//! cargo run --release -p zklock-examples --example seckill -- serve --zk 127.0.0.1:2181 \
//!     --database 'sqlite:///tmp/seckill.db?mode=rwc' --listen 127.0.0.1:8080
//! ```
//!
//! `demo` starts a ZooKeeper server (unless `--zk` names one), three `serve` processes on one
//! SQLite file (or the PostgreSQL database in `DATABASE_URL`), sells 3 items of 100 units to
//! 2,000 concurrent requests (single buys, and carts of several items under a multi-lock), and
//! prints a summary whose last line is one JSON object.

use clap::{Parser, Subcommand};
use zklock_examples::seckill::{driver, service};

#[derive(Debug, Parser)]
#[command(about = "Flash-sale inventory service guarded by a ZooKeeper lock, and its demo")]
struct Cli {
    #[command(subcommand)]
    command: Cmd,
}

#[derive(Debug, Subcommand)]
enum Cmd {
    /// Run one service instance.
    Serve(service::ServeArgs),
    /// Run the whole scenario: ZooKeeper, instances, load, summary.
    Demo(driver::DemoArgs),
}

#[tokio::main]
async fn main() {
    let code = match Cli::parse().command {
        Cmd::Serve(args) => match service::serve(args).await {
            Ok(()) => 0,
            Err(err) => {
                eprintln!("seckill serve: {err}");
                1
            }
        },
        Cmd::Demo(args) => demo(args).await,
    };
    std::process::exit(code);
}

/// Starts an instance by re-running this executable as `serve`.
fn self_launcher() -> Result<Box<driver::Launcher>, driver::DemoError> {
    let exe = std::env::current_exe()?;
    Ok(Box::new(move |args: &[String]| {
        let mut cmd = std::process::Command::new(&exe);
        cmd.arg("serve").args(args);
        cmd
    }))
}

async fn demo(args: driver::DemoArgs) -> i32 {
    let launcher = match self_launcher() {
        Ok(launcher) => launcher,
        Err(err) => {
            eprintln!("seckill demo: {err}");
            return 1;
        }
    };
    match driver::run_demo(&args, &*launcher).await {
        Ok(summary) => {
            print!("{}", summary.report());
            println!("{}", summary.json_line());
            // With the lock, an unsafe outcome is a failure of the demo (and of CI).
            if summary.mode == "locked" && !summary.is_safe() {
                2
            } else {
                0
            }
        }
        Err(err) => {
            eprintln!("seckill demo failed: {err}");
            1
        }
    }
}
