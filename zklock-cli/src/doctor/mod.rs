//! `zklock doctor`: checks a deployment against what docs/safety.md assumes, and says what to
//! change. It asks every server of the connect string the four-letter words `ruok`, `srvr`
//! and `conf` (plain TCP), opens a session as every command does, reads the namespace's ACL,
//! and creates (and deletes) one ephemeral node to compare clocks.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use zklock_runtime::{zk, LockClient};

use super::{Cli, Failure};

mod output;
mod server;
mod timing;
mod words;

use output::{Check, Status};
use server::AclFinding;
use timing::{ClockSample, ServerTiming, Session};

/// Exit code of `doctor`: at least one check failed.
pub const EXIT_CHECK_FAILED: u8 = 5;
/// The session timeout the library asks for when `--session-timeout` is not given.
const DEFAULT_SESSION_TIMEOUT: Duration = Duration::from_secs(30);
/// The longest wait for one four-letter word.
const WORD_TIMEOUT: Duration = Duration::from_secs(5);

/// What `zklock doctor --help` says after the options.
pub const HELP: &str = "\
Checks, each printed as pass, warn or fail with what was found and what to change:
  connection          a session could be opened
  session-timeout     the timeout the server granted, against the one asked (--session-timeout),
                      tickTime, min/maxSessionTimeout, and when a cut-off holder is told of a loss
  sync-limit          syncLimit × tickTime against the session timeout (a cut-off follower)
  lock-delay          --lock-delay against how long an old holder may still act
  clock               this host's clock against ZooKeeper's
  server-version      releases known to keep ephemeral nodes, and end-of-life lines
  four-letter-words   whether ruok, srvr and conf are answered (4lw.commands.whitelist)
  namespace-acl       whether anyone may delete under the namespace
  transport-security  TLS or SASL in use (--tls-ca, --sasl) for a remote ensemble

Exit codes: 0 no check failed (warnings allowed), 5 a check failed, 3 ZooKeeper cannot be
reached (1 credentials refused, 2 bad arguments); the checks that could be made are printed
in every case but 2.";

/// `zklock doctor`'s own options.
#[derive(Debug, clap::Args)]
pub struct DoctorArgs {
    /// The lock-delay your contenders use (`Lock::with_lock_delay`, `lock_delay = "…"`, `exec
    /// --lock-delay`), to check it against the session's timing.
    #[arg(long, value_name = "DURATION", value_parser = humantime::parse_duration)]
    pub lock_delay: Option<Duration>,
}

/// Runs every check, prints them, and returns the exit code.
pub async fn run(cli: &Cli, args: &DoctorArgs) -> Result<u8, Failure> {
    let addresses = words::addresses(&cli.zk);
    let word_timeout = cli.timeout.min(WORD_TIMEOUT);
    // Every server is asked at once, while the session opens.
    let asking: Vec<_> = addresses
        .iter()
        .map(|address| tokio::spawn(words::probe(address.clone(), word_timeout)))
        .collect();
    let client = match super::connect(cli).await {
        // Bad arguments: there is nothing to check.
        Err(failure) if failure.code == 2 => return Err(failure),
        client => client,
    };
    let mut probes = Vec::new();
    for (address, asked) in addresses.iter().zip(asking) {
        probes.push(
            asked
                .await
                .unwrap_or_else(|e| words::Probe::unanswered(address.clone(), e.to_string())),
        );
    }
    let servers = ServerTiming::from_probes(&probes);
    let asked = cli.session_timeout.unwrap_or(DEFAULT_SESSION_TIMEOUT);
    let mut checks = Vec::new();
    let (session, acl, sample) = match &client {
        Ok(client) => {
            checks.push(Check::pass(
                "connection",
                format!(
                    "session 0x{:x} opened through {}",
                    client.session_id().unwrap_or_default(),
                    cli.zk
                ),
            ));
            let session = client
                .session_timeout()
                .zip(client.loss_after())
                .map(|(granted, loss_after)| Session {
                    asked,
                    granted,
                    loss_after,
                });
            let (acl, sample) = look(client, cli.timeout).await;
            (session, acl, sample)
        }
        Err(failure) => {
            checks.push(Check::fail(
                "connection",
                failure.message.clone(),
                "check --zk, the servers, and the TLS and SASL options; the checks below use what the \
                 servers answered without a session",
            ));
            (None, AclFinding::NotChecked, Err("no session was opened".to_owned()))
        }
    };
    let rtt = sample
        .as_ref()
        .ok()
        .map(|s| Duration::from_millis(s.rtt_ms.max(0) as u64));
    checks.push(timing::session_timeout(session.as_ref(), &servers));
    checks.push(timing::sync_limit(session.as_ref(), &servers));
    checks.push(timing::lock_delay(args.lock_delay, session.as_ref(), &servers, rtt));
    checks.push(timing::clock(sample));
    checks.push(server::version(&probes));
    checks.push(server::four_letter_words(&probes));
    checks.push(server::namespace_acl(&acl));
    checks.push(server::transport(
        cli.tls_ca.is_some(),
        cli.sasl.is_some(),
        cli.digest.is_some(),
        &addresses,
    ));
    output::print(&cli.zk, &cli.namespace, &checks, cli.json);
    if let Ok(client) = &client {
        let _ = tokio::time::timeout(cli.timeout, client.close()).await;
    }
    match client {
        Err(failure) => Ok(failure.code),
        Ok(_) if output::worst(&checks) == Status::Fail => Ok(EXIT_CHECK_FAILED),
        Ok(_) => Ok(0),
    }
}

