//! The contender queue every recipe shares (the ZooKeeper lock recipe).
//!
//! 1. Create `<dir>/_c_<uuid>-<node name>` as EPHEMERAL_SEQUENTIAL, and send the listing of
//!    `<dir>` right behind it without waiting: ZooKeeper answers one session's requests in
//!    order, so the listing includes the new node and the pair costs one round trip. When the
//!    session can prove the new node alone ([`crate::engine::alone`]), the listing is left out.
//! 2. Order the children by sequence number and ask the [`Rule`] whether we may go.
//! 3. If not, watch only the contender the rule names (no herd), and when it is deleted either
//!    go at once (it was the last blocker) or list again.
//!
//! The lock directory is a CONTAINER node, created on demand, so the server reaps it once it is
//! empty. Everything that can fail midway leaves cleanup to [`Contending`]'s `Drop`.
//!
//! This is the recipe on one session and nothing else: the orchestrator ([`crate::lock`])
//! decides about reentrancy, the in-process queue and new sessions, and hands down a
//! [`Recipe`] with what the recipe needs.

use std::sync::Arc;
use std::time::{Duration, Instant};

use tracing::debug;
use zookeeper_client as zk;

use crate::connection::session::Mark;
use crate::connection::session::Session;
use crate::engine::cleanup::Cleanup;
use crate::engine::lock_delay::{Interrupted, Vanished};
use crate::engine::rules::{queue_order, Decision, Rule};
use crate::error::LockError;
use crate::error::{is_session_over, is_transient};
use crate::node_data::Holder;

/// What the recipe needs to know about one lock; handed down by the orchestrator
/// ([`crate::lock`]), so the recipe never reaches back into the client.
pub(crate) struct Recipe<'a> {
    /// The lock directory.
    pub dir: &'a str,
    /// The name part of contender nodes, between the protected prefix and the sequence number
    /// (Curator's "lock name": `lock-`, `__READ__`, `__WRIT__`, `lease-`).
    pub node_name: &'a str,
    /// The ACL of the lock directory and of contender nodes.
    pub acls: zk::Acls<'a>,
    /// Where abandoned contenders are removed.
    pub cleanup: &'a Cleanup,
    /// Exclusive locks: a contender proven alone (see [`crate::engine::alone`]) is granted without
    /// listing the directory.
    pub skip_listing_when_alone: bool,
    /// Who contender nodes say they belong to ([`crate::node_data`]).
    pub holder: &'a Holder,
    /// The lock's name template, recorded in contender nodes.
    pub template: Option<&'a str>,
    /// Leader election: contender nodes hold this participant id alone, as Curator's
    /// `LeaderLatch` writes it, instead of the holder record.
    pub participant: Option<&'a str>,
    /// The lock's lock-delay ([`crate::engine::lock_delay`]): contender nodes' deletions are
    /// marked, and a waiter whose predecessor vanished unmarked waits this long once its turn
    /// comes.
    pub lock_delay: Option<Duration>,
}

/// A contender node the rule let go.
pub(crate) struct Granted {
    /// The node's full path.
    pub node_path: String,
    /// The node's creation zxid: the grant's fencing token.
    pub czxid: i64,
    /// Whether the directory was listed for this grant (false: proven alone without).
    pub listed: bool,
}

/// Why one attempt on one session did not produce a grant.
pub(crate) enum Failed {
    /// The session ended (or our node vanished with it); start over on a new one.
    SessionEnded,
    /// The deadline passed while waiting for other holders.
    TimedOut,
    /// Give up with this error.
    Error(LockError),
}

/// Maps a ZooKeeper error inside an attempt.
pub(crate) fn failed(op: &'static str, err: zk::Error) -> Failed {
    if is_session_over(&err) {
        Failed::SessionEnded
    } else {
        Failed::Error(LockError::zk(op, err))
    }
}

/// A contender node that is ours until granted. Dropping it before [`disarm`](Self::disarm)
/// (error, timeout, cancellation) hands its removal to the background.
pub(crate) struct Contending<'a> {
    cleanup: &'a Cleanup,
    session: Arc<Session>,
    dir: String,
    protect: String,
    node: Option<String>,
    armed: bool,
    /// The lock has a lock-delay: once granted, the node's deletion is a clean release.
    marks: bool,
}

