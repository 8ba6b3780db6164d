//! Lock names: what users may pass, and how a name maps to a ZooKeeper path.

use crate::error::LockError;

/// The longest lock name accepted, in bytes.
pub const MAX_NAME_LEN: usize = 200;

/// Checks that `name` can be used as a lock name, and says why not otherwise.
///
/// A lock name becomes one ZooKeeper node under the client's namespace, so it must be a
/// single, printable path segment: not empty, at most [`MAX_NAME_LEN`] bytes, no `/`, no
/// control characters, not `.` or `..`, and no characters outside the Basic Multilingual Plane
/// (emoji and the like), which ZooKeeper refuses.
///
/// ```
/// use zklock_runtime::validate_name;
///
/// assert!(validate_name("inventory:42").is_ok());
/// assert!(validate_name("").is_err());
/// assert!(validate_name("a/b").is_err());
/// assert!(validate_name("tab\there").is_err());
/// ```
pub fn validate_name(name: &str) -> Result<(), LockError> {
    let reject = |reason| {
        Err(LockError::InvalidName {
            name: name.to_owned(),
            reason,
        })
    };
    if name.is_empty() {
        return reject("it is empty");
    }
    if name.len() > MAX_NAME_LEN {
        return reject("it is longer than 200 bytes");
    }
    if name == "." || name == ".." {
        return reject("`.` and `..` are not node names in ZooKeeper");
    }
    if name.contains('/') {
        return reject("it contains `/`; a lock name is a single path segment");
    }
    if name.chars().any(forbidden_char) {
        return reject(
            "it contains a control character, a private-use or non-character code point, or a \
             character outside the Basic Multilingual Plane (such as an emoji), which ZooKeeper refuses",
        );
    }
    Ok(())
}

/// Checks a namespace root such as `/zklock` or `/apps/shop/locks`.
pub(crate) fn validate_namespace(root: &str) -> Result<(), LockError> {
    let bad = |why: &str| Err(LockError::invalid_config(format!("namespace {root:?}: {why}")));
    if !root.starts_with('/') || root.len() < 2 {
        return bad("must be an absolute path below `/`, like `/zklock`");
    }
    if root.ends_with('/') {
        return bad("must not end with `/`");
    }
    for segment in root[1..].split('/') {
        if segment.is_empty() || segment == "." || segment == ".." {
            return bad("has an empty, `.` or `..` segment");
        }
        if segment.chars().any(forbidden_char) {
            return bad("contains a control or non-character code point");
        }
    }
    if root == "/zookeeper" || root.starts_with("/zookeeper/") {
        return bad("`/zookeeper` is reserved by the server");
    }
    Ok(())
}

