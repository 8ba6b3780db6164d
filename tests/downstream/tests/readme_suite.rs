use std::sync::OnceLock;
use std::time::Duration;

use tokio::sync::OnceCell;
use zklock::testing::ZkServer;
use zklock::LockClient;

static SERVER: OnceLock<ZkServer> = OnceLock::new();
static CLIENT: OnceCell<LockClient> = OnceCell::const_new();

/// The suite's client, made by whichever test asks first, on a server started for the whole
/// test binary (killed when the binary exits).
async fn client() -> &'static LockClient {
    CLIENT
        .get_or_init(|| async {
            let server = SERVER.get_or_init(|| ZkServer::start().expect("ZooKeeper starts"));
            let client = LockClient::connect(&server.connect_string()).await.expect("connects");
            client.install_default(); // for #[distributed_lock] functions without `client = …`
            client
        })
        .await
}

#[tokio::test]
async fn an_order_is_locked() {
    let lock = client().await.mutex("orders:1").unwrap();
    let guard = lock.acquire_timeout(Duration::from_secs(10)).await.unwrap();
    assert!(lock.is_locked().await.unwrap());
    guard.release().await.unwrap();
}

#[tokio::test]
async fn a_second_holder_waits_for_the_first() {
    let lock = client().await.mutex("orders:2").unwrap();
    let first = lock.acquire_timeout(Duration::from_secs(10)).await.unwrap();
    let second = lock.try_acquire().await.unwrap();
    assert!(second.is_none(), "the lock is held");
    first.release().await.unwrap();
}
