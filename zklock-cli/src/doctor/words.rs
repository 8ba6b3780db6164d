//! ZooKeeper's four-letter words (`ruok`, `srvr`, `conf`) sent to each server of the connect
//! string over plain TCP, and what `doctor` reads from their answers.

use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// ZooKeeper's default client port, for a connect string address without one.
const DEFAULT_PORT: u16 = 2181;
/// The most of an answer that is kept; `conf` and `srvr` answers are well under 4 KiB.
const MAX_ANSWER: u64 = 64 * 1024;

/// One server address of the connect string.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Address {
    pub host: String,
    pub port: u16,
}

impl std::fmt::Display for Address {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.host.contains(':') {
            write!(f, "[{}]:{}", self.host, self.port)
        } else {
            write!(f, "{}:{}", self.host, self.port)
        }
    }
}

/// The servers of a connect string (`host[:port],…[/chroot]`, addresses possibly prefixed
/// with `tcp://` or `tcp+tls://`). Lenient: an address it cannot read is left out, as the
/// client itself reports a malformed connect string.
pub fn addresses(connect: &str) -> Vec<Address> {
    let mut hosts = connect;
    let mut from = 0;
    for (scheme_end, _) in connect.match_indices("://") {
        from = from.max(scheme_end + 3);
    }
    if let Some(i) = connect[from..].find('/') {
        hosts = &connect[..from + i];
    }
    hosts
        .split(',')
        .filter_map(|address| {
            let address = address.trim();
            let plain = address
                .strip_prefix("tcp+tls://")
                .or_else(|| address.strip_prefix("tcp://"))
                .unwrap_or(address);
            let (host, port) = if let Some(rest) = plain.strip_prefix('[') {
                let (host, rest) = rest.split_once(']')?;
                (host, rest.strip_prefix(':'))
            } else {
                match plain.rsplit_once(':') {
                    Some((host, port)) => (host, Some(port)),
                    None => (plain, None),
                }
            };
            let port = match port {
                Some(port) => port.parse().ok().filter(|p| *p > 0)?,
                None => DEFAULT_PORT,
            };
            (!host.is_empty()).then(|| Address {
                host: host.to_owned(),
                port,
            })
        })
        .collect()
}

/// What a server said to one word.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Answer {
    /// The server answered.
    Text(String),
    /// The server refused it: the word is not in its `4lw.commands.whitelist`.
    NotAllowed,
    /// No answer: why (refused, timed out, closed without a word, …).
    None(String),
}

impl Answer {
    pub fn text(&self) -> Option<&str> {
        match self {
            Answer::Text(text) => Some(text),
            _ => None,
        }
    }
}

/// The answers of one server.
#[derive(Debug, Clone)]
pub struct Probe {
    pub address: Address,
    pub ruok: Answer,
    pub srvr: Answer,
    pub conf: Answer,
}

impl Probe {
    /// A server none of whose words got an answer, for `why`.
    pub fn unanswered(address: Address, why: String) -> Probe {
        let none = Answer::None(why);
        Probe {
            address,
            ruok: none.clone(),
            srvr: none.clone(),
            conf: none,
        }
    }

    /// The server's version, from `srvr` (`Zookeeper version: 3.8.4-…, built on …`).
    pub fn version(&self) -> Option<&str> {
        let line = self
            .srvr
            .text()?
            .lines()
            .find_map(|l| l.strip_prefix("Zookeeper version:"))?;
        let version = line.trim().split([',', ' ']).next()?;
        (!version.is_empty()).then_some(version)
    }

    /// The server's mode, from `srvr`: `standalone`, `leader`, `follower`, `observer`.
    pub fn mode(&self) -> Option<&str> {
        self.srvr
            .text()?
            .lines()
            .find_map(|l| l.strip_prefix("Mode:"))
            .map(str::trim)
    }