/// Characters ZooKeeper refuses in node names (see `PathUtils.validatePath`). Characters
/// outside the Basic Multilingual Plane are refused too: the server's Java strings hold them as
/// surrogate pairs, which that check forbids, so such a name would only fail later, on the
/// server, with an unhelpful error.
fn forbidden_char(c: char) -> bool {
    matches!(c, '\u{0}'..='\u{1f}' | '\u{7f}'..='\u{9f}' | '\u{e000}'..='\u{f8ff}' | '\u{fff0}'..='\u{ffff}')
        || c > '\u{ffff}'
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn names() {
        assert!(validate_name("seckill:1001").is_ok());
        assert!(validate_name(&"x".repeat(MAX_NAME_LEN)).is_ok());
        assert!(validate_name(&"x".repeat(MAX_NAME_LEN + 1)).is_err());
        assert!(validate_name("..").is_err());
        assert!(validate_name("a\u{7f}").is_err());
        assert!(validate_name("ünïcödé").is_ok());
        assert!(validate_name("库存:42").is_ok());
        for outside_bmp in ["🔒", "k:😀", "\u{10000}"] {
            assert!(validate_name(outside_bmp).is_err(), "{outside_bmp:?} accepted");
        }
    }

    #[test]
    fn namespaces() {
        assert!(validate_namespace("/zklock").is_ok());
        assert!(validate_namespace("/a/b").is_ok());
        for bad in ["", "/", "zklock", "/a/", "/a//b", "/zookeeper", "/a/./b"] {
            assert!(validate_namespace(bad).is_err(), "{bad:?} accepted");
        }
    }

    /// Characters ZooKeeper takes in a node name, other than `/`: printable ASCII and the Basic
    /// Multilingual Plane outside the C1 controls, the private-use area and U+FFF0..=U+FFFF.
    fn name_char() -> impl Strategy<Value = char> {
        prop_oneof![
            prop::char::range(' ', '.'),
            prop::char::range('0', '~'),
            prop::char::range('\u{a0}', '\u{d7ff}'),
            prop::char::range('\u{f900}', '\u{ffef}'),
        ]
    }

    /// Characters no lock name may hold.
    fn refused_char() -> impl Strategy<Value = char> {
        prop_oneof![
            Just('/'),
            prop::char::range('\u{0}', '\u{1f}'),
            prop::char::range('\u{7f}', '\u{9f}'),
            prop::char::range('\u{e000}', '\u{f8ff}'),
            prop::char::range('\u{fff0}', '\u{ffff}'),
            prop::char::range('\u{10000}', char::MAX),
        ]
    }

    /// Up to 66 characters of at most 3 bytes each: never longer than `MAX_NAME_LEN`.
    fn good_name() -> impl Strategy<Value = String> {
        prop::collection::vec(name_char(), 1..=66)
            .prop_map(String::from_iter)
            .prop_filter("`.` and `..` are refused", |n| n != "." && n != "..")
    }

    proptest! {
        #[test]
        fn names_zookeeper_takes_are_accepted(name in good_name()) {
            prop_assert!(validate_name(&name).is_ok());
            // It is one segment of a valid path, too.
            let path = format!("/zklock/{name}");
            prop_assert!(validate_namespace(&path).is_ok(), "{path:?}");
        }

        #[test]
        fn one_refused_character_is_enough(name in good_name(), c in refused_char(), at in any::<prop::sample::Index>()) {
            let mut chars: Vec<char> = name.chars().collect();
            chars.insert(at.index(chars.len() + 1), c);
            let bad: String = chars.into_iter().collect();
            let err = validate_name(&bad).unwrap_err();
            let quoted = matches!(&err, LockError::InvalidName { name, reason } if *name == bad && !reason.is_empty());
            prop_assert!(quoted, "{err:?}");
            prop_assert!(err.to_string().contains(&format!("{bad:?}")), "{err}");
        }

        /// Any string: accepted, or refused as an invalid name that quotes it; and whatever is
        /// accepted fits in a ZooKeeper path segment.
        #[test]
        fn any_string_is_accepted_or_refused_with_a_reason(name in prop_oneof![any::<String>(), "[./a\u{7f}\u{1F512}]{0,4}"]) {
            match validate_name(&name) {
                Ok(()) => {
                    prop_assert!(!name.is_empty() && name.len() <= MAX_NAME_LEN && !name.contains('/'));
                    prop_assert!(name.chars().all(|c| (c as u32) < 0x10000 && !c.is_control()));
                }
                Err(LockError::InvalidName { name: quoted, reason }) => {
                    prop_assert_eq!(quoted, name);
                    prop_assert!(!reason.is_empty());
                }
                Err(other) => prop_assert!(false, "{other:?}"),
            }
        }

        #[test]
        fn namespaces_of_good_segments_are_accepted(segments in prop::collection::vec(good_name(), 1..4)) {
            prop_assume!(segments[0] != "zookeeper");
            let root = format!("/{}", segments.join("/"));
            prop_assert!(validate_namespace(&root).is_ok(), "{root:?}");
        }

        #[test]
        fn any_namespace_is_accepted_or_refused_with_a_reason(root in prop_oneof![any::<String>(), "(/[.az\u{0}]{0,3}){0,3}/?"]) {
            match validate_namespace(&root) {
                Ok(()) => prop_assert!(root.starts_with('/') && !root.ends_with('/') && !root.contains("//")),
                Err(LockError::InvalidConfig { message, .. }) => prop_assert!(message.contains(&format!("{root:?}")), "{message}"),
                Err(other) => prop_assert!(false, "{other:?}"),
            }
        }
    }
}
