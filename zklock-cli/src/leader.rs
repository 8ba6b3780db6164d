//! `zklock leader GROUP [--watch] [--count N]`: who leads a leader election group, read with
//! the library's `Election::leader` and followed with `Election::watch_leader`.

use std::io::Write;
use std::time::Duration;

use serde_json::{json, Value};
use zklock_runtime::{Election, LockClient, Member};

use crate::{age, now_ms, timestamp, Failure, EXIT_FAILED, EXIT_NO_SUCH_LOCK};

/// `leader GROUP [--watch [--count N]]`.
pub(crate) async fn run(
    client: &LockClient,
    group: &str,
    follow: bool,
    count: Option<u64>,
    as_json: bool,
) -> Result<(), Failure> {
    match follow {
        true => watch(client, group, count, as_json).await,
        false => show(client, group, as_json).await,
    }
}

/// `leader GROUP`: prints the leader; exit 4 when nobody leads (no member, or no group).
async fn show(client: &LockClient, group: &str, as_json: bool) -> Result<(), Failure> {
    let election = client.election(group)?;
    let leader = election.leader().await?;
    if as_json || leader.is_some() {
        print(&election, leader.as_ref(), as_json);
    }
    match leader {
        Some(_) => Ok(()),
        None => Err(Failure {
            code: EXIT_NO_SUCH_LOCK,
            message: format!(
                "nobody leads {group:?} under {}: the group has no member",
                client.namespace()
            ),
        }),
    }
}

/// `leader GROUP --watch`: prints the leader, then again at every change of leader (a new
/// leader, or none), until interrupted or `count` views have been printed.
async fn watch(client: &LockClient, group: &str, count: Option<u64>, as_json: bool) -> Result<(), Failure> {
    let election = client.election(group)?;
    let mut leader = election.watch_leader().await?;
    let mut shown = 0;
    loop {
        let now = leader.borrow_and_update().clone();
        print(&election, now.as_ref(), as_json);
        let _ = std::io::stdout().flush();
        shown += 1;
        if count.is_some_and(|n| shown >= n) {
            return Ok(());
        }
        tokio::select! {
            changed = leader.changed() => {
                if changed.is_err() {
                    return Err(Failure {
                        code: EXIT_FAILED,
                        message: format!("stopped following {group:?}: the client was closed"),
                    });
                }
            }
            _ = tokio::signal::ctrl_c() => return Ok(()),
        }
    }
}

/// One view: a line of text, or one JSON object per line.
fn print(election: &Election, leader: Option<&Member>, as_json: bool) {
    if as_json {
        let view = json!({
            "group": election.group(),
            "path": election.path(),
            "leader": leader.map(member_json),
        });
        println!("{view}");
        return;
    }
    let group = format!("group {} ({})", election.group(), election.path());
    let Some(m) = leader else {
        println!("{group}: no leader (no member)");
        return;
    };
    let participant = if m.participant.is_empty() {
        "(no participant id)"
    } else {
        &m.participant
    };
    println!(
        "{group}: led by {participant}  node {}  joined {} ({} ago)  token {}  session {:#x}",
        m.node,
        timestamp(m.joined_ms),
        age(Duration::from_millis(now_ms().saturating_sub(m.joined_ms).max(0) as u64)),
        m.token,
        m.session,
    );
}

fn member_json(m: &Member) -> Value {
    json!({
        "participant": m.participant,
        "node": m.node,
        "token": m.token.to_string(),
        "session": format!("{:#x}", m.session),
        "joined_ms": m.joined_ms,
        "joined": timestamp(m.joined_ms),
    })
}
