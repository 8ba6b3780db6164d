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
//! the next tick runs in another one. Meanwhile, from a fourth terminal:
//!
//! ```text
//! zklock --zk 127.0.0.1:2181 jobs                          # schedule, last tick, next tick
//! zklock --zk 127.0.0.1:2181 jobs pause singleton-demo     # every terminal stops running it
//! zklock --zk 127.0.0.1:2181 jobs trigger singleton-demo   # one terminal runs it once now
//! zklock --zk 127.0.0.1:2181 jobs resume singleton-demo
//! zklock --zk 127.0.0.1:2181 jobs history singleton-demo   # who ran what, how it ended
//! ```

use clap::Parser;
use zklock_examples::singleton_job::{run, Args};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    run(Args::parse()).await
}
