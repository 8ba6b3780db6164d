//! The seckill (flash-sale) inventory service and its demo driver, shared by the `seckill`
//! example program and the end-to-end tests in `examples/tests/seckill_e2e.rs`.
//!
//! - [`service`]: the HTTP service whose buy path runs under `#[distributed_lock]`.
//! - [`store`]: the inventory and order tables (SQLite or PostgreSQL), with the fenced write.
//! - [`driver`]: the demo: ZooKeeper, several service processes, the load, the summary.
//! - [`front`]: how the demo's requests reach the instances: at random or by item.
//! - [`redis_lock`]: the Redis lock the service can run with instead, for the benchmark.
//! - [`mod@bench`]: the benchmark's seckill section: the same sale under each lock, and a fault
//!   round.

pub mod bench;
pub mod driver;
pub mod front;
pub mod redis_lock;
pub mod service;
pub mod store;
