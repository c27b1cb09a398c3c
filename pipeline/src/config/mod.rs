//! `datasets.toml`: the raw file ([`file`]), the keys it accepts ([`keys`]), its resolution
//! into a [`Plan`] ([`plan`]) and problem reporting with `file:line:column` ([`problem`]).

pub mod file;
mod inputs;
pub mod keys;
pub mod plan;
pub mod problem;

pub use keys::accepted_keys;
pub use plan::{GenerationPlan, Plan, ServerPlan};
pub use problem::{ConfigError, Problem};
