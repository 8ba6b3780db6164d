//! Client configuration against a real server: credentials and ACLs, chroot, namespace,
//! session status, the default client.

mod support;

use std::time::Duration;

use support::{raw, server, shop_client};
use zklock_runtime::{zk, LockClient, LockError, SessionStatus};

#[tokio::test]
async fn digest_credentials_protect_lock_nodes() {
    let zk = server();
    let owner = shop_client(&zk.connect_string()).await;
    let guard = owner.mutex("guarded").unwrap().acquire().await.unwrap();
    let anonymous = raw(&zk.connect_string()).await;
    let (acl, _) = owner
        .zookeeper()
        .await
        .unwrap()
        .get_acl(guard.node_path())
        .await
        .unwrap();
    assert_eq!(acl.len(), 1);
    assert_eq!(acl[0].scheme(), "digest", "{acl:?}");
    assert!(acl[0].id().starts_with("shop:"), "{acl:?}");
    // Someone without the credentials can neither read nor delete the holder's node.
    assert_eq!(
        anonymous.get_acl(guard.node_path()).await.unwrap_err(),
        zk::Error::NoAuth
    );
    assert_eq!(
        anonymous.get_data(guard.node_path()).await.unwrap_err(),
        zk::Error::NoAuth
    );
    assert_eq!(
        anonymous.delete(guard.node_path(), None).await.unwrap_err(),
        zk::Error::NoAuth
    );
    // Another client with the same credentials contends normally.
    let peer = shop_client(&zk.connect_string()).await;
    let lock = peer.mutex("guarded").unwrap();
    assert!(lock.try_acquire().await.unwrap().is_none());
    guard.release().await.unwrap();
    lock.acquire_timeout(Duration::from_secs(5))
        .await
        .unwrap()
        .release()
        .await
        .unwrap();
}

#[tokio::test]
async fn chroot_and_namespace_place_the_lock_dirs() {
    let zk = server();
    let admin = raw(&zk.connect_string()).await;
    admin
        .mkdir(
            "/apps/shop",
            &zk::CreateMode::Persistent.with_acls(zk::Acls::anyone_all()),
        )
        .await
        .unwrap();
    let c = LockClient::builder(format!("{}/apps/shop", zk.connect_string()))
        .namespace("/locks/v1")
        .connect()
        .await
        .unwrap();
    assert_eq!(c.namespace(), "/locks/v1");
    let lock = c.mutex("orders").unwrap();
    assert_eq!(lock.path(), "/locks/v1/orders");
    let guard = lock.acquire().await.unwrap();
    let children = admin.list_children("/apps/shop/locks/v1/orders").await.unwrap();
    assert_eq!(children.len(), 1);
    assert!(guard.node_path().ends_with(&children[0]));
    // A second name: its dir is missing, the namespace is not (the dir is created in the
    // same round trip as the contender node).
    let other = c.mutex("payments").unwrap().acquire().await.unwrap();
    let children = admin.list_children("/apps/shop/locks/v1/payments").await.unwrap();
    assert_eq!(children.len(), 1);
    assert!(other.node_path().ends_with(&children[0]));
}

/// A namespace the client may not create nodes in gives the server's refusal at once, naming
/// the lock dir, not a retry loop or a timeout.
#[tokio::test]
async fn a_namespace_without_create_permission_is_reported() {
    let zk = server();
    let admin = raw(&zk.connect_string()).await;
    admin
        .create(
            "/read-only",
            b"",
            &zk::CreateMode::Persistent.with_acls(zk::Acls::anyone_read()),
        )
        .await
        .unwrap();
    let c = LockClient::builder(zk.connect_string())
        .namespace("/read-only")
        .connect()
        .await
        .unwrap();
    let err = c
        .mutex("x")
        .unwrap()
        .acquire_timeout(Duration::from_secs(10))
        .await
        .unwrap_err();
    assert!(err.to_string().contains("create lock dir"), "{err}");
    assert_eq!(err.zookeeper_error(), Some(&zk::Error::NoAuth), "{err:?}");
    assert!(!matches!(err, LockError::Timeout { .. }), "{err:?}");
}

#[tokio::test]
async fn status_follows_the_session() {
    let zk = server();
    let c = LockClient::builder(zk.connect_string()).build().unwrap();
    assert_eq!(c.status(), SessionStatus::Connecting);
    assert_eq!(c.session_id(), None);
    c.mutex("lazy")
        .unwrap()
        .acquire()
        .await
        .unwrap()
        .release()
        .await
        .unwrap();
    assert_eq!(c.status(), SessionStatus::Connected);
    assert!(c.session_id().is_some());
    let raw_session = c.zookeeper().await.unwrap().session_id().0;
    assert_eq!(Some(raw_session), c.session_id());
}

#[tokio::test]
async fn default_client_round_trip() {
    let zk = server();
    let c = LockClient::connect(&zk.connect_string()).await.unwrap();
    c.install_default();
    let d = LockClient::default_client().unwrap();
    assert_eq!(d.session_id(), c.session_id());
}

/// The server may grant a shorter session than asked for; a `loss_after` that would report
/// loss after the granted session could already have expired is lowered to half of it.
#[tokio::test]
async fn loss_after_is_measured_against_the_negotiated_session_timeout() {
    let zk = server(); // tickTime 200 ms: sessions of at most 4 s
    let asked = |loss_after: Option<Duration>| {
        let mut builder = LockClient::builder(zk.connect_string()).session_timeout(Duration::from_secs(30));
        if let Some(loss_after) = loss_after {
            builder = builder.loss_after(loss_after);
        }
        builder.connect()
    };
    let clamped = asked(Some(Duration::from_secs(5))).await.unwrap();
    assert_eq!(clamped.session_timeout(), Some(Duration::from_secs(4)));
    assert_eq!(clamped.loss_after(), Some(Duration::from_secs(2)));
    let kept = asked(Some(Duration::from_millis(1500))).await.unwrap();
    assert_eq!(kept.loss_after(), Some(Duration::from_millis(1500)));
    let default = asked(None).await.unwrap();
    assert_eq!(default.loss_after(), Some(Duration::from_secs(1)));
}
