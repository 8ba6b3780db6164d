//! The uncontended fast paths: a contender proven alone in its lock directory
//! (`zklock-runtime/src/engine/alone.rs`), or proven first by its number 0 in a directory made in the
//! same round trip, is granted without listing it (`docs/safety.md` "Skipping the listing").
//! Each test forces one of the cases that must fall back to a listing, and checks both that
//! the fallback happened (`granted_without_listing` did not move) and that the grant was right.

mod support;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use support::{cancellation_storm, client, client_with, eventually, last_operation, raw, requests_received, Rng};
use zklock_runtime::{zk, LockClient, LockError, SessionStatus};
use zklock_testing::FaultProxy;

/// A server that reaps empty containers only after a minute (the default), not every 100 ms
/// like the suite's usual one: a reaped lock dir rightly sends the next acquire to a listing,
/// which would make the counts below depend on the reaper's timing.
fn server() -> zklock_testing::ZkServer {
    zklock_testing::ZkServer::start().expect("start ZooKeeper (run scripts/install-deps.sh)")
}

fn fast(c: &LockClient) -> u64 {
    c.metrics().granted_without_listing
}

/// Two grants: the first makes the directory (its node is number 0, proven first without a
/// listing, and the session notes the directory), the second lists and sets the directory
/// watch. From then on a lone contender goes without listing. Returns the client's count of
/// grants without listing after the warm-up, for the tests to count from.
async fn warm_up(lock: &zklock_runtime::Lock, c: &LockClient) -> u64 {
    let before = fast(c);
    for _ in 0..2 {
        lock.acquire().await.unwrap().release().await.unwrap();
    }
    assert_eq!(
        fast(c),
        before + 1,
        "only the grant that made the directory goes without listing"
    );
    fast(c)
}

/// A foreign contender joins `dir` behind `guard`'s node and stays: once `guard` is released,
/// `lock` must not be granted past it, and is granted once it is gone.
async fn queue_behind_a_foreign_contender(
    lock: &zklock_runtime::Lock,
    guard: zklock_runtime::LockGuard,
    other: &zk::Client,
) {
    let prefix = format!("{}/_c_x-lock-", lock.path());
    let (_, seq) = other.create(&prefix, b"", &sequential()).await.unwrap();
    guard.release().await.unwrap();
    let err = lock.acquire_timeout(Duration::from_millis(500)).await.unwrap_err();
    assert!(
        matches!(err, LockError::Timeout { .. }),
        "granted past a foreign contender: {err:?}"
    );
    other.delete(&format!("{prefix}{seq}"), None).await.unwrap();
    lock.acquire_timeout(Duration::from_secs(10))
        .await
        .unwrap()
        .release()
        .await
        .unwrap();
}

/// Acquires and releases the mutexes `item:0` to `item:{names - 1}`, one after the other.
async fn take_each_in_turn(c: &LockClient, names: usize) {
    for key in 0..names {
        let lock = c.mutex(&format!("item:{key}")).unwrap();
        lock.acquire().await.unwrap().release().await.unwrap();
    }
}

/// A foreign contender comes to the lock directory `dir` and goes: a create and a delete
/// through `other`, which raise the directory's count by one.
async fn comes_and_goes(other: &zk::Client, dir: &str) {
    let (_, seq) = other
        .create(&format!("{dir}/_c_x-lock-"), b"", &sequential())
        .await
        .unwrap();
    other.delete(&format!("{dir}/_c_x-lock-{seq}"), None).await.unwrap();
}

fn sequential() -> zk::CreateOptions<'static> {
    zk::CreateMode::EphemeralSequential.with_acls(zk::Acls::anyone_all())
}

