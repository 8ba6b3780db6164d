//! The way to ZooKeeper: the connect string ([`connect_string`]), TLS and SASL
//! ([`secure`]), the thread sessions live on ([`driver`]), one session with its health as the
//! lock core sees it ([`session`]), and the beat that tells a paused process from a live one
//! ([`pulse`]). The client ([`crate::client`]) opens sessions through
//! these; nothing here knows about locks.

pub(crate) mod connect_string;
pub(crate) mod driver;
pub(crate) mod pulse;
pub(crate) mod secure;
pub(crate) mod session;
