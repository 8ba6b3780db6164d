//! A long-lived future that runs only while its member leads: the loop of Curator's
//! `LeaderSelector` with automatic requeueing, for a consumer, a compactor or a leader-only
//! endpoint.
//!
//! One task per service: join the group ([`Election::lead`]), run the body as leader
//! ([`Leadership::run`](crate::Leadership::run), so losing leadership stops it), leave, and
//! join again. A body that returns gives leadership up and the member queues again behind the
//! others; a lost term, a body that panicked or a failed join is followed by a back-off that
//! doubles up to a bound.
//! [`LeaderService::shutdown`] hands over gracefully: the body is told
//! ([`Leading::handing_over`]), given a grace period to finish, and leadership is given up
//! before `shutdown` returns, so the next member takes over at once.

use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::time::Duration;

use futures_util::FutureExt;

use tokio::sync::watch;
use tokio::task::JoinHandle;
use tracing::{error, info, warn};

use crate::engine::loss::LossSignal;
use crate::engine::token::FencingToken;
use crate::error::LockError;
use crate::recipes::leader::Election;

/// How a [`LeaderService`] backs off after a lost term or a failed attempt to join.
///
/// ```
/// use std::time::Duration;
/// use zklock_runtime::ServeOptions;
///
/// let options = ServeOptions::default().backoff(Duration::from_millis(200), Duration::from_secs(10));
/// assert_eq!(options.min_backoff(), Duration::from_millis(200));
/// ```
#[derive(Debug, Clone, Copy)]
pub struct ServeOptions {
    min_backoff: Duration,
    max_backoff: Duration,
}

impl Default for ServeOptions {
    /// 100 ms, doubling up to 30 s.
    fn default() -> Self {
        ServeOptions {
            min_backoff: Duration::from_millis(100),
            max_backoff: Duration::from_secs(30),
        }
    }
}

impl ServeOptions {
    /// Waits `min` after the first failure and doubles each time up to `max`; a term that
    /// ends normally resets it. (`max` below `min` counts as `min`.)
    #[must_use]
    pub fn backoff(mut self, min: Duration, max: Duration) -> ServeOptions {
        self.min_backoff = min;
        self.max_backoff = max.max(min);
        self
    }

    /// The first back-off.
    pub fn min_backoff(&self) -> Duration {
        self.min_backoff
    }

    /// The longest back-off.
    pub fn max_backoff(&self) -> Duration {
        self.max_backoff
    }

    /// The back-off after one that lasted `current`: twice as long, up to the longest (never
    /// overflowing, however long the bounds).
    fn next_backoff(&self, current: Duration) -> Duration {
        current.saturating_mul(2).min(self.max_backoff)
    }
}

/// What the body of a [`LeaderService`] gets for one term of leadership.
#[derive(Debug)]
pub struct Leading {
    token: FencingToken,
    node: String,
    term: u64,
    loss: LossSignal,
    stop: watch::Receiver<Option<Duration>>,
}

impl Leading {
    /// The fencing token of this term.
    pub fn fencing_token(&self) -> FencingToken {
        self.token
    }

    /// The full path of the member's node in this term.
    pub fn node_path(&self) -> &str {
        &self.node
    }

    /// Which term of this service this is, counting from 1.
    pub fn term(&self) -> u64 {
        self.term
    }

    /// The term's loss signal (the body is stopped on loss anyway; this lets it look).
    pub fn loss_signal(&self) -> LossSignal {
        self.loss.clone()
    }

    /// Whether [`LeaderService::shutdown`] has asked the body to finish.
    pub fn is_handing_over(&self) -> bool {
        self.stop.borrow().is_some()
    }

    /// Resolves once [`LeaderService::shutdown`] asks the body to finish: it should wind down
    /// and return within the grace period given there, after which it is dropped.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: it only watches.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn demo(client: zklock_runtime::LockClient) -> Result<(), zklock_runtime::LockError> {
    /// let service = client.election("consumer")?.serve(|mut leading| async move {
    ///     loop {
    ///         tokio::select! {
    ///             _ = leading.handing_over() => break, // commit offsets, then return
    ///             _ = tokio::time::sleep(std::time::Duration::from_secs(1)) => { /* poll */ }
    ///         }
    ///     }
    /// })?;
    /// # drop(service); Ok(()) }
    /// ```
    pub async fn handing_over(&mut self) {
        // A sender gone means the service itself is gone: hand over as well.
        let _ = self.stop.wait_for(Option::is_some).await;
    }
}

