//! The settings a client keeps, as its builder checked them.

use std::time::Duration;

use zookeeper_client as zk;

use crate::connection::secure::Secured;
use crate::node_data::Holder;

/// A client's settings ([`LockClientBuilder`](crate::client::builder::LockClientBuilder)
/// makes them, and checks them first).
pub(crate) struct Config {
    pub connect: String,
    pub session_timeout: Duration,
    pub connect_timeout: Option<Duration>,
    pub namespace: String,
    pub auth: Vec<(String, Vec<u8>)>,
    pub acls: Vec<zk::Acl>,
    pub loss_after: Option<Duration>,
    pub max_local_handoffs: u32,
    /// Lock directories each session remembers for the listing-free fast path.
    pub fast_path_dirs: usize,
    /// Who this client's contender nodes say they belong to.
    pub holder: Holder,
    /// The wait of a `#[distributed_lock]` function that gives no `timeout`.
    pub default_timeout: Duration,
    /// The `max_hold` of a `#[distributed_lock]` function that gives none.
    pub default_max_hold: Option<Duration>,
    /// How long an idle node of a mutex or write lock is kept for this process, unless the
    /// lock says otherwise ([`LockClientBuilder::default_cache`](crate::client::builder::LockClientBuilder::default_cache)).
    pub default_cache: Option<Duration>,
    /// TLS and SASL settings, checked.
    pub security: Secured,
    /// The runtime the sessions run on, when the caller gave one
    /// ([`LockClientBuilder::runtime`](crate::client::builder::LockClientBuilder::runtime)); a driver thread of the client's own otherwise.
    pub runtime: Option<tokio::runtime::Handle>,
}

impl Config {
    /// The longest wait for a session to open (or to be seen closed).
    pub fn connect_limit(&self) -> Duration {
        self.connect_timeout.unwrap_or(self.session_timeout)
    }

    pub fn acls(&self) -> zk::Acls<'_> {
        if self.acls.is_empty() {
            zk::Acls::anyone_all()
        } else {
            zk::Acls::new(&self.acls)
        }
    }
}
