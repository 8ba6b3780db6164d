//! Several locks held together: acquired in one canonical order, all or nothing.
//!
//! A [`MultiLock`] is an ordered set of [`Lock`]s of one kind. It calls down into each lock's
//! own acquire path ([`crate::lock`]) one after the other, so reentrancy, the local queue and
//! node handoff work per name exactly as for a single lock; what this module adds is the order,
//! the shared deadline and the all-or-nothing rule.
//!
//! **Why the order prevents deadlock.** Every multi-lock sorts its locks by their ZooKeeper path
//! before taking any, whatever order the caller gave. Two multi-locks that share locks `a` and
//! `b` both take `a` first, so neither can hold `b` while waiting for `a`: the "holds one, waits
//! for the other" cycle needs two holders that disagree on the order. (Curator's
//! `InterProcessMultiLock` takes its locks in the caller's order, so callers passing `{a, b}`
//! and `{b, a}` can deadlock.) The argument covers holders that take all their locks through
//! multi-locks; a caller that already holds `b` outside a multi-lock and then asks for `{a, b}`
//! can still deadlock against another holder of `a`, as with any nested locking.

use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures_util::future;
use tracing::debug;

use crate::client::LockClient;
use crate::engine::clock::Stamp;
use crate::engine::guard::LockGuard;
use crate::engine::reentrancy;
use crate::engine::rules::LockKind;
use crate::engine::supervise::{supervise, OnLost, OnRevoke, Supervision};
use crate::engine::token::FencingToken;
use crate::error::LockError;
use crate::lock::Lock;

/// How many times one acquisition takes every part again after finding one of them lost
/// before it gives up with the loss.
const MAX_LOST_ROUNDS: u32 = 5;

/// When an acquisition that keeps finding a part lost gives up: after the first lost round
/// once its time is up, and otherwise after `MAX_LOST_ROUNDS` fresh rounds have been lost too.
#[derive(Debug, Default)]
struct LostRounds(u32);

impl LostRounds {
    /// One more round found a part lost; true when the acquisition should give up with it.
    fn give_up(&mut self, out_of_time: bool) -> bool {
        self.0 += 1;
        out_of_time || self.0 > MAX_LOST_ROUNDS
    }
}

/// Several locks of one kind, taken together in one canonical order (sorted by lock path)
/// whatever order they were named in, all or nothing. Duplicate names collapse into one.
/// Cheap to clone; creating it costs nothing on the server.
///
/// See [`LockClient::multi_lock`]. The order rules out the deadlock of two callers locking
/// `{a, b}` and `{b, a}`, provided each takes all the locks of an operation in one multi-lock
/// (see `docs/safety.md`, "Several locks at once").
///
/// ```no_run
/// # async fn demo(client: zklock_runtime::LockClient) -> Result<(), zklock_runtime::LockError> {
/// use std::time::Duration;
///
/// // Either order gives the same multi-lock: `account:1` is taken first.
/// let transfer = client.multi_lock(["account:2", "account:1"])?;
/// let guard = transfer.acquire_timeout(Duration::from_secs(5)).await?;
/// let from = guard.fencing_token_of("account:2");
/// # let _ = from;
/// guard.release().await?;
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct MultiLock {
    /// Sorted by path, without duplicates; never empty.
    locks: Arc<[Lock]>,
}

impl LockClient {
    /// Exclusive locks on every name in `names`, taken together (see [`MultiLock`]).
    ///
    /// Errors: [`LockError::InvalidName`] for the first unusable name,
    /// [`LockError::InvalidConfig`] when `names` is empty.
    ///
    /// ```no_run
    /// # async fn demo(client: zklock_runtime::LockClient) -> Result<(), zklock_runtime::LockError> {
    /// let skus = vec!["sku-7".to_string(), "sku-3".to_string()];
    /// let cart = client.multi_lock(skus.iter().map(|sku| format!("inventory:{sku}")))?;
    /// let guard = cart.acquire().await?;
    /// # drop(guard); Ok(()) }
    /// ```
    pub fn multi_lock<I>(&self, names: I) -> Result<MultiLock, LockError>
    where
        I: IntoIterator,
        I::Item: AsRef<str>,
    {
        self.multi_lock_of(LockKind::Mutex, names)
    }

