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
    /// A CSV value's bytes are not UTF-8.
    #[error("invalid UTF-8 at byte {at} of field `{field}`")]
    InvalidUtf8Field { field: String, at: usize },
    /// A CSV record whose field count is not the header's.
    #[error("the row has {found} fields where the header has {expected}")]
    FieldCount { expected: u64, found: u64 },
}

impl RowError {
    /// A short stable key for manifests and counters.
    pub fn reason(&self) -> &'static str {
        match self {
            RowError::BadJson(_) => "bad_json",
            RowError::NotAnObject => "not_an_object",
            RowError::InvalidUtf8 { .. } | RowError::InvalidUtf8Field { .. } => "invalid_utf8",
            RowError::FieldCount { .. } => "field_count",
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

/// A compression a file is read through, known by its last extension.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Compression {
    Zstd,
    Gzip,
}

/// Each compression and the extension it is known by.
const COMPRESSIONS: [(Compression, &str); 2] =
    [(Compression::Zstd, "zst"), (Compression::Gzip, "gz")];

impl Compression {
    /// The compression `path` is read through (by its extension), and the extension.
    pub fn of(path: &Path) -> Option<(Compression, &'static str)> {
        let extension = path.extension()?.to_str()?;
        COMPRESSIONS
            .into_iter()
            .find(|(_, known)| *known == extension)
    }
}

/// Whether `path` is read through a decompressor (`.zst` or `.gz`).
pub(super) fn is_compressed(path: &Path) -> bool {
    Compression::of(path).is_some()
}

/// Opens `path`, transparently decompressing `.zst` and `.gz`.
pub fn open_decoded(path: &Path) -> io::Result<Box<dyn Read + Send>> {
    let file = fs_err::File::open(path)?;
    match Compression::of(path) {
        Some((Compression::Zstd, _)) => Ok(Box::new(zstd::stream::read::Decoder::new(file)?)),
        Some((Compression::Gzip, _)) => Ok(Box::new(flate2::read::MultiGzDecoder::new(file))),
        None => Ok(Box::new(file)),
    }
}
