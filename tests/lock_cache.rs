//! Lock caching (`Lock::with_cache`, `LockClientBuilder::default_cache`): an idle node is kept
//! for this process after its last hold, re-acquired with no request to ZooKeeper and a larger
//! token each time, and given back as soon as anyone else wants the lock (another client's
//! contender, an operator's delete, a revocation), when the linger runs out, and on `flush` and
//! `close`. Mutual exclusion and token order hold with cached clients contending.
//!
//! Every wait is bounded and synchronised on what can be observed: the lock's directory on the
//! server, `Lock::is_cached`, a grant.

mod support;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use support::{client, contenders, eventually, raw, requests_received, server, AppError};
use zklock::{distributed_lock, FencingToken, LockClient, LockError, RevokeOutcome};

/// Longer than any test: a node kept idle goes only because something asked for it.
const LONG: Duration = Duration::from_secs(3600);
/// The bound on anything that should happen promptly on a loaded machine.
const SOON: Duration = Duration::from_secs(20);

async fn cached_client(connect: &str, linger: Duration) -> LockClient {
    LockClient::builder(connect)
        .session_timeout(Duration::from_secs(4))
        .default_cache(linger)
        .connect()
        .await
        .expect("connect a caching lock client")
}

fn name_of(path: &str) -> String {
    path.rsplit('/').next().unwrap().to_owned()
}

/// After the first grant, a lock taken again and again by this process costs ZooKeeper nothing
/// (pings aside), every grant is on the same node, and every token is larger than the last.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cached_re_acquisitions_send_no_request_and_tokens_keep_increasing() {
    let zk = server();
    let c = cached_client(&zk.connect_string(), LONG).await;
    let lock = c.mutex("cache-hot").unwrap();
    assert_eq!(lock.cache(), Some(LONG));
    let first = lock.acquire().await.unwrap();
    let (node, mut last) = (first.node_path().to_owned(), first.fencing_token());
    first.release().await.unwrap();
    assert!(lock.is_cached(), "the node was not kept after the release");
    // The first re-acquisition waits for the directory's watch to be set.
    let guard = lock.acquire_timeout(SOON).await.unwrap();
    assert_eq!(guard.node_path(), node);
    assert!(guard.fencing_token() > last);
    last = guard.fencing_token();
    drop(guard);

    let session = c.session_id().unwrap();
    let before = requests_received(&zk, session);
    let from_cache = c.metrics().granted_from_cache;
    assert!(from_cache >= 1, "the cached grant was not counted: {:?}", c.metrics());
    let rounds: u64 = 200;
    for _ in 0..rounds {
        let guard = lock.acquire_timeout(SOON).await.unwrap();
        assert_eq!(guard.node_path(), node, "a cached grant took another node");
        assert!(guard.fencing_token() > last, "{} after {last}", guard.fencing_token());
        last = guard.fencing_token();
        guard.release().await.unwrap();
    }
    let sent = requests_received(&zk, session) - before;
    // Pings only (one every third of the 4 s session, however long the loop took).
    assert!(sent <= 5, "{sent} requests for {rounds} cached grants and releases");
    // Each counted as a grant from the cache, and as a handoff.
    let m = c.metrics();
    assert_eq!(m.granted_from_cache - from_cache, rounds, "{m:?}");
    assert!(m.handed_off >= m.granted_from_cache, "{m:?}");
}

