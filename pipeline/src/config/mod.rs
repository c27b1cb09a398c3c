//! `datasets.toml`: the raw file ([`file`]), the keys it accepts ([`keys`]), its resolution
//! into a [`Plan`] ([`plan`]), what one source's requests ask for ([`settings`]), problem
//! reporting with `file:line:column` ([`problem`]), the value types of settings ([`values`])
//! and the variable syntax of launch arguments ([`launch`]).

pub mod file;
mod inputs;
pub mod keys;
pub mod launch;
pub mod plan;
pub mod problem;
pub mod settings;
pub mod values;

pub use keys::accepted_keys;
pub use plan::{GenerationPlan, Plan, ServerPlan, SourcePlan};
pub use problem::{ConfigError, Problem};
pub use settings::Settings;
