//! What every reader shares: the row type, per-row errors and transparent decompression.

use std::io::{self, Read};
use std::path::Path;

use serde_json::Value;

/// Why a single row could not be read; counted and reported, never fatal.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RowError {
    #[error("invalid JSON: {0}")]
    BadJson(String),
    #[error("row is not a JSON object")]
    NotAnObject,
    /// The row's bytes are not UTF-8 (a file in Latin-1, or a row cut inside a character).
    #[error("invalid UTF-8 at byte {at} of the row")]
    InvalidUtf8 { at: usize },
}

impl RowError {
    /// A short stable key for manifests and counters.
    pub fn reason(&self) -> &'static str {
        match self {
            RowError::BadJson(_) => "bad_json",
            RowError::NotAnObject => "not_an_object",
            RowError::InvalidUtf8 { .. } => "invalid_utf8",
        }
    }
}

/// One row's bytes as a JSON object: invalid UTF-8 is told apart from bad JSON.
pub(super) fn parse_object(bytes: &[u8]) -> Result<Value, RowError> {
    if let Err(e) = std::str::from_utf8(bytes) {
        return Err(RowError::InvalidUtf8 {
            at: e.valid_up_to(),
        });
    }
    match serde_json::from_slice::<Value>(bytes) {
        Ok(value @ Value::Object(_)) => Ok(value),
        Ok(_) => Err(RowError::NotAnObject),
        Err(e) => Err(RowError::BadJson(e.to_string())),
    }
}

/// A row read from a file: its zero-based index and either the parsed object or why not.
pub type Row = (u64, Result<Value, RowError>);

/// Whether `path` is read through a decompressor (`.zst` or `.gz`).
pub(super) fn is_compressed(path: &Path) -> bool {
    matches!(
        path.extension().and_then(|e| e.to_str()),
        Some("zst" | "gz")
    )
}

/// Opens `path`, transparently decompressing `.zst` and `.gz`.
pub fn open_decoded(path: &Path) -> io::Result<Box<dyn Read + Send>> {
    let file = fs_err::File::open(path)?;
    match path.extension().and_then(|e| e.to_str()) {
        Some("zst") => Ok(Box::new(zstd::stream::read::Decoder::new(file)?)),
        Some("gz") => Ok(Box::new(flate2::read::MultiGzDecoder::new(file))),
        _ => Ok(Box::new(file)),
    }
}
