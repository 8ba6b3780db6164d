//! The contender queue every recipe shares (the ZooKeeper lock recipe).
//!
//! 1. Create `<dir>/_c_<uuid>-<node name>` as EPHEMERAL_SEQUENTIAL, and send the listing of
//!    `<dir>` right behind it without waiting: ZooKeeper answers one session's requests in
//!    order, so the listing includes the new node and the pair costs one round trip.
//! 2. Order the children by sequence number and ask the [`Rule`] whether we may go.
//! 3. If not, watch only the contender the rule names (no herd), and when it is deleted either
//!    go at once (it was the last blocker) or list again.
//!
//! The lock directory is a CONTAINER node, created on demand, so the server reaps it once it is
//! empty. Everything that can fail midway leaves cleanup to [`Contending`]'s `Drop`.

use std::sync::atomic::AtomicBool;
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use tracing::{debug, info, Instrument};
use zookeeper_client as zk;

use crate::cleanup::{remove_contender, Cleanup};
use crate::error::is_transient;
use crate::guard::{FencingToken, Holding, LockGuard};
use crate::local_queue::Turn;
use crate::lock::Lock;
use crate::metrics::Metrics;
use crate::reentrancy::HoldKey;
use crate::rules::{queue_order, Decision};
use crate::session::Session;
use crate::LockError;

/// The least time one attempt gets for its round trips, however short the caller's timeout.
const MIN_ATTEMPT_BUDGET: Duration = Duration::from_secs(2);

/// The pause before retrying a request that failed on the connection.
const RETRY_PAUSE: Duration = Duration::from_millis(20);

/// How often one acquisition starts over on a fresh session before giving up.
const MAX_SESSION_RESTARTS: u32 = 5;

/// Why one attempt on one session did not produce a guard.
enum Failed {
    /// The session ended (or our node vanished with it); start over on a new one.
    SessionEnded,
    /// Give up with this error.
    Error(LockError),
}

impl From<LockError> for Failed {
    fn from(err: LockError) -> Self {
        Failed::Error(err)
    }
}

/// Maps a ZooKeeper error inside an attempt.
fn failed(op: &'static str, err: zk::Error) -> Failed {
    match err {
        zk::Error::SessionExpired | zk::Error::ClientClosed | zk::Error::SessionMoved => Failed::SessionEnded,
        err => Failed::Error(LockError::zk(op, err)),
    }
}

pub(crate) async fn acquire(lock: &Lock, timeout: Option<Duration>) -> Result<LockGuard, LockError> {
    let client = &lock.client;
    let keys = lock.hold_keys();
    for key in &keys {
        if let Some(hold) = client.inner.holds.get(key) {
            let guard = LockGuard { hold };
            if guard.is_lost() {
                return Err(guard.lost().await);
            }
            Metrics::bump(&client.inner.metrics.reentered);
            debug!(lock = %lock.name, depth = guard.hold_count(), "reentrant acquire");
            return Ok(guard);
        }
    }

    let started = Instant::now();
    let deadline = timeout.map(|t| started + t);
    let span = tracing::info_span!("acquire", lock = %lock.name, kind = ?lock.kind);
    let contend = queue_up(lock, deadline, keys.into_iter().next()).instrument(span);
    let result = match timeout {
        None => contend.await,
        Some(timeout) => match tokio::time::timeout(timeout.max(MIN_ATTEMPT_BUDGET), contend).await {
            Ok(result) => result,
            Err(_) if client.status().is_connected() => Err(timed_out(lock, started)),
            Err(_) => Err(LockError::Connection(format!(
                "no answer from ZooKeeper at {} within {:?}",
                client.inner.config.connect,
                started.elapsed()
            ))),
        },
    };
    let result = match result {
        Err(LockError::Timeout { .. }) => Err(timed_out(lock, started)),
        other => other,
    };
    let metrics = &client.inner.metrics;
    match &result {
        Ok(guard) => {
            Metrics::bump(&metrics.acquired);
            info!(
                lock = %lock.name,
                node = %guard.node_path(),
                token = %guard.fencing_token(),
                waited_ms = started.elapsed().as_millis() as u64,
                "lock acquired"
            );
        }
        Err(LockError::Timeout { .. }) => {
            Metrics::bump(&metrics.timed_out);
            info!(lock = %lock.name, waited_ms = started.elapsed().as_millis() as u64, "lock timed out");
        }
        Err(err) => debug!(lock = %lock.name, %err, "acquire failed"),
    }
    result
}

