//! A handle for one named lock ([`Lock`]): its name, kind and directory, its settings (lock-delay,
//! minimum hold, caching, metrics template), and what callers ask of it: acquire, try, is it
//! locked, is it held here. The path an acquisition takes behind the handle is in
//! [`acquire`].

mod acquire;

use std::sync::Arc;
use std::time::Duration;

use crate::client::LockClient;
use crate::engine::cache::MAX_LINGER;
use crate::engine::guard::{ClientId, LockGuard};
use crate::engine::lock_delay::MAX_LOCK_DELAY;
use crate::engine::queue::Recipe;
use crate::engine::reentrancy;
use crate::engine::rules::{LockKind, Rule};
use crate::error::LockError;
use crate::ops::inspect::{LockView, Side};
use crate::telemetry::metrics::Labels;

/// The longest [`Lock::with_min_hold`] accepted: an hour, as for the lock-delay.
const MAX_MIN_HOLD: Duration = Duration::from_secs(3600);

/// Whether locks of `kind` can be cached: those that queue in the process (exclusive kinds).
fn caches(kind: LockKind) -> bool {
    matches!(kind, LockKind::Mutex | LockKind::Write)
}

/// One named lock of one kind. Cheap to clone; creating it costs nothing on the server.
///
/// # Reentrancy
///
/// An acquisition re-enters a hold only when it runs inside that hold's scope: the body of a
/// `#[distributed_lock]` function, or a future run with [`LockGuard::scope`]. Everywhere else
/// each acquisition is a new holder, as with `tokio::sync::Mutex`: two futures polled by one
/// task (`join!`, `select!`, `FuturesUnordered`, …) exclude each other, each grant has its own
/// fencing token, and a task that acquires a lock it already holds outside a scope waits for
/// itself (until its timeout).
///
/// ```no_run
/// # async fn demo(client: zklock_runtime::LockClient) -> Result<(), zklock_runtime::LockError> {
/// use std::time::Duration;
///
/// let lock = client.mutex("inventory:42")?;
/// match lock.try_acquire().await? {
///     Some(guard) => println!("got it: {}", guard.fencing_token()),
///     None => println!("busy elsewhere"),
/// }
/// let guard = lock.acquire_timeout(Duration::from_secs(5)).await?;
/// # drop(guard); Ok(()) }
/// ```
#[derive(Clone)]
pub struct Lock {
    client: LockClient,
    name: Arc<str>,
    dir: Arc<str>,
    kind: LockKind,
    rule: Arc<dyn Rule>,
    /// The name template this lock was made from, if known.
    template: Option<Arc<str>>,
    /// For [`LockKind::Leader`]: the participant id its nodes hold (default: the client's
    /// identity).
    participant: Option<Arc<str>>,
    /// See [`Lock::with_lock_delay`].
    lock_delay: Option<Duration>,
    /// See [`Lock::with_min_hold`].
    min_hold: Option<Duration>,
    /// See [`Lock::with_cache`].
    cache: Option<Duration>,
}

impl std::fmt::Debug for Lock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Lock")
            .field("name", &self.name)
            .field("dir", &self.dir)
            .field("kind", &self.kind)
            .field("template", &self.template)
            .field("lock_delay", &self.lock_delay)
            .field("min_hold", &self.min_hold)
            .field("cache", &self.cache)
            .finish()
    }
}

impl LockClient {
    /// An exclusive lock (Curator's `InterProcessMutex` layout).
    ///
    /// ```no_run
    /// # async fn demo(client: zklock_runtime::LockClient) -> Result<(), zklock_runtime::LockError> {
    /// let guard = client.mutex("inventory:42")?.acquire().await?;
    /// # drop(guard); Ok(()) }
    /// ```
    pub fn mutex(&self, name: &str) -> Result<Lock, LockError> {
        self.lock(name, LockKind::Mutex)
    }

    /// The shared side of a read/write lock (Curator's `InterProcessReadWriteLock` layout).
    pub fn read_lock(&self, name: &str) -> Result<Lock, LockError> {
        self.lock(name, LockKind::Read)
    }

