//! Bad input and unreachable servers: clear errors, promptly, never a hang or a panic.

mod support;

use std::time::{Duration, Instant};

use support::{client, server};
use zklock_runtime::{zk, LockClient, LockError};
use zklock_testing::FaultProxy;

fn closed_port() -> String {
    zklock_testing::process::closed_address().to_string()
}

#[tokio::test]
async fn invalid_lock_names_say_why() {
    let zk = server();
    let c = client(&zk.connect_string()).await;
    let long = "x".repeat(201);
    for (name, why) in [
        ("", "empty"),
        ("a/b", "`/`"),
        ("bell\u{7}", "control"),
        ("..", "`.`"),
        (long.as_str(), "longer than 200"),
    ] {
        match c.mutex(name) {
            Err(LockError::InvalidName { name: n, reason }) => {
                assert_eq!(n, name);
                assert!(reason.contains(why), "{name:?}: {reason}");
            }
            other => panic!("{name:?} accepted: {other:?}"),
        }
        assert!(matches!(c.read_lock(name), Err(LockError::InvalidName { .. })));
    }
    assert!(c.mutex("inventory:{42} ünïcode ok").is_ok());
}

/// ZooKeeper refuses node names with characters outside the Basic Multilingual Plane (its Java
/// strings hold them as surrogate pairs); the name check refuses them up front, with a reason,
/// and still lets through every BMP name the server takes.
#[tokio::test]
async fn names_outside_the_basic_multilingual_plane_are_refused_up_front() {
    let zk = server();
    let c = client(&zk.connect_string()).await;
    let raw = support::raw(&zk.connect_string()).await;
    let options = zklock_runtime::zk::CreateMode::Persistent.with_acls(zklock_runtime::zk::Acls::anyone_all());
    for name in ["🔒", "k:😀", "a\u{1F600}b"] {
        assert!(
            raw.create(&format!("/{name}"), b"", &options).await.is_err(),
            "the server took {name:?}; the check would be too strict"
        );
        match c.mutex(name) {
            Err(LockError::InvalidName { reason, .. }) => {
                assert!(reason.contains("Basic Multilingual Plane"), "{name:?}: {reason}")
            }
            other => panic!("{name:?} accepted: {other:?}"),
        }
    }
    for name in ["库存:42", "ünïcödé", "\u{ffef}"] {
        let guard = c
            .mutex(name)
            .unwrap()
            .acquire()
            .await
            .unwrap_or_else(|e| panic!("{name:?}: {e}"));
        guard.release().await.unwrap();
    }
}

#[tokio::test]
async fn bad_configuration_is_rejected_before_connecting() {
    for namespace in ["", "zklock", "/", "/a//b", "/zookeeper/x"] {
        let err = LockClient::builder("127.0.0.1:2181")
            .namespace(namespace)
            .build()
            .unwrap_err();
        assert!(matches!(err, LockError::InvalidConfig { .. }), "{namespace:?}: {err:?}");
    }
    let err = LockClient::builder("").build().unwrap_err();
    assert!(err.to_string().contains("connect string"), "{err}");
    let err = LockClient::builder("127.0.0.1:2181")
        .session_timeout(Duration::ZERO)
        .build()
        .unwrap_err();
    assert!(matches!(err, LockError::InvalidConfig { .. }));
    // Sent as an i32 of milliseconds: 3 000 000 s would wrap to a negative value (and was
    // silently granted as the server's minimum); Duration::MAX panicked in the client library.
    for huge in [Duration::from_secs(3_000_000), Duration::MAX] {
        let err = LockClient::builder("127.0.0.1:2181")
            .session_timeout(huge)
            .build()
            .unwrap_err();
        assert!(err.to_string().contains("longer than ZooKeeper can express"), "{err}");
    }
    let ok = LockClient::builder("127.0.0.1:2181")
        .session_timeout(Duration::from_millis(i32::MAX as u64))
        .build();
    assert!(ok.is_ok(), "{ok:?}");
    let err = LockClient::builder("127.0.0.1:2181").identity("").build().unwrap_err();
    assert!(matches!(err, LockError::InvalidConfig { .. }), "{err:?}");
}