/// A body kept running while its member leads; see [`Election::serve`]. Dropping it stops the
/// body at once and leaves the group in the background; [`shutdown`](Self::shutdown) hands
/// over gracefully.
#[must_use = "the service stops when dropped"]
#[derive(Debug)]
pub struct LeaderService {
    stop: watch::Sender<Option<Duration>>,
    leading: watch::Receiver<bool>,
    task: Option<JoinHandle<()>>,
}

impl LeaderService {
    /// Whether the body is running as leader now.
    pub fn is_leading(&self) -> bool {
        *self.leading.borrow()
    }

    /// A receiver told each time the service starts or stops leading.
    pub fn leading(&self) -> watch::Receiver<bool> {
        self.leading.clone()
    }

    /// Hands over and stops: asks a running body to finish ([`Leading::handing_over`]),
    /// waits up to `grace` for it, drops it if it has not returned, gives leadership up
    /// (waiting for the server to confirm) and ends the service. Returns at once when not
    /// leading.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future leaves the service stopping in the background.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn demo(service: zklock_runtime::LeaderService) {
    /// service.shutdown(std::time::Duration::from_secs(10)).await;
    /// # }
    /// ```
    pub async fn shutdown(mut self, grace: Duration) {
        self.stop.send_replace(Some(grace));
        if let Some(task) = self.task.take() {
            let _ = task.await;
        }
    }
}

impl Drop for LeaderService {
    fn drop(&mut self) {
        if let Some(task) = self.task.take() {
            task.abort();
        }
    }
}

impl Election {
    /// Runs `body` whenever this member leads, with the default [`ServeOptions`]; see
    /// [`serve_with`](Self::serve_with).
    pub fn serve<F, Fut>(&self, body: F) -> Result<LeaderService, LockError>
    where
        F: FnMut(Leading) -> Fut + Send + 'static,
        Fut: Future<Output = ()> + Send + 'static,
    {
        self.serve_with(ServeOptions::default(), body)
    }

    /// Runs `body` whenever this member leads, in a task of the current tokio runtime: join,
    /// run `body` until it returns or leadership is lost (it is then stopped at its next
    /// `.await`), leave, and join again, backing off after a lost term or a failed join.
    /// Every term is a fresh call of `body` with a larger fencing token.
    ///
    /// Fails only without a tokio runtime. The service runs until it is dropped or
    /// [shut down](LeaderService::shutdown), or the client is closed.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn demo(client: zklock_runtime::LockClient) -> Result<(), zklock_runtime::LockError> {
    /// use std::time::Duration;
    /// use zklock_runtime::ServeOptions;
    ///
    /// let election = client.election("compactor")?;
    /// let service = election.serve_with(ServeOptions::default(), |leading| async move {
    ///     println!("term {} with token {}", leading.term(), leading.fencing_token());
    ///     std::future::pending::<()>().await; // lead until lost or shut down
    /// })?;
    /// // ... on shutdown:
    /// service.shutdown(Duration::from_secs(10)).await;
    /// # Ok(()) }
    /// ```
    pub fn serve_with<F, Fut>(&self, options: ServeOptions, body: F) -> Result<LeaderService, LockError>
    where
        F: FnMut(Leading) -> Fut + Send + 'static,
        Fut: Future<Output = ()> + Send + 'static,
    {
        let runtime = tokio::runtime::Handle::try_current()
            .map_err(|_| LockError::invalid_config("a leader service needs a tokio runtime"))?;
        let (stop_tx, stop) = watch::channel(None);
        let (leading_tx, leading) = watch::channel(false);
        let task = runtime.spawn(serve_loop(self.clone(), options, body, stop, leading_tx));
        Ok(LeaderService {
            stop: stop_tx,
            leading,
            task: Some(task),
        })
    }
}

/// Waits `pause`, or less if the service is told to stop; false when it was.
async fn back_off(stop: &mut watch::Receiver<Option<Duration>>, pause: Duration) -> bool {
    tokio::select! {
        _ = tokio::time::sleep(pause) => true,
        _ = stop.wait_for(Option::is_some) => false,
    }
}

/// The service's "leading now" flag, false again however the loop ends (returned, aborted with
/// the service, or unwound by a panic).
struct LeadingFlag(watch::Sender<bool>);

impl LeadingFlag {
    fn set(&self, leading: bool) {
        self.0.send_replace(leading);
    }
}

impl Drop for LeadingFlag {
    fn drop(&mut self) {
        self.0.send_replace(false);
    }
}

