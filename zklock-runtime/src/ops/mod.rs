//! What operators see and ask, built on the client: the queue of a lock as it stands
//! ([`inspect`], the `zklock` command's source) and asking its holders to release
//! ([`revoke`]). What a contender node says about its holder is [`crate::node_data`]; what
//! the engine reports as it works is [`crate::telemetry`].

pub(crate) mod inspect;
pub(crate) mod revoke;
