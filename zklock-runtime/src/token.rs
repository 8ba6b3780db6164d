//! Fencing tokens: what a protected resource compares to refuse a stale holder's writes.

use std::fmt;
use std::str::FromStr;

/// A number that strictly increases across successive holders of one lock, for the protected
/// resource to check: it should refuse a write carrying a token lower than one it has seen.
///
/// The token is the creation zxid (`czxid`) of the holder's contender node. Zxids are global
/// to the ensemble and only grow, and a contender is granted only after every contender
/// created before it in the same directory is gone, so grant order follows creation order.
/// This still holds when an empty lock directory is reaped and recreated: its sequence
/// numbers restart at 0, but zxids do not. (A sequence number would not survive that.)
///
/// The `generation` part orders grants that share one node; it is 0 for every grant made
/// through ZooKeeper. [`Display`](fmt::Display) gives a fixed-width text that sorts like the
/// token, handy for a database column; [`FromStr`] reads it back.
///
/// ```
/// use zklock_runtime::FencingToken;
///
/// let older: FencingToken = "0000000100000007-00000000".parse().unwrap();
/// let newer: FencingToken = "0000000100000012-00000000".parse().unwrap();
/// assert!(older < newer);
/// assert!(older.to_string() < newer.to_string());
/// assert_eq!(newer.zxid(), 0x1_0000_0012);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct FencingToken {
    zxid: i64,
    generation: u32,
}

impl FencingToken {
    pub(crate) fn new(zxid: i64, generation: u32) -> Self {
        FencingToken { zxid, generation }
    }

    /// The token of the next grant made on the same node (a local handoff).
    pub(crate) fn next_generation(self) -> Self {
        FencingToken {
            zxid: self.zxid,
            generation: self.generation + 1,
        }
    }

    /// The creation zxid of the contender node behind this grant.
    pub fn zxid(&self) -> i64 {
        self.zxid
    }

    /// The grant's position among grants sharing one node (0 for grants through ZooKeeper).
    pub fn generation(&self) -> u32 {
        self.generation
    }

    /// The whole token as one number: `zxid << 32 | generation`.
    pub fn as_u128(&self) -> u128 {
        ((self.zxid as u64 as u128) << 32) | u128::from(self.generation)
    }
}

impl fmt::Display for FencingToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:016x}-{:08x}", self.zxid as u64, self.generation)
    }
}

/// The error of parsing a [`FencingToken`] from text.
///
/// ```
/// use zklock_runtime::FencingToken;
/// let err = "not-a-token".parse::<FencingToken>().unwrap_err();
/// assert!(err.to_string().contains("not a fencing token"));
/// ```
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("not a fencing token (expected 16 hex digits, `-`, 8 hex digits): {0:?}")]
pub struct ParseTokenError(String);

impl FromStr for FencingToken {
    type Err = ParseTokenError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let bad = || ParseTokenError(s.to_owned());
        let (zxid, generation) = s.split_once('-').ok_or_else(bad)?;
        if zxid.len() != 16 || generation.len() != 8 {
            return Err(bad());
        }
        let zxid = u64::from_str_radix(zxid, 16).map_err(|_| bad())?;
        let generation = u32::from_str_radix(generation, 16).map_err(|_| bad())?;
        Ok(FencingToken {
            zxid: zxid as i64,
            generation,
        })
    }
}