fn timed_out(lock: &Lock, started: Instant) -> LockError {
    LockError::Timeout {
        name: lock.name.to_string(),
        waited: started.elapsed(),
    }
}

/// Waits for the front of this process's queue (exclusive locks), takes over a node handed
/// over by the previous local holder, or else contends in ZooKeeper.
async fn queue_up(lock: &Lock, deadline: Option<Instant>, key: Option<HoldKey>) -> Result<LockGuard, LockError> {
    let Some(gate) = lock.client.inner.gates.gate(&lock.dir, lock.kind) else {
        return contend(lock, deadline, key, None).await;
    };
    let mut turn = match deadline {
        None => gate.enter().await,
        Some(d) => match tokio::time::timeout_at(d.into(), gate.enter()).await {
            Ok(turn) => turn,
            Err(_) => return Err(timed_out_at(lock, deadline)),
        },
    };
    if let Some(mut warm) = turn.slot.warm.take() {
        if warm.is_sound() {
            let node_path = warm.claim();
            let token = FencingToken::new(warm.czxid, warm.generation + 1);
            Metrics::bump(&lock.client.inner.metrics.handed_off);
            return Ok(hold(
                lock,
                warm.session.clone(),
                node_path,
                token,
                warm.losses_at_grant,
                key,
                Some(turn),
            ));
        }
        // Dropping an unsound node deletes it; contend afresh.
    }
    contend(lock, deadline, key, Some(turn)).await
}

/// Attempts on successive sessions until one grants the lock or fails for good.
async fn contend(
    lock: &Lock,
    deadline: Option<Instant>,
    key: Option<HoldKey>,
    turn: Option<Turn>,
) -> Result<LockGuard, LockError> {
    let started = Instant::now();
    let mut restarts = 0;
    loop {
        let session = lock.client.session(None).await?;
        match attempt(lock, &session, deadline).await {
            Ok((node_path, stat)) => {
                let losses = session.health().losses;
                let token = FencingToken::new(stat.czxid, 0);
                return Ok(hold(lock, session, node_path, token, losses, key, turn));
            }
            Err(Failed::Error(err)) => return Err(err),
            Err(Failed::SessionEnded) => {
                restarts += 1;
                if deadline.is_some_and(|d| Instant::now() >= d) {
                    return Err(timed_out(lock, started));
                }
                if restarts > MAX_SESSION_RESTARTS {
                    return Err(LockError::SessionExpired);
                }
                debug!(lock = %lock.name, "session ended while contending; starting over");
            }
        }
    }
}

fn hold(
    lock: &Lock,
    session: Arc<Session>,
    node_path: String,
    token: FencingToken,
    losses_at_grant: u64,
    key: Option<HoldKey>,
    turn: Option<Turn>,
) -> LockGuard {
    let holding = Arc::new(Holding {
        client: lock.client.clone(),
        losses_at_grant,
        session,
        name: lock.name.to_string(),
        node_path,
        token,
        key: key.clone(),
        granted_at: Instant::now(),
        released: AtomicBool::new(false),
        turn,
    });
    if let Some(key) = key {
        lock.client.inner.holds.insert(key, &holding);
    }
    LockGuard { hold: holding }
}

/// A contender node that is ours until granted. Dropping it before [`disarm`](Self::disarm)
/// (error, timeout, cancellation) hands its removal to the background.
struct Contending {
    cleanup: Cleanup,
    session: Arc<Session>,
    dir: String,
    protect: String,
    node: Option<String>,
    armed: bool,
    metrics: Arc<crate::client::ClientInner>,
}

impl Contending {
    fn disarm(mut self) {
        self.armed = false;
    }
}

impl Drop for Contending {
    fn drop(&mut self) {
        if !self.armed || !self.session.is_usable() {
            return;
        }
        Metrics::bump(&self.metrics.metrics.abandoned);
        let job = remove_contender(
            self.session.clone(),
            self.dir.clone(),
            self.protect.clone(),
            self.node.take(),
        );
        self.cleanup.spawn(&self.session, job);
    }
}

