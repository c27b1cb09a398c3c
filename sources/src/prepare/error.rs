//! What stops a source's preparation (a bad row never does).

use std::io;
use std::path::PathBuf;

use crate::hub::HubError;

#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SourceError {
    #[error("source `{source_name}`: `{pattern}` matches no file")]
    NoFiles {
        source_name: String,
        pattern: String,
    },
    #[error("source `{source_name}`: invalid glob `{pattern}`: {message}")]
    BadPattern {
        source_name: String,
        pattern: String,
        message: String,
    },
    /// The file is unreadable, corrupt or truncated; rows before the fault were counted.
    #[error("failed to read `{}`", path.display())]
    Read {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("source `{source_name}`: failed to get the files from the Hub")]
    Hub {
        source_name: String,
        // Boxed: Hub errors are large and rare; every other variant stays cheap to return.
        #[source]
        source: Box<HubError>,
    },
    /// The `tokenizer` file is missing or not a tokenizer.
    #[error("source `{source_name}`: {source}")]
    Tokenizer {
        source_name: String,
        source: crate::normalize::TokenizerError,
    },
    #[error("source `{source_name}` has neither `path` nor `repo`")]
    NoInput { source_name: String },
    #[error("failed to write prompts")]
    Sink(#[source] io::Error),
    /// The sample's temporary files (a sample larger than memory goes on on disk).
    #[error("failed to keep the sample on disk")]
    Sample(#[source] io::Error),
}
