//! Reentrancy follows the call scope, not the tokio task, against a real ZooKeeper:
//!
//! - sibling futures polled by one task (`join!`, `select!`, `FuturesUnordered`,
//!   `for_each_concurrent`, `buffer_unordered`, `join_all`) are separate holders that exclude
//!   each other, each with its own fencing token, through the guard API and `#[distributed_lock]`;
//! - nested acquisitions inside a scope re-enter without a round trip;
//! - moved guards, `spawn_blocking` jobs and spawned tasks are other holders;
//! - local handoffs of one node are bounded by `max_local_handoffs`, and with 0 a Curator
//!   contender is served in strict FIFO order.

mod support;

use std::collections::HashSet;
use std::future::Future;
use std::pin::pin;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::future::{join_all, LocalBoxFuture};
use futures::stream::{self, FuturesUnordered, StreamExt};
use support::{client, eventually, raw, server, AppError, Rng};
use tokio::sync::oneshot;
use tokio::task::JoinHandle;
use zklock::{current_fencing_token, distributed_lock, zk, FencingToken, Lock, LockClient, LockError, LockGuard};
use zklock_testing::curator::CuratorPeer;
use zklock_testing::ZkServer;

/// Bound on anything that should happen "soon": generous, so a loaded machine does not flake.
const SOON: Duration = Duration::from_secs(30);
/// The timeout of an acquisition that must fail because someone else holds the lock.
const BLOCKED: Duration = Duration::from_secs(2);
/// The default of `LockClient::builder(..).max_local_handoffs(..)`.
const DEFAULT_MAX_LOCAL_HANDOFFS: u32 = 16;

fn is_timeout<T: std::fmt::Debug>(result: &Result<T, LockError>) -> bool {
    matches!(result, Err(LockError::Timeout { .. }))
}

// ---------------------------------------------------------------------------------------------
// Sibling futures of one task
// ---------------------------------------------------------------------------------------------

/// What a future does at one point: yield to the scheduler some times, then sleep.
#[derive(Debug, Clone, Copy, Default)]
struct Pause {
    yields: u32,
    sleep_ms: u64,
}

impl Pause {
    fn sleep(ms: u64) -> Pause {
        Pause {
            yields: 0,
            sleep_ms: ms,
        }
    }

    fn yields(n: u32) -> Pause {
        Pause { yields: n, sleep_ms: 0 }
    }

    async fn run(self) {
        for _ in 0..self.yields {
            tokio::task::yield_now().await;
        }
        if self.sleep_ms > 0 {
            tokio::time::sleep(Duration::from_millis(self.sleep_ms)).await;
        }
    }
}

/// What the critical sections saw: how many were inside at once, and every grant's token.
#[derive(Default)]
struct Probe {
    inside: AtomicUsize,
    max_inside: AtomicUsize,
    tokens: Mutex<Vec<FencingToken>>,
}

/// The critical section shared by every pattern: counts itself in, records the grant's token,
/// signals `entered`, stays inside for `hold`, counts itself out.
async fn section(
    probe: &Probe,
    token: FencingToken,
    hold: Pause,
    entered: Option<oneshot::Sender<()>>,
) -> FencingToken {
    let now = probe.inside.fetch_add(1, Ordering::SeqCst) + 1;
    probe.max_inside.fetch_max(now, Ordering::SeqCst);
    probe.tokens.lock().unwrap().push(token);
    if let Some(entered) = entered {
        let _ = entered.send(());
    }
    hold.run().await;
    probe.inside.fetch_sub(1, Ordering::SeqCst);
    token
}

/// How a critical section takes the lock.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Via {
    Guard,
    Attribute,
}

const BOTH: [Via; 2] = [Via::Guard, Via::Attribute];

/// One lock (the name of the attribute below), taken either way, with a fresh probe.
struct Siblings {
    client: LockClient,
    lock: Lock,
    probe: Probe,
    reentered_before: u64,
}

impl Siblings {
    fn new(client: &LockClient) -> Siblings {
        Siblings {
            client: client.clone(),
            lock: client.mutex("siblings").unwrap(),
            probe: Probe::default(),
            reentered_before: client.metrics().reentered,
        }
    }

    async fn critical(&self, via: Via, hold: Pause, entered: Option<oneshot::Sender<()>>) -> FencingToken {
        match via {
            Via::Guard => {
                let guard = self.lock.acquire_timeout(SOON).await.expect("guard acquire");
                let token = section(&self.probe, guard.fencing_token(), hold, entered).await;
                guard.release().await.expect("release");
                token
            }
            Via::Attribute => self.locked(hold, entered).await.expect("locked call"),
        }
    }

    #[distributed_lock("siblings", client = self.client, timeout = "30s", token = fence)]
    async fn locked(&self, hold: Pause, entered: Option<oneshot::Sender<()>>) -> Result<FencingToken, AppError> {
        assert_eq!(current_fencing_token(), Some(fence));
        Ok(section(&self.probe, fence, hold, entered).await)
    }