/// Another client wants a lock cached here: it is granted (the idle node is given up at once,
/// not after the hour of linger), and this process then queues behind it and gets a new node.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_client_behind_a_cached_node_is_granted_and_the_node_goes() {
    let zk = server();
    let (a, b) = (
        cached_client(&zk.connect_string(), LONG).await,
        client(&zk.connect_string()).await,
    );
    let zk_raw = raw(&zk.connect_string()).await;
    let cached = a.mutex("cache-shared").unwrap();
    let guard = cached.acquire().await.unwrap();
    let (node, token) = (name_of(guard.node_path()), guard.fencing_token());
    drop(guard);
    assert!(cached.is_cached());
    assert_eq!(
        contenders(&zk_raw, "/zklock/cache-shared").await,
        std::slice::from_ref(&node)
    );

    let other = b.mutex("cache-shared").unwrap();
    let held = other.acquire_timeout(SOON).await.expect("the other client is granted");
    assert!(held.fencing_token() > token);
    assert!(!contenders(&zk_raw, "/zklock/cache-shared").await.contains(&node));
    assert!(
        eventually(SOON, || async { !cached.is_cached() }).await,
        "still cached after giving the node up"
    );

    // This process now waits behind the other client, in ZooKeeper, on a node of its own.
    let waiting = tokio::spawn({
        let cached = cached.clone();
        async move { cached.acquire_timeout(SOON).await }
    });
    assert!(
        eventually(SOON, || async {
            contenders(&zk_raw, "/zklock/cache-shared").await.len() == 2
        })
        .await,
        "the cached client never queued behind the other"
    );
    let other_token = held.fencing_token();
    held.release().await.unwrap();
    let again = tokio::time::timeout(SOON, waiting).await.unwrap().unwrap().unwrap();
    assert_ne!(name_of(again.node_path()), node);
    assert!(again.fencing_token() > other_token);
}

/// An operator deletes the idle node: it is given up, and the next acquisition here gets a
/// new node through ZooKeeper, not a grant of the deleted one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cached_node_deleted_by_an_operator_is_given_up() {
    let zk = server();
    let a = cached_client(&zk.connect_string(), LONG).await;
    let zk_raw = raw(&zk.connect_string()).await;
    let lock = a.mutex("cache-deleted").unwrap();
    let guard = lock.acquire().await.unwrap();
    let (path, token) = (guard.node_path().to_owned(), guard.fencing_token());
    drop(guard);
    assert!(lock.is_cached());
    zk_raw.delete(&path, None).await.expect("delete the idle node");
    assert!(
        eventually(SOON, || async { !lock.is_cached() }).await,
        "the deleted node is still kept"
    );
    let again = lock.acquire_timeout(SOON).await.unwrap();
    assert_ne!(again.node_path(), path);
    assert!(again.fencing_token().zxid() > token.zxid());
    assert!(!again.is_lost());
}

/// Someone asks for the lock by revocation while it is idle here: the node is given up (the
/// directory empties) without anyone contending.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_revocation_of_a_cached_node_gives_it_up() {
    let zk = server();
    let (a, b) = (
        cached_client(&zk.connect_string(), LONG).await,
        client(&zk.connect_string()).await,
    );
    let zk_raw = raw(&zk.connect_string()).await;
    let lock = a.mutex("cache-revoked").unwrap();
    let guard = lock.acquire().await.unwrap();
    let node = name_of(guard.node_path());
    drop(guard);
    assert!(lock.is_cached());
    let outcome = b.revoke("cache-revoked").await.unwrap();
    assert!(
        matches!(&outcome, RevokeOutcome::Requested { nodes } if nodes.len() == 1),
        "{outcome:?}"
    );
    assert!(
        eventually(SOON, || async {
            contenders(&zk_raw, "/zklock/cache-revoked").await.is_empty()
        })
        .await,
        "the revoked idle node {node} is still there"
    );
    assert!(!lock.is_cached());
}