    /// A `key=value` setting from `conf`, in milliseconds or ticks as the server states it.
    pub fn setting(&self, key: &str) -> Option<u64> {
        self.conf.text()?.lines().find_map(|line| {
            let (k, v) = line.split_once('=')?;
            (k.trim() == key).then(|| v.trim().parse().ok()).flatten()
        })
    }
}

/// Asks the server at `address` `ruok`, `srvr` and `conf`, each bounded by `timeout`.
pub async fn probe(address: Address, timeout: Duration) -> Probe {
    let ruok = word(&address, "ruok", timeout).await;
    // A server that did not answer at all (no connection, a TLS port) will not answer the next
    // two either; one that refused `ruok` may still allow them.
    let (srvr, conf) = if matches!(ruok, Answer::None(_)) {
        (ruok.clone(), ruok.clone())
    } else {
        (
            word(&address, "srvr", timeout).await,
            word(&address, "conf", timeout).await,
        )
    };
    Probe {
        address,
        ruok,
        srvr,
        conf,
    }
}

/// Sends one four-letter word and reads the answer until the server closes the connection.
async fn word(address: &Address, word: &str, timeout: Duration) -> Answer {
    let exchange = async {
        let mut stream = TcpStream::connect((address.host.as_str(), address.port))
            .await
            .map_err(|e| format!("cannot connect: {e}"))?;
        stream
            .write_all(word.as_bytes())
            .await
            .map_err(|e| format!("cannot send it: {e}"))?;
        // Nothing more comes: a TLS port then gives up at once instead of waiting for the rest
        // of a record, and a plain one answers the word as usual.
        let _ = stream.shutdown().await;
        let mut answer = Vec::new();
        (&mut stream)
            .take(MAX_ANSWER)
            .read_to_end(&mut answer)
            .await
            .map_err(|e| format!("the answer broke off: {e}"))?;
        Ok::<_, String>(String::from_utf8_lossy(&answer).into_owned())
    };
    match tokio::time::timeout(timeout, exchange).await {
        Err(_) => Answer::None(format!("no answer within {}", humantime::format_duration(timeout))),
        Ok(Err(why)) => Answer::None(why),
        Ok(Ok(text)) if text.contains("is not executed because it is not in the whitelist") => Answer::NotAllowed,
        Ok(Ok(text)) if text.trim().is_empty() => {
            Answer::None("the server closed the connection without answering (a TLS-only port?)".into())
        }
        Ok(Ok(text)) => Answer::Text(text),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn addr(host: &str, port: u16) -> Address {
        Address {
            host: host.into(),
            port,
        }
    }

    #[test]
    fn connect_strings_give_their_servers() {
        assert_eq!(addresses("zk1:2181,zk2"), [addr("zk1", 2181), addr("zk2", 2181)]);
        assert_eq!(
            addresses("tcp+tls://zk1:2281,[::1]:2182/apps/shop"),
            [addr("zk1", 2281), addr("::1", 2182)]
        );
        assert_eq!(addresses("127.0.0.1:0,zk:x,[::1"), []);
        assert_eq!(addr("::1", 2182).to_string(), "[::1]:2182");
    }

    #[test]
    fn srvr_and_conf_are_read() {
        let probe = Probe {
            address: addr("zk", 2181),
            ruok: Answer::Text("imok".into()),
            srvr: Answer::Text(
                "Zookeeper version: 3.8.0-${mvngit.commit.id}, built on 2024-12-29 17:54 UTC\nMode: follower\n".into(),
            ),
            conf: Answer::Text("tickTime=200\nmaxSessionTimeout=4000\nsyncLimit=5\n".into()),
        };
        assert_eq!(probe.version(), Some("3.8.0-${mvngit.commit.id}"));
        assert_eq!(probe.mode(), Some("follower"));
        assert_eq!(probe.setting("tickTime"), Some(200));
        assert_eq!(probe.setting("syncLimit"), Some(5));
        assert_eq!(probe.setting("minSessionTimeout"), None);
    }
}
