//! Curator's leader election recipe (`LeaderLatch`) through the Curator peer, against a real
//! ZooKeeper server: latches on one path elect exactly one leader and hand leadership on in join
//! order when the leader closes; their nodes are Curator's protected ephemeral sequential
//! `latch-` nodes holding the participant ids; Curator orders every child of the path by what
//! follows the last `latch-` in its name; and bad commands are answered with errors while the
//! peer carries on.
//!
//! Everything waits on events or on the server's state, with deadlines.

use std::time::Duration;

use zklock_testing::curator::{CuratorPeer, LatchParticipant, PeerError, PeerEvent};
use zklock_testing::ZkServer;
use zookeeper_client as zk;

/// Generous bound for anything that should happen promptly on a loaded machine.
const SOON: Duration = Duration::from_secs(20);

fn server() -> ZkServer {
    ZkServer::start().expect("start ZooKeeper (run scripts/install-deps.sh)")
}

async fn peer(server: &ZkServer) -> CuratorPeer {
    CuratorPeer::start(&server.connect_string())
        .await
        .expect("start the Curator peer (run scripts/install-deps.sh)")
}

async fn raw(server: &ZkServer) -> zk::Client {
    zk::Client::connector()
        .with_session_timeout(Duration::from_secs(4))
        .connect(&server.connect_string())
        .await
        .expect("connect a raw client")
}

fn participant(id: &str, is_leader: bool) -> LatchParticipant {
    LatchParticipant {
        id: id.to_owned(),
        is_leader,
    }
}

/// The paths `session` (hex, with or without `0x`) watches, from the server's `wchc` report:
/// a line per session, then a tab-indented line per watched path.
fn watches_of(server: &ZkServer, session: &str) -> Vec<String> {
    let id = |hex: &str| u64::from_str_radix(hex.trim().trim_start_matches("0x"), 16).ok();
    let wanted = id(session).unwrap_or_else(|| panic!("not a session id: {session:?}"));
    let report = tokio::task::block_in_place(|| server.four_letter_word("wchc")).expect("wchc answers");
    let mut watched = Vec::new();
    let mut ours = false;
    for line in report.lines() {
        match line.strip_prefix('\t') {
            Some(path) if ours => watched.push(path.trim().to_owned()),
            Some(_) => {}
            None => ours = id(line) == Some(wanted),
        }
    }
    watched
}