#[tokio::test]
async fn unreachable_server_fails_connect_within_its_timeout() {
    let started = Instant::now();
    let err = LockClient::builder(closed_port())
        .connect_timeout(Duration::from_secs(1))
        .connect()
        .await
        .unwrap_err();
    assert!(matches!(err, LockError::Connection { .. }), "{err:?}");
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "took {:?}",
        started.elapsed()
    );
}

#[tokio::test]
async fn silent_server_fails_acquire_within_the_callers_timeout() {
    let zk = server();
    let proxy = FaultProxy::start(zk.addr()).unwrap();
    proxy.blackhole();
    // A lazily connecting client: the acquire itself must give up on time.
    let c = LockClient::builder(proxy.connect_string())
        .session_timeout(Duration::from_secs(4))
        .build()
        .unwrap();
    let lock = c.mutex("silent").unwrap();
    let started = Instant::now();
    let err = lock.acquire_timeout(Duration::from_secs(3)).await.unwrap_err();
    let took = started.elapsed();
    assert!(matches!(err, LockError::Connection { .. }), "{err:?}");
    assert!(took < Duration::from_secs(6), "took {took:?}");
    // Unbounded acquire still ends, with the connect timeout.
    let c = LockClient::builder(proxy.connect_string())
        .connect_timeout(Duration::from_secs(1))
        .build()
        .unwrap();
    let err = tokio::time::timeout(Duration::from_secs(10), c.mutex("silent").unwrap().acquire())
        .await
        .expect("no hang");
    assert!(matches!(err, Err(LockError::Connection { .. })), "{err:?}");
}

#[tokio::test]
async fn acquire_on_a_lost_connection_is_a_connection_error_not_a_hang() {
    let zk = server();
    let proxy = FaultProxy::start(zk.addr()).unwrap();
    let c = LockClient::builder(proxy.connect_string())
        .session_timeout(Duration::from_secs(4))
        .connect()
        .await
        .unwrap();
    proxy.blackhole();
    let started = Instant::now();
    let res = c.mutex("cut").unwrap().acquire_timeout(Duration::from_secs(2)).await;
    assert!(
        matches!(res, Err(LockError::Connection { .. }) | Err(LockError::Timeout { .. })),
        "{res:?}"
    );
    assert!(started.elapsed() < Duration::from_secs(5));
}

#[test]
fn default_client_missing_is_an_error_not_a_panic() {
    // Runs in its own test binary process only if nothing installed a default; this binary
    // never does.
    let err = LockClient::default_client().unwrap_err();
    assert!(err.to_string().contains("install_default"), "{err}");
}

/// Every server refuses: `connect` says so after one look and a short second one, naming each
/// address and what happened to it, long before its 30 s connect timeout.
#[tokio::test]
async fn a_refused_connect_fails_fast_naming_each_server() {
    let (first, second) = (closed_port(), closed_port());
    let started = Instant::now();
    let err = LockClient::connect(&format!("{first},{second}")).await.unwrap_err();
    let took = started.elapsed();
    let LockError::Connection { message: why, .. } = &err else {
        panic!("expected Connection, got {err:?}")
    };
    assert!(why.contains(&first) && why.contains(&second), "{why}");
    assert!(why.contains("refused"), "{why}");
    assert!(took < Duration::from_secs(5), "took {took:?}");
    assert_eq!(err.kind(), zklock_runtime::ErrorKind::Unavailable);
}

