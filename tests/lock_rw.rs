//! Read/write lock on the shared queue core, and the semaphore (Curator's semaphore layout),
//! against a real ZooKeeper.

mod support;

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use support::{client, contenders, eventually, raw, server, session_of, wait_watching};
use zklock::{zk, LockError};

/// The longest a test waits for one grant.
const SOON: Duration = Duration::from_secs(20);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readers_share_writers_exclude() {
    let zk = server();
    let (a, b, c) = (
        client(&zk.connect_string()).await,
        client(&zk.connect_string()).await,
        client(&zk.connect_string()).await,
    );
    let r1 = a.read_lock("doc").unwrap().acquire().await.unwrap();
    let r2 = tokio::time::timeout(Duration::from_secs(5), b.read_lock("doc").unwrap().acquire())
        .await
        .expect("a second reader is let in while a reader holds")
        .unwrap();
    assert!(r1.node_path().contains("-__READ__"), "{}", r1.node_path());
    let writer = c.write_lock("doc").unwrap();
    assert!(
        writer.try_acquire().await.unwrap().is_none(),
        "writer excluded by readers"
    );
    // The try's node is removed in the background; count nodes only once it is gone.
    c.flush().await;
    let view = raw(&zk.connect_string()).await;
    let queued = |n: usize| {
        let view = &view;
        async move {
            eventually(Duration::from_secs(20), || async {
                contenders(view, "/zklock/doc").await.len() == n
            })
            .await
        }
    };
    // Each waiter checks, once granted, that what had to go first is gone: set before the
    // release that lets it in, so a grant that came early finds it unset.
    let readers_left = Arc::new(AtomicUsize::new(2));
    let writer_gone = Arc::new(AtomicBool::new(false));
    let w = tokio::spawn({
        let readers_left = readers_left.clone();
        async move {
            let guard = writer.acquire_timeout(SOON).await.unwrap();
            let left = readers_left.load(Ordering::SeqCst);
            assert_eq!(left, 0, "the writer went in beside {left} reader(s)");
            guard
        }
    });
    assert!(queued(3).await, "the writer never queued");
    // A reader arriving after the queued writer waits for it.
    let late = a.read_lock("doc").unwrap();
    let late_reader = tokio::spawn({
        let writer_gone = writer_gone.clone();
        async move {
            let guard = late.acquire_timeout(SOON).await.unwrap();
            assert!(
                writer_gone.load(Ordering::SeqCst),
                "the late reader went while the writer held"
            );
            guard
        }
    });
    assert!(queued(4).await, "the late reader never queued");
    assert!(!w.is_finished() && !late_reader.is_finished());
    // The writer waits for both readers. The reader it watches (the one just ahead of it, r2)
    // goes first: a writer that took that deletion for its turn would go in beside r1. Once r2
    // is gone the writer must look again and wait for r1 (its watch on r1, seen on the server)
    // before r1 goes too.
    readers_left.fetch_sub(1, Ordering::SeqCst);
    r2.release().await.unwrap();
    wait_watching(&zk, &session_of(&c), r1.node_path(), "the writer, once r2 was gone").await;
    assert!(!w.is_finished(), "the writer went in beside r1");
    readers_left.fetch_sub(1, Ordering::SeqCst);
    r1.release().await.unwrap();
    let w = tokio::time::timeout(Duration::from_secs(20), w)
        .await
        .expect("writer granted")
        .unwrap();
    assert!(w.node_path().contains("-__WRIT__"), "{}", w.node_path());
    assert!(!late_reader.is_finished(), "reader went while the writer held");
    writer_gone.store(true, Ordering::SeqCst);
    w.release().await.unwrap();
    let late = tokio::time::timeout(Duration::from_secs(20), late_reader)
        .await
        .expect("late reader granted")
        .unwrap();
    late.release().await.unwrap();
}

