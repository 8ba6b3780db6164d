//! Leader election: the members of a group queue in one directory like mutex contenders, and
//! the oldest member leads until it leaves or its session can no longer be trusted.
//!
//! The layout is Curator's `LeaderLatch`: each member is an ephemeral sequential
//! `_c_<uuid>-latch-<seq>` node holding the participant id as its data, the member with the
//! lowest sequence number leads, and every other member watches only the member just ahead of
//! it. So a Curator `LeaderLatch` and a zklock member on one path elect exactly one leader
//! between them, and each lists the other among the participants.
//!
//! A member is a [`LockKind::Leader`] acquisition on the lock core: the same queue, fencing
//! token and loss signal as a lock, without the in-process queue (every member has its own
//! node, so every member is listed) and without reentrancy. [`Leadership`] is its guard;
//! [`crate::recipes::leader_service`] keeps a future running while leading.

use std::sync::Arc;
use std::time::Duration;

use serde::Serialize;
use tokio::sync::watch;
use tracing::debug;
use zookeeper_client as zk;

use crate::client::LockClient;
use crate::engine::guard::LockGuard;
use crate::engine::loss::LossSignal;
use crate::engine::rules::LockKind;
use crate::engine::token::FencingToken;
use crate::error::LockError;
use crate::lock::Lock;
use crate::node_data::MAX_IDENTITY_LEN;
use crate::ops::inspect::{LockView, Tell};
use crate::telemetry::gauges;

/// A leader election group, as one participant joins it. Cheap to clone; creating it costs
/// nothing on the server.
///
/// ```no_run
/// # async fn demo(client: zklock_runtime::LockClient) -> Result<(), zklock_runtime::LockError> {
/// let election = client.election("compactor")?.with_participant_id("node-a")?;
/// let leadership = election.lead().await?;
/// let token = leadership.fencing_token();
/// leadership.run(compact(token)).await?; // stopped if leadership is lost
/// leadership.release().await?;
/// # Ok(()) }
/// # async fn compact(_: zklock_runtime::FencingToken) {}
/// ```
#[derive(Clone, Debug)]
pub struct Election {
    client: LockClient,
    lock: Lock,
    participant: Arc<str>,
}

impl LockClient {
    /// The leader election group `group` (a lock name: the group's directory is
    /// `<namespace>/<group>`), joined as a participant named by this client's
    /// [identity](LockClient::identity) unless
    /// [`with_participant_id`](Election::with_participant_id) says otherwise.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn demo(client: zklock_runtime::LockClient) -> Result<(), zklock_runtime::LockError> {
    /// let election = client.election("compactor")?;
    /// if let Some(leader) = election.leader().await? {
    ///     println!("{} leads", leader.participant);
    /// }
    /// # Ok(()) }
    /// ```
    pub fn election(&self, group: &str) -> Result<Election, LockError> {
        let participant: Arc<str> = self.identity().into();
        // The group names the election's series: `lock` of its lock metrics, `group` of
        // `zklock_leader`, registered at 0 now so a group nobody leads shows as such.
        let lock = self.lock(group, LockKind::Leader)?.with_template(group);
        gauges::candidate(group);
        Ok(Election {
            client: self.clone(),
            lock: lock.with_participant(participant.clone()),
            participant,
        })
    }
}

impl Election {
    /// The same group, joined as `id`: what the member's node holds, and what Curator's
    /// `LeaderLatch::getParticipants` and [`members`](Self::members) show. 1 to
    /// [`MAX_IDENTITY_LEN`] bytes.
    pub fn with_participant_id(mut self, id: impl Into<String>) -> Result<Election, LockError> {
        let id = id.into();
        if id.is_empty() || id.len() > MAX_IDENTITY_LEN {
            return Err(LockError::invalid_config(format!(
                "a participant id must have 1 to {MAX_IDENTITY_LEN} bytes, got {}",
                id.len()
            )));
        }
        self.participant = id.into();
        self.lock = self.lock.with_participant(self.participant.clone());
        Ok(self)
    }

    /// The group name as given.
    pub fn group(&self) -> &str {
        self.lock.name()
    }

    /// The group's directory in ZooKeeper (`<namespace>/<group>`): the path a Curator
    /// `LeaderLatch` takes to join the same group.
    pub fn path(&self) -> &str {
        self.lock.path()
    }

    /// The participant id this handle joins as.
    pub fn participant_id(&self) -> &str {
        &self.participant
    }

    /// Joins the group and waits, without a bound, until this member leads.
    ///
    /// Every call is a member of its own (its own node), also within one process.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: dropping the future leaves the group; its node is removed in the
    /// background (see [`LockClient::flush`]).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn demo(client: zklock_runtime::LockClient) -> Result<(), zklock_runtime::LockError> {
    /// let leadership = client.election("compactor")?.lead().await?;
    /// println!("leading with token {}", leadership.fencing_token());
    /// # Ok(()) }
    /// ```
    pub async fn lead(&self) -> Result<Leadership, LockError> {
        Ok(Leadership::new(self.lock.acquire().await?, self.participant.clone()))
    }