    /// Locks of `kind` on every name in `names`, taken together (see [`MultiLock`]): read or
    /// write sides of read/write locks, or one lease of each of several semaphores.
    ///
    /// ```no_run
    /// # async fn demo(client: zklock_runtime::LockClient) -> Result<(), zklock_runtime::LockError> {
    /// use zklock_runtime::LockKind;
    /// let readers = client.multi_lock_of(LockKind::Read, ["catalog", "prices"])?;
    /// let guard = readers.acquire().await?;
    /// # drop(guard); Ok(()) }
    /// ```
    pub fn multi_lock_of<I>(&self, kind: LockKind, names: I) -> Result<MultiLock, LockError>
    where
        I: IntoIterator,
        I::Item: AsRef<str>,
    {
        let locks = names
            .into_iter()
            .map(|name| self.lock(name.as_ref(), kind))
            .collect::<Result<Vec<_>, _>>()?;
        MultiLock::of(locks)
    }
}

impl MultiLock {
    /// A multi-lock over locks made beforehand, for instance labelled with
    /// [`Lock::with_template`]. They must all be of one kind ([`LockError::InvalidConfig`]
    /// otherwise, or when there is none).
    ///
    /// ```no_run
    /// # async fn demo(client: zklock_runtime::LockClient) -> Result<(), zklock_runtime::LockError> {
    /// use zklock_runtime::{LockError, MultiLock};
    /// let skus = [3, 1];
    /// let locks = skus
    ///     .iter()
    ///     .map(|sku| Ok(client.mutex(&format!("inventory:{sku}"))?.with_template("inventory:{sku}")))
    ///     .collect::<Result<Vec<_>, LockError>>()?;
    /// let guard = MultiLock::new(locks)?.acquire().await?;
    /// # drop(guard); Ok(()) }
    /// ```
    pub fn new(locks: impl IntoIterator<Item = Lock>) -> Result<MultiLock, LockError> {
        let locks: Vec<Lock> = locks.into_iter().collect();
        if let Some(other) = locks.iter().find(|l| l.kind() != locks[0].kind()) {
            return Err(LockError::invalid_config(format!(
                "a multi-lock takes locks of one kind: {:?} is a {:?}, {:?} a {:?}",
                locks[0].name(),
                locks[0].kind(),
                other.name(),
                other.kind()
            )));
        }
        MultiLock::of(locks)
    }

    /// The multi-lock over `locks` (all of one kind): sorted by path, duplicates dropped. A
    /// duplicate is the same path through the same client; the same path through two clients
    /// is two locks (two ensembles, or two holders of one), as for reentrancy.
    pub(crate) fn of(mut locks: Vec<Lock>) -> Result<MultiLock, LockError> {
        if locks.is_empty() {
            return Err(LockError::invalid_config("a multi-lock needs at least one lock name"));
        }
        locks.sort_by(|a, b| a.path().cmp(b.path()).then(a.client_id().cmp(&b.client_id())));
        locks.dedup_by(|a, b| a.path() == b.path() && a.client_id() == b.client_id());
        Ok(MultiLock { locks: locks.into() })
    }
}

impl MultiLock {
    /// The locks, in the order they are taken (sorted by path, without duplicates).
    pub fn locks(&self) -> &[Lock] {
        &self.locks
    }

    /// Waits, without a bound, until every lock is granted.
    ///
    /// Locks are taken one after the other in path order; each one re-enters a hold of the
    /// current call scope as [`Lock::acquire`] does. If one fails, the ones already taken are
    /// released before the error is returned. `Ok` means every lock is held: a lock lost while
    /// a later one was awaited (its session expired meanwhile) makes the acquisition release
    /// them all and start over, or, after a few rounds, return the [`LockError::Lost`].
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: dropping the future at any point releases the locks already taken and
    /// leaves no contender node behind once the background cleanup has run (see
    /// [`LockClient::flush`]).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn demo(client: zklock_runtime::LockClient) -> Result<(), zklock_runtime::LockError> {
    /// let guard = client.multi_lock(["account:7", "account:9"])?.acquire().await?;
    /// # drop(guard); Ok(()) }
    /// ```
    pub async fn acquire(&self) -> Result<MultiGuard, LockError> {
        self.acquire_within(None).await
    }