impl<'a> Contending<'a> {
    /// Creates our contender node in `recipe.dir` (listing the directory in the same round
    /// trip) and owns it until [`disarm`](Self::disarm)ed. Returns the node's name, its stat
    /// and the listing.
    pub async fn create(
        recipe: &Recipe<'a>,
        session: &Arc<Session>,
    ) -> Result<(Contending<'a>, Granted, Vec<String>), Failed> {
        let protect = format!("_c_{}-", uuid::Uuid::new_v4());
        let mut contending = Contending {
            cleanup: recipe.cleanup,
            session: session.clone(),
            dir: recipe.dir.to_owned(),
            protect: protect.clone(),
            node: None,
            armed: true,
            marks: recipe.lock_delay.is_some(),
        };
        // The node is recorded in `contending` as soon as it exists, so a listing that fails
        // after the create removes it by name (a refused listing could not find it by prefix).
        let created = create_and_list(recipe, session, &protect, &mut contending.node).await?;
        session.saw_server_time(created.stat.ctime);
        let Created {
            ours,
            stat,
            children,
            listed,
        } = created;
        let granted = Granted {
            node_path: format!("{}/{ours}", recipe.dir),
            czxid: stat.czxid,
            listed,
        };
        Ok((contending, granted, children))
    }

    /// The node's name (no directory).
    pub fn name(&self) -> &str {
        self.node.as_deref().unwrap_or_default()
    }

    /// The node is granted: it is no longer removed when this drops, and for a lock with a
    /// lock-delay its deletion, whenever it comes, is a clean release.
    pub fn disarm(mut self) {
        self.armed = false;
        if let (true, Some(node)) = (self.marks, &self.node) {
            self.session.mark_deletion(&format!("{}/{node}", self.dir), Mark::Clean);
        }
    }
}

impl Drop for Contending<'_> {
    fn drop(&mut self) {
        if !self.armed || !self.session.is_usable() {
            return;
        }
        self.cleanup.spawn_removal(
            &self.session,
            std::mem::take(&mut self.dir),
            std::mem::take(&mut self.protect),
            self.node.take(),
        );
    }
}

/// One attempt on one session: creates our contender node and waits until the rule lets it go
/// or `deadline` passes. Dropping the future (or failing) removes the node in the background.
/// What the contenders of the lock learned of holders that vanished ahead of them is read from
/// and told to `vanished` ([`crate::engine::lock_delay`]).
pub(crate) async fn attempt(
    recipe: &Recipe<'_>,
    rule: &dyn Rule,
    session: &Arc<Session>,
    deadline: Option<Instant>,
    vanished: &Vanished,
) -> Result<Granted, Failed> {
    let dir = recipe.dir;
    let (contending, granted, mut children) = Contending::create(recipe, session).await?;
    loop {
        let queue = queue_order(children);
        let Some(index) = queue.iter().position(|c| c.name == contending.name()) else {
            // Our node is gone: its session ended under us (or an operator deleted it).
            debug!(node = %granted.node_path, "contender node vanished");
            return Err(Failed::SessionEnded);
        };
        let (on, last_blocker) = match rule.decide(&queue, index) {
            Decision::Go => {
                vanished.wait_out(recipe.lock_delay, session, deadline).await?;
                contending.disarm();
                return Ok(granted);
            }
            Decision::Wait { on, last_blocker } => (on, last_blocker),
        };
        if deadline.is_some_and(|d| Instant::now() >= d) {
            return Err(Failed::TimedOut);
        }
        let blocker = format!("{dir}/{}", queue[on].name);
        debug!(node = %granted.node_path, waits_for = %blocker, "waiting");
        vanished.waiting_for(recipe.lock_delay, session, &granted.node_path, &blocker);
        // A read with a watch, not an existence check: on a node already gone a read leaves
        // no watch behind, where an existence check would leave one for the node's creation,
        // which the client library then removes with a request of its own. And a node this
        // session may not read is refused (NoAuth, an error at once): an existence watch on it
        // would be set but never fire, as ZooKeeper notifies no session of a node it may not
        // read.
        let watched = handle(session)?.get_and_watch_data(&blocker).await;
        let gone = match watched {
            // Gone before it could be watched: like a contender that arrives after a holder
            // vanished, this one saw nothing and has no lock-delay to wait out.
            Err(zk::Error::NoNode) => true,
            Ok((_, _, watcher)) => {
                // The event first: a deletion that arrived by the deadline still counts.
                tokio::select! {
                    biased;
                    event = watcher.changed() => match event.event_type {
                        zk::EventType::NodeDeleted => {
                            vanished.unmarked(session, &granted.node_path);
                            true
                        }
                        zk::EventType::Session => {
                            if event.session_state.is_terminated() {
                                return Err(Failed::SessionEnded);
                            }
                            false
                        }
                        // Data changed: a clean release's mark (the node is gone with it) or a
                        // revocation (it is not); the listing tells which.
                        _ => false,
                    },
                    // Closed by the client, or its runtime went away: no event will come.
                    _ = session.ended() => return Err(Failed::SessionEnded),
                    _ = deadline_passed(deadline) => return Err(Failed::TimedOut),
                }
            }
            Err(err) => {
                retry_after(session, "watch", err).await?;
                false
            }
        };
        if gone && last_blocker {
            vanished.wait_out(recipe.lock_delay, session, deadline).await?;
            contending.disarm();
            return Ok(granted);
        }
        children = list(session, dir).await?;
    }
}