    /// The exclusive side of a read/write lock.
    pub fn write_lock(&self, name: &str) -> Result<Lock, LockError> {
        self.lock(name, LockKind::Write)
    }

    /// A semaphore that lets `leases` holders in at once.
    ///
    /// ```no_run
    /// # async fn demo(client: zklock_runtime::LockClient) -> Result<(), zklock_runtime::LockError> {
    /// let slots = client.semaphore("exports", 3)?;
    /// let lease = slots.acquire().await?;
    /// # drop(lease); Ok(()) }
    /// ```
    pub fn semaphore(&self, name: &str, leases: u32) -> Result<Lock, LockError> {
        self.lock(name, LockKind::Semaphore { leases })
    }

    /// A lock of any kind; the other constructors are shorthands for this.
    pub fn lock(&self, name: &str, kind: LockKind) -> Result<Lock, LockError> {
        crate::name::validate_name(name)?;
        if let LockKind::Semaphore { leases: 0 } = kind {
            return Err(LockError::invalid_config("a semaphore needs at least one lease"));
        }
        let dir = format!("{}/{}", self.namespace(), name);
        Ok(Lock::at(self.clone(), name.into(), dir, kind))
    }
}

impl Lock {
    /// The lock of `kind` whose directory is `dir`, named `name` in logs and errors.
    fn at(client: LockClient, name: Arc<str>, dir: String, kind: LockKind) -> Lock {
        let cache = client.inner.config.default_cache.filter(|_| caches(kind));
        Lock {
            client,
            name,
            dir: dir.into(),
            kind,
            rule: kind.rule(),
            template: None,
            participant: None,
            lock_delay: None,
            min_hold: None,
            cache,
        }
    }

    /// The same lock, whose nodes name `participant` as the member (leader election).
    pub(crate) fn with_participant(mut self, participant: Arc<str>) -> Lock {
        self.participant = Some(participant);
        self
    }

    /// The same lock with a lock-delay: after a holder vanishes without releasing (its
    /// session died, or an operator deleted its node), a waiter that saw it go waits `delay`
    /// before taking the lock, so that the old holder's writes still in flight can drain (as
    /// Chubby's and Consul's lock-delay). Clean releases are marked, so they cost no delay.
    /// `Duration::ZERO` turns it off.
    ///
    /// Every contender of the lock should use the same setting: a contender without it does
    /// not mark its releases, so waiters with a delay wait after each of them; Curator's
    /// contenders never wait. A contender arriving after the vanished holder's node was
    /// already gone does not wait either. See docs/safety.md, "Lock-delay".
    ///
    /// Errors: [`LockError::InvalidConfig`] for a semaphore (its acquirers do not queue behind
    /// a holder) and for a delay over an hour.
    ///
    /// ```no_run
    /// # async fn demo(client: zklock_runtime::LockClient) -> Result<(), zklock_runtime::LockError> {
    /// use std::time::Duration;
    /// let ledger = client.mutex("ledger")?.with_lock_delay(Duration::from_secs(5))?;
    /// let guard = ledger.acquire().await?;
    /// # drop(guard); Ok(()) }
    /// ```
    pub fn with_lock_delay(mut self, delay: Duration) -> Result<Lock, LockError> {
        if matches!(self.kind, LockKind::Semaphore { .. }) && !delay.is_zero() {
            return Err(LockError::invalid_config(format!(
                "lock `{}`: a semaphore takes no lock-delay (its acquirers do not queue behind a holder)",
                self.name
            )));
        }
        if delay > MAX_LOCK_DELAY {
            return Err(LockError::invalid_config(format!(
                "lock `{}`: a lock-delay of {delay:?} is over the limit of {MAX_LOCK_DELAY:?}",
                self.name
            )));
        }
        self.lock_delay = (!delay.is_zero()).then_some(delay);
        Ok(self)
    }

    /// The lock-delay set with [`with_lock_delay`](Self::with_lock_delay), if any.
    pub fn lock_delay(&self) -> Option<Duration> {
        self.lock_delay
    }

