//! Reentrancy by call scope, and what a locked body can ask about the locks it runs under.
//!
//! A lock re-enters the way a thread-reentrant lock follows the call stack: only for code that
//! runs *inside* a holder's scope, that is in the future passed to [`LockGuard::scope`] (or the
//! body of a `#[distributed_lock]` function) and in whatever that future awaits. The scope is a
//! tokio task-local value that is set only while that future is being polled, so:
//!
//! - a sibling future polled by the same task (`join!`, `select!`, `FuturesUnordered`,
//!   `buffer_unordered`, …) is *not* inside the scope: it is another holder and queues;
//! - a task spawned from the body, or a `spawn_blocking` job, is not inside it either;
//! - a guard moved to another task carries no scope with it; the task that acquired it does not
//!   re-enter once the guard is gone from its scope.
//!
//! Outside every scope, [`Lock::acquire`](crate::Lock::acquire) always makes a new holder, like
//! `tokio::sync::Mutex::lock`: a task that holds a guard and acquires the same lock again
//! outside a scope waits for itself (until its timeout, or forever without one).

use std::future::Future;
use std::sync::{Arc, Weak};

use crate::engine::guard::{ClientId, Holding, LockGuard};
use crate::engine::loss::LossSignal;
use crate::engine::rules::LockKind;
use crate::engine::token::FencingToken;

/// One hold whose scope the current future runs in.
#[derive(Clone)]
struct Entry {
    hold: Weak<Holding>,
    client: ClientId,
    name: Arc<str>,
    dir: Arc<str>,
    kind: LockKind,
    token: FencingToken,
    loss: LossSignal,
    /// The hold was sound when `loss` was made: while `loss` is unchanged, it still is.
    sound_at_entry: bool,
}

tokio::task_local! {
    /// The holds whose scopes the future being polled runs in, innermost last.
    static SCOPE: Arc<Vec<Entry>>;
}

fn with_scope<T>(f: impl FnOnce(&[Entry]) -> Option<T>) -> Option<T> {
    SCOPE.try_with(|entries| f(entries)).ok().flatten()
}

/// Whether a hold of kind `held` lets an acquisition of kind `wanted` on the same lock
/// directory re-enter. A writer may also read, as in Curator's read/write lock; semaphore
/// leases and election members never re-enter (each acquisition is another lease, another
/// member).
fn reenters(held: LockKind, wanted: LockKind) -> bool {
    match wanted {
        LockKind::Semaphore { .. } | LockKind::Leader => false,
        LockKind::Read => matches!(held, LockKind::Read | LockKind::Write),
        wanted => held == wanted,
    }
}

/// A hold found to re-enter, and what is known of it without asking.
pub(crate) struct Reentry {
    pub hold: Arc<Holding>,
    /// The hold was sound when its scope was entered, and nothing that could make it lost
    /// (a change of its session's health, news of its node) has happened since: checking
    /// [`Holding::is_lost`] would answer false. When false, nothing is known; ask.
    pub known_sound: bool,
}

/// The hold an acquisition of `kind` on `dir` through `client` re-enters: the innermost
/// matching hold whose scope the current future runs in, if it is still alive. A hold taken
/// through another client never matches, whatever its path: that client may talk to another
/// ensemble or chroot, and even on the same one it is another holder, as another process is.
#[inline]
pub(crate) fn reentry(client: ClientId, dir: &str, kind: LockKind) -> Option<Reentry> {
    with_scope(|entries| {
        let entry = entries
            .iter()
            .rev()
            .find(|e| e.client == client && &*e.dir == dir && reenters(e.kind, kind))?;
        let hold = entry.hold.upgrade()?;
        Some(Reentry {
            hold,
            known_sound: entry.sound_at_entry && entry.loss.unchanged(),
        })
    })
}

/// Whether the current future runs inside the scope of a live hold of the lock at `dir`
/// taken through `client`, of kind `kind` or of a kind an acquisition of `kind` re-enters (a
/// write hold also holds the read side). Matched as [`reentry`] matches, and also for the
/// kinds that never re-enter (a semaphore lease, an election member): a hold of the same kind
/// on the same directory. A hold that has ended, or that can no longer be trusted (lost),
/// does not count.
pub(crate) fn held_in_scope(client: ClientId, dir: &str, kind: LockKind) -> bool {
    with_scope(|entries| {
        let held = entries.iter().any(|e| {
            e.client == client
                && &*e.dir == dir
                && (reenters(e.kind, kind) || std::mem::discriminant(&e.kind) == std::mem::discriminant(&kind))
                && e.hold
                    .upgrade()
                    .is_some_and(|hold| !hold.node_path.is_empty() && !hold.is_lost())
        });
        Some(held)
    })
    .unwrap_or(false)
}

/// Runs `fut` inside the scopes of `holds` (innermost last), nested in the scope that is
/// current where the returned future is first polled: a scope future made in one place and
/// awaited (or spawned) in another takes the scope of where it runs, never of where it was
/// made.
pub(crate) fn enter<'h, F: Future>(
    holds: impl IntoIterator<Item = &'h Arc<Holding>>,
    fut: F,
) -> impl Future<Output = F::Output> {
    within(holds.into_iter().map(Entry::of).collect(), fut)
}

/// Runs `fut` with `own` appended to the scope current where it is first polled.
async fn within<F: Future>(own: Vec<Entry>, fut: F) -> F::Output {
    let mut entries: Vec<Entry> = SCOPE.try_with(|e| e.to_vec()).unwrap_or_default();
    entries.extend(own);
    SCOPE.scope(Arc::new(entries), fut).await
}

