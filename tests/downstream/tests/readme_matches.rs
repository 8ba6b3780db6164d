//! README's test-suite example is `tests/readme_suite.rs` word for word, so what an adopter
//! copies is what this crate builds and runs.

#[test]
fn readme_shows_the_suite_this_crate_runs() {
    let readme = include_str!("../../../README.md");
    let suite = include_str!("readme_suite.rs");
    let block = format!("```rust,no_run\n{suite}```");
    assert!(
        readme.contains(&block),
        "README.md's test-suite example differs from tests/downstream/tests/readme_suite.rs: \
         copy one into the other"
    );
}
