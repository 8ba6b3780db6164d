//! Two clients contend for one ZooKeeper lock; each grant carries a fencing token that grows.
//!
//! ```sh
//! cargo run -p zklock-examples --example hello_lock                   # starts its own ZooKeeper
//! cargo run -p zklock-examples --example hello_lock -- --zk 127.0.0.1:2181
//! ```

use std::process::ExitCode;
use std::time::{Duration, Instant};

use clap::Parser;
use zklock::testing::ZkServer;
use zklock::{FencingToken, LockClient, LockError};

const LOCK_NAME: &str = "hello:demo";
const HOLD: Duration = Duration::from_millis(1500);

/// Two clients contend for one ZooKeeper lock and print their fencing tokens.
#[derive(Debug, Parser)]
#[command(about)]
struct Args {
    /// ZooKeeper to use (HOST:PORT[,HOST:PORT...]); without it a server is started for the run
    /// (needs scripts/install-deps.sh).
    #[arg(long, value_name = "HOST:PORT")]
    zk: Option<String>,
}

fn main() -> ExitCode {
    let zk = Args::parse().zk;

    // The server (if we start one) lives until the end of main and is stopped on drop.
    let (_server, connect) = match zk {
        Some(addr) => (None, addr),
        None => {
            println!("starting a ZooKeeper server for this run ...");
            match ZkServer::builder()
                .system_property("znode.container.checkIntervalMs", "100")
                .start()
            {
                Ok(server) => {
                    let connect = server.connect_string();
                    println!("ZooKeeper {} is up", connect);
                    (Some(server), connect)
                }
                Err(e) => {
                    eprintln!("cannot start ZooKeeper: {e}");
                    return ExitCode::FAILURE;
                }
            }
        }
    };

    let runtime = match tokio::runtime::Runtime::new() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(demo(&connect)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("demo failed: {e}");
            ExitCode::FAILURE
        }
    }
}

/// What one contender saw.
struct Turn {
    who: &'static str,
    waited: Duration,
    token: FencingToken,
}

async fn demo(connect: &str) -> Result<(), LockError> {
    let alice = LockClient::builder(connect)
        .session_timeout(Duration::from_secs(4))
        .connect()
        .await?;
    let bob = LockClient::builder(connect)
        .session_timeout(Duration::from_secs(4))
        .connect()
        .await?;
    println!(
        "two clients connected: alice (session {:#x}) and bob (session {:#x})",
        alice.session_id().unwrap_or_default(),
        bob.session_id().unwrap_or_default()
    );

    let started = Instant::now();
    let alice_task = tokio::spawn(contend("alice", alice.clone(), started));
    // Let alice get there first, so the contention is visible.
    tokio::time::sleep(Duration::from_millis(200)).await;
    let peek = bob.mutex(LOCK_NAME)?.try_acquire().await?;
    println!(
        "[{:>5} ms] bob   try_acquire while alice holds it: {}",
        ms(started),
        describe(&peek)
    );
    drop(peek);
    let bob_task = tokio::spawn(contend("bob", bob.clone(), started));

    let mut turns = Vec::new();
    for task in [alice_task, bob_task] {
        match task.await {
            Ok(turn) => turns.push(turn?),
            Err(e) => {
                return Err(LockError::InvalidConfig {
                    message: format!("contender task failed: {e}"),
                    source: None,
                })
            }
        }
    }
    // Closing ends both sessions at once (nothing is left for the server to expire).
    alice.close().await;
    bob.close().await;

    println!("\nsummary for lock {LOCK_NAME:?}:");
    for turn in &turns {
        println!(
            "  {:<5} waited {:>5} ms, held it for {} ms with fencing token {}",
            turn.who,
            turn.waited.as_millis(),
            HOLD.as_millis(),
            turn.token
        );
    }
    let increasing = turns.windows(2).all(|w| w[0].token < w[1].token);
    println!(
        "  fencing tokens strictly increase across holders: {}",
        if increasing { "yes" } else { "NO" }
    );
    let (a, b) = (alice.metrics(), bob.metrics());
    println!("  alice metrics: {a:?}\n  bob metrics:   {b:?}");
    if !increasing {
        return Err(LockError::InvalidConfig {
            message: "fencing tokens did not increase".into(),
            source: None,
        });
    }
    Ok(())
}

async fn contend(who: &'static str, client: LockClient, started: Instant) -> Result<Turn, LockError> {
    let lock = client.mutex(LOCK_NAME)?;
    println!("[{:>5} ms] {who:<5} wants {}", ms(started), lock.path());
    let asked = Instant::now();
    let guard = lock.acquire_timeout(Duration::from_secs(30)).await?;
    let waited = asked.elapsed();
    let token = guard.fencing_token();
    println!(
        "[{:>5} ms] {who:<5} acquired after {} ms, fencing token {token}, node {}",
        ms(started),
        waited.as_millis(),
        guard.node_path()
    );
    tokio::time::sleep(HOLD).await; // the critical section
    guard.release().await?;
    println!("[{:>5} ms] {who:<5} released", ms(started));
    Ok(Turn { who, waited, token })
}

fn describe(guard: &Option<zklock::LockGuard>) -> String {
    match guard {
        Some(g) => format!("granted (token {}), unexpected", g.fencing_token()),
        None => "not granted (held elsewhere)".to_string(),
    }
}

fn ms(since: Instant) -> u128 {
    since.elapsed().as_millis()
}
