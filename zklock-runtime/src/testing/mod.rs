//! Real ZooKeeper servers for tests (feature `testing`).