/// A node idle for a second says so in its data, for operators (`zklock show` reads it), and no
/// longer once a task of its process holds it again. A write over the mark makes the node
/// untrustworthy: it is given up, not held again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_node_is_marked_cached_until_held_again() {
    let zk = server();
    let a = cached_client(&zk.connect_string(), LONG).await;
    let zk_raw = raw(&zk.connect_string()).await;
    let lock = a.mutex("cache-marked").unwrap();
    let cached_since = || async {
        let view = a.inspect("cache-marked").await.unwrap().expect("the lock's directory");
        assert_eq!(view.holders.len(), 1, "{view:?}");
        view.holders[0].data.cached_since_ms
    };
    let guard = lock.acquire().await.unwrap();
    let node = guard.node_path().to_owned();
    assert_eq!(cached_since().await, None, "marked idle while held");
    let released_at = unix_ms();
    guard.release().await.unwrap();
    assert!(
        eventually(SOON, || async { cached_since().await.is_some() }).await,
        "the idle node was never marked"
    );
    let since = cached_since().await.unwrap();
    assert!(
        (released_at..=unix_ms()).contains(&since),
        "idle since {since}, released at {released_at}"
    );

    // Held again: the same node, from the cache, and unmarked before the grant returned.
    let from_cache = a.metrics().granted_from_cache;
    let again = lock.acquire_timeout(SOON).await.unwrap();
    assert_eq!(again.node_path(), node);
    assert_eq!(a.metrics().granted_from_cache, from_cache + 1, "{:?}", a.metrics());
    assert_eq!(cached_since().await, None, "still marked idle while held");
    again.release().await.unwrap();

    // Someone writes over the mark: the next acquisition does not trust the node.
    assert!(eventually(SOON, || async { cached_since().await.is_some() }).await);
    zk_raw.set_data(&node, b"written by someone else", None).await.unwrap();
    let third = lock.acquire_timeout(SOON).await.unwrap();
    assert_ne!(third.node_path(), node, "a node written over while idle was held again");
    assert_eq!(
        contenders(&zk_raw, "/zklock/cache-marked").await,
        [name_of(third.node_path())],
        "the written-over node was not deleted"
    );
}

fn unix_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64
}

/// The linger running out gives the node up.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_linger_running_out_deletes_the_node() {
    let zk = server();
    let a = client(&zk.connect_string()).await;
    let zk_raw = raw(&zk.connect_string()).await;
    let lock = a
        .mutex("cache-short")
        .unwrap()
        .with_cache(Duration::from_millis(300))
        .unwrap();
    // The node's keeper follows it across grants from the cache; the last release counts.
    for _ in 0..5 {
        lock.acquire().await.unwrap().release().await.unwrap();
    }
    assert!(lock.is_cached());
    assert!(
        eventually(SOON, || async {
            contenders(&zk_raw, "/zklock/cache-short").await.is_empty()
        })
        .await,
        "the node outlived its linger"
    );
    assert!(!lock.is_cached());
}

/// `flush` gives idle nodes up and returns once they are deleted; so does `close`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn flush_and_close_give_cached_nodes_up() {
    let zk = server();
    let a = cached_client(&zk.connect_string(), LONG).await;
    let zk_raw = raw(&zk.connect_string()).await;
    let lock = a.mutex("cache-flushed").unwrap();
    lock.acquire().await.unwrap().release().await.unwrap();
    assert!(lock.is_cached());
    tokio::time::timeout(SOON, a.flush()).await.expect("flush returns");
    assert!(contenders(&zk_raw, "/zklock/cache-flushed").await.is_empty());
    assert!(!lock.is_cached());

    lock.acquire().await.unwrap().release().await.unwrap();
    assert!(lock.is_cached());
    tokio::time::timeout(SOON, a.close()).await.expect("close returns");
    assert!(contenders(&zk_raw, "/zklock/cache-flushed").await.is_empty());
    assert!(!lock.is_cached());
}

