//! Real ZooKeeper servers for tests (feature `testing`).
pub mod curator;