/// A connect that is merely slow (the server accepts the connection, then nothing answers)
/// keeps its whole connect timeout: failing fast is only for refusals.
#[tokio::test]
async fn a_slow_connect_keeps_its_whole_timeout() {
    let zk = server();
    let proxy = FaultProxy::start(zk.addr()).unwrap();
    proxy.blackhole();
    let started = Instant::now();
    let err = LockClient::builder(proxy.connect_string())
        .connect_timeout(Duration::from_secs(3))
        .connect()
        .await
        .unwrap_err();
    let took = started.elapsed();
    assert!(matches!(err, LockError::Connection { .. }), "{err:?}");
    assert!(
        took >= Duration::from_secs(3),
        "gave up after {took:?}, before its timeout"
    );
}

/// While the client is not connected (its server went away), a try answers at once and a
/// bounded acquire within its timeout, with the "unavailable" error naming what the last look
/// at the server found; neither leaves a node.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn while_disconnected_zero_tries_at_once_and_errors_name_the_refusal() {
    let zk = server();
    let c = client(&zk.connect_string()).await;
    let mut status = c.watch_status();
    tokio::task::block_in_place(|| zk.stop()).unwrap();
    // (`is_ok()` at once: the watch's borrow must not outlive this line.)
    let down = tokio::time::timeout(Duration::from_secs(20), status.wait_for(|s| !s.is_connected()))
        .await
        .is_ok();
    assert!(down, "the client never saw its server go: {:?}", c.status());
    let lock = c.mutex("down").unwrap();

    let started = Instant::now();
    let err = lock.acquire_timeout(Duration::ZERO).await.unwrap_err();
    assert!(matches!(err, LockError::Connection { .. }), "{err:?}");
    assert!(
        started.elapsed() < Duration::from_millis(500),
        "a try took {:?}",
        started.elapsed()
    );
    assert!(
        lock.try_acquire().await.is_err(),
        "a try while down is an error, not `None`"
    );

    // The session monitor looks at the server while down; wait until it has.
    let mut last = String::new();
    let deadline = Instant::now() + Duration::from_secs(20);
    while !last.contains("refused") {
        assert!(Instant::now() < deadline, "no look at the server was reported: {last}");
        let started = Instant::now();
        let err = lock.acquire_timeout(Duration::from_millis(300)).await.unwrap_err();
        assert!(
            started.elapsed() < Duration::from_secs(2),
            "took {:?}",
            started.elapsed()
        );
        assert_eq!(err.kind(), zklock_runtime::ErrorKind::Unavailable, "{err:?}");
        last = err.to_string();
    }
    assert!(last.contains(&zk.addr().to_string()), "{last}");

    tokio::task::block_in_place(|| zk.restart()).unwrap();
    let guard = lock
        .acquire_timeout(Duration::from_secs(20))
        .await
        .expect("acquired once the server is back");
    guard.release().await.unwrap();
    c.flush().await;
    let view = support::raw(&zk.connect_string()).await;
    assert!(
        support::contenders(&view, "/zklock/down").await.is_empty(),
        "a try left a node"
    );
}

/// "At once while not connected" is about a session that is cut off: a client that has no
/// session yet, or whose session expired, opens one for a try, so a caller that only ever tries
/// (a skip-if-busy job) is not stuck with an error.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_try_opens_a_session_when_there_is_none_or_it_expired() {
    let zk = server();
    let proxy = FaultProxy::start(zk.addr()).unwrap();
    let lazy = LockClient::builder(proxy.connect_string())
        .session_timeout(Duration::from_secs(2))
        .build()
        .unwrap();
    let lock = lazy.mutex("try-opens").unwrap();
    let first = lock.try_acquire().await.expect("a first try opens the session");
    assert!(first.is_some());
    drop(first);
    let first_session = lazy.session_id().unwrap();

    proxy.blackhole();
    let mut status = lazy.watch_status();
    let expired = tokio::time::timeout(
        Duration::from_secs(30),
        status.wait_for(|s| *s == zklock_runtime::SessionStatus::Expired),
    )
    .await
    .is_ok();
    assert!(expired, "the session never expired: {:?}", lazy.status());
    proxy.pass();
    let again = lock
        .try_acquire()
        .await
        .expect("a try after an expiry opens a new session");
    assert!(again.is_some());
    assert_ne!(lazy.session_id(), Some(first_session));
}