#[tokio::test]
async fn a_lone_holder_is_granted_again_without_listing() {
    let zk = server();
    let c = client(&zk.connect_string()).await;
    let lock = c.mutex("solo").unwrap();
    let mut last = None;
    let mut counts = Vec::new();
    for _ in 0..5 {
        let guard = lock.acquire().await.unwrap();
        assert!(last < Some(guard.fencing_token()), "tokens must increase");
        last = Some(guard.fencing_token());
        guard.release().await.unwrap();
        counts.push(fast(&c));
    }
    // The first grant makes the directory (number 0) and notes it, the second lists and
    // sets the directory watch, the rest go without listing.
    assert_eq!(counts, [1, 1, 2, 3, 4]);
    // The write side of a read/write lock is exclusive too; the read side always lists.
    let write = c.write_lock("solo-rw").unwrap();
    for _ in 0..4 {
        write.acquire().await.unwrap().release().await.unwrap();
    }
    assert_eq!(fast(&c), 7);
    let read = c.read_lock("solo-rw").unwrap();
    for _ in 0..3 {
        read.acquire().await.unwrap().release().await.unwrap();
    }
    assert_eq!(fast(&c), 7, "read locks in a directory that exists list every time");
}

/// Contenders of several clients racing for names nobody used before: every first create
/// finds no directory, and each makes it in the same round trip as its node. Only the node
/// that got number 0 goes without a listing; the others, whose directory another client made,
/// list and queue. Every round stays exclusive, grants come in token order, and no node is left.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn contenders_racing_to_make_a_new_directory_stay_exclusive() {
    let zk = server();
    let mut clients = Vec::new();
    for _ in 0..4 {
        clients.push(client(&zk.connect_string()).await);
    }
    let held = Arc::new(AtomicBool::new(false));
    let rounds: u64 = 40;
    for round in 0..rounds {
        let name = format!("race-{round}");
        let tokens = Arc::new(Mutex::new(Vec::new()));
        let mut tasks = Vec::new();
        for c in &clients {
            let (lock, held, tokens) = (c.mutex(&name).unwrap(), held.clone(), tokens.clone());
            tasks.push(tokio::spawn(async move {
                let guard = lock.acquire_timeout(Duration::from_secs(20)).await.unwrap();
                assert!(!held.swap(true, Ordering::SeqCst), "two holders at once");
                tokens.lock().unwrap().push(guard.fencing_token());
                tokio::task::yield_now().await;
                held.store(false, Ordering::SeqCst);
                guard.release().await.unwrap();
            }));
        }
        for task in tasks {
            task.await.unwrap();
        }
        let tokens = tokens.lock().unwrap().clone();
        assert_eq!(tokens.len(), clients.len());
        assert!(
            tokens.windows(2).all(|w| w[0] < w[1]),
            "round {round}: tokens did not increase in grant order: {tokens:?}"
        );
    }
    let granted: u64 = clients.iter().map(|c| c.metrics().acquired).sum();
    let first: u64 = clients.iter().map(fast).sum();
    eprintln!("{granted} grants, {first} without listing");
    assert_eq!(granted, rounds * clients.len() as u64);
    assert!(
        first > 0,
        "no node was proven first by its number 0; the test did not test"
    );
    // One directory per round, reaped only after a minute: one number 0 per round at most.
    assert!(first <= rounds, "{first} grants proven first in {rounds} directories");
    let raw = raw(&zk.connect_string()).await;
    for round in 0..rounds {
        match raw.list_children(&format!("/zklock/race-{round}")).await {
            Ok(left) => assert!(left.is_empty(), "race-{round}: {left:?} left"),
            Err(zk::Error::NoNode) => {}
            Err(err) => panic!("list race-{round}: {err}"),
        }
    }
}