/// Waits until the peer's session watches `node`: a latch has read the children, found `node`
/// right ahead of its own and settled down to wait for it to go. The server reports watches
/// only when asked, so this asks again until the deadline.
async fn wait_watching(server: &ZkServer, peer: &CuratorPeer, node: &str, who: &str) {
    let deadline = tokio::time::Instant::now() + SOON;
    loop {
        let watched = watches_of(server, peer.session_id());
        if watched.iter().any(|w| w == node) {
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{who} (session {}) never waited on {node}; it watches {watched:?}",
            peer.session_id()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Waits, on a watch, until `node` no longer exists.
async fn wait_gone(raw: &zk::Client, node: &str) {
    tokio::time::timeout(SOON, async {
        loop {
            let (stat, watcher) = raw.check_and_watch_stat(node).await.expect("stat");
            if stat.is_none() {
                return;
            }
            watcher.changed().await;
        }
    })
    .await
    .unwrap_or_else(|_| panic!("{node} still exists"));
}

/// The children of `path`; none when it is gone (an empty container may be reaped).
async fn children(raw: &zk::Client, path: &str) -> Vec<String> {
    match raw.list_children(path).await {
        Ok(children) => children,
        Err(zk::Error::NoNode) => Vec::new(),
        Err(err) => panic!("list {path}: {err}"),
    }
}

/// Asserts that `result` is the peer's error about `id`, saying `says`.
#[track_caller]
fn refused<T: std::fmt::Debug>(result: Result<T, PeerError>, id: &str, says: &str) {
    match result {
        Err(PeerError::Peer { id: got, message }) => {
            assert_eq!(got, id, "{message}");
            assert!(message.contains(says), "{message:?} does not say {says:?}");
        }
        Err(other) => panic!("{id}: expected the peer's error, got {other}"),
        Ok(value) => panic!("{id}: the peer accepted it: {value:?}"),
    }
}

/// Asserts that no event about `id` is waiting in `peer`.
async fn assert_no_event(peer: &CuratorPeer, id: &str, why: &str) {
    let event = peer.poll_event(id, Duration::ZERO).await.expect("the peer is alive");
    assert_eq!(event, None, "latch {id}: {why}");
}

/// The sequence number at the end of a node name.
fn seq(node: &str) -> u64 {
    let digits = node.len() - node.trim_end_matches(|c: char| c.is_ascii_digit()).len();
    node[node.len() - digits..].parse().expect("a sequence suffix")
}

/// Whether `name` is Curator's protected latch node name `_c_<uuid>-latch-<10 digits>`.
fn is_protected_latch_name(name: &str) -> bool {
    let Some(rest) = name.strip_prefix("_c_") else {
        return false;
    };
    let (uuid, tail) = rest.split_at(rest.len().min(36));
    let uuid_ok = uuid.len() == 36
        && uuid.char_indices().all(|(i, c)| match i {
            8 | 13 | 18 | 23 => c == '-',
            _ => c.is_ascii_hexdigit() && !c.is_ascii_uppercase(),
        });
    let seq_ok = tail
        .strip_prefix("-latch-")
        .is_some_and(|digits| digits.len() == 10 && digits.bytes().all(|b| b.is_ascii_digit()));
    uuid_ok && seq_ok
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_latches_on_one_path_elect_exactly_one_leader() {
    let zk = server();
    let first = peer(&zk).await;
    let second = peer(&zk).await;
    let path = "/election/two";

    let a = first.leader_latch("a", path, "alpha").await.expect("start latch a");
    let b = second.leader_latch("b", path, "beta").await.expect("start latch b");
    assert!(seq(&a) < seq(&b), "a joined first: {a} vs {b}");

    first.wait_leader("a", SOON).await.expect("the first to join leads");
    // b has read the children and waits for the node right ahead of it: it has decided.
    wait_watching(&zk, &second, &a, "latch b").await;

    assert!(first.has_leadership("a").await.unwrap());
    assert!(!second.has_leadership("b").await.unwrap());
    let expected = vec![participant("alpha", true), participant("beta", false)];
    assert_eq!(first.latch_participants("a").await.unwrap(), expected);
    assert_eq!(second.latch_participants("b").await.unwrap(), expected);
    assert_eq!(first.latch_leader("a").await.unwrap(), participant("alpha", true));
    assert_eq!(second.latch_leader("b").await.unwrap(), participant("alpha", true));

    // Exactly one isLeader: a's was taken above, and nothing else happened to either latch.
    assert_no_event(&first, "a", "it leads, and had one isLeader").await;
    assert_no_event(&second, "b", "it never led").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn closing_the_leader_makes_the_next_in_line_leader() {
    let zk = server();
    let view = raw(&zk).await;
    let first = peer(&zk).await;
    let second = peer(&zk).await;
    let path = "/election/handover";

    // Two peers, and two latches in the second one: a, then b and c.
    let a = first.leader_latch("a", path, "alpha").await.unwrap();
    let b = second.leader_latch("b", path, "beta").await.unwrap();
    let c = second.leader_latch("c", path, "gamma").await.unwrap();
    first.wait_leader("a", SOON).await.unwrap();
    wait_watching(&zk, &second, &a, "latch b").await;
    wait_watching(&zk, &second, &b, "latch c").await;
    assert_no_event(&second, "b", "a leads").await;
    assert_no_event(&second, "c", "a leads").await;

    // Closing the leader reports its loss (NOTIFY_LEADER) before the close returns...
    first.close_latch("a").await.expect("close a");
    assert_eq!(
        first.poll_event("a", Duration::ZERO).await.unwrap(),
        Some(PeerEvent::NotLeader { id: "a".into() })
    );
    // ...deletes its node, and the next in line leads; the one behind it still waits.
    wait_gone(&view, &a).await;
    second.wait_leader("b", SOON).await.expect("b is next");
    assert!(second.has_leadership("b").await.unwrap());
    assert!(!second.has_leadership("c").await.unwrap());
    assert_eq!(
        second.latch_participants("c").await.unwrap(),
        vec![participant("beta", true), participant("gamma", false)]
    );
    wait_watching(&zk, &second, &b, "latch c").await;
    assert_no_event(&second, "c", "b leads").await;

    // A closed latch's id is free again: a joins anew, at the end of the line.
    let again = first.leader_latch("a", path, "alpha").await.expect("a joins again");
    assert!(seq(&again) > seq(&c), "{again} vs {c}");
    wait_watching(&zk, &first, &c, "latch a, joined again").await;

    second.close_latch("b").await.unwrap();
    second
        .wait_not_leader("b", Duration::ZERO)
        .await
        .expect("b reported its loss");
    second.wait_leader("c", SOON).await.expect("c is next");
    assert_eq!(
        first.latch_participants("a").await.unwrap(),
        vec![participant("gamma", true), participant("alpha", false)]
    );

    second.close_latch("c").await.unwrap();
    second.wait_not_leader("c", Duration::ZERO).await.unwrap();
    first.wait_leader("a", SOON).await.expect("a is the last one left");
    first.close_latch("a").await.unwrap();
    first.wait_not_leader("a", Duration::ZERO).await.unwrap();
    for node in [&a, &b, &c, &again] {
        wait_gone(&view, node).await;
    }
    assert_eq!(children(&view, path).await, Vec::<String>::new());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn latch_nodes_are_protected_ephemeral_sequential_and_hold_the_participant_id() {
    let zk = ZkServer::builder()
        .system_property("znode.container.checkIntervalMs", "100") // reap empty containers fast
        .start()
        .expect("start ZooKeeper (run scripts/install-deps.sh)");
    let view = raw(&zk).await;
    let curator = peer(&zk).await;
    // Java prints the session id as an unsigned hex number.
    let session = u64::from_str_radix(curator.session_id(), 16).expect("a hex session id") as i64;
    // Neither the path nor its parent exists yet.
    let path = "/latch-layout/deep/election";
    let ids = ["alpha", "with space ✓", ""];
    let mut nodes = Vec::new();
    for (n, participant_id) in ids.iter().enumerate() {
        let node = curator
            .leader_latch(&format!("l{n}"), path, participant_id)
            .await
            .expect("start a latch");
        nodes.push(node);
    }
    curator.wait_leader("l0", SOON).await.unwrap();

    let mut children = view.list_children(path).await.unwrap();
    children.sort_by_key(|name| seq(name));
    assert_eq!(
        children.iter().map(|name| format!("{path}/{name}")).collect::<Vec<_>>(),
        nodes,
        "the latches' nodes, in join order, are all the path holds"
    );
    for (name, participant_id) in children.iter().zip(ids) {
        assert!(is_protected_latch_name(name), "{name} is no protected latch node");
        let (data, stat) = view.get_data(&format!("{path}/{name}")).await.unwrap();
        assert_eq!(
            String::from_utf8(data).unwrap(),
            participant_id,
            "{name} holds the participant id"
        );
        assert_eq!(
            stat.ephemeral_owner, session,
            "{name} is ephemeral, of the peer's session"
        );
    }
    // Each latch protects its node with a UUID of its own.
    let uuids: std::collections::HashSet<_> = children.iter().map(|name| &name[3..39]).collect();
    assert_eq!(uuids.len(), children.len(), "{children:?}");

    assert_eq!(
        curator.latch_participants("l2").await.unwrap(),
        vec![
            participant("alpha", true),
            participant("with space ✓", false),
            participant("", false)
        ]
    );

    // The peer's session goes with it, and its ephemeral nodes with the session.
    drop(curator);
    for node in &nodes {
        wait_gone(&view, node).await;
    }
    // Curator made the missing parents as containers, which the server reaps once empty (a
    // client's stat shows a container's ephemeral owner as 0, like a persistent node's).
    for parent in [path, "/latch-layout/deep", "/latch-layout"] {
        wait_gone(&view, parent).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn curator_orders_children_by_what_follows_their_last_latch_dash() {
    let zk = server();
    let foreign = raw(&zk).await;
    let curator = peer(&zk).await;
    let path = "/election/foreign";
    let sequential = zk::CreateMode::EphemeralSequential.with_acls(zk::Acls::anyone_all());
    let persistent = zk::CreateMode::Persistent.with_acls(zk::Acls::anyone_all());
    for dir in ["/election", path] {
        match foreign.create(dir, b"", &persistent).await {
            Ok(_) | Err(zk::Error::NodeExists) => {}
            Err(err) => panic!("create {dir}: {err}"),
        }
    }

    // A node of another client without `latch-` in its name sorts by its whole name:
    // `member-…` after every `<10 digits>`, so behind Curator's, although it came first.
    let (_, sequence) = foreign
        .create(&format!("{path}/member-"), b"unordered", &sequential)
        .await
        .unwrap();
    let unordered = format!("{path}/member-{sequence}");
    // One whose name ends in `latch-<sequence>` is ordered by that sequence: it is ahead of
    // Curator's, so Curator waits on it.
    let (_, sequence) = foreign
        .create(&format!("{path}/member-latch-"), b"foreign", &sequential)
        .await
        .unwrap();
    let ahead = format!("{path}/member-latch-{sequence}");
    let ours = curator.leader_latch("l", path, "curator").await.unwrap();
    assert!(seq(&unordered) < seq(&ahead) && seq(&ahead) < seq(&ours));
    wait_watching(&zk, &curator, &ahead, "the Curator latch").await;
    assert!(!curator.has_leadership("l").await.unwrap());
    assert_eq!(
        curator.latch_participants("l").await.unwrap(),
        vec![
            participant("foreign", true),
            participant("curator", false),
            participant("unordered", false)
        ]
    );
    assert_no_event(&curator, "l", "a foreign node is ahead").await;

    // Once the node ahead is gone Curator leads, the node with the lowest sequence notwithstanding.
    foreign.delete(&ahead, None).await.unwrap();
    curator
        .wait_leader("l", SOON)
        .await
        .expect("Curator leads once the node ahead is gone");
    assert_eq!(
        curator.latch_participants("l").await.unwrap(),
        vec![participant("curator", true), participant("unordered", false)]
    );
    // (Curator's client watches /zookeeper/config for ensemble changes, and nothing else.)
    let watched = watches_of(&zk, curator.session_id());
    assert!(
        watched.iter().all(|w| !w.starts_with(path)),
        "a leader watches no participant: {watched:?}"
    );
    curator.close_latch("l").await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_latch_commands_are_answered_with_errors_and_the_peer_carries_on() {
    let zk = server();
    let curator = peer(&zk).await;
    let path = "/election/errors";
    // Unknown ids.
    refused(
        curator.close_latch("nope").await.map(drop),
        "nope",
        "no latch with id nope",
    );
    refused(
        curator.has_leadership("nope").await.map(drop),
        "nope",
        "no latch with id nope",
    );
    refused(
        curator.latch_leader("nope").await.map(drop),
        "nope",
        "no latch with id nope",
    );
    refused(
        curator.latch_participants("nope").await.map(drop),
        "nope",
        "no latch with id nope",
    );

    // Paths ZooKeeper would not take.
    refused(
        curator.leader_latch("x", "relative", "p").await,
        "x",
        "Path must start with /",
    );
    refused(
        curator.leader_latch("x", "/trailing/", "p").await,
        "x",
        "must not end with /",
    );
    refused(curator.leader_latch("x", "/a//b", "p").await, "x", "empty node name");

    // Ids in use, by a latch or a lock; a closed latch is gone.
    curator.leader_latch("dup", path, "p").await.expect("a good latch");
    refused(curator.leader_latch("dup", path, "q").await, "dup", "id already in use");
    refused(curator.mutex("dup", "/locks/dup").await, "dup", "id already in use");
    curator.mutex("m", "/locks/m").await.unwrap();
    refused(curator.leader_latch("m", path, "q").await, "m", "id already in use");
    curator.wait_leader("dup", SOON).await.unwrap();
    curator.close_latch("dup").await.unwrap();
    curator.wait_not_leader("dup", Duration::ZERO).await.unwrap();
    refused(curator.close_latch("dup").await, "dup", "no latch with id dup");

    // Malformed raw lines: a usage error under "-" without an id, under the id with one.
    curator.send("latch").unwrap();
    let event = curator.poll_event("-", SOON).await.unwrap();
    assert!(
        matches!(&event, Some(PeerEvent::Error { message, .. }) if message.contains("usage: latch <id> <path>")),
        "{event:?}"
    );
    for (line, says) in [
        ("latch y /election/errors a b", "usage: latch"),
        ("latch y /election/errors %zz", "bad percent-encoding"),
        ("latch-has", "usage: latch-has"),
    ] {
        curator.send(line).unwrap();
        let id = line.split(' ').nth(1).map_or("-", |_| "y");
        let event = curator.poll_event(id, SOON).await.unwrap();
        assert!(
            matches!(&event, Some(PeerEvent::Error { message, .. }) if message.contains(says)),
            "{line}: {event:?}"
        );
    }

    // Through all that the peer stayed up, and a new latch works.
    curator.leader_latch("y", path, "y").await.expect("a good latch");
    curator.wait_leader("y", SOON).await.unwrap();
    assert!(curator.has_leadership("y").await.unwrap());
}
