//! `zklock`: who holds a lock, since when, and who waits for it; the singleton jobs' ticks; a
//! command run under a lock or while leading an election group.
//!
//! ```text
//! zklock --zk zk1:2181 locks [--prefix inventory:]
//! zklock --zk zk1:2181 show inventory:42
//! zklock --zk zk1:2181 watch inventory:42
//! zklock --zk zk1:2181 revoke inventory:42
//! zklock --zk zk1:2181 unlock inventory:42 --force --yes
//! zklock --zk zk1:2181 leader compactor [--watch] [--count N]
//! zklock --zk zk1:2181 jobs [list]
//! zklock --zk zk1:2181 jobs history nightly-report
//! zklock --zk zk1:2181 jobs pause|resume|trigger nightly-report
//! zklock --zk zk1:2181 jobs reset|remove nightly-report --yes
//! zklock --zk zk1:2181 exec nightly-report [--wait 30s] [--semaphore 3] [--grace 10s] -- CMD ARGS...
//! zklock --zk zk1:2181 exec compactor --leader [--participant-id node-a] [--wait 30s] -- CMD ARGS...
//! zklock --zk zk1:2181 doctor [--lock-delay 5s]
//! ```
//!
//! Every command takes `--zk`, `--namespace`, `--digest user:password`, `--json`,
//! `--timeout` (how long to wait for ZooKeeper), `--session-timeout`, and for secured ensembles
//! `--tls-ca FILE` (with `--tls-cert FILE --tls-key FILE` for a client certificate) and `--sasl
//! user:password` (DIGEST-MD5). Exit codes: 0 done; 1 ZooKeeper refused a request; 2 bad
//! arguments (also `unlock` without `--force --yes`); 3 ZooKeeper cannot be reached; 4 no such
//! lock (`show`, `revoke`, `unlock`), nobody holds it (`revoke`, `unlock`), nobody leads the
//! group (`leader`), or no such job (`jobs pause`, `jobs trigger` without `--create`, `jobs reset`,
//! `jobs remove`); 6 the job's lock was still held when `--wait` ran out (`jobs reset`, `jobs
//! remove`: a run going on did not end in time), and nothing was changed.
//!
//! `revoke` asks the holders of a lock to release it (Curator's revocation: `__REVOKE__` is
//! written into each holder node); holders that listen are told, nothing is enforced.
//!
//! `unlock NAME --force --yes` takes the lock away: it deletes the nodes that hold it now (not
//! the waiters'), each only if it is still the node read as a holder, and prints what it
//! deleted; the holders are told they lost the lock and the next waiter is granted. Without
//! both flags it deletes nothing, lists the holder nodes and whose they are, and exits 2. It
//! exits 4 when there is no such lock or nobody holds it, and 1 when a holder node could not be
//! deleted.
//!
//! `leader GROUP` prints who leads the election group GROUP (participant id, node, when it
//! joined, fencing token, session), and exits 4 when nobody leads (the group has no member);
//! with `--watch` it prints the leader again at every change (a new leader, or none) until
//! interrupted or `--count N` views.
//!
//! `exec` runs CMD (directly, not through a shell) while holding the mutex NAME, or one lease
//! of the semaphore NAME with `--semaphore N`, or, with `--leader`, while leading the election
//! group NAME (as `--participant-id ID`, default `zklock-exec`), with `ZKLOCK_LOCK_NAME`,
//! `ZKLOCK_FENCING_TOKEN` and `ZKLOCK_NODE` (and for a leader `ZKLOCK_PARTICIPANT_ID`) in its
//! environment, in a process group of its own, and releases the lock (relinquishes leadership)
//! once CMD has exited and nothing is left of its group. SIGINT, SIGTERM and SIGHUP are passed
//! on to the group (received while waiting for the lock, they end the wait with 128 + N). When
//! the lock or leadership is lost while CMD runs, the group gets SIGKILL at once if another
//! holder may be in already, else SIGTERM, then SIGKILL after `--grace` (capped by what is left
//! of the session). `--status-file FILE` records whether the exit code is CMD's own. It exits
//! with CMD's exit code, or 128 + N when CMD died of
//! signal N; 124 when the lock or leadership was not acquired within `--wait`; 125 when it was
//! lost while CMD ran and CMD was stopped; 123 when a revocation was requested while CMD ran
//! and CMD was stopped the same way (the lock was sound until then); 126 when CMD could not be
//! executed; 127 when CMD was not found; before CMD starts, with the codes above (1, 2, 3).
//!
//! `doctor` checks the deployment against what zklock's guarantees assume (the session
//! timeout, `syncLimit × tickTime`, the lock-delay, clocks, the server version, four-letter
//! words, the namespace's ACL, TLS and SASL) and prints each check as pass, warn or fail with
//! what to change. It exits with 0 when no check failed, 5 when one did, and with the codes
//! above (1, 2, 3) when no session could be opened, after printing the checks it could make.