/// Another client's create and delete during our hold change the count: the next acquire
/// lists (and, alone again, goes back to the fast path afterwards).
#[tokio::test]
async fn a_foreign_create_and_delete_during_the_hold_forces_a_listing() {
    let zk = server();
    let c = client(&zk.connect_string()).await;
    let other = raw(&zk.connect_string()).await;
    let lock = c.mutex("visited").unwrap();
    let base = warm_up(&lock, &c).await;
    let guard = lock.acquire().await.unwrap();
    assert_eq!(fast(&c) - base, 1);
    comes_and_goes(&other, "/zklock/visited").await;
    guard.release().await.unwrap();
    lock.acquire().await.unwrap().release().await.unwrap();
    assert_eq!(fast(&c) - base, 1, "the count changed behind our back: must list");
    lock.acquire().await.unwrap().release().await.unwrap();
    assert_eq!(fast(&c) - base, 2, "alone again: back to the fast path");
}

/// Contention that comes and goes does not churn the directory watch: a foreign create and
/// delete between two of our holds makes the next create's number unexpected, which costs a
/// listing, and nothing more; the watch set before stays, so being alone again costs no new
/// watch, and no request removes the old one. Each round is then the listed grant (create,
/// listing, delete) and a lone one (create, delete): five requests.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn contention_between_lone_grants_keeps_the_directory_watch() {
    let zk = server();
    let c = client(&zk.connect_string()).await;
    let other = raw(&zk.connect_string()).await;
    let lock = c.mutex("comes-and-goes").unwrap();
    let base = warm_up(&lock, &c).await;
    let session = c.session_id().unwrap();
    let rounds = 20u64;
    let before = requests_received(&zk, session);
    for _ in 0..rounds {
        comes_and_goes(&other, "/zklock/comes-and-goes").await;
        lock.acquire().await.unwrap().release().await.unwrap();
        lock.acquire().await.unwrap().release().await.unwrap();
    }
    let sent = requests_received(&zk, session) - before;
    assert_eq!(
        fast(&c) - base,
        rounds,
        "the second grant of each round went without listing"
    );
    // A ping or two may come in between (one every third of the 4 s session).
    assert!(
        (5 * rounds..5 * rounds + 5).contains(&sent),
        "{sent} requests for {rounds} rounds of a listed and a lone grant"
    );
}

/// Two sessions taking a lock in turn, as fast as they can, send at most four requests per
/// grant: the create, the listing sent with it, at most one watch on the holder ahead, and the
/// delete. Neither a predecessor that is already gone when it is watched nor a directory that
/// is alone one moment and contended the next may cost a request more (a watch to remove).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_sessions_taking_turns_send_at_most_four_requests_a_grant() {
    let zk = server();
    let a = client(&zk.connect_string()).await;
    let b = client(&zk.connect_string()).await;
    for c in [&a, &b] {
        let lock = c.mutex("turns").unwrap();
        lock.acquire().await.unwrap().release().await.unwrap();
    }
    let sessions = [a.session_id().unwrap(), b.session_id().unwrap()];
    let before = sessions.map(|s| requests_received(&zk, s));
    let grants = 300u64;
    let take_turns = |c: LockClient| async move {
        let lock = c.mutex("turns").unwrap();
        for _ in 0..grants {
            lock.acquire().await.unwrap().release().await.unwrap();
        }
    };
    tokio::join!(take_turns(a.clone()), take_turns(b.clone()));
    for (i, session) in sessions.into_iter().enumerate() {
        let sent = requests_received(&zk, session) - before[i];
        // Pings (one every third of the 4 s session), and the watch on a node of ours held
        // past 100 ms (a grant the machine stalled before its release): one in 20 grants at
        // most. The watch churn this test is about cost 1 281 requests for 300 grants.
        assert!(
            sent <= 4 * grants + grants / 20,
            "session {i} sent {sent} requests for {grants} grants"
        );
    }
}