/// How an attempt ends when waiting out a lock-delay stopped short.
impl From<Interrupted> for Failed {
    fn from(why: Interrupted) -> Failed {
        match why {
            Interrupted::SessionEnded => Failed::SessionEnded,
            Interrupted::TimedOut => Failed::TimedOut,
        }
    }
}

/// The session's handle of the client library, for one round trip; a session the client
/// closed counts as ended.
pub(crate) fn handle(session: &Session) -> Result<Arc<zk::Client>, Failed> {
    session.zk().map_err(|err| failed("request", err))
}

/// Resolves when `deadline` passes; never without one.
pub(crate) async fn deadline_passed(deadline: Option<Instant>) {
    match deadline {
        Some(d) => tokio::time::sleep_until(d.into()).await,
        None => std::future::pending().await,
    }
}

/// Decides what to do after a failed request: wait out a connection loss (Ok, retry) or fail.
pub(crate) async fn retry_after(session: &Session, op: &'static str, err: zk::Error) -> Result<(), Failed> {
    if !is_transient(&err) {
        return Err(failed(op, err));
    }
    debug!(%err, op, "request interrupted; retrying once connected");
    if session.wait_to_retry().await {
        Ok(())
    } else {
        Err(Failed::SessionEnded)
    }
}

/// Lists `dir`, waiting out connection losses.
async fn list(session: &Session, dir: &str) -> Result<Vec<String>, Failed> {
    loop {
        let listed = handle(session)?.list_children(dir).await;
        match listed {
            Ok(children) => return Ok(children),
            Err(err) => retry_after(session, "list children", err).await?,
        }
    }
}

/// What [`create_and_list`] made: our node, its stat, and the directory's children.
struct Created {
    ours: String,
    stat: zk::Stat,
    /// The directory's children; just our node when `listed` is false.
    children: Vec<String>,
    /// False when the directory was not listed: our node was proven alone ([`crate::engine::alone`])
    /// or first (number 0), and no contender is ahead of it.
    listed: bool,
}