    /// Like [`lead`](Self::lead), giving up after `timeout` with [`LockError::Timeout`] (the
    /// member leaves the group).
    ///
    /// # Cancel safety
    ///
    /// Cancel safe, as [`lead`](Self::lead).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn demo(client: zklock_runtime::LockClient) -> Result<(), zklock_runtime::LockError> {
    /// use std::time::Duration;
    /// let election = client.election("compactor")?;
    /// match election.lead_timeout(Duration::from_secs(5)).await {
    ///     Ok(leadership) => leadership.release().await?,
    ///     Err(zklock_runtime::LockError::Timeout { .. }) => println!("someone else leads"),
    ///     Err(err) => return Err(err),
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn lead_timeout(&self, timeout: Duration) -> Result<Leadership, LockError> {
        let guard = self.lock.acquire_timeout(timeout).await?;
        Ok(Leadership::new(guard, self.participant.clone()))
    }

    /// Leads now if no other member is ahead, after one round trip; `None` otherwise (the
    /// member leaves the group at once).
    ///
    /// # Cancel safety
    ///
    /// Cancel safe, as [`lead`](Self::lead).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn demo(client: zklock_runtime::LockClient) -> Result<(), zklock_runtime::LockError> {
    /// if let Some(leadership) = client.election("compactor")?.try_lead().await? {
    ///     leadership.release().await?;
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn try_lead(&self) -> Result<Option<Leadership>, LockError> {
        let guard = self.lock.try_acquire().await?;
        Ok(guard.map(|guard| Leadership::new(guard, self.participant.clone())))
    }

    /// The group's members in queue order, the leader first, as one read of the group's
    /// directory shows them (Curator participants included). Empty when nobody has joined.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: it only reads.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn demo(client: zklock_runtime::LockClient) -> Result<(), zklock_runtime::LockError> {
    /// for member in client.election("compactor")?.members().await? {
    ///     println!("{} leader={}", member.participant, member.is_leader);
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn members(&self) -> Result<Vec<Member>, LockError> {
        Ok(members_of(self.client.inspect(self.group()).await?))
    }

    /// The member that leads now, if any.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: it only reads.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn demo(client: zklock_runtime::LockClient) -> Result<(), zklock_runtime::LockError> {
    /// let leader = client.election("compactor")?.leader().await?;
    /// println!("{:?}", leader.map(|m| m.participant));
    /// # Ok(()) }
    /// ```
    pub async fn leader(&self) -> Result<Option<Member>, LockError> {
        Ok(self.members().await?.into_iter().find(|m| m.is_leader))
    }

    /// Follows who leads: the receiver holds the current leader (`None` while the group has
    /// none) and is told of every change, driven by watches on the group's directory. The
    /// watch runs in a task of the current tokio runtime until every receiver is dropped or
    /// the client is closed (the receiver then reports the sender gone).
    ///
    /// The first read happens before this returns, so its errors are this call's. After that,
    /// a failed read is retried; the receiver keeps the last leader seen meanwhile.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: dropping the future before it returns starts no watch.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn demo(client: zklock_runtime::LockClient) -> Result<(), zklock_runtime::LockError> {
    /// let mut leader = client.election("compactor")?.watch_leader().await?;
    /// while leader.changed().await.is_ok() {
    ///     println!("now led by {:?}", leader.borrow().as_ref().map(|m| &m.participant));
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn watch_leader(&self) -> Result<watch::Receiver<Option<Member>>, LockError> {
        self.client
            .follow_queue(self.group(), leader_of, Tell::Differences)
            .await
    }
}

fn members_of(view: Option<LockView>) -> Vec<Member> {
    let Some(view) = view else {
        return Vec::new();
    };
    view.holders
        .into_iter()
        .chain(view.waiters)
        .map(|node| Member {
            participant: node.data.identity.unwrap_or_default(),
            is_leader: node.holds,
            token: node.token,
            session: node.session,
            joined_ms: node.ctime_ms,
            node: node.node,
        })
        .collect()
}

fn leader_of(view: Option<LockView>) -> Option<Member> {
    members_of(view).into_iter().find(|m| m.is_leader)
}

/// One member of an election group.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct Member {
    /// The participant id its node holds (empty if the node holds no text).
    pub participant: String,
    /// Whether it leads.
    pub is_leader: bool,
    /// Its node's name (no directory).
    pub node: String,
    /// The fencing token a zklock member leads with (its node's creation zxid).
    #[serde(serialize_with = "display")]
    pub token: FencingToken,
    /// The ZooKeeper session that owns its node.
    pub session: i64,
    /// When it joined: its node's creation time by the server's clock, in milliseconds since
    /// the Unix epoch. A leader leads since then, or since the last member ahead of it left,
    /// whichever came later (the server records only the first).
    pub joined_ms: i64,
}