    /// Never two inside at once, `grants` grants with distinct, increasing tokens, and none of
    /// them re-entered another's hold.
    fn check(&self, what: &str, grants: usize) {
        let tokens = self.probe.tokens.lock().unwrap();
        assert_eq!(
            self.probe.max_inside.load(Ordering::SeqCst),
            1,
            "{what}: two sibling futures were inside at once"
        );
        assert_eq!(tokens.len(), grants, "{what}: grants");
        let distinct: HashSet<_> = tokens.iter().collect();
        assert_eq!(
            distinct.len(),
            tokens.len(),
            "{what}: siblings shared a token: {tokens:?}"
        );
        assert!(
            tokens.windows(2).all(|w| w[0] < w[1]),
            "{what}: tokens did not increase: {tokens:?}"
        );
        assert_eq!(
            self.client.metrics().reentered,
            self.reentered_before,
            "{what}: a sibling re-entered another's hold"
        );
    }
}

async fn within<T>(what: &str, fut: impl Future<Output = T>) -> T {
    tokio::time::timeout(SOON, fut)
        .await
        .unwrap_or_else(|_| panic!("{what}: not done within {SOON:?} (deadlock?)"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn join_siblings_in_one_task_exclude_each_other() {
    // Run by a spawned task: the test's own body is polled by `block_on`, which is no task, so a
    // hold shared with the whole task (keyed by `tokio::task::id()`) would go unnoticed there.
    tokio::spawn(async {
        let zk = server();
        let c = client(&zk.connect_string()).await;
        for via in BOTH {
            let s = Siblings::new(&c);
            for _ in 0..5 {
                // The second asks only once the first is inside, so it must queue behind it.
                let (entered, first_inside) = oneshot::channel();
                let first = s.critical(via, Pause::sleep(5), Some(entered));
                let second = async {
                    first_inside.await.expect("first section entered");
                    s.critical(via, Pause::yields(1), None).await
                };
                let (a, b) = within("join!", async { tokio::join!(first, second) }).await;
                assert!(a < b, "{via:?}: second grant {b} not after first {a}");
            }
            s.check(&format!("join! {via:?}"), 10);
        }
    })
    .await
    .expect("the task ran to its end");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn select_loop_branches_in_one_task_exclude_each_other() {
    let zk = server();
    let c = client(&zk.connect_string()).await;
    for via in BOTH {
        let s = Siblings::new(&c);
        for _ in 0..5 {
            let mut x = pin!(s.critical(via, Pause::sleep(2), None));
            let mut y = pin!(s.critical(via, Pause::yields(2), None));
            let mut z = pin!(s.critical(via, Pause::sleep(1), None));
            let mut done = [false; 3];
            within("select! loop", async {
                while done != [true; 3] {
                    tokio::select! {
                        _ = &mut x, if !done[0] => done[0] = true,
                        _ = &mut y, if !done[1] => done[1] = true,
                        _ = &mut z, if !done[2] => done[2] = true,
                    }
                }
            })
            .await;
        }
        s.check(&format!("select! {via:?}"), 15);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn futures_unordered_members_exclude_each_other() {
    let zk = server();
    let c = client(&zk.connect_string()).await;
    for via in BOTH {
        let s = Siblings::new(&c);
        let set: FuturesUnordered<_> = (0..6)
            .map(|i| {
                s.critical(
                    via,
                    Pause {
                        yields: i % 3,
                        sleep_ms: i as u64 % 2,
                    },
                    None,
                )
            })
            .collect();
        let tokens: Vec<_> = within("FuturesUnordered", set.collect()).await;
        assert_eq!(tokens.len(), 6);
        s.check(&format!("FuturesUnordered {via:?}"), 6);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn for_each_concurrent_calls_exclude_each_other() {
    let zk = server();
    let c = client(&zk.connect_string()).await;
    for via in BOTH {
        let s = Siblings::new(&c);
        let s_ref = &s;
        within(
            "for_each_concurrent",
            stream::iter(0..8u64).for_each_concurrent(4, |i| async move {
                s_ref.critical(via, Pause::sleep(i % 3), None).await;
            }),
        )
        .await;
        s.check(&format!("for_each_concurrent {via:?}"), 8);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn buffer_unordered_calls_exclude_each_other() {
    let zk = server();
    let c = client(&zk.connect_string()).await;
    for via in BOTH {
        let s = Siblings::new(&c);
        let tokens: Vec<_> = within(
            "buffer_unordered",
            stream::iter(0..8u64)
                .map(|i| s.critical(via, Pause::sleep(i % 3), None))
                .buffer_unordered(4)
                .collect(),
        )
        .await;
        assert_eq!(tokens.len(), 8);
        s.check(&format!("buffer_unordered {via:?}"), 8);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn join_all_with_staggered_starts_exclude_each_other() {
    let zk = server();
    let c = client(&zk.connect_string()).await;
    for via in BOTH {
        let s = Siblings::new(&c);
        let s_ref = &s;
        let calls = (0..5u64).map(|i| async move {
            // Staggered starts: some ask while another holds, some after it left.
            Pause::sleep(i * 2).run().await;
            s_ref.critical(via, Pause::sleep(3), None).await
        });
        let tokens = within("join_all", join_all(calls)).await;
        assert_eq!(tokens.len(), 5);
        s.check(&format!("join_all {via:?}"), 5);
    }
}

/// A random pause, from a generator with a fixed seed, so a failing interleaving can be
/// replayed.
fn random_pause(rng: &mut Rng) -> Pause {
    match rng.below(3) {
        0 => Pause::default(),
        1 => Pause::yields(1 + rng.below(3) as u32),
        _ => Pause::sleep(rng.below(4)),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn randomized_sibling_interleavings_exclude_each_other() {
    let zk = server();
    let c = client(&zk.connect_string()).await;
    let s = Siblings::new(&c);
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let mut grants = 0;
    for iteration in 0..200 {
        let count = 2 + rng.below(3) as usize;
        let plan: Vec<(Via, Pause, Pause)> = (0..count)
            .map(|_| {
                let via = if rng.below(2) == 0 { Via::Guard } else { Via::Attribute };
                (via, random_pause(&mut rng), random_pause(&mut rng))
            })
            .collect();
        let use_join = rng.below(2) == 0;
        let what = format!("iteration {iteration} (join: {use_join}): {plan:?}");
        let mut calls: Vec<LocalBoxFuture<'_, FencingToken>> = plan
            .iter()
            .map(|&(via, before, hold)| {
                let s = &s;
                Box::pin(async move {
                    before.run().await;
                    s.critical(via, hold, None).await
                }) as LocalBoxFuture<'_, FencingToken>
            })
            .collect();
        within(&what, async {
            if use_join {
                let d = (count > 3).then(|| calls.pop().unwrap());
                let c = (count > 2).then(|| calls.pop().unwrap());
                let b = calls.pop().unwrap();
                let a = calls.pop().unwrap();
                match (c, d) {
                    (None, None) => {
                        let _ = tokio::join!(a, b);
                    }
                    (Some(c), None) => {
                        let _ = tokio::join!(a, b, c);
                    }
                    (Some(c), Some(d)) => {
                        let _ = tokio::join!(a, b, c, d);
                    }
                    (None, Some(_)) => unreachable!(),
                }
            } else {
                let set: FuturesUnordered<_> = calls.into_iter().collect();
                let _: Vec<_> = set.collect().await;
            }
        })
        .await;
        grants += count;
        assert_eq!(
            s.probe.max_inside.load(Ordering::SeqCst),
            1,
            "{what}: two sibling futures were inside at once"
        );
    }
    s.check("randomized interleavings", grants);
}

// ---------------------------------------------------------------------------------------------
// Nested calls re-enter without a round trip
// ---------------------------------------------------------------------------------------------

/// Resumes a paused server when dropped, also when the test panics.
struct Frozen<'a>(&'a ZkServer);

impl Drop for Frozen<'_> {
    fn drop(&mut self) {
        let _ = self.0.resume();
    }
}

fn freeze(zk: &ZkServer) -> Frozen<'_> {
    let frozen = Frozen(zk);
    zk.pause().expect("pause ZooKeeper");
    frozen
}

#[tokio::test]
async fn nested_acquire_in_a_guard_scope_reenters_while_the_server_is_frozen() {
    let zk = server();
    let c = client(&zk.connect_string()).await;
    let lock = c.mutex("frozen-scope").unwrap();
    let outer = lock.acquire_timeout(SOON).await.unwrap();
    let before = c.metrics();
    let inner = {
        // Anything that needs a round trip hangs until the server resumes.
        let _frozen = freeze(&zk);
        outer.scope(tokio::time::timeout(SOON, lock.acquire())).await
    };
    let inner = inner
        .expect("the nested acquire waited on the frozen server")
        .expect("nested acquire");
    assert_eq!(inner.fencing_token(), outer.fencing_token());
    assert_eq!(outer.hold_count(), 2);
    let after = c.metrics();
    assert_eq!(after.reentered, before.reentered + 1);
    assert_eq!(after.acquired, before.acquired, "no grant through ZooKeeper");
    inner.release().await.unwrap();
    assert_eq!(outer.hold_count(), 1);
    outer.release().await.unwrap();
}

struct FrozenNested<'a> {
    locks: LockClient,
    zk: &'a ZkServer,
}

impl FrozenNested<'_> {
    #[distributed_lock("frozen-nested", client = self.locks, timeout = "30s", token = fence)]
    async fn outer(&self) -> Result<(FencingToken, FencingToken), AppError> {
        let _frozen = freeze(self.zk);
        let inner = tokio::time::timeout(SOON, self.inner())
            .await
            .expect("the nested call waited on the frozen server")?;
        Ok((fence, inner))
    }

    #[distributed_lock("frozen-nested", client = self.locks, timeout = "30s", token = fence)]
    async fn inner(&self) -> Result<FencingToken, AppError> {
        assert_eq!(current_fencing_token(), Some(fence));
        Ok(fence)
    }
}

#[tokio::test]
async fn nested_locked_call_reenters_while_the_server_is_frozen() {
    let zk = server();
    let nested = FrozenNested {
        locks: client(&zk.connect_string()).await,
        zk: &zk,
    };
    let before = nested.locks.metrics();
    let (outer, inner) = nested.outer().await.expect("locked calls");
    assert_eq!(inner, outer, "the nested call shares the outer hold");
    let after = nested.locks.metrics();
    assert_eq!(after.reentered, before.reentered + 1);
    assert_eq!(after.acquired, before.acquired + 1, "one grant through ZooKeeper");
}

/// A scope entered while its hold was sound stops re-entering once the hold is lost during
/// the scope (here its node deleted by someone else): a re-entry then answers `Lost`, however
/// many re-entries succeeded before. (Re-entry reads what is known of the hold without asking
/// the server; what it learned since the scope began must count.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hold_lost_during_its_scope_is_not_reentered() {
    let zk = server();
    let c = client(&zk.connect_string()).await;
    let view = raw(&zk.connect_string()).await;
    let lock = c.mutex("lost-in-scope").unwrap();
    let guard = lock.acquire_timeout(SOON).await.unwrap();
    guard
        .scope(async {
            for _ in 0..3 {
                let share = lock.acquire_timeout(BLOCKED).await.expect("re-enters a sound hold");
                assert_eq!(share.fencing_token(), guard.fencing_token());
                share.release().await.expect("a share ends quietly");
            }
            view.delete(guard.node_path(), None).await.unwrap();
            tokio::time::timeout(SOON, guard.lost())
                .await
                .expect("the holder learns its node was deleted");
            match lock.acquire_timeout(BLOCKED).await {
                Err(LockError::Lost { reason, .. }) => assert!(reason.contains("deleted by someone else"), "{reason}"),
                other => panic!("a lost hold was re-entered: {other:?}"),
            }
        })
        .await;
    drop(guard);
    c.close().await;
}

/// A reentrant guard's `max_hold` counts from its re-entry, not from the outer grant; and it
/// runs out no more than a few milliseconds early (its start is read from the coarse clock).
/// Time is the subject here: the sleeps are the work being bounded.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reentrant_guards_max_hold_counts_from_its_reentry() {
    const BOUND: Duration = Duration::from_millis(400);
    let zk = server();
    let c = client(&zk.connect_string()).await;
    let lock = c.mutex("max-hold-from-reentry").unwrap();
    let guard = lock.acquire_timeout(SOON).await.unwrap();
    guard
        .scope(async {
            // The outer hold is now older than the bound.
            tokio::time::sleep(BOUND + Duration::from_millis(100)).await;
            let share = lock.acquire_timeout(BLOCKED).await.expect("re-enters");
            let short = share
                .run_for(BOUND, async {
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    7
                })
                .await;
            assert_eq!(short.expect("counted from the re-entry, the bound is far off"), 7);
            let share = lock.acquire_timeout(BLOCKED).await.expect("re-enters");
            let entered = std::time::Instant::now();
            match share.run_for(BOUND, std::future::pending::<()>()).await {
                Err(LockError::MaxHoldExceeded { max_hold, .. }) => assert_eq!(max_hold, BOUND),
                other => panic!("hung work under a share was not stopped: {other:?}"),
            }
            let ran = entered.elapsed();
            assert!(
                ran >= BOUND - Duration::from_millis(30),
                "the bound ran out {:?} early",
                BOUND - ran
            );
        })
        .await;
    guard.release().await.unwrap();
    c.close().await;
}

// ---------------------------------------------------------------------------------------------
// Other holders: moved guards, spawn_blocking jobs, spawned tasks, sibling futures
// ---------------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_moved_guard_lets_no_task_reenter_outside_its_scope() {
    let zk = server();
    let c = client(&zk.connect_string()).await;
    let lock = c.mutex("moved-guard").unwrap();
    let guard = lock.acquire_timeout(SOON).await.unwrap();
    let token = guard.fencing_token();

    let (give, given) = oneshot::channel::<LockGuard>();
    let (report, reported) = oneshot::channel();
    let (done, finish) = oneshot::channel::<()>();
    let task_b = tokio::spawn({
        let lock = lock.clone();
        async move {
            let guard = given.await.expect("guard received");
            // Holding the guard is not being inside its scope.
            let outside = lock.acquire_timeout(BLOCKED).await.map(|g| g.fencing_token());
            let inside = guard
                .scope(lock.acquire_timeout(SOON))
                .await
                .map(|inner| (inner.fencing_token(), guard.hold_count()));
            report.send((outside, inside)).unwrap();
            finish.await.expect("told to finish");
            guard.release().await
        }
    });
    give.send(guard).unwrap();
    let (outside_b, inside_b) = within("task B's report", reported).await.unwrap();
    assert!(
        is_timeout(&outside_b),
        "task B re-entered outside the scope: {outside_b:?}"
    );
    assert_eq!(inside_b.unwrap(), (token, 2), "task B re-enters inside guard.scope");

    // Task A, which acquired the guard, is another holder now that B keeps it.
    let outside_a = lock.acquire_timeout(BLOCKED).await.map(|g| g.fencing_token());
    assert!(is_timeout(&outside_a), "task A re-entered a moved guard: {outside_a:?}");
    // Inside a scope that holds nothing of this lock (an unrelated lock's), just the same.
    let unrelated = c
        .mutex("moved-guard-unrelated")
        .unwrap()
        .acquire_timeout(SOON)
        .await
        .unwrap();
    let scoped_a = unrelated
        .scope(lock.acquire_timeout(BLOCKED))
        .await
        .map(|g| g.fencing_token());
    assert!(
        is_timeout(&scoped_a),
        "task A re-entered in another lock's scope: {scoped_a:?}"
    );
    unrelated.release().await.unwrap();

    done.send(()).unwrap();
    within("task B", task_b).await.unwrap().unwrap();
    assert_eq!(c.metrics().reentered, 1, "only B's scoped acquire re-entered");
    let after = lock.acquire_timeout(SOON).await.unwrap();
    assert!(after.fencing_token() > token);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn spawn_blocking_jobs_on_one_thread_are_different_holders() {
    let zk = server();
    let c = client(&zk.connect_string()).await;
    let lock = c.mutex("blocking-jobs").unwrap();
    // A runtime whose blocking pool has a single thread: every spawn_blocking job runs on it.
    let pool = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .max_blocking_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let runtime = pool.handle().clone();

    let (first_thread, first) = pool
        .spawn_blocking({
            let (lock, runtime) = (lock.clone(), runtime.clone());
            move || {
                (
                    std::thread::current().id(),
                    runtime.block_on(lock.acquire_timeout(SOON)),
                )
            }
        })
        .await
        .unwrap();
    // The first job's guard stays alive here, so the lock stays held.
    let first = first.expect("first job acquires");
    let (second_thread, second) = pool
        .spawn_blocking({
            let (lock, runtime) = (lock.clone(), runtime.clone());
            move || {
                let got = runtime.block_on(lock.acquire_timeout(BLOCKED));
                (std::thread::current().id(), got.map(|g| g.fencing_token()))
            }
        })
        .await
        .unwrap();
    assert_eq!(first_thread, second_thread, "the pool has one thread");
    assert!(
        is_timeout(&second),
        "the second job shared the first one's hold: {second:?}"
    );
    assert_eq!(c.metrics().reentered, 0);

    let token = first.fencing_token();
    first.release().await.unwrap();
    let (third_thread, third) = pool
        .spawn_blocking(move || {
            let got = runtime.block_on(lock.acquire_timeout(SOON));
            (std::thread::current().id(), got.map(|g| g.fencing_token()))
        })
        .await
        .unwrap();
    assert_eq!(third_thread, first_thread, "the pool has one thread");
    let third = third.expect("granted once the first job's guard is released");
    assert!(third > token);
    pool.shutdown_background();
}

/// What a locked body saw, and what a task it spawned saw.
struct Seen {
    token: FencingToken,
    in_body: Option<FencingToken>,
    in_spawned_task: Option<FencingToken>,
}

/// The body of the sibling tests: reads the token, and from a task it spawns; then signals
/// `entered` and keeps holding until `checked`.
async fn body_and_spawned(token: FencingToken, entered: oneshot::Sender<()>, checked: oneshot::Receiver<()>) -> Seen {
    let in_body = current_fencing_token();
    let in_spawned_task = tokio::spawn(async { current_fencing_token() }).await.unwrap();
    entered.send(()).unwrap();
    checked.await.expect("sibling checked");
    Seen {
        token,
        in_body,
        in_spawned_task,
    }
}

/// The sibling: once the body holds, reads the token.
async fn sibling(entered: oneshot::Receiver<()>, checked: oneshot::Sender<()>) -> Option<FencingToken> {
    entered.await.expect("body entered");
    let seen = current_fencing_token();
    checked.send(()).unwrap();
    seen
}

#[distributed_lock("sibling-token", client = locks, timeout = "30s", token = fence)]
async fn locked_body(
    locks: &LockClient,
    entered: oneshot::Sender<()>,
    checked: oneshot::Receiver<()>,
) -> Result<Seen, AppError> {
    Ok(body_and_spawned(fence, entered, checked).await)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn current_fencing_token_is_none_in_a_sibling_future_and_a_spawned_task() {
    let zk = server();
    let c = client(&zk.connect_string()).await;
    let lock = c.mutex("sibling-token").unwrap();
    for via in BOTH {
        let (entered_tx, entered_rx) = oneshot::channel();
        let (checked_tx, checked_rx) = oneshot::channel();
        let body = async {
            match via {
                Via::Guard => {
                    let guard = lock.acquire_timeout(SOON).await.unwrap();
                    let seen = guard
                        .scope(body_and_spawned(guard.fencing_token(), entered_tx, checked_rx))
                        .await;
                    guard.release().await.unwrap();
                    seen
                }
                Via::Attribute => locked_body(&c, entered_tx, checked_rx).await.unwrap(),
            }
        };
        let (seen, in_sibling) = within("body and sibling", async {
            tokio::join!(body, sibling(entered_rx, checked_tx))
        })
        .await;
        assert_eq!(seen.in_body, Some(seen.token), "{via:?}: the body sees its lock");
        assert_eq!(in_sibling, None, "{via:?}: a sibling future saw the body's lock");
        assert_eq!(
            seen.in_spawned_task, None,
            "{via:?}: a spawned task saw the body's lock"
        );
    }
}

/// Spawns a task that takes `lock`: first with a short timeout (reported on `first`), then
/// without (setting `granted` when it gets it).
fn spawn_contender(
    lock: Lock,
    first: oneshot::Sender<Result<FencingToken, LockError>>,
    granted: Arc<AtomicBool>,
) -> JoinHandle<Result<FencingToken, LockError>> {
    tokio::spawn(async move {
        let attempt = lock.acquire_timeout(Duration::from_secs(1)).await;
        let _ = first.send(attempt.map(|g| g.fencing_token()));
        let guard = lock.acquire_timeout(SOON).await?;
        granted.store(true, Ordering::SeqCst);
        Ok(guard.fencing_token())
    })
}

/// Inside the body: the spawned contender's first attempt timed out, and it is not granted.
async fn assert_contender_waits(first: oneshot::Receiver<Result<FencingToken, LockError>>, granted: &AtomicBool) {
    let attempt = within("the spawned task's first attempt", first).await.unwrap();
    assert!(is_timeout(&attempt), "a task spawned by the body got in: {attempt:?}");
    assert!(!granted.load(Ordering::SeqCst), "a task spawned by the body got in");
}

#[distributed_lock("spawned-contender", client = locks, timeout = "30s", token = fence)]
async fn locked_body_spawning_a_contender(
    locks: &LockClient,
    granted: Arc<AtomicBool>,
) -> Result<(FencingToken, JoinHandle<Result<FencingToken, LockError>>), AppError> {
    let (first_tx, first_rx) = oneshot::channel();
    let child = spawn_contender(locks.mutex("spawned-contender")?, first_tx, granted.clone());
    assert_contender_waits(first_rx, &granted).await;
    Ok((fence, child))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_spawned_in_a_locked_body_waits_for_the_body() {
    let zk = server();
    let c = client(&zk.connect_string()).await;
    let lock = c.mutex("spawned-contender").unwrap();
    for via in BOTH {
        let granted = Arc::new(AtomicBool::new(false));
        let (held, child) = match via {
            Via::Guard => {
                let guard = lock.acquire_timeout(SOON).await.unwrap();
                let mut child = None;
                guard
                    .scope(async {
                        let (first_tx, first_rx) = oneshot::channel();
                        child = Some(spawn_contender(lock.clone(), first_tx, granted.clone()));
                        assert_contender_waits(first_rx, &granted).await;
                    })
                    .await;
                let child = child.unwrap();
                let held = guard.fencing_token();
                guard.release().await.unwrap();
                (held, child)
            }
            Via::Attribute => locked_body_spawning_a_contender(&c, granted.clone()).await.unwrap(),
        };
        let token = within("the spawned task", child)
            .await
            .unwrap()
            .expect("granted once the body released");
        assert!(granted.load(Ordering::SeqCst));
        assert!(token > held, "{via:?}: {token} after {held}");
    }
    assert_eq!(c.metrics().reentered, 0, "the spawned task never re-entered");
}

// ---------------------------------------------------------------------------------------------
// Local handoffs: bounded per node, and fair to other processes
// ---------------------------------------------------------------------------------------------

/// Spawns `tasks` tasks that each loop acquire → record → release on `lock` until `stop`.
/// `record(task, token)` makes the log entry, pushed while the lock is held.
fn spawn_loopers<T: Send + 'static>(
    lock: &Lock,
    tasks: usize,
    log: &Arc<Mutex<Vec<T>>>,
    stop: &Arc<AtomicBool>,
    record: fn(usize, FencingToken) -> T,
) -> Vec<JoinHandle<()>> {
    (0..tasks)
        .map(|task| {
            let (lock, log, stop) = (lock.clone(), log.clone(), stop.clone());
            tokio::spawn(async move {
                while !stop.load(Ordering::SeqCst) {
                    let guard = lock.acquire_timeout(SOON).await.expect("local acquire");
                    log.lock().unwrap().push(record(task, guard.fencing_token()));
                    tokio::task::yield_now().await;
                    drop(guard);
                }
            })
        })
        .collect()
}

async fn log_reaches<T>(log: &Mutex<Vec<T>>, len: usize) {
    let reached = eventually(SOON, || {
        let enough = log.lock().unwrap().len() >= len;
        async move { enough }
    })
    .await;
    assert!(reached, "fewer than {len} grants within {SOON:?}");
}

/// The name and czxid of the first contender node in `dir` whose owner `owner` accepts.
async fn contender_owned(view: &zk::Client, dir: &str, owner: impl Fn(i64) -> bool) -> Option<(String, i64)> {
    for child in view.list_children(dir).await.unwrap_or_default() {
        if let Ok((_, stat)) = view.get_data(&format!("{dir}/{child}")).await {
            if owner(stat.ephemeral_owner) {
                return Some((child, stat.czxid));
            }
        }
    }
    None
}

#[derive(Debug, Clone, Copy)]
enum Grant {
    Local { task: usize, token: FencingToken },
    Remote(FencingToken),
}

impl Grant {
    fn token(&self) -> FencingToken {
        match *self {
            Grant::Local { token, .. } | Grant::Remote(token) => token,
        }
    }
}

/// Four local tasks contend in a loop on a client with `bound` handoffs, and a second client
/// (another process to ZooKeeper) queues once.
async fn handoffs_are_bounded(bound: Option<u32>) {
    const TASKS: usize = 4;
    let zk = server();
    let mut builder = LockClient::builder(zk.connect_string()).session_timeout(Duration::from_secs(4));
    if let Some(n) = bound {
        builder = builder.max_local_handoffs(n);
    }
    let local = builder.connect().await.expect("connect local client");
    let n = bound.unwrap_or(DEFAULT_MAX_LOCAL_HANDOFFS) as usize;
    let remote = client(&zk.connect_string()).await;
    let view = raw(&zk.connect_string()).await;
    let lock = local.mutex("handoff-bound").unwrap();

    let log = Arc::new(Mutex::new(Vec::new()));
    let stop = Arc::new(AtomicBool::new(false));
    let tasks = spawn_loopers(&lock, TASKS, &log, &stop, |task, token| Grant::Local { task, token });
    log_reaches(&log, 3 * (n + 1) + TASKS).await;

    // The remote contender queues, holds until told, and records its grant in the same log.
    let (granted_tx, granted_rx) = oneshot::channel();
    let (release_tx, release_rx) = oneshot::channel::<()>();
    let remote_task = tokio::spawn({
        let (lock, log) = (remote.mutex("handoff-bound").unwrap(), log.clone());
        async move {
            let guard = lock.acquire_timeout(SOON).await.expect("remote acquire");
            log.lock().unwrap().push(Grant::Remote(guard.fencing_token()));
            granted_tx.send(guard.fencing_token()).unwrap();
            release_rx.await.unwrap();
            guard.release().await.unwrap();
        }
    });
    let remote_session = remote.session_id().unwrap();
    let queued = eventually_some(SOON, || {
        contender_owned(&view, lock.path(), move |o| o == remote_session)
    })
    .await;
    assert!(queued.is_some(), "the remote contender's node never showed up");
    let remote_token = within("remote grant", granted_rx).await.unwrap();
    release_tx.send(()).unwrap();
    within("remote task", remote_task).await.unwrap();

    let after_remote = log.lock().unwrap().len();
    log_reaches(&log, after_remote + 3 * (n + 1) + 1).await;
    let stop_at = {
        let log = log.lock().unwrap();
        stop.store(true, Ordering::SeqCst);
        log.len()
    };
    for task in tasks {
        within("local task", task).await.unwrap();
    }

    let log = log.lock().unwrap().clone();
    let what = format!("bound {n}");
    let tokens: Vec<_> = log.iter().map(Grant::token).collect();
    assert!(
        tokens.windows(2).all(|w| w[0] < w[1]),
        "{what}: tokens did not increase: {log:?}"
    );

    // Group the local grants by node (zxid): grants of one node are consecutive.
    struct Group {
        last: usize,
        generations: Vec<u32>,
    }
    let mut groups: Vec<Group> = Vec::new();
    let mut seen_tasks = HashSet::new();
    let mut all_looping_at = None;
    for (i, grant) in log.iter().enumerate() {
        let Grant::Local { task, token } = *grant else { continue };
        seen_tasks.insert(task);
        if seen_tasks.len() == TASKS && all_looping_at.is_none() {
            all_looping_at = Some(i);
        }
        match groups.last_mut() {
            Some(group) if tokens[group.last].zxid() == token.zxid() => {
                group.last = i;
                group.generations.push(token.generation());
            }
            _ => groups.push(Group {
                last: i,
                generations: vec![token.generation()],
            }),
        }
    }
    let all_looping_at = all_looping_at.expect("every local task got the lock");
    let mut full = 0;
    for group in &groups {
        let expected: Vec<u32> = (0..group.generations.len() as u32).collect();
        assert_eq!(group.generations, expected, "{what}: generations of one node");
        assert!(
            group.generations.len() <= n + 1,
            "{what}: one node served {} grants",
            group.generations.len()
        );
        // While all tasks loop, at least two of them wait at every release, so a node is
        // handed on until the bound. Groups before every task looped, or ended after the stop,
        // may be shorter.
        if group.last >= all_looping_at && group.last + 1 < stop_at {
            assert_eq!(
                group.generations.len(),
                n + 1,
                "{what}: a node was given up early with local waiters queued"
            );
            full += 1;
        }
    }
    eprintln!(
        "{what}: {} grants on {} nodes, {full} nodes checked for exactly {} grants",
        log.len(),
        groups.len(),
        n + 1
    );
    assert!(full >= 4, "{what}: only {full} groups while every task looped");

    // The remote contender was not overtaken by a local node created after its own.
    let remote_at = log.iter().position(|g| matches!(g, Grant::Remote(_))).unwrap();
    let overtook: Vec<_> = log[..remote_at]
        .iter()
        .filter(|g| g.token().zxid() > remote_token.zxid())
        .collect();
    assert!(
        overtook.is_empty(),
        "{what}: local grants overtook the remote: {overtook:?}"
    );

    let handed_off = log
        .iter()
        .filter(|g| matches!(g, Grant::Local { token, .. } if token.generation() > 0))
        .count();
    assert_eq!(local.metrics().handed_off, handed_off as u64, "{what}: handoff metric");
    if n == 0 {
        assert_eq!(handed_off, 0);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_zero_local_handoffs_every_grant_has_its_own_node() {
    handoffs_are_bounded(Some(0)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_two_local_handoffs_a_node_serves_exactly_three_grants() {
    handoffs_are_bounded(Some(2)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_the_default_bound_a_node_serves_exactly_seventeen_grants() {
    handoffs_are_bounded(None).await;
}

#[derive(Debug, Clone, Copy)]
enum Event {
    Local(FencingToken),
    CuratorQueued,
    CuratorGranted,
}

/// Two local tasks loop on a client with `bound` handoffs while a Curator contender queues.
/// Returns the log and the czxid of Curator's node.
async fn curator_queues_among_local_loopers(
    zk: &ZkServer,
    peer: &CuratorPeer,
    name: &str,
    bound: Option<u32>,
) -> (Vec<Event>, i64, LockClient) {
    let mut builder = LockClient::builder(zk.connect_string()).session_timeout(Duration::from_secs(4));
    if let Some(n) = bound {
        builder = builder.max_local_handoffs(n);
    }
    let local = builder.connect().await.expect("connect local client");
    let view = raw(&zk.connect_string()).await;
    let lock = local.mutex(name).unwrap();
    let log = Arc::new(Mutex::new(Vec::new()));
    let stop = Arc::new(AtomicBool::new(false));
    let tasks = spawn_loopers(&lock, 2, &log, &stop, |_, token| Event::Local(token));
    log_reaches(&log, 6).await;
    if bound != Some(0) {
        let handed = eventually(SOON, || {
            let handed = local.metrics().handed_off > 0;
            async move { handed }
        })
        .await;
        assert!(handed, "no local handoff at bound {bound:?}");
    }

    peer.mutex(name, lock.path()).await.unwrap();
    peer.acquire(name, None).unwrap();
    let session = local.session_id().unwrap();
    let (node, czxid) = eventually_some(SOON, || contender_owned(&view, lock.path(), move |o| o != session))
        .await
        .expect("Curator's node never showed up");
    log.lock().unwrap().push(Event::CuratorQueued);
    let acquired = peer.wait_acquired(name, SOON).await.expect("Curator acquired");
    // Nothing local can be granted while Curator holds: every local grant logged before this
    // mark was granted before Curator's.
    log.lock().unwrap().push(Event::CuratorGranted);
    assert!(acquired.ends_with(&node), "Curator holds {acquired}, queued {node}");
    peer.release(name).await.unwrap();

    let len = log.lock().unwrap().len();
    log_reaches(&log, len + 4).await;
    stop.store(true, Ordering::SeqCst);
    for task in tasks {
        within("local task", task).await.unwrap();
    }
    let log = log.lock().unwrap().clone();
    (log, czxid, local)
}

/// Like `support::eventually`, for a condition that yields a value: polls every 20 ms.
async fn eventually_some<T, F, Fut>(within: Duration, mut probe: F) -> Option<T>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let deadline = tokio::time::Instant::now() + within;
    loop {
        if let Some(value) = probe().await {
            return Some(value);
        }
        if tokio::time::Instant::now() >= deadline {
            return None;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn at_zero_handoffs_a_curator_contender_is_not_overtaken_by_local_grants() {
    let zk = server();
    let peer = CuratorPeer::start(&zk.connect_string())
        .await
        .expect("start the Curator peer (run scripts/install-deps.sh)");

    let (log, curator_czxid, local) = curator_queues_among_local_loopers(&zk, &peer, "curator-fifo-0", Some(0)).await;
    let granted_at = log.iter().position(|e| matches!(e, Event::CuratorGranted)).unwrap();
    let queued_at = log.iter().position(|e| matches!(e, Event::CuratorQueued)).unwrap();
    for event in &log[..granted_at] {
        if let Event::Local(token) = event {
            assert!(
                token.zxid() < curator_czxid,
                "local grant {token} overtook Curator's node (czxid {curator_czxid:x}): {log:?}"
            );
            assert_eq!(token.generation(), 0, "a handoff at bound 0");
        }
    }
    // Only the local node already queued when Curator's appeared can go before it.
    let between = log[queued_at..granted_at]
        .iter()
        .filter(|e| matches!(e, Event::Local(_)))
        .count();
    assert!(between <= 1, "{between} local grants while Curator queued: {log:?}");
    assert_eq!(local.metrics().handed_off, 0);

    // The contrast at the default bound: local grants are handed off (Curator still gets in,
    // behind at most one node's worth of grants).
    let (log, curator_czxid, local) =
        curator_queues_among_local_loopers(&zk, &peer, "curator-fifo-default", None).await;
    let granted_at = log.iter().position(|e| matches!(e, Event::CuratorGranted)).unwrap();
    let queued_at = log.iter().position(|e| matches!(e, Event::CuratorQueued)).unwrap();
    assert!(log[..granted_at]
        .iter()
        .all(|e| !matches!(e, Event::Local(t) if t.zxid() > curator_czxid)));
    let between = log[queued_at..granted_at]
        .iter()
        .filter(|e| matches!(e, Event::Local(_)))
        .count();
    eprintln!("default bound: {between} local grants while Curator queued");
    assert!(between <= DEFAULT_MAX_LOCAL_HANDOFFS as usize + 1);
    assert!(local.metrics().handed_off > 0);
}
