//! The exclusive lock against a real ZooKeeper: exclusion, FIFO order, timeouts, reentrancy,
//! fencing tokens, node layout and cleanup.

mod support;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use support::{client, contenders, eventually, queue_in_process, raw, server};
use zklock_runtime::{zk, LockError};

/// The longest a test waits for a grant or a task: generous for a loaded 2-core machine; a
/// wait that passes it fails the test, saying what it waited for.
const WAIT: Duration = Duration::from_secs(30);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mutual_exclusion_across_clients_and_tasks() {
    let zk = server();
    let clients = [
        client(&zk.connect_string()).await,
        client(&zk.connect_string()).await,
        client(&zk.connect_string()).await,
    ];
    let inside = Arc::new(AtomicUsize::new(0));
    let overlaps = Arc::new(AtomicUsize::new(0));
    let entries = Arc::new(AtomicUsize::new(0));
    // Every holder's token, pushed while it holds: in the order the lock was granted.
    let tokens = Arc::new(Mutex::new(Vec::new()));
    let mut tasks = Vec::new();
    for (i, c) in clients.iter().enumerate() {
        for _ in 0..4 {
            let lock = c.mutex("exclusion").unwrap();
            let (inside, overlaps, entries) = (inside.clone(), overlaps.clone(), entries.clone());
            let tokens = tokens.clone();
            tasks.push(tokio::spawn(async move {
                for _ in 0..5 {
                    let guard = lock.acquire_timeout(WAIT).await.unwrap();
                    if inside.fetch_add(1, Ordering::SeqCst) != 0 {
                        overlaps.fetch_add(1, Ordering::SeqCst);
                    }
                    tokens.lock().unwrap().push(guard.fencing_token());
                    entries.fetch_add(1, Ordering::SeqCst);
                    tokio::time::sleep(Duration::from_millis(1 + i as u64)).await;
                    inside.fetch_sub(1, Ordering::SeqCst);
                    guard.release().await.unwrap();
                }
            }));
        }
    }
    for t in tasks {
        tokio::time::timeout(Duration::from_secs(120), t)
            .await
            .expect("the contenders finished their 60 sections within 120 s")
            .unwrap();
    }
    assert_eq!(entries.load(Ordering::SeqCst), 60);
    assert_eq!(overlaps.load(Ordering::SeqCst), 0, "two holders were inside at once");
    // Guarantee 4 across three clients and local handoffs: each holder's token is above the
    // one before it.
    let tokens = tokens.lock().unwrap();
    let inversions: Vec<_> = tokens.windows(2).filter(|w| w[0] >= w[1]).collect();
    assert!(
        inversions.is_empty(),
        "tokens did not increase from holder to holder {} times, first {:?}",
        inversions.len(),
        &inversions[..inversions.len().min(3)]
    );
}

#[tokio::test]
async fn waiters_are_granted_in_fifo_order() {
    let zk = server();
    let holder = client(&zk.connect_string()).await;
    let first = holder.mutex("fifo").unwrap().acquire().await.unwrap();
    let order = Arc::new(Mutex::new(Vec::new()));
    let mut tasks = Vec::new();
    let raw = raw(&zk.connect_string()).await;
    for i in 0..5 {
        let c = client(&zk.connect_string()).await;
        let order = order.clone();
        tasks.push(tokio::spawn(async move {
            let guard = c
                .mutex("fifo")
                .unwrap()
                .acquire_timeout(WAIT)
                .await
                .unwrap_or_else(|e| panic!("waiter {i} was never granted: {e}"));
            order.lock().unwrap().push(i);
            tokio::time::sleep(Duration::from_millis(10)).await;
            guard.release().await.unwrap();
        }));
        // Let this waiter's node be created before the next one's.
        assert!(
            eventually(Duration::from_secs(10), || async {
                contenders(&raw, "/zklock/fifo").await.len() == i + 2
            })
            .await
        );
    }
    first.release().await.unwrap();
    for (i, t) in tasks.into_iter().enumerate() {
        tokio::time::timeout(WAIT, t)
            .await
            .unwrap_or_else(|_| panic!("waiter {i} still running after {WAIT:?}; granted so far: {order:?}"))
            .unwrap();
    }
    assert_eq!(*order.lock().unwrap(), vec![0, 1, 2, 3, 4]);
}