/// A holder's node this client may not read (the holder's credentials guard it; the lock's
/// directory is open to all) is reported at once as ZooKeeper's `NoAuth`, and the contender
/// node already created is removed. Waiting on it would never end: the server sends a session
/// no notification of a node it may not read, so an existence watch on the holder's node
/// (which needs no permission to set) never fires when the holder goes. The waiter watches
/// with a read, which the server refuses.
#[tokio::test]
async fn a_holder_node_the_acl_keeps_from_reading_is_an_error_at_once_not_a_silent_wait() {
    let zk = server();
    let admin = support::raw(&zk.connect_string()).await;
    let open = zk::CreateMode::Persistent.with_acls(zk::Acls::anyone_all());
    admin.mkdir("/zklock/guarded", &open).await.unwrap();
    let owner = support::shop_client(&zk.connect_string()).await;
    let guard = owner.mutex("guarded").unwrap().acquire().await.unwrap();
    assert_eq!(
        admin.get_data(guard.node_path()).await.unwrap_err(),
        zk::Error::NoAuth,
        "the holder's node is not readable without its credentials"
    );
    let anonymous = client(&zk.connect_string()).await;

    refused_at_once(&anonymous, "guarded").await;
    assert_eq!(
        admin.list_children("/zklock/guarded").await.unwrap(),
        vec![guard.node_path().rsplit('/').next().unwrap().to_owned()],
        "only the holder's node is left"
    );
    guard.release().await.unwrap();
}

/// Acquires `name` through `c` and expects ZooKeeper's `NoAuth` well within the 15 s the
/// acquisition allows, neither retried nor waited out; then lets `c`'s cleanup finish, so
/// that the caller sees what the refused acquisition left.
async fn refused_at_once(c: &LockClient, name: &str) {
    let started = Instant::now();
    let err = c
        .mutex(name)
        .unwrap()
        .acquire_timeout(Duration::from_secs(15))
        .await
        .unwrap_err();
    assert_eq!(err.zookeeper_error(), Some(&zk::Error::NoAuth), "{err:?}");
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "answered after {:?}",
        started.elapsed()
    );
    c.flush().await;
}

/// Permissions for anyone, for a node made by the test's admin session.
fn anyone(perms: zk::Permission) -> Vec<zk::Acl> {
    vec![zk::Acl::new(perms, zk::AuthId::anyone())]
}

/// A lock directory whose ACL lets this client create and delete contenders but not list them:
/// the refused listing is reported at once as ZooKeeper's `NoAuth`, not retried until the
/// caller's timeout, and the contender node already created is removed.
#[tokio::test]
async fn a_listing_the_acl_refuses_is_an_error_at_once_not_a_retry() {
    let zk = server();
    let admin = support::raw(&zk.connect_string()).await;
    admin
        .create(
            "/zklock",
            b"",
            &zk::CreateMode::Persistent.with_acls(zk::Acls::anyone_all()),
        )
        .await
        .unwrap();
    let create_and_delete = anyone(zk::Permission::CREATE | zk::Permission::DELETE);
    admin
        .create(
            "/zklock/unlisted",
            b"",
            &zk::CreateMode::Persistent.with_acls(zk::Acls::new(&create_and_delete)),
        )
        .await
        .unwrap();
    // Another contender first, so the new node's number (1) does not prove it first on its own
    // and the grant needs the listing.
    let sequential = zk::CreateMode::EphemeralSequential.with_acls(zk::Acls::anyone_all());
    admin
        .create("/zklock/unlisted/_c_x-lock-", b"", &sequential)
        .await
        .unwrap();
    let c = client(&zk.connect_string()).await;

    refused_at_once(&c, "unlisted").await;
    let (stat, _) = admin.check_and_watch_stat("/zklock/unlisted").await.unwrap();
    assert_eq!(stat.unwrap().num_children, 1, "only the other contender is left");
}