fn display<S: serde::Serializer>(t: &FencingToken, s: S) -> Result<S::Ok, S::Error> {
    s.collect_str(t)
}

/// Leadership of an election group: the guard of a member that leads. Dropping it leaves the
/// group (in the background); [`release`](Self::release) leaves and waits for it.
///
/// Leadership ends for good when it is lost: the session expired, or the connection was down
/// for the client's `loss_after` (see [`LockGuard::lost`]). Code run with
/// [`run`](Self::run) is stopped then, as a locked body is. To lead again, join again.
#[must_use = "leadership is given up when dropped"]
#[derive(Debug)]
pub struct Leadership {
    guard: LockGuard,
    participant: Arc<str>,
}

impl Leadership {
    fn new(guard: LockGuard, participant: Arc<str>) -> Leadership {
        debug!(group = %guard.name(), node = %guard.node_path(), "leading");
        Leadership { guard, participant }
    }

    /// The group led.
    pub fn group(&self) -> &str {
        self.guard.name()
    }

    /// The participant id this member joined as.
    pub fn participant_id(&self) -> &str {
        &self.participant
    }

    /// The full path of this member's node.
    pub fn node_path(&self) -> &str {
        self.guard.node_path()
    }

    /// The fencing token of this term: larger than that of every earlier leader of the group.
    /// Pass it to what only the leader may write.
    pub fn fencing_token(&self) -> FencingToken {
        self.guard.fencing_token()
    }

    /// Whether this member still leads (false once leadership is lost).
    pub fn is_leader(&self) -> bool {
        !self.guard.is_lost()
    }

    /// A signal that can be awaited apart from the leadership.
    pub fn loss_signal(&self) -> LossSignal {
        self.guard.loss_signal()
    }

    /// Resolves with [`LockError::Lost`] once leadership is lost; pending while it lasts.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: it only watches.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn demo(client: zklock_runtime::LockClient) -> Result<(), zklock_runtime::LockError> {
    /// let leadership = client.election("compactor")?.lead().await?;
    /// let err = leadership.lost().await;
    /// println!("no longer leading: {err}");
    /// # Ok(()) }
    /// ```
    pub async fn lost(&self) -> LockError {
        self.guard.lost().await
    }

    /// Runs `fut` as leader: it is dropped at its next `.await` once leadership is lost, and
    /// the result is then [`LockError::Lost`].
    ///
    /// # Cancel safety
    ///
    /// Dropping the returned future drops `fut`; leadership is unaffected.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn demo(client: zklock_runtime::LockClient) -> Result<(), zklock_runtime::LockError> {
    /// let leadership = client.election("compactor")?.lead().await?;
    /// leadership.run(async { /* leader-only work */ }).await?;
    /// # Ok(()) }
    /// ```
    pub async fn run<F: std::future::Future>(&self, fut: F) -> Result<F::Output, LockError> {
        self.guard.run(fut).await
    }

    /// Applies a batch of ZooKeeper writes only while this member's node exists, as one
    /// transaction, exactly as [`LockGuard::fenced_write`] does for a lock: a deposed leader's
    /// batch is refused by the server and changes nothing.
    ///
    /// # Cancel safety
    ///
    /// As [`LockGuard::fenced_write`]: dropped before its answer, the outcome is unknown.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn demo(client: zklock_runtime::LockClient) -> Result<(), zklock_runtime::LockError> {
    /// let leadership = client.election("compactor")?.lead().await?;
    /// leadership
    ///     .fenced_write(|batch| batch.add_set_data("/compactor/epoch", b"7", None))
    ///     .await?;
    /// # Ok(()) }
    /// ```
    pub async fn fenced_write<F>(&self, build: F) -> Result<Vec<zk::MultiWriteResult>, LockError>
    where
        F: FnOnce(&mut zk::MultiWriter<'_>) -> Result<(), zk::Error>,
    {
        self.guard.fenced_write(build).await
    }

    /// Confirms with the server that this member still leads (one round trip), as
    /// [`LockGuard::ensure_held`] does for a lock.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: it only reads.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn demo(client: zklock_runtime::LockClient) -> Result<(), zklock_runtime::LockError> {
    /// let leadership = client.election("compactor")?.lead().await?;
    /// leadership.ensure_held().await?;
    /// # Ok(()) }
    /// ```
    pub async fn ensure_held(&self) -> Result<(), LockError> {
        self.guard.ensure_held().await
    }

    /// Leaves the group: deletes this member's node and waits for the server to confirm, so
    /// the next member leads.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: dropping the future leaves the group in the background.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn demo(client: zklock_runtime::LockClient) -> Result<(), zklock_runtime::LockError> {
    /// let leadership = client.election("compactor")?.lead().await?;
    /// leadership.release().await?;
    /// # Ok(()) }
    /// ```
    pub async fn release(self) -> Result<(), LockError> {
        self.guard.release().await
    }

    /// The same hold as a lock guard, for code written for guards.
    pub fn into_guard(self) -> LockGuard {
        self.guard
    }
}
