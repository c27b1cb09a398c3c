//! CSV with a header row: each record becomes an object from the header's names to the record's
//! values, every value a string as written (an empty cell is `""`). Quoting, line breaks inside
//! quotes and a leading byte-order mark are the `csv` crate's. Blank lines are skipped, not
//! counted as rows.
//!
//! A record with more or fewer fields than the header, or with bytes that are not UTF-8, is one
//! bad row, and reading goes on. A header that is not UTF-8 ends the file: no row could be named.
//!
//! CSV has no end marker: a plain file cut short loses its last record to a field count that is
//! not the header's, unless the cut falls inside that record's last field, which then reads
//! short. A compressed file's end is checked by its decompressor.

use std::io;
use std::path::Path;

use serde_json::{Map, Value};

use super::open::{Row, RowError, open_decoded};

/// Streams the records of the CSV file at `path` to `on_row`, numbered from 0 after the header.
pub fn for_each_csv_row(path: &Path, on_row: &mut dyn FnMut(Row)) -> io::Result<()> {
    let mut reader = csv::ReaderBuilder::new()
        .has_headers(true)
        .from_reader(open_decoded(path)?);
    let names: Vec<String> = reader
        .byte_headers()
        .map_err(into_io)?
        .iter()
        .map(|name| {
            String::from_utf8(name.to_vec()).map_err(|e| {
                io::Error::new(
                    io::ErrorKind::InvalidData,
                    format!(
                        "the CSV header is not UTF-8 (byte {} of a column name): save the file as UTF-8",
                        e.utf8_error().valid_up_to()
                    ),
                )
            })
        })
        .collect::<io::Result<_>>()?;
    let mut record = csv::ByteRecord::new();
    for index in 0u64.. {
        let row = match reader.read_byte_record(&mut record) {
            Ok(false) => break,
            Ok(true) => object(&names, &record),
            Err(error) => match error.kind() {
                csv::ErrorKind::UnequalLengths {
                    expected_len, len, ..
                } => Err(RowError::FieldCount {
                    expected: *expected_len,
                    found: *len,
                }),
                _ => return Err(into_io(error)),
            },
        };
        on_row((index, row));
    }
    Ok(())
}

/// One record as an object of `names` to its values.
fn object(names: &[String], record: &csv::ByteRecord) -> Result<Value, RowError> {
    let mut object = Map::with_capacity(names.len());
    for (name, value) in names.iter().zip(record) {
        let text = std::str::from_utf8(value).map_err(|e| RowError::InvalidUtf8Field {
            field: name.clone(),
            at: e.valid_up_to(),
        })?;
        object.insert(name.clone(), Value::String(text.to_owned()));
    }
    Ok(Value::Object(object))
}

/// A CSV error as the `io::Error` readers return: the underlying one when it is I/O (a
/// truncated `.zst`), else the CSV error itself.
fn into_io(error: csv::Error) -> io::Error {
    if !error.is_io_error() {
        return io::Error::new(io::ErrorKind::InvalidData, error);
    }
    match error.into_kind() {
        csv::ErrorKind::Io(error) => error,
        other => io::Error::new(io::ErrorKind::InvalidData, format!("{other:?}")),
    }
}