/// Two caching clients, four tasks each, on one lock: no two holds overlap and every grant's
/// token is larger than the one before, through cached grants, handoffs, lingers given up to
/// the other client and fresh nodes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cached_clients_contending_never_overlap_and_tokens_increase() {
    let zk = server();
    let clients = [
        cached_client(&zk.connect_string(), LONG).await,
        cached_client(&zk.connect_string(), LONG).await,
    ];
    let inside = Arc::new(AtomicBool::new(false));
    let last: Arc<Mutex<Option<FencingToken>>> = Arc::default();
    let mut tasks = Vec::new();
    for c in &clients {
        for _ in 0..4 {
            let (lock, inside, last) = (c.mutex("cache-contended").unwrap(), inside.clone(), last.clone());
            tasks.push(tokio::spawn(async move {
                for round in 0..40u64 {
                    let guard = lock.acquire_timeout(SOON).await?;
                    assert!(!inside.swap(true, Ordering::SeqCst), "two holders at once");
                    {
                        let mut last = last.lock().unwrap();
                        let token = guard.fencing_token();
                        assert!(last.is_none_or(|l| token > l), "{token} after {last:?}");
                        *last = Some(token);
                    }
                    if round % 3 == 0 {
                        tokio::task::yield_now().await;
                    }
                    inside.store(false, Ordering::SeqCst);
                    guard.release().await?;
                    if round % 5 == 0 {
                        tokio::time::sleep(Duration::from_millis(2)).await;
                    }
                }
                Ok::<_, LockError>(())
            }));
        }
    }
    for task in tasks {
        tokio::time::timeout(Duration::from_secs(120), task)
            .await
            .expect("a contender finished in time")
            .expect("no panic")
            .expect("no lock error");
    }
}

/// What cannot be cached is refused with a clear error, and the client-wide default applies to
/// mutexes and write locks only.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn caching_is_refused_where_it_cannot_work() {
    let zk = server();
    let c = cached_client(&zk.connect_string(), Duration::from_secs(5)).await;
    assert_eq!(c.read_lock("cache-rw").unwrap().cache(), None);
    assert_eq!(c.write_lock("cache-rw").unwrap().cache(), Some(Duration::from_secs(5)));
    assert_eq!(c.semaphore("cache-sem", 2).unwrap().cache(), None);
    for refused in [
        c.read_lock("cache-rw").unwrap().with_cache(Duration::from_secs(1)),
        c.semaphore("cache-sem", 2).unwrap().with_cache(Duration::from_secs(1)),
        c.mutex("cache-long").unwrap().with_cache(Duration::from_secs(7200)),
    ] {
        let err = refused.unwrap_err();
        assert!(matches!(err, LockError::InvalidConfig { .. }), "{err:?}");
    }
    // Zero turns it off, for a lock whose client caches.
    assert_eq!(
        c.mutex("cache-off")
            .unwrap()
            .with_cache(Duration::ZERO)
            .unwrap()
            .cache(),
        None
    );
    let too_long = LockClient::builder(zk.connect_string())
        .default_cache(Duration::from_secs(7200))
        .build()
        .unwrap_err();
    assert!(too_long.to_string().contains("over the limit"), "{too_long}");
}

struct Stock {
    locks: LockClient,
}

impl Stock {
    #[distributed_lock("cache-attr:{sku}", cache = "1h", timeout = "10s", client = self.locks)]
    async fn sell(&self, sku: u32) -> Result<FencingToken, AppError> {
        let _ = sku;
        zklock::current_fencing_token().ok_or_else(|| AppError::Other("no token in the body".into()))
    }

    #[distributed_lock("cache-attr-off:{sku}", cache = "0s", timeout = "10s", client = self.locks)]
    async fn count(&self, sku: u32) -> Result<(), AppError> {
        let _ = sku;
        Ok(())
    }
}

/// The attribute's `cache` keeps the node after the body, and the next call is a cached grant
/// on the same node with a larger token; `cache = "0s"` turns a client's default off.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_attributes_cache_keeps_the_node_between_calls() {
    let zk = server();
    let stock = Stock {
        locks: cached_client(&zk.connect_string(), LONG).await,
    };
    let zk_raw = raw(&zk.connect_string()).await;
    let first = stock.sell(7).await.unwrap();
    assert!(stock.locks.mutex("cache-attr:7").unwrap().is_cached());
    let kept = contenders(&zk_raw, "/zklock/cache-attr:7").await;
    assert_eq!(kept.len(), 1, "{kept:?}");
    let second = stock.sell(7).await.unwrap();
    assert_eq!(second.zxid(), first.zxid(), "the second call took a new node");
    assert!(second > first);
    assert_eq!(contenders(&zk_raw, "/zklock/cache-attr:7").await, kept);

    stock.count(7).await.unwrap();
    assert!(!stock.locks.mutex("cache-attr-off:7").unwrap().is_cached());
    assert!(
        eventually(SOON, || async {
            contenders(&zk_raw, "/zklock/cache-attr-off:7").await.is_empty()
        })
        .await,
        "the node of a lock with `cache = \"0s\"` was kept"
    );
}

