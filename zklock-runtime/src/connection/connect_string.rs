//! The connect string: checked when a client is built, resolved before a session is opened, so
//! a typo or an unknown host name is a clear error at once rather than a connect timeout.
//!
//! ZooKeeper's format: `host[:port][,host[:port]…][/chroot]`, where `host` is a host name, an
//! IPv4 address or a bracketed IPv6 address (`[::1]:2181`), the port defaults to 2181, and an
//! address may carry the client library's scheme prefix (`tcp://`, `tcp+tls://`).

use std::net::{Ipv4Addr, Ipv6Addr};
use std::time::Duration;

use crate::error::LockError;

const DEFAULT_PORT: u16 = 2181;

/// One server address of a connect string.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Server {
    pub host: String,
    pub port: u16,
    /// `Some(true)` for `tcp+tls://`, `Some(false)` for `tcp://`, `None` without a scheme (the
    /// client's TLS setting decides).
    pub tls: Option<bool>,
}

impl Server {
    /// Whether the host is an address literal, which needs no lookup.
    fn is_literal(&self) -> bool {
        self.host.parse::<Ipv4Addr>().is_ok() || self.host.parse::<Ipv6Addr>().is_ok()
    }
}

/// Checks a connect string and returns its servers; the error names what is wrong.
pub(crate) fn parse(connect: &str) -> Result<Vec<Server>, LockError> {
    let bad = |why: String| Err(LockError::invalid_config(format!("connect string {connect:?}: {why}")));
    if connect.trim().is_empty() {
        return bad("it is empty".into());
    }
    // The chroot starts at the first `/` that follows the addresses (after any scheme's `//`).
    let (hosts, chroot) = split_chroot(connect);
    if let Some(chroot) = chroot {
        if chroot.len() < 2 || chroot.ends_with('/') || chroot.contains("//") {
            return bad(format!(
                "the chroot {chroot:?} is not an absolute path like `/apps/shop`"
            ));
        }
    }
    let mut servers = Vec::new();
    for address in hosts.split(',') {
        let (plain, tls) = if let Some(rest) = address.strip_prefix("tcp+tls://") {
            (rest, Some(true))
        } else if let Some(rest) = address.strip_prefix("tcp://") {
            (rest, Some(false))
        } else {
            (address, None)
        };
        match parse_address(plain) {
            Ok(server) => servers.push(Server { tls, ..server }),
            Err(why) => return bad(format!("{address:?} is not `host[:port]`: {why}")),
        }
    }
    Ok(servers)
}

fn split_chroot(connect: &str) -> (&str, Option<&str>) {
    let mut from = 0;
    for (scheme_end, _) in connect.match_indices("://") {
        from = from.max(scheme_end + 3);
    }
    match connect[from..].find('/') {
        Some(i) => (&connect[..from + i], Some(&connect[from + i..])),
        None => (connect, None),
    }
}

fn parse_address(address: &str) -> Result<Server, &'static str> {
    let (host, port) = if let Some(rest) = address.strip_prefix('[') {
        let (host, rest) = rest.split_once(']').ok_or("an IPv6 address needs its closing `]`")?;
        host.parse::<Ipv6Addr>()
            .map_err(|_| "not an IPv6 address between `[` and `]`")?;
        match rest {
            "" => (host, None),
            rest => (host, Some(rest.strip_prefix(':').ok_or("expected `:port` after `]`")?)),
        }
    } else {
        match address.rsplit_once(':') {
            Some((host, port)) => (host, Some(port)),
            None => (address, None),
        }
    };
    let port = match port {
        None => DEFAULT_PORT,
        Some(port) => match port.parse::<u16>() {
            Ok(port) if port > 0 => port,
            _ => return Err("the port must be a number from 1 to 65535"),
        },
    };
    if host.is_empty() {
        return Err("the host is empty");
    }
    if !address.starts_with('[') && !is_host_name(host) {
        return Err("the host is neither a host name nor an IP address");
    }
    Ok(Server {
        host: host.to_owned(),
        port,
        tls: None,
    })
}

/// A DNS host name (letters, digits, `-` and `_` in dot-separated labels) or an IPv4 address.
fn is_host_name(host: &str) -> bool {
    host.len() <= 253
        && host.split('.').all(|label| {
            !label.is_empty()
                && label.len() <= 63
                && label
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
        })
}

