//! Durations written in attribute strings, in humantime's syntax: the one the `zklock` command,
//! the scheduler's options and the examples' flags take. `"500ms"`, `"10s"`, `"1m 30s"`,
//! `"1.5s"`, `"0s"`.

use std::time::Duration;

/// How to write one, for messages.
const LIKE: &str = "write it like \"500ms\", \"10s\" or \"1m 30s\"";

/// The longest duration accepted: `u64::MAX` milliseconds (half a billion years), so a deadline
/// computed from it at run time cannot overflow the clock.
const LONGEST_MS: u128 = u64::MAX as u128;

/// Parses a duration as [`humantime::parse_duration`] does (`"500ms"`, `"10s"`, `"1m30s"`,
/// `"1m 30s"`, `"2 hours"`, `"1.5s"`). The error says what is wrong, for the compile error.
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    if text.trim().is_empty() {
        return Err(format!("the duration is empty; {LIKE}"));
    }
    let duration = humantime::parse_duration(text).map_err(|err| format!("{err}; {LIKE}"))?;
    if duration.as_millis() > LONGEST_MS {
        return Err(format!("the duration {text:?} is too large"));
    }
    Ok(duration)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn accepts_the_documented_forms() {
        for (text, expected) in [
            ("500ms", Duration::from_millis(500)),
            ("10s", Duration::from_secs(10)),
            ("1m", Duration::from_secs(60)),
            ("1h", Duration::from_secs(3600)),
            ("0s", Duration::ZERO),
            ("1m30s", Duration::from_secs(90)),
            ("1m 30s", Duration::from_secs(90)),
            (" 2sec ", Duration::from_secs(2)),
            ("10 sec", Duration::from_secs(10)),
            ("1.5s", Duration::from_millis(1500)),
            ("250us", Duration::from_micros(250)),
            ("2 hours", Duration::from_secs(7200)),
            ("1msec", Duration::from_millis(1)),
            ("1mins", Duration::from_secs(60)),
            ("1hrs", Duration::from_secs(3600)),
        ] {
            assert_eq!(parse_duration(text), Ok(expected), "{text}");
        }
    }

    #[test]
    fn rejects_malformed_text_with_a_reason() {
        for (text, reason) in [
            ("", "empty"),
            ("  ", "empty"),
            ("10", "unit needed"),
            ("10 parsecs", "unknown time unit \"parsecs\""),
            ("ten seconds", "expected number"),
            ("-1s", "expected number"),
            ("99999999999999999999999999999999999999999h", "too large"),
            ("18446744073709551615h", "too large"),
        ] {
            let why = parse_duration(text).expect_err(text);
            assert!(why.contains(reason) && why.contains(LIKE), "{text:?}: {why}");
        }
    }

    proptest! {
        /// Whole seconds and milliseconds written as parts add up, until the total passes
        /// `u64::MAX` milliseconds; then the error says the duration is too large.
        #[test]
        fn parts_add_up(
            secs in prop_oneof![0..100_000u64, 0..u64::MAX / 2],
            millis in 0..1_000u64,
            inner in " {0,2}",
        ) {
            let text = format!("{secs}s{inner}{millis}ms");
            let total = u128::from(secs) * 1000 + u128::from(millis);
            if total <= LONGEST_MS {
                prop_assert_eq!(parse_duration(&text), Ok(Duration::from_secs(secs) + Duration::from_millis(millis)));
            } else {
                let parsed = parse_duration(&text);
                prop_assert!(parsed.as_ref().is_err_and(|why| why.contains("too large")), "{:?}", parsed);
            }
        }

        /// Any text is a duration or an error with a reason; never a panic (the macro would
        /// report a panic as an unhelpful "proc macro panicked").
        #[test]
        fn any_text_is_a_duration_or_says_why(text in prop_oneof![any::<String>(), "[0-9 .+-]{0,8}[a-zµ]{0,7}[0-9 .]{0,4}"]) {
            if let Err(why) = parse_duration(&text) {
                prop_assert!(why.len() > 20, "{why}");
            }
        }
    }
}