    /// Waits at most `timeout` for all the locks together: one bound for the whole
    /// acquisition, not one per lock. On [`LockError::Timeout`] (which names the lock that was
    /// not granted in time) or any other error, the locks already taken are released.
    ///
    /// `Duration::ZERO` tries each lock once.
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
    /// let cart = client.multi_lock(["sku-1", "sku-2", "sku-3"])?;
    /// match cart.acquire_timeout(Duration::from_secs(5)).await {
    ///     Ok(guard) => drop(guard),
    ///     Err(LockError::Timeout { name, .. }) => println!("{name} stayed busy"),
    ///     Err(err) => return Err(err),
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn acquire_timeout(&self, timeout: Duration) -> Result<MultiGuard, LockError> {
        self.acquire_within(Some(timeout)).await
    }

    /// Tries each lock once: `Ok(None)` if one of them is held elsewhere (and none is kept).
    ///
    /// # Cancel safety
    ///
    /// Cancel safe, like [`acquire`](Self::acquire).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn demo(client: zklock_runtime::LockClient) -> Result<(), zklock_runtime::LockError> {
    /// if let Some(guard) = client.multi_lock(["a", "b"])?.try_acquire().await? {
    ///     guard.release().await?;
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn try_acquire(&self) -> Result<Option<MultiGuard>, LockError> {
        match self.acquire_within(Some(Duration::ZERO)).await {
            Ok(guard) => Ok(Some(guard)),
            Err(LockError::Timeout { .. }) => Ok(None),
            Err(err) => Err(err),
        }
    }

    async fn acquire_within(&self, timeout: Option<Duration>) -> Result<MultiGuard, LockError> {
        let started = Instant::now();
        let mut lost_rounds = LostRounds::default();
        loop {
            let guards = self.take_each(started, timeout).await?;
            // A part granted early may have been lost while a later one was awaited.
            let mut lost = None;
            for part in &guards {
                if let Err(err) = still_held(part).await {
                    lost = Some((part.name().to_owned(), err));
                    break;
                }
            }
            let Some((name, err)) = lost else {
                return Ok(MultiGuard {
                    guards,
                    acquired_at: Stamp::now(),
                });
            };
            let out_of_time = timeout.is_some_and(|t| started.elapsed() >= t);
            debug!(lock = %name, "a part of a multi-lock was lost while the others were taken; starting over");
            // Dropping the guards releases every part before the next round queues again.
            drop(guards);
            if lost_rounds.give_up(out_of_time) {
                return Err(err);
            }
        }
    }

    /// Takes every lock once, in path order, within what is left of `timeout`. Dropping the
    /// returned vector (or this future midway) releases what was taken.
    async fn take_each(&self, started: Instant, timeout: Option<Duration>) -> Result<Vec<LockGuard>, LockError> {
        let mut guards = Vec::with_capacity(self.locks.len());
        for lock in self.locks.iter() {
            let left = timeout.map(|t| t.saturating_sub(started.elapsed()));
            match lock.acquire_within(left).await {
                Ok(guard) => guards.push(guard),
                Err(LockError::Timeout { name, .. }) => {
                    return Err(LockError::Timeout {
                        name,
                        waited: started.elapsed(),
                    })
                }
                Err(err) => return Err(err),
            }
        }
        Ok(guards)
    }
}

/// Whether `part`, taken before the other parts of a multi-lock, is still held: its own loss
/// signal, against the session that holds it; and, when this process cannot vouch for that
/// session (it may have been paused, or the client's driver starved, since the server last
/// answered it: [`Session::vouched_for`](crate::connection::session::Session::vouched_for)),
/// the leader's word: a `check` of the part's node, which the leader refuses for an expired
/// session. The parts may come from several clients, each with a session, a driver and a
/// pulse of its own, so one client's session being sound says nothing of another's.
async fn still_held(part: &LockGuard) -> Result<(), LockError> {
    loop {
        if part.is_lost() {
            return Err(part.hold.lost_error());
        }
        if part.hold.session.vouched_for() {
            return Ok(());
        }
        match part.fenced_write_unchecked(|_| Ok(())).await {
            Ok(_) => return Ok(()),
            // Asked again once connected, unless the session is over (then it is lost).
            Err(LockError::Connection { .. }) if part.hold.session.wait_to_retry().await => {}
            Err(_) if part.is_lost() => return Err(part.hold.lost_error()),
            Err(err) => {
                return Err(LockError::Lost {
                    name: part.name().to_owned(),
                    reason: format!(
                        "the server no longer has its node {} ({err}): its session ended, or the node was deleted, \
                         while the other locks were taken",
                        part.node_path()
                    ),
                })
            }
        }
    }
}

