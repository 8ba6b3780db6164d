//! What the in-crate tests against a real ZooKeeper share: a server of their own, a lock client
//! on it, and a raw client of the library to look at (or change) the server's state with.

use std::time::Duration;

use zklock_testing::ZkServer;
use zookeeper_client as zk;

use crate::client::LockClient;

/// A server, a lock client whose sessions ask for `session_timeout`, and a raw view.
pub(crate) struct Setup {
    pub server: ZkServer,
    pub client: LockClient,
    pub view: zk::Client,
}

/// Starts a server and connects both clients to it.
pub(crate) async fn setup(session_timeout: Duration) -> Setup {
    let server = ZkServer::start().expect("ZooKeeper starts");
    let client = LockClient::builder(server.connect_string())
        .session_timeout(session_timeout)
        .connect()
        .await
        .expect("the lock client connects");
    let view = zk::Client::connector()
        .with_session_timeout(Duration::from_secs(4))
        .connect(&server.connect_string())
        .await
        .expect("the raw client connects");
    Setup { server, client, view }
}
