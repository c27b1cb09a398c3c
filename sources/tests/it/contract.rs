//! The reader contract: one suite run against every format of [`FORMATS`], plain and
//! compressed, through the one entry point (`format_of` + `for_each_row`). A new format passes
//! it by adding one row to [`cases`]: how to write a file in the format, and the two things
//! formats may legitimately differ in.
//!
//! What every reader promises:
//! - rows come numbered 0, 1, 2, … in file order, each an object of the file's fields;
//! - a malformed row (where the format can hold one) is that row's `RowError`, and the rows
//!   after it keep coming with their own numbers;
//! - invalid UTF-8 is reported as such, never read as text, never a panic;
//! - an empty file gives no row; a file cut inside a row never passes that row, or any after
//!   it, as good; a directory instead of a file is an error;
//! - `.zst` and `.gz` give exactly the rows of the plain file, and a truncated compressed file
//!   is an error, not a shorter file.

use std::io::Write;
use std::path::{Path, PathBuf};

use gen_sources::read::{FORMATS, Format, for_each_row, format_of};
use serde_json::{Value, json};

/// One row to write.
#[derive(Clone)]
enum Item {
    /// A well-formed row `{"id": "rN", "prompt": text}`.
    Good(String),
    /// A row the format's parser rejects (bad JSON, a CSV record with an extra field).
    Malformed,
    /// A well-formed row whose prompt holds bytes that are not UTF-8 (Latin-1 `café`).
    NotUtf8,
}

/// How a format answers a value that is not UTF-8.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Utf8 {
    /// That row is a bad row (`invalid_utf8`); reading goes on.
    BadRow,
    /// The file stops there with an error; the rows before it were delivered. (Parquet's
    /// reader checks whole batches of a string column.)
    StopsFile,
}

/// How a format answers a file of zero bytes.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Empty {
    NoRows,
    /// Not a file of this format at all (no `[`, no Parquet footer).
    Error,
}

struct Case {
    format: Format,
    /// The file's bytes, or `None` when the format cannot hold one of the items.
    write: fn(&[Item]) -> Option<Vec<u8>>,
    invalid_utf8: Utf8,
    empty: Empty,
}

/// The contract's table: one row per format.
fn cases() -> Vec<Case> {
    vec![
        Case {
            format: Format::Jsonl,
            write: write_jsonl,
            invalid_utf8: Utf8::BadRow,
            empty: Empty::NoRows,
        },
        Case {
            format: Format::Json,
            write: write_json_array,
            invalid_utf8: Utf8::BadRow,
            empty: Empty::Error,
        },
        Case {
            format: Format::Parquet,
            write: write_parquet,
            invalid_utf8: Utf8::StopsFile,
            empty: Empty::Error,
        },
        Case {
            format: Format::Csv,
            write: write_csv,
            invalid_utf8: Utf8::BadRow,
            empty: Empty::NoRows,
        },
    ]
}

const LATIN1_CAFE: &[u8] = b"caf\xe9";

/// A row's fields as bytes: `id`, then `prompt`.
fn fields(index: usize, item: &Item) -> Option<(String, Vec<u8>)> {
    let id = format!("r{index}");
    match item {
        Item::Good(text) => Some((id, text.as_bytes().to_vec())),
        Item::NotUtf8 => Some((id, LATIN1_CAFE.to_vec())),
        Item::Malformed => None,
    }
}

/// `bytes` with each `"` written as `quote` (the bytes themselves kept, valid UTF-8 or not).
fn escape_quotes(bytes: &[u8], quote: &[u8]) -> Vec<u8> {
    let mut escaped = Vec::with_capacity(bytes.len());
    for &byte in bytes {
        match byte {
            b'"' => escaped.extend_from_slice(quote),
            _ => escaped.push(byte),
        }
    }
    escaped
}

/// A JSON object with `id` and `prompt`, the prompt's bytes spliced in.
fn json_object(id: &str, prompt: &[u8]) -> Vec<u8> {
    let mut text = format!("{{\"id\": \"{id}\", \"prompt\": \"").into_bytes();
    text.extend(escape_quotes(prompt, b"\\\""));
    text.extend_from_slice(b"\"}");
    text
}

fn json_rows(items: &[Item]) -> Vec<Vec<u8>> {
    items
        .iter()
        .enumerate()
        .map(|(i, item)| match fields(i, item) {
            Some((id, prompt)) => json_object(&id, &prompt),
            // A missing comma: the brackets balance, the object does not parse.
            None => format!("{{\"id\": \"r{i}\" \"prompt\": \"x\"}}").into_bytes(),
        })
        .collect()
}

