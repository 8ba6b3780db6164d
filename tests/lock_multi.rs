//! Several locks at once (`LockClient::multi_lock`, and `#[distributed_lock]` with several
//! names), and the `max_hold` bound, against a real ZooKeeper: opposite orders never deadlock,
//! an acquisition is all or nothing (timeouts, errors and cancellation leave no node behind),
//! tokens and reentrancy work per name, the loss of one lock stops the body, and `max_hold`
//! stops a hung body and frees the lock.

mod support;

use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use support::{cancellation_storm, client, contenders, raw, server, AppError};
use zklock::{distributed_lock, LockClient, LockError, LockKind, MultiLock};
use zklock_testing::FaultProxy;

/// Generous bound for anything that should happen promptly on a loaded machine; an acquisition
/// that needs longer than this is taken to be deadlocked.
const SOON: Duration = Duration::from_secs(20);

/// Marks a lock as held by someone in this test process, and fails if it already was: the
/// in-process view of mutual exclusion.
#[derive(Default)]
struct Exclusive(AtomicBool);

impl Exclusive {
    async fn hold_briefly(&self, what: &str) {
        assert!(!self.0.swap(true, Ordering::SeqCst), "{what} was held twice at once");
        tokio::task::yield_now().await;
        self.0.store(false, Ordering::SeqCst);
    }
}