    /// The same lock, held at least `min_hold` from each grant (ShedLock's `lockAtLeastFor`):
    /// a guard released or dropped sooner keeps the node until then, so a task that fires a
    /// moment later on another node (a clock a little behind) finds the lock still taken. A
    /// drop returns at once and the node is released in the background ([`LockClient::flush`]
    /// waits for that too); [`LockGuard::release`] waits until it is. Local waiters wait too. The rest of the minimum is cut short when the
    /// hold is lost, or its session ends (the client closed). `Duration::ZERO` turns it off.
    ///
    /// Errors: [`LockError::InvalidConfig`] for a minimum over an hour.
    ///
    /// ```no_run
    /// # async fn demo(client: zklock_runtime::LockClient) -> Result<(), zklock_runtime::LockError> {
    /// use std::time::Duration;
    /// let report = client.mutex("daily-report")?.with_min_hold(Duration::from_secs(30))?;
    /// if let Some(guard) = report.try_acquire().await? {
    ///     // ... a short body; the lock stays taken for 30 s from the grant ...
    ///     drop(guard);
    /// }
    /// # Ok(()) }
    /// ```
    pub fn with_min_hold(mut self, min_hold: Duration) -> Result<Lock, LockError> {
        if min_hold > MAX_MIN_HOLD {
            return Err(LockError::invalid_config(format!(
                "lock `{}`: a min_hold of {min_hold:?} is over the limit of {MAX_MIN_HOLD:?}",
                self.name
            )));
        }
        self.min_hold = (!min_hold.is_zero()).then_some(min_hold);
        Ok(self)
    }

    /// The minimum hold set with [`with_min_hold`](Self::with_min_hold), if any.
    pub fn min_hold(&self) -> Option<Duration> {
        self.min_hold
    }

    /// The same lock, cached by this process (opt-in; the client-wide default is
    /// [`LockClientBuilder::default_cache`](crate::LockClientBuilder::default_cache)): when a
    /// hold ends and no task of this process waits for the lock, its node is kept for up to
    /// `linger` instead of deleted, and the next acquisition in this process within that time
    /// is granted at once, without a request to ZooKeeper, with a larger fencing token (the
    /// next generation on the same node, as a handoff between tasks gives).
    ///
    /// The node goes back as soon as anyone else wants the lock: a contender node of another
    /// process (or another client of this one) appearing in the lock's directory, zklock's or
    /// Curator's, ends the linger and the node is deleted, so that contender waits for one
    /// watch notification and one delete more than behind a released lock (plus at most one
    /// hold, if a local acquisition was granted before the notification came); one arriving
    /// while the lock is held here waits as behind any local holder, at most
    /// [`max_local_handoffs`](crate::LockClientBuilder::max_local_handoffs) handoffs more. The
    /// linger also ends when it runs out, when the node is deleted or a revocation is asked
    /// for, when the session is lost, and on [`LockClient::close`] and [`LockClient::flush`]. A
    /// cached grant is made only while the directory's watch vouches that the node exists and
    /// nobody else is queued, and the session is vouched for and was never reported lost since
    /// the node was granted (see docs/safety.md, guarantee 18).
    ///
    /// Meanwhile the lock is taken as far as everyone else sees: [`is_locked`](Self::is_locked)
    /// and `zklock show` report the idle node as the holder, and
    /// [`is_cached`](Self::is_cached) tells it apart. A single try in another process
    /// ([`try_acquire`](Self::try_acquire), a zero timeout, the attribute's `if_busy = "skip"`)
    /// may find it busy: the node goes once that process's contender is seen, which races
    /// with the try's own look at the queue. Either way the try ends the linger. Where others
    /// try once and must not miss an idle lock, give them a short wait instead
    /// (`acquire_timeout` of a few milliseconds), or do not cache. `Duration::ZERO` turns
    /// caching off.
    ///
    /// Errors: [`LockError::InvalidConfig`] for a linger over an hour, and for a read lock, a
    /// semaphore or an election (only mutexes and write locks queue in the process, where
    /// the idle node is kept).
    ///
    /// ```no_run
    /// # async fn demo(client: zklock_runtime::LockClient) -> Result<(), zklock_runtime::LockError> {
    /// use std::time::Duration;
    /// let stock = client.mutex("inventory:42")?.with_cache(Duration::from_secs(5))?;
    /// for _ in 0..100 {
    ///     let guard = stock.acquire().await?; // the first goes to ZooKeeper, the others not
    ///     // ... sell one ...
    ///     drop(guard);
    /// }
    /// # Ok(()) }
    /// ```
    pub fn with_cache(mut self, linger: Duration) -> Result<Lock, LockError> {
        if !caches(self.kind) && !linger.is_zero() {
            return Err(LockError::invalid_config(format!(
                "lock `{}`: only mutexes and write locks are cached (a {} is not)",
                self.name,
                self.kind.label()
            )));
        }
        if linger > MAX_LINGER {
            return Err(LockError::invalid_config(format!(
                "lock `{}`: a cache linger of {linger:?} is over the limit of {MAX_LINGER:?}",
                self.name
            )));
        }
        self.cache = (!linger.is_zero()).then_some(linger);
        Ok(self)
    }