#[tokio::test]
async fn node_layout_matches_curator() {
    let zk = server();
    let c = client(&zk.connect_string()).await;
    let guard = c.mutex("layout").unwrap().acquire().await.unwrap();
    let node = guard
        .node_path()
        .strip_prefix("/zklock/layout/")
        .expect("node lives in <namespace>/<name>");
    // _c_<uuid>-lock-<10 digit sequence>
    let rest = node.strip_prefix("_c_").expect("protected prefix");
    let (uuid, seq) = rest.split_once("-lock-").expect("curator lock name");
    assert_eq!(uuid.len(), 36, "uuid in {node}");
    let groups: Vec<usize> = uuid.split('-').map(str::len).collect();
    assert_eq!(groups, [8, 4, 4, 4, 12], "uuid in {node}");
    assert!(
        uuid.bytes().all(|b| b == b'-' || b.is_ascii_hexdigit()),
        "uuid in {node}"
    );
    assert_eq!(seq.len(), 10);
    assert!(seq.bytes().all(|b| b.is_ascii_digit()));
    let raw = raw(&zk.connect_string()).await;
    let (_, stat) = raw.get_data(guard.node_path()).await.unwrap();
    assert_eq!(
        stat.ephemeral_owner,
        c.session_id().unwrap(),
        "contender is ephemeral, owned by our session"
    );
    let (_, dir_stat) = raw.get_data("/zklock/layout").await.unwrap();
    assert_eq!(dir_stat.ephemeral_owner, 0);
    guard.release().await.unwrap();
}

#[tokio::test]
async fn try_acquire_and_timeouts() {
    let zk = server();
    let (a, b) = (client(&zk.connect_string()).await, client(&zk.connect_string()).await);
    let held = a.mutex("busy").unwrap().acquire().await.unwrap();
    let lock = b.mutex("busy").unwrap();
    assert!(lock.try_acquire().await.unwrap().is_none());
    match lock.acquire_timeout(Duration::ZERO).await {
        Err(LockError::Timeout { name, .. }) => assert_eq!(name, "busy"),
        other => panic!("expected a timeout, got {other:?}"),
    }
    let started = std::time::Instant::now();
    match lock.acquire_timeout(Duration::from_millis(400)).await {
        Err(LockError::Timeout { waited, .. }) => assert!(waited >= Duration::from_millis(400)),
        other => panic!("expected a timeout, got {other:?}"),
    }
    assert!(started.elapsed() >= Duration::from_millis(400));
    assert_eq!(b.metrics().timed_out, 3);
    // The failed attempts left nothing behind: only the holder's node remains.
    b.flush().await;
    let raw = raw(&zk.connect_string()).await;
    assert_eq!(
        contenders(&raw, "/zklock/busy").await,
        vec![held.node_path().rsplit('/').next().unwrap().to_string()]
    );
    held.release().await.unwrap();
    let guard = lock.try_acquire().await.unwrap().expect("free now");
    guard.release().await.unwrap();
}