/// The data stored in contender nodes, to tell an operator who is queued.
fn node_data() -> &'static [u8] {
    static DATA: OnceLock<Vec<u8>> = OnceLock::new();
    DATA.get_or_init(|| format!("zklock pid={}", std::process::id()).into_bytes())
}

/// One attempt on one session: returns our node's path and stat once the rule lets us go.
async fn attempt(lock: &Lock, session: &Arc<Session>, deadline: Option<Instant>) -> Result<(String, zk::Stat), Failed> {
    let dir: &str = &lock.dir;
    let protect = format!("_c_{}-", uuid::Uuid::new_v4());
    let mut contending = Contending {
        cleanup: lock.client.inner.cleanup.clone(),
        session: session.clone(),
        dir: dir.to_owned(),
        protect: protect.clone(),
        node: None,
        armed: true,
        metrics: lock.client.inner.clone(),
    };
    let (ours, stat, mut children) = create_and_list(lock, session, &protect).await?;
    contending.node = Some(ours.clone());
    let our_path = format!("{dir}/{ours}");

    loop {
        let queue = queue_order(children);
        let Some(index) = queue.iter().position(|c| c.name == ours) else {
            // Our node is gone: its session ended under us (or an operator deleted it).
            debug!(node = %our_path, "contender node vanished");
            return Err(Failed::SessionEnded);
        };
        let (on, last_blocker) = match lock.rule.decide(&queue, index) {
            Decision::Go => {
                contending.disarm();
                return Ok((our_path, stat));
            }
            Decision::Wait { on, last_blocker } => (on, last_blocker),
        };
        if deadline.is_some_and(|d| Instant::now() >= d) {
            return Err(Failed::Error(timed_out_at(lock, deadline)));
        }
        let blocker = format!("{dir}/{}", queue[on].name);
        debug!(node = %our_path, waits_for = %blocker, "waiting");
        let gone = match session.zk.check_and_watch_stat(&blocker).await {
            Ok((None, _)) => true,
            Ok((Some(_), watcher)) => {
                let sleep = async {
                    match deadline {
                        Some(d) => tokio::time::sleep_until(d.into()).await,
                        None => std::future::pending().await,
                    }
                };
                tokio::select! {
                    event = watcher.changed() => match event.event_type {
                        zk::EventType::NodeDeleted => true,
                        zk::EventType::Session => {
                            if event.session_state.is_terminated() {
                                return Err(Failed::SessionEnded);
                            }
                            false
                        }
                        _ => false,
                    },
                    _ = sleep => return Err(Failed::Error(timed_out_at(lock, deadline))),
                }
            }
            Err(err) => {
                retry_after(session, "exists", err).await?;
                false
            }
        };
        if gone && last_blocker {
            contending.disarm();
            return Ok((our_path, stat));
        }
        children = list(session, dir).await?;
    }
}

/// A timeout inside an attempt; [`acquire`] fills in how long the caller waited.
fn timed_out_at(lock: &Lock, _deadline: Option<Instant>) -> LockError {
    LockError::Timeout {
        name: lock.name.to_string(),
        waited: Duration::ZERO,
    }
}

/// Decides what to do after a failed request: wait out a connection loss (Ok, retry) or fail.
async fn retry_after(session: &Session, op: &'static str, err: zk::Error) -> Result<(), Failed> {
    if !is_transient(&err) {
        return Err(failed(op, err));
    }
    debug!(%err, op, "request interrupted; retrying once connected");
    if !session.wait_connected().await {
        return Err(Failed::SessionEnded);
    }
    // The library may report the loss before its state does; don't spin meanwhile.
    tokio::time::sleep(RETRY_PAUSE).await;
    Ok(())
}

/// Lists `dir`, waiting out connection losses.
async fn list(session: &Session, dir: &str) -> Result<Vec<String>, Failed> {
    loop {
        match session.zk.list_children(dir).await {
            Ok(children) => return Ok(children),
            Err(err) => retry_after(session, "list children", err).await?,
        }
    }
}