use std::io::{IsTerminal, Write};
use std::process::ExitCode;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use clap::{Parser, Subcommand};
use serde_json::json;
use zklock_runtime::{LockClient, LockError, LockView, QueuedNode, RevokeOutcome, TlsConfig};

#[cfg(test)]
mod doc_commands;
mod doctor;
mod exec;
mod jobs;
mod leader;
mod unlock;

/// Exit code: ZooKeeper refused a request (or another failure).
const EXIT_FAILED: u8 = 1;
/// Exit code: ZooKeeper could not be reached within `--timeout`.
const EXIT_UNREACHABLE: u8 = 3;
/// Exit code: `show` named a lock that has no directory, `revoke` or `unlock` a lock nobody
/// holds, `leader` a group nobody leads, or `jobs pause|trigger|reset|remove` a job that does
/// not exist.
const EXIT_NO_SUCH_LOCK: u8 = 4;
/// Exit code: a lock stayed held by someone else past the wait (`jobs reset|remove`: a run of
/// the job did not end within `--wait`); nothing was changed. (5 is `doctor`'s "a check
/// failed".)
const EXIT_STILL_HELD: u8 = 6;
/// Exit code of `exec`: a revocation of the lock was requested while the command ran, and the
/// command was stopped (as on a loss, but the lock was sound until then).
const EXIT_REVOKED: u8 = 123;
/// Exit code of `exec`: the lock was not acquired within `--wait`; the command did not run.
const EXIT_NOT_ACQUIRED: u8 = 124;
/// Exit code of `exec`: the lock was lost while the command ran, and the command was stopped.
const EXIT_LOCK_LOST: u8 = 125;
/// Exit code of `exec`: the command was found but could not be executed.
const EXIT_CANNOT_EXECUTE: u8 = 126;
/// Exit code of `exec`: the command was not found.
const EXIT_NOT_FOUND: u8 = 127;

