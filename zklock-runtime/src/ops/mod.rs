//! What operators see: who a contender node belongs to ([`holder`], also what zklock writes into
//! its own nodes), the queue of a lock as it stands ([`inspect`], the `zklock` command's source)
//! the counters and histograms of [`metrics`] and the gauges of [`gauges`]; and what they may ask of holders
//! ([`revoke`]).

pub(crate) mod gauges;
pub(crate) mod holder;
pub(crate) mod inspect;
pub(crate) mod metrics;
pub(crate) mod revoke;