/// Reads the namespace's ACL and compares clocks, each bounded by `limit`.
async fn look(client: &LockClient, limit: Duration) -> (AclFinding, Result<ClockSample, String>) {
    let namespace = client.namespace().to_owned();
    let zk = match tokio::time::timeout(limit, client.zookeeper()).await {
        Ok(Ok(zk)) => zk,
        Ok(Err(err)) => return (AclFinding::NotChecked, Err(crate::with_causes(&err))),
        Err(_) => return (AclFinding::NotChecked, Err("no session within --timeout".into())),
    };
    let acl = match tokio::time::timeout(limit, namespace_acl(&zk, &namespace)).await {
        Ok(finding) => finding,
        Err(_) => AclFinding::Unreadable {
            path: namespace.clone(),
            error: zk::Error::Timeout,
        },
    };
    let parents = match &acl {
        AclFinding::Missing { ancestor, .. } => vec![ancestor.clone()],
        _ => vec![namespace.clone(), parent(&namespace).to_owned()],
    };
    let sample = match tokio::time::timeout(limit, compare_clocks(&zk, &parents)).await {
        Ok(sample) => sample,
        Err(_) => Err("no answer within --timeout".into()),
    };
    (acl, sample)
}

/// The parent of an absolute path (`/` for a top-level node).
fn parent(path: &str) -> &str {
    match path.rfind('/') {
        Some(0) | None => "/",
        Some(i) => &path[..i],
    }
}

/// The namespace's ACL, or that of its nearest existing ancestor when it does not exist.
async fn namespace_acl(zk: &zk::Client, namespace: &str) -> AclFinding {
    let mut path = namespace.to_owned();
    loop {
        match zk.get_acl(&path).await {
            Ok((acls, _)) if path == namespace => {
                return AclFinding::Found { path, acls };
            }
            Ok((acls, _)) => {
                return AclFinding::Missing {
                    path: namespace.to_owned(),
                    ancestor: path,
                    acls,
                }
            }
            Err(zk::Error::NoNode) if path != "/" => path = parent(&path).to_owned(),
            Err(error) => return AclFinding::Unreadable { path, error },
        }
    }
}

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

/// How many times the clocks are compared; the comparison with the shortest round trip counts.
const CLOCK_SAMPLES: usize = 3;

/// Compares clocks under the first of `parents` that lets the doctor create a node there,
/// [`CLOCK_SAMPLES`] times; the sample with the shortest round trip is the most precise.
async fn compare_clocks(zk: &zk::Client, parents: &[String]) -> Result<ClockSample, String> {
    let mut refused = Vec::new();
    for dir in parents {
        let mut best: Option<ClockSample> = None;
        for _ in 0..CLOCK_SAMPLES {
            match clock_sample(zk, dir).await {
                Ok(sample) => {
                    best = Some(match best {
                        Some(b) if b.rtt_ms <= sample.rtt_ms => b,
                        _ => sample,
                    })
                }
                Err(Sampling::Failed(why)) if best.is_none() => return Err(why),
                Err(Sampling::Refused(why)) if best.is_none() => {
                    refused.push(why);
                    break;
                }
                // A later sample that went wrong: the earlier ones stand.
                Err(_) => break,
            }
        }
        if let Some(sample) = best {
            return Ok(sample);
        }
    }
    Err(format!("no node could be created ({})", refused.join("; ")))
}

/// Why a clock sample was not taken.
enum Sampling {
    /// `dir` does not take the node (no permission, gone, ephemeral): try the next.
    Refused(String),
    /// Something else went wrong.
    Failed(String),
}

/// Creates an ephemeral node in `dir`, compares its `ctime` (stamped by the leader's clock)
/// with this host's clock before and after the create, and deletes it.
async fn clock_sample(zk: &zk::Client, dir: &str) -> Result<ClockSample, Sampling> {
    let name = format!(
        "zklock-doctor-{}-{}",
        std::process::id(),
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.subsec_nanos())
    );
    let path = if dir == "/" {
        format!("/{name}")
    } else {
        format!("{dir}/{name}")
    };
    let options = zk::CreateMode::Ephemeral.with_acls(zk::Acls::anyone_all());
    let before = now_ms();
    let created = zk.create(&path, b"", &options).await;
    let after = now_ms();
    let mut stat = match created {
        Ok((stat, _)) => stat,
        Err(err @ (zk::Error::NoAuth | zk::Error::NoNode | zk::Error::NoChildrenForEphemerals)) => {
            return Err(Sampling::Refused(format!("{path}: {err}")))
        }
        Err(err) => return Err(Sampling::Failed(format!("creating {path}: {err}"))),
    };
    if stat.is_invalid() {
        // Servers before 3.5 answer a create without its stat.
        stat = zk
            .get_data(&path)
            .await
            .map_err(|e| Sampling::Failed(format!("reading {path}: {e}")))?
            .1;
    }
    let _ = zk.delete(&path, None).await;
    Ok(ClockSample {
        offset_ms: stat.ctime - (before + after) / 2,
        rtt_ms: after - before,
    })
}

#[cfg(test)]
mod tests;