#[derive(Debug, Parser)]
#[command(
    name = "zklock",
    version,
    about = "Who holds a ZooKeeper lock, who waits for it, the singleton jobs' ticks; run a command under a lock \
             or while leading",
    after_help = "Exit codes: 0 done, 1 ZooKeeper refused a request, 2 bad arguments, \
                  3 ZooKeeper cannot be reached, 4 no such lock or job (nobody holds it: `revoke`, \
                  `unlock`; nobody leads: `leader`), 5 a `doctor` check failed, \
                  6 a run of the job did not end within --wait (`jobs reset|remove`; nothing changed); \
                  `exec` has its own (zklock exec --help)."
)]
struct Cli {
    /// ZooKeeper connect string (`host:port[,host:port…]`).
    #[arg(long, global = true, env = "ZKLOCK_ZK", default_value = "127.0.0.1:2181")]
    zk: String,
    /// The lock namespace (the parent of the lock directories).
    #[arg(long, global = true, default_value = "/zklock")]
    namespace: String,
    /// Digest credentials `user:password`, for locks with digest ACLs.
    #[arg(long, global = true, env = "ZKLOCK_DIGEST", value_name = "USER:PASSWORD")]
    digest: Option<String>,
    /// Connect over TLS, trusting the CA certificates of this PEM file.
    #[arg(long, global = true, env = "ZKLOCK_TLS_CA", value_name = "FILE")]
    tls_ca: Option<std::path::PathBuf>,
    /// A client certificate (PEM) for servers that require one; needs `--tls-key`.
    #[arg(
        long,
        global = true,
        env = "ZKLOCK_TLS_CERT",
        value_name = "FILE",
        requires = "tls_key"
    )]
    tls_cert: Option<std::path::PathBuf>,
    /// The client certificate's private key (PEM); needs `--tls-cert`.
    #[arg(
        long,
        global = true,
        env = "ZKLOCK_TLS_KEY",
        value_name = "FILE",
        requires = "tls_cert"
    )]
    tls_key: Option<std::path::PathBuf>,
    /// SASL DIGEST-MD5 credentials `user:password`.
    #[arg(long, global = true, env = "ZKLOCK_SASL", value_name = "USER:PASSWORD")]
    sasl: Option<String>,
    /// Print JSON instead of text.
    #[arg(long, global = true)]
    json: bool,
    /// How long to wait for ZooKeeper before giving up.
    #[arg(long, global = true, default_value = "10s", value_parser = humantime::parse_duration)]
    timeout: Duration,
    /// The ZooKeeper session timeout to ask for (default 30s; the server may grant less): how
    /// long after this process vanishes the server frees the locks it held, and so how soon
    /// `exec` learns that a lock it holds is lost when cut off from ZooKeeper.
    #[arg(long, global = true, value_name = "DURATION", value_parser = humantime::parse_duration)]
    session_timeout: Option<Duration>,
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// The locks under the namespace, with their holders, waiters and oldest wait.
    Locks {
        /// Only locks whose name starts with this.
        #[arg(long, default_value = "")]
        prefix: String,
    },
    /// One lock's queue in order: who made each node, how long ago, its fencing token, and whom
    /// each waiter waits for.
    Show {
        /// The lock name (as given to the library, e.g. `inventory:42`).
        name: String,
    },
    /// `show`, redrawn whenever a contender comes or goes (driven by ZooKeeper watches).
    Watch {
        /// The lock name.
        name: String,
        /// Stop after this many views, at least one (default: until interrupted).
        #[arg(long, value_parser = clap::value_parser!(u64).range(1..))]
        count: Option<u64>,
    },
    /// Ask the holders of a lock to release it: write `__REVOKE__` into each holder node
    /// (Curator's revocation). Holders that listen are told; nothing is enforced.
    Revoke {
        /// The lock name.
        name: String,
    },
    /// Take a lock away from its holders: delete the nodes that hold it now (not the waiters').
    /// Each holder is told it lost the lock, and the next waiter is granted. Needs both
    /// --force and --yes; without them, lists what it would delete and exits 2.
    Unlock {
        /// The lock name.
        name: String,
        /// Delete holder nodes (an operator's override; prefer `revoke` while the holder listens).
        #[arg(long)]
        force: bool,
        /// Confirm: without it nothing is deleted.
        #[arg(long)]
        yes: bool,
    },
    /// Who leads a leader election group: participant id, node, when it joined, fencing token;
    /// exit 4 when nobody leads.
    Leader {
        /// The group name (as given to `client.election(…)` or `exec --leader`).
        group: String,
        /// Print the leader again at every change (a new leader, or none), until interrupted.
        #[arg(long)]
        watch: bool,
        /// With --watch: stop after this many views, at least one.
        #[arg(long, requires = "watch", value_parser = clap::value_parser!(u64).range(1..))]
        count: Option<u64>,
    },
    /// The singleton jobs: list them (the default), read a job's history, pause, resume or
    /// trigger it on every node, reset or remove it.
    Jobs {
        #[command(subcommand)]
        action: Option<jobs::JobsAction>,
    },
    /// Run a command while holding a lock (or, with --leader, while leading an election group):
    /// wait for it, run CMD with the fencing token in its environment, give it up when CMD
    /// exits, and stop CMD if it is lost.
    #[command(after_help = EXEC_HELP)]
    Exec(exec::args::ExecArgs),
    /// Check the deployment against what zklock's guarantees assume: the session timeout,
    /// syncLimit, the lock-delay, clocks, the server version, four-letter words, the
    /// namespace's ACL, TLS and SASL; each check passes, warns or fails, with what to change.
    #[command(after_help = doctor::HELP)]
    Doctor(doctor::DoctorArgs),
}

