//! Durations written in attribute strings: `"500ms"`, `"10s"`, `"1m"`, `"1h"`, `"1m30s"`, `"0s"`.

/// Every accepted unit, for messages and docs.
pub const UNITS: &str = "`ms` (or `msec`, `millis`), `s` (or `sec`, `secs`), `m` (or `min`, `mins`) \
                         and `h` (or `hr`, `hrs`)";

use std::time::Duration;

/// Parses a duration such as `"500ms"`, `"10s"`, `"1m30s"` or `"0s"`.
///
/// The text is one or more `<digits><unit>` parts, optionally separated by spaces; the units
/// are `ms` (also `msec`, `millis`), `s` (`sec`, `secs`), `m` (`min`, `mins`) and `h` (`hr`,
/// `hrs`). The error says what is wrong, for the compile error.
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let text = text.trim();
    if text.is_empty() {
        return Err("the duration is empty; write it like \"500ms\", \"10s\" or \"1m\"".into());
    }
    let mut total_ms: u128 = 0;
    let mut rest = text;
    while !rest.is_empty() {
        let digits = rest.find(|c: char| !c.is_ascii_digit()).unwrap_or(rest.len());
        if digits == 0 {
            return Err(format!(
                "expected a number at `{rest}`; write the duration like \"500ms\", \"10s\" or \"1m\""
            ));
        }
        let number: u128 = rest[..digits]
            .parse()
            .map_err(|_| format!("the number `{}` is too large", &rest[..digits]))?;
        rest = rest[digits..].trim_start();
        let unit_len = rest.find(|c: char| !c.is_ascii_alphabetic()).unwrap_or(rest.len());
        let unit = &rest[..unit_len];
        let scale: u128 = match unit {
            "ms" | "msec" | "millis" => 1,
            "s" | "sec" | "secs" => 1_000,
            "m" | "min" | "mins" => 60_000,
            "h" | "hr" | "hrs" => 3_600_000,
            "" if rest.starts_with('.') => {
                return Err("fractions are not supported; use a smaller unit, like \"1500ms\"".into())
            }
            "" => {
                return Err(format!(
                    "`{number}` has no unit; write \"{number}ms\", \"{number}s\", \"{number}m\" or \"{number}h\""
                ))
            }
            other => return Err(format!("unknown unit `{other}`; the units are {UNITS}")),
        };
        total_ms = number
            .checked_mul(scale)
            .and_then(|ms| ms.checked_add(total_ms))
            .filter(|ms| *ms <= u128::from(u64::MAX))
            .ok_or_else(|| format!("the duration {text:?} is too large"))?;
        rest = rest[unit_len..].trim_start();
    }
    Ok(Duration::from_millis(total_ms as u64))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn accepts_the_documented_forms() {
        assert_eq!(parse_duration("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_duration("10s"), Ok(Duration::from_secs(10)));
        assert_eq!(parse_duration("1m"), Ok(Duration::from_secs(60)));
        assert_eq!(parse_duration("1h"), Ok(Duration::from_secs(3600)));
        assert_eq!(parse_duration("0s"), Ok(Duration::ZERO));
        assert_eq!(parse_duration("1m30s"), Ok(Duration::from_secs(90)));
        assert_eq!(parse_duration("1m 30s"), Ok(Duration::from_secs(90)));
        assert_eq!(parse_duration(" 2sec "), Ok(Duration::from_secs(2)));
        assert_eq!(parse_duration("10 sec"), Ok(Duration::from_secs(10)));
        for (text, ms) in [
            ("1ms", 1),
            ("1msec", 1),
            ("1millis", 1),
            ("1s", 1_000),
            ("1sec", 1_000),
            ("1secs", 1_000),
            ("1m", 60_000),
            ("1min", 60_000),
            ("1mins", 60_000),
            ("1h", 3_600_000),
            ("1hr", 3_600_000),
            ("1hrs", 3_600_000),
        ] {
            assert_eq!(parse_duration(text), Ok(Duration::from_millis(ms)), "{text}");
            let unit = text.trim_start_matches('1');
            assert!(UNITS.contains(&format!("`{unit}`")), "{unit} is not listed");
        }
    }

    #[test]
    fn rejects_malformed_text_with_a_reason() {
        assert!(parse_duration("").unwrap_err().contains("empty"));
        assert!(parse_duration("10").unwrap_err().contains("no unit"));
        assert!(parse_duration("10 parsecs")
            .unwrap_err()
            .contains("unknown unit `parsecs`"));
        assert!(parse_duration("ten seconds").unwrap_err().contains("expected a number"));
        assert!(parse_duration("-1s").unwrap_err().contains("expected a number"));
        assert!(parse_duration("1.5s").unwrap_err().contains("fractions"));
        assert!(parse_duration("99999999999999999999999999999999999999999h")
            .unwrap_err()
            .contains("too large"));
        assert!(parse_duration("18446744073709551615h")
            .unwrap_err()
            .contains("too large"));
    }

    /// Every spelling of every unit, with its length in milliseconds.
    const SPELLINGS: [(&str, u64); 12] = [
        ("ms", 1),
        ("msec", 1),
        ("millis", 1),
        ("s", 1_000),
        ("sec", 1_000),
        ("secs", 1_000),
        ("m", 60_000),
        ("min", 60_000),
        ("mins", 60_000),
        ("h", 3_600_000),
        ("hr", 3_600_000),
        ("hrs", 3_600_000),
    ];

    proptest! {
        /// Parts written any way the syntax allows add up, until the total passes `u64::MAX`
        /// milliseconds; then the error says the duration is too large.
        #[test]
        fn parts_add_up(
            parts in prop::collection::vec((prop_oneof![0..100_000u64, any::<u64>()], prop::sample::select(SPELLINGS.to_vec()), "0{0,3}", " {0,2}", " {0,2}"), 1..5),
            padding in "[ \\t\\n]{0,2}",
        ) {
            let text: String = parts
                .iter()
                .map(|(n, (unit, _), zeros, inner, after)| format!("{zeros}{n}{inner}{unit}{after}"))
                .collect();
            let text = format!("{padding}{text}{padding}");
            let total = parts.iter().try_fold(0u64, |sum, (n, (_, ms), ..)| n.checked_mul(*ms)?.checked_add(sum));
            match total {
                Some(ms) => prop_assert_eq!(parse_duration(&text), Ok(Duration::from_millis(ms))),
                None => {
                    let parsed = parse_duration(&text);
                    prop_assert!(parsed.as_ref().is_err_and(|why| why.contains("too large")), "{:?}", parsed);
                }
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
