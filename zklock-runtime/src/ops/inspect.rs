//! What an operator asks in an incident: which locks exist, who holds one, since when, and who
//! waits for whom. Read-only; the `zklock` command is built on it.
//!
//! A lock's queue is read the way its contenders read it: ordered by sequence number and
//! judged by the same rules ([`crate::engine::rules`]), so a waiter is shown waiting for exactly the
//! node it watches. The recipe is told apart by node names, which zklock shares with Curator:
//! `__READ__`/`__WRIT__` nodes make a read/write lock, `latch-` nodes a leader election group,
//! `locks`/`leases` children a semaphore, anything else a mutex.

use std::future::Future;
use std::pin::Pin;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use futures_util::future;
use serde::Serialize;
use tokio::sync::watch;
use tracing::debug;
use zookeeper_client as zk;

use crate::client::LockClient;
use crate::connection::session::Session;
use crate::engine::rules::{
    queue_order, Contender, Decision, Leases, Readers, Rule, LATCH_NODE, LEASES_DIR, LOCKS_DIR, MUTEX_NODE, READ_NODE,
    WRITE_NODE,
};
use crate::engine::token::FencingToken;
use crate::error::LockError;
use crate::node_data::ContenderData;

/// Which recipe a lock directory follows, as its nodes tell.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum RecipeKind {
    /// Exclusive (`InterProcessMutex`); also a directory with no contender at the moment.
    Mutex,
    /// Readers and writers (`InterProcessReadWriteLock`).
    ReadWrite,
    /// Leases (`InterProcessSemaphoreV2`): lease nodes hold, acquirers queue for a mutex.
    Semaphore,
    /// A leader election group (`LeaderLatch`): the oldest member leads.
    Election,
}

/// The role of one contender node.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum Side {
    /// A mutex contender.
    Exclusive,
    /// The shared side of a read/write lock.
    Read,
    /// The exclusive side of a read/write lock.
    Write,
    /// A semaphore lease (always a holder).
    Lease,
    /// A semaphore acquirer, queued for the mutex over acquirers.
    Acquirer,
    /// A member of a leader election group; the one that holds leads.
    Member,
}

/// One contender node of a lock, as an operator sees it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct QueuedNode {
    /// The node name (no directory).
    pub node: String,
    /// Its role.
    pub side: Side,
    /// Whether it holds the lock (for an acquirer: the mutex over acquirers).
    pub holds: bool,
    /// For a waiter: the node whose deletion it waits for.
    pub waits_for: Option<String>,
    /// Who made it.
    #[serde(flatten)]
    pub data: ContenderData,
    /// How long ago the server created it.
    #[serde(rename = "age_ms", serialize_with = "millis")]
    pub age: Duration,
    /// The fencing token a zklock holder of this node has (its creation zxid).
    #[serde(serialize_with = "display")]
    pub token: FencingToken,
    /// The ZooKeeper session that owns the node.
    #[serde(serialize_with = "hex")]
    pub session: i64,
    /// When the server created the node (its ctime), in milliseconds since the Unix epoch.
    #[serde(skip)]
    pub(crate) ctime_ms: i64,
}

/// One lock's queue, read at one moment.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct LockView {
    /// The lock name.
    pub name: String,
    /// Its directory.
    pub path: String,
    /// The recipe its nodes follow.
    pub recipe: RecipeKind,
    /// Holders, in queue order.
    pub holders: Vec<QueuedNode>,
    /// Waiters, in queue order.
    pub waiters: Vec<QueuedNode>,
}

impl LockView {
    /// The longest time a waiter has been queued, if any waits.
    pub fn oldest_wait(&self) -> Option<Duration> {
        self.waiters.iter().map(|w| w.age).max()
    }
}

/// Resolves once the lock's queue may have changed (a contender came or went, the directory
/// appeared or vanished, or the session ended); read it again then.
pub(crate) type QueueChanged = Pin<Box<dyn Future<Output = ()> + Send>>;

/// When a follower of a queue tells its receivers ([`LockClient::follow_queue`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Tell {
    /// After every read the queue's watch caused, even when nothing it judges changed.
    EveryRead,
    /// When what it judges differs from what it last told.
    Differences,
}