/// What `zklock exec --help` says after the options.
const EXEC_HELP: &str = "\
CMD sees in its environment:
  ZKLOCK_LOCK_NAME       the lock name (with --leader, the group)
  ZKLOCK_FENCING_TOKEN   the grant's fencing token (fixed-width hex, sorts like the token)
  ZKLOCK_NODE            the path of the holder's (or leader's) node in ZooKeeper
  ZKLOCK_PARTICIPANT_ID  with --leader: the participant id zklock leads as

CMD runs in a process group of its own (with the terminal, if zklock has it), and the group is
the command: SIGINT, SIGTERM and SIGHUP sent to zklock are passed on to the group; when CMD
exits, what it left running in the group gets SIGTERM, then SIGKILL after --grace, and the lock
is released once nothing of the group is left; if zklock is killed, the group is killed too.
Signals received while zklock still waits for the lock end the wait (exit code 128+N) and CMD
does not run. When the lock (or leadership) is lost while CMD runs, the group gets SIGKILL at
once if another holder may already be in (the node was deleted, the session ended), else
SIGTERM, then SIGKILL after --grace or once the server may expire the session, whichever comes
first. A revocation (zklock revoke, Curator's Revoker) gets SIGTERM and the whole --grace.

Exit codes:
  CMD's own   CMD exited
  128+N       CMD died of signal N
  123         a revocation of the lock was requested while CMD ran, and CMD was stopped
  124         the lock (or leadership) was not acquired within --wait (CMD did not run)
  125         the lock (or leadership) was lost while CMD ran, and CMD was stopped
  126         CMD could not be executed
  127         CMD was not found
  1, 2, 3     before CMD started: ZooKeeper refused a request, bad arguments, ZooKeeper
              cannot be reached within --timeout
CMD's own code can equal one of zklock's: --status-file FILE writes a JSON object whose
\"outcome\" is \"exited\" exactly when the exit code is CMD's own.";

/// Why the command failed, with the exit code it maps to.
struct Failure {
    code: u8,
    message: String,
}

impl From<LockError> for Failure {
    fn from(err: LockError) -> Self {
        let code = match err {
            LockError::Connection { .. } | LockError::SessionExpired => EXIT_UNREACHABLE,
            // The lock was not granted in time because someone holds it, not because ZooKeeper
            // is out of reach (that is `Connection`).
            LockError::Timeout { .. } => EXIT_STILL_HELD,
            LockError::Tls { .. } => EXIT_UNREACHABLE,
            LockError::InvalidName { .. } | LockError::InvalidConfig { .. } => 2,
            _ => EXIT_FAILED,
        };
        Failure {
            code,
            message: with_causes(&err),
        }
    }
}

/// The error's message followed by each of its causes (`source()`), joined by ": ": an error
/// names what failed and leaves the underlying error (an io error, a TLS or ZooKeeper error) to
/// its source, which the user needs to see as well. A cause whose text the message already ends
/// with (an error that shows its source's text itself) is not repeated.
pub(crate) fn with_causes(err: &dyn std::error::Error) -> String {
    let mut message = err.to_string();
    let mut cause = err.source();
    while let Some(err) = cause {
        let text = err.to_string();
        if !message.ends_with(&text) {
            message.push_str(": ");
            message.push_str(&text);
        }
        cause = err.source();
    }
    message
}

fn main() -> ExitCode {
    if exec::watchdog::asked(std::env::args_os().nth(1).as_deref()) {
        return exec::watchdog::run();
    }
    let cli = Cli::parse();
    let runtime = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
        Ok(runtime) => runtime,
        Err(err) => {
            eprintln!("zklock: cannot start: {err}");
            return ExitCode::from(EXIT_FAILED);
        }
    };
    match runtime.block_on(run(cli)) {
        Ok(code) => ExitCode::from(code),
        Err(failure) => {
            eprintln!("zklock: {}", failure.message);
            ExitCode::from(failure.code)
        }
    }
}