impl Entry {
    fn of(hold: &Arc<Holding>) -> Entry {
        // The signal first, then the check: a change in between marks the signal changed, so
        // `sound_at_entry` is never taken for a state the signal has not seen.
        let loss = hold.loss_signal();
        Entry {
            hold: Arc::downgrade(hold),
            client: hold.client,
            name: hold.name.clone(),
            dir: hold.dir.clone(),
            kind: hold.kind,
            token: hold.token,
            sound_at_entry: !hold.is_lost(),
            loss,
        }
    }
}

impl LockGuard {
    /// Runs `fut` as code inside this hold: acquisitions of the same lock made while `fut` runs
    /// (directly or in anything it awaits) re-enter this hold at once, with no round trip and
    /// the same fencing token, and [`current_fencing_token`] answers this hold's token.
    ///
    /// Only `fut` is inside the hold. Futures polled beside it by the same task, tasks it
    /// spawns and `spawn_blocking` jobs are other holders and queue for the lock. The scope
    /// borrows the guard, so the hold outlives it.
    ///
    /// # Cancel safety
    ///
    /// Dropping the returned future drops `fut`; the hold itself is unaffected.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn demo(client: zklock_runtime::LockClient) -> Result<(), zklock_runtime::LockError> {
    /// let lock = client.mutex("ledger")?;
    /// let guard = lock.acquire().await?;
    /// guard
    ///     .scope(async {
    ///         // Nested code may take the same lock again: it re-enters this hold.
    ///         let inner = lock.acquire().await?;
    ///         assert_eq!(inner.fencing_token(), guard.fencing_token());
    ///         assert_eq!(zklock_runtime::current_fencing_token(), Some(guard.fencing_token()));
    ///         Ok::<_, zklock_runtime::LockError>(())
    ///     })
    ///     .await?;
    /// // Outside the scope, the same task acquiring again would wait for this guard.
    /// guard.release().await?;
    /// # Ok(()) }
    /// ```
    pub fn scope<'a, F>(&'a self, fut: F) -> impl Future<Output = F::Output> + 'a
    where
        F: Future + 'a,
    {
        enter([&self.hold], fut)
    }
}

/// The fencing token of the innermost hold whose scope the current code runs in (a
/// `#[distributed_lock]` body, or [`LockGuard::scope`]); `None` outside every scope.
///
/// Pass it to the resource the lock protects, which should refuse writes carrying a token
/// lower than one it has already seen. The binding introduced by the attribute's
/// `token = name` option carries the same value.
///
/// Only code inside the scope sees the lock: a future polled beside the body by the same task,
/// or a task spawned from the body, does not (read the token first and move it in).
///
/// ```
/// // Outside a locked body there is no lock to report.
/// assert_eq!(zklock_runtime::current_fencing_token(), None);
/// ```
///
/// Inside `#[distributed_lock("ledger")] async fn append(…)`, it returns the token of the
/// `ledger` lock the body runs under (see the `zklock` crate for the attribute).
pub fn current_fencing_token() -> Option<FencingToken> {
    with_scope(|entries| entries.last().map(|e| e.token))
}

/// The fencing token of the lock named `name` (the name after placeholders are filled in)
/// whose scope the current code runs in, innermost first.
///
/// ```
/// assert_eq!(zklock_runtime::current_fencing_token_for("account:7"), None);
/// ```
///
/// Inside `#[distributed_lock("account:{id}")] async fn debit(id: u64)` called with `id = 7`,
/// `current_fencing_token_for("account:7")` is the token of that hold.
pub fn current_fencing_token_for(name: &str) -> Option<FencingToken> {
    with_scope(|entries| entries.iter().rev().find(|e| &*e.name == name).map(|e| e.token))
}

/// The loss signal of the innermost hold whose scope the current code runs in; useful with
/// `on_lost = "continue"`, where the body decides itself what to do on loss.
///
/// ```
/// assert!(zklock_runtime::current_loss_signal().is_none());
/// ```
///
/// Inside a body declared with `on_lost = "continue"`, check
/// `current_loss_signal().is_some_and(|loss| loss.is_lost())` between steps and stop early.
pub fn current_loss_signal() -> Option<LossSignal> {
    with_scope(|entries| entries.last().map(|e| e.loss.clone()))
}

/// Scopes made without a server, for the model tests (`interleavings/reentrancy.rs`): an entry for the
/// lock `name` with `token`, whose hold is already gone (so it is never re-entered) and whose
/// loss signal never fires.
#[cfg(test)]
pub(crate) fn model_scope<F: Future>(locks: &[(&str, FencingToken)], fut: F) -> impl Future<Output = F::Output> {
    let own = locks
        .iter()
        .map(|&(name, token)| Entry {
            hold: Weak::new(),
            client: ClientId::for_model(),
            name: name.into(),
            dir: format!("/model/{name}").into(),
            kind: LockKind::Mutex,
            token,
            loss: LossSignal::never(name),
            sound_at_entry: true,
        })
        .collect();
    within(own, fut)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn which_kinds_reenter() {
        use LockKind::*;
        assert!(reenters(Mutex, Mutex));
        assert!(reenters(Write, Write));
        assert!(reenters(Write, Read));
        assert!(reenters(Read, Read));
        assert!(!reenters(Read, Write), "no upgrade from read to write");
        assert!(!reenters(Mutex, Write));
        assert!(!reenters(Semaphore { leases: 2 }, Semaphore { leases: 2 }));
    }
}
