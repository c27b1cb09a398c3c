//! One JSON array of objects per file (ShareGPT's 464 MB `ShareGPT_V4.3_…json`, OpenHermes),
//! streamed element by element: a scanner finds the bytes of each element (up to the next
//! top-level `,` or `]`, tracking strings, escapes and nesting depth) and parses only those, so
//! memory stays at one element however large the array is.
//!
//! A malformed element is one bad row, counted under its index (`bad_json`, `invalid_utf8`,
//! `not_an_object`), and reading goes on with the next element: the scanner needs only the
//! quotes and brackets to balance, not the element to be valid. A raw line break inside a string
//! (never valid JSON) is taken as the end of a string cut short, so a truncated value in a
//! pretty-printed file costs its element, not the file. An element over
//! [`MAX_ELEMENT_BYTES`] (brackets that never close) is a bad row too, and is not kept in memory.
//!
//! What cannot be resynchronised ends the file with a [`JsonArrayError`] (the caller names the
//! file; the rows before were delivered): no opening `[`, data after the closing `]`, or a file
//! that ends before the closing `]`. The last is a truncated file (a broken download or copy):
//! it fails the source rather than counting its tail as one bad row, because a file cut in half
//! must not pass as a complete one with a single drop.

use std::io::{self, BufRead, BufReader};
use std::path::Path;

use super::open::{Row, RowError, open_decoded, parse_object};

/// Elements larger than this are counted as bad rows without being kept: far above a real
/// conversation (a 4 MiB row is read), far below a worker's memory.
pub const MAX_ELEMENT_BYTES: usize = 256 << 20;

/// Why the array in a file cannot be read on; the rows before were delivered.
#[derive(Debug, thiserror::Error)]
pub enum JsonArrayError {
    #[error("invalid JSON array after 0 rows: expected `[` at the start, found {found}")]
    NotAnArray { found: String },
    #[error(
        "invalid JSON array after {rows} rows: the file ends at byte {end} before the closing \
         `]`, so it is truncated (download or copy it again)"
    )]
    Truncated { rows: u64, end: u64 },
    #[error(
        "invalid JSON array after {rows} rows: unexpected data after the closing `]` at byte {at}"
    )]
    TrailingData { rows: u64, at: u64 },
}

fn invalid(error: JsonArrayError) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, error)
}

/// How an element's bytes ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum End {
    /// A top-level `,`: another element follows.
    Comma,
    /// The array's closing `]`.
    Close,
    /// The end of the file.
    Eof,
}

/// A byte stream with its position (in the decompressed data).
struct Scanner<R> {
    reader: R,
    offset: u64,
    /// [`MAX_ELEMENT_BYTES`], smaller in tests.
    max_element: usize,
}

impl<R: BufRead> Scanner<R> {
    /// The next byte that is not JSON whitespace, consumed; `None` at the end of the file.
    fn next_non_space(&mut self) -> io::Result<Option<u8>> {
        loop {
            let buffer = self.reader.fill_buf()?;
            if buffer.is_empty() {
                return Ok(None);
            }
            let skipped = buffer
                .iter()
                .take_while(|b| b.is_ascii_whitespace())
                .count();
            let found = buffer.get(skipped).copied();
            let consumed = skipped + usize::from(found.is_some());
            self.reader.consume(consumed);
            self.offset += consumed as u64;
            if found.is_some() {
                return Ok(found);
            }
        }
    }

