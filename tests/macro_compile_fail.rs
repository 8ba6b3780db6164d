//! Every misuse of `#[distributed_lock]` is a compile error pointing at the mistake; the
//! expected messages and spans are checked in `tests/ui/*.stderr`. The shapes in
//! `tests/ui/pass/` must compile without warnings and run: each was once a misreported or
//! refused use of the attribute.

#[test]
fn misuse_is_a_compile_error_at_the_offending_token() {
    // One `TestCases` for both kinds: they share trybuild's project directory.
    let cases = trybuild::TestCases::new();
    cases.pass("tests/ui/pass/*.rs");
    cases.compile_fail("tests/ui/*.rs");
}
