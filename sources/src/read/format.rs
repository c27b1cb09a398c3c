//! One entry point over every format: rows of a file, pushed to a callback.

use std::io;
use std::path::Path;

use super::json_array::for_each_array_row;
use super::jsonl::JsonlRows;
use super::open::Row;
use super::parquet::for_each_parquet_row;
use super::projection::Projection;
use crate::spec::Format;

/// What a reader must produce; `None` means everything. Only Parquet can skip columns; text
/// formats parse whole rows anyway.
pub type Columns<'a> = Option<&'a Projection>;

/// The format of `path`: `format` when set, else its extension (`.zst`/`.gz` looked through).
pub fn format_of(format: Option<Format>, path: &Path) -> Format {
    if let Some(format) = format {
        return format;
    }
    let name = path.to_string_lossy();
    let name = name
        .strip_suffix(".zst")
        .or_else(|| name.strip_suffix(".gz"))
        .unwrap_or(&name);
    if name.ends_with(".parquet") {
        Format::Parquet
    } else if name.ends_with(".json") {
        Format::Json
    } else {
        Format::Jsonl
    }
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
            ("a.txt", Format::Jsonl),
        ];
        for (name, format) in cases {
            assert_eq!(format_of(None, Path::new(name)), format, "{name}");
        }
        assert_eq!(
            format_of(Some(Format::Json), Path::new("a.jsonl")),
            Format::Json
        );
    }
}