    /// How long an idle node of this lock is kept for this process ([`with_cache`](Self::with_cache),
    /// or the client's [`default_cache`](crate::LockClientBuilder::default_cache)), if it is cached.
    pub fn cache(&self) -> Option<Duration> {
        self.cache
    }

    /// Whether this process keeps an idle node of this lock now (lock caching,
    /// [`with_cache`](Self::with_cache)): no task of it holds the lock, and the next
    /// acquisition here is granted without a request while this lasts. Answered from this
    /// process's memory.
    pub fn is_cached(&self) -> bool {
        self.client.inner.gates.is_cached(&self.dir, self.kind)
    }

    /// The same lock, labelled with the name template it was made from
    /// (`"inventory:{sku}"` for `inventory:42`), as `#[distributed_lock]` does. The template is
    /// recorded in contender nodes, for operators (`zklock show`); it changes nothing about
    /// how the lock works.
    ///
    /// ```no_run
    /// # async fn demo(client: zklock_runtime::LockClient, sku: &str) -> Result<(), zklock_runtime::LockError> {
    /// let lock = client.mutex(&format!("inventory:{sku}"))?.with_template("inventory:{sku}");
    /// assert_eq!(lock.template(), Some("inventory:{sku}"));
    /// # Ok(()) }
    /// ```
    #[must_use]
    pub fn with_template(mut self, template: impl Into<Arc<str>>) -> Lock {
        self.template = Some(template.into());
        self
    }

    /// The name template given with [`with_template`](Self::with_template), if any.
    pub fn template(&self) -> Option<&str> {
        self.template.as_deref()
    }

