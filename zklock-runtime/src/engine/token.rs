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
        // Hex digits only: `from_str_radix` would also take a `+`, a second spelling of a token.
        let digits = |part: &str, len| part.len() == len && part.bytes().all(|b| b.is_ascii_hexdigit());
        if !digits(zxid, 16) || !digits(generation, 8) {
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

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// `from_str_radix` takes a leading `+`; a token has one spelling, so the parser does not.
    #[test]
    fn a_sign_is_not_a_hex_digit() {
        for signed in ["0000000000000000-+0000000", "+00000000000000f-00000000"] {
            assert!(signed.parse::<FencingToken>().is_err(), "{signed:?} accepted");
        }
    }

    /// A valid token text with one character replaced: the inputs closest to being accepted.
    fn near_token() -> impl Strategy<Value = String> {
        let odd = prop_oneof![
            prop::sample::select(vec!['+', '-', ' ', 'g', 'G', 'x', '0', 'F']),
            any::<char>()
        ];
        (any::<i64>(), any::<u32>(), 0..25usize, odd).prop_map(|(zxid, generation, at, c)| {
            let mut text = FencingToken::new(zxid, generation).to_string();
            text.replace_range(at..=at, c.encode_utf8(&mut [0; 4]));
            text
        })
    }

    proptest! {
        #[test]
        fn display_reads_back(zxid: i64, generation: u32) {
            let token = FencingToken::new(zxid, generation);
            prop_assert_eq!(token.to_string().parse::<FencingToken>(), Ok(token));
        }

        /// Zxids are never negative: for those, the text and the number order tokens alike.
        #[test]
        fn text_and_number_sort_like_the_token(a in (0..=i64::MAX, any::<u32>()), b in (0..=i64::MAX, any::<u32>())) {
            let (a, b) = (FencingToken::new(a.0, a.1), FencingToken::new(b.0, b.1));
            prop_assert_eq!(a.to_string().cmp(&b.to_string()), a.cmp(&b));
            prop_assert_eq!(a.as_u128().cmp(&b.as_u128()), a.cmp(&b));
        }

        /// Whatever parses is the text `Display` writes (hex digits in either case); anything else
        /// is an error quoting the input.
        #[test]
        fn any_text_parses_to_its_one_spelling_or_is_refused(text in prop_oneof![any::<String>(), near_token()]) {
            match text.parse::<FencingToken>() {
                Ok(token) => prop_assert_eq!(token.to_string(), text.to_ascii_lowercase()),
                Err(err) => prop_assert!(err.to_string().contains(&format!("{text:?}")), "{err}"),
            }
        }
    }
}
