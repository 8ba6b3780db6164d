//! Curator's leader election recipe, `LeaderLatch`, driven through the peer.
//!
//! Each latch the test starts gets an id, like a lock: [`CuratorPeer::leader_latch`] starts it,
//! its listener's calls arrive as [`PeerEvent::IsLeader`] / [`PeerEvent::NotLeader`]
//! ([`CuratorPeer::wait_leader`], [`CuratorPeer::poll_event`]), the queries ask the latch what
//! Curator thinks, and [`CuratorPeer::close_latch`] leaves the election.

use std::time::Duration;

use super::{check_word, fail_on_error, CuratorPeer, PeerError, PeerEvent};

/// How long the peer waits for Curator to create a latch's node before it gives up
/// (`LATCH_NODE_WAIT_MS` in `java/CuratorPeer.java`).
const PEER_NODE_WAIT: Duration = Duration::from_secs(30);

/// How long to wait for an answer the peer gives at once (closes and queries).
const ANSWER_WAIT: Duration = Duration::from_secs(30);

/// One participant of a Curator leader election, as `LeaderLatch.getParticipants()` and
/// `getLeader()` report it.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct LatchParticipant {
    /// The participant id: the data of the participant's node, read as UTF-8.
    pub id: String,
    /// Whether Curator takes it for the leader: the first participant, in Curator's order, whose
    /// node could still be read.
    pub is_leader: bool,
}

impl CuratorPeer {
    /// Starts a Curator `LeaderLatch` on `path` under the name `id`, with participant id
    /// `participant_id` (any text, also empty or with spaces), and returns the full path of the
    /// latch's node once Curator has created it, so the latch is in the election when this
    /// returns.
    ///
    /// The latch is `new LeaderLatch(client, path, participantId, CloseMode.NOTIFY_LEADER)`, so
    /// [`close_latch`](Self::close_latch) reports the loss of leadership too. Its listener's
    /// `isLeader()` and `notLeader()` arrive as [`PeerEvent::IsLeader`] and
    /// [`PeerEvent::NotLeader`] for `id`: wait for the first with
    /// [`wait_leader`](Self::wait_leader), check that none came with
    /// [`poll_event`](Self::poll_event).
    ///
    /// Curator's node is `<path>/_c_<uuid>-latch-<sequence>`, ephemeral and sequential, holding
    /// the participant id (UTF-8); missing parents are created as containers. The peer gives up
    /// after 30 s without a node (e.g. under an ephemeral parent), closing the latch.
    ///
    /// ```no_run
    /// # async fn demo() -> Result<(), zklock_testing::curator::PeerError> {
    /// use std::time::Duration;
    /// use zklock_testing::curator::CuratorPeer;
    ///
    /// let peer = CuratorPeer::start("127.0.0.1:2181").await?;
    /// let node = peer.leader_latch("l", "/zklock/election", "curator-1").await?;
    /// peer.wait_leader("l", Duration::from_secs(10)).await?;
    /// assert!(peer.has_leadership("l").await?);
    /// println!("Curator leads with {node}");
    /// peer.close_latch("l").await?;
    /// # Ok(()) }
    /// ```
    pub async fn leader_latch(&self, id: &str, path: &str, participant_id: &str) -> Result<String, PeerError> {
        check_word(id)?;
        check_word(path)?;
        let mut command = format!("latch {id} {path}");
        if !participant_id.is_empty() {
            command.push(' ');
            command.push_str(&encode(participant_id));
        }
        self.send(&command)?;
        let ok = format!("OK {id} ");
        // Longer than the peer's own wait, so that its error, which says why, comes first.
        let event = self
            .wait_event(&format!("the node of latch {id}"), PEER_NODE_WAIT + ANSWER_WAIT, |e| {
                matches!(e, PeerEvent::Line(l) if l.starts_with(&ok))
                    || matches!(e, PeerEvent::Error { id: i, .. } if i == id)
            })
            .await
            .and_then(fail_on_error)?;
        match event {
            PeerEvent::Line(line) => Ok(line[ok.len()..].to_owned()),
            _ => unreachable!("fail_on_error passes only non-errors"),
        }
    }

