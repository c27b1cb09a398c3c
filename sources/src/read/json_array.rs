//! One JSON array of objects per file (ShareGPT's 464 MB `ShareGPT_V4.3_…json`, OpenHermes),
//! streamed element by element: a [`Visitor`] hands each element to the caller as soon as it is
//! parsed, so memory stays at one row however large the array is.
//!
//! A syntax error inside an array cannot be skipped (there is no line to resync on), so it ends
//! the file with an error naming the last good row.

use std::fmt;
use std::io::{self, BufReader};
use std::path::Path;

use serde::de::{DeserializeSeed, Deserializer, SeqAccess, Visitor};
use serde_json::Value;

use super::open::{Row, RowError, open_decoded};

/// The array broke off or is not an array; `rows` elements were read before.
#[derive(Debug, thiserror::Error)]
#[error("invalid JSON array after {rows} rows")]
pub struct JsonArrayError {
    rows: u64,
    #[source]
    source: serde_json::Error,
}

struct Elements<'a> {
    on_row: &'a mut dyn FnMut(Row),
    rows: &'a mut u64,
}

impl<'de> DeserializeSeed<'de> for Elements<'_> {
    type Value = ();

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<(), D::Error> {
        deserializer.deserialize_seq(self)
    }
}

impl<'de> Visitor<'de> for Elements<'_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a JSON array of objects")
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        while let Some(value) = seq.next_element::<Value>()? {
            let parsed = match value {
                value @ Value::Object(_) => Ok(value),
                _ => Err(RowError::NotAnObject),
            };
            (self.on_row)((*self.rows, parsed));
            *self.rows += 1;
        }
        Ok(())
    }
}

/// Streams the elements of the JSON array in `path` (optionally `.zst`/`.gz`) to `on_row`.
pub fn for_each_array_row(path: &Path, on_row: &mut dyn FnMut(Row)) -> io::Result<()> {
    let reader = BufReader::with_capacity(1 << 20, open_decoded(path)?);
    let mut deserializer = serde_json::Deserializer::from_reader(reader);
    let mut rows = 0u64;
    let result = Elements {
        on_row,
        rows: &mut rows,
    }
    .deserialize(&mut deserializer)
    .and_then(|()| deserializer.end());
    result.map_err(|source| {
        // A read error of the underlying (decompressing) stream keeps its own kind.
        if source.is_io() {
            io::Error::from(source)
        } else {
            io::Error::new(io::ErrorKind::InvalidData, JsonArrayError { rows, source })
        }
    })
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
        let (rows, result) = read(b"[]", "a.json");
        result.expect("valid");
        assert!(rows.is_empty());
    }

    #[test]
    fn truncated_array_names_the_last_good_row() {
        let (rows, result) = read(br#"[{"id": "a"}, {"id": "b"}, {"id": "#, "a.json");
        assert_eq!(rows.len(), 2);
        let err = result.expect_err("truncated");
        assert_eq!(err.to_string(), "invalid JSON array after 2 rows");
    }

    #[test]
    fn not_an_array_is_an_error() {
        let (_, result) = read(br#"{"id": "a"}"#, "a.json");
        assert!(result.is_err());
    }

    #[test]
    fn reads_zstd_compressed_arrays() {
        let compressed = zstd::encode_all(&br#"[{"a": 1}, {"a": 2}]"#[..], 3).expect("zstd");
        let (rows, result) = read(&compressed, "a.json.zst");
        result.expect("valid");
        assert_eq!(rows.len(), 2);
    }
}
