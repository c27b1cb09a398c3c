//! The run directory on disk: its layout ([`layout`]), atomic writes ([`atomic`]) and the
//! framed zstd JSONL files prompts and completions live in ([`frames`]).

pub mod atomic;
pub mod events;
pub mod frames;
pub mod layout;

pub use layout::{RunDir, SourceDir};
