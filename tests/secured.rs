//! Secured ensembles (features `tls` and `sasl`), against real ZooKeeper servers serving TLS on a
//! `secureClientPort` (Netty, PEM stores, certificates made per test) and SASL DIGEST-MD5 users
//! from a JAAS file: locks, read/write locks and the attribute work over them; every
//! misconfiguration gets its own error before the connect timeout; `sasl:` ACLs keep other
//! users off lock nodes; a Curator peer on the same TLS port still excludes zklock.
#![cfg(all(feature = "tls", feature = "sasl"))]

mod support;

use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;

use support::AppError;
use tokio::task::JoinHandle;
use zklock::{
    distributed_lock, zk, Lock, LockClient, LockClientBuilder, LockError, LockGuard, SessionStatus, TlsConfig,
};
use zklock_testing::curator::{tls_properties, CuratorPeer};
use zklock_testing::{ClientAuth, FaultProxy, TestCa, ZkEnsemble, ZkServer};

/// Generous bound for anything that should happen promptly on a loaded machine.
const SOON: Duration = Duration::from_secs(20);
/// The connect timeout of clients that must fail: long, so that an error naming the problem
/// (rather than [`LockError::Connection`]'s "within 30s") shows the diagnosis came first.
const PATIENT: Duration = Duration::from_secs(30);

fn start(builder: zklock_testing::ZkServerBuilder) -> ZkServer {
    builder.start().expect("start ZooKeeper (run scripts/install-deps.sh)")
}

fn tls_server(ca: &TestCa) -> ZkServer {
    start(ZkServer::builder().tls(ca))
}

fn secure_connect(server: &ZkServer) -> String {
    server.secure_connect_string().expect("a TLS server has a TLS port")
}

fn builder(connect: &str) -> LockClientBuilder {
    LockClient::builder(connect).session_timeout(Duration::from_secs(4))
}

fn trusting(ca: &TestCa) -> TlsConfig {
    TlsConfig::ca_pem(ca.cert_pem())
}

async fn connect(builder: LockClientBuilder) -> LockClient {
    builder.connect().await.expect("connect lock client")
}

/// Connects a client that must fail, and returns its error.
async fn refused(builder: LockClientBuilder) -> LockError {
    match builder.connect_timeout(PATIENT).connect().await {
        Ok(client) => panic!("connected although misconfigured: {client:?}"),
        Err(err) => {
            eprintln!("refused as expected: {err}");
            err
        }
    }
}

/// A service whose method runs under the attribute's lock and notices any overlap.
struct Counter {
    locks: LockClient,
    busy: Arc<AtomicBool>,
    runs: Arc<AtomicU32>,
}

impl Counter {
    #[distributed_lock("secured:{id}", timeout = "20s", client = self.locks)]
    async fn bump(&self, id: u32) -> Result<(), AppError> {
        assert!(!self.busy.swap(true, Ordering::SeqCst), "two holders of secured:{id}");
        tokio::time::sleep(Duration::from_millis(5)).await;
        self.busy.store(false, Ordering::SeqCst);
        self.runs.fetch_add(1, Ordering::SeqCst);
        Ok(())
    }
}

/// Takes the mutex `name` and releases it.
async fn take_and_release(client: &LockClient, name: &str) {
    let guard = client.mutex(name).unwrap().acquire_timeout(SOON).await.unwrap();
    guard.release().await.unwrap();
}

/// The number of contender nodes in `dir`, seen through `client`'s session.
async fn queue_length(client: &LockClient, dir: &str) -> usize {
    let zk = client.zookeeper().await.expect("a session");
    match zk.list_children(dir).await {
        Ok(children) => children.len(),
        Err(zk::Error::NoNode) => 0,
        Err(err) => panic!("list {dir}: {err}"),
    }
}