/// A single try from another client ends the linger of a cached lock. Whether the try itself
/// gets the lock is a race between its one look at the queue and the keeper giving the node
/// up (docs/guide.md, "Lock caching"), but it never gets it while the node is still there: a
/// try that wins is the only contender in the directory, and the caching client cannot take
/// the lock from its cache meanwhile. A try that lost leaves the lock free for the next one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_try_from_elsewhere_ends_the_linger_of_a_cached_lock() {
    let zk = server();
    let (a, b) = (
        cached_client(&zk.connect_string(), LONG).await,
        client(&zk.connect_string()).await,
    );
    let zk_raw = raw(&zk.connect_string()).await;
    let cached = a.mutex("cache-tried").unwrap();
    cached.acquire().await.unwrap().release().await.unwrap();
    assert!(cached.is_cached());
    let kept = contenders(&zk_raw, "/zklock/cache-tried").await;
    assert_eq!(kept.len(), 1, "the kept node: {kept:?}");
    let other = b.mutex("cache-tried").unwrap();
    let guard = match other.try_acquire().await.unwrap() {
        Some(guard) => guard,
        None => {
            assert!(
                eventually(SOON, || async { !cached.is_cached() }).await,
                "the try's contender did not end the linger"
            );
            let deadline = tokio::time::Instant::now() + SOON;
            loop {
                if let Some(guard) = other.try_acquire().await.unwrap() {
                    break guard;
                }
                assert!(tokio::time::Instant::now() < deadline, "no later try got the lock");
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
    };
    assert!(!cached.is_cached(), "a try was granted while the node was cached");
    let queue = contenders(&zk_raw, "/zklock/cache-tried").await;
    assert!(
        !queue.contains(&kept[0]) && queue.len() == 1,
        "the try holds beside the kept node: {queue:?}"
    );
    assert!(
        cached.try_acquire().await.unwrap().is_none(),
        "the caching client got the lock while the try held it"
    );
    guard.release().await.unwrap();
}

/// Acquisitions of a lock two caching clients share, cut at random points (a timeout, a lost
/// `select!`, an aborted task: before the request, waiting behind a kept node, while it is
/// handed over, or not at all): nothing is stranded. Once both clients flush, the directory
/// is empty, and the lock is granted again to each.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancelled_acquisitions_of_a_cached_lock_strand_nothing() {
    let zk = server();
    let (a, b) = (
        cached_client(&zk.connect_string(), LONG).await,
        cached_client(&zk.connect_string(), LONG).await,
    );
    let acquirers = [&a, &b, &a, &b]
        .map(|c| {
            let lock = c.mutex("cache-cancelled").unwrap();
            move || {
                let lock = lock.clone();
                async move { lock.acquire().await }
            }
        })
        .to_vec();
    let granted = support::cancellation_storm(acquirers, 200, Duration::from_micros(20_000)).await;
    assert!(granted > 0, "no acquisition was granted; the test did not test");
    tokio::time::timeout(SOON, a.flush()).await.expect("a's flush returns");
    tokio::time::timeout(SOON, b.flush()).await.expect("b's flush returns");
    let zk_raw = raw(&zk.connect_string()).await;
    let left = contenders(&zk_raw, "/zklock/cache-cancelled").await;
    assert!(
        left.is_empty(),
        "nodes left after the storm ({granted} granted): {left:?}"
    );
    for c in [&a, &b] {
        let guard = c.mutex("cache-cancelled").unwrap().acquire_timeout(SOON).await;
        assert!(guard.is_ok(), "{guard:?}");
    }
}
