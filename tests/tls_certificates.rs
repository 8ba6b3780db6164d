//! Server certificates that are wrong although a trusted CA signed them, against real ZooKeeper
//! servers serving TLS with them: a certificate for another host, an expired one, one not valid
//! yet. A TLS client refuses each with a [`LockError::Tls`] that names the server and the
//! problem, long before its connect timeout; a certificate that is right in all three respects
//! is accepted, so the refusals are the certificates' doing.
#![cfg(feature = "tls")]

use std::time::{Duration, Instant, SystemTime};

use zklock::{LockClient, LockClientBuilder, LockError, TlsConfig};
use zklock_testing::{IssueOptions, TestCa, ZkServer};

/// The connect timeout of every client here: an error before it that is not
/// [`LockError::Connection`] came from the client's diagnosis, not from giving up.
const PATIENT: Duration = Duration::from_secs(30);
/// How soon a refusal must come: well before [`PATIENT`], with room for a loaded machine.
const PROMPTLY: Duration = Duration::from_secs(15);
const DAY: Duration = Duration::from_secs(24 * 60 * 60);

/// A server whose TLS port presents a certificate `ca` issues with `options`.
fn serving(ca: &TestCa, options: &IssueOptions) -> ZkServer {
    let identity = ca
        .issue_with("zookeeper-server", options)
        .expect("issue the server certificate");
    ZkServer::builder()
        .tls_with(&identity, ca.cert_pem())
        .start()
        .expect("start ZooKeeper (run scripts/install-deps.sh)")
}

/// A client of `server`'s TLS port that trusts `ca`.
fn client_of(server: &ZkServer, ca: &TestCa) -> LockClientBuilder {
    let connect = server.secure_connect_string().expect("a TLS server has a TLS port");
    LockClient::builder(&connect)
        .session_timeout(Duration::from_secs(4))
        .connect_timeout(PATIENT)
        .tls(TlsConfig::ca_pem(ca.cert_pem()))
}

/// Connects a client of `server` trusting `ca`, which must be refused with a TLS error that names
/// the server, within [`PROMPTLY`]; returns the error's reason.
async fn refusal(server: &ZkServer, ca: &TestCa) -> String {
    let address = server.secure_connect_string().expect("a TLS server has a TLS port");
    let started = Instant::now();
    let outcome = client_of(server, ca).connect().await;
    let took = started.elapsed();
    let why = match outcome {
        Ok(client) => panic!("connected to a server with a wrong certificate: {client:?}"),
        Err(LockError::Tls { message: why, .. }) => why,
        Err(other) => panic!("expected a TLS error naming the certificate problem, got {other:?}"),
    };
    eprintln!("refused after {took:?}: {why}");
    assert!(
        took < PROMPTLY,
        "the refusal took {took:?}, not well before the {PATIENT:?} connect timeout"
    );
    assert!(why.contains(&address), "names the server {address}: {why}");
    why
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_certificate_for_another_host_is_refused_as_a_name_mismatch() {
    let ca = TestCa::new("zklock test CA").unwrap();
    let zk = serving(&ca, &IssueOptions::new().names(["zk1.elsewhere.example"]));
    let why = refusal(&zk, &ca).await;
    assert!(
        why.contains("not valid for `127.0.0.1`") && why.contains("NotValidForName"),
        "{why}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_expired_server_certificate_is_refused_as_expired() {
    let ca = TestCa::new("zklock test CA").unwrap();
    let now = SystemTime::now();
    let expired = IssueOptions::new().valid_from(now - 2 * DAY).valid_until(now - DAY);
    let zk = serving(&ca, &expired);
    let why = refusal(&zk, &ca).await;
    assert!(why.contains("certificate has expired"), "{why}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_certificate_not_valid_yet_is_refused_as_such() {
    let ca = TestCa::new("zklock test CA").unwrap();
    let now = SystemTime::now();
    let not_yet = IssueOptions::new().valid_from(now + DAY).valid_until(now + 2 * DAY);
    let zk = serving(&ca, &not_yet);
    let why = refusal(&zk, &ca).await;
    assert!(why.contains("certificate is not valid yet"), "{why}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_certificate_for_the_address_and_valid_now_is_accepted() {
    let ca = TestCa::new("zklock test CA").unwrap();
    let now = SystemTime::now();
    let right = IssueOptions::new()
        .names(["127.0.0.1"])
        .valid_from(now - DAY)
        .valid_until(now + DAY);
    let zk = serving(&ca, &right);
    let client = client_of(&zk, &ca).connect().await.expect("connect over TLS");
    let guard = client
        .mutex("certificates")
        .unwrap()
        .acquire_timeout(Duration::from_secs(20))
        .await
        .unwrap();
    guard.release().await.unwrap();
}