/// How long a follower of a queue waits before reading again after a failed read.
const FOLLOW_RETRY: Duration = Duration::from_millis(500);

impl LockClient {
    /// The names of the lock directories under the namespace, sorted.
    ///
    /// ```no_run
    /// # async fn demo(client: zklock_runtime::LockClient) -> Result<(), zklock_runtime::LockError> {
    /// for name in client.lock_names().await? {
    ///     println!("{name}");
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn lock_names(&self) -> Result<Vec<String>, LockError> {
        let session = self.session(None).await?;
        let listed = session
            .zk()
            .map_err(|err| LockError::zk("list locks", err))?
            .list_children(self.namespace())
            .await;
        let mut names = match listed {
            Ok(names) => names,
            Err(zk::Error::NoNode) => Vec::new(),
            Err(err) => return Err(LockError::zk("list locks", err)),
        };
        names.sort();
        Ok(names)
    }

    /// Reads the queue of the lock `name`: holders and waiters in order, who made each node,
    /// how long ago, and whom each waiter waits for. `None` when the lock has no directory
    /// (nobody has used it lately; empty directories are reaped).
    ///
    /// The nodes are read one by one after the listing; a node that goes away meanwhile is
    /// left out.
    ///
    /// ```no_run
    /// # async fn demo(client: zklock_runtime::LockClient) -> Result<(), zklock_runtime::LockError> {
    /// if let Some(view) = client.inspect("inventory:42").await? {
    ///     for holder in &view.holders {
    ///         println!("held by {:?} for {:?}", holder.data.identity, holder.age);
    ///     }
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn inspect(&self, name: &str) -> Result<Option<LockView>, LockError> {
        Ok(self.inspect_and_watch(name).await?.0)
    }

    /// Follows the lock's queue: the receiver holds the current [`inspect`](Self::inspect) view
    /// (`None` while the lock has no directory) and is told of every change, driven by watches
    /// on what each view was read from, so no change between a read and its watch is missed.
    /// Each change is read anew, so a receiver that falls behind sees the latest view. The
    /// watch runs in a task of the current tokio runtime until every receiver is dropped or
    /// the client is closed (the receiver then reports the sender gone).
    ///
    /// The first read happens before this returns, so its errors are this call's. After that,
    /// a failed read is retried; the receiver keeps the last view meanwhile.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: dropping the future before it returns starts no watch.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn demo(client: zklock_runtime::LockClient) -> Result<(), zklock_runtime::LockError> {
    /// let mut queue = client.watch_lock("inventory:42").await?;
    /// loop {
    ///     println!("{} holders", queue.borrow_and_update().as_ref().map_or(0, |v| v.holders.len()));
    ///     if queue.changed().await.is_err() {
    ///         break; // the client was closed
    ///     }
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn watch_lock(&self, name: &str) -> Result<watch::Receiver<Option<LockView>>, LockError> {
        // Every change is told, even one that leaves the queue as it was (a holder came and
        // went between two reads): a live view shows that something happened.
        self.follow_queue(name, |view| view, Tell::EveryRead).await
    }

    /// Follows the queue of `name` as [`watch_lock`](Self::watch_lock) does, through `judge`:
    /// the receiver holds `judge(view)` and is told after each read (`Tell::EveryRead`) or
    /// when the judged value changes (`Tell::Differences`). Every watch of a lock directory
    /// (a lock's queue, an election's leader) is this one mechanism.
    pub(crate) async fn follow_queue<T>(
        &self,
        name: &str,
        judge: fn(Option<LockView>) -> T,
        tell: Tell,
    ) -> Result<watch::Receiver<T>, LockError>
    where
        T: PartialEq + Send + Sync + 'static,
    {
        let runtime = tokio::runtime::Handle::try_current()
            .map_err(|_| LockError::invalid_config(format!("watching lock {name:?} needs a tokio runtime")))?;
        let (view, mut changed) = self.inspect_and_watch(name).await?;
        let (tx, rx) = watch::channel(judge(view));
        let (client, name) = (self.clone(), name.to_owned());
        runtime.spawn(async move {
            loop {
                tokio::select! {
                    () = changed => {}
                    () = tx.closed() => return,
                }
                loop {
                    match client.inspect_and_watch(&name).await {
                        Ok((view, next)) => {
                            let judged = judge(view);
                            tx.send_if_modified(|current| {
                                let differs = *current != judged;
                                *current = judged;
                                differs || tell == Tell::EveryRead
                            });
                            changed = next;
                            break;
                        }
                        Err(LockError::Closed { .. }) => return,
                        Err(err) => {
                            debug!(lock = %name, %err, "reading the lock's queue failed; retrying");
                            tokio::select! {
                                () = tokio::time::sleep(FOLLOW_RETRY) => {}
                                () = tx.closed() => return,
                            }
                        }
                    }
                }
            }
        });
        Ok(rx)
    }

