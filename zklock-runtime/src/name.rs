//! Lock names: what users may pass, and how a name maps to a ZooKeeper path.

use crate::LockError;

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
    let bad = |why: &str| Err(LockError::InvalidConfig(format!("namespace {root:?}: {why}")));
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
}
