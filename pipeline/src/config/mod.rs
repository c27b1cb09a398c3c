//! `datasets.toml`: the raw file ([`file`]), its resolution into a [`Plan`] ([`plan`]) and
//! problem reporting with `file:line:column` ([`problem`]).

pub mod file;
pub mod plan;
pub mod problem;

pub use plan::{GenerationPlan, Plan, ServerPlan};
pub use problem::{ConfigError, Problem};
