//! Shapes of `#[distributed_lock]` that were once misreported or refused: each module must
//! compile without warnings (`#![deny(warnings)]` in each) and its `main` must run to the end.
//!
//! They are a test target of their own rather than trybuild `pass` cases, so that trybuild
//! only checks its compile-fail cases (`cargo check`, no code generation for its dependencies)
//! while these build with the workspace's other tests.

// Kept as written: their layout (one-line bodies, attributes inside bodies) is what they test.
#[rustfmt::skip]
#[path = "async_trait.rs"]
mod in_async_trait;
#[rustfmt::skip]
mod crate_option;
#[rustfmt::skip]
mod inner_attributes;
#[rustfmt::skip]
mod never_falls_through;
#[rustfmt::skip]
mod one_line_bodies;
#[rustfmt::skip]
mod placeholders;
#[rustfmt::skip]
mod several_names;
#[rustfmt::skip]
mod skip_if_busy;

#[test]
fn the_attribute_inside_async_trait_impls_and_traits() {
    in_async_trait::main();
}

#[test]
fn the_crate_option_names_the_facade() {
    crate_option::main();
}

#[test]
fn inner_attributes_of_the_body_stay_with_it() {
    inner_attributes::main();
}

#[test]
fn bodies_that_never_fall_through() {
    never_falls_through::main();
}

#[test]
fn one_line_bodies() {
    one_line_bodies::main();
}

#[test]
fn placeholders_of_every_shape() {
    placeholders::main();
}

#[test]
fn several_lock_names() {
    several_names::main();
}

#[test]
fn skip_if_busy_on_the_shapes_that_allow_it() {
    skip_if_busy::main();
}