fn write_jsonl(items: &[Item]) -> Option<Vec<u8>> {
    Some(
        json_rows(items)
            .into_iter()
            .flat_map(|mut row| {
                row.push(b'\n');
                row
            })
            .collect(),
    )
}

fn write_json_array(items: &[Item]) -> Option<Vec<u8>> {
    let mut bytes = b"[\n".to_vec();
    bytes.extend(json_rows(items).join(&b",\n"[..]));
    bytes.extend_from_slice(b"\n]\n");
    Some(bytes)
}

fn write_csv(items: &[Item]) -> Option<Vec<u8>> {
    let mut bytes = b"id,prompt\n".to_vec();
    for (i, item) in items.iter().enumerate() {
        match fields(i, item) {
            Some((id, prompt)) => {
                bytes.extend_from_slice(format!("{id},\"").as_bytes());
                bytes.extend(escape_quotes(&prompt, b"\"\""));
                bytes.extend_from_slice(b"\"\n");
            }
            None => bytes.extend_from_slice(format!("r{i},x,extra\n").as_bytes()),
        }
    }
    Some(bytes)
}

fn write_parquet(items: &[Item]) -> Option<Vec<u8>> {
    let rows: Option<Vec<(String, Vec<u8>)>> = items
        .iter()
        .enumerate()
        .map(|(i, item)| fields(i, item))
        .collect();
    let rows = rows?;
    let ids: Vec<&[u8]> = rows.iter().map(|(id, _)| id.as_bytes()).collect();
    let prompts: Vec<&[u8]> = rows.iter().map(|(_, prompt)| prompt.as_slice()).collect();
    Some(crate::readers::utf8_parquet(
        &[("id", ids.as_slice()), ("prompt", prompts.as_slice())],
        false,
    ))
}

/// What reading gave: each row as its object or its error's reason, and how the file ended.
struct Outcome {
    rows: Vec<(u64, Result<Value, &'static str>)>,
    end: std::io::Result<()>,
}

fn read_rows(path: &Path) -> Outcome {
    let format = format_of(None, path);
    let mut rows = Vec::new();
    let end = for_each_row(path, format, None, &mut |(i, row)| {
        rows.push((i, row.map_err(|e| e.reason())));
    });
    Outcome { rows, end }
}

fn good(index: usize, text: &str) -> (u64, Result<Value, &'static str>) {
    (
        index as u64,
        Ok(json!({"id": format!("r{index}"), "prompt": text})),
    )
}

fn zstd(bytes: &[u8]) -> Vec<u8> {
    zstd::encode_all(bytes, 3).expect("zstd")
}

fn gzip(bytes: &[u8]) -> Vec<u8> {
    let mut encoder = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    encoder.write_all(bytes).expect("gzip");
    encoder.finish().expect("gzip")
}

/// The extension `format_of` knows the format by.
fn extension(format: Format) -> &'static str {
    FORMATS
        .iter()
        .find(|(f, _)| *f == format)
        .map(|(_, extensions)| extensions[0])
        .expect("every format has an extension")
}

