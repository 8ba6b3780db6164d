//! SASL DIGEST-MD5 authentication (feature `sasl`, tested in a build with it alone as well as
//! with every feature), against real ZooKeeper servers with users from a JAAS file: locks,
//! read/write locks and the attribute work with it; a refused or unheard-of login gets its own
//! error; `sasl:` ACLs keep other users off lock nodes.
#![cfg(feature = "sasl")]

mod support;

use support::secured::{builder, connect, locks_work, raw_as_bob, refused, sasl_server, start, SOON};
use zklock::{zk, LockClient, LockError};
use zklock_testing::ZkServer;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mutex_rw_and_the_attribute_work_with_sasl() {
    let zk = sasl_server();
    let a = connect(builder(&zk.connect_string()).sasl_digest("alice", "alice-secret")).await;
    let b = connect(builder(&zk.connect_string()).sasl_digest("alice", "alice-secret")).await;
    locks_work(&a, &b).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wrong_sasl_password_is_an_authentication_error() {
    let zk = sasl_server();
    for (user, password) in [("alice", "not-her-password"), ("mallory", "anything")] {
        let err = refused(builder(&zk.connect_string()).sasl_digest(user, password)).await;
        assert!(
            matches!(&err, LockError::AuthFailed { message: why, .. } if why.contains(user)),
            "{user}: {err:?}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sasl_client_of_a_server_without_sasl_is_told_so() {
    // Such a server lets the client in as nobody in particular: its locks would fail with
    // InvalidACL (creator_all without an identity) or be open to all.
    let zk = start(ZkServer::builder());
    let err = refused(builder(&zk.connect_string()).sasl_digest("alice", "alice-secret")).await;
    assert!(
        matches!(&err, LockError::AuthFailed { message: why, .. } if why.contains("without SASL authentication")),
        "{err:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_sasl_user_cannot_delete_or_join_a_lock() {
    let zk = sasl_server();
    let alice = connect(builder(&zk.connect_string()).sasl_digest("alice", "alice-secret")).await;
    let guard = alice.mutex("payroll").unwrap().acquire_timeout(SOON).await.unwrap();
    let node = guard.node_path().to_owned();

    let bob = raw_as_bob(&zk).await;
    let (acls, _) = alice.zookeeper().await.unwrap().get_acl(&node).await.unwrap();
    assert_eq!(acls.len(), 1, "{acls:?}");
    assert_eq!((acls[0].scheme(), acls[0].id()), ("sasl", "alice"), "{acls:?}");
    assert_eq!(bob.delete(&node, None).await, Err(zk::Error::NoAuth));
    assert_eq!(
        bob.get_acl(&node).await.map(drop),
        Err(zk::Error::NoAuth),
        "bob may not even read it"
    );

    // Bob's own lock client is refused at once, and alice still holds.
    let bobs = connect(builder(&zk.connect_string()).sasl_digest("bob", "bob-secret")).await;
    let err = bobs.mutex("payroll").unwrap().acquire_timeout(SOON).await.unwrap_err();
    assert_eq!(err.zookeeper_error(), Some(&zk::Error::NoAuth), "{err:?}");
    guard.ensure_held().await.expect("alice still holds");
    guard.release().await.unwrap();
}

/// `.sasl()` with the client library's own options authenticates like `.sasl_digest()`, and
/// `.acls()` replaces the default `creator_all` on the lock nodes: here the owner may do all,
/// anyone may read, so another user reads the queue but cannot delete from it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sasl_options_and_explicit_acls_shape_the_lock_nodes() {
    let zk = sasl_server();
    let acls = vec![
        zk::Acl::new(zk::Permission::ALL, zk::AuthId::new("sasl", "alice")),
        zk::Acl::new(zk::Permission::READ, zk::AuthId::anyone()),
    ];
    let alice = connect(
        builder(&zk.connect_string())
            .sasl(zk::SaslOptions::digest_md5("alice", "alice-secret"))
            .acls(acls),
    )
    .await;
    let guard = alice.mutex("shared-view").unwrap().acquire_timeout(SOON).await.unwrap();
    let node = guard.node_path().to_owned();
    let (on_node, _) = alice.zookeeper().await.unwrap().get_acl(&node).await.unwrap();
    let mut seen: Vec<_> = on_node
        .iter()
        .map(|a| (a.scheme().to_owned(), a.id().to_owned(), a.permission()))
        .collect();
    seen.sort_by(|a, b| (&a.0, &a.1).cmp(&(&b.0, &b.1)));
    assert_eq!(
        seen,
        vec![
            ("sasl".to_owned(), "alice".to_owned(), zk::Permission::ALL),
            ("world".to_owned(), "anyone".to_owned(), zk::Permission::READ),
        ],
        "{on_node:?}"
    );

    let bob = raw_as_bob(&zk).await;
    let dir = node.rsplit_once('/').unwrap().0;
    assert_eq!(
        bob.list_children(dir).await.unwrap().len(),
        1,
        "anyone may read the queue"
    );
    assert!(bob.get_data(&node).await.is_ok(), "anyone may read the node");
    assert_eq!(bob.delete(&node, None).await, Err(zk::Error::NoAuth));
    guard.ensure_held().await.expect("alice still holds");
    guard.release().await.unwrap();

    // A refused password through `.sasl()` is an authentication failure, as with sasl_digest.
    let err = refused(builder(&zk.connect_string()).sasl(zk::SaslOptions::digest_md5("alice", "wrong"))).await;
    assert!(matches!(err, LockError::AuthFailed { .. }), "{err:?}");
}

#[test]
fn sasl_settings_print_without_their_password() {
    let shown = format!(
        "{:?}",
        LockClient::builder("127.0.0.1:2181").sasl_digest("ops", "sasl-secret")
    );
    assert!(!shown.contains("sasl-secret"), "{shown}");
}

/// A build without `tls` cannot honour a `tcp+tls://` server, and says which feature it lacks
/// before any network traffic (with `tls`, the same string asks for `tls(...)` settings).
#[cfg(not(feature = "tls"))]
#[test]
fn a_tls_server_in_a_build_without_tls_names_the_missing_feature() {
    match LockClient::builder("tcp+tls://127.0.0.1:2281").build() {
        Err(LockError::InvalidConfig { message: why, .. }) => {
            assert!(why.contains("lacks the `tls` feature"), "{why}")
        }
        other => panic!("expected InvalidConfig naming the feature, got {other:?}"),
    }
}