/// A waiter whose predecessor is gone by the time it watches it costs no request more: the
/// watch is a read, which on a missing node leaves no watch behind, so nothing has to be
/// removed. The waiter talks through a proxy that delays every message by 400 ms; the holder
/// releases as soon as the server has answered the waiter's create and listing (its `cons`
/// report says so), at least 800 ms before the watch, sent once the listing's answer is back,
/// can reach the server. Each round is the waiter's create, listing, watch and release: four
/// requests.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_predecessor_gone_before_it_is_watched_costs_no_request_more() {
    const LATENCY: Duration = Duration::from_millis(400);
    // A long session for the waiter, so that it sends no pings while the test counts.
    let zk = zklock_testing::ZkServer::builder()
        .config("maxSessionTimeout", "60000")
        .start()
        .expect("start ZooKeeper (run scripts/install-deps.sh)");
    let holder = client(&zk.connect_string()).await;
    let proxy = FaultProxy::start(zk.addr()).unwrap();
    let waiter = client_with(&proxy.connect_string(), Duration::from_secs(60)).await;
    let (held, waited) = (holder.mutex("gone-first").unwrap(), waiter.mutex("gone-first").unwrap());
    held.acquire().await.unwrap().release().await.unwrap();
    let session = waiter.session_id().unwrap();
    proxy.set_latency(LATENCY);
    let rounds = 3u64;
    let before = requests_received(&zk, session);
    for _ in 0..rounds {
        let guard = held.acquire().await.unwrap();
        let round_start = requests_received(&zk, session);
        // Released as soon as granted, by the task that acquired.
        let waiting = tokio::spawn({
            let waited = waited.clone();
            async move { waited.acquire_timeout(Duration::from_secs(20)).await?.release().await }
        });
        // The server has answered the waiter's create and its listing, which shows the holder
        // (received is not enough: the holder's delete, from another connection, could still
        // be handled first). The watch is at least 800 ms away.
        let listed = eventually(Duration::from_secs(10), || async {
            requests_received(&zk, session) >= round_start + 2 && last_operation(&zk, session) == "GETC"
        })
        .await;
        assert!(listed, "the server never answered the waiter's listing");
        guard.release().await.unwrap();
        waiting.await.unwrap().unwrap();
    }
    proxy.set_latency(Duration::ZERO);
    let sent = requests_received(&zk, session) - before;
    // A grant not released within 100 ms (a stalled test machine) has its own node watched:
    // one request more, at most once or twice here. The watch removal this test is about
    // costs one per round: 15.
    assert!(
        (4 * rounds..4 * rounds + 3).contains(&sent),
        "{sent} requests for {rounds} grants behind a holder gone before it was watched"
    );
}

/// A contender another client left in the directory is ahead of our next node: we wait for
/// it, and are granted only once it is gone.
#[tokio::test]
async fn a_foreign_contender_left_in_the_dir_is_waited_for() {
    let zk = server();
    let c = client(&zk.connect_string()).await;
    let other = raw(&zk.connect_string()).await;
    let lock = c.mutex("queued").unwrap();
    let base = warm_up(&lock, &c).await;
    let guard = lock.acquire().await.unwrap();
    queue_behind_a_foreign_contender(&lock, guard, &other).await;
    assert_eq!(
        fast(&c) - base,
        1,
        "only the grant before the foreign contender was a fast one"
    );
}

