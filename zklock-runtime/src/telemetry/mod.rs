//! What the engine reports as it works, below everything that holds locks: the client's
//! counters and the `metrics` facade's counters and histograms ([`metrics`]), and the gauges of
//! what is held, waited for and led now and of the sessions' states ([`gauges`]).

pub(crate) mod gauges;
pub(crate) mod metrics;
