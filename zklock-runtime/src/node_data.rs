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
//! A process that keeps an idle node in its lock cache
//! ([`Lock::with_cache`](crate::Lock::with_cache)) adds `"cached_ms"` (when the node went idle,
//! by its clock) once the node has been idle for a second, and writes the data back without it
//! before a task of the process holds the node again.
//!
//! `identity` is what the application set with
//! [`LockClientBuilder::identity`](crate::LockClientBuilder::identity) (default
//! `host:pid`); `template` is the name template of an attribute lock (or of a lock given one
//! with [`Lock::with_template`](crate::Lock::with_template)) and is left out otherwise.
//! Readers must ignore fields they do not know; a new field does not change `v`. zklock's reader
//! also takes a known field of an unexpected type as absent.

use serde::{Deserialize, Serialize};
use std::time::{SystemTime, UNIX_EPOCH};

use crate::error::LockError;

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
            return Err(LockError::invalid_config(format!(
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
            created_ms: now_ms(),
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

/// What is read from a zklock node. `v` and `client` tell zklock's data; the other fields are
/// read leniently, since a node may have been written by another version.
#[derive(Deserialize)]
struct Read {
    v: u32,
    client: String,
    #[serde(default, deserialize_with = "lenient")]
    identity: Option<String>,
    #[serde(default, deserialize_with = "lenient")]
    host: Option<String>,
    #[serde(default, deserialize_with = "lenient")]
    pid: Option<u32>,
    #[serde(default, deserialize_with = "lenient")]
    template: Option<String>,
    #[serde(default, deserialize_with = "lenient")]
    created_ms: Option<u64>,
    #[serde(default, deserialize_with = "lenient")]
    cached_ms: Option<u64>,
}

/// The key of the idle mark ([`mark_idle`]).
const CACHED_KEY: &str = "cached_ms";

/// The data of a zklock node `data` with the mark that its process keeps it idle in its cache
/// since `since_ms` (ms since the Unix epoch); `None` for data that is not zklock's JSON (a
/// revocation request, another client's, an older format), which is left alone.
pub(crate) fn mark_idle(data: &[u8], since_ms: u64) -> Option<Vec<u8>> {
    let mut fields = serde_json::from_slice::<serde_json::Map<String, serde_json::Value>>(data).ok()?;
    if fields.get("client").and_then(serde_json::Value::as_str) != Some("zklock") {
        return None;
    }
    fields.insert(CACHED_KEY.to_owned(), since_ms.into());
    serde_json::to_vec(&fields).ok()
}

/// Milliseconds since the Unix epoch by this host's clock (0 before it).
pub(crate) fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// A field of an unexpected type reads as absent instead of making the whole node look like
/// another client's.
fn lenient<'de, D, T>(field: D) -> Result<Option<T>, D::Error>
where
    D: serde::Deserializer<'de>,
    T: serde::de::DeserializeOwned,
{
    let value = serde_json::Value::deserialize(field)?;
    Ok(T::deserialize(value).ok())
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
    /// Someone asked the holder to release (revocation: `__REVOKE__` written over the node's
    /// data, so who made the node can no longer be read from it).
    pub revocation_requested: bool,
    /// zklock: the node is kept idle in its process's lock cache
    /// ([`Lock::with_cache`](crate::Lock::with_cache)) since then, by the holder's clock, in
    /// milliseconds since the Unix epoch: no task holds the lock; the process gives the node up
    /// as soon as another contender queues, or takes it again without a request. Set once the
    /// node has been idle for a second (a node idle for less reads as held).
    pub cached_since_ms: Option<u64>,
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
            revocation_requested: false,
            cached_since_ms: None,
        };
        if data == REVOKE_MESSAGE {
            // The request replaced what the holder wrote: zklock and Curator nodes look alike now.
            read.revocation_requested = true;
            if !node.starts_with("_c_") {
                read.client = kind_by_name(node);
            }
            return read;
        }
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
            read.cached_since_ms = ours.cached_ms;
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
        read.client = kind_by_name(node);
        read
    }
}

/// Who made a node without zklock's data, by its name: Curator's protected prefix, Kazoo's
/// lock names, or someone else.
fn kind_by_name(node: &str) -> ClientKind {
    if node.starts_with("_c_") {
        ClientKind::Curator
    } else if node.contains("__lock__") || node.contains("__rlock__") || node.contains("_lock_") {
        ClientKind::Kazoo
    } else {
        ClientKind::Unknown
    }
}

/// What a revoker writes into a holder's node: Curator's `LockInternals.REVOKE_MESSAGE`.
pub(crate) const REVOKE_MESSAGE: &[u8] = b"__REVOKE__";

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use serde_json::{json, Map, Value};

    #[test]
    fn a_revoked_node_says_so_and_names_no_holder() {
        let read = ContenderData::read("_c_x-lock-0000000001", REVOKE_MESSAGE);
        assert!(read.revocation_requested);
        assert_eq!((read.client, read.identity), (ClientKind::Unknown, None));
        let kazoo = ContenderData::read("abc__lock__0000000002", REVOKE_MESSAGE);
        assert_eq!(kazoo.client, ClientKind::Kazoo);
        assert!(!ContenderData::read("_c_x-lock-0000000003", b"10.0.0.7").revocation_requested);
    }

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

    /// Such a node used to be taken for another client's, its JSON shown as the identity.
    #[test]
    fn a_field_of_another_type_does_not_hide_a_zklock_node() {
        let read = ContenderData::read("", br#"{"v":1,"client":"zklock","created_ms":[]}"#);
        assert_eq!(
            (read.client, read.identity, read.created_ms),
            (ClientKind::Zklock, None, None)
        );
        let read = ContenderData::read("", br#"{"v":2,"client":"zklock","identity":"a","pid":"7","next":{}}"#);
        assert_eq!(
            (read.client, read.identity, read.pid),
            (ClientKind::Zklock, Some("a".into()), None)
        );
    }

    #[test]
    fn the_idle_mark_is_added_to_zklock_data_only() {
        let holder = Holder::new(Some("a".into())).unwrap();
        let data = holder.node_data(Some("inventory:{sku}"));
        assert_eq!(ContenderData::read("lock-0000000001", &data).cached_since_ms, None);
        let marked = mark_idle(&data, 1_795_300_000_000).expect("zklock data takes the mark");
        let read = ContenderData::read("lock-0000000001", &marked);
        assert_eq!(read.cached_since_ms, Some(1_795_300_000_000));
        assert_eq!(
            (read.client, read.identity.as_deref(), read.template.as_deref()),
            (ClientKind::Zklock, Some("a"), Some("inventory:{sku}")),
            "the rest reads as before"
        );
        for other in [
            REVOKE_MESSAGE,
            b"10.0.0.7",
            br#"{"v":1,"client":"other"}"#,
            b"zklock pid=7",
        ] {
            assert_eq!(mark_idle(other, 1), None, "{:?}", String::from_utf8_lossy(other));
        }
    }

    /// Any JSON value, nested a little.
    fn json_value() -> impl Strategy<Value = Value> {
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::from),
            any::<i64>().prop_map(Value::from),
            any::<u64>().prop_map(Value::from),
            any::<f64>().prop_map(Value::from),
            any::<String>().prop_map(Value::from),
        ];
        leaf.prop_recursive(3, 16, 4, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..4).prop_map(Value::from),
                prop::collection::btree_map("[a-z_]{1,8}", inner, 0..4)
                    .prop_map(|m| Value::Object(m.into_iter().collect())),
            ]
        })
    }

    /// The node data of zklock's format with each field present, absent, or of a wrong type,
    /// and with keys of a later version.
    fn zklock_data() -> impl Strategy<Value = Map<String, Value>> {
        let field = || prop::option::of(json_value());
        (
            1..=u64::from(u32::MAX),
            [field(), field(), field(), field(), field(), field()],
            prop::collection::btree_map("[a-z_]{1,12}", json_value(), 0..4),
        )
            .prop_map(|(v, fields, extra)| {
                let mut data: Map<String, Value> = extra.into_iter().collect();
                data.insert("v".into(), json!(v));
                data.insert("client".into(), json!("zklock"));
                for (key, value) in ["identity", "host", "pid", "template", "created_ms", "cached_ms"]
                    .into_iter()
                    .zip(fields)
                {
                    match value {
                        Some(value) => data.insert(key.into(), value),
                        None => data.remove(key),
                    };
                }
                data
            })
    }

    fn node_name() -> impl Strategy<Value = String> {
        prop_oneof![
            any::<String>(),
            "(_c_[0-9a-f-]{8,36}-)?(lock-|__READ__|__WRIT__|[0-9a-f]{4}__r?lock__|[0-9a-f]{4}_lock_)[0-9]{10}",
        ]
    }

    proptest! {
        #[test]
        fn what_any_identity_writes_reads_back(identity in "\\PC{1,64}|[\\x00-\\x7f]{1,256}", template in prop::option::of(any::<String>())) {
            let holder = Holder::new(Some(identity.clone())).unwrap();
            let read = ContenderData::read("_c_x-lock-0000000001", &holder.node_data(template.as_deref()));
            prop_assert_eq!(read.client, ClientKind::Zklock);
            prop_assert_eq!(read.identity, Some(identity));
            prop_assert_eq!(read.template, template);
            prop_assert_eq!(read.pid, Some(std::process::id()));
        }

        /// A zklock node is recognised by its `v` and `client` alone: keys a later version adds
        /// are skipped, and a known field of an unexpected type reads as absent.
        #[test]
        fn zklock_data_is_recognised_whatever_its_fields(node in node_name(), data in zklock_data()) {
            let read = ContenderData::read(&node, &serde_json::to_vec(&data).unwrap());
            prop_assert_eq!(read.client, ClientKind::Zklock);
            let text = |key: &str| data.get(key).and_then(Value::as_str).map(str::to_owned);
            let number = |key: &str| data.get(key).and_then(Value::as_u64);
            prop_assert_eq!(read.identity, text("identity"));
            prop_assert_eq!(read.host, text("host"));
            prop_assert_eq!(read.template, text("template"));
            prop_assert_eq!(read.pid, number("pid").and_then(|pid| u32::try_from(pid).ok()));
            prop_assert_eq!(read.created_ms, number("created_ms"));
            prop_assert_eq!(read.cached_since_ms, number("cached_ms"));
        }

        /// Other bytes (another client's, damaged, binary) are shown as found: the trimmed text
        /// as the identity, nothing else claimed.
        #[test]
        fn other_data_is_shown_as_text(node in node_name(), data in prop_oneof![
            any::<Vec<u8>>(),
            any::<String>().prop_map(String::into_bytes),
            json_value().prop_map(|v| serde_json::to_vec(&v).unwrap()),
        ]) {
            let read = ContenderData::read(&node, &data);
            let text = std::str::from_utf8(&data).ok().map(str::trim).filter(|t| !t.is_empty());
            if read.client == ClientKind::Zklock {
                let ours = serde_json::from_slice::<Value>(&data).is_ok_and(|v| v["client"] == "zklock")
                    || text.is_some_and(|t| t.starts_with("zklock pid="));
                prop_assert!(ours, "{:?}", read);
            } else {
                prop_assert_eq!(read.identity.as_deref(), text);
                prop_assert_eq!((read.host, read.pid, read.template, read.created_ms, read.cached_since_ms), (None, None, None, None, None));
            }
        }
    }
}