/// Starts acquiring `lock` (of `client`) on a task of its own and returns once its node is
/// queued behind the `ahead` nodes already there. When granted, the waiter checks `gone`: the
/// holder sets it just before releasing, so a waiter that went ahead while `because` fails.
async fn waiting(
    client: &LockClient,
    lock: Lock,
    ahead: usize,
    gone: Arc<AtomicBool>,
    because: &'static str,
) -> JoinHandle<Result<LockGuard, LockError>> {
    let dir = lock.path().to_owned();
    let waiter = tokio::spawn(async move {
        let granted = lock.acquire_timeout(SOON).await;
        assert!(gone.load(Ordering::SeqCst), "a waiter went ahead while {because}");
        granted
    });
    let deadline = tokio::time::Instant::now() + SOON;
    while queue_length(client, &dir).await <= ahead {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the waiter never queued in {dir}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(!waiter.is_finished(), "a waiter went ahead while {because}");
    waiter
}

/// Exclusion between two clients for a mutex, sharing and exclusion for a read/write lock, and
/// the attribute on both clients at once.
async fn locks_work(a: &LockClient, b: &LockClient) {
    let held = a.mutex("orders").unwrap().acquire_timeout(SOON).await.unwrap();
    let theirs = b.mutex("orders").unwrap();
    assert!(theirs.try_acquire().await.unwrap().is_none(), "b got the mutex a holds");
    let gone = Arc::new(AtomicBool::new(false));
    let waiter = waiting(b, theirs, 1, gone.clone(), "a holds").await;
    let first = held.fencing_token();
    gone.store(true, Ordering::SeqCst);
    held.release().await.unwrap();
    let next = waiter.await.unwrap().expect("b granted after a released");
    assert!(next.fencing_token() > first);
    next.release().await.unwrap();

    let r1 = a.read_lock("doc").unwrap().acquire_timeout(SOON).await.unwrap();
    let r2 = b.read_lock("doc").unwrap().acquire_timeout(SOON).await.unwrap();
    let writer = a.write_lock("doc").unwrap();
    assert!(
        writer.try_acquire().await.unwrap().is_none(),
        "a writer got in beside readers"
    );
    r1.release().await.unwrap();
    r2.release().await.unwrap();
    writer.acquire_timeout(SOON).await.unwrap().release().await.unwrap();

    let busy = Arc::new(AtomicBool::new(false));
    let runs = Arc::new(AtomicU32::new(0));
    let counter = |locks: &LockClient| Counter {
        locks: locks.clone(),
        busy: busy.clone(),
        runs: runs.clone(),
    };
    let (on_a, on_b) = (counter(a), counter(b));
    let rounds = |c: Counter| async move {
        for _ in 0..10 {
            c.bump(7).await.expect("bump");
        }
    };
    tokio::join!(rounds(on_a), rounds(on_b));
    assert_eq!(runs.load(Ordering::SeqCst), 20);
}

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
            .sasl_digest("ops", "sasl-secret")
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

/// A plain ZooKeeper session of the SASL user `bob` (see [`sasl_server`]).
async fn raw_as_bob(zk: &ZkServer) -> zk::Client {
    zk::Client::connector()
        .with_sasl(zk::SaslOptions::digest_md5("bob", "bob-secret"))
        .with_session_timeout(Duration::from_secs(4))
        .connect(&zk.connect_string())
        .await
        .expect("bob connects")
}

fn sasl_server() -> ZkServer {
    start(
        ZkServer::builder()
            .sasl_user("alice", "alice-secret")
            .sasl_user("bob", "bob-secret"),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mutex_rw_and_the_attribute_work_with_sasl() {
    let zk = sasl_server();
    let a = connect(builder(&zk.connect_string()).sasl_digest("alice", "alice-secret")).await;
    let b = connect(builder(&zk.connect_string()).sasl_digest("alice", "alice-secret")).await;
    locks_work(&a, &b).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sasl_over_tls_works() {
    let ca = TestCa::new("zklock test CA").unwrap();
    let zk = start(ZkServer::builder().tls(&ca).sasl_user("alice", "alice-secret"));
    let secured = || {
        builder(&secure_connect(&zk))
            .tls(trusting(&ca))
            .sasl_digest("alice", "alice-secret")
    };
    let (a, b) = (connect(secured()).await, connect(secured()).await);
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

/// A secured session moves to another member when its member dies: the new connection is
/// TLS again and re-authenticates by SASL, and the held lock stays held.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_held_lock_survives_its_member_dying_over_tls_and_sasl() {
    let ca = TestCa::new("zklock test CA").unwrap();
    // A 1 s tick allows a 20 s session; loss_after 15 s covers the reconnect on a busy machine
    // (as in lock_faults.rs's failover test).
    let ensemble = ZkEnsemble::builder(3)
        .tick_time(Duration::from_millis(1000))
        .tls(&ca)
        .sasl_user("alice", "alice-secret")
        .start()
        .expect("start a TLS ensemble");
    // The holder reaches each member's TLS port through a proxy of its own, which tells the
    // member it is connected to (`cons` lists only the plain port's connections).
    let proxies: Vec<FaultProxy> = ensemble
        .members()
        .iter()
        .map(|m| {
            let port = m.secure_port().expect("a TLS port");
            FaultProxy::start((std::net::Ipv4Addr::LOCALHOST, port).into()).unwrap()
        })
        .collect();
    let secured = |connect: String| {
        LockClient::builder(connect)
            .session_timeout(Duration::from_secs(20))
            .loss_after(Duration::from_secs(15))
            .tls(trusting(&ca))
            .sasl_digest("alice", "alice-secret")
    };
    let holder = connect(secured(ensemble.connect_string_via(&proxies))).await;
    let other = connect(secured(ensemble.secure_connect_string().expect("TLS ports"))).await;
    let guard = holder.mutex("failover").unwrap().acquire_timeout(SOON).await.unwrap();

    let session = holder.session_id().expect("a session");
    let serving = proxies
        .iter()
        .position(|p| p.connection_count() > 0)
        .expect("the holder is connected through one proxy");
    tokio::task::block_in_place(|| ensemble.kill(serving)).unwrap();
    tokio::task::block_in_place(|| ensemble.wait_for_quorum(Duration::from_secs(60))).unwrap();
    // Connected again, through another member's proxy.
    let moved = support::eventually(Duration::from_secs(40), || async {
        holder.status() == SessionStatus::Connected
            && proxies
                .iter()
                .enumerate()
                .any(|(i, p)| i != serving && p.connection_count() > 0)
    })
    .await;
    assert!(moved, "the holder did not reconnect to another member");
    assert_eq!(holder.session_id(), Some(session), "the session survived");
    assert!(!guard.is_lost(), "the hold was given up during the move");
    guard.ensure_held().await.expect("still held after the move");
    // `other` may have been connected to the member that died: a try fails fast while it is
    // not connected, so wait until it is.
    let reconnected = support::eventually(Duration::from_secs(40), || async {
        other.status() == SessionStatus::Connected
    })
    .await;
    assert!(reconnected, "the other client did not reconnect");
    let lock = other.mutex("failover").unwrap();
    assert!(
        lock.try_acquire().await.unwrap().is_none(),
        "another client got a held lock"
    );
    let token = guard.fencing_token();
    guard.release().await.unwrap();
    let next = lock.acquire_timeout(SOON).await.unwrap();
    assert!(next.fencing_token() > token);
}
