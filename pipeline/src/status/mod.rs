//! The run's live view: the `status.json` document `gen run` keeps current ([`state`]) and
//! its rendering as a plain 80-column table for `gen status` over SSH ([`render`]); a sharded
//! job's shards summed into one view ([`job`]); the `gen status` command ([`command`]).

pub mod command;
pub mod job;
pub mod remote;
pub mod render;
pub mod state;

pub use state::{Phase, RunStatus, SourceStatus};
