//! The example programs' shared code, as a library so that the end-to-end tests in `tests/`
//! drive the very code the programs run. Not published.
//!
//! - [`seckill`]: the flash-sale inventory service (`cargo run -p zklock-examples --example seckill`).
//! - [`chaos`]: the fault-injection run and its history checker (`--example chaos`).
//! - [`singleton_job`]: a cron job run on one node of a cluster per tick (`--example singleton_job`).
//! - [`metrics`]: the Prometheus exporter the programs serve their metrics with.
//! - [`shutdown`]: stopping cleanly on SIGINT or SIGTERM.
//!
//! The smallest program (`hello_lock`) and the benchmark (`bench/`) are self-contained examples
//! of this crate.

pub mod chaos;
pub mod metrics;
pub mod seckill;
pub mod shutdown;
pub mod singleton_job;