/// Creates our contender node with the listing pipelined behind it. Creates the lock
/// directory (and namespace) as containers when missing, and finds our node again by its
/// protected prefix when the create's answer was lost. Leaves the listing out when the
/// create's number will likely prove the node ahead of everyone (the session was alone in the
/// directory, see [`crate::engine::alone`], or the directory is being made in the same round trip),
/// and lists only if the number does not prove it. Our node's name goes into `node_made` as soon as
/// it exists, for the caller to remove it should the listing fail.
async fn create_and_list(
    recipe: &Recipe<'_>,
    session: &Session,
    protect: &str,
    node_made: &mut Option<String>,
) -> Result<Created, Failed> {
    let dir = recipe.dir;
    let prefix = format!("{dir}/{protect}{}", recipe.node_name);
    let options = zk::CreateMode::EphemeralSequential.with_acls(recipe.acls);
    let container = zk::CreateMode::Container.with_acls(recipe.acls);
    // Set when the dir was missing (first use of the name, or reaped since): the next attempt
    // creates it in the same round trip, ahead of the contender node. Requests are sent when
    // called and a session's requests are applied in order.
    let mut dir_missing = false;
    for _ in 0..8 {
        let expected = (recipe.skip_listing_when_alone && !dir_missing)
            .then(|| session.alone().expect(dir))
            .flatten();
        let zk = handle(session)?;
        let make_dir = dir_missing.then(|| zk.create(dir, b"", &container));
        let data = match recipe.participant {
            Some(id) => id.as_bytes().to_vec(),
            None => recipe.holder.node_data(recipe.template),
        };
        let create = zk.create(&prefix, &data, &options);
        // In a directory made just now our node is almost surely number 0, which proves it
        // first without a listing (see below); only a lost race costs a round trip more.
        let listing = (expected.is_none() && !dir_missing).then(|| zk.list_children(dir));
        let (made, created, listed) = tokio::join!(optional(make_dir), create, optional(listing));
        let parent_missing = matches!(made, Some(Err(zk::Error::NoNode)));
        if let (Some(Err(err)), Err(_)) = (made, &created) {
            // Not allowed to create the dir, say: that is the error to report.
            if !matches!(err, zk::Error::NodeExists | zk::Error::NoNode) && !is_transient(&err) {
                return Err(failed("create lock dir", err));
            }
        }
        match created {
            Ok((stat, sequence)) => {
                let ours = format!("{protect}{}{sequence}", recipe.node_name);
                record_made(node_made, &ours);
                let sequence = sequence.into_i64();
                // Proven ahead of everyone without a listing: alone again by the count
                // ([`crate::engine::alone`]), or number 0, the first create in this incarnation of the
                // directory, so every other child came later (docs/safety.md, "Number 0 is
                // first").
                let alone = expected.is_some_and(|expected| session.alone().confirm(dir, expected, &ours, sequence));
                if alone || sequence == 0 {
                    if !alone && recipe.skip_listing_when_alone {
                        session.alone().proven_first(&zk, dir, &ours, sequence);
                    }
                    return Ok(Created {
                        children: vec![ours.clone()],
                        ours,
                        stat,
                        listed: false,
                    });
                }
                let children = match listed {
                    Some(Ok(children)) => children,
                    _ => list(session, dir).await?,
                };
                if recipe.skip_listing_when_alone && children.len() == 1 && children[0] == ours {
                    session.alone().proven_first(&zk, dir, &ours, sequence);
                }
                return Ok(Created {
                    ours,
                    stat,
                    children,
                    listed: true,
                });
            }
            Err(zk::Error::NoNode) if parent_missing => {
                // The namespace above the dir is missing too: create the whole path.
                ensure_dir(recipe, session).await?;
                dir_missing = false;
            }
            Err(zk::Error::NoNode) => dir_missing = true,
            Err(err) if is_transient(&err) => {
                retry_after(session, "create", err).await?;
                if let Some((ours, stat)) = find_protected(session, dir, protect).await? {
                    record_made(node_made, &ours);
                    let children = list(session, dir).await?;
                    return Ok(Created {
                        ours,
                        stat,
                        children,
                        listed: true,
                    });
                }
            }
            Err(err) => return Err(failed("create", err)),
        }
    }
    Err(Failed::Error(LockError::connection(format!(
        "could not create a contender node in {dir}"
    ))))
}