/// Runs the command; its exit code (0 but for `exec`).
async fn run(cli: Cli) -> Result<u8, Failure> {
    let mut report = exec::report::Report::default();
    let outcome = run_command(&cli, &mut report).await;
    if let Command::Exec(args) = &cli.command {
        if let Some(path) = &args.status_file {
            let (code, message) = match &outcome {
                Ok(code) => (*code, None),
                Err(failure) => (failure.code, Some(failure.message.as_str())),
            };
            if let Err(err) = report.write(path, code, message) {
                eprintln!("zklock: cannot write --status-file {}: {err}", path.display());
            }
        }
    }
    outcome
}

async fn run_command(cli: &Cli, report: &mut exec::report::Report) -> Result<u8, Failure> {
    if let Command::Exec(args) = &cli.command {
        args.check()?;
    }
    if let Command::Doctor(args) = &cli.command {
        // It opens its session itself: an ensemble it cannot reach still gets the checks that
        // need none.
        return doctor::run(cli, args).await;
    }
    let client = connect(cli).await?;
    let outcome = match &cli.command {
        Command::Locks { prefix } => locks(&client, prefix, cli.json).await.map(|()| 0),
        Command::Show { name } => show(&client, name, cli.json).await.map(|()| 0),
        Command::Revoke { name } => revoke(&client, name, cli.json).await.map(|()| 0),
        Command::Watch { name, count } => watch(&client, name, *count, cli.json).await.map(|()| 0),
        Command::Unlock { name, force, yes } => unlock::unlock(&client, name, *force, *yes, cli.json).await.map(|()| 0),
        Command::Leader { group, watch, count } => {
            leader::run(&client, group, *watch, *count, cli.json).await.map(|()| 0)
        }
        Command::Jobs { action } => jobs::run(&client, action.as_ref().unwrap_or(&jobs::JobsAction::List), cli.json)
            .await
            .map(|()| 0),
        Command::Exec(args) => exec::run(&client, args, cli.timeout, report).await,
        Command::Doctor(_) => unreachable!("doctor connects by itself"),
    };
    // Bounded: a client cut off from ZooKeeper (an `exec` whose lock was lost) would wait for
    // its deletions until it is back; the server ends the session by itself.
    let _ = tokio::time::timeout(cli.timeout, client.close()).await;
    outcome
}

