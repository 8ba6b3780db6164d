//! TLS and SASL together (features `tls` and `sasl`), against real ZooKeeper servers and a
//! three-member ensemble: SASL over TLS works, and a secured session that moves to another
//! member reconnects over TLS, re-authenticates and keeps its lock. Each alone is tested in
//! `tls.rs` and `sasl.rs`.
#![cfg(all(feature = "tls", feature = "sasl"))]

mod support;

use std::time::Duration;

use support::secured::{builder, connect, locks_work, secure_connect, start, trusting, SOON};
use zklock::{LockClient, SessionStatus};
use zklock_testing::{FaultProxy, TestCa, ZkEnsemble, ZkServer};

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