    /// Like [`inspect`](Self::inspect), and also returns a future that resolves once the queue
    /// may have changed; it watches what the view was read from, so no change between the
    /// read and the watch is missed.
    pub(crate) async fn inspect_and_watch(&self, name: &str) -> Result<(Option<LockView>, QueueChanged), LockError> {
        crate::name::validate_name(name)?;
        let session = self.session(None).await?;
        let path = format!("{}/{name}", self.namespace());
        let zk = session.zk().map_err(|err| LockError::zk("list children", err))?;
        let children = match zk.list_and_watch_children(&path).await {
            Ok((children, watcher)) => (children, watcher),
            Err(zk::Error::NoNode) => {
                let (_, watcher) = zk
                    .check_and_watch_stat(&path)
                    .await
                    .map_err(|err| LockError::zk("exists", err))?;
                return Ok((None, Box::pin(async move { drop(watcher.changed().await) })));
            }
            Err(err) => return Err(LockError::zk("list", err)),
        };
        let (children, dir_watch) = children;
        let mut watches: Vec<QueueChanged> = vec![Box::pin(async move { drop(dir_watch.changed().await) })];
        let is_semaphore = children.iter().any(|c| c == LOCKS_DIR || c == LEASES_DIR);
        let (recipe, nodes) = if is_semaphore {
            let mut nodes = Vec::new();
            for (sub, side) in [(LEASES_DIR, Side::Lease), (LOCKS_DIR, Side::Acquirer)] {
                let sub_path = format!("{path}/{sub}");
                match zk.list_and_watch_children(&sub_path).await {
                    Ok((names, watcher)) => {
                        watches.push(Box::pin(async move { drop(watcher.changed().await) }));
                        nodes.extend(read_queue(&session, &sub_path, names, |_| side).await?);
                    }
                    Err(zk::Error::NoNode) => {}
                    Err(err) => return Err(LockError::zk("list", err)),
                }
            }
            (RecipeKind::Semaphore, nodes)
        } else {
            let read_write = children.iter().any(|c| c.contains(READ_NODE) || c.contains(WRITE_NODE));
            let election = !read_write && children.iter().any(|c| c.contains(LATCH_NODE));
            let side = |name: &str| match (read_write, election, name.contains(WRITE_NODE)) {
                (false, false, _) => Side::Exclusive,
                (false, true, _) => Side::Member,
                (true, _, true) => Side::Write,
                (true, _, false) => Side::Read,
            };
            let recipe = match (read_write, election) {
                (true, _) => RecipeKind::ReadWrite,
                (false, true) => RecipeKind::Election,
                (false, false) => RecipeKind::Mutex,
            };
            (recipe, read_queue(&session, &path, children, side).await?)
        };
        let (holders, waiters): (Vec<_>, Vec<_>) = nodes.into_iter().partition(|n| n.holds);
        let changed: QueueChanged = Box::pin(async move {
            future::select_all(watches).await;
        });
        let view = LockView {
            name: name.to_owned(),
            path,
            recipe,
            holders,
            waiters,
        };
        Ok((Some(view), changed))
    }
}