async fn connect(cli: &Cli) -> Result<LockClient, Failure> {
    // A holder's node names what holds it, for `zklock show`.
    let identity = match cli.command {
        Command::Exec(_) => "zklock-exec",
        _ => "zklock-cli",
    };
    let mut builder = LockClient::builder(cli.zk.clone())
        .namespace(cli.namespace.clone())
        .connect_timeout(cli.timeout)
        .identity(identity);
    if let Some(session_timeout) = cli.session_timeout {
        builder = builder.session_timeout(session_timeout);
    }
    if let Some(digest) = &cli.digest {
        let (user, password) = credentials("--digest", digest)?;
        builder = builder.digest(user, password);
    }
    if let Some(sasl) = &cli.sasl {
        let (user, password) = credentials("--sasl", sasl)?;
        builder = builder.sasl_digest(user, password);
    }
    if let Some(ca) = &cli.tls_ca {
        let mut tls = TlsConfig::ca_file(ca)?;
        if let (Some(cert), Some(key)) = (&cli.tls_cert, &cli.tls_key) {
            tls = tls.identity_files(cert, key)?;
        }
        builder = builder.tls(tls);
    } else if cli.tls_cert.is_some() {
        return Err(Failure {
            code: 2,
            message: "--tls-cert and --tls-key need --tls-ca".into(),
        });
    }
    match tokio::time::timeout(cli.timeout, builder.connect()).await {
        Ok(connected) => Ok(connected?),
        Err(_) => Err(Failure {
            code: EXIT_UNREACHABLE,
            message: format!("no answer from ZooKeeper at {} within {:?}", cli.zk, cli.timeout),
        }),
    }
}

/// Splits `user:password`.
fn credentials<'a>(flag: &str, value: &'a str) -> Result<(&'a str, &'a str), Failure> {
    value.split_once(':').ok_or_else(|| Failure {
        code: 2,
        message: format!("{flag} takes USER:PASSWORD"),
    })
}

async fn locks(client: &LockClient, prefix: &str, as_json: bool) -> Result<(), Failure> {
    let mut rows = Vec::new();
    for name in client.lock_names().await? {
        if !name.starts_with(prefix) {
            continue;
        }
        // A lock that went away since the listing is skipped.
        if let Some(view) = client.inspect(&name).await? {
            rows.push(view);
        }
    }
    if as_json {
        let rows: Vec<_> = rows
            .iter()
            .map(|v| {
                json!({
                    "name": v.name,
                    "recipe": v.recipe,
                    "holders": v.holders.len(),
                    "waiters": v.waiters.len(),
                    "oldest_wait_ms": v.oldest_wait().map(|d| d.as_millis() as u64),
                })
            })
            .collect();
        println!("{}", serde_json::Value::Array(rows));
        return Ok(());
    }
    if rows.is_empty() {
        println!("no locks under {}", client.namespace());
        return Ok(());
    }
    println!(
        "{:<40} {:<10} {:>7} {:>7}  OLDEST WAIT",
        "LOCK", "RECIPE", "HOLDERS", "WAITERS"
    );
    for v in &rows {
        println!(
            "{:<40} {:<10} {:>7} {:>7}  {}",
            v.name,
            recipe_name(v),
            v.holders.len(),
            v.waiters.len(),
            v.oldest_wait().map_or_else(|| "-".to_owned(), age)
        );
    }
    Ok(())
}

async fn show(client: &LockClient, name: &str, as_json: bool) -> Result<(), Failure> {
    match client.inspect(name).await? {
        Some(view) => {
            print_view(&view, as_json);
            Ok(())
        }
        None => Err(Failure {
            code: EXIT_NO_SUCH_LOCK,
            message: format!(
                "no lock {name:?} under {} (no one holds or waits for it)",
                client.namespace()
            ),
        }),
    }
}

/// `revoke NAME`: asks the holders to release; exit 4 when there is no lock or no holder.
async fn revoke(client: &LockClient, name: &str, as_json: bool) -> Result<(), Failure> {
    let no_such_lock = || Failure {
        code: EXIT_NO_SUCH_LOCK,
        message: format!(
            "no lock {name:?} under {} (no one holds or waits for it)",
            client.namespace()
        ),
    };
    let (outcome, nodes, refusal) = match client.revoke(name).await? {
        RevokeOutcome::Requested { nodes } => ("requested", nodes, None),
        RevokeOutcome::NoHolder => (
            "no_holder",
            Vec::new(),
            Some(Failure {
                code: EXIT_NO_SUCH_LOCK,
                message: format!("nobody holds {name:?}: there is no holder to ask"),
            }),
        ),
        _ => ("no_such_lock", Vec::new(), Some(no_such_lock())),
    };
    if as_json {
        println!("{}", json!({ "name": name, "outcome": outcome, "nodes": nodes }));
    } else {
        for node in &nodes {
            println!("asked the holder of {node} to release {name}");
        }
    }
    refusal.map_or(Ok(()), Err)
}

