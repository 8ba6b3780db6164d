//! The rules that turn the one contender queue into a mutex, a read/write lock or a semaphore.
//!
//! Every recipe shares [`crate::engine::queue`]: contenders append ephemeral sequential nodes to the
//! lock directory and are ordered by sequence number. A rule only answers, for one position in
//! that order, "may this contender go, and if not, whose deletion should it wait for" — the
//! shape of Curator's `LockInternalsDriver`.

use std::sync::Arc;

/// One contender node in a lock directory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Contender {
    /// The node name (no directory).
    pub name: String,
    /// The server-assigned sequence number at the end of the name.
    pub seq: i64,
}

impl Contender {
    /// Reads a child name as a contender; names that do not end in a sequence number are not
    /// contenders and are ignored.
    pub fn parse(name: String) -> Option<Contender> {
        let digits = name.bytes().rev().take_while(u8::is_ascii_digit).count();
        if digits == 0 {
            return None;
        }
        let seq = name[name.len() - digits..].parse().ok()?;
        Some(Contender { name, seq })
    }
}

/// Sorts a directory listing into queue order.
pub(crate) fn queue_order(children: Vec<String>) -> Vec<Contender> {
    let mut queue: Vec<Contender> = children.into_iter().filter_map(Contender::parse).collect();
    queue.sort_by(|a, b| a.seq.cmp(&b.seq).then_with(|| a.name.cmp(&b.name)));
    queue
}

/// What a rule decides for one contender.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Decision {
    /// The contender holds the lock.
    Go,
    /// Wait for the deletion of the contender at queue index `on`. When `last_blocker` is set,
    /// that deletion alone proves the turn has come: sequence numbers only grow, so nothing can
    /// join the queue ahead, and no listing is needed before going.
    Wait { on: usize, last_blocker: bool },
}

/// A recipe's admission rule.
pub(crate) trait Rule: Send + Sync + std::fmt::Debug {
    /// The name part of this recipe's nodes, between the protected prefix and the sequence
    /// number (Curator's "lock name").
    fn node_name(&self) -> &'static str;

    /// Decides for the contender at index `ours` of `queue`.
    fn decide(&self, queue: &[Contender], ours: usize) -> Decision;
}

/// Node name of mutex contenders, as Curator's `InterProcessMutex` names them.
pub(crate) const MUTEX_NODE: &str = "lock-";
/// Node names of Curator's `InterProcessReadWriteLock`.
pub(crate) const READ_NODE: &str = "__READ__";
pub(crate) const WRITE_NODE: &str = "__WRIT__";
/// Node name of leader election members, as Curator's `LeaderLatch` names them.
pub(crate) const LATCH_NODE: &str = "latch-";

/// The layout of Curator's `InterProcessSemaphoreV2` ([`crate::recipes::semaphore`]): the
/// mutex over acquirers, below the semaphore's directory,
pub(crate) const LOCKS_DIR: &str = "locks";
/// the directory of lease nodes beside it,
pub(crate) const LEASES_DIR: &str = "leases";
/// and the name part of lease nodes.
pub(crate) const LEASE_NODE: &str = "lease-";

/// The first `leases` contenders go; the others wait for the one `leases` places ahead.
/// A mutex is one lease; a write lock is one lease counted over readers and writers alike.
#[derive(Debug)]
pub(crate) struct Leases {
    pub leases: u32,
    pub node: &'static str,
}

impl Rule for Leases {
    fn node_name(&self) -> &'static str {
        self.node
    }

    fn decide(&self, _queue: &[Contender], ours: usize) -> Decision {
        let leases = self.leases as usize;
        if ours < leases {
            Decision::Go
        } else {
            Decision::Wait {
                on: ours - leases,
                last_blocker: ours == leases,
            }
        }
    }
}

/// A reader goes when no writer is ahead of it, and otherwise waits for the nearest writer
/// ahead (Curator counts any node whose name contains `__WRIT__` as a writer).
#[derive(Debug)]
pub(crate) struct Readers;