/// Proof of holding every lock of a [`MultiLock`]. Owned (`Send + 'static`), like
/// [`LockGuard`]; dropping it releases every lock.
///
/// The locks stand or fall together: [`is_lost`](Self::is_lost) and [`lost`](Self::lost)
/// report the loss of any one of them.
///
/// ```no_run
/// # async fn demo(client: zklock_runtime::LockClient) -> Result<(), zklock_runtime::LockError> {
/// let guard = client.multi_lock(["account:1", "account:2"])?.acquire().await?;
/// for held in guard.guards() {
///     println!("{} fenced by {}", held.name(), held.fencing_token());
/// }
/// guard.release().await?;
/// # Ok(()) }
/// ```
#[must_use = "the locks are released as soon as the guard is dropped"]
#[derive(Debug)]
pub struct MultiGuard {
    /// In path order.
    guards: Vec<LockGuard>,
    acquired_at: Stamp,
}

impl MultiGuard {
    /// The guard of each lock, in the order they were taken (sorted by path).
    pub fn guards(&self) -> &[LockGuard] {
        &self.guards
    }

    /// Splits this into the guards of its locks, which then live and end one by one.
    pub fn into_guards(self) -> Vec<LockGuard> {
        self.guards
    }

    /// The fencing token of the lock named `name` (as given to
    /// [`multi_lock`](LockClient::multi_lock)); `None` if it is not one of these locks.
    pub fn fencing_token_of(&self, name: &str) -> Option<FencingToken> {
        self.guards
            .iter()
            .find(|g| g.name() == name)
            .map(LockGuard::fencing_token)
    }

    /// Whether any of the locks can no longer be trusted.
    pub fn is_lost(&self) -> bool {
        self.guards.iter().any(LockGuard::is_lost)
    }

    /// Resolves with [`LockError::Lost`] once any of the locks is lost; pending otherwise.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: it only watches.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn demo(client: zklock_runtime::LockClient) -> Result<(), zklock_runtime::LockError> {
    /// let guard = client.multi_lock(["a", "b"])?.acquire().await?;
    /// tokio::select! {
    ///     err = guard.lost() => return Err(err),
    ///     _ = tokio::time::sleep(std::time::Duration::from_secs(1)) => {}
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn lost(&self) -> LockError {
        let mut signals: Vec<_> = self.guards.iter().map(LockGuard::loss_signal).collect();
        let waits = signals.iter_mut().map(|s| Box::pin(s.lost()));
        let (err, _, _) = future::select_all(waits).await;
        err
    }

