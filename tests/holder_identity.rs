//! Who holds a lock, as an operator sees it: every contender node carries the holder's
//! identity, host, process, creation time and (for attribute locks) the lock's template, and
//! the nodes of other clients are recognised for what they are.

mod support;

use std::time::Duration;

use support::{raw, server, AppError};
use zklock::{distributed_lock, ClientKind, ContenderData, LockClient};
use zklock_testing::curator::CuratorPeer;

const SOON: Duration = Duration::from_secs(20);

async fn only_contender(raw: &zklock::zk::Client, dir: &str) -> ContenderData {
    let children = raw.list_children(dir).await.expect("list");
    assert_eq!(children.len(), 1, "{children:?}");
    let (data, _) = raw.get_data(&format!("{dir}/{}", children[0])).await.expect("read");
    ContenderData::read(&children[0], &data)
}

struct Orders {
    locks: LockClient,
    raw: zklock::zk::Client,
}

impl Orders {
    #[distributed_lock("order:{id}", client = self.locks)]
    async fn inspect_own_node(&self, id: u32) -> Result<ContenderData, AppError> {
        Ok(only_contender(&self.raw, &format!("/zklock/order:{id}")).await)
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn contender_nodes_name_their_holder_and_template() {
    let zk = server();
    let locks = LockClient::builder(zk.connect_string())
        .identity("orders-api@pod-7")
        .connect()
        .await
        .unwrap();
    assert_eq!(locks.identity(), "orders-api@pod-7");
    let orders = Orders {
        locks: locks.clone(),
        raw: raw(&zk.connect_string()).await,
    };
    let before = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64;
    let seen = orders.inspect_own_node(42).await.unwrap();
    assert_eq!(seen.client, ClientKind::Zklock);
    assert_eq!(seen.identity.as_deref(), Some("orders-api@pod-7"));
    assert_eq!(seen.template.as_deref(), Some("order:{id}"));
    assert_eq!(seen.pid, Some(std::process::id()));
    assert!(seen.host.as_deref().is_some_and(|h| !h.is_empty()));
    assert!(seen.created_ms.is_some_and(|t| t + 1000 >= before), "{seen:?}");

    // A lock taken through the guard API has no template unless given one; the default
    // identity is host:pid.
    let plain = LockClient::connect(&zk.connect_string()).await.unwrap();
    let guard = plain.mutex("plain").unwrap().acquire().await.unwrap();
    let seen = only_contender(&orders.raw, "/zklock/plain").await;
    assert_eq!(seen.template, None);
    let host = seen.host.clone().unwrap();
    assert_eq!(seen.identity, Some(format!("{host}:{}", std::process::id())));
    drop(guard);

    let labelled = plain.mutex("sku-9").unwrap().with_template("sku-{n}");
    let guard = labelled.acquire().await.unwrap();
    let seen = only_contender(&orders.raw, "/zklock/sku-9").await;
    assert_eq!(seen.template.as_deref(), Some("sku-{n}"));
    drop(guard);

    assert!(matches!(
        LockClient::builder(zk.connect_string()).identity("").build(),
        Err(zklock::LockError::InvalidConfig { .. })
    ));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_curator_contender_is_recognised() {
    let zk = server();
    let peer = CuratorPeer::start(&zk.connect_string()).await.expect("Curator peer");
    peer.mutex("c", "/zklock/curator-held").await.unwrap();
    peer.acquire("c", Some(SOON)).unwrap();
    peer.wait_acquired("c", SOON).await.unwrap();
    let raw = raw(&zk.connect_string()).await;
    let seen = only_contender(&raw, "/zklock/curator-held").await;
    assert_eq!(seen.client, ClientKind::Curator, "{seen:?}");
    // Curator writes the client's IP address into lock nodes by default.
    let ip = seen.identity.expect("Curator's node data");
    assert!(ip.parse::<std::net::IpAddr>().is_ok(), "{ip}");
    peer.release("c").await.unwrap();
}
