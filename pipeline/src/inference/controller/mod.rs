//! The concurrency controller: one per server, a pure synchronous state machine that turns a
//! per-tick [`Observation`] of the server and its client into a concurrency limit (field-notes
//! §2.5). It owns no I/O, no clock and no tasks; the dispatcher's sampler feeds it and applies
//! the [`Decision`].
//!
//! - [`settings`]: the tunables and their documented defaults.
//! - [`stats`]: decayed output-length statistics, persisted across restarts.
//! - [`types`]: caps, observations, decisions.
//! - [`state`]: the controller itself — ceiling, guards, startup, creep and probes.

pub mod settings;
pub mod state;
pub mod stats;
pub mod types;
mod window;

#[cfg(test)]
mod tests;

pub use settings::Settings;
pub use state::Controller;
pub use stats::LengthStats;
pub use types::{Caps, Decision, Finish, Observation, Phase};
