//! The run directory on disk, every file's type, reader and writer: its layout ([`layout`]),
//! atomic writes ([`atomic`]), owner-only files ([`private`]), appended text lines
//! ([`append`]), the framed zstd JSONL files prompts and completions live in ([`frames`]), the
//! records stored per source and the answer rule ([`records`]), the id index written after
//! each completions frame ([`index`]), the done-set read back on start ([`done`]), held as
//! compact id sets ([`ids`]), counters of the stored completions ([`tally`]), a source's
//! prepared prompts file ([`prompts`]), its `manifest.json` ([`manifest`]) and its preparation
//! worker's files ([`worker`]), and the settings a run is pinned to (`run.json`, [`pin`]).

pub mod append;
pub mod atomic;
pub mod done;
pub mod events;
pub mod frames;
pub mod ids;
pub mod index;
pub mod layout;
pub mod manifest;
pub mod pin;
pub mod private;
pub mod prompts;
pub mod records;
pub mod tally;
pub mod worker;

pub use layout::{RunDir, SourceDir};