/// Runs the contract against one format; returns what it broke.
fn check(case: &Case, dir: &Path) -> Vec<String> {
    let mut broken = Vec::new();
    let name = format!("{:?}", case.format);
    let file = |stem: &str, compression: &str, bytes: &[u8]| -> PathBuf {
        let path = dir.join(format!("{stem}.{}{compression}", extension(case.format)));
        fs_err::write(&path, bytes).expect("write");
        path
    };
    let mut expect = |what: &str, ok: bool, detail: String| {
        if !ok {
            broken.push(format!("{name}: {what}: {detail}"));
        }
    };
    let texts: Vec<String> = (0..50).map(|i| format!("prompt {i}, \"quoted\"")).collect();
    let items: Vec<Item> = texts.iter().cloned().map(Item::Good).collect();
    let plain = (case.write)(&items).expect("every format holds good rows");
    let expected: Vec<_> = texts.iter().enumerate().map(|(i, t)| good(i, t)).collect();

    // Detection: the table's extension, plain and compressed, names the format.
    for compression in ["", ".zst", ".gz"] {
        let path = dir.join(format!("detect.{}{compression}", extension(case.format)));
        expect(
            "detected by extension",
            format_of(None, &path) == case.format,
            format!("{} read as {:?}", path.display(), format_of(None, &path)),
        );
    }

    // Row counts and numbers, plain and through each decompressor.
    for (compression, bytes) in [
        ("", plain.clone()),
        (".zst", zstd(&plain)),
        (".gz", gzip(&plain)),
    ] {
        let read = read_rows(&file("rows", compression, &bytes));
        expect(
            "every row, numbered in file order",
            read.rows == expected && read.end.is_ok(),
            format!(
                "{compression}: {} rows, end {:?}",
                read.rows.len(),
                read.end
            ),
        );
    }

    // A malformed row is that row's error; the next row keeps its number.
    let mixed = [
        Item::Good("a".into()),
        Item::Malformed,
        Item::Good("b".into()),
    ];
    if let Some(bytes) = (case.write)(&mixed) {
        let read = read_rows(&file("malformed", "", &bytes));
        let numbers: Vec<u64> = read.rows.iter().map(|(i, _)| *i).collect();
        expect(
            "a malformed row is a bad row and reading goes on",
            read.end.is_ok()
                && numbers == [0, 1, 2]
                && read.rows[1].1.is_err()
                && read.rows[0] == good(0, "a")
                && read.rows[2] == good(2, "b"),
            format!("{:?}, end {:?}", read.rows, read.end),
        );
    }

    // Invalid UTF-8.
    let latin1 = [
        Item::Good("a".into()),
        Item::NotUtf8,
        Item::Good("b".into()),
    ];
    let bytes = (case.write)(&latin1).expect("every format holds raw bytes");
    let read = read_rows(&file("latin1", "", &bytes));
    let ok = match case.invalid_utf8 {
        Utf8::BadRow => {
            read.end.is_ok() && read.rows == [good(0, "a"), (1, Err("invalid_utf8")), good(2, "b")]
        }
        Utf8::StopsFile => {
            read.end.is_err() && read.rows.iter().all(|(_, row)| row.is_ok()) && read.rows.len() < 2
        }
    };
    expect(
        &format!("invalid UTF-8 ({:?})", case.invalid_utf8),
        ok,
        format!("{:?}, end {:?}", read.rows, read.end),
    );

    // An empty file.
    let read = read_rows(&file("empty", "", b""));
    let ok = read.rows.is_empty()
        && match case.empty {
            Empty::NoRows => read.end.is_ok(),
            Empty::Error => read.end.is_err(),
        };
    expect(
        &format!("empty file ({:?})", case.empty),
        ok,
        format!("{:?}, end {:?}", read.rows, read.end),
    );

    // A file cut inside a row: in the first field of row 25, so that no format can read the
    // rest of that row as whole.
    let marker = b"r25";
    let cut = plain
        .windows(marker.len())
        .position(|w| w == marker)
        .expect("row 25 is in the file")
        + 2;
    let read = read_rows(&file("cut", "", &plain[..cut]));
    let good_rows = read.rows.iter().take_while(|(_, row)| row.is_ok()).count();
    expect(
        "a file cut inside a row never passes it as good",
        good_rows <= 25 && (read.end.is_err() || read.rows.len() > good_rows),
        format!(
            "{good_rows} good rows of {}, end {:?}",
            read.rows.len(),
            read.end
        ),
    );

    // A truncated compressed file is an error, not a shorter file.
    for (compression, bytes) in [(".zst", zstd(&plain)), (".gz", gzip(&plain))] {
        let read = read_rows(&file("truncated", compression, &bytes[..bytes.len() / 2]));
        expect(
            "a truncated compressed file is an error",
            read.end.is_err(),
            format!("{compression}: {} rows, end Ok", read.rows.len()),
        );
    }

    // A directory where the file should be.
    let path = dir.join(format!("a-directory.{}", extension(case.format)));
    fs_err::create_dir(&path).expect("mkdir");
    let read = read_rows(&path);
    expect(
        "a directory is an error",
        read.rows.is_empty() && read.end.is_err(),
        format!("{:?}, end {:?}", read.rows, read.end),
    );
    broken
}

#[test]
fn every_format_keeps_the_reader_contract() {
    let cases = cases();
    let mut broken = Vec::new();
    for (format, _) in FORMATS {
        let Some(case) = cases.iter().find(|c| c.format == format) else {
            broken.push(format!("{format:?}: no row in the contract's table"));
            continue;
        };
        let dir = tempfile::tempdir().expect("tempdir");
        broken.extend(check(case, dir.path()));
    }
    assert!(broken.is_empty(), "{broken:#?}");
}
