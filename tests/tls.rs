//! TLS connections to the ensemble (feature `tls`, tested in a build with it alone as well as
//! with every feature), against real ZooKeeper servers serving TLS on a `secureClientPort`
//! (Netty, PEM stores, certificates made per test): locks, read/write locks and the attribute
//! work over it; every misconfiguration gets its own error before the connect timeout; a
//! Curator peer on the same TLS port still excludes zklock.
#![cfg(feature = "tls")]

mod support;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use support::secured::{
    builder, connect, locks_work, refused, secure_connect, start, take_and_release, tls_server, trusting, waiting, SOON,
};
use zklock::{LockClient, LockError, TlsConfig};
use zklock_testing::curator::{tls_properties, CuratorPeer};
use zklock_testing::{ClientAuth, TestCa, ZkServer};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mutex_rw_and_the_attribute_work_over_tls() {
    let ca = TestCa::new("zklock test CA").unwrap();
    let zk = tls_server(&ca);
    let a = connect(builder(&secure_connect(&zk)).tls(trusting(&ca))).await;
    // From files, and with the connect string's scheme prefix: the same thing.
    let from_files = TlsConfig::ca_file(ca.cert_file()).unwrap();
    let b = connect(builder(&format!("tcp+tls://{}", secure_connect(&zk))).tls(from_files)).await;
    locks_work(&a, &b).await;
    // `tcp://` keeps one server plain although the client has TLS settings.
    let plain = connect(builder(&format!("tcp://{}", zk.connect_string())).tls(trusting(&ca))).await;
    take_and_release(&plain, "orders").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_that_requires_a_client_certificate_gets_one() {
    let ca = TestCa::new("zklock test CA").unwrap();
    let zk = start(ZkServer::builder().tls(&ca).tls_client_auth(ClientAuth::Need));
    let me = ca.issue("orders-api").unwrap();

    let with_pem = trusting(&ca).identity_pem(me.cert_pem(), me.key_pem());
    let a = connect(builder(&secure_connect(&zk)).tls(with_pem)).await;
    let with_files = trusting(&ca).identity_files(me.cert_file(), me.key_file()).unwrap();
    let b = connect(builder(&secure_connect(&zk)).tls(with_files)).await;
    take_and_release(&a, "mtls").await;
    take_and_release(&b, "mtls").await;

    // Without a certificate, or with one from an authority the server does not trust.
    let err = refused(builder(&secure_connect(&zk)).tls(trusting(&ca))).await;
    assert!(
        matches!(&err, LockError::Tls { message: why, .. } if why.contains("client certificate")),
        "{err:?}"
    );
    let stranger = TestCa::new("another CA").unwrap().issue("intruder").unwrap();
    let untrusted = trusting(&ca).identity_pem(stranger.cert_pem(), stranger.key_pem());
    let err = refused(builder(&secure_connect(&zk)).tls(untrusted)).await;
    assert!(
        matches!(&err, LockError::Tls { message: why, .. } if why.contains("alert")),
        "{err:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_ca_that_does_not_vouch_for_the_server_is_named() {
    let ca = TestCa::new("zklock test CA").unwrap();
    let zk = tls_server(&ca);
    let other = TestCa::new("another CA").unwrap();
    let err = refused(builder(&secure_connect(&zk)).tls(trusting(&other))).await;
    match &err {
        LockError::Tls { message: why, .. } => {
            assert!(why.contains("not signed by the configured CA"), "{why}");
            assert!(why.contains(&secure_connect(&zk)), "names the server: {why}");
        }
        other => panic!("expected a TLS error naming the certificate problem, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plain_client_on_the_tls_port_is_told_the_port_speaks_tls() {
    let ca = TestCa::new("zklock test CA").unwrap();
    let zk = tls_server(&ca);
    let err = refused(builder(&secure_connect(&zk))).await;
    assert!(
        matches!(&err, LockError::Tls { message: why, .. } if why.contains("speaks TLS") && why.contains("without `tls(...)`")),
        "{err:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tls_client_on_a_plain_port_is_told_the_port_does_not_serve_tls() {
    let ca = TestCa::new("zklock test CA").unwrap();
    let zk = tls_server(&ca);
    let err = refused(builder(&zk.connect_string()).tls(trusting(&ca))).await;
    assert!(
        matches!(&err, LockError::Tls { message: why, .. } if why.contains("does not seem to serve TLS")),
        "{err:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreachable_tls_server_is_a_connection_error() {
    let ca = TestCa::new("zklock test CA").unwrap();
    let closed = zklock_testing::process::closed_address().to_string();
    let err = builder(&closed)
        .tls(trusting(&ca))
        .connect_timeout(Duration::from_secs(2))
        .connect()
        .await
        .unwrap_err();
    assert!(matches!(err, LockError::Connection { .. }), "{err:?}");
}

#[test]
fn unreadable_or_malformed_pem_is_a_configuration_error() {
    let missing = std::env::temp_dir().join("zklock-no-such-dir/ca.pem");
    let err = TlsConfig::ca_file(&missing).unwrap_err();
    assert!(
        matches!(&err, LockError::InvalidConfig { message: why, .. } if why.contains("zklock-no-such-dir/ca.pem")),
        "{err:?}"
    );
    // Why it cannot be read is the io error, the error's source.
    let io = std::error::Error::source(&err).and_then(|e| e.downcast_ref::<std::io::Error>());
    assert_eq!(
        io.map(std::io::Error::kind),
        Some(std::io::ErrorKind::NotFound),
        "{err:?}"
    );
    let ca = TestCa::new("zklock test CA").unwrap();
    let err = TlsConfig::ca_pem(ca.cert_pem())
        .identity_files(ca.cert_file(), &missing)
        .unwrap_err();
    assert!(
        matches!(&err, LockError::InvalidConfig { message: why, .. } if why.contains("key file")),
        "{err:?}"
    );

    let me = ca.issue("me").unwrap();
    let bad: [(&str, TlsConfig, &str); 5] = [
        ("not PEM at all", TlsConfig::ca_pem("hello"), "TLS CA"),
        ("a key where the CA goes", TlsConfig::ca_pem(me.key_pem()), "TLS CA"),
        ("an empty CA", TlsConfig::ca_pem(""), "TLS CA"),
        (
            "no key",
            TlsConfig::ca_pem(ca.cert_pem()).identity_pem(me.cert_pem(), ""),
            "client",
        ),
        (
            "no certificate",
            TlsConfig::ca_pem(ca.cert_pem()).identity_pem("", me.key_pem()),
            "client certificate",
        ),
    ];
    // Settings print without their secrets.
    let shown = format!(
        "{:?}",
        LockClient::builder("127.0.0.1:2181")
            .digest("ops", "digest-secret")
            .tls(TlsConfig::ca_pem(ca.cert_pem()).identity_pem(me.cert_pem(), me.key_pem()))
    );
    assert!(!shown.contains("secret") && !shown.contains("PRIVATE KEY"), "{shown}");
    assert!(
        shown.contains(r#"auth: ["digest"]"#),
        "digest credentials shown as their scheme: {shown}"
    );
    // A server the connect string marks `tcp+tls://` needs TLS settings.
    match LockClient::builder("tcp+tls://127.0.0.1:2281").build() {
        Err(LockError::InvalidConfig { message: why, .. }) => assert!(why.contains("tcp+tls://"), "{why}"),
        other => panic!("expected InvalidConfig for tcp+tls:// without tls(...), got {other:?}"),
    }
    for (what, tls, names) in bad {
        match LockClient::builder("127.0.0.1:2181").tls(tls).build() {
            Err(LockError::InvalidConfig { message: why, .. }) => assert!(why.contains(names), "{what}: {why}"),
            other => panic!("{what}: expected InvalidConfig, got {other:?}"),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_curator_peer_over_tls_excludes_zklock() {
    let ca = TestCa::new("zklock test CA").unwrap();
    let zk = tls_server(&ca);
    let ours = connect(builder(&secure_connect(&zk)).tls(trusting(&ca))).await;
    let peer = CuratorPeer::start_with_properties(&secure_connect(&zk), Duration::from_secs(4), tls_properties(&ca))
        .await
        .expect("start the Curator peer over TLS (run scripts/install-deps.sh)");
    let lock = ours.mutex("interop-tls").unwrap();

    let guard = lock.acquire_timeout(SOON).await.unwrap();
    peer.mutex("c", lock.path()).await.unwrap();
    peer.acquire("c", None).unwrap();
    // Curator queues behind ours and waits for it: it watches our node, and reports no grant.
    support::wait_watching(&zk, peer.session_id(), guard.node_path(), "Curator").await;
    let event = peer.poll_event("c", Duration::ZERO).await.expect("peer alive");
    assert_eq!(event, None, "Curator went ahead while zklock holds");
    guard.release().await.unwrap();
    peer.wait_acquired("c", SOON).await.unwrap();

    assert!(
        lock.try_acquire().await.unwrap().is_none(),
        "zklock got the lock while Curator holds it"
    );
    let gone = Arc::new(AtomicBool::new(false));
    let waiter = waiting(&ours, lock.clone(), 1, gone.clone(), "Curator holds").await;
    gone.store(true, Ordering::SeqCst);
    peer.release("c").await.unwrap();
    waiter
        .await
        .unwrap()
        .expect("granted after Curator released")
        .release()
        .await
        .unwrap();
}
