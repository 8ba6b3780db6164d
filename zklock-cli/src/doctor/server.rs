//! The checks of the servers and the way to them: the version, the four-letter words, the
//! namespace's ACL, TLS and SASL.

use std::net::IpAddr;

use zklock_runtime::zk;

use super::output::{Check, Status};
use super::words::{Address, Answer, Probe};

/// Why a word got no answer, in a few words.
pub fn why_unanswered(answer: &Answer) -> String {
    match answer {
        Answer::Text(_) => "answered".into(),
        Answer::NotAllowed => "not in 4lw.commands.whitelist".into(),
        Answer::None(why) => why.clone(),
    }
}

/// A version from `srvr` against the releases known to lose ephemeral nodes or no longer
/// maintained.
pub fn classify_version(version: &str) -> (Status, String) {
    let numeric: String = version
        .chars()
        .take_while(|c| c.is_ascii_digit() || *c == '.')
        .collect();
    let mut parts = numeric.split('.').map(|p| p.parse::<u32>());
    let (Some(Ok(major)), Some(Ok(minor))) = (parts.next(), parts.next()) else {
        return (Status::Warn, format!("{version}: not a version this check can read"));
    };
    let patch = parts.next().and_then(Result::ok).unwrap_or(0);
    let lacks_2355_fix = (major, minor, patch) < (3, 4, 11) || ((major, minor) == (3, 5) && patch < 4);
    if lacks_2355_fix {
        (
            Status::Fail,
            format!(
                "{major}.{minor}.{patch} lacks the fix for ZOOKEEPER-2355 (an ephemeral node is never deleted \
                 if a follower fails while reading the proposal: a dead holder's lock can stay held for \
                 good), fixed in 3.4.11, 3.5.4-beta and 3.6.0"
            ),
        )
    } else if (major, minor) < (3, 8) {
        (
            Status::Warn,
            format!(
                "{major}.{minor}.{patch}: the {major}.{minor} line is end-of-life (the ZooKeeper project \
                 maintains 3.8 and later; 3.7 reached end-of-life in February 2024, 3.6 in December 2022)"
            ),
        )
    } else {
        (Status::Pass, format!("{major}.{minor}.{patch}"))
    }
}

/// 5. The servers' versions (`srvr`).
pub fn version(probes: &[Probe]) -> Check {
    const NAME: &str = "server-version";
    let mut status = Status::Pass;
    let mut read = Vec::new();
    let mut unread = Vec::new();
    for probe in probes {
        match probe.version() {
            Some(v) => {
                let (s, what) = classify_version(v);
                status = status.max(s);
                read.push(format!("{}: {what}", probe.address));
            }
            None => unread.push(format!("{} ({})", probe.address, why_unanswered(&probe.srvr))),
        }
    }
    let found = if read.is_empty() {
        "no version read".to_owned()
    } else {
        read.join("; ")
    };
    let upgrade = "upgrade the servers to a maintained release (3.8 or 3.9; zklock is tested against 3.8)";
    let check = match status {
        Status::Fail => Check::fail(NAME, found, upgrade),
        Status::Warn => Check::warn(NAME, found, upgrade),
        Status::Pass => Check::pass(NAME, found),
    };
    if unread.is_empty() {
        check
    } else {
        check.at_least_warn(
            &format!("could not read the version of {}", unread.join(", ")),
            "see the four-letter-words check: the version is read from `srvr`",
        )
    }
}

/// 6. Whether `ruok`, `srvr` and `conf` are answered, on every server.
pub fn four_letter_words(probes: &[Probe]) -> Check {
    const NAME: &str = "four-letter-words";
    if probes.is_empty() {
        return Check::warn(NAME, "no server address in the connect string", "check --zk");
    }
    let mut all = true;
    let (mut refused, mut silent, mut unwell) = (false, false, false);
    let mut lines = Vec::new();
    for probe in probes {
        let mut answered = Vec::new();
        let mut missing = Vec::new();
        for (word, answer) in [("ruok", &probe.ruok), ("srvr", &probe.srvr), ("conf", &probe.conf)] {
            match answer {
                Answer::Text(text) if word != "ruok" || text.trim() == "imok" => answered.push(word),
                Answer::Text(text) => {
                    unwell = true;
                    missing.push(format!("ruok answered {:?}", text.trim()));
                }
                other => {
                    refused |= *other == Answer::NotAllowed;
                    silent |= matches!(other, Answer::None(_));
                    missing.push(format!("{word}: {}", why_unanswered(other)));
                }
            }
        }
        all &= missing.is_empty();
        let mut line = format!(
            "{}: {}",
            probe.address,
            if answered.is_empty() {
                "none answered".to_owned()
            } else {
                format!("{} answered", answered.join(", "))
            }
        );
        if !missing.is_empty() {
            line.push_str(&format!(" ({})", missing.join("; ")));
        }
        lines.push(line);
    }
    let found = lines.join("; ");
    if all {
        Check::pass(NAME, found)
    } else {
        let mut advice = Vec::new();
        if refused {
            advice.push("add ruok, srvr and conf to 4lw.commands.whitelist on every server (ZooKeeper answers srvr alone by default)");
        }
        if silent {
            advice.push(
                "the doctor sends the words in plain TCP to the connect string's ports: a server down or a TLS-only \
                 port does not answer them (run the doctor against the plain clientPort too, or check the server)",
            );
        }
        if unwell {
            advice.push("a server that does not answer ruok with imok is not serving requests (no quorum, or starting): check it");
        }
        Check::warn(
            NAME,
            format!("{found}; the session-timeout, sync-limit and server-version checks use only what was answered"),
            advice.join("; "),
        )
    }
}