    /// Waits up to `within` for latch `id` to become leader: takes its next
    /// [`PeerEvent::IsLeader`], leaving other events for other waiters.
    pub async fn wait_leader(&self, id: &str, within: Duration) -> Result<(), PeerError> {
        self.wait_event(&format!("isLeader for latch {id}"), within, |e| {
            matches!(e, PeerEvent::IsLeader { id: i } if i == id)
                || matches!(e, PeerEvent::Error { id: i, .. } if i == id)
        })
        .await
        .and_then(fail_on_error)
        .map(drop)
    }

    /// Waits up to `within` for latch `id` to lose its leadership: takes its next
    /// [`PeerEvent::NotLeader`], leaving other events for other waiters.
    pub async fn wait_not_leader(&self, id: &str, within: Duration) -> Result<(), PeerError> {
        self.wait_event(&format!("notLeader for latch {id}"), within, |e| {
            matches!(e, PeerEvent::NotLeader { id: i } if i == id)
                || matches!(e, PeerEvent::Error { id: i, .. } if i == id)
        })
        .await
        .and_then(fail_on_error)
        .map(drop)
    }

    /// Closes latch `id` (`latch.close()`): Curator deletes its node, a guaranteed delete that
    /// runs in the background, so the node may outlive this call for a moment. A latch that led
    /// reports [`PeerEvent::NotLeader`] before this returns. The id is free again afterwards.
    pub async fn close_latch(&self, id: &str) -> Result<(), PeerError> {
        check_word(id)?;
        self.send(&format!("latch-close {id}"))?;
        let closed = format!("CLOSED {id}");
        self.wait_event(&format!("close of latch {id}"), ANSWER_WAIT, |e| {
            matches!(e, PeerEvent::Line(l) if *l == closed) || matches!(e, PeerEvent::Error { id: i, .. } if i == id)
        })
        .await
        .and_then(fail_on_error)
        .map(drop)
    }

    /// Whether latch `id` leads now, in Curator's own view (`hasLeadership()`).
    pub async fn has_leadership(&self, id: &str) -> Result<bool, PeerError> {
        let answer = self.latch_query("latch-has", id, "HAS_LEADERSHIP").await?;
        match answer.as_str() {
            "true" => Ok(true),
            "false" => Ok(false),
            _ => Err(unexpected(id, &answer)),
        }
    }

    /// The leader of latch `id`'s election as Curator reads it from the server (`getLeader()`):
    /// the first participant in its order. With no participant at all, Curator answers an empty
    /// id that is not leader.
    pub async fn latch_leader(&self, id: &str) -> Result<LatchParticipant, PeerError> {
        let answer = self.latch_query("latch-leader", id, "LEADER").await?;
        parse_participant(&answer).ok_or_else(|| unexpected(id, &answer))
    }

    /// Every participant of latch `id`'s election as Curator reads it from the server
    /// (`getParticipants()`), in Curator's order: the leader first.
    pub async fn latch_participants(&self, id: &str) -> Result<Vec<LatchParticipant>, PeerError> {
        let answer = self.latch_query("latch-participants", id, "PARTICIPANTS").await?;
        parse_participants(&answer).ok_or_else(|| unexpected(id, &answer))
    }

    /// Sends `<command> <id>` and returns the rest of the answer `<tag> <id> <rest>`.
    async fn latch_query(&self, command: &str, id: &str, tag: &str) -> Result<String, PeerError> {
        check_word(id)?;
        self.send(&format!("{command} {id}"))?;
        let answer = format!("{tag} {id} ");
        let event = self
            .wait_event(&format!("{tag} for latch {id}"), ANSWER_WAIT, |e| {
                matches!(e, PeerEvent::Line(l) if l.starts_with(&answer))
                    || matches!(e, PeerEvent::Error { id: i, .. } if i == id)
            })
            .await
            .and_then(fail_on_error)?;
        match event {
            PeerEvent::Line(line) => Ok(line[answer.len()..].to_owned()),
            _ => unreachable!("fail_on_error passes only non-errors"),
        }
    }
}