    /// What this lock's exported metrics are labelled with.
    fn labels(&self) -> Labels<'_> {
        Labels {
            kind: self.kind.label(),
            template: self.template.as_ref(),
        }
    }

    /// The lock name as given.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The lock directory in ZooKeeper (`<namespace>/<name>`).
    pub fn path(&self) -> &str {
        &self.dir
    }

    /// The recipe this lock follows.
    pub fn kind(&self) -> LockKind {
        self.kind
    }

    /// The client this lock is taken through; part of the lock's identity.
    pub(crate) fn client_id(&self) -> ClientId {
        self.client.inner.id
    }

    /// Waits, without a bound, until the lock is granted.
    ///
    /// Inside the scope of a hold of this lock ([`LockGuard::scope`], a `#[distributed_lock]`
    /// body) this re-enters that hold at once; see [Reentrancy](Self#reentrancy). Fails early
    /// only on errors a wait cannot cure: no ZooKeeper session can be opened within the
    /// client's connect timeout, or the server refuses the request.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: dropping the future at any point leaves no contender node behind once the
    /// background cleanup has run (see [`LockClient::flush`]), and gives up its place in this
    /// process's queue.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn demo(client: zklock_runtime::LockClient) -> Result<(), zklock_runtime::LockError> {
    /// let guard = client.mutex("ledger")?.acquire().await?;
    /// println!("fencing token {}", guard.fencing_token());
    /// # Ok(()) }
    /// ```
    pub async fn acquire(&self) -> Result<LockGuard, LockError> {
        self.acquire_within(None).await
    }

    /// Waits at most `timeout` for the lock; [`LockError::Timeout`] after that.
    ///
    /// `Duration::ZERO` tries once: one create-and-list round trip, no waiting on other
    /// holders. While the client's session is cut off (disconnected), the error is
    /// [`LockError::Connection`] (naming what the last look at each server found), within
    /// `timeout`, and at once for `Duration::ZERO`; no node is left behind either way. A client
    /// with no session yet, or whose session expired, opens one first, within the connect
    /// timeout.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe, like [`acquire`](Self::acquire).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn demo(client: zklock_runtime::LockClient) -> Result<(), zklock_runtime::LockError> {
    /// use std::time::Duration;
    /// use zklock_runtime::LockError;
    ///
    /// match client.mutex("ledger")?.acquire_timeout(Duration::from_secs(5)).await {
    ///     Ok(guard) => drop(guard),
    ///     Err(LockError::Timeout { waited, .. }) => println!("busy for {waited:?}"),
    ///     Err(err) => return Err(err),
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn acquire_timeout(&self, timeout: Duration) -> Result<LockGuard, LockError> {
        self.acquire_within(Some(timeout)).await
    }

    /// Tries once: `Ok(None)` if the lock is held elsewhere.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe, like [`acquire`](Self::acquire).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn demo(client: zklock_runtime::LockClient) -> Result<(), zklock_runtime::LockError> {
    /// if let Some(guard) = client.mutex("nightly-report")?.try_acquire().await? {
    ///     // ... only one process gets here at a time ...
    ///     guard.release().await?;
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn try_acquire(&self) -> Result<Option<LockGuard>, LockError> {
        match self.acquire_within(Some(Duration::ZERO)).await {
            Ok(guard) => Ok(Some(guard)),
            Err(LockError::Timeout { .. }) => Ok(None),
            Err(err) => Err(err),
        }
    }

    /// Whether the lock is held now, by anyone: any process, any client (this one included),
    /// zklock or Curator contenders in the same layout. Read from the server: one listing of
    /// the lock's directory, whose contender nodes are judged by the recipe's rules, exactly
    /// as [`LockClient::inspect`] judges them (and as `zklock show` shows them).
    ///
    /// "Held" means held in a way that excludes a holder of this handle's kind:
    ///
    /// - a mutex, the write side of a read/write lock, a leader election group: someone holds
    ///   it (for the write side: a writer, or one or more readers; for a group: a leader);
    /// - the read side of a read/write lock: a writer holds it. Readers share the lock, so a
    ///   lock held by readers alone is not locked for a reader (the write side of the same
    ///   lock answers `true` then);
    /// - a semaphore: every lease is taken (as many leases held as this handle's count).
    ///
    /// A directory that does not exist (nobody has used the lock lately) is not locked. A node
    /// a process keeps idle in its lock cache ([`with_cache`](Self::with_cache)) counts as a
    /// holder: other contenders queue behind it until that process gives it up.
    ///
    /// The answer is a snapshot: a holder may come or go as soon as it has been read. Use it to
    /// report or to decide something that tolerates a stale answer; to take the lock if it is
    /// free, use [`try_acquire`](Self::try_acquire). Nor does it say whether an acquisition
    /// would be granted at once: a reader arriving while a writer waits behind other readers
    /// queues behind that writer, though no writer holds yet.
    ///
    /// Errors: those of [`LockClient::inspect`] ([`LockError::Connection`] when no session
    /// can be opened, [`LockError::Closed`] on a closed client, a refused read).
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: it only reads.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn demo(client: zklock_runtime::LockClient) -> Result<(), zklock_runtime::LockError> {
    /// let lock = client.mutex("nightly-report")?;
    /// if lock.is_locked().await? {
    ///     println!("a report is being written somewhere");
    /// }
    /// // Readers share: a read lock is locked only while a writer holds it.
    /// let readable = client.read_lock("catalog")?;
    /// println!("catalog being written: {}", readable.is_locked().await?);
    /// # Ok(()) }
    /// ```
    pub async fn is_locked(&self) -> Result<bool, LockError> {
        self.client.check_open()?;
        // `inspect` reads `<namespace>/<name>`, this lock's directory.
        debug_assert_eq!(&*self.dir, format!("{}/{}", self.client.namespace(), self.name));
        let Some(view) = self.client.inspect(&self.name).await? else {
            return Ok(false);
        };
        Ok(excludes(self.kind, &view))
    }

    /// Whether the calling code runs inside the scope of a hold of this lock: the body of a
    /// `#[distributed_lock]` function, or a future run with [`LockGuard::scope`] or
    /// [`LockGuard::run`] (and whatever they await). The task's counterpart of Redisson's
    /// `isHeldByCurrentThread`, with the call scope in place of the thread.
    ///
    /// A hold matches as [reentrancy](Self#reentrancy) matches it: taken through this lock's
    /// client (or a clone of it), on this lock's directory, of this kind, or of the write side
    /// for a handle of the read side (a writer may read). A semaphore lease or an election
    /// member in the scope counts for a handle of the same kind too, though those never
    /// re-enter.
    ///
    /// Answered from this process's memory, with no round trip. `false` outside every scope,
    /// even while this task keeps a guard of the lock (holding a guard is not running inside
    /// its scope, see [Reentrancy](Self#reentrancy)); `false` in a task spawned from the
    /// scope, and in futures polled beside it; `false` once the hold has been released, or
    /// lost (when [`LockGuard::is_lost`] is true). Whether anyone holds the lock, here or
    /// elsewhere, is [`is_locked`](Self::is_locked).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn demo(client: zklock_runtime::LockClient) -> Result<(), zklock_runtime::LockError> {
    /// let lock = client.mutex("ledger")?;
    /// assert!(!lock.is_held_by_current_task());
    /// let guard = lock.acquire().await?;
    /// guard.scope(async { assert!(lock.is_held_by_current_task()) }).await;
    /// // Outside the scope, this task only keeps the guard.
    /// assert!(!lock.is_held_by_current_task());
    /// guard.release().await?;
    /// # Ok(()) }
    /// ```
    pub fn is_held_by_current_task(&self) -> bool {
        reentrancy::held_in_scope(self.client_id(), &self.dir, self.kind)
    }

    /// What the queue recipe needs to know about this lock.
    pub(crate) fn recipe(&self) -> Recipe<'_> {
        let inner = &self.client.inner;
        Recipe {
            dir: &self.dir,
            node_name: self.rule.node_name(),
            acls: inner.config.acls(),
            cleanup: &inner.cleanup,
            // Readers share a directory with each other: being alone proves less for them.
            skip_listing_when_alone: matches!(self.kind, LockKind::Mutex | LockKind::Write | LockKind::Leader),
            holder: &inner.config.holder,
            template: self.template.as_deref(),
            participant: (self.kind == LockKind::Leader)
                .then(|| self.participant.as_deref().unwrap_or(inner.config.holder.identity())),
            lock_delay: self.lock_delay,
        }
    }

    /// The other side of this read/write lock: same name, directory and template.
    pub(crate) fn side(&self, kind: LockKind) -> Lock {
        let mut side = Lock::at(self.client.clone(), self.name.clone(), self.dir.to_string(), kind);
        side.template = self.template.clone();
        side.lock_delay = self.lock_delay;
        side
    }
}

/// Whether the holders of `view` exclude a holder of `kind` (see [`Lock::is_locked`]).
fn excludes(kind: LockKind, view: &LockView) -> bool {
    match kind {
        LockKind::Read => view.holders.iter().any(|h| h.side == Side::Write),
        LockKind::Semaphore { leases } => {
            view.holders.iter().filter(|h| h.side == Side::Lease).count() >= leases as usize
        }
        // A semaphore's acquirer holds only the mutex over acquirers, not the semaphore.
        _ => view.holders.iter().any(|h| h.side != Side::Acquirer),
    }
}
