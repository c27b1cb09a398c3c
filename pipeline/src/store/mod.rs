//! The run directory on disk: its layout ([`layout`]), atomic writes ([`atomic`]), appended
//! text lines ([`append`]), the framed zstd JSONL files prompts and completions live in
//! ([`frames`]), the records stored per source and the answer rule ([`records`]), the id
//! index written after each completions frame ([`index`]), and the done-set read back on
//! start ([`done`]), held as compact id sets ([`ids`]).

pub mod append;
pub mod atomic;
pub mod done;
pub mod events;
pub mod frames;
pub mod ids;
pub mod index;
pub mod layout;
pub mod records;

pub use layout::{RunDir, SourceDir};