/// Reads the nodes of one queue directory and judges each by its rule.
async fn read_queue(
    session: &Session,
    dir: &str,
    children: Vec<String>,
    side: impl Fn(&str) -> Side,
) -> Result<Vec<QueuedNode>, LockError> {
    let queue = queue_order(children);
    let zk = session.zk().map_err(|err| LockError::zk("get data", err))?;
    let reads = future::join_all(queue.iter().map(|c| zk.get_data(&format!("{dir}/{}", c.name)))).await;
    drop(zk);
    let now_ms = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64);
    // Nodes that went away between the listing and the read are left out, before judging.
    let mut present: Vec<(Contender, Vec<u8>, zk::Stat)> = Vec::with_capacity(queue.len());
    for (contender, read) in queue.into_iter().zip(reads) {
        match read {
            Ok((data, stat)) => present.push((contender, data, stat)),
            Err(zk::Error::NoNode) => {}
            Err(err) => return Err(LockError::zk("read", err)),
        }
    }
    let order: Vec<Contender> = present.iter().map(|(c, _, _)| c.clone()).collect();
    Ok(present
        .into_iter()
        .enumerate()
        .map(|(i, (contender, data, stat))| {
            let side = side(&contender.name);
            // Lease nodes all hold; every other queue is judged by its contenders' rule.
            let decision = match side {
                Side::Lease => Decision::Go,
                Side::Read => Readers.decide(&order, i),
                Side::Write => Leases {
                    leases: 1,
                    node: WRITE_NODE,
                }
                .decide(&order, i),
                Side::Exclusive | Side::Acquirer | Side::Member => Leases {
                    leases: 1,
                    node: MUTEX_NODE,
                }
                .decide(&order, i),
            };
            let (holds, waits_for) = match decision {
                Decision::Go => (true, None),
                Decision::Wait { on, .. } => (false, Some(order[on].name.clone())),
            };
            QueuedNode {
                data: ContenderData::read(&contender.name, &data),
                node: contender.name,
                side,
                holds,
                waits_for,
                age: Duration::from_millis(now_ms.saturating_sub(stat.ctime).max(0) as u64),
                token: FencingToken::new(stat.czxid, 0),
                session: stat.ephemeral_owner,
                ctime_ms: stat.ctime,
            }
        })
        .collect())
}

fn millis<S: serde::Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_u64(d.as_millis() as u64)
}

fn display<S: serde::Serializer>(t: &FencingToken, s: S) -> Result<S::Ok, S::Error> {
    s.collect_str(t)
}

fn hex<S: serde::Serializer>(id: &i64, s: S) -> Result<S::Ok, S::Error> {
    s.collect_str(&format_args!("{id:#x}"))
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use futures_util::FutureExt;
    use zookeeper_client as zk;

    use crate::test_server::{setup, Setup};

    /// A holder's node deleted after the inspection listed the directory and before it read
    /// the node: the view leaves it out, judges the rest without it, and reports the queue
    /// changed.
    ///
    /// The delete is ordered by the server, not by timing: the inspection's listing is sent
    /// first (its first poll), then the release's delete on the same session, and only then
    /// are the node reads sent (when the inspection is polled again, with the listing already
    /// answered). The fired directory watch shows that the listing came before the delete, so
    /// the node was listed and then found gone.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_node_gone_between_the_listing_and_its_read_is_left_out() {
        let Setup {
            server: _server,
            client,
            view: foreign,
        } = setup(Duration::from_secs(4)).await;
        let guard = client.mutex("vanishing").unwrap().acquire().await.unwrap();
        let sequential = zk::CreateMode::EphemeralSequential.with_acls(zk::Acls::anyone_all());
        let (_, seq) = foreign
            .create("/zklock/vanishing/someone-", b"", &sequential)
            .await
            .expect("create a foreign contender");
        let waiter = format!("someone-{seq}");

        let mut inspection = Box::pin(client.inspect_and_watch("vanishing"));
        assert!(
            inspection.as_mut().now_or_never().is_none(),
            "the listing waits for its answer"
        );
        guard.release().await.unwrap();
        let (view, changed) = tokio::time::timeout(Duration::from_secs(20), inspection)
            .await
            .expect("the inspection answers")
            .expect("a vanished node is not an error");
        tokio::time::timeout(Duration::from_secs(20), changed)
            .await
            .expect("the listing saw the holder's node, so its delete fires the watch");
        let view = view.expect("the lock exists");
        let nodes: Vec<_> = view
            .holders
            .iter()
            .chain(&view.waiters)
            .map(|n| n.node.as_str())
            .collect();
        assert_eq!(nodes, [waiter.as_str()], "{view:?}");
        assert!(
            view.holders[0].waits_for.is_none(),
            "judged without the vanished node, the next in line holds: {view:?}"
        );
    }
}