/// Looks up every host name of `servers`; fails only when no server at all can be resolved,
/// naming each lookup failure. Address literals need no lookup.
pub(crate) async fn resolve(connect: &str, servers: &[Server]) -> Result<(), LockError> {
    if servers.iter().any(Server::is_literal) {
        return Ok(());
    }
    let mut failures = Vec::new();
    for server in servers {
        match tokio::net::lookup_host((server.host.as_str(), server.port)).await {
            Ok(addrs) => {
                if addrs.count() > 0 {
                    return Ok(());
                }
                failures.push(format!("{}: no address", server.host));
            }
            Err(err) => failures.push(format!("{}: {err}", server.host)),
        }
    }
    Err(LockError::connection(format!(
        "cannot resolve any server of {connect:?} ({})",
        failures.join("; ")
    )))
}

/// How long one probe of a server waits for its TCP connect to be accepted or refused.
const PROBE_TIMEOUT: Duration = Duration::from_secs(1);

/// The pause before the second look at servers that all refused.
const PROBE_RETRY: Duration = Duration::from_millis(300);

/// What a TCP connect to one server came to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Reach {
    /// Something listens there.
    Accepted,
    /// Nothing does, or the name does not resolve: said at once, so waiting longer will not help
    /// until a server comes up.
    Refused(String),
    /// No answer within the probe's time: a slow or filtered network, worth the full wait.
    NoAnswer,
}

/// One TCP connect to every server, together.
pub(crate) async fn probe(servers: &[Server]) -> Vec<(String, Reach)> {
    futures_util::future::join_all(servers.iter().map(|server| async move {
        let address = format!("{}:{}", server.host, server.port);
        let connecting = tokio::net::TcpStream::connect((server.host.as_str(), server.port));
        let reach = match tokio::time::timeout(PROBE_TIMEOUT, connecting).await {
            Ok(Ok(_)) => Reach::Accepted,
            Ok(Err(err)) => Reach::Refused(err.to_string()),
            Err(_) => Reach::NoAnswer,
        };
        (address, reach)
    }))
    .await
}

/// Each server and what reaching it came to, for error messages.
pub(crate) fn describe(probed: &[(String, Reach)]) -> String {
    let each: Vec<String> = probed
        .iter()
        .map(|(address, reach)| match reach {
            Reach::Accepted => format!("{address}: accepts connections"),
            Reach::Refused(why) => format!("{address}: {why}"),
            Reach::NoAnswer => format!("{address}: no answer within {PROBE_TIMEOUT:?}"),
        })
        .collect();
    each.join("; ")
}

/// Resolves, with the error to report, once every server of `connect` has refused the
/// connection (or failed to resolve) in two looks a moment apart: the ensemble is down, and a
/// connect should say so now instead of at its timeout. Pending for ever otherwise, so a
/// connect that is merely slow keeps its full timeout.
/// Each look is kept in `contact`, for the error of a connect that times out instead.
pub(crate) async fn all_refused(connect: &str, contact: &Contact) -> crate::error::LockError {
    // A healthy connect is done long before this: no probe connection for it.
    tokio::time::sleep(PROBE_RETRY).await;
    let mut refused_before = false;
    loop {
        let probed = probe(&contact.servers).await;
        contact.keep(&probed);
        let refused = probed.iter().all(|(_, reach)| matches!(reach, Reach::Refused(_)));
        if refused && refused_before {
            return crate::error::LockError::connection(format!(
                "no server of {connect:?} accepts connections ({})",
                describe(&probed)
            ));
        }
        refused_before = refused;
        tokio::time::sleep(if refused { PROBE_RETRY } else { PROBE_TIMEOUT }).await;
    }
}

/// A client's servers, and what it last learnt about reaching them while it was not connected,
/// for the "cannot reach ZooKeeper" errors of acquisitions that waited meanwhile.
pub(crate) struct Contact {
    servers: Vec<Server>,
    found: std::sync::Mutex<Option<String>>,
}

impl Contact {
    pub fn new(servers: Vec<Server>) -> Contact {
        Contact {
            servers,
            found: std::sync::Mutex::new(None),
        }
    }

    /// The connect string's servers, checked when the client was built.
    pub fn servers(&self) -> &[Server] {
        &self.servers
    }

    /// Probes the servers and keeps what it found.
    pub async fn refresh(&self) {
        self.keep(&probe(&self.servers).await);
    }

    fn keep(&self, probed: &[(String, Reach)]) {
        *self.found.lock().unwrap_or_else(|e| e.into_inner()) = Some(describe(probed));
    }

    /// Probes the servers every second, for as long as it is polled (while disconnected).
    pub async fn keep_looking(&self) {
        loop {
            self.refresh().await;
            tokio::time::sleep(PROBE_TIMEOUT).await;
        }
    }

