//! The concurrency controller: one per server, a pure synchronous state machine that turns a
//! per-tick [`TickObservation`] of the server and its client into a concurrency limit, steered by
//! what the server reports (running, queued, KV use, preemptions) rather than by latency, which
//! rises with batch size while throughput still rises. It owns no I/O, no clock and no tasks; the dispatcher's sampler feeds it and applies
//! the [`Decision`].
//!
//! - [`settings`]: the tunables and their documented defaults.
//! - [`stats`]: decayed output-length statistics, persisted across restarts.
//! - [`types`]: caps, observations, decisions, what a run reached.
//! - [`state`]: the controller itself — ceiling, guards, re-entry; `ramp` (startup), `steady`
//!   (creep and probes) and `words` (the status line) extend it.

mod ramp;
pub mod settings;
pub mod state;
pub mod stats;
mod steady;
pub mod types;
mod window;
mod words;

#[cfg(test)]
mod tests;

pub use settings::Settings;
pub use state::Controller;
pub use stats::LengthStats;
pub use types::{Caps, ControllerPhase, Decision, Finish, Reached, TickObservation};
