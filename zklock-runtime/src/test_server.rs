//! What the in-crate tests against a real ZooKeeper share: a server of their own, a lock client
//! on it, and a raw client of the library to look at (or change) the server's state with.

use std::time::Duration;

use zklock_testing::ZkServer;
use zookeeper_client as zk;

use crate::client::LockClient;
use crate::connection::session::Session;

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

/// A session's driver thread, blocked: to the session that is a paused process (no beat, no
/// connection traffic). It runs again when this is dropped (its sender gone, the blocked
/// receive returns), also when the test panics.
pub(crate) struct Stalled {
    _thaw: std::sync::mpsc::Sender<()>,
}

impl Stalled {
    /// Lets the driver run again.
    pub fn thaw(self) {}
}

/// Blocks `session`'s driver thread; returns once the block has begun.
pub(crate) async fn stall_driver(session: &Session) -> Stalled {
    let (begun, blocked) = std::sync::mpsc::channel();
    let (thaw, thawed) = std::sync::mpsc::channel::<()>();
    session.runtime.spawn(async move {
        let _ = begun.send(());
        let _ = thawed.recv();
    });
    tokio::task::spawn_blocking(move || blocked.recv())
        .await
        .expect("join")
        .expect("the driver blocks");
    Stalled { _thaw: thaw }
}