/// The dangerous case the directory watch exists for: the empty directory is deleted and
/// recreated, and the new one is brought to exactly the count our next create expects, with
/// foreign contenders in it. The create's number alone would "prove" us alone; the fired
/// watch must send us to the listing, where we queue behind them. Fails without the watch.
#[tokio::test]
async fn a_dir_recreated_to_the_expected_count_is_not_trusted() {
    let zk = server();
    let c = client(&zk.connect_string()).await;
    let admin = raw(&zk.connect_string()).await;
    let lock = c.mutex("reborn").unwrap();
    let base = warm_up(&lock, &c).await;
    let guard = lock.acquire().await.unwrap();
    assert_eq!(fast(&c) - base, 1);
    // The number the next create gets if nobody else creates a node in the directory.
    let last: i64 = guard.node_path().rsplit('-').next().unwrap().parse().unwrap();
    let expected = last + 1;
    guard.release().await.unwrap();
    // The server may have reaped the empty container already.
    match admin.delete("/zklock/reborn", None).await {
        Ok(()) | Err(zk::Error::NoNode) => {}
        Err(err) => panic!("cannot delete the lock dir: {err}"),
    }
    let persistent = zk::CreateMode::Persistent.with_acls(zk::Acls::anyone_all());
    // (`mkdir`: the server may have reaped the emptied namespace too.)
    admin.mkdir("/zklock/reborn", &persistent).await.unwrap();
    // Foreign contenders, up to the number before the expected one.
    loop {
        let (_, seq) = admin
            .create("/zklock/reborn/_c_x-lock-", b"", &sequential())
            .await
            .unwrap();
        assert!(seq.into_i64() < expected, "overshot: {seq} for {expected}");
        if seq.into_i64() + 1 == expected {
            break;
        }
    }
    let err = lock.acquire_timeout(Duration::from_millis(500)).await.unwrap_err();
    assert!(
        matches!(err, LockError::Timeout { .. }),
        "granted past the contenders of a recreated dir: {err:?}"
    );
    assert_eq!(fast(&c) - base, 1);
}

/// After a connection loss nothing known before it is trusted: the next acquire lists.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reconnect_forgets_what_was_known() {
    let zk = server();
    let proxy = FaultProxy::start(zk.addr()).unwrap();
    let c = LockClient::builder(proxy.connect_string())
        .session_timeout(Duration::from_secs(4))
        .connect()
        .await
        .unwrap();
    let lock = c.mutex("reconnected").unwrap();
    let base = warm_up(&lock, &c).await;
    lock.acquire().await.unwrap().release().await.unwrap();
    assert_eq!(fast(&c) - base, 1);
    let mut status = c.watch_status();
    proxy.blackhole();
    proxy.reset_all();
    tokio::time::timeout(
        Duration::from_secs(10),
        status.wait_for(|s| *s == SessionStatus::Suspended),
    )
    .await
    .expect("the client noticed the connection loss")
    .unwrap();
    proxy.pass();
    let back = eventually(Duration::from_secs(10), || async {
        c.status() == SessionStatus::Connected
    })
    .await;
    assert!(back, "the client did not reconnect: {:?}", c.status());
    lock.acquire().await.unwrap().release().await.unwrap();
    assert_eq!(fast(&c) - base, 1, "a grant right after a reconnect must list");
    lock.acquire().await.unwrap().release().await.unwrap();
    assert_eq!(fast(&c) - base, 2);
}