/// What the namespace's ACL lookup found.
#[derive(Debug, Clone)]
pub enum AclFinding {
    /// The namespace exists with this ACL.
    Found { path: String, acls: Vec<zk::Acl> },
    /// The namespace does not exist; its nearest existing ancestor has this ACL.
    Missing {
        path: String,
        ancestor: String,
        acls: Vec<zk::Acl>,
    },
    /// The ACL could not be read (the error).
    Unreadable { path: String, error: zk::Error },
    /// Not looked at (no session).
    NotChecked,
}

/// An ACL entry as ZooKeeper's CLI shows it: `world:anyone:cdrwa`.
fn show_acl(acl: &zk::Acl) -> String {
    let p = acl.permission();
    let letters: String = [
        (zk::Permission::CREATE, 'c'),
        (zk::Permission::DELETE, 'd'),
        (zk::Permission::READ, 'r'),
        (zk::Permission::WRITE, 'w'),
        (zk::Permission::ADMIN, 'a'),
    ]
    .iter()
    .filter(|(perm, _)| p.has(*perm))
    .map(|(_, c)| *c)
    .collect();
    format!("{}:{}:{letters}", acl.scheme(), acl.id())
}

/// Whether an entry lets any client create or delete children, or change the ACL.
fn open_to_anyone(acl: &zk::Acl) -> bool {
    let p = acl.permission();
    acl.scheme() == "world"
        && acl.id() == "anyone"
        && (p.has(zk::Permission::DELETE) || p.has(zk::Permission::CREATE) || p.has(zk::Permission::ADMIN))
}

fn show_acls(acls: &[zk::Acl]) -> String {
    acls.iter().map(show_acl).collect::<Vec<_>>().join(", ")
}

/// 7. The namespace's ACL: anyone who may delete under it can take a lock away from its holder.
pub fn namespace_acl(finding: &AclFinding) -> Check {
    const NAME: &str = "namespace-acl";
    let restrict = "create the namespace with an ACL that names your services (zkCli: setAcl), and give the \
                    clients credentials (--digest/--sasl; LockClientBuilder::digest, sasl_digest or acls) so \
                    the lock directories and contender nodes they create are theirs (creator_all)";
    match finding {
        AclFinding::NotChecked => Check::warn(NAME, "not checked: no session was opened", "see the connection check"),
        AclFinding::Found { path, acls } if acls.iter().any(open_to_anyone) => Check::warn(
            NAME,
            format!(
                "{path} has ACL {}: any client that reaches ZooKeeper may create and delete under it, and lock \
                 directories made by clients without credentials are as open, so a stray delete takes a lock \
                 from its holder (a loss: docs/safety.md, guarantee 10)",
                show_acls(acls)
            ),
            restrict,
        ),
        AclFinding::Found { path, acls } => Check::pass(
            NAME,
            format!(
                "{path} has ACL {}: restricted (lock directories carry the ACL of the client that created them)",
                show_acls(acls)
            ),
        ),
        AclFinding::Missing { path, ancestor, acls } => Check::warn(
            NAME,
            format!(
                "{path} not created yet: the first lock client creates it with its own ACL (open unless it \
                 authenticates or sets acls); {ancestor} has ACL {}",
                show_acls(acls)
            ),
            restrict,
        ),
        AclFinding::Unreadable {
            path,
            error: zk::Error::NoAuth,
        } => Check::pass(
            NAME,
            format!("{path}: this client may not even read its ACL (NoAuth), so it is restricted to other identities"),
        ),
        AclFinding::Unreadable { path, error } => Check::warn(
            NAME,
            format!("could not read the ACL of {path}: {error}"),
            "run the doctor with the credentials of a lock client (--digest or --sasl)",
        ),
    }
}

/// Whether a connect string host is this machine: `localhost` or a loopback address.
fn is_local(host: &str) -> bool {
    let host = host.trim_end_matches('.');
    host.eq_ignore_ascii_case("localhost")
        || host.to_ascii_lowercase().ends_with(".localhost")
        || match host.parse::<IpAddr>() {
            Ok(IpAddr::V4(ip)) => ip.is_loopback(),
            Ok(IpAddr::V6(ip)) => ip.is_loopback() || ip.to_ipv4_mapped().is_some_and(|v4| v4.is_loopback()),
            Err(_) => false,
        }
}

/// 8. TLS and SASL, as the doctor was configured (the same options as every command).
pub fn transport(tls: bool, sasl: bool, digest: bool, addresses: &[Address]) -> Check {
    const NAME: &str = "transport-security";
    let used: Vec<&str> = [(tls, "TLS"), (sasl, "SASL")]
        .iter()
        .filter(|(on, _)| *on)
        .map(|(_, what)| *what)
        .collect();
    if !used.is_empty() {
        return Check::pass(NAME, format!("{} in use", used.join(" and ")));
    }
    let remote: Vec<String> = addresses
        .iter()
        .filter(|a| !is_local(&a.host))
        .map(Address::to_string)
        .collect();
    let credentials = if digest {
        " (digest credentials cross it in clear)"
    } else {
        ""
    };
    if remote.is_empty() {
        return Check::pass(
            NAME,
            format!("neither TLS nor SASL, on a connection to this host only{credentials}"),
        );
    }
    Check::warn(
        NAME,
        format!(
            "neither TLS nor SASL to {}: lock data and requests cross the network in clear, and the servers \
             cannot tell lock clients from any other client{credentials}",
            remote.join(", ")
        ),
        "serve a secureClientPort and connect with --tls-ca (LockClientBuilder::tls), and/or authenticate with \
         --sasl (LockClientBuilder::sasl_digest); see docs/operations.md, Secured ensembles",
    )
}
