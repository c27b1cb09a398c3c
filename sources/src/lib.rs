//! `gen-sources`: everything between a dataset on disk (or on the Hub) and a normalized
//! [`Prompt`].
//!
//! - [`spec`]: the raw `[[source]]` table of `datasets.toml` and its checks.
//! - [`read`]: streaming row readers; a malformed row is a counted [`read::RowError`], never a
//!   crash.
//! - [`normalize`]: one dataset row → OpenAI-style messages, with a reason when a row is dropped.
//! - [`prepare`]: the whole preparation of one source, writing prompts to a sink and returning a
//!   [`Manifest`] of what was read, kept and dropped.
//!
//! This crate is synchronous and knows nothing of processes, servers or run directories.

pub mod normalize;
pub mod prepare;
pub mod prompt;
pub mod read;
pub mod spec;

pub use prepare::{Manifest, SourceError, prepare};
pub use prompt::{Message, Prompt, Role};
pub use spec::SourceSpec;
