//! `gen-sources`: everything between a dataset on disk (or on the Hub) and a normalized
//! [`Prompt`].
//!
//! - [`spec`]: the raw `[[source]]` table of `datasets.toml` and its checks.
//! - [`hub`]: Hub dataset files, listed, selected by glob and cached as `huggingface_hub` does.
//! - [`read`]: streaming row readers (JSONL, JSON arrays, Parquet, CSV; `.zst`/`.gz`), one place
//!   that maps a file to its reader (`read::format_of`, `read::for_each_row`); a malformed row
//!   is a counted [`read::RowError`], never a crash.
//! - [`normalize`]: one dataset row → OpenAI-style messages, with a reason when a row is dropped.
//! - [`prepare`]: the whole preparation of one source, writing prompts to a sink and returning a
//!   [`Manifest`] of what was read, kept and dropped.
//! - [`env`]: the environment variables read (only by [`hub::HubSettings::from_env`]).
//!
//! This crate is synchronous (a Hub download runs on a private current-thread runtime) and knows
//! nothing of processes, servers or run directories.

pub mod env;
#[cfg(test)]
mod error_chains;
pub mod hub;
pub mod normalize;
pub mod prepare;
pub mod prompt;
pub mod read;
pub mod spec;

pub use hub::{HubError, HubSettings};
pub use prepare::{Manifest, PrepareOptions, SampleOptions, SourceError, prepare, prepare_with};
pub use prompt::{Message, Prompt, Role};
pub use spec::SourceSpec;