/// Our node `ours` exists: recorded in `node_made` for its removal should what follows fail.
/// Its removal is not marked clean until the attempt knows what it waits for (or is granted).
fn record_made(node_made: &mut Option<String>, ours: &str) {
    *node_made = Some(ours.to_owned());
}

/// Awaits `request` if there is one.
async fn optional<F: std::future::Future>(request: Option<F>) -> Option<F::Output> {
    match request {
        Some(request) => Some(request.await),
        None => None,
    }
}

/// Looks for the node a create with lost answer may have made. Only a node owned by this very
/// session counts (CURATOR-604): a node of an earlier session is never ours.
async fn find_protected(session: &Session, dir: &str, protect: &str) -> Result<Option<(String, zk::Stat)>, Failed> {
    loop {
        // After a reconnect the server we talk to may lag the one that took the create: `sync`
        // first (pipelined, same round trip), so a create that happened is never missed.
        let zk = handle(session)?;
        let (_, listed) = tokio::join!(zk.sync(dir), zk.list_children(dir));
        drop(zk);
        let children = match listed {
            Ok(children) => children,
            Err(zk::Error::NoNode) => return Ok(None),
            Err(err) => {
                retry_after(session, "list children", err).await?;
                continue;
            }
        };
        let Some(name) = children.into_iter().find(|c| c.starts_with(protect)) else {
            return Ok(None);
        };
        let checked = handle(session)?.check_stat(&format!("{dir}/{name}")).await;
        match checked {
            Ok(Some(stat)) if stat.ephemeral_owner == session.id => {
                debug!(node = %name, "found our contender after a lost create answer");
                return Ok(Some((name, stat)));
            }
            Ok(_) => return Ok(None),
            Err(err) => retry_after(session, "exists", err).await?,
        }
    }
}

/// Creates the lock directory and its parents as containers (Curator's
/// `creatingParentContainersIfNeeded`).
async fn ensure_dir(recipe: &Recipe<'_>, session: &Session) -> Result<(), Failed> {
    let options = zk::CreateMode::Container.with_acls(recipe.acls);
    loop {
        let made = handle(session)?.mkdir(recipe.dir, &options).await;
        match made {
            Ok(()) | Err(zk::Error::NodeExists) => return Ok(()),
            Err(err) => retry_after(session, "create lock dir", err).await?,
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::test_server::{setup, Setup};

    /// CURATOR-604: after a reconnect with a new session, a node of the old session carrying
    /// our protected prefix must not be adopted as ours.
    #[tokio::test]
    async fn curator_604_node_of_another_session_is_never_ours() {
        let Setup {
            server: _server,
            client,
            view: other,
        } = setup(Duration::from_secs(4)).await;
        let lock = client.mutex("adopt").unwrap();
        // Another session (standing in for our previous one) owns a node with our prefix.
        let protect = format!("_c_{}-", uuid::Uuid::new_v4());
        other
            .mkdir(
                "/zklock/adopt",
                &zk::CreateMode::Container.with_acls(zk::Acls::anyone_all()),
            )
            .await
            .unwrap();
        let options = zk::CreateMode::EphemeralSequential.with_acls(zk::Acls::anyone_all());
        other
            .create(&format!("/zklock/adopt/{protect}lock-"), b"", &options)
            .await
            .unwrap();
        let session = client.session(None).await.unwrap();
        assert_ne!(session.id, other.session_id().0);
        let found = match find_protected(&session, lock.path(), &protect).await {
            Ok(found) => found,
            Err(_) => panic!("lookup failed"),
        };
        assert!(
            found.is_none(),
            "adopted a node owned by session {:#x}",
            other.session_id().0
        );
        // The same lookup does adopt a node our own session created.
        session
            .zk()
            .unwrap()
            .create(&format!("/zklock/adopt/{protect}x-lock-"), b"", &options)
            .await
            .unwrap();
        let own_protect = format!("{protect}x-");
        let found = match find_protected(&session, lock.path(), &own_protect).await {
            Ok(found) => found,
            Err(_) => panic!("lookup failed"),
        };
        assert_eq!(found.map(|(_, stat)| stat.ephemeral_owner), Some(session.id));
    }
}
