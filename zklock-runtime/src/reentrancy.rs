//! reentrancy
