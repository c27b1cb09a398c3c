//! The run directory on disk: its layout ([`layout`]), atomic writes ([`atomic`]) and the
//! framed zstd JSONL files prompts and completions live in ([`frames`]), and the done-set read
//! back from them on start ([`done`]).

pub mod atomic;
pub mod done;
pub mod events;
pub mod frames;
pub mod layout;

pub use layout::{RunDir, SourceDir};
