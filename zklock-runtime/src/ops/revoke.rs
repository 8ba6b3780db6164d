//! Asking the holders of a lock to release it: Curator's revocation
//! (`Revoker.attemptRevoke`), which writes `__REVOKE__` into a holder's node. Holders that
//! listen (zklock's [`LockGuard::revoked`](crate::LockGuard::revoked), Curator's
//! `makeRevocable` listener) are told; nothing is enforced.

use serde::Serialize;
use zookeeper_client as zk;

use crate::client::LockClient;
use crate::connection::session::Session;
use crate::engine::rules::LEASES_DIR;
use crate::error::{is_transient, LockError};
use crate::node_data::REVOKE_MESSAGE;
use crate::ops::inspect::{RecipeKind, Side};

/// What [`LockClient::revoke`] did.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "outcome", rename_all = "snake_case")]
#[non_exhaustive]
pub enum RevokeOutcome {
    /// The request was written into the node of every current holder (full paths, in queue
    /// order). A holder that listens is told; whether and when it releases is its choice.
    Requested {
        /// The holder nodes asked.
        nodes: Vec<String>,
    },
    /// The lock exists, but nobody holds it at the moment (or its holders released it while
    /// being asked): there was nobody to ask.
    NoHolder,
    /// The lock has no directory: nobody has used it lately.
    NoSuchLock,
}

impl LockClient {
    /// Asks the current holders of the lock `name` to release it: writes `__REVOKE__` into
    /// each holder node, found as [`inspect`](Self::inspect) finds holders. This is Curator's
    /// revocation format, so Curator holders that made their lock revocable are asked too.
    /// Semaphore acquirers (queued for the mutex over acquirers) are left alone; lease holders
    /// are asked like lock holders. A leader election group cannot be revoked
    /// ([`LockError::InvalidConfig`]): its members' nodes hold the participant ids that every
    /// member reads, which the request would overwrite (Curator's `LeaderLatch` has no
    /// revocation either).
    ///
    /// Every holder is asked, whatever happens to the others' requests; a request the server
    /// refuses (the holder's node does not let this client write it, say) makes the result
    /// [`LockError::RevokeIncomplete`], which names the holders that were asked and those that
    /// were not. Requests cut by a connection loss are sent again once reconnected (asking
    /// twice is asking once).
    ///
    /// Revocation is a request: a holder that does not listen keeps the lock, and one that
    /// does decides what to do ([`LockGuard::revoked`](crate::LockGuard::revoked), the
    /// attribute's `on_revoke`).
    ///
    /// # Cancel safety
    ///
    /// Cancel safe in that nothing is left half done on this side; requests already sent still
    /// reach their holders.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn demo(client: zklock_runtime::LockClient) -> Result<(), zklock_runtime::LockError> {
    /// use zklock_runtime::RevokeOutcome;
    ///
    /// match client.revoke("nightly-export").await? {
    ///     RevokeOutcome::Requested { nodes } => println!("asked {} holder(s)", nodes.len()),
    ///     RevokeOutcome::NoHolder => println!("nobody holds it"),
    ///     RevokeOutcome::NoSuchLock => println!("no such lock"),
    ///     _ => {}
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn revoke(&self, name: &str) -> Result<RevokeOutcome, LockError> {
        let Some(view) = self.inspect(name).await? else {
            return Ok(RevokeOutcome::NoSuchLock);
        };
        if view.recipe == RecipeKind::Election {
            return Err(LockError::invalid_config(format!(
                "`{name}` is a leader election group, not a lock: revocation would overwrite the participant ids its members read"
            )));
        }
        let nodes: Vec<String> = view
            .holders
            .iter()
            .filter(|h| h.side != Side::Acquirer)
            .map(|h| match h.side {
                Side::Lease => format!("{}/{LEASES_DIR}/{}", view.path, h.node),
                _ => format!("{}/{}", view.path, h.node),
            })
            .collect();
        if nodes.is_empty() {
            return Ok(RevokeOutcome::NoHolder);
        }
        let session = self.session(None).await?;
        let (asked, refused) = ask(&session, nodes).await;
        if !refused.is_empty() {
            return Err(LockError::RevokeIncomplete {
                name: name.to_owned(),
                asked,
                refused,
            });
        }
        if asked.is_empty() {
            return Ok(RevokeOutcome::NoHolder);
        }
        tracing::info!(lock = %name, nodes = ?asked, "revocation requested");
        Ok(RevokeOutcome::Requested { nodes: asked })
    }
}

/// Writes the revocation request into each of `nodes`, all at once, and again into those cut
/// by a connection loss once reconnected. Returns the nodes asked, and the nodes that could not
/// be asked with why; a node gone meanwhile (its holder released) is in neither.
async fn ask(session: &Session, nodes: Vec<String>) -> (Vec<String>, Vec<String>) {
    let (mut asked, mut refused) = (Vec::with_capacity(nodes.len()), Vec::new());
    let mut pending = nodes;
    while !pending.is_empty() {
        let zk = match session.zk() {
            Ok(zk) => zk,
            Err(closed) => {
                refused.extend(pending.drain(..).map(|node| format!("{node}: {closed}")));
                break;
            }
        };
        let writes =
            futures_util::future::join_all(pending.iter().map(|node| zk.set_data(node, REVOKE_MESSAGE, None))).await;
        drop(zk);
        let mut cut = Vec::new();
        for (node, written) in pending.into_iter().zip(writes) {
            match written {
                Ok(_) => asked.push(node),
                // Released between the read and the write: nobody left to ask there.
                Err(zk::Error::NoNode) => {}
                Err(err) if is_transient(&err) => cut.push(node),
                Err(err) => refused.push(format!("{node}: {err}")),
            }
        }
        if !cut.is_empty() && !session.wait_to_retry().await {
            refused.extend(
                cut.drain(..)
                    .map(|node| format!("{node}: the session ended before it could be asked")),
            );
        }
        pending = cut;
    }
    (asked, refused)
}