#[tokio::test]
async fn locks_are_taken_in_path_order_without_duplicates() {
    // No server is needed to build a multi-lock: creating it costs nothing on the server.
    let locks = LockClient::builder("127.0.0.1:1").build().unwrap();
    let multi = locks.multi_lock(["sku-9", "sku-10", "sku-9", "audit"]).unwrap();
    let names: Vec<&str> = multi.locks().iter().map(|l| l.name()).collect();
    assert_eq!(
        names,
        ["audit", "sku-10", "sku-9"],
        "sorted by path, duplicates collapsed"
    );
    let reversed = locks.multi_lock(["sku-9", "audit", "sku-10"]).unwrap();
    let again: Vec<&str> = reversed.locks().iter().map(|l| l.name()).collect();
    assert_eq!(names, again, "the given order does not matter");
    assert!(multi.locks().iter().all(|l| l.kind() == LockKind::Mutex));

    match locks.multi_lock(Vec::<String>::new()) {
        Err(LockError::InvalidConfig { message: why, .. }) => assert!(why.contains("at least one"), "{why}"),
        other => panic!("expected InvalidConfig for no names, got {other:?}"),
    }
    match locks.multi_lock(["fine", "not/fine"]) {
        Err(LockError::InvalidName { name, .. }) => assert_eq!(name, "not/fine"),
        other => panic!("expected InvalidName, got {other:?}"),
    }
    let mixed = [locks.mutex("a").unwrap(), locks.read_lock("b").unwrap()];
    match MultiLock::new(mixed) {
        Err(LockError::InvalidConfig { message: why, .. }) => assert!(why.contains("one kind"), "{why}"),
        other => panic!("expected InvalidConfig for mixed kinds, got {other:?}"),
    }
    let labelled = MultiLock::new([
        locks.mutex("sku-2").unwrap().with_template("sku-{n}"),
        locks.mutex("sku-1").unwrap().with_template("sku-{n}"),
    ])
    .unwrap();
    assert_eq!(labelled.locks()[0].name(), "sku-1");
    assert_eq!(labelled.locks()[0].template(), Some("sku-{n}"));
    match locks.multi_lock_of(LockKind::Semaphore { leases: 0 }, ["a"]) {
        Err(LockError::InvalidConfig { .. }) => {}
        other => panic!("expected InvalidConfig for a zero-lease semaphore, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn opposite_orders_never_deadlock_across_clients_and_tasks() {
    let zk = server();
    let (a, b) = (client(&zk.connect_string()).await, client(&zk.connect_string()).await);
    let (x, y) = (Arc::new(Exclusive::default()), Arc::new(Exclusive::default()));
    let rounds = Arc::new(AtomicU32::new(0));
    let mut tasks = Vec::new();
    // Each client runs one task per order, so the orders clash in ZooKeeper and in each
    // process's local queue.
    for (c, names) in [
        (&a, ["order-x", "order-y"]),
        (&b, ["order-y", "order-x"]),
        (&a, ["order-y", "order-x"]),
        (&b, ["order-x", "order-y"]),
    ] {
        let multi = c.multi_lock(names).unwrap();
        let (x, y, rounds) = (x.clone(), y.clone(), rounds.clone());
        tasks.push(tokio::spawn(async move {
            for _ in 0..40 {
                let guard = match multi.acquire_timeout(SOON).await {
                    Ok(guard) => guard,
                    Err(err) => panic!("{names:?}: {err} (a deadlock shows up as a timeout)"),
                };
                x.hold_briefly("order-x").await;
                y.hold_briefly("order-y").await;
                rounds.fetch_add(1, Ordering::SeqCst);
                guard.release().await.unwrap();
            }
        }));
    }
    for task in tasks {
        task.await.unwrap();
    }
    assert_eq!(rounds.load(Ordering::SeqCst), 160);
    let raw = raw(&zk.connect_string()).await;
    for dir in ["/zklock/order-x", "/zklock/order-y"] {
        assert_eq!(contenders(&raw, dir).await, Vec::<String>::new(), "{dir}");
    }
}

/// Accounts of one bank served by several processes (here: clients), each with its own
/// session; the exclusion markers are shared, as the database would be.
struct Bank {
    locks: LockClient,
    accounts: Arc<[Exclusive; 3]>,
}

impl Bank {
    #[distributed_lock("account:{from}", "account:{to}", timeout = "20s", client = self.locks)]
    async fn transfer(&self, from: usize, to: usize) -> Result<(), AppError> {
        let debit = zklock::current_fencing_token_for(&format!("account:{from}"));
        let credit = zklock::current_fencing_token_for(&format!("account:{to}"));
        if debit.is_none() || credit.is_none() {
            return Err(AppError::Other(format!("no token in the body: {debit:?} {credit:?}")));
        }
        self.accounts[from].hold_briefly("an account").await;
        if to != from {
            self.accounts[to].hold_briefly("an account").await;
        }
        Ok(())
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_attribute_with_two_names_never_deadlocks_and_excludes() {
    let zk = server();
    let accounts: Arc<[Exclusive; 3]> = Arc::default();
    let mut banks = Vec::new();
    for _ in 0..2 {
        banks.push(Arc::new(Bank {
            locks: client(&zk.connect_string()).await,
            accounts: accounts.clone(),
        }));
    }
    let mut tasks = Vec::new();
    // Opposite orders, a cycle over three accounts, and a transfer to the same account (one
    // lock once filled in).
    for (i, (from, to)) in [(0, 1), (1, 0), (1, 2), (2, 0), (0, 0)].into_iter().enumerate() {
        let bank = banks[i % 2].clone();
        tasks.push(tokio::spawn(async move {
            for _ in 0..25 {
                bank.transfer(from, to).await.unwrap();
            }
        }));
    }
    for task in tasks {
        task.await.unwrap();
    }
    let raw = raw(&zk.connect_string()).await;
    for bank in &banks {
        bank.locks.flush().await;
    }
    for n in 0..3 {
        let dir = format!("/zklock/account:{n}");
        assert_eq!(contenders(&raw, &dir).await, Vec::<String>::new(), "{dir}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_timeout_releases_the_locks_already_taken() {
    let zk = server();
    let (mine, theirs) = (client(&zk.connect_string()).await, client(&zk.connect_string()).await);
    let raw = raw(&zk.connect_string()).await;
    let held = theirs.mutex("partial-b").unwrap().acquire().await.unwrap();

    let multi = mine.multi_lock(["partial-b", "partial-a"]).unwrap();
    let started = Instant::now();
    match multi.acquire_timeout(Duration::from_millis(500)).await {
        Err(LockError::Timeout { name, waited }) => {
            assert_eq!(name, "partial-b", "the error names the lock that stayed busy");
            assert!(waited >= Duration::from_millis(500), "{waited:?}");
            assert!(waited <= started.elapsed());
        }
        other => panic!("expected a timeout, got {other:?}"),
    }
    assert!(multi.try_acquire().await.unwrap().is_none());
    mine.flush().await;
    assert_eq!(contenders(&raw, "/zklock/partial-a").await, Vec::<String>::new());
    assert_eq!(
        contenders(&raw, "/zklock/partial-b").await.len(),
        1,
        "only the holder's node"
    );
    // `partial-a` was really released: another client takes it at once.
    let other = theirs.mutex("partial-a").unwrap().try_acquire().await.unwrap();
    assert!(other.is_some(), "partial-a stayed held after the multi-lock gave up");
    drop(other);

    held.release().await.unwrap();
    let guard = multi.acquire_timeout(SOON).await.unwrap();
    assert_eq!(guard.guards().len(), 2);
    guard.release().await.unwrap();
    for dir in ["/zklock/partial-a", "/zklock/partial-b"] {
        assert_eq!(contenders(&raw, dir).await, Vec::<String>::new(), "{dir}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancelled_multi_acquisitions_leave_no_node() {
    let zk = server();
    let connect = zk.connect_string();
    let (a, b) = (client(&connect).await, client(&connect).await);
    let names = ["storm-c", "storm-a", "storm-b"];
    let acquirers = [&a, &b, &a, &b]
        .map(|c| {
            let multi = c.multi_lock(names).unwrap();
            move || {
                let multi = multi.clone();
                async move { multi.acquire().await }
            }
        })
        .to_vec();
    // 4 × 150 cancellations after 0..6000 µs: before the first create, between two locks,
    // while waiting on any of them, or not at all.
    let granted = cancellation_storm(acquirers, 150, Duration::from_micros(6000)).await;
    a.flush().await;
    b.flush().await;
    let raw = raw(&connect).await;
    for name in names {
        let dir = format!("/zklock/{name}");
        let left = contenders(&raw, &dir).await;
        assert!(
            left.is_empty(),
            "{dir}: {left:?} left after 600 cancellations ({granted} granted)"
        );
    }
    let abandoned = a.metrics().abandoned + b.metrics().abandoned;
    eprintln!("granted {granted}, abandoned {abandoned}");
    assert!(
        abandoned > 0,
        "no acquisition was cancelled midway; the test did not test"
    );
    let guard = a.multi_lock(names).unwrap().acquire_timeout(SOON).await.unwrap();
    guard.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tokens_and_reentrancy_work_per_name() {
    let zk = server();
    let c = client(&zk.connect_string()).await;
    let raw = raw(&zk.connect_string()).await;

    let duplicated = c.multi_lock(["dup", "dup"]).unwrap().acquire().await.unwrap();
    assert_eq!(duplicated.guards().len(), 1);
    assert_eq!(
        contenders(&raw, "/zklock/dup").await.len(),
        1,
        "one node for a name given twice"
    );
    duplicated.release().await.unwrap();

    let outer = c.mutex("re-a").unwrap().acquire().await.unwrap();
    let outer_token = outer.fencing_token();
    outer
        .scope(async {
            // Inside the hold of `re-a`: the multi-lock re-enters it and takes `re-b`.
            let multi = c
                .multi_lock(["re-b", "re-a"])
                .unwrap()
                .acquire_timeout(SOON)
                .await
                .unwrap();
            assert_eq!(multi.fencing_token_of("re-a"), Some(outer_token));
            let b_token = multi.fencing_token_of("re-b").expect("re-b held");
            assert_eq!(multi.fencing_token_of("re-c"), None);
            assert_eq!(outer.hold_count(), 2, "re-a re-entered, not taken again");
            assert_eq!(contenders(&raw, "/zklock/re-a").await.len(), 1);
            multi
                .scope(async {
                    assert_eq!(zklock::current_fencing_token_for("re-a"), Some(outer_token));
                    assert_eq!(zklock::current_fencing_token_for("re-b"), Some(b_token));
                    // Nested acquisitions of either name re-enter.
                    let nested = c.mutex("re-b").unwrap().try_acquire().await.unwrap().unwrap();
                    assert_eq!(nested.fencing_token(), b_token);
                })
                .await;
            multi.release().await.unwrap();
            assert_eq!(outer.hold_count(), 1);
        })
        .await;
    assert!(contenders(&raw, "/zklock/re-b").await.is_empty());
    // Outside every scope a multi-lock is a new holder: it waits for `outer`.
    let other = c.multi_lock(["re-a"]).unwrap();
    assert!(other.try_acquire().await.unwrap().is_none());
    outer.release().await.unwrap();
    assert!(other.try_acquire().await.unwrap().is_some());
}

struct Worker {
    locks: LockClient,
}

impl Worker {
    #[distributed_lock("hung", max_hold = "400ms", client = self.locks)]
    async fn hangs(&self) -> Result<(), AppError> {
        std::future::pending::<()>().await;
        Ok(())
    }

    #[distributed_lock("hung-x", "hung-y", max_hold = "400ms", on_lost = "continue", client = self.locks)]
    async fn hangs_holding_two(&self) -> Result<(), AppError> {
        std::future::pending::<()>().await;
        Ok(())
    }

    #[distributed_lock("quick", max_hold = "10s", client = self.locks)]
    async fn quick(&self) -> Result<u32, AppError> {
        Ok(7)
    }

    #[distributed_lock("lossy-x", "lossy-y", timeout = "10s", client = self.locks)]
    async fn waits_forever_holding_two(&self) -> Result<(), AppError> {
        std::future::pending::<()>().await;
        Ok(())
    }
}

fn expect_max_hold(result: Result<(), AppError>, name: &str) {
    match result {
        Err(AppError::Lock(LockError::MaxHoldExceeded { name: n, max_hold })) => {
            assert_eq!(n, name);
            assert_eq!(max_hold, Duration::from_millis(400));
        }
        other => panic!("expected MaxHoldExceeded for {name}, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn max_hold_stops_a_hung_body_and_frees_the_lock() {
    let zk = server();
    let worker = Worker {
        locks: client(&zk.connect_string()).await,
    };
    let other = client(&zk.connect_string()).await;

    let started = Instant::now();
    expect_max_hold(worker.hangs().await, "hung");
    assert!(
        started.elapsed() >= Duration::from_millis(400),
        "{:?}",
        started.elapsed()
    );
    // The lock is free for the next holder (the node goes in the background).
    let next = other.mutex("hung").unwrap().acquire_timeout(SOON).await.unwrap();
    next.release().await.unwrap();

    // With several names, and whatever `on_lost` says.
    expect_max_hold(worker.hangs_holding_two().await, "hung-x");
    let both = other
        .multi_lock(["hung-y", "hung-x"])
        .unwrap()
        .acquire_timeout(SOON)
        .await
        .unwrap();
    both.release().await.unwrap();

    // A body that ends in time is not touched.
    assert_eq!(worker.quick().await.unwrap(), 7);
    assert_eq!(worker.locks.metrics().max_hold_exceeded, 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_for_stops_the_work_and_leaves_the_guard_to_the_caller() {
    let zk = server();
    let c = client(&zk.connect_string()).await;
    let guard = c.mutex("bounded").unwrap().acquire().await.unwrap();
    let token = guard.fencing_token();

    let inside = guard
        .run_for(SOON, async { zklock::current_fencing_token() })
        .await
        .unwrap();
    assert_eq!(inside, Some(token), "run_for runs the work inside the hold's scope");
    // A bound too large to add to a clock is no bound, not a panic; the same for timeouts.
    assert_eq!(guard.run_for(Duration::MAX, async { 7 }).await.unwrap(), 7);
    let other = c
        .multi_lock(["bounded-3"])
        .unwrap()
        .acquire_timeout(Duration::MAX)
        .await
        .unwrap();
    let single = c
        .mutex("bounded-4")
        .unwrap()
        .acquire_timeout(Duration::MAX)
        .await
        .unwrap();
    drop((other, single));

    match guard
        .run_for(Duration::from_millis(300), std::future::pending::<()>())
        .await
    {
        Err(LockError::MaxHoldExceeded { name, max_hold }) => {
            assert_eq!(name, "bounded");
            assert_eq!(max_hold, Duration::from_millis(300));
        }
        other => panic!("expected MaxHoldExceeded, got {other:?}"),
    }
    // The bound counts from the acquisition: once past it, further work stops at its first
    // `.await`.
    let reached = AtomicBool::new(false);
    let late = guard
        .run_for(Duration::from_millis(300), async {
            tokio::task::yield_now().await;
            reached.store(true, Ordering::SeqCst);
        })
        .await;
    assert!(matches!(late, Err(LockError::MaxHoldExceeded { .. })), "{late:?}");
    assert!(
        !reached.load(Ordering::SeqCst),
        "work past the bound ran beyond its first await"
    );
    // Stopping the work did not release the lock; the caller does.
    guard.ensure_held().await.unwrap();
    guard.release().await.unwrap();

    let multi = c.multi_lock(["bounded", "bounded-2"]).unwrap().acquire().await.unwrap();
    assert!(matches!(
        multi
            .run_for(Duration::from_millis(300), std::future::pending::<()>())
            .await,
        Err(LockError::MaxHoldExceeded { .. })
    ));
    multi.ensure_held().await.unwrap();
    multi.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_loss_of_the_session_aborts_a_body_holding_two_locks() {
    let zk = server();
    let proxy = FaultProxy::start(zk.addr()).unwrap();
    let worker = Arc::new(Worker {
        locks: client(&proxy.connect_string()).await,
    });
    let raw = raw(&zk.connect_string()).await;
    let running = tokio::spawn({
        let worker = worker.clone();
        async move { worker.waits_forever_holding_two().await }
    });
    // Wait until both locks are held, as the server sees it, then cut the connection.
    let deadline = Instant::now() + SOON;
    while contenders(&raw, "/zklock/lossy-x").await.is_empty() || contenders(&raw, "/zklock/lossy-y").await.is_empty() {
        assert!(Instant::now() < deadline, "the body never got both locks");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    proxy.blackhole();
    let result = tokio::time::timeout(SOON, running)
        .await
        .expect("the body was never stopped")
        .unwrap();
    match result {
        Err(AppError::Lock(LockError::Lost { name, .. })) => {
            assert!(name == "lossy-x" || name == "lossy-y", "{name}");
        }
        other => panic!("expected Lost, got {other:?}"),
    }
}