    /// Appends the bytes of the next element to `element` (up to [`MAX_ELEMENT_BYTES`]; `true`
    /// is returned with the end when it was longer) and consumes its `,` or `]`.
    fn element(&mut self, element: &mut Vec<u8>) -> io::Result<(End, bool)> {
        let mut in_string = false;
        let mut escaped = false;
        let mut depth = 0u64;
        let mut oversized = false;
        loop {
            let buffer = self.reader.fill_buf()?;
            if buffer.is_empty() {
                return Ok((End::Eof, oversized));
            }
            let mut end = None;
            for (i, &byte) in buffer.iter().enumerate() {
                if in_string {
                    // A raw line break cannot be in a JSON string: this one was cut short.
                    if byte == b'\n' {
                        in_string = false;
                        escaped = false;
                    } else if escaped {
                        escaped = false;
                    } else if byte == b'\\' {
                        escaped = true;
                    } else if byte == b'"' {
                        in_string = false;
                    }
                    continue;
                }
                match byte {
                    b'"' => in_string = true,
                    b'{' | b'[' => depth += 1,
                    b'}' | b']' if depth > 0 => depth -= 1,
                    b']' => end = Some((i, End::Close)),
                    b',' if depth == 0 => end = Some((i, End::Comma)),
                    _ => {}
                }
                if end.is_some() {
                    break;
                }
            }
            let (taken, consumed) = match end {
                Some((i, _)) => (i, i + 1),
                None => (buffer.len(), buffer.len()),
            };
            if element.len() + taken > self.max_element {
                oversized = true;
                element.clear();
            }
            if !oversized {
                element.extend_from_slice(&buffer[..taken]);
            }
            self.reader.consume(consumed);
            self.offset += consumed as u64;
            if let Some((_, end)) = end {
                return Ok((end, oversized));
            }
        }
    }
}

/// One element's bytes (starting at byte `start` of the file) as a row.
fn parse_element(
    bytes: &[u8],
    start: u64,
    oversized: Option<usize>,
) -> Result<serde_json::Value, RowError> {
    if let Some(limit) = oversized {
        return Err(RowError::BadJson(format!(
            "the element at byte {start} is larger than {limit} bytes (brackets or quotes that \
             never close?)"
        )));
    }
    if bytes.is_empty() {
        return Err(RowError::BadJson(format!(
            "empty element at byte {start} (two commas, or a comma before `]`)"
        )));
    }
    parse_object(bytes).map_err(|error| match error {
        // serde's line and column count from the element's start.
        RowError::BadJson(message) => {
            RowError::BadJson(format!("{message} of the element at byte {start}"))
        }
        other => other,
    })
}

/// What the first byte of a file that is not an array is, for the error.
fn describe(byte: Option<u8>) -> String {
    match byte {
        None => "the end of the file".to_owned(),
        Some(byte) if byte.is_ascii_graphic() => format!("`{}`", char::from(byte)),
        Some(byte) => format!("byte 0x{byte:02x}"),
    }
}

/// Streams the elements of the JSON array in `path` (optionally `.zst`/`.gz`) to `on_row`.
pub fn for_each_array_row(path: &Path, on_row: &mut dyn FnMut(Row)) -> io::Result<()> {
    let reader = BufReader::with_capacity(1 << 20, open_decoded(path)?);
    read_array(reader, MAX_ELEMENT_BYTES, on_row)
}

