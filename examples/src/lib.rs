//! The example programs' shared code, as a library so that the end-to-end tests in `tests/`
//! drive the very code the programs run. Not published.
//!
//! - [`seckill`]: the flash-sale inventory service (`cargo run -p zklock-examples --example seckill`).
//! - [`chaos`]: the fault-injection run and its history checker (`--example chaos`).
//! - [`shutdown`]: stopping cleanly on SIGINT or SIGTERM.
//!
//! The smaller programs (`hello_lock`, `singleton_job`) and the benchmark (`bench/`) are
//! self-contained examples of this crate.

pub mod chaos;
pub mod seckill;
pub mod shutdown;