#[tokio::test]
async fn reentrant_acquire_needs_no_round_trip() {
    let zk = server();
    let c = client(&zk.connect_string()).await;
    let lock = c.mutex("reentrant").unwrap();
    let outer = lock.acquire().await.unwrap();
    // Freeze the server: anything that needs a round trip now hangs.
    zk.pause().unwrap();
    let inner = outer
        .scope(tokio::time::timeout(Duration::from_millis(500), lock.acquire()))
        .await;
    zk.resume().unwrap();
    let inner = inner.expect("reentrant acquire waited on the server").unwrap();
    assert_eq!(inner.fencing_token(), outer.fencing_token());
    assert_eq!(inner.node_path(), outer.node_path());
    assert_eq!(outer.hold_count(), 2);
    assert_eq!(c.metrics().reentered, 1);
    // Releasing the inner guard keeps the node; the last release deletes it.
    let raw = raw(&zk.connect_string()).await;
    inner.release().await.unwrap();
    assert!(raw.check_stat(outer.node_path()).await.unwrap().is_some());
    let path = outer.node_path().to_owned();
    outer.release().await.unwrap();
    assert!(raw.check_stat(&path).await.unwrap().is_none());
}

#[tokio::test]
async fn recursion_reenters() {
    fn depth(lock: zklock_runtime::Lock, n: u32) -> std::pin::Pin<Box<dyn std::future::Future<Output = usize> + Send>> {
        Box::pin(async move {
            let guard = lock.acquire().await.unwrap();
            if n == 0 {
                guard.hold_count()
            } else {
                guard.scope(depth(lock.clone(), n - 1)).await
            }
        })
    }
    let zk = server();
    let c = client(&zk.connect_string()).await;
    assert_eq!(depth(c.mutex("recursive").unwrap(), 4).await, 5);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_task_of_the_same_process_waits() {
    let zk = server();
    let c = client(&zk.connect_string()).await;
    let lock = c.mutex("tasks").unwrap();
    let guard = lock.acquire().await.unwrap();
    let other = lock.clone();
    let blocked = tokio::spawn(async move { other.acquire_timeout(Duration::from_millis(300)).await.map(|_| ()) });
    assert!(matches!(blocked.await.unwrap(), Err(LockError::Timeout { .. })));
    // The waiter is in the process's queue for the lock before the guard goes.
    let waiter = queue_in_process(&lock);
    let first = guard.fencing_token();
    let handed_off = c.metrics().handed_off;
    drop(guard);
    let second = tokio::time::timeout(Duration::from_secs(10), waiter)
        .await
        .unwrap()
        .unwrap()
        .unwrap()
        .fencing_token();
    assert!(second > first);
    assert_eq!(
        c.metrics().handed_off,
        handed_off + 1,
        "the queued task was handed the node"
    );
}

#[tokio::test]
async fn fencing_tokens_increase_across_holders_and_dir_recreation() {
    let zk = server();
    let (a, b) = (client(&zk.connect_string()).await, client(&zk.connect_string()).await);
    let raw = raw(&zk.connect_string()).await;
    let mut last = None;
    for round in 0..3 {
        for c in [&a, &b] {
            let guard = c.mutex("fenced").unwrap().acquire().await.unwrap();
            let token = guard.fencing_token();
            if let Some(prev) = last {
                assert!(token > prev, "token {token} after {prev}");
                assert!(token.to_string() > prev.to_string(), "text form sorts like the token");
            }
            last = Some(token);
            guard.release().await.unwrap();
        }
        // Let the empty container be reaped, so the next round recreates it and its
        // sequence numbers restart at 0.
        let reaped = eventually(Duration::from_secs(10), || async {
            matches!(raw.check_stat("/zklock/fenced").await, Ok(None))
        })
        .await;
        assert!(reaped, "round {round}: empty lock dir was not reaped");
    }
    let guard = a.mutex("fenced").unwrap().acquire().await.unwrap();
    assert!(
        guard.node_path().ends_with("-lock-0000000000"),
        "dir was recreated: {}",
        guard.node_path()
    );
    assert!(guard.fencing_token() > last.unwrap());
}

#[tokio::test]
async fn dropped_guard_releases_promptly() {
    let zk = server();
    let (a, b) = (client(&zk.connect_string()).await, client(&zk.connect_string()).await);
    let guard = a.mutex("dropped").unwrap().acquire().await.unwrap();
    let path = guard.node_path().to_owned();
    let waiter = tokio::spawn({
        let lock = b.mutex("dropped").unwrap();
        async move { lock.acquire().await.unwrap().node_path().to_owned() }
    });
    let view = raw(&zk.connect_string()).await;
    assert!(
        eventually(Duration::from_secs(10), || async {
            contenders(&view, "/zklock/dropped").await.len() == 2
        })
        .await,
        "the waiter never queued"
    );
    // Dropped from a plain thread with no runtime: release must not need one here.
    std::thread::spawn(move || drop(guard)).join().unwrap();
    let next = tokio::time::timeout(Duration::from_secs(10), waiter)
        .await
        .expect("waiter granted")
        .unwrap();
    assert_ne!(next, path);
    a.flush().await;
    let raw = raw(&zk.connect_string()).await;
    assert!(raw.check_stat(&path).await.unwrap().is_none());
}

#[tokio::test]
async fn each_waiter_watches_only_its_predecessor() {
    let zk = server();
    let holder = client(&zk.connect_string()).await;
    let guard = holder.mutex("herd").unwrap().acquire().await.unwrap();
    // One client per waiter: waiters of one client queue in-process behind a single node.
    let mut tasks = Vec::new();
    let mut clients = Vec::new();
    for _ in 0..20 {
        let waiter = client(&zk.connect_string()).await;
        let lock = waiter.mutex("herd").unwrap();
        clients.push(waiter);
        tasks.push(tokio::spawn(async move {
            let g = lock
                .acquire_timeout(WAIT)
                .await
                .unwrap_or_else(|e| panic!("a herd waiter was never granted: {e}"));
            tokio::time::sleep(Duration::from_millis(5)).await;
            g.release().await.unwrap();
        }));
    }
    let raw = raw(&zk.connect_string()).await;
    assert!(
        eventually(Duration::from_secs(10), || async {
            contenders(&raw, "/zklock/herd").await.len() == 21
        })
        .await
    );
    // Each waiter holds exactly one watch, on a distinct contender node: 20 watches on 20
    // paths. The only other watches allowed are the holder's data watch on the directory itself
    // (the listing-free fast path, see docs/safety.md), which children coming and going never
    // trigger, and the holder's watch on its own node (deleted by someone else, revoked), which
    // only that node's first waiter shares.
    let holder_session = format!("{:#x}", holder.session_id().unwrap());
    let watches = || {
        let wchp = zk.four_letter_word("wchp").unwrap();
        let mut by_path: Vec<(String, Vec<String>)> = Vec::new();
        for line in wchp.lines().filter(|l| !l.trim().is_empty()) {
            match line.strip_prefix('\t') {
                Some(session) => {
                    if let Some(last) = by_path.last_mut() {
                        last.1.push(session.trim().to_owned());
                    }
                }
                None => by_path.push((line.trim().to_owned(), Vec::new())),
            }
        }
        by_path
    };
    let settled = eventually(Duration::from_secs(5), || async {
        watches()
            .iter()
            .filter(|(path, _)| path.starts_with("/zklock/herd/"))
            .count()
            == 20
    })
    .await;
    let by_path = watches();
    assert!(settled, "wchp: {by_path:?}");
    for (path, sessions) in &by_path {
        if *path == guard.node_path() {
            let mut sessions = sessions.clone();
            sessions.retain(|s| *s != holder_session);
            assert_eq!(
                sessions.len(),
                1,
                "the held node is watched by {sessions:?} besides its holder"
            );
        } else if path.starts_with("/zklock/herd/") {
            assert_eq!(sessions.len(), 1, "{path} is watched by {sessions:?}");
        } else {
            assert_eq!(path, "/zklock/herd", "an unexpected watch: {by_path:?}");
            assert_eq!(
                sessions,
                &vec![holder_session.clone()],
                "only the holder watches the dir's data"
            );
        }
    }
    guard.release().await.unwrap();
    for (n, t) in tasks.into_iter().enumerate() {
        tokio::time::timeout(WAIT, t)
            .await
            .unwrap_or_else(|_| panic!("herd waiter {n} still running after {WAIT:?}"))
            .unwrap();
    }
}

#[tokio::test]
async fn empty_lock_dirs_are_reaped() {
    let zk = server();
    let c = client(&zk.connect_string()).await;
    for i in 0..20 {
        let g = c.mutex(&format!("per-key:{i}")).unwrap().acquire().await.unwrap();
        g.release().await.unwrap();
    }
    let raw = raw(&zk.connect_string()).await;
    let reaped = eventually(Duration::from_secs(15), || async {
        raw.list_children("/zklock").await.map(|c| c.is_empty()).unwrap_or(true)
    })
    .await;
    assert!(
        reaped,
        "per-key lock dirs leaked: {:?}",
        raw.list_children("/zklock").await
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn local_waiters_share_one_node_and_remote_waiters_are_not_starved() {
    let zk = server();
    let (local, remote) = (client(&zk.connect_string()).await, client(&zk.connect_string()).await);
    // Every grant, local (`false`) and remote (`true`), in the order granted: each is recorded
    // while its holder still holds the lock.
    let grants = Arc::new(Mutex::new(Vec::new()));
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let mut tasks = Vec::new();
    for _ in 0..4 {
        let lock = local.mutex("handoff").unwrap();
        let (grants, stop) = (grants.clone(), stop.clone());
        tasks.push(tokio::spawn(async move {
            while !stop.load(Ordering::SeqCst) {
                let g = lock
                    .acquire_timeout(WAIT)
                    .await
                    .unwrap_or_else(|e| panic!("a local task was never granted: {e}"));
                grants.lock().unwrap().push((false, g.fencing_token()));
                tokio::time::sleep(Duration::from_millis(2)).await;
                drop(g);
            }
        }));
    }
    let busy = eventually(Duration::from_secs(20), || {
        let enough = grants.lock().unwrap().len() >= 20;
        async move { enough }
    })
    .await;
    assert!(busy, "the local tasks did not get going");
    let raw = raw(&zk.connect_string()).await;
    assert!(
        contenders(&raw, "/zklock/handoff").await.len() <= 1,
        "local waiters each created a node"
    );
    let g = remote
        .mutex("handoff")
        .unwrap()
        .acquire_timeout(Duration::from_secs(20))
        .await
        .unwrap();
    let remote_token = g.fencing_token();
    grants.lock().unwrap().push((true, remote_token));
    stop.store(true, Ordering::SeqCst);
    drop(g);
    for t in tasks {
        tokio::time::timeout(WAIT, t)
            .await
            .unwrap_or_else(|_| panic!("a local task did not stop within {WAIT:?}"))
            .unwrap();
    }
    let grants = grants.lock().unwrap();
    let tokens: Vec<_> = grants.iter().filter(|(remote, _)| !remote).map(|(_, t)| *t).collect();
    assert!(
        tokens.windows(2).all(|w| w[0] < w[1]),
        "tokens did not strictly increase across local handoffs"
    );
    assert!(
        tokens.iter().any(|t| t.generation() > 0),
        "no grant was handed off locally"
    );
    // No local node created after the remote one was granted before it, and no node was
    // handed on more often than the default bound (16).
    let remote_at = grants.iter().position(|(remote, _)| *remote).unwrap();
    let overtaking: Vec<_> = grants[..remote_at]
        .iter()
        .filter(|(_, t)| t.zxid() > remote_token.zxid())
        .collect();
    assert!(
        overtaking.is_empty(),
        "local grants overtook the remote waiter ({remote_token}): {overtaking:?}"
    );
    assert!(
        tokens.iter().all(|t| t.generation() <= 16),
        "a node was handed on more than 16 times"
    );
    eprintln!("{} local grants, the remote one at position {remote_at}", tokens.len());
    assert!(local.metrics().handed_off > 0);
}

#[tokio::test]
async fn ensure_held_asks_the_server() {
    let zk = server();
    let c = client(&zk.connect_string()).await;
    let guard = c.mutex("checked").unwrap().acquire().await.unwrap();
    guard.ensure_held().await.unwrap();
    // An operator removes the node behind the holder's back.
    let raw = raw(&zk.connect_string()).await;
    raw.delete(guard.node_path(), None).await.unwrap();
    // The server answers NotHeld; or the holder's watch on its node told of the deletion first,
    // and the hold is reported lost already.
    match guard.ensure_held().await {
        Err(LockError::NotHeld { name }) => assert_eq!(name, "checked"),
        Err(LockError::Lost { name, reason }) => {
            assert_eq!(name, "checked");
            assert!(reason.contains("deleted by someone else"), "{reason}");
        }
        other => panic!("expected NotHeld or Lost, got {other:?}"),
    }
}

/// A node of the same name put back by another session is not this holder's: `ensure_held`
/// tells by the node's owner, not by its path. (Checked at once after the grant, before the
/// holder's own watch on its node is set; were that watch quicker, it would report the
/// deletion, which is as good an answer.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_put_back_by_another_session_is_not_held() {
    let zk = server();
    let c = client(&zk.connect_string()).await;
    let raw = raw(&zk.connect_string()).await;
    // A persistent lock directory: this server reaps empty containers within 100 ms, which
    // would take the directory away between the delete and the create below.
    let persistent = zk::CreateMode::Persistent.with_acls(zk::Acls::anyone_all());
    raw.create("/zklock", b"", &persistent).await.unwrap();
    raw.create("/zklock/replaced", b"", &persistent).await.unwrap();
    let guard = c.mutex("replaced").unwrap().acquire().await.unwrap();
    raw.delete(guard.node_path(), None).await.unwrap();
    let ephemeral = zk::CreateMode::Ephemeral.with_acls(zk::Acls::anyone_all());
    raw.create(guard.node_path(), b"", &ephemeral).await.unwrap();
    match guard.ensure_held().await {
        Err(LockError::NotHeld { name }) => assert_eq!(name, "replaced"),
        Err(LockError::Lost { reason, .. }) => assert!(reason.contains("deleted by someone else"), "{reason}"),
        other => panic!("a node of another session was taken for ours: {other:?}"),
    }
}

/// The client keeps one in-process queue per lock and sweeps the queues nobody uses as it
/// makes new ones: a sweep must keep the queue of a lock still held, so that a task of the
/// process asking for it afterwards still queues behind the holder inside the process (and is
/// handed the node) rather than contending in ZooKeeper beside it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sweeping_unused_local_queues_keeps_the_ones_in_use() {
    let zk = server();
    let c = client(&zk.connect_string()).await;
    let view = raw(&zk.connect_string()).await;
    let lock = c.mutex("kept-queue").unwrap();
    let guard = lock.acquire().await.unwrap();
    // More locks than the first sweep waits for (64), each taken and freed: their queues are
    // unused, and making the last ones sweeps the table.
    for n in 0..70 {
        c.mutex(&format!("swept-{n}"))
            .unwrap()
            .acquire()
            .await
            .unwrap()
            .release()
            .await
            .unwrap();
    }
    let handed_off = c.metrics().handed_off;
    let waiter = queue_in_process(&lock);
    c.flush().await;
    assert_eq!(
        contenders(&view, "/zklock/kept-queue").await.len(),
        1,
        "the waiter contends in ZooKeeper instead of queueing in the process"
    );
    drop(guard);
    let next = tokio::time::timeout(Duration::from_secs(10), waiter)
        .await
        .expect("the waiter is granted")
        .unwrap()
        .unwrap();
    assert_eq!(c.metrics().handed_off, handed_off + 1, "the waiter was handed the node");
    next.release().await.unwrap();
}