fn read_array(
    reader: impl BufRead,
    max_element: usize,
    on_row: &mut dyn FnMut(Row),
) -> io::Result<()> {
    let mut scanner = Scanner {
        reader,
        offset: 0,
        max_element,
    };
    match scanner.next_non_space()? {
        Some(b'[') => {}
        found => {
            return Err(invalid(JsonArrayError::NotAnArray {
                found: describe(found),
            }));
        }
    }
    let mut rows = 0u64;
    let mut element = Vec::new();
    loop {
        element.clear();
        let from = scanner.offset;
        let (end, oversized) = scanner.element(&mut element)?;
        let leading = element.len() - element.trim_ascii_start().len();
        let bytes = element.trim_ascii();
        match end {
            End::Eof => {
                return Err(invalid(JsonArrayError::Truncated {
                    rows,
                    end: scanner.offset,
                }));
            }
            // `[]`
            End::Close if rows == 0 && bytes.is_empty() && !oversized => break,
            End::Comma | End::Close => {
                let oversized = oversized.then_some(max_element);
                on_row((rows, parse_element(bytes, from + leading as u64, oversized)));
                rows += 1;
                if end == End::Close {
                    break;
                }
            }
        }
    }
    if scanner.next_non_space()?.is_some() {
        return Err(invalid(JsonArrayError::TrailingData {
            rows,
            at: scanner.offset - 1,
        }));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    type Outcome = Vec<(u64, Result<(), &'static str>)>;

    fn read(bytes: &[u8], name: &str) -> (Outcome, io::Result<()>) {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join(name);
        fs_err::write(&path, bytes).expect("write");
        let mut seen = Vec::new();
        let result = for_each_array_row(&path, &mut |(row, parsed)| {
            seen.push((row, parsed.map(|_| ()).map_err(|e| e.reason())));
        });
        (seen, result)
    }

    /// Every row, with the error's text for bad ones, read with elements capped at `max`.
    fn details(
        bytes: &[u8],
        max: usize,
    ) -> (Vec<Result<serde_json::Value, String>>, io::Result<()>) {
        let mut seen = Vec::new();
        let result = read_array(bytes, max, &mut |(row, parsed)| {
            assert_eq!(row, seen.len() as u64);
            seen.push(parsed.map_err(|e| format!("{}: {e}", e.reason())));
        });
        (seen, result)
    }

    #[test]
    fn streams_objects_and_counts_non_objects() {
        let (rows, result) = read(
            br#" [ {"id": "a"}, 5, {"id": "b", "x": [1, {"y": null}]} ] "#,
            "a.json",
        );
        result.expect("valid array");
        assert_eq!(
            rows,
            vec![(0, Ok(())), (1, Err("not_an_object")), (2, Ok(()))]
        );
    }

    #[test]
    fn empty_array_has_no_rows() {
        for bytes in [&b"[]"[..], b" [ \n ] \n"] {
            let (rows, result) = read(bytes, "a.json");
            result.expect("valid");
            assert!(rows.is_empty());
        }
    }

    #[test]
    fn strings_with_brackets_commas_and_escapes_do_not_split_elements() {
        let (rows, result) = details(
            br#"[{"a": "x, ] } [ {", "b": "\"],\\"}, {"c": ["]", {"d": "\\\""}]}]"#,
            usize::MAX,
        );
        result.expect("valid");
        assert_eq!(
            rows,
            [
                Ok(serde_json::json!({"a": "x, ] } [ {", "b": "\"],\\"})),
                Ok(serde_json::json!({"c": ["]", {"d": "\\\""}]})),
            ]
        );
    }

    #[test]
    fn a_malformed_element_is_one_bad_row_and_reading_goes_on() {
        let cases: [(&str, &[u8], &str); 8] = [
            ("bad literal", br#"{"a": tru}"#, "bad_json"),
            ("trailing comma in object", br#"{"a": 1,}"#, "bad_json"),
            ("missing colon", br#"{"a" 1}"#, "bad_json"),
            ("stray closing brace", br#"{"a": 1}}"#, "bad_json"),
            ("two values", br#"{"a": 1} {"a": 2}"#, "bad_json"),
            ("latin-1 byte", b"{\"a\": \"caf\xe9\"}", "invalid_utf8"),
            ("lone surrogate", br#"{"a": "\ud800"}"#, "bad_json"),
            ("a string", br#""text""#, "not_an_object"),
        ];
        for (name, element, reason) in cases {
            let mut bytes = br#"[{"a": 0}, "#.to_vec();
            bytes.extend_from_slice(element);
            bytes.extend_from_slice(br#", {"a": 2}]"#);
            let (rows, result) = read(&bytes, "a.json");
            result.unwrap_or_else(|e| panic!("{name}: {e}"));
            assert_eq!(
                rows,
                vec![(0, Ok(())), (1, Err(reason)), (2, Ok(()))],
                "{name}"
            );
        }
    }

    #[test]
    fn bad_rows_say_where_the_element_starts() {
        let (rows, result) = details(br#"[{"a": 1},  {"a": tru}, , {"a": 2},]"#, usize::MAX);
        result.expect("resynchronised");
        assert_eq!(
            rows,
            [
                Ok(serde_json::json!({"a": 1})),
                Err(
                    "bad_json: invalid JSON: expected ident at line 1 column 10 of the element \
                     at byte 12"
                        .to_owned()
                ),
                Err(
                    "bad_json: invalid JSON: empty element at byte 24 (two commas, or a comma \
                     before `]`)"
                        .to_owned()
                ),
                Ok(serde_json::json!({"a": 2})),
                Err(
                    "bad_json: invalid JSON: empty element at byte 35 (two commas, or a comma \
                     before `]`)"
                        .to_owned()
                ),
            ]
        );
    }

    #[test]
    fn a_string_cut_at_a_line_break_costs_one_row_in_a_pretty_printed_array() {
        let bytes = b"[\n  {\n    \"id\": \"a\",\n    \"value\": \"cut short\n  },\n  {\n    \"id\": \"b\"\n  }\n]\n";
        let (rows, result) = details(bytes, usize::MAX);
        result.expect("resynchronised");
        assert_eq!(rows.len(), 2);
        assert!(
            rows[0]
                .as_ref()
                .is_err_and(|e| e.starts_with("bad_json: invalid JSON: control character")),
            "{rows:?}"
        );
        assert_eq!(rows[1], Ok(serde_json::json!({"id": "b"})));
    }

    #[test]
    fn an_element_over_the_size_limit_is_a_bad_row_not_kept_in_memory() {
        let (rows, result) = details(br#"[{"a": "0123456789"}, {"a": 1}]"#, 12);
        result.expect("valid");
        assert_eq!(
            rows,
            [
                Err(
                    "bad_json: invalid JSON: the element at byte 1 is larger than 12 bytes \
                     (brackets or quotes that never close?)"
                        .to_owned()
                ),
                Ok(serde_json::json!({"a": 1})),
            ]
        );
    }

    #[test]
    fn what_cannot_be_resynchronised_ends_the_file_with_an_error() {
        let cases: [(&str, &[u8], usize, &str); 7] = [
            (
                "truncated in an element",
                br#"[{"id": "a"}, {"id": "b"}, {"id": "#,
                2,
                "invalid JSON array after 2 rows: the file ends at byte 34 before the closing \
                 `]`, so it is truncated (download or copy it again)",
            ),
            (
                "truncated after a complete element",
                br#"[{"id": "a"}"#,
                0,
                "invalid JSON array after 0 rows: the file ends at byte 12 before the closing \
                 `]`, so it is truncated (download or copy it again)",
            ),
            (
                // The unbalanced quote swallows the rest of a one-line file.
                "string cut short on one line",
                br#"[{"a": "cut}, {"a": 2}]"#,
                0,
                "invalid JSON array after 0 rows: the file ends at byte 23 before the closing \
                 `]`, so it is truncated (download or copy it again)",
            ),
            (
                "an object",
                br#"{"id": "a"}"#,
                0,
                "invalid JSON array after 0 rows: expected `[` at the start, found `{`",
            ),
            (
                "html",
                b"<html>",
                0,
                "invalid JSON array after 0 rows: expected `[` at the start, found `<`",
            ),
            (
                "empty",
                b"  ",
                0,
                "invalid JSON array after 0 rows: expected `[` at the start, found the end of \
                 the file",
            ),
            (
                "data after the array",
                br#"[{"id": "a"}] [{"id": "b"}]"#,
                1,
                "invalid JSON array after 1 rows: unexpected data after the closing `]` at byte \
                 14",
            ),
        ];
        for (name, bytes, delivered, message) in cases {
            let (rows, result) = read(bytes, "a.json");
            assert_eq!(rows.len(), delivered, "{name}");
            let error = result.expect_err(name);
            assert_eq!(error.kind(), io::ErrorKind::InvalidData, "{name}");
            assert_eq!(error.to_string(), message, "{name}");
        }
    }

    #[test]
    fn reads_zstd_compressed_arrays() {
        let compressed =
            zstd::encode_all(&br#"[{"a": 1}, {"a": tru}, {"a": 2}]"#[..], 3).expect("zstd");
        let (rows, result) = read(&compressed, "a.json.zst");
        result.expect("valid");
        assert_eq!(rows, vec![(0, Ok(())), (1, Err("bad_json")), (2, Ok(()))]);
    }

    #[test]
    fn a_truncated_compressed_array_keeps_the_decompression_error() {
        let elements: String = (0..2000).map(|i| format!("{{\"a\": {i}}},")).collect();
        let compressed = zstd::encode_all(format!("[{elements}{{}}]").as_bytes(), 3).expect("zstd");
        let (_, result) = read(&compressed[..compressed.len() / 2], "a.json.zst");
        let error = result.expect_err("truncated frame");
        assert!(error.to_string().contains("incomplete frame"), "{error}");
    }
}