/// Lone grants interleaved with bursts of contention: siblings under `join!` in one task, a
/// spawned task and another client. Every grant stays exclusive with a strictly larger token,
/// and no grant skips the listing once the other client's node came after this client's last
/// one: in a round with the other client, this client's grant lists if the other was granted
/// first (its node is older), and otherwise the next round's grant lists. The fast path comes
/// back between bursts. (A round of this client's own tasks may rightly skip the listing: they
/// queue in process, and the node is alone in ZooKeeper. And a round in which this client
/// came second and listed may leave it proven alone again, so the round after may skip.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lone_grants_between_bursts_of_contention_stay_exclusive() {
    let zk = server();
    let c = client(&zk.connect_string()).await;
    let other = client(&zk.connect_string()).await;
    let lock = c.mutex("bursty").unwrap();
    let foreign = other.mutex("bursty").unwrap();
    let held = Arc::new(AtomicBool::new(false));
    // Every grant in order: whether it was this client's, and its token.
    let grants = Arc::new(Mutex::new(Vec::new()));
    let critical = |lock: zklock_runtime::Lock, ours: bool| {
        let (held, grants) = (held.clone(), grants.clone());
        async move {
            let guard = lock.acquire_timeout(Duration::from_secs(20)).await.unwrap();
            assert!(!held.swap(true, Ordering::SeqCst), "two holders at once");
            grants.lock().unwrap().push((ours, guard.fencing_token()));
            tokio::task::yield_now().await;
            held.store(false, Ordering::SeqCst);
            guard.release().await.unwrap();
        }
    };
    // This client's grants in a round that went to ZooKeeper and listed the directory: all
    // grants, less those handed over in the process and those proven alone without a listing.
    let listed_since = |before: &zklock_runtime::MetricsSnapshot| {
        let now = c.metrics();
        (now.acquired - before.acquired)
            - (now.handed_off - before.handed_off)
            - (now.granted_without_listing - before.granted_without_listing)
    };
    let base = warm_up(&lock, &c).await;
    let mut rng = Rng::from_clock();
    let (mut lone, mut foreign_first, mut ours_first) = (0, 0, 0);
    // Set when the other client created its node after ours: the directory changed behind
    // this client's back, so its next grant must list.
    let mut owed = false;
    for round in 0..40 {
        let before = c.metrics();
        let seen = grants.lock().unwrap().len();
        let foreign_round = match rng.below(4) {
            0 => {
                tokio::join!(critical(lock.clone(), true), critical(lock.clone(), true));
                false
            }
            1 => {
                let spawned = tokio::spawn(critical(lock.clone(), true));
                critical(lock.clone(), true).await;
                spawned.await.unwrap();
                false
            }
            2 => {
                tokio::join!(critical(lock.clone(), true), critical(foreign.clone(), false));
                true
            }
            _ => {
                critical(lock.clone(), true).await;
                lone += 1;
                false
            }
        };
        let listed = listed_since(&before);
        if owed {
            assert!(
                listed >= 1,
                "round {round}: granted without listing after another client's node came and went"
            );
        }
        owed = false;
        if foreign_round {
            // Grant order is queue order: whoever was granted first created its node first.
            if grants.lock().unwrap()[seen].0 {
                // The other client's node came after ours: the next round must list.
                ours_first += 1;
                owed = true;
            } else {
                // Ours came after the other client's node: this grant must have listed.
                foreign_first += 1;
                assert!(
                    listed >= 1,
                    "round {round}: granted past another client's node without listing"
                );
            }
        }
    }
    let grants = grants.lock().unwrap().clone();
    assert!(
        grants.windows(2).all(|w| w[0].1 < w[1].1),
        "tokens did not strictly increase in grant order: {grants:?}"
    );
    let m = c.metrics();
    eprintln!(
        "{} grants, {lone} lone rounds, {foreign_first} with the other client first and \
         {ours_first} with this one first; this client: {m:?}",
        grants.len()
    );
    assert!(
        m.granted_without_listing > base || lone < 2,
        "the fast path never came back"
    );
    let raw = raw(&zk.connect_string()).await;
    assert_eq!(raw.list_children("/zklock/bursty").await.unwrap(), Vec::<String>::new());
}

/// Acquisitions on the fast path cancelled at random points (before the create, while it is
/// in flight, after the grant) leave no node, and the path stays correct afterwards.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancelled_fast_path_acquisitions_leave_no_node() {
    let zk = server();
    let c = client(&zk.connect_string()).await;
    let lock = c.mutex("cancel-alone").unwrap();
    warm_up(&lock, &c).await;
    let acquire = {
        let lock = lock.clone();
        move || {
            let lock = lock.clone();
            async move { lock.acquire().await }
        }
    };
    let granted = cancellation_storm(vec![acquire], 300, Duration::from_micros(3000)).await;
    c.flush().await;
    let raw = raw(&zk.connect_string()).await;
    assert_eq!(
        raw.list_children("/zklock/cancel-alone").await.unwrap(),
        Vec::<String>::new()
    );
    eprintln!("{granted} granted, {} without listing, {:?}", fast(&c), c.metrics());
    assert!(c.metrics().abandoned > 0, "no acquisition was cancelled midway");
    let guard = lock.try_acquire().await.unwrap().expect("the lock is free");
    guard.release().await.unwrap();
}