    /// Runs `fut` inside the scope of every lock held ([`LockGuard::scope`]): acquisitions of
    /// any of them made inside re-enter, and [`current_fencing_token_for`](crate::current_fencing_token_for) answers
    /// for each name.
    ///
    /// # Cancel safety
    ///
    /// Dropping the returned future drops `fut`; the holds are unaffected.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn demo(client: zklock_runtime::LockClient) -> Result<(), zklock_runtime::LockError> {
    /// let guard = client.multi_lock(["a", "b"])?.acquire().await?;
    /// guard
    ///     .scope(async {
    ///         assert!(zklock_runtime::current_fencing_token_for("a").is_some());
    ///     })
    ///     .await;
    /// # Ok(()) }
    /// ```
    pub fn scope<'a, F>(&'a self, fut: F) -> impl Future<Output = F::Output> + 'a
    where
        F: Future + 'a,
    {
        reentrancy::enter(self.guards.iter().map(|g| &g.hold), fut)
    }

    /// Runs `fut` inside the [scope](Self::scope) of every lock and stops it if any of them is
    /// lost, as [`LockGuard::run`] does for one lock.
    ///
    /// # Cancel safety
    ///
    /// Dropping the returned future drops `fut`; the holds are unaffected.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn demo(client: zklock_runtime::LockClient) -> Result<(), zklock_runtime::LockError> {
    /// let guard = client.multi_lock(["a", "b"])?.acquire().await?;
    /// guard.run(async { /* both locks are held and sound here */ }).await?;
    /// # Ok(()) }
    /// ```
    pub async fn run<F: Future>(&self, fut: F) -> Result<F::Output, LockError> {
        self.run_with(Supervision::default(), fut).await
    }

    /// Like [`run`](Self::run), and also stops `fut` once the locks have been held together for
    /// `max_hold` (counted from when the last of them was granted), as
    /// [`LockGuard::run_for`] does for one lock.
    ///
    /// # Cancel safety
    ///
    /// Dropping the returned future drops `fut`; the holds are unaffected.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn demo(client: zklock_runtime::LockClient) -> Result<(), zklock_runtime::LockError> {
    /// use std::time::Duration;
    /// let guard = client.multi_lock(["a", "b"])?.acquire().await?;
    /// guard.run_for(Duration::from_secs(30), async { /* ... */ }).await?;
    /// # Ok(()) }
    /// ```
    pub async fn run_for<F: Future>(&self, max_hold: Duration, fut: F) -> Result<F::Output, LockError> {
        self.run_with(Supervision::default().max_hold(max_hold), fut).await
    }

    /// [`run`](Self::run) and [`run_for`](Self::run_for), and the attribute's variants of them:
    /// stop on loss only if `abort_on_loss`, and on a revocation of any of the locks if
    /// `abort_on_revoke` (with [`LockError::Revoked`]).
    /// Runs `fut` inside the scope of every hold, stopped as `supervision` says: on the loss of
    /// any of the locks ([`OnLost::Abort`]), a revocation request for any of them
    /// ([`OnRevoke::Abort`]), or once they have been held for its `max_hold`. What a
    /// `#[distributed_lock]` function does with its body. See [`LockGuard::run_with`].
    ///
    /// # Cancel safety
    ///
    /// Dropping the returned future drops `fut`; the holds themselves are unaffected.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn demo(client: zklock_runtime::LockClient) -> Result<(), zklock_runtime::LockError> {
    /// use zklock_runtime::{OnRevoke, Supervision};
    ///
    /// let guard = client.multi_lock(["account:1", "account:2"])?.acquire().await?;
    /// let moved = guard
    ///     .run_with(Supervision::default().on_revoke(OnRevoke::Abort), async { 100 })
    ///     .await?;
    /// # let _ = moved; Ok(()) }
    /// ```
    pub async fn run_with<F: Future>(&self, supervision: Supervision, fut: F) -> Result<F::Output, LockError> {
        let first = &self.guards[0];
        let bound = supervision
            .max_hold
            .map(|bound| first.hold.max_hold(self.acquired_at, bound));
        let revoked = (supervision.on_revoke == OnRevoke::Abort).then_some(async {
            let waits = self.guards.iter().map(|g| {
                Box::pin(async move {
                    g.revoked().await;
                    g.hold.revoked_error()
                })
            });
            future::select_all(waits).await.0
        });
        let lost = (supervision.on_lost == OnLost::Abort).then(|| self.lost());
        supervise(self.scope(fut), lost, revoked, bound).await
    }

    /// Whether another process asked for any of the locks (see [`LockGuard::revoked`]).
    pub fn is_revoked(&self) -> bool {
        self.guards.iter().any(LockGuard::is_revoked)
    }

    /// Resolves once another process asks for any of the locks ([`LockGuard::revoked`]);
    /// pending otherwise.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: it only watches, and a revocation is sticky.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn demo(client: zklock_runtime::LockClient) -> Result<(), zklock_runtime::LockError> {
    /// let guard = client.multi_lock(["a", "b"])?.acquire().await?;
    /// tokio::select! {
    ///     () = guard.revoked() => println!("asked to let go"),
    ///     _ = tokio::time::sleep(std::time::Duration::from_secs(1)) => {}
    /// }
    /// guard.release().await?;
    /// # Ok(()) }
    /// ```
    pub async fn revoked(&self) {
        let waits = self.guards.iter().map(|g| Box::pin(g.revoked()));
        future::select_all(waits).await;
    }

    /// Asks the server whether every hold is still in place (see [`LockGuard::ensure_held`]);
    /// the checks go out together, in one round trip's time.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: it only reads.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn demo(client: zklock_runtime::LockClient) -> Result<(), zklock_runtime::LockError> {
    /// let guard = client.multi_lock(["a", "b"])?.acquire().await?;
    /// guard.ensure_held().await?;
    /// # Ok(()) }
    /// ```
    pub async fn ensure_held(&self) -> Result<(), LockError> {
        future::join_all(self.guards.iter().map(LockGuard::ensure_held))
            .await
            .into_iter()
            .collect()
    }

    /// Releases every lock and waits for the outcome of each (see [`LockGuard::release`]); the
    /// releases go out together. Returns the first error, [`LockError::Lost`] if any lock had
    /// been lost.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: if this future is dropped midway, the deletions go on in the background
    /// ([`LockClient::flush`] waits for them).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn demo(client: zklock_runtime::LockClient) -> Result<(), zklock_runtime::LockError> {
    /// let guard = client.multi_lock(["a", "b"])?.acquire().await?;
    /// guard.release().await?;
    /// # Ok(()) }
    /// ```
    pub async fn release(self) -> Result<(), LockError> {
        let outcomes = future::join_all(self.guards.into_iter().rev().map(LockGuard::start_release)).await;
        // A loss matters more than a failed delete: report it first.
        let mut errors: Vec<LockError> = outcomes.into_iter().filter_map(Result::err).collect();
        errors.sort_by_key(|err| !matches!(err, LockError::Lost { .. }));
        errors.into_iter().next().map_or(Ok(()), Err)
    }
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, Instant};

    use super::{LostRounds, MultiLock, MAX_LOST_ROUNDS};
    use crate::client::LockClient;
    use crate::test_server::{setup, stall_driver, Setup};

    /// A multi-lock over two clients: the first part, held through one client, whose driver is
    /// starved (blocked) while the second part, through the other client, waits behind another
    /// holder. The server expires the first client's session meanwhile; the second part is
    /// then granted. The first client still reads its session as connected, so its part looks
    /// held; the multi-lock must not return with it: every part it returns is held on the
    /// server.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_part_whose_client_was_starved_until_its_session_expired_is_not_returned() {
        let Setup {
            server,
            client: starved,
            view,
        } = setup(Duration::from_secs(1)).await;
        let connect = |_: ()| {
            LockClient::builder(server.connect_string())
                .session_timeout(Duration::from_secs(1))
                .connect()
        };
        let (running, other) = (connect(()).await.unwrap(), connect(()).await.unwrap());
        let blocker = other.mutex("multi-starved-b").unwrap().acquire().await.unwrap();
        let multi = MultiLock::new([
            starved.mutex("multi-starved-a").unwrap(),
            running.mutex("multi-starved-b").unwrap(),
        ])
        .unwrap();
        let taking = tokio::spawn(async move { multi.acquire_timeout(Duration::from_secs(30)).await });
        let deadline = Instant::now() + Duration::from_secs(20);
        let children = |dir: &'static str| {
            let view = &view;
            async move { view.list_children(dir).await.unwrap_or_default() }
        };
        while children("/zklock/multi-starved-b").await.len() < 2 {
            assert!(Instant::now() < deadline, "the second part never queued");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let first = children("/zklock/multi-starved-a").await;
        assert_eq!(first.len(), 1, "the first part is held: {first:?}");
        let first_node = format!("/zklock/multi-starved-a/{}", first[0]);

        let session = starved.latest().unwrap();
        let stalled = stall_driver(&session).await;
        while view.check_stat(&first_node).await.unwrap().is_some() {
            assert!(
                Instant::now() < deadline,
                "the server never expired the starved session"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        blocker.release().await.unwrap();
        // The second part is granted now; the multi-lock decides while the first client is
        // still starved (or waits for it to run: then it learns of the expiry).
        while children("/zklock/multi-starved-b").await.len() != 1 && !taking.is_finished() {
            assert!(Instant::now() < deadline, "the second part was never granted");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let decided_while_starved = taking.is_finished();
        stalled.thaw();
        let guard = tokio::time::timeout(Duration::from_secs(30), taking)
            .await
            .expect("the multi-lock is answered once the client runs again")
            .unwrap()
            .expect("the multi-lock takes both parts");
        for part in &guard.guards {
            let stat = view.check_stat(part.node_path()).await.unwrap();
            assert!(
                stat.is_some(),
                "returned {} (decided while the client was starved: {decided_while_starved}), which the server no longer has",
                part.node_path()
            );
        }
        drop(guard);
    }

    #[test]
    fn an_acquisition_gives_up_after_the_last_allowed_lost_round() {
        let mut rounds = LostRounds::default();
        for round in 1..=MAX_LOST_ROUNDS {
            assert!(!rounds.give_up(false), "gave up after {round} lost rounds");
        }
        assert!(
            rounds.give_up(false),
            "went on past {MAX_LOST_ROUNDS} fresh lost rounds"
        );
    }

    #[test]
    fn an_acquisition_out_of_time_gives_up_at_its_first_lost_round() {
        assert!(LostRounds::default().give_up(true));
    }
}