fn unexpected(id: &str, answer: &str) -> PeerError {
    PeerError::Peer {
        id: id.to_owned(),
        message: format!("unexpected answer from the peer: {answer:?}"),
    }
}

/// Percent-encodes the UTF-8 bytes of `text`, all but `A-Z a-z 0-9 - . _ ~`, so that any
/// participant id is one word of the protocol.
fn encode(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for byte in text.bytes() {
        if byte.is_ascii_alphanumeric() || matches!(byte, b'-' | b'.' | b'_' | b'~') {
            out.push(char::from(byte));
        } else {
            out.push_str(&format!("%{byte:02X}"));
        }
    }
    out
}

/// Reverses [`encode`]; `None` for a malformed escape or bytes that are not UTF-8.
fn decode(word: &str) -> Option<String> {
    let mut bytes = Vec::with_capacity(word.len());
    let mut rest = word.as_bytes();
    while let Some((&first, tail)) = rest.split_first() {
        if first == b'%' {
            let hex = std::str::from_utf8(tail.get(..2)?).ok()?;
            if !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
                return None;
            }
            bytes.push(u8::from_str_radix(hex, 16).ok()?);
            rest = &tail[2..];
        } else {
            bytes.push(first);
            rest = tail;
        }
    }
    String::from_utf8(bytes).ok()
}

/// `true:<id>` or `false:<id>`, the id percent-encoded.
fn parse_participant(word: &str) -> Option<LatchParticipant> {
    let (flag, id) = word.split_once(':')?;
    let is_leader = match flag {
        "true" => true,
        "false" => false,
        _ => return None,
    };
    Some(LatchParticipant {
        id: decode(id)?,
        is_leader,
    })
}

/// `<count> <participant>...`, checking that the count matches.
fn parse_participants(answer: &str) -> Option<Vec<LatchParticipant>> {
    let mut words = answer.split(' ');
    let count: usize = words.next()?.parse().ok()?;
    let all = words.map(parse_participant).collect::<Option<Vec<_>>>()?;
    (all.len() == count).then_some(all)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn participant_ids_of_any_text_make_one_word_and_come_back() {
        for id in ["curator-1", "", "a b\nc", "100%", "ünïcödé ✓", "host:4242/x"] {
            let word = encode(id);
            assert!(!word.is_empty() || id.is_empty(), "{id:?} encodes to nothing");
            assert!(
                word.bytes().all(|b| b.is_ascii_alphanumeric() || b"-._~%".contains(&b)),
                "{id:?} -> {word:?}"
            );
            assert_eq!(decode(&word).as_deref(), Some(id), "{id:?} -> {word:?}");
        }
        assert_eq!(encode("a b"), "a%20b");
        assert_eq!(decode("a%2"), None);
        assert_eq!(decode("a%+1"), None);
        assert_eq!(decode("%FF"), None, "not UTF-8");
    }

    #[test]
    fn parses_latch_answers() {
        assert_eq!(
            parse_participant("true:curator%201"),
            Some(LatchParticipant {
                id: "curator 1".into(),
                is_leader: true
            })
        );
        assert_eq!(
            parse_participant("false:"),
            Some(LatchParticipant {
                id: String::new(),
                is_leader: false
            })
        );
        assert_eq!(parse_participant("yes:x"), None);
        assert_eq!(parse_participant("true"), None);

        assert_eq!(parse_participants("0"), Some(Vec::new()));
        assert_eq!(
            parse_participants("2 true:a false:b").map(|all| all.into_iter().map(|p| p.id).collect::<Vec<_>>()),
            Some(vec!["a".to_owned(), "b".to_owned()])
        );
        assert_eq!(parse_participants("3 true:a false:b"), None, "count mismatch");
        assert_eq!(parse_participants(""), None);
    }
}