impl Rule for Readers {
    fn node_name(&self) -> &'static str {
        READ_NODE
    }

    fn decide(&self, queue: &[Contender], ours: usize) -> Decision {
        let mut writers = queue[..ours]
            .iter()
            .enumerate()
            .filter(|(_, c)| c.name.contains(WRITE_NODE));
        match writers.next_back() {
            None => Decision::Go,
            Some((on, _)) => Decision::Wait {
                on,
                last_blocker: writers.next().is_none(),
            },
        }
    }
}

/// Which recipe a [`Lock`](crate::Lock) follows.
///
/// ```
/// use zklock_runtime::LockKind;
/// assert_ne!(LockKind::Read, LockKind::Write);
/// let pool = LockKind::Semaphore { leases: 4 };
/// # let _ = pool;
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum LockKind {
    /// Exclusive; nodes named like Curator's `InterProcessMutex` (`_c_<uuid>-lock-<seq>`).
    Mutex,
    /// The shared side of a read/write lock (`__READ__`): waits only for earlier writers.
    Read,
    /// The exclusive side of a read/write lock (`__WRIT__`): waits for every earlier contender.
    Write,
    /// Up to `leases` holders at once, in Curator's `InterProcessSemaphoreV2` layout (a
    /// `locks` mutex over the acquirers and `leases/…-lease-` nodes).
    Semaphore {
        /// How many holders may hold the semaphore at once.
        leases: u32,
    },
    /// A member of a leader election group, in Curator's `LeaderLatch` layout
    /// (`_c_<uuid>-latch-<seq>` nodes holding the participant id): the oldest member leads.
    /// Every acquisition is a member of its own, with its own node (no in-process queue, no
    /// reentrancy). Usually taken through [`LockClient::election`](crate::LockClient::election).
    Leader,
}

