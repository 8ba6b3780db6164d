//! Every misuse of `#[distributed_lock]` is a compile error pointing at the mistake; the
//! expected messages and spans are checked in `tests/ui/*.stderr`.

#[test]
fn misuse_is_a_compile_error_at_the_offending_token() {
    let cases = trybuild::TestCases::new();
    cases.compile_fail("tests/ui/*.rs");
}
