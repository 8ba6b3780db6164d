//! Who a contender node belongs to: what zklock writes into its nodes, and what it can read
//! back from the nodes of any client (zklock, Curator, Kazoo).
//!
//! zklock writes a small versioned JSON object into every contender node:
//!
//! ```text
//! {"v":1,"client":"zklock","identity":"orders-api@pod-7","host":"pod-7","pid":4242,
//!  "template":"inventory:{sku}","created_ms":1795300000000}
//! ```
//!
//! `identity` is what the application set with
//! [`LockClientBuilder::identity`](crate::LockClientBuilder::identity) (default
//! `host:pid`); `template` is the name template of an attribute lock (or of a lock given one
//! with [`Lock::with_template`](crate::Lock::with_template)) and is left out otherwise.
//! Readers must ignore fields they do not know; a new field does not change `v`.

use serde::{Deserialize, Serialize};
use std::time::{SystemTime, UNIX_EPOCH};

use crate::LockError;

/// The version of the node data format zklock writes.
const VERSION: u32 = 1;

/// The longest identity a client may set, in bytes.
pub const MAX_IDENTITY_LEN: usize = 256;

/// The holder identity of one client: written, with the time and the lock's template, into
/// every contender node it creates.
#[derive(Debug, Clone)]
pub(crate) struct Holder {
    identity: String,
    host: String,
    pid: u32,
}

impl Holder {
    /// This process, named `identity` (default `host:pid`).
    pub fn new(identity: Option<String>) -> Result<Holder, LockError> {
        let host = host_name();
        let pid = std::process::id();
        let identity = identity.unwrap_or_else(|| format!("{host}:{pid}"));
        if identity.is_empty() || identity.len() > MAX_IDENTITY_LEN {
            return Err(LockError::InvalidConfig(format!(
                "the holder identity must have 1 to {MAX_IDENTITY_LEN} bytes, got {}",
                identity.len()
            )));
        }
        Ok(Holder { identity, host, pid })
    }

    /// The identity written into contender nodes.
    pub fn identity(&self) -> &str {
        &self.identity
    }

    /// The data of a contender node created now for a lock with `template`.
    pub fn node_data(&self, template: Option<&str>) -> Vec<u8> {
        let data = Written {
            v: VERSION,
            client: "zklock",
            identity: &self.identity,
            host: &self.host,
            pid: self.pid,
            template,
            created_ms: SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map_or(0, |d| d.as_millis() as u64),
        };
        serde_json::to_vec(&data).unwrap_or_default()
    }
}

#[derive(Serialize)]
struct Written<'a> {
    v: u32,
    client: &'static str,
    identity: &'a str,
    host: &'a str,
    pid: u32,
    #[serde(skip_serializing_if = "Option::is_none")]
    template: Option<&'a str>,
    created_ms: u64,
}

#[derive(Deserialize)]
struct Read {
    v: u32,
    client: String,
    identity: Option<String>,
    host: Option<String>,
    pid: Option<u32>,
    template: Option<String>,
    created_ms: Option<u64>,
}

fn host_name() -> String {
    let mut buf = [0u8; 256];
    // SAFETY: the buffer is valid for its whole length; gethostname writes at most that many
    // bytes, and the result is read only up to the first NUL within it.
    let ok = unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len()) } == 0;
    let len = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
    match std::str::from_utf8(&buf[..len]) {
        Ok(name) if ok && !name.is_empty() => name.to_owned(),
        _ => "unknown-host".to_owned(),
    }
}

/// Which kind of client made a contender node, as far as its name and data tell.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
#[non_exhaustive]
pub enum ClientKind {
    /// zklock (this crate, any version).
    Zklock,
    /// Apache Curator (a protected `_c_<uuid>-` node without zklock's data).
    Curator,
    /// Kazoo (a `<uuid>__lock__` or `__rlock__` node; `_lock_` in older Kazoo).
    Kazoo,
    /// Something else.
    Unknown,
}

/// What can be read from one contender node: who made it, and for zklock's own nodes the
/// identity, host, process, lock template and creation time it recorded.
///
/// ```
/// use zklock_runtime::{ClientKind, ContenderData};
///
/// let curator = ContenderData::read("_c_0f8a3c2e-6f38-4f4e-9b3b-3e5c1b2d4a11-lock-0000000007", b"10.0.0.7");
/// assert_eq!(curator.client, ClientKind::Curator);
/// assert_eq!(curator.identity.as_deref(), Some("10.0.0.7"));
///
/// let kazoo = ContenderData::read("8d2f6c1e0b5a4f3e9c7d__lock__0000000003", b"worker-3");
/// assert_eq!(kazoo.client, ClientKind::Kazoo);
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct ContenderData {
    /// Who made the node.
    pub client: ClientKind,
    /// zklock: the client's identity. Curator, Kazoo and others: the node's data as text, if it
    /// is text and not empty (Curator stores the client's IP address by default, Kazoo the
    /// lock's identifier).
    pub identity: Option<String>,
    /// zklock: the host the holder ran on.
    pub host: Option<String>,
    /// zklock: the holder's process id.
    pub pid: Option<u32>,
    /// zklock: the name template of an attribute lock (`inventory:{sku}`).
    pub template: Option<String>,
    /// zklock: when the node was created, by the holder's clock, in milliseconds since the
    /// Unix epoch.
    pub created_ms: Option<u64>,
}