impl LockKind {
    /// The kind's name in metrics and logs: `mutex`, `read`, `write`, `semaphore`, `leader`.
    pub(crate) fn label(self) -> &'static str {
        match self {
            LockKind::Mutex => "mutex",
            LockKind::Read => "read",
            LockKind::Write => "write",
            LockKind::Semaphore { .. } => "semaphore",
            LockKind::Leader => "leader",
        }
    }

    pub(crate) fn rule(self) -> Arc<dyn Rule> {
        match self {
            LockKind::Mutex => Arc::new(Leases {
                leases: 1,
                node: MUTEX_NODE,
            }),
            LockKind::Write => Arc::new(Leases {
                leases: 1,
                node: WRITE_NODE,
            }),
            LockKind::Read => Arc::new(Readers),
            // A semaphore contends in the queue of its acquirers' mutex (see `semaphore.rs`).
            LockKind::Semaphore { .. } => LockKind::Mutex.rule(),
            LockKind::Leader => Arc::new(Leases {
                leases: 1,
                node: LATCH_NODE,
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn queue(names: &[&str]) -> Vec<Contender> {
        queue_order(names.iter().map(|s| s.to_string()).collect())
    }

    #[test]
    fn sorts_by_sequence_not_name() {
        let q = queue(&[
            "_c_b-lock-0000000003",
            "_c_a-lock-0000000010",
            "foreign-0000000001",
            "junk",
        ]);
        let names: Vec<_> = q.iter().map(|c| c.seq).collect();
        assert_eq!(names, [1, 3, 10]);
    }

    #[test]
    fn mutex_watches_predecessor() {
        let rule = Leases {
            leases: 1,
            node: MUTEX_NODE,
        };
        let q = queue(&["a-lock-0000000001", "b-lock-0000000002", "c-lock-0000000003"]);
        assert_eq!(rule.decide(&q, 0), Decision::Go);
        assert_eq!(
            rule.decide(&q, 1),
            Decision::Wait {
                on: 0,
                last_blocker: true
            }
        );
        assert_eq!(
            rule.decide(&q, 2),
            Decision::Wait {
                on: 1,
                last_blocker: false
            }
        );
    }

    #[test]
    fn semaphore_lets_n_in() {
        let rule = Leases {
            leases: 2,
            node: MUTEX_NODE,
        };
        let q = queue(&["a-0000000001", "b-0000000002", "c-0000000003"]);
        assert_eq!(rule.decide(&q, 1), Decision::Go);
        assert_eq!(
            rule.decide(&q, 2),
            Decision::Wait {
                on: 0,
                last_blocker: true
            }
        );
    }

    #[test]
    fn readers_wait_only_for_writers() {
        let q = queue(&[
            "_c_1-__READ__0000000001",
            "_c_2-__WRIT__0000000002",
            "_c_3-__READ__0000000003",
            "_c_4-__WRIT__0000000004",
            "_c_5-__READ__0000000005",
        ]);
        assert_eq!(Readers.decide(&q, 0), Decision::Go);
        assert_eq!(
            Readers.decide(&q, 2),
            Decision::Wait {
                on: 1,
                last_blocker: true
            }
        );
        assert_eq!(
            Readers.decide(&q, 4),
            Decision::Wait {
                on: 3,
                last_blocker: false
            }
        );
        let writer = Leases {
            leases: 1,
            node: WRITE_NODE,
        };
        assert_eq!(
            writer.decide(&q, 1),
            Decision::Wait {
                on: 0,
                last_blocker: true
            }
        );
    }

    /// Child names of a lock directory (anyone may create nodes there): a prefix, and maybe a
    /// number at the end, zero-padded as the server writes it or not.
    fn listing() -> impl Strategy<Value = Vec<(String, Option<u64>)>> {
        let prefix = prop_oneof![any::<String>(), "(_c_[0-9a-f]{4}-)?(lock-|__READ__|__WRIT__|x-?)"]
            .prop_filter("ends in a digit", |p| !p.ends_with(|c: char| c.is_ascii_digit()));
        let number = prop_oneof![0..10_000_000_000u64, any::<u64>()];
        prop::collection::vec((prefix, prop::option::of(number)), 0..12)
    }

    fn names(listing: &[(String, Option<u64>)], padded: bool) -> Vec<String> {
        let number = |n: u64| if padded { format!("{n:010}") } else { n.to_string() };
        listing
            .iter()
            .map(|(prefix, n)| format!("{prefix}{}", n.map(number).unwrap_or_default()))
            .collect()
    }

    proptest! {
        /// Names ending in a sequence number that fits an `i64` are contenders, in number order;
        /// every other name is left out.
        #[test]
        fn any_listing_gives_an_ordered_queue(listing in listing(), padded: bool) {
            let queue = queue_order(names(&listing, padded));
            let mut expected: Vec<(i64, String)> = listing
                .iter()
                .zip(names(&listing, padded))
                .filter_map(|((_, n), name)| Some((i64::try_from((*n)?).ok()?, name)))
                .collect();
            expected.sort();
            let got: Vec<(i64, String)> = queue.into_iter().map(|c| (c.seq, c.name)).collect();
            prop_assert_eq!(got, expected);
        }

        /// Whatever the listing, every rule answers for every position, and a waiter waits for
        /// a contender ahead of it (what `inspect` shows as `waits_for`).
        #[test]
        fn every_position_is_decided(listing in listing(), leases in 1..4u32) {
            let queue = queue_order(names(&listing, true));
            let rules: [&dyn Rule; 3] = [&Readers, &Leases { leases, node: MUTEX_NODE }, &Leases { leases: 1, node: WRITE_NODE }];
            for rule in rules {
                for ours in 0..queue.len() {
                    if let Decision::Wait { on, .. } = rule.decide(&queue, ours) {
                        prop_assert!(on < ours, "{:?} at {}: waits on {}", rule, ours, on);
                    }
                }
            }
        }
    }
}
