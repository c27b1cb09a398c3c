//! Streaming row readers: JSON Lines, JSON arrays, Parquet and CSV, each optionally compressed.
//! [`format`](mod@format) is the seam: which format a file is in, and which reader reads it.
//! Files are never loaded whole; a malformed row is a counted [`RowError`], never a crash, and a
//! file that cannot be read on (corrupt Parquet, truncated zstd) is an `io::Error` the caller
//! names the file in.

mod arrow_value;
mod csv;
mod format;
mod json_array;
mod jsonl;
mod open;
mod parquet;
mod projection;

pub(crate) use arrow_value::column_values;
pub use csv::for_each_csv_row;
pub use format::{Columns, FORMATS, Format, for_each_row, format_of};
pub use json_array::{JsonArrayError, MAX_ELEMENT_BYTES, for_each_array_row};
pub use jsonl::JsonlRows;
pub use open::{Compression, Row, RowError, open_decoded};
#[cfg(test)]
pub(crate) use parquet::{DecompressError, TempFileError};
pub use parquet::{
    InvalidUtf8Column, PARQUET_BATCH_SIZE, batch_rows, for_each_parquet_batch,
    for_each_parquet_row, parquet_columns,
};
pub use projection::{Projection, TurnsProjection};
