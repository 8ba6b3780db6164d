//! `zklock unlock NAME --force --yes`: takes a lock away from its holders by deleting their
//! nodes, for operators clearing a lock whose holder is stuck.
//!
//! The holders are found as `show` finds them (`LockClient::inspect`). Only holder nodes are
//! deleted, never a waiter's. Each is deleted only if it is still the node that was judged a
//! holder (same creation zxid) and with the version just read, so a node that changed
//! meanwhile is left alone and reported. A holder node stays a holder until it is deleted
//! (nodes only ever leave the queue ahead of it), so what is deleted held the lock until then.

use serde_json::{json, Value};
use zklock_runtime::{zk, LockClient, QueuedNode, Side};

use crate::{age, Failure, EXIT_FAILED, EXIT_NO_SUCH_LOCK};

/// The directory of a semaphore's lease nodes, below the semaphore's (Curator's
/// `InterProcessSemaphoreV2` layout).
const LEASES_DIR: &str = "leases";

/// One holder node to delete.
struct Target<'a> {
    path: String,
    node: &'a QueuedNode,
}

/// What became of one holder node.
enum Fate {
    /// Deleted by this command.
    Deleted,
    /// Gone before the delete reached it: its holder released it (or its session ended).
    Gone,
    /// Not deleted: the node is no longer the one read as a holder, or its data changed
    /// between the check and the delete.
    Changed(&'static str),
    /// The server refused the delete, or the connection broke (then the outcome is unknown).
    Failed(zk::Error),
}

pub(crate) async fn unlock(
    client: &LockClient,
    name: &str,
    force: bool,
    yes: bool,
    as_json: bool,
) -> Result<(), Failure> {
    let Some(view) = client.inspect(name).await? else {
        if as_json {
            println!("{}", json!({ "name": name, "outcome": "no_such_lock", "deleted": [] }));
        }
        return Err(Failure {
            code: EXIT_NO_SUCH_LOCK,
            message: format!(
                "no lock {name:?} under {} (no one holds or waits for it): nothing to delete",
                client.namespace()
            ),
        });
    };
    // A semaphore's acquirer holds only the mutex over acquirers, for a moment: not a holder.
    let targets: Vec<Target> = view
        .holders
        .iter()
        .filter(|h| h.side != Side::Acquirer)
        .map(|h| Target {
            path: match h.side {
                Side::Lease => format!("{}/{LEASES_DIR}/{}", view.path, h.node),
                _ => format!("{}/{}", view.path, h.node),
            },
            node: h,
        })
        .collect();
    if targets.is_empty() {
        if as_json {
            println!("{}", json!({ "name": name, "outcome": "no_holder", "deleted": [] }));
        }
        return Err(nobody_holds(name));
    }
    if !(force && yes) {
        if as_json {
            let nodes: Vec<Value> = targets.iter().map(node_json).collect();
            println!(
                "{}",
                json!({ "name": name, "outcome": "not_confirmed", "would_delete": nodes })
            );
        }
        let missing = match (force, yes) {
            (false, false) => "--force and --yes",
            (false, true) => "--force",
            _ => "--yes",
        };
        let listed: Vec<String> = targets.iter().map(|t| format!("  {}", describe(t))).collect();
        return Err(Failure {
            code: 2,
            message: format!(
                "not unlocking {name:?} without {missing}. It would delete the node(s) holding it, \
                 taking the lock away from their holders at once (each is told it lost the lock, \
                 and the next waiter is granted):\n{}\nPrefer `zklock revoke {name}` while the \
                 holder is alive and listens.",
                listed.join("\n")
            ),
        });
    }

    let zk = client.zookeeper().await?;
    let mut fates = Vec::with_capacity(targets.len());
    for target in &targets {
        fates.push(delete_holder(&zk, target).await);
    }
    // The handle keeps the session open past `close`.
    drop(zk);

    let deleted: Vec<&Target> = targets
        .iter()
        .zip(&fates)
        .filter(|(_, f)| matches!(f, Fate::Deleted))
        .map(|(t, _)| t)
        .collect();
    let mut problems = Vec::new();
    let mut skipped = Vec::new();
    for (target, fate) in targets.iter().zip(&fates) {
        match fate {
            Fate::Deleted => {}
            Fate::Gone => skipped.push(json!({ "path": target.path, "reason": "released before it could be deleted" })),
            Fate::Changed(why) => {
                skipped.push(json!({ "path": target.path, "reason": why }));
                problems.push(format!("{}: not deleted: {why}", target.path));
            }
            Fate::Failed(err) => {
                skipped.push(json!({ "path": target.path, "reason": err.to_string() }));
                problems.push(format!(
                    "{}: not deleted ({err}); see `zklock show {name}`",
                    target.path
                ));
            }
        }
    }
    let outcome = if !deleted.is_empty() {
        "deleted"
    } else if problems.is_empty() {
        "no_holder"
    } else {
        "failed"
    };
    if as_json {
        let nodes: Vec<Value> = deleted.iter().map(|t| node_json(t)).collect();
        println!(
            "{}",
            json!({ "name": name, "outcome": outcome, "deleted": nodes, "not_deleted": skipped })
        );
    } else {
        for target in &deleted {
            println!("deleted {}", describe(target));
        }
    }
    if !problems.is_empty() {
        return Err(Failure {
            code: EXIT_FAILED,
            message: format!(
                "not every holder node of {name:?} was deleted:\n  {}",
                problems.join("\n  ")
            ),
        });
    }
    if deleted.is_empty() {
        return Err(nobody_holds(name));
    }
    Ok(())
}

fn nobody_holds(name: &str) -> Failure {
    Failure {
        code: EXIT_NO_SUCH_LOCK,
        message: format!("nobody holds {name:?}: nothing to delete"),
    }
}

/// Deletes `target` if it is still the node read as a holder, at the version read just before.
async fn delete_holder(zk: &zk::Client, target: &Target<'_>) -> Fate {
    let stat = match zk.check_stat(&target.path).await {
        Ok(Some(stat)) => stat,
        Ok(None) => return Fate::Gone,
        Err(err) => return Fate::Failed(err),
    };
    if stat.czxid != target.node.token.zxid() || stat.ephemeral_owner != target.node.session {
        return Fate::Changed("another node has taken its path since it was read");
    }
    match zk.delete(&target.path, Some(stat.version)).await {
        Ok(()) => Fate::Deleted,
        Err(zk::Error::NoNode) => Fate::Gone,
        Err(zk::Error::BadVersion) => Fate::Changed("its data changed while it was being deleted"),
        Err(err) => Fate::Failed(err),
    }
}

/// Who a holder node belongs to, in one line.
fn describe(target: &Target) -> String {
    let node = target.node;
    let d = &node.data;
    let mut who = format!("{:?}", d.client).to_lowercase();
    if let Some(identity) = &d.identity {
        who.push(' ');
        who.push_str(identity);
    }
    if let (Some(host), Some(pid)) = (&d.host, d.pid) {
        who.push_str(&format!(" (host {host}, pid {pid})"));
    }
    if d.revocation_requested {
        who.push_str(" (revocation requested)");
    }
    if d.cached_since_ms.is_some() {
        who.push_str(" (cached, idle)");
    }
    format!(
        "{} held by {who}, session {:#x}, token {}, age {}",
        target.path,
        node.session,
        node.token,
        age(node.age)
    )
}

fn node_json(target: &Target) -> Value {
    let node = target.node;
    json!({
        "path": target.path,
        "side": node.side,
        "client": node.data.client,
        "identity": node.data.identity,
        "host": node.data.host,
        "pid": node.data.pid,
        "session": format!("{:#x}", node.session),
        "token": node.token.to_string(),
        "age_ms": node.age.as_millis() as u64,
    })
}
