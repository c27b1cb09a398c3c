//! Streaming row readers. Files are never loaded whole; each row is parsed on its own so one
//! malformed row becomes a [`RowError`] for that row and reading goes on.

use std::io::{self, BufRead, BufReader, Read};
use std::path::{Path, PathBuf};

use serde_json::Value;

/// Why a single row could not be read; counted and reported, never fatal.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RowError {
    #[error("invalid JSON: {0}")]
    BadJson(String),
    #[error("row is not a JSON object")]
    NotAnObject,
}

impl RowError {
    /// A short stable key for manifests and counters.
    pub fn reason(&self) -> &'static str {
        match self {
            RowError::BadJson(_) => "bad_json",
            RowError::NotAnObject => "not_an_object",
        }
    }
}

/// A row read from a file: its zero-based index and either the parsed object or why not.
pub type Row = (u64, Result<Value, RowError>);

/// Opens `path`, transparently decompressing `.zst`.
fn open_decoded(path: &Path) -> io::Result<Box<dyn Read + Send>> {
    let file = fs_err::File::open(path)?;
    if path.extension().is_some_and(|e| e == "zst") {
        Ok(Box::new(zstd::stream::read::Decoder::new(file)?))
    } else {
        Ok(Box::new(file))
    }
}

/// Reads JSON Lines: one object per line; blank lines are skipped, not counted as rows.
pub struct JsonlRows {
    path: PathBuf,
    reader: BufReader<Box<dyn Read + Send>>,
    line: Vec<u8>,
    next_row: u64,
}

impl JsonlRows {
    pub fn open(path: &Path) -> io::Result<JsonlRows> {
        Ok(JsonlRows {
            path: path.to_path_buf(),
            reader: BufReader::with_capacity(1 << 20, open_decoded(path)?),
            line: Vec::new(),
            next_row: 0,
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Iterator for JsonlRows {
    /// An I/O error (truncated compressed stream, unreadable file) ends the file and names it.
    type Item = io::Result<Row>;

    fn next(&mut self) -> Option<Self::Item> {
        loop {
            self.line.clear();
            match self.reader.read_until(b'\n', &mut self.line) {
                Ok(0) => return None,
                Ok(_) => {}
                Err(e) => return Some(Err(e)),
            }
            let trimmed = self.line.trim_ascii();
            if trimmed.is_empty() {
                continue;
            }
            let row = self.next_row;
            self.next_row += 1;
            // `from_slice` rejects invalid UTF-8 as well as bad syntax.
            let parsed = match serde_json::from_slice::<Value>(trimmed) {
                Ok(value @ Value::Object(_)) => Ok(value),
                Ok(_) => Err(RowError::NotAnObject),
                Err(e) => Err(RowError::BadJson(e.to_string())),
            };
            return Some(Ok((row, parsed)));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn malformed_rows_are_reported_and_reading_goes_on() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("rows.jsonl");
        let mut bytes = b"{\"a\":1}\n\nnot json\n[1,2]\n".to_vec();
        bytes.extend_from_slice(b"{\"b\":\"\xff\"}\n{\"c\":3}");
        fs_err::write(&path, bytes).expect("write");
        let rows: Vec<Row> = JsonlRows::open(&path)
            .expect("open")
            .collect::<io::Result<_>>()
            .expect("read");
        let summary: Vec<(u64, Result<(), &'static str>)> = rows
            .iter()
            .map(|(i, r)| (*i, r.as_ref().map(|_| ()).map_err(RowError::reason)))
            .collect();
        assert_eq!(
            summary,
            vec![
                (0, Ok(())),
                (1, Err("bad_json")),
                (2, Err("not_an_object")),
                (3, Err("bad_json")),
                (4, Ok(())),
            ]
        );
    }

    #[test]
    fn reads_zstd_compressed_jsonl() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("rows.jsonl.zst");
        let compressed = zstd::encode_all(&b"{\"a\":1}\n{\"a\":2}\n"[..], 3).expect("zstd");
        fs_err::write(&path, compressed).expect("write");
        let count = JsonlRows::open(&path).expect("open").count();
        assert_eq!(count, 2);
    }
}