async fn serve_loop<F, Fut>(
    election: Election,
    options: ServeOptions,
    mut body: F,
    mut stop: watch::Receiver<Option<Duration>>,
    leading: watch::Sender<bool>,
) where
    F: FnMut(Leading) -> Fut + Send + 'static,
    Fut: Future<Output = ()> + Send + 'static,
{
    let leading = LeadingFlag(leading);
    let group = election.group().to_owned();
    let mut backoff = options.min_backoff;
    let mut term = 0;
    loop {
        let joined = tokio::select! {
            joined = election.lead() => joined,
            _ = stop.wait_for(Option::is_some) => return,
        };
        let leadership = match joined {
            Ok(leadership) => leadership,
            Err(LockError::Closed { .. }) => return,
            Err(err) => {
                warn!(group = %group, %err, backoff_ms = backoff.as_millis() as u64, "could not join the election; retrying");
                if !back_off(&mut stop, backoff).await {
                    return;
                }
                backoff = options.next_backoff(backoff);
                continue;
            }
        };
        term += 1;
        let token = leadership.fencing_token();
        info!(group = %group, term, %token, "leading: starting the leader body");
        leading.set(true);
        let this_term = Leading {
            token,
            node: leadership.node_path().to_owned(),
            term,
            loss: leadership.loss_signal(),
            stop: stop.clone(),
        };
        // `None`: told to stop while leading, and the body had its grace period.
        let outcome = {
            // A panicking body ends its term like a failure, not the service.
            let run = leadership.run(AssertUnwindSafe(body(this_term)).catch_unwind());
            tokio::pin!(run);
            let finished = tokio::select! {
                outcome = &mut run => Some(outcome),
                _ = stop.wait_for(Option::is_some) => None,
            };
            if finished.is_none() {
                let grace = stop.borrow().unwrap_or_default();
                let _ = tokio::time::timeout(grace, &mut run).await;
            }
            finished
        };
        leading.set(false);
        match outcome {
            None => {
                if let Err(err) = leadership.release().await {
                    warn!(group = %group, %err, "giving leadership up on shutdown failed; the node goes with the session");
                }
                info!(group = %group, term, "handed over");
                return;
            }
            Some(Ok(Err(_panic))) => {
                error!(group = %group, term, backoff_ms = backoff.as_millis() as u64, "the leader body panicked; giving leadership up and queueing again");
                if let Err(err) = leadership.release().await {
                    warn!(group = %group, %err, "giving leadership up failed");
                }
                if !back_off(&mut stop, backoff).await {
                    return;
                }
                backoff = options.next_backoff(backoff);
            }
            Some(Ok(Ok(()))) => {
                info!(group = %group, term, "the leader body returned; giving leadership up and queueing again");
                if let Err(err) = leadership.release().await {
                    warn!(group = %group, %err, "giving leadership up failed");
                }
                backoff = options.min_backoff;
                // Even a body that returns at once does not spin: the others get their turn.
                if !back_off(&mut stop, backoff).await {
                    return;
                }
            }
            Some(Err(err)) => {
                warn!(group = %group, term, %err, backoff_ms = backoff.as_millis() as u64, "leadership lost; the leader body was stopped");
                drop(leadership);
                if !back_off(&mut stop, backoff).await {
                    return;
                }
                backoff = options.next_backoff(backoff);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::ServeOptions;

    /// The back-off doubles from the first to the longest and stays there; a longest below the
    /// first counts as the first; bounds near `Duration::MAX` saturate instead of overflowing.
    #[test]
    fn the_backoff_doubles_between_its_bounds() {
        let options = ServeOptions::default();
        assert_eq!(
            (options.min_backoff(), options.max_backoff()),
            (Duration::from_millis(100), Duration::from_secs(30))
        );
        let mut backoff = options.min_backoff();
        let mut seen = vec![backoff];
        for _ in 0..12 {
            backoff = options.next_backoff(backoff);
            seen.push(backoff);
        }
        let ms: Vec<u128> = seen.iter().map(Duration::as_millis).collect();
        assert_eq!(
            ms,
            [100, 200, 400, 800, 1_600, 3_200, 6_400, 12_800, 25_600, 30_000, 30_000, 30_000, 30_000]
        );

        let inverted = ServeOptions::default().backoff(Duration::from_secs(5), Duration::from_secs(1));
        assert_eq!(inverted.max_backoff(), Duration::from_secs(5));
        assert_eq!(inverted.next_backoff(inverted.min_backoff()), Duration::from_secs(5));

        let huge = ServeOptions::default().backoff(Duration::MAX / 2 + Duration::from_secs(1), Duration::MAX);
        assert_eq!(huge.next_backoff(huge.min_backoff()), Duration::MAX);
        assert_eq!(huge.next_backoff(Duration::MAX), Duration::MAX);
    }
}