async fn watch(client: &LockClient, name: &str, count: Option<u64>, as_json: bool) -> Result<(), Failure> {
    let redraw = !as_json && std::io::stdout().is_terminal();
    let mut shown = 0;
    let mut queue = client.watch_lock(name).await?;
    loop {
        let view = queue.borrow_and_update().clone();
        if redraw {
            print!("\x1b[2J\x1b[H");
        }
        match &view {
            Some(view) => print_view(view, as_json),
            None if as_json => println!(
                "{}",
                json!({ "name": name, "holders": [], "waiters": [], "exists": false })
            ),
            None => println!("lock {name}: no holder, no waiter (waiting for one)"),
        }
        let _ = std::io::stdout().flush();
        shown += 1;
        if count.is_some_and(|n| shown >= n) {
            return Ok(());
        }
        tokio::select! {
            changed = queue.changed() => if changed.is_err() {
                return Err(Failure {
                    code: EXIT_FAILED,
                    message: format!("stopped following lock {name}: the client closed"),
                });
            },
            _ = tokio::signal::ctrl_c() => return Ok(()),
        }
    }
}

fn print_view(view: &LockView, as_json: bool) {
    if as_json {
        println!("{}", serde_json::to_string(view).unwrap_or_default());
        return;
    }
    println!(
        "lock {} ({}), {}: {} holding, {} waiting",
        view.name,
        view.path,
        recipe_name(view),
        view.holders.len(),
        view.waiters.len()
    );
    for node in view.holders.iter().chain(&view.waiters) {
        print_node(node);
    }
}

fn print_node(node: &QueuedNode) {
    let d = &node.data;
    let mut who = format!("{:?}", d.client).to_lowercase();
    if let Some(identity) = &d.identity {
        who.push(' ');
        who.push_str(identity);
    }
    let mut line = format!(
        "  {:<7} {:<9} {:<48} {:<36} age {:<8} token {}",
        if node.holds { "HOLDS" } else { "waits" },
        format!("{:?}", node.side).to_lowercase(),
        node.node,
        who,
        age(node.age),
        node.token
    );
    if let Some(template) = &d.template {
        line.push_str(&format!("  template {template}"));
    }
    if let Some(ahead) = &node.waits_for {
        line.push_str(&format!("  waits for {ahead}"));
    }
    if d.revocation_requested {
        line.push_str("  revocation requested");
    }
    if let Some(since) = d.cached_since_ms {
        // By the holder's clock: a skew shows as a shorter or longer idle time, never negative.
        let idle = Duration::from_millis(u64::try_from(now_ms()).unwrap_or(0).saturating_sub(since));
        line.push_str(&format!("  cached (idle) for {}", age(idle)));
    }
    println!("{line}");
}

fn recipe_name(view: &LockView) -> String {
    serde_json::to_value(view.recipe)
        .ok()
        .and_then(|v| v.as_str().map(str::to_owned))
        .unwrap_or_default()
}

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

/// A short age: `850ms`, `12.3s`, `4m05s`, `2h10m`.
fn age(d: Duration) -> String {
    let ms = d.as_millis();
    match ms {
        0..=999 => format!("{ms}ms"),
        1_000..=59_999 => format!("{:.1}s", d.as_secs_f64()),
        60_000..=3_599_999 => format!("{}m{:02}s", ms / 60_000, (ms / 1000) % 60),
        _ => format!("{}h{:02}m", ms / 3_600_000, (ms / 60_000) % 60),
    }
}

/// The last moment RFC 3339 can write (9999-12-31T23:59:59.999Z), in ms since the epoch.
const LAST_RFC3339_MS: i64 = 253_402_300_799_999;