#[tokio::test]
async fn writer_may_also_read() {
    let zk = server();
    let c = client(&zk.connect_string()).await;
    let w = c.write_lock("upgrade").unwrap().acquire().await.unwrap();
    let read = c.read_lock("upgrade").unwrap();
    let r = tokio::time::timeout(Duration::from_secs(20), w.scope(read.acquire()))
        .await
        .expect("code inside the write hold can read")
        .unwrap();
    assert_eq!(r.node_path(), w.node_path());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn semaphore_admits_n_holders() {
    let zk = server();
    let clients = [client(&zk.connect_string()).await, client(&zk.connect_string()).await];
    let view = raw(&zk.connect_string()).await;
    let sem = |i: usize| clients[i % 2].semaphore("pool", 3).unwrap();
    // Three holders, of both clients, hold the three leases at once: three lease nodes on the
    // server, and a fourth acquirer is refused while they hold.
    let mut held = Vec::new();
    for i in 0..3 {
        let lease = tokio::time::timeout(SOON, sem(i).acquire())
            .await
            .unwrap_or_else(|_| panic!("lease {i} of 3 was not granted beside {} others", held.len()))
            .unwrap();
        held.push(lease);
    }
    let mut nodes: Vec<_> = held.iter().map(|l| l.node_path().to_owned()).collect();
    nodes.sort();
    nodes.dedup();
    assert_eq!(nodes.len(), 3, "three holders share lease nodes: {nodes:?}");
    for node in &nodes {
        assert!(
            view.check_stat(node).await.unwrap().is_some(),
            "{node} is not on the server"
        );
    }
    assert!(
        sem(3).try_acquire().await.unwrap().is_none(),
        "a fourth holder was let in beside three"
    );
    // The lease one of them frees goes to the next.
    held.pop().unwrap().release().await.unwrap();
    let fourth = tokio::time::timeout(SOON, sem(3).acquire())
        .await
        .expect("the freed lease was taken")
        .unwrap();
    fourth.release().await.unwrap();
    for lease in held {
        lease.release().await.unwrap();
    }

    // Then many holders in turn: never more than three at once.
    let inside = Arc::new(AtomicUsize::new(0));
    let peak = Arc::new(AtomicUsize::new(0));
    let mut tasks = Vec::new();
    for i in 0..8 {
        let sem = clients[i % 2].semaphore("pool", 3).unwrap();
        let (inside, peak) = (inside.clone(), peak.clone());
        tasks.push(tokio::spawn(async move {
            for _ in 0..3 {
                let lease = sem.acquire_timeout(Duration::from_secs(30)).await.unwrap();
                let now = inside.fetch_add(1, Ordering::SeqCst) + 1;
                peak.fetch_max(now, Ordering::SeqCst);
                tokio::time::sleep(Duration::from_millis(30)).await;
                inside.fetch_sub(1, Ordering::SeqCst);
                lease.release().await.unwrap();
            }
        }));
    }
    for t in tasks {
        tokio::time::timeout(Duration::from_secs(120), t)
            .await
            .expect("the 24 leases were taken and given back within 120 s")
            .unwrap();
    }
    let peak = peak.load(Ordering::SeqCst);
    assert!(peak <= 3, "{peak} holders at once with 3 leases");
    assert!(peak >= 2, "the semaphore never let two holders in (peak {peak})");
    let raw = raw(&zk.connect_string()).await;
    clients[0].flush().await;
    clients[1].flush().await;
    for dir in ["/zklock/pool/leases", "/zklock/pool/locks"] {
        assert!(
            eventually(Duration::from_secs(20), || async {
                contenders(&raw, dir).await.is_empty()
            })
            .await,
            "{dir} kept nodes: {:?}",
            contenders(&raw, dir).await
        );
    }
}

/// With two leases held by A and B and two acquirers C then D waiting: A releases and C gets a
/// lease; then C releases while B still holds. D must get the lease C freed, although the holder
/// it queued behind in a per-predecessor queue (B) never released.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_freed_lease_is_taken_whichever_holder_released_it() {
    let zk = server();
    let clients = [
        client(&zk.connect_string()).await,
        client(&zk.connect_string()).await,
        client(&zk.connect_string()).await,
        client(&zk.connect_string()).await,
    ];
    let view = raw(&zk.connect_string()).await;
    let sem = |i: usize| clients[i].semaphore("two", 2).unwrap();
    let a = sem(0).acquire().await.unwrap();
    let b = sem(1).acquire().await.unwrap();
    let c = tokio::spawn({
        let sem = sem(2);
        async move { sem.acquire().await.unwrap() }
    });
    // C holds the acquirers' mutex and waits with its lease node in place.
    assert!(
        eventually(Duration::from_secs(20), || async {
            contenders(&view, "/zklock/two/leases").await.len() == 3
        })
        .await
    );
    let d = tokio::spawn({
        let sem = sem(3);
        async move { sem.acquire().await.unwrap() }
    });
    // D queues for the mutex behind C.
    assert!(
        eventually(Duration::from_secs(20), || async {
            contenders(&view, "/zklock/two/locks").await.len() == 2
        })
        .await
    );
    a.release().await.unwrap();
    let c = tokio::time::timeout(Duration::from_secs(20), c)
        .await
        .expect("C got A's lease")
        .unwrap();
    c.release().await.unwrap();
    let d = tokio::time::timeout(Duration::from_secs(20), d)
        .await
        .expect("D waited although a lease was free (B still holds, C released)")
        .unwrap();
    assert!(d.node_path().starts_with("/zklock/two/leases/_c_"), "{}", d.node_path());
    assert!(d.node_path().contains("-lease-"), "{}", d.node_path());
    drop((b, d));
}