/// A directory remade by us is first proven by our node's number 0; the count then carries
/// over to the next grant only if nobody created a node meanwhile. A foreign contender that
/// joined behind our number-0 node is still there when we come back: we must queue behind it.
#[tokio::test]
async fn a_contender_behind_our_first_node_of_a_remade_dir_is_waited_for() {
    let zk = server();
    let c = client(&zk.connect_string()).await;
    let admin = raw(&zk.connect_string()).await;
    let lock = c.mutex("remade").unwrap();
    let base = warm_up(&lock, &c).await;
    lock.acquire().await.unwrap().release().await.unwrap();
    assert_eq!(fast(&c) - base, 1, "watched and alone: no listing");
    // The directory goes (as a reaped container would); our watch on it fires.
    admin.delete("/zklock/remade", None).await.unwrap();
    let guard = lock.acquire().await.unwrap();
    assert!(guard.node_path().ends_with("-lock-0000000000"), "{}", guard.node_path());
    assert_eq!(fast(&c) - base, 2, "number 0 in the directory we made: no listing");
    queue_behind_a_foreign_contender(&lock, guard, &admin).await;
    assert_eq!(
        fast(&c) - base,
        2,
        "the count is unproven until a listing shows us alone"
    );
}

/// Per-key locks over many names (more than a small table would hold): each name's first
/// grant makes its directory (number 0), the second lists and sets the watch, and from the
/// third on every grant goes without listing.
#[tokio::test]
async fn per_key_locks_over_many_names_keep_the_fast_path() {
    let zk = server();
    let c = client(&zk.connect_string()).await;
    let names = 600;
    for round in 0..3 {
        take_each_in_turn(&c, names).await;
        let expected = [names, names, 2 * names][round];
        assert_eq!(fast(&c), expected as u64, "after round {round}");
    }
}

/// `fast_path_dirs` bounds what a session remembers: 6 names taken in turn, three rounds. With
/// room for all of them, the third round goes without listing and the server holds a watch on
/// each directory; with room for 4, each name was forgotten before its next turn, so only the
/// grants that made the directories (round one) skip the listing and nothing is watched; with
/// 0, the same.
#[tokio::test]
async fn the_fast_path_remembers_as_many_directories_as_configured() {
    let zk = server();
    let names = 6;
    for (capacity, expected, watched) in [(8, [6, 6, 12], 6), (4, [6, 6, 6], 0), (0, [6, 6, 6], 0)] {
        let c = LockClient::builder(zk.connect_string())
            .namespace(format!("/zklock-capacity-{capacity}"))
            .session_timeout(Duration::from_secs(4))
            .fast_path_dirs(capacity)
            .connect()
            .await
            .expect("connect lock client");
        for (round, expected) in expected.into_iter().enumerate() {
            take_each_in_turn(&c, names).await;
            assert_eq!(fast(&c), expected, "capacity {capacity}, after round {round}");
        }
        let watches = zk.four_letter_word("wchc").expect("wchc");
        assert_eq!(
            watches.matches(&format!("/zklock-capacity-{capacity}/")).count(),
            watched,
            "capacity {capacity}: watched directories\n{watches}"
        );
        c.close().await;
    }
}

/// A lone holder's grant and release cost the server two requests (the create and the delete)
/// and nothing more: no listing is sent, not even one pipelined behind the create.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lone_grant_and_release_send_two_requests() {
    let zk = server();
    let c = client(&zk.connect_string()).await;
    let lock = c.mutex("two-requests").unwrap();
    let base = warm_up(&lock, &c).await;
    let session = c.session_id().unwrap();
    let rounds = 50u64;
    let before = requests_received(&zk, session);
    for _ in 0..rounds {
        lock.acquire().await.unwrap().release().await.unwrap();
    }
    let sent = requests_received(&zk, session) - before;
    assert_eq!(fast(&c) - base, rounds, "every grant took the fast path");
    // A ping or two may come in between (one every third of the 4 s session).
    assert!(
        (2 * rounds..2 * rounds + 5).contains(&sent),
        "{sent} requests for {rounds} lone grants and releases"
    );
}

