//! cleanup