impl ContenderData {
    /// Reads the node named `node` (no directory) with data `data`.
    pub fn read(node: &str, data: &[u8]) -> ContenderData {
        let mut read = ContenderData {
            client: ClientKind::Unknown,
            identity: None,
            host: None,
            pid: None,
            template: None,
            created_ms: None,
        };
        if let Some(ours) = serde_json::from_slice::<Read>(data)
            .ok()
            .filter(|r| r.client == "zklock" && r.v >= 1)
        {
            read.client = ClientKind::Zklock;
            read.identity = ours.identity;
            read.host = ours.host;
            read.pid = ours.pid;
            read.template = ours.template;
            read.created_ms = ours.created_ms;
            return read;
        }
        let text = std::str::from_utf8(data).ok().map(str::trim).filter(|t| !t.is_empty());
        // The node data of zklock before the JSON format: `zklock pid=N`.
        if let Some(pid) = text.and_then(|t| t.strip_prefix("zklock pid=")) {
            read.client = ClientKind::Zklock;
            read.pid = pid.parse().ok();
            return read;
        }
        read.identity = text.map(str::to_owned);
        read.client = if node.starts_with("_c_") {
            ClientKind::Curator
        } else if node.contains("__lock__") || node.contains("__rlock__") || node.contains("_lock_") {
            ClientKind::Kazoo
        } else {
            ClientKind::Unknown
        };
        read
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn what_zklock_writes_it_reads_back() {
        let holder = Holder::new(Some("orders-api@pod-7".into())).unwrap();
        let data = holder.node_data(Some("inventory:{sku}"));
        let text = std::str::from_utf8(&data).unwrap();
        assert!(text.starts_with("{\"v\":1,\"client\":\"zklock\""), "{text}");
        let read = ContenderData::read("_c_x-lock-0000000001", &data);
        assert_eq!(read.client, ClientKind::Zklock);
        assert_eq!(read.identity.as_deref(), Some("orders-api@pod-7"));
        assert_eq!(read.template.as_deref(), Some("inventory:{sku}"));
        assert_eq!(read.pid, Some(std::process::id()));
        assert!(read.host.is_some_and(|h| !h.is_empty()));
        assert!(read.created_ms.is_some_and(|t| t > 1_700_000_000_000));

        let plain = ContenderData::read("_c_x-lock-0000000002", &holder.node_data(None));
        assert_eq!(plain.template, None);
        assert!(!std::str::from_utf8(&holder.node_data(None))
            .unwrap()
            .contains("template"));
    }

    #[test]
    fn the_default_identity_is_host_and_pid() {
        let holder = Holder::new(None).unwrap();
        assert_eq!(holder.identity(), format!("{}:{}", host_name(), std::process::id()));
        assert!(Holder::new(Some(String::new())).is_err());
        assert!(Holder::new(Some("x".repeat(MAX_IDENTITY_LEN + 1))).is_err());
    }

    #[test]
    fn other_clients_nodes_are_shown_as_found() {
        let old = ContenderData::read("_c_x-lock-0000000001", b"zklock pid=42");
        assert_eq!((old.client, old.pid), (ClientKind::Zklock, Some(42)));
        let curator = ContenderData::read("_c_5e1d-lock-0000000003", b"172.17.0.2");
        assert_eq!(curator.client, ClientKind::Curator);
        assert_eq!(curator.identity.as_deref(), Some("172.17.0.2"));
        let kazoo = ContenderData::read("0123abcd__rlock__0000000004", b"");
        assert_eq!((kazoo.client, kazoo.identity), (ClientKind::Kazoo, None));
        let old_kazoo = ContenderData::read("0123abcd_lock_0000000005", b"worker");
        assert_eq!(old_kazoo.client, ClientKind::Kazoo);
        let binary = ContenderData::read("member-0000000001", &[0xff, 0xfe]);
        assert_eq!((binary.client, binary.identity), (ClientKind::Unknown, None));
        let json_of_another = ContenderData::read("_c_y-lock-0000000001", br#"{"v":1,"client":"other"}"#);
        assert_eq!(json_of_another.client, ClientKind::Curator);
    }
}