#[tokio::test]
async fn semaphore_with_zero_leases_is_rejected() {
    let zk = server();
    let c = client(&zk.connect_string()).await;
    assert!(matches!(
        c.semaphore("none", 0),
        Err(zklock_runtime::LockError::InvalidConfig { .. })
    ));
}

/// The lease count is recorded with the semaphore: while leases are held, a client asking for
/// another count is refused with a clear error, takes nothing and leaves no lease node; once
/// every holder has released, the next acquirer's count becomes the record.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clients_that_disagree_on_the_lease_count_are_told() {
    let zk = server();
    let two = client(&zk.connect_string()).await;
    let three = client(&zk.connect_string()).await;
    let view = raw(&zk.connect_string()).await;
    // The first acquirer of a new semaphore (its directory made with its lease) records too.
    assert!(view.check_stat("/zklock/agree").await.unwrap().is_none());
    let held = two.semaphore("agree", 2).unwrap().acquire().await.unwrap();
    let (record, _) = view.get_data("/zklock/agree").await.unwrap();
    assert_eq!(record, b"leases=2");

    let err = three
        .semaphore("agree", 3)
        .unwrap()
        .acquire_timeout(Duration::from_secs(20))
        .await
        .unwrap_err();
    assert_eq!(
        err,
        LockError::LeaseCountMismatch {
            name: "agree".into(),
            asked: 3,
            recorded: 2
        }
    );
    assert_eq!(err.kind(), zklock::ErrorKind::InvalidInput);
    assert!(err.to_string().contains("held with 2 leases"), "{err}");
    three.flush().await;
    assert_eq!(
        contenders(&view, "/zklock/agree/leases").await,
        [held.node_path().rsplit('/').next().unwrap()],
        "the refused acquirer left a lease node"
    );
    // The same count is welcome beside the holder.
    let second = two.semaphore("agree", 2).unwrap().acquire().await.unwrap();
    drop(second);

    held.release().await.unwrap();
    two.flush().await;
    let now_three = three.semaphore("agree", 3).unwrap().acquire().await.unwrap();
    let (record, _) = view.get_data("/zklock/agree").await.unwrap();
    assert_eq!(
        record, b"leases=3",
        "the first acquirer after the holders left records its count"
    );
    drop(now_three);
}

/// Data someone else keeps at the semaphore's path is neither overwritten nor read as a count.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn foreign_data_at_the_semaphore_path_is_left_alone() {
    let zk = server();
    let c = client(&zk.connect_string()).await;
    let view = raw(&zk.connect_string()).await;
    let persistent = zk::CreateMode::Persistent.with_acls(zk::Acls::anyone_all());
    view.mkdir("/zklock", &persistent).await.unwrap();
    view.create("/zklock/foreign", b"owned by the app", &persistent)
        .await
        .unwrap();
    let guard = c.semaphore("foreign", 2).unwrap().acquire().await.unwrap();
    let (data, _) = view.get_data("/zklock/foreign").await.unwrap();
    assert_eq!(data, b"owned by the app");
    drop(guard);
}
