//! The run directory on disk: its layout ([`layout`]), atomic writes ([`atomic`]), appended
//! text lines ([`append`]), the framed zstd JSONL files prompts and completions live in
//! ([`frames`]), the id index written after each completions frame ([`index`]), and the
//! done-set read back on start ([`done`]), counters of the stored completions ([`tally`]).

pub mod append;
pub mod atomic;
pub mod done;
pub mod events;
pub mod frames;
pub mod index;
pub mod layout;
pub mod tally;

pub use layout::{RunDir, SourceDir};