/// Creates our contender node with the listing pipelined behind it. Creates the lock
/// directory (and namespace) as containers when missing, and finds our node again by its
/// protected prefix when the create's answer was lost.
async fn create_and_list(
    lock: &Lock,
    session: &Session,
    protect: &str,
) -> Result<(String, zk::Stat, Vec<String>), Failed> {
    let config = &lock.client.inner.config;
    let dir: &str = &lock.dir;
    let prefix = format!("{dir}/{protect}{}", lock.rule.node_name());
    let options = zk::CreateMode::EphemeralSequential.with_acls(config.acls());
    for _ in 0..8 {
        let create = session.zk.create(&prefix, node_data(), &options);
        let listing = session.zk.list_children(dir);
        let (created, listed) = tokio::join!(create, listing);
        match created {
            Ok((stat, sequence)) => {
                let ours = format!("{protect}{}{sequence}", lock.rule.node_name());
                let children = match listed {
                    Ok(children) => children,
                    Err(_) => list(session, dir).await?,
                };
                return Ok((ours, stat, children));
            }
            Err(zk::Error::NoNode) => ensure_dir(lock, session).await?,
            Err(err) if is_transient(&err) => {
                retry_after(session, "create", err).await?;
                if let Some((ours, stat)) = find_protected(session, dir, protect).await? {
                    let children = list(session, dir).await?;
                    return Ok((ours, stat, children));
                }
            }
            Err(err) => return Err(failed("create", err)),
        }
    }
    Err(Failed::Error(LockError::Connection(format!(
        "could not create a contender node in {dir}"
    ))))
}

/// Looks for the node a create with lost answer may have made. Only a node owned by this very
/// session counts (CURATOR-604): a node of an earlier session is never ours.
async fn find_protected(session: &Session, dir: &str, protect: &str) -> Result<Option<(String, zk::Stat)>, Failed> {
    let children = match session.zk.list_children(dir).await {
        Ok(children) => children,
        Err(zk::Error::NoNode) => return Ok(None),
        Err(err) => {
            retry_after(session, "list children", err).await?;
            return Box::pin(find_protected(session, dir, protect)).await;
        }
    };
    let Some(name) = children.into_iter().find(|c| c.starts_with(protect)) else {
        return Ok(None);
    };
    match session.zk.check_stat(&format!("{dir}/{name}")).await {
        Ok(Some(stat)) if stat.ephemeral_owner == session.id => {
            debug!(node = %name, "found our contender after a lost create answer");
            Ok(Some((name, stat)))
        }
        Ok(_) => Ok(None),
        Err(err) => {
            retry_after(session, "exists", err).await?;
            Box::pin(find_protected(session, dir, protect)).await
        }
    }
}

/// Creates the lock directory and its parents as containers (Curator's
/// `creatingParentContainersIfNeeded`).
async fn ensure_dir(lock: &Lock, session: &Session) -> Result<(), Failed> {
    let options = zk::CreateMode::Container.with_acls(lock.client.inner.config.acls());
    loop {
        match session.zk.mkdir(&lock.dir, &options).await {
            Ok(()) | Err(zk::Error::NodeExists) => return Ok(()),
            Err(err) => retry_after(session, "create lock dir", err).await?,
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::LockClient;
    use zklock_testing::ZkServer;

    /// CURATOR-604: after a reconnect with a new session, a node of the old session carrying
    /// our protected prefix must not be adopted as ours.
    #[tokio::test]
    async fn curator_604_node_of_another_session_is_never_ours() {
        let server = ZkServer::start().unwrap();
        let client = LockClient::builder(server.connect_string())
            .session_timeout(Duration::from_secs(4))
            .connect()
            .await
            .unwrap();
        let lock = client.mutex("adopt").unwrap();
        // Another session (standing in for our previous one) owns a node with our prefix.
        let other = zk::Client::connector()
            .with_session_timeout(Duration::from_secs(4))
            .connect(&server.connect_string())
            .await
            .unwrap();
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
        let found = match find_protected(&session, &lock.dir, &protect).await {
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
            .zk
            .create(&format!("/zklock/adopt/{protect}x-lock-"), b"", &options)
            .await
            .unwrap();
        let own_protect = format!("{protect}x-");
        let found = match find_protected(&session, &lock.dir, &own_protect).await {
            Ok(found) => found,
            Err(_) => panic!("lookup failed"),
        };
        assert_eq!(found.map(|(_, stat)| stat.ephemeral_owner), Some(session.id));
    }
}