/// A moment in RFC 3339 form; one it cannot write (before 1970, after 9999) as milliseconds.
fn timestamp(ms: i64) -> String {
    match ms {
        0..=LAST_RFC3339_MS => {
            humantime::format_rfc3339_millis(UNIX_EPOCH + Duration::from_millis(ms as u64)).to_string()
        }
        _ => format!("{ms}ms since 1970"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn ages_are_short() {
        assert_eq!(age(Duration::from_millis(850)), "850ms");
        assert_eq!(age(Duration::from_millis(12_340)), "12.3s");
        assert_eq!(age(Duration::from_secs(245)), "4m05s");
        assert_eq!(age(Duration::from_secs(7800)), "2h10m");
        assert_eq!(timestamp(0), "1970-01-01T00:00:00.000Z");
        assert_eq!(timestamp(LAST_RFC3339_MS), "9999-12-31T23:59:59.999Z");
        assert_eq!(timestamp(LAST_RFC3339_MS + 1), "253402300800000ms since 1970");
        assert_eq!(timestamp(-5), "-5ms since 1970");
    }

    /// A TLS file that cannot be read is reported with why: the io error, which the runtime's
    /// error keeps as its source, follows the message once.
    #[test]
    fn a_failure_shows_the_error_and_its_cause_once() {
        let missing = std::env::temp_dir().join("zklock-no-such-dir/ca.pem");
        let io = std::fs::read_to_string(&missing).unwrap_err().to_string();
        let failure = Failure::from(TlsConfig::ca_file(&missing).unwrap_err());
        assert_eq!(failure.code, 2);
        assert_eq!(
            failure.message,
            format!(
                "invalid configuration: cannot read the TLS CA file {}: {io}",
                missing.display()
            )
        );
        // An error that shows its source's text itself does not show it twice.
        let refused = Failure::from(LockError::ZooKeeper {
            op: "create",
            source: zklock_runtime::zk::Error::NoAuth,
        });
        assert_eq!(
            refused.message,
            format!("ZooKeeper error on create: {}", zklock_runtime::zk::Error::NoAuth)
        );
    }

    fn parse_timeout(timeout: &str) -> Result<Duration, clap::Error> {
        Cli::try_parse_from(["zklock", &format!("--timeout={timeout}"), "jobs"]).map(|cli| cli.timeout)
    }

    proptest! {
        /// Any tick a record can hold is shown, never a panic.
        #[test]
        fn any_moment_is_shown(ms: i64) {
            prop_assert!(!timestamp(ms).is_empty());
        }

        #[test]
        fn timeouts_in_any_unit_are_read(n in 0..1_000_000u64, unit in prop::sample::select(vec![("ms", 1), ("s", 1_000), ("m", 60_000), ("h", 3_600_000)])) {
            let timeout = parse_timeout(&format!("{n}{}", unit.0)).map_err(|e| TestCaseError::fail(e.to_string()))?;
            prop_assert_eq!(timeout, Duration::from_millis(n * unit.1));
        }

        /// A bad `--timeout` is a usage error (exit code 2) naming the flag, never a panic.
        #[test]
        fn any_timeout_is_read_or_refused(timeout in prop_oneof![any::<String>(), "-?[0-9]{1,30}[a-zµ. ]{0,6}"]) {
            if let Err(err) = parse_timeout(&timeout) {
                prop_assert_eq!(err.exit_code(), 2);
                prop_assert!(err.to_string().contains("--timeout"), "{}", err);
            }
        }

        #[test]
        fn credentials_split_at_the_first_colon(value in any::<String>()) {
            match credentials("--digest", &value) {
                Ok((user, password)) => {
                    prop_assert!(!user.contains(':'));
                    prop_assert_eq!(format!("{user}:{password}"), value);
                }
                Err(failure) => {
                    prop_assert!(!value.contains(':'));
                    prop_assert_eq!(failure.code, 2);
                }
            }
        }
    }
}