    /// What was found, as a clause to append to an error message (empty if nothing yet).
    pub fn clause(&self) -> String {
        match &*self.found.lock().unwrap_or_else(|e| e.into_inner()) {
            Some(found) => format!("; last look at the servers: {found}"),
            None => String::new(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn hosts(connect: &str) -> Vec<(String, u16)> {
        parse(connect)
            .unwrap_or_else(|e| panic!("{connect:?}: {e}"))
            .into_iter()
            .map(|s| (s.host, s.port))
            .collect()
    }

    #[test]
    fn accepts_what_zookeeper_accepts() {
        assert_eq!(hosts("127.0.0.1:2181"), [("127.0.0.1".into(), 2181)]);
        assert_eq!(hosts("zk1,zk2:2182/apps/shop").len(), 2);
        assert_eq!(hosts("zk1")[0].1, 2181);
        assert_eq!(hosts("[::1]:2190"), [("::1".into(), 2190)]);
        assert_eq!(
            hosts("tcp+tls://zk.example.com:2281"),
            [("zk.example.com".into(), 2281)]
        );
        assert_eq!(hosts("my_host-1.local:1/chroot"), [("my_host-1.local".into(), 1)]);
    }

    #[test]
    fn refuses_what_is_no_connect_string() {
        for bad in [
            "",
            "   ",
            "not a connect string!!",
            ":::",
            "host:",
            "host:0",
            "host:99999",
            "a,,b",
            "[::1",
            "[zz]:1",
            "host:2181/",
            "host:2181//x",
            "ho st:2181",
        ] {
            let err = parse(bad).expect_err(bad);
            assert!(matches!(err, LockError::InvalidConfig { .. }), "{bad:?}: {err:?}");
        }
    }

    /// How a server is written in a connect string, port and scheme included.
    fn written(server: &Server, port_written: bool) -> String {
        let scheme = match server.tls {
            Some(true) => "tcp+tls://",
            Some(false) => "tcp://",
            None => "",
        };
        let host = if server.host.contains(':') {
            format!("[{}]", server.host)
        } else {
            server.host.clone()
        };
        if port_written {
            format!("{scheme}{host}:{}", server.port)
        } else {
            format!("{scheme}{host}")
        }
    }

    /// A server as a user would write it: a host name, an IPv4 or an IPv6 address, with or
    /// without port and scheme; the flag says whether the port is written.
    fn server() -> impl Strategy<Value = (Server, bool)> {
        let host = prop_oneof![
            prop::collection::vec("[a-zA-Z0-9_-]{1,20}", 1..4).prop_map(|labels| labels.join(".")),
            any::<Ipv4Addr>().prop_map(|ip| ip.to_string()),
            any::<Ipv6Addr>().prop_map(|ip| ip.to_string()),
        ];
        let tls = prop_oneof![Just(None), Just(Some(false)), Just(Some(true))];
        (host, prop::option::of(1..=u16::MAX), tls).prop_map(|(host, port, tls)| {
            let server = Server {
                host,
                port: port.unwrap_or(DEFAULT_PORT),
                tls,
            };
            (server, port.is_some())
        })
    }

    proptest! {
        #[test]
        fn well_formed_connect_strings_give_their_servers(
            servers in prop::collection::vec(server(), 1..5),
            chroot in prop::option::of(prop::collection::vec("[a-z0-9._-]{1,8}", 1..3)),
        ) {
            let mut connect: Vec<String> = servers.iter().map(|(s, port)| written(s, *port)).collect();
            if let Some(chroot) = &chroot {
                connect.last_mut().unwrap().push_str(&format!("/{}", chroot.join("/")));
            }
            let connect = connect.join(",");
            let expected: Vec<Server> = servers.into_iter().map(|(s, _)| s).collect();
            prop_assert_eq!(parse(&connect).map_err(|e| e.to_string()), Ok(expected));
        }

        /// Any text: servers that, written out again, read back the same; or a configuration
        /// error that quotes the text.
        #[test]
        fn any_text_gives_servers_or_says_why(connect in prop_oneof![
            any::<String>(),
            "((tcp|tcp\\+tls)://)?([a-z0-9.:_-]{0,12}|\\[[0-9a-f:.]{0,10}\\]?(:[0-9+-]{0,6})?)(,[a-z0-9.:\\[\\]]{0,12}){0,2}(/[a-z/.]{0,6})?",
        ]) {
            match parse(&connect) {
                Ok(servers) => {
                    prop_assert!(!servers.is_empty());
                    let again: Vec<String> = servers.iter().map(|s| written(s, true)).collect();
                    let again = again.join(",");
                    prop_assert_eq!(parse(&again).map_err(|e| e.to_string()), Ok(servers), "{:?}", again);
                }
                Err(LockError::InvalidConfig { message, .. }) => prop_assert!(message.contains(&format!("{connect:?}")), "{message}"),
                Err(other) => prop_assert!(false, "{other:?}"),
            }
        }
    }
}
