//! JSON Lines: one object per line, each parsed on its own so one bad line is one bad row.

use std::io::{self, BufRead, BufReader, Read};
use std::path::{Path, PathBuf};

use super::open::{Row, open_decoded, parse_object};

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
            return Some(Ok((row, parse_object(trimmed))));
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::Value;

    use super::*;
    use crate::read::RowError;

    #[test]
    fn reads_gzip_compressed_jsonl() {
        use std::io::Write;
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("rows.jsonl.gz");
        let mut encoder = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        encoder
            .write_all(b"{\"a\":1}\n{\"a\":2}\n{\"a\":3}\n")
            .expect("gzip");
        fs_err::write(&path, encoder.finish().expect("gzip")).expect("write");
        assert_eq!(JsonlRows::open(&path).expect("open").count(), 3);
    }

    #[test]
    fn truncated_zstd_is_an_error_not_a_silent_end() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("rows.jsonl.zst");
        let rows: String = (0..2000).map(|i| format!("{{\"a\":{i}}}\n")).collect();
        let compressed = zstd::encode_all(rows.as_bytes(), 3).expect("zstd");
        fs_err::write(&path, &compressed[..compressed.len() / 2]).expect("write");
        let result: io::Result<Vec<Row>> = JsonlRows::open(&path).expect("open").collect();
        assert!(result.is_err(), "a truncated frame must fail");
    }

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
                (3, Err("invalid_utf8")),
                (4, Ok(())),
            ]
        );
    }

    #[test]
    fn invalid_utf8_is_its_own_reason_with_the_byte_it_starts_at() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("rows.jsonl");
        // Latin-1 `é`, a lone continuation byte, and a character cut after its first byte.
        let lines: [&[u8]; 4] = [
            b"{\"prompt\": \"caf\xe9\"}",
            b"{\"prompt\": \"\x80\"}",
            b"{\"prompt\": \"\xe2\x82\"}",
            "{\"prompt\": \"caf\u{e9} \u{20ac}\"}".as_bytes(),
        ];
        fs_err::write(&path, lines.join(&b'\n')).expect("write");
        let rows: Vec<(u64, Result<Value, RowError>)> = JsonlRows::open(&path)
            .expect("open")
            .collect::<io::Result<_>>()
            .expect("read");
        let errors: Vec<Option<String>> = rows
            .iter()
            .map(|(_, r)| r.as_ref().err().map(ToString::to_string))
            .collect();
        assert_eq!(
            errors,
            [
                Some("invalid UTF-8 at byte 15 of the row".to_owned()),
                Some("invalid UTF-8 at byte 12 of the row".to_owned()),
                Some("invalid UTF-8 at byte 12 of the row".to_owned()),
                None,
            ]
        );
        assert_eq!(
            rows[0].1.as_ref().map_err(RowError::reason),
            Err("invalid_utf8")
        );
        assert_eq!(
            rows[3].1,
            Ok(serde_json::json!({"prompt": "caf\u{e9} \u{20ac}"}))
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