/// Where ZooKeeper 3.8 keeps a child name in a directory of few children: a Java `HashSet`
/// of 8 buckets, listed bucket by bucket. A name in the last bucket is listed after almost
/// any other.
fn java_bucket(name: &str) -> u32 {
    let h = name
        .encode_utf16()
        .fold(0i32, |h, c| h.wrapping_mul(31).wrapping_add(c as i32)) as u32;
    (h ^ (h >> 16)) & 7
}

/// Tries that list the directory with an older holder's node in it, give up and delete their
/// own node never leave the directory looking alone: the server lists children in no
/// particular order, so ours often comes first, and that must not count as alone while
/// another node is there. Every try after them still lists and still finds the holder. (The
/// holder's node is chosen to be listed last, so that ours is listed first in most tries.)
#[tokio::test]
async fn giving_up_behind_an_older_holder_never_proves_the_directory_alone() {
    let zk = server();
    let c = client(&zk.connect_string()).await;
    let admin = raw(&zk.connect_string()).await;
    let lock = c.mutex("older").unwrap();
    let base = warm_up(&lock, &c).await;
    let mut holder = None;
    for candidate in 0..64 {
        let prefix = format!("/zklock/older/_c_{candidate:08x}-lock-");
        let (_, seq) = admin.create(&prefix, b"", &sequential()).await.unwrap();
        let node = format!("{prefix}{seq}");
        if java_bucket(node.rsplit('/').next().unwrap()) == 7 {
            holder = Some(node);
            break;
        }
        admin.delete(&node, None).await.unwrap();
    }
    let holder = holder.expect("one of 64 names falls in the last bucket");
    for attempt in 0..16 {
        let granted = lock.try_acquire().await.unwrap();
        assert!(granted.is_none(), "try {attempt} was granted past an older holder");
        c.flush().await;
    }
    assert_eq!(fast(&c), base, "no try may skip the listing");
    admin.delete(&holder, None).await.unwrap();
    lock.try_acquire()
        .await
        .unwrap()
        .expect("free again")
        .release()
        .await
        .unwrap();
}

/// The first grant in a directory this session knows nothing of costs three requests: the
/// create, the listing sent with it (one round trip for both), and the release's delete. The
/// listing is used as it comes, never sent again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_listed_grant_and_release_send_three_requests() {
    let zk = server();
    let admin = raw(&zk.connect_string()).await;
    let rounds = 30u64;
    let persistent = zk::CreateMode::Persistent.with_acls(zk::Acls::anyone_all());
    admin.create("/zklock", b"", &persistent).await.unwrap();
    for n in 0..rounds {
        // A contender came and went: the next node is number 1, which proves nothing alone.
        let dir = format!("/zklock/listed-{n}");
        admin.create(&dir, b"", &persistent).await.unwrap();
        comes_and_goes(&admin, &dir).await;
    }
    let c = client(&zk.connect_string()).await;
    let session = c.session_id().unwrap();
    let before = requests_received(&zk, session);
    for n in 0..rounds {
        let lock = c.mutex(&format!("listed-{n}")).unwrap();
        lock.acquire().await.unwrap().release().await.unwrap();
    }
    let sent = requests_received(&zk, session) - before;
    assert_eq!(fast(&c), 0, "every grant listed: each directory was new to the session");
    // A ping or two may come in between (one every third of the 4 s session).
    assert!(
        (3 * rounds..3 * rounds + 5).contains(&sent),
        "{sent} requests for {rounds} listed grants and releases"
    );
}
