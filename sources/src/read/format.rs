//! The one place a file meets its reader: which [`Format`] a file is in ([`format_of`]) and
//! which reader streams its rows ([`for_each_row`]). Compression is orthogonal: every reader
//! opens its file through [`super::open_decoded`], so each format is also read as `.zst` and
//! `.gz`.
//!
//! Adding a format touches three places, all in this folder: a variant of [`Format`] (its name
//! in `format = "…"`), a reader file, and a row of [`FORMATS`] (the extensions it is known by).
//! The `match` in [`for_each_row`] then asks for the reader, and the reader contract test
//! (`sources/tests/it/contract.rs`) for a row of its table: how to write a file in the format.

use std::io::{self, Read};
use std::path::Path;

use serde::{Deserialize, Serialize};

use super::csv::for_each_csv_row;
use super::json_array::for_each_array_row;
use super::jsonl::JsonlRows;
use super::open::{Compression, Row};
use super::parquet::for_each_parquet_row;
use super::projection::Projection;

/// The row format of a file, as `format = "…"` names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Format {
    /// One JSON object per line.
    Jsonl,
    /// One JSON array of objects.
    Json,
    Parquet,
    /// A header row of field names, then one row per record; every value is a string.
    Csv,
}

/// Each format and the file extensions it is known by (after a `.zst`/`.gz` is looked through).
pub const FORMATS: [(Format, &[&str]); 4] = [
    (Format::Jsonl, &["jsonl", "ndjson"]),
    (Format::Json, &["json"]),
    (Format::Parquet, &["parquet"]),
    (Format::Csv, &["csv"]),
];

/// The first bytes of every Parquet file.
const PARQUET_MAGIC: &[u8; 4] = b"PAR1";

/// What a reader must produce; `None` means everything. Only Parquet can skip columns; text
/// formats parse whole rows anyway.
pub type Columns<'a> = Option<&'a Projection>;

/// The format of `path`: `format` when set, else its extension (`.zst`/`.gz` looked through),
/// else — an extension none of [`FORMATS`] knows — Parquet when the file starts as one, else
/// JSON Lines.
pub fn format_of(format: Option<Format>, path: &Path) -> Format {
    if let Some(format) = format {
        return format;
    }
    let inner = match Compression::of(path) {
        Some(_) => path.with_extension(""),
        None => path.to_path_buf(),
    };
    let extension = inner.extension().and_then(|e| e.to_str()).unwrap_or("");
    let known = FORMATS
        .iter()
        .find(|(_, extensions)| extensions.contains(&extension));
    match known {
        Some((format, _)) => *format,
        None if starts_with_parquet_magic(path) => Format::Parquet,
        None => Format::Jsonl,
    }
}

/// Whether the file at `path` begins with Parquet's magic bytes; `false` when it cannot be read
/// (the reader then reports why).
fn starts_with_parquet_magic(path: &Path) -> bool {
    let mut head = [0u8; 4];
    super::open_decoded(path)
        .and_then(|mut file| file.read_exact(&mut head))
        .is_ok_and(|()| &head == PARQUET_MAGIC)
}

/// Streams every row of `path` to `on_row`. An `Err` means the file could not be read on
/// (unreadable, corrupt, truncated); rows before it were delivered.
pub fn for_each_row(
    path: &Path,
    format: Format,
    columns: Columns<'_>,
    on_row: &mut dyn FnMut(Row),
) -> io::Result<()> {
    match format {
        Format::Jsonl => {
            for row in JsonlRows::open(path)? {
                on_row(row?);
            }
            Ok(())
        }
        Format::Json => for_each_array_row(path, on_row),
        Format::Parquet => for_each_parquet_row(path, columns, on_row),
        Format::Csv => for_each_csv_row(path, on_row),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_follow_extensions() {
        let cases = [
            ("a.parquet", Format::Parquet),
            ("a.parquet.zst", Format::Parquet),
            ("a.parquet.gz", Format::Parquet),
            ("a.json", Format::Json),
            ("a.json.zst", Format::Json),
            ("a.json.gz", Format::Json),
            ("a.jsonl", Format::Jsonl),
            ("a.jsonl.zst", Format::Jsonl),
            ("a.ndjson", Format::Jsonl),
            ("a.csv", Format::Csv),
            ("a.csv.gz", Format::Csv),
            ("dir.v2/a.txt", Format::Jsonl),
            ("a.txt", Format::Jsonl),
            ("a", Format::Jsonl),
        ];
        for (name, format) in cases {
            assert_eq!(format_of(None, Path::new(name)), format, "{name}");
        }
        assert_eq!(
            format_of(Some(Format::Json), Path::new("a.jsonl")),
            Format::Json
        );
    }

    #[test]
    fn a_parquet_file_without_its_extension_is_known_by_its_first_bytes() {
        let dir = tempfile::tempdir().expect("tempdir");
        let parquet = dir.path().join("train-00000-of-00001");
        fs_err::write(&parquet, b"PAR1\x15\x04").expect("write");
        assert_eq!(format_of(None, &parquet), Format::Parquet);
        let zstd = dir.path().join("train.bin.zst");
        fs_err::write(
            &zstd,
            zstd::encode_all(&b"PAR1\x15\x04"[..], 3).expect("zstd"),
        )
        .expect("write");
        assert_eq!(format_of(None, &zstd), Format::Parquet);
        let text = dir.path().join("rows.txt");
        fs_err::write(&text, b"{\"a\": 1}\n").expect("write");
        assert_eq!(format_of(None, &text), Format::Jsonl);
        // A configured format is never second-guessed.
        assert_eq!(format_of(Some(Format::Csv), &parquet), Format::Csv);
    }
}
